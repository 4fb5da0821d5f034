//! Request heads and trailers as decoded from HPACK, and the rules they must pass
//! (RFC 9113 §8.2, §8.3; RFC 9110 §5.5).
//!
//! Owns [`Fields`] (one byte arena + spans: no allocation per field, none at all once a
//! recycled head has grown to fit), [`RequestHead`] (the pseudo-header fields, spans into the
//! same arena, and the regular fields in order) and [`HeadBuilder`], the HPACK sink that
//! validates while it stores. Invariants: a head handed out passed every rule; names are
//! lowercase tokens; values have no NUL/CR/LF/CTL and no surrounding whitespace; the builder
//! stops storing (but keeps taking fields, for HPACK's sake) at the first fault or once the
//! list passes `max_header_list_size`, so nothing past the limit is buffered.

use super::hpack::FieldSink;
// What the HTTP/1 codec accepts in a request target: an h2 target goes into one.
use super::hpack::table::ENTRY_OVERHEAD;
use crate::http::h1::request::is_target_byte;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    start: u32,
    len: u32,
}

/// Header fields in order, names lowercase.
#[derive(Debug, Default, Clone)]
pub struct Fields {
    buf: Vec<u8>,
    spans: Vec<(Span, Span, bool)>,
    /// RFC 7541 §4.1 size of what was decoded (pseudo-header fields included).
    list_size: usize,
}

impl Fields {
    fn clear(&mut self) {
        self.buf.clear();
        self.spans.clear();
        self.list_size = 0;
    }

    fn store(&mut self, bytes: &[u8]) -> Span {
        let start = self.buf.len() as u32;
        self.buf.extend_from_slice(bytes);
        Span {
            start,
            len: bytes.len() as u32,
        }
    }

    fn slice(&self, s: Span) -> &[u8] {
        self.buf
            .get(s.start as usize..(s.start + s.len) as usize)
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The header list size (RFC 7541 §4.1: name + value + 32 per field).
    pub fn list_size(&self) -> usize {
        self.list_size
    }

    /// The bytes every name and value of these fields (and a head's pseudo-header values)
    /// are slices of: one copy of it shares them all.
    pub fn arena(&self) -> &[u8] {
        &self.buf
    }

    /// (name, value) in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.spans.iter().map(|&(n, v, _)| (self.slice(n), self.slice(v)))
    }

    /// (name, value, never_indexed) in order: a never-indexed field (RFC 7541 §6.2.3) must
    /// stay so if it is forwarded over HTTP/2.
    pub fn iter_sensitive(&self) -> impl Iterator<Item = (&[u8], &[u8], bool)> + '_ {
        self.spans.iter().map(|&(n, v, s)| (self.slice(n), self.slice(v), s))
    }

    /// The first value of `name` (lowercase).
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.spans
            .iter()
            .find(|(n, _, _)| self.slice(*n) == name)
            .map(|&(_, v, _)| self.slice(v))
    }

    pub fn get_all<'a, 'n>(&'a self, name: &'n [u8]) -> impl Iterator<Item = &'a [u8]> + use<'a, 'n> {
        self.spans
            .iter()
            .filter(move |(n, _, _)| self.slice(*n) == name)
            .map(|&(_, v, _)| self.slice(v))
    }
}

/// A validated request head.
#[derive(Debug, Default, Clone)]
pub struct RequestHead {
    fields: Fields,
    method: Span,
    scheme: Option<Span>,
    authority: Option<Span>,
    path: Option<Span>,
    content_length: Option<u64>,
}

impl RequestHead {
    pub fn method(&self) -> &[u8] {
        self.fields.slice(self.method)
    }

    /// Absent only for CONNECT.
    pub fn scheme(&self) -> Option<&[u8]> {
        self.scheme.map(|s| self.fields.slice(s))
    }

    pub fn authority(&self) -> Option<&[u8]> {
        self.authority.map(|s| self.fields.slice(s))
    }

    /// Origin-form (or `*` for OPTIONS); absent only for CONNECT.
    pub fn path(&self) -> Option<&[u8]> {
        self.path.map(|s| self.fields.slice(s))
    }

    pub fn is_connect(&self) -> bool {
        self.method() == b"CONNECT"
    }

    /// The regular fields, in order.
    pub fn fields(&self) -> &Fields {
        &self.fields
    }

    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields.get(name)
    }

    /// `content-length`, checked (digits; repeats agree).
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    fn clear(&mut self) {
        self.fields.clear();
        *self = RequestHead {
            fields: std::mem::take(&mut self.fields),
            ..RequestHead::default()
        };
    }

    pub(crate) fn from_fields(fields: Fields) -> Self {
        RequestHead {
            fields,
            ..RequestHead::default()
        }
    }

    /// The regular fields, the rest dropped (trailers).
    pub(crate) fn into_fields(self) -> Fields {
        self.fields
    }
}

