//! Header storage and the end-to-end semantics derived from header fields.
//!
//! Owns: [`Span`] (a byte range into the caller's buffer), [`HeaderEntry`], [`HeadScratch`] (the
//! caller-owned, reused `Vec` of entries: no allocation in steady state), byte-class checks, and
//! [`analyze`], which reads Host / Content-Length / Transfer-Encoding / Connection / Upgrade /
//! Expect once and marks hop-by-hop fields.
//!
//! Invariants: every `Span` produced by a parse lies inside the buffer that was parsed; entries are
//! in wire order; `Host`, `Content-Length` and `Transfer-Encoding` are never marked hop-by-hop, even
//! if `Connection` names them (dropping a framing header while forwarding the body would let a
//! client smuggle a request past us).

use super::error::ErrorKind;

/// A byte range into the buffer a head was parsed from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// Offset of the first byte.
    pub start: usize,
    /// Offset one past the last byte.
    pub end: usize,
}

impl Span {
    /// The bytes of this span in `buf` (empty if `buf` is not the parsed buffer and is too short).
    #[inline]
    pub fn of(self, buf: &[u8]) -> &[u8] {
        buf.get(self.start..self.end).unwrap_or_default()
    }

    /// Length in bytes.
    #[inline]
    pub fn len(self) -> usize {
        self.end.saturating_sub(self.start)
    }

    /// True if the span is empty.
    #[inline]
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// Span of `sub`, which must be a sub-slice of `buf`.
    #[inline]
    pub(crate) fn within(buf: &[u8], sub: &[u8]) -> Span {
        // httparse hands out a static "" for some empty parts: those are not inside `buf`.
        let start = sub.as_ptr().addr().wrapping_sub(buf.as_ptr().addr());
        match start.checked_add(sub.len()) {
            Some(end) if end <= buf.len() => Span { start, end },
            _ => Span::default(),
        }
    }
}

/// Header names the codec gives meaning to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderKind {
    Host,
    ContentLength,
    TransferEncoding,
    Connection,
    KeepAlive,
    ProxyConnection,
    Te,
    Upgrade,
    /// `HTTP2-Settings` (RFC 9113 §3.1 deprecates it with the h2c upgrade it goes with;
    /// always connection-specific).
    Http2Settings,
    Expect,
    XForwardedFor,
    XForwardedProto,
    Forwarded,
    Other,
}

impl HeaderKind {
    /// Classify a header name (a token; case-insensitive).
    pub fn of(name: &[u8]) -> HeaderKind {
        // Dispatch on length first: one comparison per field in the common case.
        let (candidate, kind): (&[u8], HeaderKind) = match name.len() {
            2 => (b"te", HeaderKind::Te),
            4 => (b"host", HeaderKind::Host),
            6 => (b"expect", HeaderKind::Expect),
            7 => (b"upgrade", HeaderKind::Upgrade),
            9 => (b"forwarded", HeaderKind::Forwarded),
            10 if name.first().is_some_and(|b| b | 0x20 == b'k') => (b"keep-alive", HeaderKind::KeepAlive),
            10 => (b"connection", HeaderKind::Connection),
            14 if name.first().is_some_and(|b| b | 0x20 == b'h') => (b"http2-settings", HeaderKind::Http2Settings),
            14 => (b"content-length", HeaderKind::ContentLength),
            15 => (b"x-forwarded-for", HeaderKind::XForwardedFor),
            16 => (b"proxy-connection", HeaderKind::ProxyConnection),
            17 if name.first().is_some_and(|b| b | 0x20 == b't') => {
                (b"transfer-encoding", HeaderKind::TransferEncoding)
            }
            17 => (b"x-forwarded-proto", HeaderKind::XForwardedProto),
            _ => return HeaderKind::Other,
        };
        if is_named(name, candidate) {
            kind
        } else {
            HeaderKind::Other
        }
    }

    /// Hop-by-hop by definition (RFC 9110 7.6.1), whatever `Connection` says.
    pub fn is_hop_by_hop(self) -> bool {
        matches!(
            self,
            HeaderKind::Connection
                | HeaderKind::KeepAlive
                | HeaderKind::ProxyConnection
                | HeaderKind::Te
                | HeaderKind::Upgrade
                | HeaderKind::Http2Settings
        )
    }
}

/// `name` is `lower` in any case, where `lower` holds only lowercase letters, digits and `-`
/// and `name` is a token. OR-ing 0x20 into a token byte lowercases a letter and maps no other
/// token byte onto one of `lower`'s (it maps CR onto `-` and controls onto digits, and those
/// are not token bytes), so one branch-free pass does what a per-byte case fold does.
#[inline]
pub(crate) fn is_named(name: &[u8], lower: &[u8]) -> bool {
    debug_assert!(
        lower
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    );
    name.len() == lower.len() && name.iter().zip(lower).fold(0u8, |d, (n, l)| d | ((n | 0x20) ^ l)) == 0
}

