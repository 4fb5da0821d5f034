//! Authentication on routes (`auth = { basic | forward | jwt }` on a `[[frontend.route]]`):
//! what each method knows and checks, sans-io where it can be. `proxy::auth` runs a check
//! for a request (the slow parts off the worker thread, within the thread's budget), and
//! `config::auth` builds these from the config.
//!
//! - [`basic`]: htpasswd files and `Authorization: Basic`.
//! - [`forward`]: the subrequest to a forward auth server and what its answer decides.
//! - [`jwt`]: bearer tokens (RFC 7519) verified against a JWKS: the sans-io check, the key
//!   set swapped whole, and the `jwks_url` refresher thread.
//!
//! Invariants: a credential never reaches a log or an error message (a refusal names its
//! reason in a fixed word); the request headers an auth method owns (`Authorization` unless
//! passed on, the headers it sets for the server) are stripped from every request of the
//! route, so a client cannot forge them; a request never waits on a key fetch (JWKS are
//! fetched in the background and read lock-free).

pub mod basic;
pub mod forward;
pub mod jwt;

use std::path::PathBuf;
use std::sync::Arc;

/// A route's `auth`, validated.
#[derive(Debug)]
pub struct RouteAuth {
    pub method: Method,
    /// Lowercase names of the request fields this auth owns: never forwarded as the client
    /// sent them (`authorization` unless `pass_authorization`, the fields it sets).
    pub strip: Vec<Box<str>>,
}

#[derive(Debug)]
pub enum Method {
    Basic(BasicAuth),
    Forward(forward::Forward),
    Jwt(JwtAuth),
}

/// `auth.jwt`, validated.
#[derive(Debug)]
pub struct JwtAuth {
    pub policy: jwt::JwtPolicy,
    /// The key set (a `jwks_url`'s kept fresh by the generation's refresher thread).
    pub jwks: Arc<jwt::Jwks>,
    /// The `WWW-Authenticate` value of a 401 (RFC 6750 §3).
    pub challenge: Box<str>,
}

impl RouteAuth {
    /// The key set of a JWT method, for the refresher.
    pub fn jwks(&self) -> Option<&Arc<jwt::Jwks>> {
        match &self.method {
            Method::Jwt(j) => Some(&j.jwks),
            _ => None,
        }
    }
}

/// `auth.basic`, validated.
#[derive(Debug)]
pub struct BasicAuth {
    /// The `WWW-Authenticate` value of a 401.
    pub challenge: Box<str>,
    pub users: Arc<basic::Users>,
    /// The htpasswd file (re-read by every reload).
    pub source: PathBuf,
}