impl RequestHead {
    /// The head the codec builds from fields another codec decoded (HTTP/3's QPACK:
    /// pseudo-fields first, then the others, in a list of at most `max_list_size`), and its
    /// verdict on them: the same rules as for an HTTP/2 head.
    pub(crate) fn from_decoded<'f>(
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        max_list_size: usize,
    ) -> (RequestHead, Result<(), HeadFault>) {
        let mut head = RequestHead::default();
        let mut b = HeadBuilder::new(&mut head, false, max_list_size);
        for (n, v) in fields {
            b.field(n, v, false);
        }
        let verdict = b.finish();
        (head, verdict)
    }

    #[cfg(test)]
    pub(crate) fn decoded(fields: &[(&str, &str)], max_list_size: usize) -> (RequestHead, Result<(), HeadFault>) {
        Self::from_decoded(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())), max_list_size)
    }
}

/// Why a head or trailer block cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadFault {
    /// Malformed (RFC 9113 §8.1.1): a stream error PROTOCOL_ERROR.
    Malformed(&'static str),
    /// Over `max_header_list_size`: worth a 431.
    TooLarge,
}

// What each byte may be part of, as bits: a field's bytes are classified in one pass (the
// AND of their classes) and every rule below reads that.
/// A field value byte (RFC 9110 §5.5: no CTL but HTAB).
const VALUE: u8 = 1;
/// RFC 9110 §5.6.2 tchar, lowercase letters only (uppercase is a fault of its own).
const NAME: u8 = 2;
/// tchar, any case (`:method`).
const TOKEN: u8 = 4;
/// What the HTTP/1 codec accepts in a request target (`:path`).
const TARGET: u8 = 8;
/// A target byte that is not `/`, `?` or `@` (`:authority`).
const AUTHORITY_BYTE: u8 = 16;
/// ALPHA / DIGIT / `+` / `-` / `.` (`:scheme` after its first letter).
const SCHEME_BYTE: u8 = 32;

#[allow(clippy::indexing_slicing)] // compile time only
const fn byte_classes() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut b = 0usize;
    while b < 256 {
        let c = b as u8;
        let tchar = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
            );
        let mut class = 0;
        if !((c < 0x20 && c != b'\t') || c == 0x7f) {
            class |= VALUE;
        }
        if tchar && !c.is_ascii_uppercase() {
            class |= NAME;
        }
        if tchar {
            class |= TOKEN;
        }
        if is_target_byte(c) {
            class |= TARGET;
            if !matches!(c, b'/' | b'?' | b'@') {
                class |= AUTHORITY_BYTE;
            }
        }
        if c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.') {
            class |= SCHEME_BYTE;
        }
        t[b] = class;
        b += 1;
    }
    t
}
static BYTE_CLASSES: [u8; 256] = byte_classes();

/// The classes every byte of `bytes` has.
fn classes(bytes: &[u8]) -> u8 {
    bytes.iter().fold(u8::MAX, |all, &b| {
        all & BYTE_CLASSES.get(usize::from(b)).copied().unwrap_or(0)
    })
}

fn check_name(name: &[u8]) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty field name");
    }
    if classes(name) & NAME != 0 {
        return Ok(());
    }
    if name.iter().any(u8::is_ascii_uppercase) {
        Err("uppercase field name")
    } else {
        Err("invalid character in a field name")
    }
}

/// `value`'s rules, given its byte classes.
fn check_value(value: &[u8], class: u8) -> Result<(), &'static str> {
    if class & VALUE == 0 {
        return Err("control character in a field value");
    }
    if matches!(value.first(), Some(b' ' | b'\t')) || matches!(value.last(), Some(b' ' | b'\t')) {
        return Err("whitespace around a field value");
    }
    Ok(())
}

fn parse_content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| {
        if b.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

const METHOD: u8 = 1;
const SCHEME: u8 = 2;
const AUTHORITY: u8 = 4;
const PATH: u8 = 8;
const PROTOCOL: u8 = 16;

/// The HPACK sink building a request head (or trailers, `trailers = true`).
pub(crate) struct HeadBuilder<'a> {
    head: &'a mut RequestHead,
    trailers: bool,
    max_list_size: usize,
    fault: Option<HeadFault>,
    seen: u8,
    regular_seen: bool,
    host: Option<Span>,
}

impl<'a> HeadBuilder<'a> {
    pub(crate) fn new(head: &'a mut RequestHead, trailers: bool, max_list_size: usize) -> Self {
        head.clear();
        HeadBuilder {
            head,
            trailers,
            max_list_size,
            fault: None,
            seen: 0,
            regular_seen: false,
            host: None,
        }
    }

