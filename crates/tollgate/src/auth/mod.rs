//! Authenticating a request before it is routed to a server (`auth = { … }` on an http-mode
//! frontend or route).
//!
//! - [`jwt`]: bearer tokens (RFC 7519) verified against a JWKS: the sans-io check, the key
//!   set swapped whole, and the `jwks_url` refresher thread.
//!
//! Invariants: a request never waits on anything but its own bytes (keys are fetched in the
//! background and read lock-free), and a refusal names its reason in a fixed word, never the
//! credential itself.

pub mod jwt;
