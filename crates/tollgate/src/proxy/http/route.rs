//! Choosing what answers a request: the frontend's routes in order (host, path prefix,
//! header), else its default backend.

use crate::config::model::{Frontend, Overrides, Route, RouteAction};
use crate::http::h1::{MessageHead, RequestHead, TargetForm};

pub(crate) enum Decision<'a> {
    /// To this backend, under the route's limits (`Overrides::NONE` for the default backend).
    Backend(usize, &'a Overrides),
    Return {
        status: u16,
        body: &'a str,
        content_type: &'a str,
    },
    NoRoute,
}

pub(super) fn decide<'a>(fe: &'a Frontend, head: &RequestHead, buf: &[u8]) -> Decision<'a> {
    let chosen = if fe.routes.is_empty() {
        None
    } else {
        let mut host_buf = [0u8; 256];
        let host = request_host(head, buf, &mut host_buf);
        let path = request_path(head, buf);
        fe.routes
            .iter()
            .find(|r| first_miss(r, host, path, |name| head.header(buf, name.as_bytes())).is_none())
    };
    action(fe, chosen)
}

/// `decide` for a head that is not HTTP/1 bytes in a buffer (an HTTP/2 request): `host`
/// lowercase without port (`normalize_host`), `header` a field's first value by name.
pub(crate) fn decide_neutral<'a, 'h>(
    fe: &'a Frontend,
    host: Option<&str>,
    path: &[u8],
    header: impl Fn(&str) -> Option<&'h [u8]>,
) -> Decision<'a> {
    let chosen = fe.routes.iter().find(|r| first_miss(r, host, path, &header).is_none());
    action(fe, chosen)
}

#[inline]
fn action<'a>(fe: &'a Frontend, chosen: Option<&'a Route>) -> Decision<'a> {
    match chosen.map(|r| (&r.action, &r.overrides)) {
        Some((RouteAction::Backend(b), overrides)) => Decision::Backend(*b, overrides),
        Some((
            RouteAction::Return {
                status,
                body,
                content_type,
            },
            _,
        )) => Decision::Return {
            status: *status,
            body,
            content_type,
        },
        None => fe
            .default_backend
            .map_or(Decision::NoRoute, |b| Decision::Backend(b, &Overrides::NONE)),
    }
}

/// The first condition of route `r` the request does not meet, in the order they are
/// checked (host, path prefix, header); `None` = the route matches. `header` returns a
/// request header's first value by (case-insensitive) name. `tollgate explain` calls this
/// too, so what it reports is what the proxy decides.
#[inline]
pub(crate) fn first_miss<'h>(
    r: &Route,
    host: Option<&str>,
    path: &[u8],
    header: impl Fn(&str) -> Option<&'h [u8]>,
) -> Option<Miss> {
    let host_ok = r.host.as_ref().is_none_or(|p| host.is_some_and(|h| p.matches(h)));
    let path_ok = || r.path_prefix.as_ref().is_none_or(|p| path.starts_with(p.as_bytes()));
    let header_ok = || {
        r.header
            .as_ref()
            .is_none_or(|(name, value)| header(name).is_some_and(|v| v == value.as_bytes()))
    };
    if !host_ok {
        return Some(Miss::Host);
    }
    if !path_ok() {
        return Some(Miss::PathPrefix);
    }
    if !header_ok() {
        return Some(Miss::Header);
    }
    None
}

/// Which condition of a route a request missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    Host,
    PathPrefix,
    Header,
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

/// An authority as routes match it: lowercase, without port.
pub(crate) fn normalize_host<'b>(raw: &[u8], out: &'b mut [u8; 256]) -> Option<&'b str> {
    let without_port = match raw.iter().rposition(|&b| b == b':') {
        Some(i) if !raw.starts_with(b"[") || raw.get(i.saturating_sub(1)) == Some(&b']') => raw.get(..i)?,
        _ => raw,
    };
    let dst = out.get_mut(..without_port.len())?;
    for (d, s) in dst.iter_mut().zip(without_port) {
        *d = s.to_ascii_lowercase();
    }
    std::str::from_utf8(dst).ok()
}

fn authority_of(target: &[u8]) -> &[u8] {
    let rest = target
        .iter()
        .position(|&b| b == b':')
        .and_then(|i| target.get(i + 3..))
        .unwrap_or_default();
    let end = rest.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(rest.len());
    rest.get(..end).unwrap_or_default()
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
