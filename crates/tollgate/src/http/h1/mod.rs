//! Sans-io HTTP/1.1 codec: parse heads, delimit bodies, rewrite heads for forwarding.
//!
//! The proxy's HTTP mode reads bytes from the front (client) or back (server) connection into its
//! own buffer and asks this module what they mean; nothing here does I/O or buffers a body.
//!
//! # API
//! - [`Limits`]: `max_header_size` (32 KiB), `max_request_line` (8 KiB), `max_headers` (100,
//!   clamped to [`HEADER_CAP`]).
//! - [`parse_request_head`]`(buf, &limits, &mut scratch) -> Result<Option<RequestHead>, H1Error>`
//!   and [`parse_response_head`]`(buf, &limits, request_method, &mut scratch)`: `Ok(None)` means
//!   "incomplete, read more". Heads hold [`Span`]s (offsets into `buf`) and derived semantics:
//!   [`BodyFraming`], `keep_alive`, `close_after_response`, `expect_continue`, `upgrade`, `host`
//!   (request); `status`, `informational`, `switching_protocols`, `tunnel` (response). Header
//!   storage is a `Vec` borrowed from a caller-owned [`HeadScratch`] and returned with
//!   `head.reclaim(&mut scratch)`: no allocation per message in steady state. httparse writes
//!   into a stack array of `MaybeUninit` headers.
//! - [`BodyTracker`]`::new(framing, side)`, `.advance(bytes) -> Result<Progress, H1Error>`,
//!   `.on_eof()`: delimits a body without de-chunking it; split-invariant.
//!   `.reframe(&mut bytes) -> Result<Reframed, H1Error>`: the same, rewriting chunk-size lines
//!   in place into canonical ones (what the proxy forwards; see [`body`]).
//! - [`write_request_head`] / [`write_response_head`]`(head, buf, &HeadEdits, &mut out)`: drop
//!   hop-by-hop fields, add `X-Forwarded-For` / `X-Forwarded-Proto` / `Forwarded`, set
//!   `Connection`; [`write_error_response`]`(status, &mut out)`.
//! - [`H1Error`]: [`ErrorKind`] + [`Side`]; `status()` is the kind's status for a request fault and
//!   502 for any response fault; `as_str()` for logs.
//!
//! # Strictness (RFC 9110 / 9112, HAProxy-like). Response-side faults all give 502.
//!
//! | rule | request status |
//! |---|---|
//! | request line longer than `max_request_line` (also while unterminated) | 414 |
//! | head larger than `max_header_size` (also while incomplete) | 431 |
//! | more than `max_headers` fields | 431 |
//! | HTTP/0.9 style line (`GET /`), extra/missing SP, empty target | 400 |
//! | method not a token (unknown token methods are fine: `Method::Other`) | 400 |
//! | version not `HTTP/d.d` (`HTTP/1.1x`, `http/1.1`, missing) | 400 |
//! | version `HTTP/d.d` other than 1.0/1.1 (`HTTP/1.2`, `HTTP/2.0`, `HTTP/0.9`) | 505 |
//! | target byte outside RFC 3986 + `%` (SP, CTL, `"<>\^`{\|}`, `#`, >= 0x80) | 400 |
//! | target form: `*` only for OPTIONS, authority-form only (and always) for CONNECT, else origin or absolute | 400 |
//! | field name empty / non-token / whitespace before colon | 400 |
//! | obs-fold (line starting with SP/HTAB): `BadHeaderName` in a head, `ObsFold` in trailers | 400 |
//! | NUL, CR, LF, other CTL (except HTAB) or DEL in a value | 400 |
//! | CR not followed by LF in the head (bare LF line endings are accepted in heads: we re-serialise with CRLF) | 400 |
//! | HTTP/1.1 without Host; several Host fields | 400 |
//! | Host not `uri-host [":" port]` (`a b`, `h/x`, `u@h`, `h:x`, port > 65535; [`crate::http::host`]) | 400 |
//! | absolute-form target whose authority is invalid (userinfo, bad port), or names another host/port than Host (default ports equal no port; HAProxy refuses the conflict too) | 400 |
//! | Content-Length not 1*DIGIT (sign, empty, non-digit, u64 overflow) | 400 |
//! | several *different* Content-Length values (identical repeats, `5, 5` or two fields, are accepted as one) | 400 |
//! | Transfer-Encoding with Content-Length (we reject rather than let TE win) | 400 (502 response) |
//! | Transfer-Encoding final coding not `chunked` (`gzip`, `identity`, `xchunked`: RFC 9112 6.3), `chunked` twice, empty TE, an empty list element (`, chunked`, `chunked, ,`: HAProxy refuses them too) | 400 |
//! | `chunked` with parameters (`chunked; q=1`: RFC 9112 7 defines none) | 400 |
//! | Transfer-Encoding with any coding before a final `chunked` on a request (`gzip, chunked`; HAProxy: 422); in a response, an unknown one (not gzip/deflate/compress/x-*) | 501 / 502 |
//! | A trailer field named Transfer-Encoding, Content-Length or Host (RFC 9110 6.5.1) | 400 / 502 |
//! | Transfer-Encoding on an HTTP/1.0 message | accepted (chunked), `close_after_response` / no keep-alive |
//! | `Upgrade` + `Connection: upgrade` on a request with a body | upgrade dropped (`upgrade` false, `Upgrade` not forwarded), as HAProxy |
//! | `Upgrade: h2c` (curl `--http2` on cleartext) | the `h2c` offer dropped, with `HTTP2-Settings`: the request is served as HTTP/1.1 (other protocols in the list still upgrade) |
//! | chunk size not hex / missing / above [`body::MAX_CHUNK_SIZE`] (2^52 - 1, HAProxy's bound) | 400 |
//! | chunk-size line with CTL bytes in extensions, or longer than [`body::MAX_CHUNK_LINE`] | 400 |
//! | whitespace between chunk size and `;`/CRLF, chunk extensions | accepted, dropped when re-framed |
//! | chunked body past [`BodyTracker::with_max_body`] (checked at each size line) | 413 |
//! | chunk data not followed by CRLF; bare LF anywhere in chunked framing | 400 |
//! | malformed trailer field (as for heads) | 400; trailers over the limit 431 |
//! | response status outside 100..=599, malformed status line | (502) |
//!
//! Response framing (RFC 9112 6.3): none for HEAD, 1xx, 204, 304 and 2xx-to-CONNECT (`tunnel`);
//! else chunked, Content-Length, or close-delimited.
//!
//! Not done here (caller's job): a chunked response to an HTTP/1.0 client must be de-chunked
//! ([`BodyTracker::decode`]) and close-delimited by the proxy, without its Transfer-Encoding
//! ([`HeadEdits::no_transfer_encoding`]). An absolute-form target and Host never disagree
//! once parsed (see the table), so forwarding either names the same host.

