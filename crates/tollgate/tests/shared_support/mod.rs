//! Support for the shared limits tests: a real redis-server as a child process.
pub mod redis;