/// One header field: spans into the parsed buffer plus what the codec knows about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderEntry {
    /// Field name.
    pub name: Span,
    /// Field value, without leading/trailing whitespace.
    pub value: Span,
    /// Classified name.
    pub kind: HeaderKind,
    /// Named by a `Connection` header, so hop-by-hop.
    pub connection_listed: bool,
}

/// Whether `name` is a hop-by-hop field (RFC 9110 §7.6.1) or one that frames the message
/// (`Content-Length`, `Transfer-Encoding`, `Trailer`): the proxy writes its own, never a
/// peer's, and no config may set one.
pub fn is_hop_or_framing(name: &[u8]) -> bool {
    let kind = HeaderKind::of(name);
    kind.is_hop_by_hop()
        || matches!(kind, HeaderKind::ContentLength | HeaderKind::TransferEncoding)
        || name.eq_ignore_ascii_case(b"trailer")
}

impl HeaderEntry {
    /// True if the field must not be forwarded as is (hop-by-hop).
    pub fn is_hop_by_hop(&self) -> bool {
        self.connection_listed || self.kind.is_hop_by_hop()
    }
}

/// Caller-owned storage for header entries, reused across messages of a connection.
///
/// A parse takes the `Vec` out, a head keeps it while alive, and `reclaim_*` gives it back, so a
/// keep-alive connection allocates only when a message has more headers than any before it.
#[derive(Debug, Default)]
pub struct HeadScratch {
    pub(crate) headers: Vec<HeaderEntry>,
}

impl HeadScratch {
    /// Scratch with room for a typical head (32 fields).
    pub fn new() -> Self {
        HeadScratch {
            headers: Vec::with_capacity(32),
        }
    }

    /// Scratch with no room yet: it grows at its first head.
    pub fn empty() -> Self {
        HeadScratch { headers: Vec::new() }
    }

    pub(crate) fn take(&mut self) -> Vec<HeaderEntry> {
        let mut v = std::mem::take(&mut self.headers);
        v.clear();
        v
    }

    pub(crate) fn give_back(&mut self, v: Vec<HeaderEntry>) {
        if v.capacity() >= self.headers.capacity() {
            self.headers = v;
        }
    }
}

/// RFC 9110 tchar.
#[inline]
pub fn is_tchar(b: u8) -> bool {
    matches!(b,
        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9'
        | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+'
        | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
}

/// Non-empty and all tchar.
#[inline]
pub fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

/// Allowed in a field value: VCHAR, SP, HTAB, obs-text. Rejects NUL, CR, LF, other CTLs, DEL.
#[inline]
pub fn is_field_value_byte(b: u8) -> bool {
    b == b'\t' || (b >= 0x20 && b != 0x7f)
}

/// Trim optional whitespace (SP / HTAB) on both sides.
pub fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Elements of a comma-separated list, trimmed; empty elements are yielded as empty slices.
pub fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(trim_ows)
}

/// The `h2c` token of an `Upgrade` list (a protocol name, compared without case).
#[inline]
pub fn is_h2c(protocol: &[u8]) -> bool {
    protocol.eq_ignore_ascii_case(b"h2c")
}

/// Transfer codings we know. Anything else before a final `chunked` is "unknown" (501 on a
/// request).
fn is_known_coding(name: &[u8]) -> bool {
    const KNOWN: [&[u8]; 6] = [b"chunked", b"gzip", b"x-gzip", b"deflate", b"compress", b"x-compress"];
    KNOWN.iter().any(|k| k.eq_ignore_ascii_case(name))
}

/// What the header fields of a head say, read in one pass.
#[derive(Clone, Copy, Debug, Default)]
pub struct Analysis {
    /// The agreed Content-Length, if any Content-Length field was present.
    pub content_length: Option<u64>,
    /// A Transfer-Encoding field was present (and valid, ending in `chunked`).
    pub chunked: bool,
    /// A (known) coding comes before the final `chunked`: fine in a response, refused in a
    /// request (tollgate decodes no coding, and a server behind it may frame it otherwise).
    pub coded: bool,
    /// First Host field value.
    pub host: Option<Span>,
    /// Number of Host fields.
    pub host_count: usize,
    /// `Connection: close`.
    pub conn_close: bool,
    /// `Connection: keep-alive`.
    pub conn_keep_alive: bool,
    /// `Connection: upgrade`.
    pub conn_upgrade: bool,
    /// An `Upgrade` field names a protocol other than `h2c` (an h2c offer is not an upgrade
    /// a proxy passes on: RFC 9113 §3.1 deprecated it, and the server would get it without
    /// its `HTTP2-Settings`; the request is served as HTTP/1.1, as curl expects).
    pub has_upgrade: bool,
    /// `Expect: 100-continue`.
    pub expect_continue: bool,
}

