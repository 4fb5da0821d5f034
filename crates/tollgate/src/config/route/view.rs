//! The request as routes see it: a few borrowed facts that the HTTP/1 path (a head in its
//! buffer), the HTTP/2 path (`http::request::Parts`) and `tollgate explain` each build
//! without allocating, and the lookups conditions make in them.

use std::net::IpAddr;

use super::Scheme;

/// A request's header fields, however they are stored.
pub trait Headers {
    /// Whether `test` holds for the value of some field called `name` (given lowercase;
    /// compared case-insensitively), trying each such field in order.
    fn any_value(&self, name: &str, test: &mut dyn FnMut(&[u8]) -> bool) -> bool;
}

/// What a route may look at. `host` and `sni` are lowercase (host without port); `path`
/// is the target's path and `query` what follows its `?`, both as sent (not decoded).
#[derive(Clone, Copy)]
pub struct RequestView<'a> {
    pub method: &'a [u8],
    pub host: Option<&'a str>,
    pub path: &'a [u8],
    pub query: Option<&'a [u8]>,
    pub scheme: Scheme,
    /// The client's address.
    pub source: IpAddr,
    /// The TLS server name the client's handshake asked for.
    pub sni: Option<&'a str>,
    /// The client's handshake presented a certificate that verified.
    pub client_cert: bool,
    pub headers: &'a dyn Headers,
}

/// No headers at all (TCP mode, tests).
pub struct NoHeaders;

impl Headers for NoHeaders {
    fn any_value(&self, _: &str, _: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        false
    }
}

impl<'a> RequestView<'a> {
    /// Splits an origin-form target (`/p?q`) into path and query.
    pub fn split_target(target: &'a [u8]) -> (&'a [u8], Option<&'a [u8]>) {
        match target.iter().position(|&b| b == b'?') {
            Some(i) => (target.get(..i).unwrap_or_default(), target.get(i + 1..)),
            None => (target, None),
        }
    }
}

/// Whether the query string has `name` (with `value`, if given). Pairs are split on `&`,
/// each at its first `=`; names and values compared as sent.
pub(super) fn query_has(query: Option<&[u8]>, name: &[u8], value: Option<&[u8]>) -> bool {
    let Some(query) = query else { return false };
    query.split(|&b| b == b'&').any(|pair| {
        let (n, v) = match pair.iter().position(|&b| b == b'=') {
            Some(i) => (pair.get(..i).unwrap_or_default(), pair.get(i + 1..)),
            None => (pair, None),
        };
        n == name && value.is_none_or(|want| v == Some(want))
    })
}

/// Whether a Cookie field carries cookie `name` (with `value`, if given).
pub(super) fn cookie_has(headers: &dyn Headers, name: &[u8], value: Option<&[u8]>) -> bool {
    headers.any_value("cookie", &mut |field| match value {
        None => crate::http::cookie::contains(field, name),
        Some(want) => crate::http::cookie::find(field, name) == Some(want),
    })
}
