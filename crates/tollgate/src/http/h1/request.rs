//! Request head parsing: request line, target form, and request framing/connection semantics.
//!
//! Owns: [`parse_request_head`], [`RequestHead`], [`Method`], [`TargetForm`]. httparse does the
//! header tokenising; this module adds what httparse tolerates (target byte set, target forms,
//! field-value control bytes, framing conflicts) and classifies request-line errors itself so that
//! 414/505/400 are told apart. Invariant: a returned head's spans all lie in `buf[..head_len]`.

use std::mem::MaybeUninit;

use super::error::{ErrorKind, H1Error, Side};
use super::headers::MessageHead;
use super::headers::{self, HeadScratch, HeaderEntry, Span, is_tchar};
use super::{BodyFraming, HEADER_CAP, Limits, Version};

/// Request method: the common ones, or `Other` (any token; see [`RequestHead::method_span`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Connect,
    Options,
    Trace,
    Patch,
    /// Any other token; forwarded as is.
    Other,
}

impl Method {
    /// Classify a method token (case-sensitive, as methods are).
    pub fn of(m: &[u8]) -> Method {
        match m {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"CONNECT" => Method::Connect,
            b"OPTIONS" => Method::Options,
            b"TRACE" => Method::Trace,
            b"PATCH" => Method::Patch,
            _ => Method::Other,
        }
    }
}

/// The form of the request target (RFC 9112 3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetForm {
    /// `/path?query`.
    Origin,
    /// `scheme://authority/path`.
    Absolute,
    /// `host:port`, CONNECT only.
    Authority,
    /// `*`, OPTIONS only.
    Asterisk,
}

/// A parsed request head. Spans index the buffer given to [`parse_request_head`].
#[derive(Debug)]
pub struct RequestHead {
    /// Classified method.
    pub method: Method,
    /// The method bytes.
    pub method_span: Span,
    /// The request target bytes.
    pub target: Span,
    /// Form of the target.
    pub target_form: TargetForm,
    /// 1.0 or 1.1.
    pub version: Version,
    /// Bytes of the head, including leading empty lines and the final empty line.
    pub head_len: usize,
    /// How the body is delimited.
    pub body: BodyFraming,
    /// The client wants the connection kept after the response (false if `close_after_response`).
    pub keep_alive: bool,
    /// Framing is suspect (Transfer-Encoding on HTTP/1.0): close after answering, whatever else.
    pub close_after_response: bool,
    /// `Expect: 100-continue` on an HTTP/1.1 request.
    pub expect_continue: bool,
    /// HTTP/1.1 request with an `Upgrade` field and `Connection: upgrade`, and no body (an
    /// upgrade on a request with a body is dropped: the request is forwarded as a plain one).
    pub upgrade: bool,
    /// Value of the (single) Host field, if any.
    pub host: Option<Span>,
    pub(crate) headers: Vec<HeaderEntry>,
}

impl MessageHead for RequestHead {
    fn entries(&self) -> &[HeaderEntry] {
        &self.headers
    }
}

impl RequestHead {
    /// Give the header storage back to `scratch` for the next parse.
    pub fn reclaim(self, scratch: &mut HeadScratch) {
        scratch.give_back(self.headers);
    }
}

/// Parse a request head from the start of `buf`.
///
/// `Ok(None)`: incomplete, read more and call again with the grown buffer. Errors carry
/// [`Side::Request`]; their [`H1Error::status`] is the status to answer with.
pub fn parse_request_head(
    buf: &[u8],
    limits: &Limits,
    scratch: &mut HeadScratch,
) -> Result<Option<RequestHead>, H1Error> {
    parse(buf, limits, scratch).map_err(|k| H1Error::new(k, Side::Request))
}

