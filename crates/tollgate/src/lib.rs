//! tollgate: a reverse proxy and load balancer.
//!
//! # Layout
//! - [`tls`]: TLS inspection (ClientHello parsing for SNI passthrough routing).
#![forbid(unsafe_code)]

pub mod tls;
