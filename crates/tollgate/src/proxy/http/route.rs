//! Choosing what answers a request: the first of the frontend's routes whose conditions
//! hold (`config::route::RouteTable`, compiled at load), else its default backend. This
//! file builds the request view routes look at from an HTTP/1 head or an HTTP/2 request,
//! on the stack, then maps the matched route through `action`.
//!
//! Routes see the path and host normalised (`http::normalize`: dot segments, duplicate
//! slashes, encoded unreserved bytes; the host's case, port and trailing dot), whatever the
//! frontend forwards (`forward_target`), so that `//admin` or `admin.example.` cannot slip
//! past a rule written for `/admin` and `admin.example`. A path already normal is borrowed.

use std::net::IpAddr;

use crate::config::model::{Answer, Frontend, Overrides, Redirect, Route, RouteAction};
use crate::config::route::{Headers, RequestView, Scheme};
use crate::http::compress::Policy;
use crate::http::h1::{MessageHead, RequestHead, TargetForm};
use crate::http::normalize;
use crate::http::rewrite::Rewrite;

/// What answers a request: a backend (with the route's rewrites, if any), or the proxy.
pub(crate) enum Decision<'a> {
    /// To this backend, with the route's rewrites and under its limits (`Overrides::NONE`
    /// for the default backend).
    Backend(usize, Option<&'a Rewrite>, &'a Overrides),
    /// `return` and `deny` routes.
    Return(&'a Answer),
    Redirect(&'a Redirect),
    NoRoute,
}

/// What the connection, not the request, tells routes.
#[derive(Clone, Copy)]
pub(crate) struct ConnFacts<'c> {
    pub scheme: Scheme,
    pub source: IpAddr,
    /// The TLS handshake's server name, as the client sent it.
    pub sni: Option<&'c str>,
    /// The handshake presented a client certificate that verified.
    pub client_cert: bool,
}

struct H1Headers<'h> {
    head: &'h RequestHead,
    buf: &'h [u8],
}

impl Headers for H1Headers<'_> {
    fn any_value(&self, name: &str, test: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        self.head
            .headers(self.buf)
            .any(|(n, v)| n.eq_ignore_ascii_case(name.as_bytes()) && test(v))
    }
}

struct H2Headers<'h>(&'h http::HeaderMap);

impl Headers for H2Headers<'_> {
    fn any_value(&self, name: &str, test: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        self.0.get_all(name).iter().any(|v| test(v.as_bytes()))
    }
}

/// The route for an HTTP/1 request whose head is in `buf`.
pub(super) fn decide<'a>(fe: &'a Frontend, head: &RequestHead, buf: &[u8], conn: &ConnFacts<'_>) -> Routed<'a> {
    if fe.routes.is_empty() {
        return routed(fe, None);
    }
    let mut host_buf = [0u8; 256];
    let mut sni_buf = [0u8; 256];
    let (path, query) = RequestView::split_target(request_path(head, buf));
    let path = normalize::path(path);
    let headers = H1Headers { head, buf };
    let view = RequestView {
        method: head.method_span.of(buf),
        host: request_host(head, buf, &mut host_buf),
        path: &path,
        query,
        scheme: conn.scheme,
        source: conn.source,
        sni: conn.sni.and_then(|s| normalize_host(s.as_bytes(), &mut sni_buf)),
        client_cert: conn.client_cert,
        headers: &headers,
    };
    routed(fe, fe.routes.first_match(&view))
}

/// The route for an HTTP/2 request (host from `:authority`, else `host`; path and query
/// from `:path`), as `decide`.
pub(crate) fn decide_h2<'a>(fe: &'a Frontend, parts: &http::request::Parts, conn: &ConnFacts<'_>) -> Routed<'a> {
    if fe.routes.is_empty() {
        return routed(fe, None);
    }
    let raw = match parts.uri.authority() {
        Some(a) => a.as_str().as_bytes(),
        None => parts.headers.get(http::header::HOST).map_or(&b""[..], |h| h.as_bytes()),
    };
    let mut host_buf = [0u8; 256];
    let mut sni_buf = [0u8; 256];
    let headers = H2Headers(&parts.headers);
    let path = normalize::path(parts.uri.path().as_bytes());
    let view = RequestView {
        method: parts.method.as_str().as_bytes(),
        host: normalize_host(raw, &mut host_buf),
        path: &path,
        query: parts.uri.query().map(str::as_bytes),
        scheme: conn.scheme,
        source: conn.source,
        sni: conn.sni.and_then(|s| normalize_host(s.as_bytes(), &mut sni_buf)),
        client_cert: conn.client_cert,
        headers: &headers,
    };
    routed(fe, fe.routes.first_match(&view))
}

