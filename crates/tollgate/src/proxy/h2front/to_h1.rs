//! Between the neutral head (`http::request::Parts`, `http::response::Parts`,
//! `http::HeaderMap` for trailers) and HTTP/1.1 bytes, sans-io.
//!
//! Owns: [`write_request_head`] (a checked h2 request as a strict HTTP/1.1 head, forwarding
//! fields added as the h1 path adds them), [`chunk_head`]/[`write_last_chunk`] (request body
//! framing when no length is known), [`response_head`] (an h1 response head as h2 fields) and
//! [`Dechunk`] (a chunked h1 body, already validated by `BodyTracker`, as its data and its
//! trailer section). Invariant: nothing is written that contains CR, LF or NUL outside the
//! framing itself; a field that would carry one makes the whole head refused.

use std::io::Write;
use std::net::IpAddr;

use http::HeaderMap;
use http::request::Parts;

use super::check::{Refusal, bytes_ok};
use crate::config::model::Forwarded;
use crate::http::h1::{HeaderEntry, HeaderKind, MessageHead, Proto, ResponseHead};

/// How the request body goes to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyOut {
    None,
    Length(u64),
    Chunked,
}

/// What the h1 path's `HeadEdits` would add or remove for this client.
pub(crate) struct Forwarding<'a> {
    pub mode: Forwarded,
    pub ip: IpAddr,
    pub proto: Proto,
    /// A sticky backend's cookie: the proxy's own, never forwarded to a server.
    pub sticky: Option<&'a [u8]>,
}

