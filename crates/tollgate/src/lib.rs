#![forbid(unsafe_code)]
pub mod http;
