//! HTTP protocol codecs, sans-io: they see bytes and return decisions, never touch a socket.
//!
//! - [`h1`]: HTTP/1.1 head parsing, body framing (validate and delimit, never de-chunk) and head
//!   rewriting for forwarding.

pub mod h1;