/// Writes `parts` as an HTTP/1.1 request head into `out` (cleared first).
pub(crate) fn write_request_head(
    parts: &Parts,
    body: BodyOut,
    fwd: &Forwarding,
    out: &mut Vec<u8>,
) -> Result<(), Refusal> {
    out.clear();
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let authority = match parts.uri.authority() {
        Some(a) => a.as_str().as_bytes(),
        None => parts.headers.get(http::header::HOST).map_or(&b""[..], |h| h.as_bytes()),
    };
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(authority);
    out.extend_from_slice(b"\r\n");
    let mut cookies = false;
    for (name, value) in &parts.headers {
        match HeaderKind::of(name.as_str().as_bytes()) {
            // Written from :authority above; framing and forwarding fields below; `expect`
            // answered by the proxy itself (the body follows the head without waiting).
            HeaderKind::Host | HeaderKind::ContentLength | HeaderKind::TransferEncoding | HeaderKind::Expect => {
                continue;
            }
            HeaderKind::XForwardedFor | HeaderKind::XForwardedProto if fwd.mode == Forwarded::XForwardedFor => continue,
            HeaderKind::Forwarded if fwd.mode == Forwarded::Forwarded => continue,
            kind if kind.is_hop_by_hop() => continue,
            _ => {}
        }
        if name == http::header::COOKIE {
            cookies = true;
            continue;
        }
        push_field(name.as_str().as_bytes(), value.as_bytes(), out);
    }
    if cookies {
        join_cookies(parts, fwd.sticky, out);
    }
    forwarding(&parts.headers, fwd, out);
    match body {
        BodyOut::None => {}
        BodyOut::Length(n) => {
            let _ = write!(out, "content-length: {n}\r\n");
        }
        BodyOut::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    out.extend_from_slice(b"\r\n");
    // Checked already (`check::request`); this is the last line of defense, over every byte
    // that went out except the CRLFs this function wrote.
    if !only_line_ends(out) {
        out.clear();
        return Err(Refusal("CR, LF or NUL in the request head"));
    }
    Ok(())
}

/// Whether `head` has no NUL and no CR but those before an LF (LF itself splits lines):
/// every line, its CR end taken off, free of CR, LF and NUL (`bytes_ok`). One pass that
/// the compiler vectorises (a per-line scan cost a few hundred instructions per request).
fn only_line_ends(head: &[u8]) -> bool {
    let Some(&last) = head.last() else {
        return true;
    };
    let next = head.get(1..).unwrap_or_default();
    let bad = head.iter().zip(next).fold(0u8, |acc, (&b, &after)| {
        acc | u8::from(b == 0) | (u8::from(b == b'\r') & u8::from(after != b'\n'))
    });
    bad == 0 && last != 0
}

/// RFC 9113 8.2.3: an h2 client may split `cookie`; HTTP/1 wants one field. The sticky
/// cookie is left out (a field left empty is dropped), as the h1 path does.
fn join_cookies(parts: &Parts, sticky: Option<&[u8]>, out: &mut Vec<u8>) {
    use crate::http::cookie;
    let start = out.len();
    out.extend_from_slice(b"cookie: ");
    let values_start = out.len();
    for v in parts.headers.get_all(http::header::COOKIE) {
        let v = v.as_bytes();
        let mark = out.len();
        if mark > values_start {
            out.extend_from_slice(b"; ");
        }
        let kept = match sticky {
            Some(name) if cookie::contains(v, name) => cookie::push_without(v, name, out),
            _ => {
                out.extend_from_slice(v);
                true
            }
        };
        if !kept {
            out.truncate(mark);
        }
    }
    if out.len() == values_start {
        out.truncate(start);
    } else {
        out.extend_from_slice(b"\r\n");
    }
}

fn forwarding(headers: &HeaderMap, fwd: &Forwarding, out: &mut Vec<u8>) {
    match fwd.mode {
        Forwarded::XForwardedFor => {
            out.extend_from_slice(b"x-forwarded-for: ");
            push_existing(headers, "x-forwarded-for", out);
            let _ = write!(out, "{}\r\nx-forwarded-proto: {}\r\n", fwd.ip, fwd.proto.as_str());
        }
        Forwarded::Forwarded => {
            out.extend_from_slice(b"forwarded: ");
            push_existing(headers, "forwarded", out);
            let _ = match fwd.ip {
                IpAddr::V4(ip) => write!(out, "for={ip}"),
                IpAddr::V6(ip) => write!(out, "for=\"[{ip}]\""),
            };
            let _ = write!(out, ";proto={}\r\n", fwd.proto.as_str());
        }
        Forwarded::None => {}
    }
}

fn push_existing(headers: &HeaderMap, name: &str, out: &mut Vec<u8>) {
    for v in headers.get_all(name) {
        if !v.is_empty() {
            out.extend_from_slice(v.as_bytes());
            out.extend_from_slice(b", ");
        }
    }
}

fn push_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The size line of one chunk of `len` bytes (`len` > 0).
pub(crate) fn chunk_head(len: usize, out: &mut Vec<u8>) {
    out.clear();
    let _ = write!(out, "{len:x}\r\n");
}

/// The last chunk and the trailer section (fields that could change framing or routing
/// dropped, as HTTP/1 forbids them in trailers).
pub(crate) fn write_last_chunk(trailers: Option<&HeaderMap>, out: &mut Vec<u8>) -> Result<(), Refusal> {
    out.clear();
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.into_iter().flatten() {
        let n = name.as_str().as_bytes();
        if !matches!(HeaderKind::of(n), HeaderKind::Other) {
            continue;
        }
        if !bytes_ok(value.as_bytes()) {
            return Err(Refusal("CR, LF or NUL in a trailer"));
        }
        push_field(n, value.as_bytes(), out);
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// An h1 response head as h2 response fields: hop-by-hop and framing fields dropped
/// (RFC 9113 8.2.2), names lowercased; a `Set-Cookie` setting the `sticky` cookie dropped
/// (the proxy sets its own).
pub(crate) fn response_head(head: &ResponseHead, buf: &[u8], sticky: Option<&[u8]>) -> http::Response<()> {
    let mut resp = http::Response::new(());
    *resp.status_mut() = http::StatusCode::from_u16(head.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    // The values share one copy of the head (two allocations, not one per value).
    let shared = bytes::Bytes::copy_from_slice(buf.get(..head.head_len).unwrap_or(buf));
    let fields = resp.headers_mut();
    fields.reserve(head.entries().len());
    for e in forwarded_entries(head, buf, sticky) {
        let value = match shared.get(e.value.start..e.value.end) {
            Some(_) => http::HeaderValue::from_maybe_shared(shared.slice(e.value.start..e.value.end)),
            None => http::HeaderValue::from_bytes(e.value.of(buf)),
        };
        let name = e.name.of(buf);
        let name = common_response_name(name).map_or_else(|| http::HeaderName::from_bytes(name), Ok);
        let (Ok(name), Ok(value)) = (name, value) else {
            continue;
        };
        fields.append(name, value);
    }
    resp
}

/// The fields of [`response_head`] as (name, value) bytes of `buf`, for a head sent as it
/// is (no rewrite, no field added): the codec lowercases and encodes them straight from
/// the server's bytes (the h1 codec has checked them: token names, clean values).
pub(crate) fn response_fields<'a>(
    head: &'a ResponseHead,
    buf: &'a [u8],
    sticky: Option<&'a [u8]>,
) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
    forwarded_entries(head, buf, sticky).map(move |e| (e.name.of(buf), e.value.of(buf)))
}

fn forwarded_entries<'a>(
    head: &'a ResponseHead,
    buf: &'a [u8],
    sticky: Option<&'a [u8]>,
) -> impl Iterator<Item = &'a HeaderEntry> + 'a {
    head.entries().iter().filter(move |e| {
        let proxy_cookie = sticky.is_some_and(|name| {
            e.name.of(buf).eq_ignore_ascii_case(b"set-cookie") && crate::http::cookie::sets(e.value.of(buf), name)
        });
        !skip_in_h2(e) && !proxy_cookie
    })
}

/// The `http` constant for a field name servers send on most responses, as they spell it
/// (lowercase or capitalised), found by comparing bytes; `None` for any other name or
/// spelling, which `HeaderName::from_bytes` then parses (a lowercasing copy and lookup).
fn common_response_name(name: &[u8]) -> Option<http::HeaderName> {
    use http::header;
    let (capitalised, known): (&[u8], _) = match (name.len(), name.first()?.to_ascii_lowercase()) {
        (4, b'd') => (b"Date", header::DATE),
        (4, b'e') => (b"ETag", header::ETAG),
        (4, b'v') => (b"Vary", header::VARY),
        (6, b's') => (b"Server", header::SERVER),
        (7, b'e') => (b"Expires", header::EXPIRES),
        (8, b'l') => (b"Location", header::LOCATION),
        (10, b's') => (b"Set-Cookie", header::SET_COOKIE),
        (12, b'c') => (b"Content-Type", header::CONTENT_TYPE),
        (13, b'c') => (b"Cache-Control", header::CACHE_CONTROL),
        (13, b'l') => (b"Last-Modified", header::LAST_MODIFIED),
        (13, b'a') => (b"Accept-Ranges", header::ACCEPT_RANGES),
        (14, b'c') => (b"Content-Length", header::CONTENT_LENGTH),
        (16, b'c') => (b"Content-Encoding", header::CONTENT_ENCODING),
        _ => return None,
    };
    (name == capitalised || name == known.as_str().as_bytes()).then_some(known)
}

/// Adds complete header lines (`Name: value\r\n`...), as the sticky table makes them.
pub(crate) fn append_lines(resp: &mut http::Response<()>, lines: &[u8]) {
    for line in lines.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (
            line.get(..colon).unwrap_or_default(),
            line.get(colon + 1..).unwrap_or_default(),
        );
        let value = crate::http::h1::headers::trim_ows(value);
        if let (Ok(n), Ok(v)) = (http::HeaderName::from_bytes(name), http::HeaderValue::from_bytes(value)) {
            resp.headers_mut().append(n, v);
        }
    }
}

