//! TLS: what the proxy needs to know about TLS traffic.
//!
//! - [`client_hello`]: sans-io ClientHello parser (SNI, ALPN, versions) and the SNI matcher,
//!   used by passthrough routing to pick a backend without terminating TLS.
pub mod client_hello;
