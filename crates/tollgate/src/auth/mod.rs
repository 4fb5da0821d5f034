//! Authentication on routes (`auth = { basic | forward | jwt }` on a `[[frontend.route]]`):
//! what each method knows and checks, sans-io where it can be. `proxy::auth` runs a check
//! for a request (the slow parts off the worker thread, within the thread's budget), and
//! `config::auth` builds these from the config.
//!
//! Invariant: a credential never reaches a log or an error message; the request headers an
//! auth method owns (`Authorization` unless passed on, the headers it sets for the server)
//! are stripped from every request of the route, so a client cannot forge them.

pub mod basic;