fn skip_in_h2(e: &HeaderEntry) -> bool {
    e.is_hop_by_hop() || e.kind == HeaderKind::TransferEncoding
}

/// Trailer fields of a chunked h1 body (the section after the last chunk, CRLF lines, as
/// validated by `BodyTracker`) as an h2 trailer map.
pub(crate) fn trailer_map(section: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in section.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (
            line.get(..colon).unwrap_or_default(),
            line.get(colon + 1..).unwrap_or_default(),
        );
        let value = crate::http::h1::headers::trim_ows(value);
        if !matches!(HeaderKind::of(name), HeaderKind::Other) {
            continue;
        }
        if let (Ok(n), Ok(v)) = (http::HeaderName::from_bytes(name), http::HeaderValue::from_bytes(value)) {
            map.append(n, v);
        }
    }
    map
}

/// Splits a chunked body into its data and its trailer section. Fed bytes `BodyTracker`
/// accepted (so the framing is known good); any split gives the same result.
#[derive(Debug, Default)]
pub(crate) struct Dechunk {
    state: DState,
    size: u64,
    /// The trailer section as read (bounded by the tracker's trailer limit).
    pub(crate) trailers: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum DState {
    #[default]
    Size,
    /// In extensions or the CR before the size line's LF.
    SizeRest,
    Data,
    /// The CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk's size line: trailer bytes up to the final empty line.
    Trailers,
    Done,
}

impl Dechunk {
    /// Feeds `input`, calling `data` with every run of body data in it.
    #[cfg(test)]
    pub(crate) fn feed(&mut self, mut input: &[u8], mut data: impl FnMut(&[u8])) {
        while !input.is_empty() {
            let (used, run) = self.step(input);
            if let Some(r) = run {
                data(input.get(r).unwrap_or_default());
            }
            input = input.get(used..).unwrap_or_default();
        }
    }

