//! Response head parsing and response framing (RFC 9112 6.3).
//!
//! Owns: [`parse_response_head`], [`ResponseHead`]. Every error carries [`Side::Response`], so its
//! status is 502. Invariant: `body` is [`BodyFraming::None`] for HEAD requests, 1xx, 204, 304 and
//! successful CONNECT (then `tunnel` is set), whatever the fields say.

use std::mem::MaybeUninit;

use super::error::{ErrorKind, H1Error, Side};
use super::headers::MessageHead;
use super::headers::{self, HeadScratch, HeaderEntry, Span};
use super::request::{Method, version_byte};
use super::{BodyFraming, HEADER_CAP, Limits, Version};

/// A parsed response head. Spans index the buffer given to [`parse_response_head`].
#[derive(Debug)]
pub struct ResponseHead {
    /// 1.0 or 1.1.
    pub version: Version,
    /// Status code, 100..=599.
    pub status: u16,
    /// Reason phrase (may be empty).
    pub reason: Span,
    /// Bytes of the head, including the final empty line.
    pub head_len: usize,
    /// How the body is delimited.
    pub body: BodyFraming,
    /// The server connection may be reused after this response.
    pub keep_alive: bool,
    /// Interim 1xx other than 101 (100 Continue, 103 Early Hints): forward it, keep reading for
    /// the final response.
    pub informational: bool,
    /// 101 Switching Protocols: after the head, both sides speak the upgraded protocol.
    pub switching_protocols: bool,
    /// 2xx to a CONNECT: after the head, the connection is a tunnel.
    pub tunnel: bool,
    /// A transfer coding (`gzip`, ...) comes before the final `chunked`: de-chunked, the body
    /// is still coded, which only an HTTP/1.1 recipient can be told.
    pub transfer_coded: bool,
    pub(crate) headers: Vec<HeaderEntry>,
}

impl MessageHead for ResponseHead {
    fn entries(&self) -> &[HeaderEntry] {
        &self.headers
    }
}

impl ResponseHead {
    /// Give the header storage back to `scratch` for the next parse.
    pub fn reclaim(self, scratch: &mut HeadScratch) {
        scratch.give_back(self.headers);
    }
}

/// Parse a response head from the start of `buf`; `request_method` is the method of the request
/// it answers (HEAD and CONNECT change the framing).
///
/// `Ok(None)`: incomplete. Errors carry [`Side::Response`] (status 502).
pub fn parse_response_head(
    buf: &[u8],
    limits: &Limits,
    request_method: Method,
    scratch: &mut HeadScratch,
) -> Result<Option<ResponseHead>, H1Error> {
    parse(buf, limits, request_method, scratch).map_err(|k| H1Error::new(k, Side::Response))
}

fn parse(
    buf: &[u8],
    limits: &Limits,
    request_method: Method,
    scratch: &mut HeadScratch,
) -> Result<Option<ResponseHead>, ErrorKind> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; HEADER_CAP];
    let n = limits.max_headers.min(HEADER_CAP);
    let slots = slots.get_mut(..n).unwrap_or_default();
    scan_version(buf)?;
    let mut res = httparse::Response::new(&mut []);
    let visible = buf.get(..limits.max_header_size).unwrap_or(buf);
    let head_len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut res, visible, slots)
    {
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
    let (Some(minor), Some(status), Some(reason)) = (res.version, res.code, res.reason) else {
        return Err(ErrorKind::BadStatus);
    };
    if !(100..=599).contains(&status) {
        return Err(ErrorKind::BadStatus);
    }
    let version = if minor == 0 { Version::Http10 } else { Version::Http11 };
    let mut entries = scratch.take();
    headers::collect(buf, res.headers, &mut entries);
    let a = match headers::analyze(buf, &mut entries) {
        Ok(a) => a,
        Err(k) => {
            scratch.give_back(entries);
            return Err(k);
        }
    };
    if a.chunked && a.content_length.is_some() {
        scratch.give_back(entries);
        return Err(ErrorKind::TransferEncodingWithContentLength);
    }
    let informational = (100..200).contains(&status) && status != 101;
    let switching_protocols = status == 101;
    let tunnel = request_method == Method::Connect && (200..300).contains(&status);
    let bodiless = request_method == Method::Head || status < 200 || status == 204 || status == 304 || tunnel;
    let body = if bodiless {
        BodyFraming::None
    } else if a.chunked {
        BodyFraming::Chunked
    } else if let Some(n) = a.content_length {
        BodyFraming::ContentLength(n)
    } else {
        BodyFraming::CloseDelimited
    };
    let http11 = version == Version::Http11;
    // TE on HTTP/1.0 is faulty framing (RFC 9112 6.1): parse it, then close.
    let faulty = a.chunked && !http11;
    let keep_alive = !faulty && !a.conn_close && (http11 || a.conn_keep_alive) && body != BodyFraming::CloseDelimited;
    Ok(Some(ResponseHead {
        version,
        status,
        reason: Span::within(buf, reason.as_bytes()),
        head_len,
        body,
        keep_alive,
        informational,
        switching_protocols,
        tunnel,
        transfer_coded: a.chunked && a.coded,
        headers: entries,
    }))
}

/// Check the status line's version token byte by byte (after leading empty lines), so that a
/// split head gets the same verdict as the whole one and 505-like versions are told apart.
fn scan_version(buf: &[u8]) -> Result<(), ErrorKind> {
    let mut rest = buf;
    loop {
        match rest {
            [b'\r', b'\n', tail @ ..] | [b'\n', tail @ ..] => rest = tail,
            [b'\r'] => return Ok(()),
            [b'\r', _, ..] => return Err(ErrorKind::BadLineEnding),
            _ => break,
        }
    }
    let major = rest.get(5).copied();
    for (i, &b) in rest.iter().enumerate() {
        if i == 8 && b == b' ' {
            return Ok(());
        }
        version_byte(i, b, major)?;
    }
    Ok(())
}