pub mod body;
pub mod error;
pub mod headers;
pub mod locate;
pub mod request;
pub mod response;
pub mod write;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use body::{BodyTracker, Progress, Reframed};
pub use error::{ErrorKind, H1Error, Side};
pub use headers::{HeadScratch, HeaderEntry, HeaderKind, MessageHead, Span};
pub use request::{Method, RequestHead, TargetForm, parse_request_head};
pub use response::{ResponseHead, parse_response_head};
pub use write::{
    ConnectionOut, HeadEdits, Proto, add_head_field, add_response_field, push_chunk, write_error_response,
    write_made_response, write_request_head, write_response_head,
};

/// Hard upper bound on the number of header fields (the stack array given to httparse).
pub const HEADER_CAP: usize = 256;

/// Size limits for heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest head (request/status line + fields + empty line), in bytes. Default 32 KiB.
    pub max_header_size: usize,
    /// Longest request line, without CRLF. Default 8 KiB.
    pub max_request_line: usize,
    /// Most header fields. Default 100; values above [`HEADER_CAP`] act as `HEADER_CAP`.
    pub max_headers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_size: 32 * 1024,
            max_request_line: 8 * 1024,
            max_headers: 100,
        }
    }
}

/// HTTP/1 minor version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0.
    Http10,
    /// HTTP/1.1.
    Http11,
}

/// How a message body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body.
    None,
    /// Exactly this many bytes.
    ContentLength(u64),
    /// Chunked coding (forwarded re-framed: canonical size lines, no extensions).
    Chunked,
    /// Until the server closes (responses only).
    CloseDelimited,
}
