//! TLS: termination, SNI inspection for passthrough, TLS to servers, kTLS.
//!
//! - [`client_hello`]: sans-io ClientHello parser (SNI, ALPN, versions), used by passthrough
//!   routing to pick a backend without terminating TLS.
//! - `terminate`: the handshake with its budget, timeout and counters; `accept` is what
//!   TCP and HTTP mode call.
//! - `passthrough`: peeking a ClientHello without consuming it and routing on its SNI (and
//!   waiting for a whole one before a terminated handshake takes its slot).
//! - `backend`: TLS to a server.
//! - `client_cert`: a verified client certificate's subject and fingerprint, for servers.
//! - [`ktls`]: the once-per-process kernel TLS probe and the handover to kernel TLS.
//! - `refresh`: the thread that watches certificate files and fetches OCSP responses,
//!   swapping what it finds into the frontends' certificate stores.
//!
//! Certificates, the SNI matcher and the rustls configs are built at config load
//! (`config::tls`, `config::sni`) and shared by every worker; each TLS frontend's
//! certificates live in its `config::cert_store::CertStore`, which run-time changes swap.
pub(crate) mod backend;
pub(crate) mod client_cert;
pub mod client_hello;
pub mod ktls;
pub(crate) mod passthrough;
pub(crate) mod refresh;
pub(crate) mod terminate;