/// Check values, derive semantics and mark `Connection`-listed fields as hop-by-hop.
pub fn analyze(buf: &[u8], entries: &mut [HeaderEntry]) -> Result<Analysis, ErrorKind> {
    let mut a = Analysis::default();
    let mut has_te = false;
    let mut te_ends_chunked = false;
    let mut unknown_coding = false;
    let mut names_fields = false;
    for e in entries.iter() {
        let value = e.value.of(buf);
        // httparse's value table (scalar and SIMD paths) already rejects NUL, CR, LF, other
        // CTLs and DEL; a unit test holds it to that for every position of a long value.
        debug_assert!(value.iter().all(|&b| is_field_value_byte(b)));
        match e.kind {
            HeaderKind::Host => {
                a.host_count += 1;
                if a.host.is_none() {
                    a.host = Some(e.value);
                }
            }
            HeaderKind::ContentLength => {
                for el in list_elements(value) {
                    let n = parse_decimal(el).ok_or(ErrorKind::BadContentLength)?;
                    match a.content_length {
                        Some(prev) if prev != n => return Err(ErrorKind::ConflictingContentLength),
                        _ => a.content_length = Some(n),
                    }
                }
            }
            HeaderKind::TransferEncoding => {
                has_te = true;
                for el in list_elements(value) {
                    // RFC 9110 §5.6.1 asks recipients to skip empty elements, but a server
                    // behind us that counts them, or takes the first or last one, frames
                    // the body otherwise; and we forward the field as received. HAProxy
                    // refuses them too.
                    if el.is_empty() {
                        return Err(ErrorKind::BadTransferEncoding);
                    }
                    let mut parts = el.split(|&b| b == b';');
                    let name = trim_ows(parts.next().unwrap_or_default());
                    let has_params = parts.next().is_some();
                    if !is_token(name) {
                        return Err(ErrorKind::BadTransferEncoding);
                    }
                    if te_ends_chunked {
                        // Something after `chunked` (including a second `chunked`).
                        return Err(ErrorKind::BadTransferEncoding);
                    }
                    te_ends_chunked = name.eq_ignore_ascii_case(b"chunked");
                    a.coded |= !te_ends_chunked;
                    // RFC 9112 7: chunked defines no parameters; a peer may take
                    // `chunked;q=1` for another coding, so it frames nothing.
                    if te_ends_chunked && has_params {
                        return Err(ErrorKind::BadTransferEncoding);
                    }
                    unknown_coding |= !is_known_coding(name);
                }
            }
            HeaderKind::Connection => {
                for el in list_elements(value) {
                    if el.is_empty() {
                        continue;
                    }
                    // `keep-alive` and `upgrade` name fields that are hop-by-hop anyway: only
                    // the other options send us looking for the fields they name.
                    if el.eq_ignore_ascii_case(b"close") {
                        a.conn_close = true;
                        names_fields = true;
                    } else if el.eq_ignore_ascii_case(b"keep-alive") {
                        a.conn_keep_alive = true;
                    } else if el.eq_ignore_ascii_case(b"upgrade") {
                        a.conn_upgrade = true;
                    } else {
                        names_fields = true;
                    }
                }
            }
            HeaderKind::Upgrade => {
                a.has_upgrade |= list_elements(value).any(|p| !p.is_empty() && !is_h2c(p));
            }
            HeaderKind::Expect if value.eq_ignore_ascii_case(b"100-continue") => a.expect_continue = true,
            _ => {}
        }
    }
    if has_te {
        // RFC 9112 6.3: a final coding other than chunked is a 400, known coding or not; an
        // unknown coding before a final chunked is a 501 (RFC 9112 6.1).
        if !te_ends_chunked {
            return Err(ErrorKind::BadTransferEncoding);
        }
        if unknown_coding {
            return Err(ErrorKind::UnknownTransferCoding);
        }
        a.chunked = true;
    }
    if names_fields {
        mark_connection_listed(buf, entries);
    }
    Ok(a)
}