    fn malformed(&mut self, why: &'static str) {
        self.fault.get_or_insert(HeadFault::Malformed(why));
    }

    fn pseudo(&mut self, name: &[u8], value: &[u8], class: u8) -> Result<(), &'static str> {
        if self.trailers {
            return Err("pseudo-header field in trailers");
        }
        if self.regular_seen {
            return Err("pseudo-header field after a regular one");
        }
        let bit = match name {
            b":method" => METHOD,
            b":scheme" => SCHEME,
            b":authority" => AUTHORITY,
            b":path" => PATH,
            b":protocol" => PROTOCOL,
            b":status" => return Err("response pseudo-header field in a request"),
            _ => return Err("unknown pseudo-header field"),
        };
        if self.seen & bit != 0 {
            return Err("duplicate pseudo-header field");
        }
        self.seen |= bit;
        let span = self.head.fields.store(value);
        match bit {
            METHOD => {
                if value.is_empty() || class & TOKEN == 0 {
                    return Err("invalid :method");
                }
                self.head.method = span;
            }
            SCHEME => {
                if !value.first().is_some_and(u8::is_ascii_alphabetic) || class & SCHEME_BYTE == 0 {
                    return Err("invalid :scheme");
                }
                self.head.scheme = Some(span);
            }
            AUTHORITY => {
                if class & AUTHORITY_BYTE == 0 {
                    return Err(if value.contains(&b'@') {
                        ":authority with userinfo"
                    } else {
                        "invalid character in :authority"
                    });
                }
                self.head.authority = Some(span);
            }
            PATH => {
                // Forwarded as an HTTP/1 request target: the same bytes only.
                if class & TARGET == 0 {
                    return Err("invalid character in :path");
                }
                self.head.path = Some(span);
            }
            _ => {}
        }
        Ok(())
    }

    fn regular(&mut self, name: &[u8], value: &[u8], never_indexed: bool) -> Result<(), &'static str> {
        self.regular_seen = true;
        check_name(name)?;
        match name {
            b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding" | b"upgrade" => {
                return Err("connection-specific field");
            }
            b"te" if !value.eq_ignore_ascii_case(b"trailers") => return Err("te other than trailers"),
            // RFC 9110 §6.5.1: framing and routing fields have no place in trailers.
            b"content-length" | b"host" if self.trailers => return Err("content-length or host in trailers"),
            b"content-length" if !self.trailers => {
                let n = parse_content_length(value).ok_or("content-length not a number")?;
                if self.head.content_length.is_some_and(|m| m != n) {
                    return Err("content-length values disagree");
                }
                self.head.content_length = Some(n);
            }
            _ => {}
        }
        let n = self.head.fields.store(name);
        let v = self.head.fields.store(value);
        if name == b"host" {
            self.host = Some(v);
        }
        self.head.fields.spans.push((n, v, never_indexed));
        Ok(())
    }

    /// The verdict once the whole block was decoded.
    pub(crate) fn finish(self) -> Result<(), HeadFault> {
        if let Some(fault) = self.fault {
            return Err(fault);
        }
        if self.trailers {
            return Ok(());
        }
        let h = &*self.head;
        let m = |why| Err(HeadFault::Malformed(why));
        if self.seen & METHOD == 0 {
            return m("missing :method");
        }
        if self.seen & PROTOCOL != 0 {
            return m("extended CONNECT (:protocol) is not enabled");
        }
        if h.is_connect() {
            if self.seen & AUTHORITY == 0 {
                return m("CONNECT without :authority");
            }
            if self.seen & (SCHEME | PATH) != 0 {
                return m("CONNECT with :scheme or :path");
            }
            return Ok(());
        }
        if self.seen & (SCHEME | PATH) != SCHEME | PATH {
            return m("missing :scheme or :path");
        }
        let path = h.path().unwrap_or_default();
        if path.is_empty() {
            return m("empty :path");
        }
        if !(path.starts_with(b"/") || (path == b"*" && h.method() == b"OPTIONS")) {
            return m(":path not in origin-form");
        }
        let host = self.host.map(|s| h.fields.slice(s));
        if let (Some(a), Some(host)) = (h.authority(), host)
            && !a.eq_ignore_ascii_case(host)
        {
            return m("host disagrees with :authority");
        }
        if matches!(h.scheme(), Some(b"http" | b"https")) && h.authority().or(host).is_none_or(<[u8]>::is_empty) {
            return m("no :authority nor host");
        }
        Ok(())
    }
}