fn parse(buf: &[u8], limits: &Limits, scratch: &mut HeadScratch) -> Result<Option<RequestHead>, ErrorKind> {
    scan_request_line(buf, limits.max_request_line)?;
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; HEADER_CAP];
    let n = limits.max_headers.min(HEADER_CAP);
    let slots = slots.get_mut(..n).unwrap_or_default();
    let mut req = httparse::Request::new(&mut []);
    // httparse never sees past the size limit, so a fault beyond it is a 431 however it arrives.
    let visible = buf.get(..limits.max_header_size).unwrap_or(buf);
    let head_len = match req.parse_with_uninit_headers(visible, slots) {
        Ok(httparse::Status::Complete(len)) => len,
        // httparse rejects a version prefix other than `HTTP/1.` early; our scan passed it, so it
        // is an incomplete `HTTP/d.d` whose verdict (400 or 505) needs more bytes.
        Ok(httparse::Status::Partial) | Err(httparse::Error::Version) if buf.len() > visible.len() => {
            return Err(ErrorKind::HeadTooLarge);
        }
        Err(httparse::Error::Version) => return Ok(None),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(headers::map_httparse(e)),
    };
    if head_len > limits.max_header_size {
        return Err(ErrorKind::HeadTooLarge);
    }
    let (Some(method_s), Some(target_s), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(ErrorKind::BadRequestLine);
    };
    let version = if minor == 0 { Version::Http10 } else { Version::Http11 };
    let method = Method::of(method_s.as_bytes());
    let target = Span::within(buf, target_s.as_bytes());
    let target_form = validate_target(method, target.of(buf))?;

    let mut entries = scratch.take();
    headers::collect(buf, req.headers, &mut entries);
    let a = match headers::analyze(buf, &mut entries) {
        Ok(a) => a,
        Err(k) => {
            scratch.give_back(entries);
            return Err(k);
        }
    };
    let semantic = derive(version, &a).and_then(|framing| {
        check_host(a.host.map(|h| h.of(buf)), target.of(buf), target_form)?;
        Ok(framing)
    });
    let (body, close_after_response) = match semantic {
        Ok(v) => v,
        Err(k) => {
            scratch.give_back(entries);
            return Err(k);
        }
    };
    let http11 = version == Version::Http11;
    let keep_alive = !close_after_response && !a.conn_close && (http11 || a.conn_keep_alive);
    Ok(Some(RequestHead {
        method,
        method_span: Span::within(buf, method_s.as_bytes()),
        target,
        target_form,
        version,
        head_len,
        body,
        keep_alive,
        close_after_response,
        expect_continue: http11 && a.expect_continue,
        // With a body, the bytes after the head are that body and the upgraded protocol
        // would start at a point only our framing knows: drop the upgrade (HAProxy does too;
        // the `Upgrade` field is then not forwarded, as any hop-by-hop field).
        upgrade: http11 && a.has_upgrade && a.conn_upgrade && !has_body(body),
        host: a.host,
        headers: entries,
    }))
}

fn has_body(framing: BodyFraming) -> bool {
    !matches!(framing, BodyFraming::None | BodyFraming::ContentLength(0))
}

/// Framing and the "close after response" flag from the analysed fields.
fn derive(version: Version, a: &headers::Analysis) -> Result<(BodyFraming, bool), ErrorKind> {
    if a.host_count > 1 {
        return Err(ErrorKind::DuplicateHost);
    }
    if a.host_count == 0 && version == Version::Http11 {
        return Err(ErrorKind::MissingHost);
    }
    if a.chunked {
        if a.content_length.is_some() {
            return Err(ErrorKind::TransferEncodingWithContentLength);
        }
        // `gzip, chunked` on a request: HAProxy refuses it too (one coding a server may
        // decode and another may not is a framing disagreement waiting to happen).
        if a.coded {
            return Err(ErrorKind::UnknownTransferCoding);
        }
        return Ok((BodyFraming::Chunked, version == Version::Http10));
    }
    Ok(match a.content_length {
        Some(n) => (BodyFraming::ContentLength(n), false),
        None => (BodyFraming::None, false),
    })
}

/// RFC 9112 §3.2: a Host that is not `uri-host [":" port]` is a 400; an absolute-form
/// target's authority must be one too (no userinfo: RFC 9110 §4.2.4) and, when Host is
/// there, name the same host and port (RFC 9112 §3.2.2 lets the target win; a server behind
/// us may trust Host instead, so a disagreement is refused rather than resolved, as HAProxy
/// does). A CONNECT target (authority-form) must be a valid authority.
fn check_host(host: Option<&[u8]>, target: &[u8], form: TargetForm) -> Result<(), ErrorKind> {
    if let Some(h) = host
        && !crate::http::host::is_valid(h)
    {
        return Err(ErrorKind::BadHost);
    }
    match form {
        TargetForm::Absolute => {
            let (authority, _) = crate::http::rewrite::split_target(target);
            let authority = authority.unwrap_or_default();
            if authority.is_empty() || !crate::http::host::is_valid(authority) {
                return Err(ErrorKind::BadTarget);
            }
            let scheme = target.split(|&b| b == b':').next().unwrap_or_default();
            let default_port = crate::http::host::default_port(scheme);
            match host {
                Some(h) if !crate::http::host::same(authority, h, default_port) => Err(ErrorKind::HostMismatch),
                _ => Ok(()),
            }
        }
        TargetForm::Authority if !crate::http::host::is_valid(target) => Err(ErrorKind::BadTarget),
        _ => Ok(()),
    }
}

