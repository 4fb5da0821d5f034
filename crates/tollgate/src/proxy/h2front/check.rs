//! The HTTP/2 request rules tollgate enforces itself (issue 13, item 4), sans-io, on the head
//! h2 decoded: what h2 already refuses is checked again (a codec upgrade must not quietly
//! loosen them), plus what only a proxy to HTTP/1 cares about.
//!
//! Owns: [`request`] → [`Checked`] or a [`Refusal`]. Invariant: a request that passes can be
//! written as an unambiguous HTTP/1.1 request: origin-form target (or `*` for OPTIONS), one
//! authority, no byte that could end a line or a field (CR, LF, NUL) anywhere, no field that
//! would change HTTP/1 framing or connection handling.

use http::request::Parts;
use http::{HeaderMap, Method};

use crate::http::h1::headers::parse_decimal;

/// Why a request was refused (answered with 400, never forwarded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal(pub &'static str);

/// What the checks learned that forwarding needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checked {
    /// From `content-length`, when the request has one.
    pub content_length: Option<u64>,
}

/// Judges a request head; `end_stream`: the HEADERS frame ended the stream (no body).
pub(crate) fn request(parts: &Parts, end_stream: bool) -> Result<Checked, Refusal> {
    if parts.method == Method::CONNECT {
        return Err(Refusal("CONNECT is not proxied"));
    }
    if !bytes_ok(parts.method.as_str().as_bytes()) {
        return Err(Refusal("bad method"));
    }
    match parts.uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(Refusal(":scheme missing or not http/https")),
    }
    path(parts)?;
    authority(parts)?;
    let content_length = fields(&parts.headers)?;
    if end_stream && content_length.is_some_and(|n| n > 0) {
        return Err(Refusal("content-length without DATA"));
    }
    Ok(Checked { content_length })
}

/// `:path` in origin form (`*` only for OPTIONS), with only the bytes an HTTP/1 target allows.
fn path(parts: &Parts) -> Result<(), Refusal> {
    let Some(pq) = parts.uri.path_and_query() else {
        return Err(Refusal(":path missing"));
    };
    let p = pq.as_str().as_bytes();
    let origin_form = p.first() == Some(&b'/');
    let asterisk = p == b"*" && parts.method == Method::OPTIONS;
    if !(origin_form || asterisk) {
        return Err(Refusal(":path not in origin form"));
    }
    if !p.iter().all(|&b| target_byte(b)) {
        return Err(Refusal("byte not allowed in :path"));
    }
    Ok(())
}

/// RFC 3986 characters and `%` (as the HTTP/1 parser): no SP, CTL, `"<>\^`{|}`, `#`, non-ASCII.
fn target_byte(b: u8) -> bool {
    b.is_ascii_graphic() && !matches!(b, b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}' | b'#')
}

/// One authority: `:authority` or `host` (equal when both), no userinfo, not empty.
fn authority(parts: &Parts) -> Result<(), Refusal> {
    let mut hosts = parts.headers.get_all(http::header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(Refusal("several host fields"));
    }
    let pseudo = parts.uri.authority().map(|a| a.as_str().as_bytes());
    let chosen = match (pseudo, host.map(|h| h.as_bytes())) {
        (Some(a), Some(h)) if !a.eq_ignore_ascii_case(h) => {
            return Err(Refusal("host disagrees with :authority"));
        }
        (Some(a), _) => a,
        (None, Some(h)) => h,
        (None, None) => return Err(Refusal("no :authority and no host")),
    };
    if chosen.is_empty() || chosen.contains(&b'@') || !chosen.iter().all(|&b| target_byte(b)) {
        return Err(Refusal("bad authority"));
    }
    Ok(())
}

/// Every regular field: a lowercase token name, a value with no CR/LF/NUL and no edge
/// whitespace (RFC 9113 8.2.1), none of the connection-specific fields (8.2.2), at most one
/// `content-length` value. Returns that value.
fn fields(headers: &HeaderMap) -> Result<Option<u64>, Refusal> {
    let mut content_length = None;
    for (name, value) in headers {
        let n = name.as_str().as_bytes();
        // (Folded rather than searched: the compiler vectorises it.)
        let uppercase = n.iter().fold(0u8, |acc, b| acc | u8::from(b.is_ascii_uppercase()));
        if uppercase != 0 || !crate::http::h1::headers::is_token(n) {
            return Err(Refusal("bad field name"));
        }
        let v = value.as_bytes();
        if !bytes_ok(v) {
            return Err(Refusal("CR, LF or NUL in a field value"));
        }
        if v.first().is_some_and(|b| *b == b' ' || *b == b'\t') || v.last().is_some_and(|b| *b == b' ' || *b == b'\t') {
            return Err(Refusal("whitespace around a field value"));
        }
        match n {
            b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade" => {
                return Err(Refusal("connection-specific field"));
            }
            b"te" if v != b"trailers" => return Err(Refusal("te other than trailers")),
            b"content-length" => {
                let Some(len) = parse_decimal(v) else {
                    return Err(Refusal("bad content-length"));
                };
                if content_length.is_some_and(|seen| seen != len) {
                    return Err(Refusal("content-length values disagree"));
                }
                content_length = Some(len);
            }
            _ => {}
        }
    }
    Ok(content_length)
}

/// No byte that ends a line or a field in HTTP/1: CR, LF, NUL. (Every byte folded, which
/// the compiler vectorises, rather than searched one at a time: these bytes are rare.)
pub(crate) fn bytes_ok(b: &[u8]) -> bool {
    let bad = b
        .iter()
        .fold(0u8, |acc, &c| acc | u8::from(c == b'\r' || c == b'\n' || c == 0));
    bad == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder().method(method).uri(uri);
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_plain_request_passes() {
        let p = parts("GET", "https://example.com/a?b=c", &[("accept", "*/*")]);
        assert_eq!(request(&p, true), Ok(Checked { content_length: None }));
        let p = parts("POST", "http://h/x", &[("content-length", "5"), ("host", "H")]);
        assert_eq!(
            request(&p, false),
            Ok(Checked {
                content_length: Some(5)
            })
        );
        let p = parts("OPTIONS", "http://h/", &[]);
        assert!(request(&p, true).is_ok());
    }

    #[test]
    fn refusals() {
        type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], bool);
        let cases: &[Case] = &[
            ("CONNECT", "h:443", &[], true),
            ("GET", "/nohost", &[], true),
            ("GET", "ftp://h/", &[], true),
            ("GET", "http://h/", &[("host", "other")], true),
            ("GET", "http://h/", &[("connection", "close")], true),
            ("GET", "http://h/", &[("te", "gzip")], true),
            ("GET", "http://h/", &[("transfer-encoding", "chunked")], true),
            ("GET", "http://h/", &[("content-length", "x")], true),
            (
                "POST",
                "http://h/",
                &[("content-length", "1"), ("content-length", "2")],
                false,
            ),
            ("POST", "http://h/", &[("content-length", "3")], true),
            ("GET", "http://u@h/", &[], true),
            ("GET", "http://h/", &[("x", " padded")], true),
        ];
        for (m, u, h, end) in cases {
            assert!(request(&parts(m, u, h), *end).is_err(), "{m} {u} {h:?}");
        }
    }
}