impl FieldSink for HeadBuilder<'_> {
    fn field(&mut self, name: &[u8], value: &[u8], never_indexed: bool) {
        if self.fault.is_some() {
            return;
        }
        self.head.fields.list_size += name.len() + value.len() + ENTRY_OVERHEAD;
        if self.head.fields.list_size > self.max_list_size {
            self.fault = Some(HeadFault::TooLarge);
            return;
        }
        let class = classes(value);
        if let Err(why) = check_value(value, class) {
            return self.malformed(why);
        }
        let r = if name.first() == Some(&b':') {
            self.pseudo(name, value, class)
        } else {
            self.regular(name, value, never_indexed)
        };
        if let Err(why) = r {
            self.malformed(why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_head() {
        let (h, r) = RequestHead::decoded(
            &[
                (":method", "POST"),
                (":scheme", "https"),
                (":authority", "a.example"),
                (":path", "/x?y"),
                ("content-length", "12"),
                ("cookie", "a=1"),
                ("cookie", "b=2"),
            ],
            4096,
        );
        assert_eq!(r, Ok(()));
        assert_eq!(h.method(), b"POST");
        assert_eq!(h.path(), Some(&b"/x?y"[..]));
        assert_eq!(h.authority(), Some(&b"a.example"[..]));
        assert_eq!(h.content_length(), Some(12));
        assert_eq!(h.fields().len(), 3);
        assert_eq!(h.fields().get_all(b"cookie").collect::<Vec<_>>(), [&b"a=1"[..], b"b=2"]);
        assert_eq!(h.get(b"content-type"), None);
    }

    /// Each byte class the rules read: one field it lets through, one it stops, and why.
    #[test]
    fn each_rule_reads_its_byte_class() {
        let head = |extra: &[(&str, &str)], method: &str, scheme: &str, authority: &str, path: &str| {
            let mut fields = vec![
                (":method", method),
                (":scheme", scheme),
                (":authority", authority),
                (":path", path),
            ];
            fields.extend_from_slice(extra);
            RequestHead::decoded(&fields, 4096).1
        };
        let ok = |extra: &[(&str, &str)]| head(extra, "GET", "https", "a.example", "/");
        let bad = |why| Err(HeadFault::Malformed(why));
        // Accepted: obs-text and HTAB inside a value, digits and tchar symbols in a name, an
        // extension method, a scheme's `+-.`, an IPv6 authority, a target's sub-delims.
        assert_eq!(ok(&[("x-1_a!~", "caf\u{e9}\tau lait")]), Ok(()));
        assert_eq!(
            head(&[], "M-SEARCH", "h2+x.y-z", "[::1]:8443", "/a;b=c?d=%20&e='f'"),
            Ok(())
        );
        assert_eq!(ok(&[("x", "a\x7fb")]), bad("control character in a field value"));
        assert_eq!(ok(&[("x", "a\x01b")]), bad("control character in a field value"));
        assert_eq!(ok(&[("x", " a")]), bad("whitespace around a field value"));
        assert_eq!(ok(&[("x y", "1")]), bad("invalid character in a field name"));
        assert_eq!(ok(&[("x\u{e9}", "1")]), bad("invalid character in a field name"));
        assert_eq!(ok(&[("X-a", "1")]), bad("uppercase field name"));
        assert_eq!(head(&[], "G T", "https", "a", "/"), bad("invalid :method"));
        assert_eq!(head(&[], "G\"T", "https", "a", "/"), bad("invalid :method"));
        assert_eq!(head(&[], "", "https", "a", "/"), bad("invalid :method"));
        assert_eq!(head(&[], "GET", "1http", "a", "/"), bad("invalid :scheme"));
        assert_eq!(head(&[], "GET", "ht_tp", "a", "/"), bad("invalid :scheme"));
        assert_eq!(head(&[], "GET", "", "a", "/"), bad("invalid :scheme"));
        assert_eq!(
            head(&[], "GET", "https", "a?b", "/"),
            bad("invalid character in :authority")
        );
        assert_eq!(
            head(&[], "GET", "https", "a b", "/"),
            bad("invalid character in :authority")
        );
        assert_eq!(head(&[], "GET", "https", "u@a", "/"), bad(":authority with userinfo"));
        assert_eq!(
            head(&[], "GET", "https", "a", "/a\"b"),
            bad("invalid character in :path")
        );
        assert_eq!(
            head(&[], "GET", "https", "a", "/a{b}"),
            bad("invalid character in :path")
        );
    }

    #[test]
    fn over_the_list_size_stores_nothing_more() {
        let big = "v".repeat(200);
        let (h, r) = RequestHead::decoded(
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/"),
                ("a", &big),
                ("b", &big),
            ],
            300,
        );
        assert_eq!(r, Err(HeadFault::TooLarge));
        assert!(h.fields.buf.len() <= 300, "{}", h.fields.buf.len());
    }
}
