//! TLS: termination, SNI inspection for passthrough, TLS to servers, kTLS.
//!
//! - [`client_hello`]: sans-io ClientHello parser (SNI, ALPN, versions) and the SNI matcher,
//!   used by passthrough routing to pick a backend without terminating TLS.
//! - [`certs`]: PEM loading, SNI → certificate resolver, rustls server/client configs
//!   (built at config load, shared by every worker).
//! - [`terminate`]: the handshake with its budget, timeout and counters; `accept` is what
//!   TCP and HTTP mode call.
//! - [`passthrough`]: peeking a ClientHello without consuming it and routing on its SNI.
//! - [`backend`]: TLS to a server.
//! - [`ktls`]: the once-per-process kernel TLS probe.
pub mod backend;
pub mod certs;
pub mod client_hello;
pub mod ktls;
pub mod passthrough;
pub mod terminate;