/// Mark every field that a `Connection` field names (except framing fields and Host).
fn mark_connection_listed(buf: &[u8], entries: &mut [HeaderEntry]) {
    for i in 0..entries.len() {
        let Some(c) = entries.get(i).copied() else {
            continue;
        };
        if c.kind != HeaderKind::Connection {
            continue;
        }
        for token in list_elements(c.value.of(buf)) {
            if token.is_empty() {
                continue;
            }
            for e in entries.iter_mut() {
                let protected = matches!(
                    e.kind,
                    HeaderKind::Host | HeaderKind::ContentLength | HeaderKind::TransferEncoding
                );
                if !protected && e.name.of(buf).eq_ignore_ascii_case(token) {
                    e.connection_listed = true;
                }
            }
        }
    }
}

/// 1*DIGIT as u64; `None` for empty, signs, non-digits or overflow.
pub fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

/// Build entries from httparse's headers (sub-slices of `buf`).
pub fn collect(buf: &[u8], parsed: &[httparse::Header<'_>], out: &mut Vec<HeaderEntry>) {
    for h in parsed {
        let name = h.name.as_bytes();
        out.push(HeaderEntry {
            name: Span::within(buf, name),
            value: Span::within(buf, h.value),
            kind: HeaderKind::of(name),
            connection_listed: false,
        });
    }
}

/// Map an httparse error found in the header section.
/// (obs-fold in a head shows up as a bad header name: httparse does not say where it stopped, and
/// scanning further could blame a later line than the one at fault.)
pub fn map_httparse(e: httparse::Error) -> ErrorKind {
    match e {
        httparse::Error::TooManyHeaders => ErrorKind::TooManyHeaders,
        httparse::Error::HeaderName => ErrorKind::BadHeaderName,
        httparse::Error::HeaderValue => ErrorKind::BadHeaderValue,
        httparse::Error::NewLine => ErrorKind::BadLineEnding,
        httparse::Error::Status => ErrorKind::BadStatus,
        httparse::Error::Token => ErrorKind::BadRequestLine,
        httparse::Error::Version => ErrorKind::BadVersion,
    }
}

/// What request and response heads share: their header fields, in wire order.
pub trait MessageHead {
    /// Header entries with their classification and hop-by-hop flag.
    fn entries(&self) -> &[HeaderEntry];

    /// Header fields in wire order, as (name, value).
    fn headers<'a>(&'a self, buf: &'a [u8]) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.entries().iter().map(move |e| (e.name.of(buf), e.value.of(buf)))
    }

    /// First value of the field `name` (case-insensitive).
    fn header<'a>(&self, buf: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
        self.entries()
            .iter()
            .find(|e| e.name.of(buf).eq_ignore_ascii_case(name))
            .map(|e| e.value.of(buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal() {
        assert_eq!(parse_decimal(b"0"), Some(0));
        assert_eq!(parse_decimal(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_decimal(b"18446744073709551616"), None);
        for bad in [&b""[..], b"+5", b"-5", b"5a", b" 5", b"0x5"] {
            assert_eq!(parse_decimal(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn ows_and_lists() {
        assert_eq!(trim_ows(b" \t a b\t "), b"a b");
        let v: Vec<&[u8]> = list_elements(b"a, b ,,c").collect();
        assert_eq!(v, vec![&b"a"[..], b"b", b"", b"c"]);
    }

    #[test]
    fn kinds() {
        assert_eq!(HeaderKind::of(b"CONTENT-length"), HeaderKind::ContentLength);
        assert_eq!(HeaderKind::of(b"Keep-Alive"), HeaderKind::KeepAlive);
        assert_eq!(HeaderKind::of(b"TRANSFER-ENCODING"), HeaderKind::TransferEncoding);
        assert_eq!(HeaderKind::of(b"X-Other"), HeaderKind::Other);
        assert!(HeaderKind::of(b"TE").is_hop_by_hop());
        assert_eq!(HeaderKind::of(b"HTTP2-Settings"), HeaderKind::Http2Settings);
        assert_eq!(HeaderKind::of(b"http2-settingz"), HeaderKind::Other);
        assert!(HeaderKind::of(b"http2-settings").is_hop_by_hop());
    }

    /// Over every token byte at every position of the names it is used with, `is_named`
    /// agrees with a case-insensitive comparison.
    #[test]
    fn is_named_is_a_case_fold_for_tokens() {
        let names: &[&[u8]] = &[
            b"te",
            b"content-length",
            b"x-forwarded-for",
            b"www-authenticate",
            b"e2e-99",
        ];
        for lower in names {
            for at in 0..lower.len() {
                for b in (0..=255u8).filter(|&b| is_tchar(b)) {
                    let mut name = lower.to_vec();
                    name[at] = b;
                    assert_eq!(is_named(&name, lower), name.eq_ignore_ascii_case(lower), "{name:?}");
                }
            }
            assert!(!is_named(&lower[1..], lower));
        }
    }
}