/// Validate the request line byte by byte, stopping at the first fault; `Ok` if the bytes seen
/// so far (maybe not the whole line) are fine.
///
/// The verdict depends only on the bytes up to the first faulty one, so a head split anywhere
/// gets the same error as the whole head, and the line is checked before httparse sees it (which
/// lets 414, 505 and 400 be told apart).
fn scan_request_line(buf: &[u8], max: usize) -> Result<(), ErrorKind> {
    #[derive(Clone, Copy, PartialEq)]
    enum Part {
        Method,
        Target,
        Version,
    }
    let mut rest = buf;
    loop {
        match rest {
            [b'\r', b'\n', tail @ ..] | [b'\n', tail @ ..] => rest = tail,
            [b'\r'] => return Ok(()),
            [b'\r', _, ..] => return Err(ErrorKind::BadLineEnding),
            _ => break,
        }
    }
    let mut part = Part::Method;
    let mut start = 0;
    for (i, &b) in rest.iter().enumerate() {
        if i >= max && b != b'\r' && b != b'\n' {
            return Err(ErrorKind::RequestLineTooLong);
        }
        let len = i - start;
        match (part, b) {
            (Part::Method, b' ') if len > 0 => (part, start) = (Part::Target, i + 1),
            (Part::Target, b' ') if len > 0 => (part, start) = (Part::Version, i + 1),
            // `GET /` + CRLF (HTTP/0.9 style) or `GET` + CRLF.
            (Part::Method | Part::Target, b'\r' | b'\n') if len > 0 => {
                return Err(ErrorKind::BadRequestLine);
            }
            (Part::Method, _) if !is_tchar(b) => return Err(ErrorKind::BadMethod),
            (Part::Target, _) if !is_target_byte(b) => return Err(ErrorKind::BadTarget),
            (Part::Method | Part::Target, _) => {}
            (Part::Version, b'\n') if len == 8 => return Ok(()),
            (Part::Version, b'\r') if len == 8 => {
                return match rest.get(i + 1) {
                    None | Some(b'\n') => Ok(()),
                    Some(_) => Err(ErrorKind::BadLineEnding),
                };
            }
            (Part::Version, b' ') if len == 8 => return Err(ErrorKind::BadRequestLine),
            (Part::Version, _) => version_byte(len, b, rest.get(start + 5).copied())?,
        }
    }
    Ok(())
}

/// Check byte `pos` of a version token against `HTTP/<digit>.<digit>`; `major` is byte 5 if seen.
/// A well-formed version other than 1.0/1.1 is [`ErrorKind::UnsupportedVersion`], decided at its
/// last byte; a ninth byte is [`ErrorKind::BadVersion`] (the caller handles terminators).
pub(crate) fn version_byte(pos: usize, b: u8, major: Option<u8>) -> Result<(), ErrorKind> {
    let ok = match pos {
        0..=4 => b"HTTP/".get(pos) == Some(&b),
        5 | 7 => b.is_ascii_digit(),
        6 => b == b'.',
        _ => false,
    };
    if !ok {
        return Err(ErrorKind::BadVersion);
    }
    if pos == 7 && !(major == Some(b'1') && matches!(b, b'0' | b'1')) {
        return Err(ErrorKind::UnsupportedVersion);
    }
    Ok(())
}

/// RFC 3986 unreserved / gen-delims (minus `#`) / sub-delims, plus `%`.
#[inline]
pub(crate) const fn is_target_byte(b: u8) -> bool {
    matches!(b,
        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9'
        | b'-' | b'.' | b'_' | b'~'
        | b':' | b'/' | b'?' | b'[' | b']' | b'@'
        | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
        | b'%')
}

/// Check the target bytes and its form against the method.
fn validate_target(method: Method, t: &[u8]) -> Result<TargetForm, ErrorKind> {
    if t.is_empty() || !t.iter().all(|&b| is_target_byte(b)) {
        return Err(ErrorKind::BadTarget);
    }
    let form = if t == b"*" {
        TargetForm::Asterisk
    } else if t.first() == Some(&b'/') {
        TargetForm::Origin
    } else if is_absolute(t) {
        TargetForm::Absolute
    } else if is_authority(t) {
        TargetForm::Authority
    } else {
        return Err(ErrorKind::BadTarget);
    };
    let ok = match method {
        Method::Connect => form == TargetForm::Authority,
        Method::Options => form != TargetForm::Authority,
        _ => matches!(form, TargetForm::Origin | TargetForm::Absolute),
    };
    if ok { Ok(form) } else { Err(ErrorKind::BadTarget) }
}

/// `scheme "://" authority ...` with a non-empty authority.
fn is_absolute(t: &[u8]) -> bool {
    let Some(colon) = t.iter().position(|&b| b == b':') else {
        return false;
    };
    let (scheme, rest) = t.split_at(colon);
    let scheme_ok = matches!(scheme.first(), Some(b) if b.is_ascii_alphabetic())
        && scheme
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    let Some(after) = rest.strip_prefix(b"://") else {
        return false;
    };
    scheme_ok && !matches!(after.first(), None | Some(b'/'))
}

/// `host:port` with a non-empty host and a decimal port; host has no `/`, `?` or `@`.
fn is_authority(t: &[u8]) -> bool {
    let Some(colon) = t.iter().rposition(|&b| b == b':') else {
        return false;
    };
    let (host, port) = t.split_at(colon);
    let port = port.get(1..).unwrap_or_default();
    !host.is_empty()
        && !host.iter().any(|&b| matches!(b, b'/' | b'?' | b'@'))
        && !port.is_empty()
        && port.len() <= 5
        && port.iter().all(u8::is_ascii_digit)
}