    /// Reads from the start of `input` up to and including the next run of body data:
    /// how many bytes it used, and where that run is in `input` (if it found one).
    pub(crate) fn step(&mut self, input: &[u8]) -> (usize, Option<std::ops::Range<usize>>) {
        let mut i = 0;
        while let Some(&b) = input.get(i) {
            match self.state {
                DState::Size => {
                    match b {
                        b'0'..=b'9' => self.size = self.size.saturating_mul(16) + u64::from(b - b'0'),
                        b'a'..=b'f' => self.size = self.size.saturating_mul(16) + u64::from(b - b'a' + 10),
                        b'A'..=b'F' => self.size = self.size.saturating_mul(16) + u64::from(b - b'A' + 10),
                        b'\n' => self.size_line_end(),
                        _ => self.state = DState::SizeRest,
                    }
                    i += 1;
                }
                DState::SizeRest => {
                    if b == b'\n' {
                        self.size_line_end();
                    }
                    i += 1;
                }
                DState::Data => {
                    let take = usize::try_from(self.size).unwrap_or(usize::MAX).min(input.len() - i);
                    self.size -= take as u64;
                    if self.size == 0 {
                        self.state = DState::DataEnd;
                    }
                    return (i + take, Some(i..i + take));
                }
                DState::DataEnd => {
                    if b == b'\n' {
                        self.state = DState::Size;
                    }
                    i += 1;
                }
                DState::Trailers => {
                    self.trailers.push(b);
                    i += 1;
                    if self.trailers == b"\r\n" || self.trailers.ends_with(b"\r\n\r\n") {
                        self.state = DState::Done;
                    }
                }
                DState::Done => return (input.len(), None),
            }
        }
        (i, None)
    }

    fn size_line_end(&mut self) {
        self.state = if self.size == 0 { DState::Trailers } else { DState::Data };
    }

    /// The trailer section without the final empty line (empty when there were none).
    pub(crate) fn trailer_section(&self) -> &[u8] {
        self.trailers.strip_suffix(b"\r\n").unwrap_or(&self.trailers)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fwd() -> Forwarding<'static> {
        Forwarding {
            mode: Forwarded::XForwardedFor,
            ip: "10.0.0.1".parse().unwrap(),
            proto: Proto::Https,
            sticky: Some(b"SRV"),
        }
    }

