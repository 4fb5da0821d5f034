//! The one error type of the HTTP/1 codec.
//!
//! Owns: [`H1Error`] = an [`ErrorKind`] (what was wrong, stable `as_str()` for logs) plus the
//! [`Side`] of the message it was found in. Invariant: the status to answer with is a pure function
//! of (kind, side): anything a *server* sends wrong is a 502 for the client; a *client* mistake maps
//! to the 4xx/5xx of the strictness table in [`super`].

use std::fmt;

/// Which message the error was found in: a request (from the front) or a response (from the back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// A request read from the client connection.
    Request,
    /// A response read from the server connection.
    Response,
}

impl Side {
    /// Short name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Request => "request",
            Side::Response => "response",
        }
    }
}

/// What was wrong with the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Request line longer than `Limits::max_request_line` (414).
    RequestLineTooLong,
    /// Head larger than `Limits::max_header_size` (431).
    HeadTooLarge,
    /// More header fields than `Limits::max_headers` (431).
    TooManyHeaders,
    /// Request line is not `method SP target SP version` (e.g. HTTP/0.9 style).
    BadRequestLine,
    /// Method contains non-token bytes.
    BadMethod,
    /// Request target has forbidden bytes, a fragment, or the wrong form for the method.
    BadTarget,
    /// Version is not `HTTP/<digit>.<digit>`.
    BadVersion,
    /// Version is well formed but not 1.0 or 1.1 (505).
    UnsupportedVersion,
    /// Status line malformed or status code outside 100..=599.
    BadStatus,
    /// Empty header name, non-token byte in a name, or whitespace before the colon.
    BadHeaderName,
    /// Control byte (other than HTAB) in a header value.
    BadHeaderValue,
    /// Obsolete line folding.
    ObsFold,
    /// A CR not followed by LF, or a line that does not parse as a header.
    BadLineEnding,
    /// HTTP/1.1 request without a Host header.
    MissingHost,
    /// More than one Host header.
    DuplicateHost,
    /// A Host value that is not `uri-host [":" port]` (RFC 9112 §3.2): a space, a path,
    /// userinfo, a port that is not a number up to 65535.
    BadHost,
    /// Host names another host or port than the absolute-form target's authority.
    HostMismatch,
    /// Content-Length not a plain decimal u64.
    BadContentLength,
    /// Several different Content-Length values.
    ConflictingContentLength,
    /// Both Transfer-Encoding and Content-Length.
    TransferEncodingWithContentLength,
    /// Transfer-Encoding whose final coding is not `chunked` (known or not), `chunked` twice,
    /// `chunked` with parameters, empty, or with an empty list element (`, chunked`).
    BadTransferEncoding,
    /// A transfer coding we do not know before a final `chunked`, or any coding before it on
    /// a request (501 on a request).
    UnknownTransferCoding,
    /// A trailer field that frames or routes a message (Transfer-Encoding, Content-Length,
    /// Host): a recipient that merged trailers into the head would read another message.
    ForbiddenTrailer,
    /// Chunk size not hex, missing, or above `body::MAX_CHUNK_SIZE`.
    BadChunkSize,
    /// Chunk extension with forbidden bytes, or a chunk-size line that is too long.
    BadChunkExtension,
    /// Chunk data not followed by CRLF.
    MissingChunkCrlf,
    /// A bare LF where chunked framing needs CRLF.
    BareLf,
    /// Malformed trailer field.
    BadTrailer,
    /// Trailer section larger than its limit.
    TrailersTooLarge,
    /// The connection closed before the body ended.
    TruncatedBody,
    /// A chunked body larger than the configured limit (413).
    BodyTooLarge,
}

impl ErrorKind {
    /// Short stable name for logs.
    pub fn as_str(self) -> &'static str {
        use ErrorKind::*;
        match self {
            RequestLineTooLong => "request line too long",
            HeadTooLarge => "head too large",
            TooManyHeaders => "too many headers",
            BadRequestLine => "bad request line",
            BadMethod => "bad method",
            BadTarget => "bad request target",
            BadVersion => "bad version",
            UnsupportedVersion => "unsupported version",
            BadStatus => "bad status line",
            BadHeaderName => "bad header name",
            BadHeaderValue => "bad header value",
            ObsFold => "obsolete line folding",
            BadLineEnding => "bad line ending",
            MissingHost => "missing host",
            DuplicateHost => "duplicate host",
            BadHost => "bad host",
            HostMismatch => "host disagrees with the target's authority",
            BadContentLength => "bad content-length",
            ConflictingContentLength => "conflicting content-length",
            TransferEncodingWithContentLength => "transfer-encoding with content-length",
            BadTransferEncoding => "bad transfer-encoding",
            UnknownTransferCoding => "unsupported transfer coding",
            ForbiddenTrailer => "framing field in trailers",
            BadChunkSize => "bad chunk size",
            BadChunkExtension => "bad chunk extension",
            MissingChunkCrlf => "missing CRLF after chunk data",
            BareLf => "bare LF in chunked body",
            BadTrailer => "bad trailer field",
            TrailersTooLarge => "trailers too large",
            TruncatedBody => "truncated body",
            BodyTooLarge => "body too large",
        }
    }

    /// The status a proxy answers the client with when a *request* has this fault.
    pub fn request_status(self) -> u16 {
        use ErrorKind::*;
        match self {
            RequestLineTooLong => 414,
            HeadTooLarge | TooManyHeaders | TrailersTooLarge => 431,
            BodyTooLarge => 413,
            UnsupportedVersion => 505,
            UnknownTransferCoding => 501,
            _ => 400,
        }
    }
}

/// A framing or syntax error in an HTTP/1 message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid HTTP/1 {}: {}", .side.as_str(), .kind.as_str())]
pub struct H1Error {
    kind: ErrorKind,
    side: Side,
}

impl H1Error {
    /// Build an error (the codec does this; public for callers' tests).
    pub fn new(kind: ErrorKind, side: Side) -> Self {
        H1Error { kind, side }
    }

    /// What was wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Which message it was found in.
    pub fn side(&self) -> Side {
        self.side
    }

    /// Status to answer the client with: the kind's request status, or 502 for a response fault.
    pub fn status(&self) -> u16 {
        match self.side {
            Side::Request => self.kind.request_status(),
            Side::Response => 502,
        }
    }

    /// Short reason for logs (the kind's name).
    pub fn as_str(&self) -> &'static str {
        self.kind.as_str()
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