/// What a request's route decided, the frontend's limits that count it (bit i:
/// `fe.limits[i]`), and which route it was (its index; `None`: none matched).
pub(crate) struct Routed<'a> {
    pub decision: Decision<'a>,
    pub counted_by: u8,
    pub route: Option<u16>,
    /// The response compression it runs under: the route's `compress`, else the
    /// frontend's; none when that offers no coding.
    pub compress: Option<&'a Policy>,
    /// The route's `auth` (none without a route: the default backend has none).
    pub auth: Option<&'a crate::auth::RouteAuth>,
}

fn routed(fe: &Frontend, matched: Option<usize>) -> Routed<'_> {
    let route = matched.and_then(|i| fe.routes.get(i));
    Routed {
        decision: action(fe, route),
        counted_by: fe.unrouted_limits | route.map_or(0, |r| r.limits),
        route: matched.and_then(|i| u16::try_from(i).ok()),
        compress: route
            .and_then(|r| r.compress.as_deref())
            .or(fe.compress.as_deref())
            .filter(|p| !p.codings.is_empty()),
        auth: route.and_then(|r| r.auth.as_deref()),
    }
}

#[inline]
fn action<'a>(fe: &'a Frontend, chosen: Option<&'a Route>) -> Decision<'a> {
    match chosen.map(|r| (&r.action, &r.overrides)) {
        Some((RouteAction::Backend(b, rewrite), overrides)) => Decision::Backend(*b, rewrite.as_deref(), overrides),
        Some((RouteAction::Return(answer), _)) => Decision::Return(answer),
        Some((RouteAction::Redirect(redirect), _)) => Decision::Redirect(redirect),
        // TCP only (validation): never on an HTTP frontend.
        Some((RouteAction::Close, _)) => Decision::NoRoute,
        None => fe
            .default_backend
            .map_or(Decision::NoRoute, |b| Decision::Backend(b, None, &Overrides::NONE)),
    }
}

/// The host the request is for, lowercase, without port: the absolute-form target's
/// authority wins over Host (RFC 9112 3.2.2).
fn request_host<'b>(head: &RequestHead, buf: &[u8], out: &'b mut [u8; 256]) -> Option<&'b str> {
    let raw = match head.target_form {
        TargetForm::Absolute => authority_of(head.target.of(buf)),
        _ => head.host.map(|h| h.of(buf))?,
    };
    normalize_host(raw, out)
}

/// An authority (or a server name) as routes match it: lowercase, without port, one
/// trailing dot dropped.
pub(crate) fn normalize_host<'b>(raw: &[u8], out: &'b mut [u8; 256]) -> Option<&'b str> {
    normalize::host(raw, out)
}

pub(super) fn authority_of(target: &[u8]) -> &[u8] {
    let rest = target
        .iter()
        .position(|&b| b == b':')
        .and_then(|i| target.get(i + 3..))
        .unwrap_or_default();
    let end = rest.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(rest.len());
    rest.get(..end).unwrap_or_default()
}

/// The request's path without its query, as sent.
pub(super) fn request_path_only<'b>(head: &RequestHead, buf: &'b [u8]) -> &'b [u8] {
    RequestView::split_target(request_path(head, buf)).0
}

pub(super) fn request_path<'b>(head: &RequestHead, buf: &'b [u8]) -> &'b [u8] {
    let target = head.target.of(buf);
    if head.target_form != TargetForm::Absolute {
        return target;
    }
    // scheme "://" authority path: the path starts at the first '/' after "://".
    let after_scheme = target.windows(3).position(|w| w == b"://").map_or(0, |i| i + 3);
    let rest = target.get(after_scheme..).unwrap_or_default();
    match rest.iter().position(|&b| b == b'/' || b == b'?') {
        Some(i) => rest.get(i..).unwrap_or(b"/"),
        None => b"/",
    }
}