    #[test]
    fn request_head_is_strict_http11() {
        let req = http::Request::builder()
            .method("POST")
            .uri("https://example.com/up?x=1")
            .header("cookie", "a=1")
            .header("cookie", "SRV=s1")
            .header("cookie", "b=2; SRV=s1")
            .header("x-forwarded-for", "1.2.3.4")
            .header("te", "trailers")
            .header("accept", "*/*")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let mut out = Vec::new();
        write_request_head(&parts, BodyOut::Chunked, &fwd(), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /up?x=1 HTTP/1.1\r\nhost: example.com\r\naccept: */*\r\ncookie: a=1; b=2\r\n\
             x-forwarded-for: 1.2.3.4, 10.0.0.1\r\nx-forwarded-proto: https\r\n\
             transfer-encoding: chunked\r\n\r\n"
        );
    }

    #[test]
    fn common_names_are_the_parsed_ones() {
        for name in [
            "Date",
            "ETag",
            "vary",
            "Server",
            "Expires",
            "location",
            "Set-Cookie",
            "Content-Type",
            "cache-control",
            "Last-Modified",
            "accept-ranges",
            "Content-Length",
            "content-encoding",
        ] {
            let parsed = http::HeaderName::from_bytes(name.as_bytes()).unwrap();
            assert_eq!(common_response_name(name.as_bytes()), Some(parsed), "{name}");
        }
        for other in ["dater", "x-date", "", "etah", "content-typf", "servers", "d"] {
            assert_eq!(common_response_name(other.as_bytes()), None, "{other}");
        }
        // Other spellings are left to the general parse, which gives the same name.
        assert_eq!(common_response_name(b"CONTENT-TYPE"), None);
        assert_eq!(common_response_name(b"Etag"), None);
    }

    #[test]
    fn line_ends_check_matches_the_per_line_rule() {
        let per_line = |head: &[u8]| {
            head.split(|&b| b == b'\n')
                .all(|line| bytes_ok(line.strip_suffix(b"\r").unwrap_or(line)))
        };
        let alphabet = [b'a', b'\r', b'\n', 0, b' '];
        // Every head of up to 6 bytes over an alphabet holding each byte that matters.
        for len in 0..=6u32 {
            for mut code in 0..5usize.pow(len) {
                let head: Vec<u8> = (0..len)
                    .map(|_| {
                        let b = alphabet.get(code % 5).copied().unwrap_or(b'a');
                        code /= 5;
                        b
                    })
                    .collect();
                assert_eq!(only_line_ends(&head), per_line(&head), "{head:?}");
            }
        }
        assert!(only_line_ends(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n"));
        assert!(!only_line_ends(b"GET / HTTP/1.1\r\nx: a\rb\r\n\r\n"));
    }

    #[test]
    fn dechunk_is_split_invariant() {
        let wire = b"5;ext=1\r\nhello\r\n3\r\n!!!\r\n0\r\ngrpc-status: 0\r\nx: y\r\n\r\n";
        for split in 1..wire.len() {
            let mut d = Dechunk::default();
            let mut body = Vec::new();
            for piece in wire.chunks(split) {
                d.feed(piece, |run| body.extend_from_slice(run));
            }
            assert_eq!(body, b"hello!!!", "split {split}");
            assert_eq!(d.trailer_section(), b"grpc-status: 0\r\nx: y\r\n", "split {split}");
        }
        let map = trailer_map(b"grpc-status: 0\r\nx:  y \r\ncontent-length: 5\r\n");
        assert_eq!(map.get("grpc-status").unwrap(), "0");
        assert_eq!(map.get("x").unwrap(), "y");
        assert!(map.get("content-length").is_none());
    }

    #[test]
    fn last_chunk_carries_trailers() {
        let mut t = HeaderMap::new();
        t.insert("grpc-status", "0".parse().unwrap());
        let mut out = Vec::new();
        write_last_chunk(Some(&t), &mut out).unwrap();
        assert_eq!(out, b"0\r\ngrpc-status: 0\r\n\r\n");
    }
}
