//! Response compression (`compress = { … }` on a frontend or a route), sans-io.
//!
//! Owns: the [`Policy`] a config asks for, the negotiation of a coding from the request's
//! `Accept-Encoding` ([`negotiate`]), the decision whether a response may be compressed at all
//! ([`Facts::verdict`]), the head edits that go with it (h1 bytes: [`edit_h1_head`], h2 maps:
//! [`edit_h2_head`]) and the streaming [`Encoder`].
//!
//! Invariants: a response is compressed only when the client accepts the coding with q > 0
//! and the response is eligible: not already encoded, not partial (206, `Content-Range`), not
//! `Cache-Control: no-transform`, not to a HEAD, not 1xx/204/304, of a listed type, and not
//! announced shorter than `min_size`. A compressed response loses `Content-Length` and
//! `Accept-Ranges`, gains `Content-Encoding` and `Vary: Accept-Encoding`, and a strong `ETag`
//! becomes weak (the bytes differ; RFC 9110 §8.8.3). An eligible response the client did not
//! ask to compress still gains `Vary`, so a shared cache never serves one form for the other.
//! The encoder holds the coding's state and at most one call's output: memory is bounded per
//! response, never the body.

use std::io::Write as _;

/// A content coding tollgate produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    Zstd,
    Br,
    Gzip,
}

impl Coding {
    /// Every coding, in the default order of preference: zstd compresses as well as gzip at
    /// half its CPU; Brotli at a comparable CPU cost compresses no better than gzip
    /// (docs/benchmarks.md, "Compression"), so it goes to clients that take nothing else.
    pub const ALL: [Coding; 3] = [Coding::Zstd, Coding::Gzip, Coding::Br];

    /// Its `Content-Encoding` token.
    pub const fn token(self) -> &'static str {
        match self {
            Coding::Zstd => "zstd",
            Coding::Br => "br",
            Coding::Gzip => "gzip",
        }
    }

    pub fn from_name(name: &str) -> Option<Coding> {
        Coding::ALL.into_iter().find(|c| c.token() == name)
    }
}

/// Default levels, chosen by the figures in docs/benchmarks.md ("Compression"): per coding,
/// the level past which each step costs much more CPU for a few per cent of size.
pub const DEFAULT_GZIP_LEVEL: u32 = 4;
pub const DEFAULT_BR_LEVEL: u32 = 3;
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;
/// Brotli's window (2^18 = 256 KiB) and zstd's (2^18): bounded state per response; a larger
/// window only helps bodies far larger than web responses usually are.
const BR_WINDOW_LOG: u32 = 18;
const ZSTD_WINDOW_LOG: u32 = 18;
/// Brotli's input staging buffer.
const BR_BUFFER: usize = 4096;

/// `compress = { … }`, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// The codings offered, in the proxy's order of preference (a tie in the client's
    /// q-values goes to the earlier one).
    pub codings: Vec<Coding>,
    /// Media ranges (`text/*`, `application/json`), lowercase, without parameters.
    pub types: Vec<Box<str>>,
    /// A response announced shorter than this (`Content-Length`) goes as it is.
    pub min_size: u64,
    pub gzip_level: u32,
    pub br_level: u32,
    pub zstd_level: i32,
}

/// The types compressed when `types` is not set: text and the structured formats served
/// as text (nginx's and Caddy's usual lists).
pub const DEFAULT_TYPES: &[&str] = &[
    "text/*",
    "application/json",
    "application/javascript",
    "application/xml",
    "application/xhtml+xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/manifest+json",
    "application/wasm",
    "image/svg+xml",
];

/// `min_size` when not set: below ~1 KiB the coding's framing eats most of the gain.
pub const DEFAULT_MIN_SIZE: u64 = 1024;

impl Policy {
    /// Whether `content_type` (a field value, parameters allowed) is one of `types`.
    pub fn compresses_type(&self, content_type: &[u8]) -> bool {
        let essence = content_type
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        let Some((top, sub)) = split_media_type(essence) else {
            return false;
        };
        self.types.iter().any(|range| match split_media_type(range.as_bytes()) {
            Some((rt, b"*")) => top.eq_ignore_ascii_case(rt),
            Some((rt, rs)) => top.eq_ignore_ascii_case(rt) && sub.eq_ignore_ascii_case(rs),
            None => false,
        })
    }

    /// Whether `range` is a valid entry for `types`: `type/subtype` or `type/*` (tokens).
    pub fn valid_type(range: &str) -> bool {
        match split_media_type(range.as_bytes()) {
            Some((t, s)) => {
                super::h1::headers::is_token(t) && (s == b"*" || super::h1::headers::is_token(s)) && t != b"*"
            }
            None => false,
        }
    }
}

fn split_media_type(v: &[u8]) -> Option<(&[u8], &[u8])> {
    let slash = v.iter().position(|&b| b == b'/')?;
    let (t, s) = (v.get(..slash)?, v.get(slash + 1..)?);
    (!t.is_empty() && !s.is_empty()).then_some((t, s))
}

/// The coding to use for a request whose `Accept-Encoding` field lines are `accept`
/// (RFC 9110 §12.5.3): the highest q-value among the `offered` codings, a tie to the
/// earlier offered one; `*` stands for every coding not listed; q=0 refuses. No field at
/// all: none (an old client that never asked gets what the server sent).
pub fn negotiate<'a>(accept: impl IntoIterator<Item = &'a [u8]>, offered: &[Coding]) -> Option<Coding> {
    // Per offered coding: the q of its own entry, if listed (per mille).
    let mut listed: [Option<u16>; 3] = [None; 3];
    let mut star: Option<u16> = None;
    let mut any_field = false;
    for line in accept {
        any_field = true;
        for item in line.split(|&b| b == b',') {
            let mut parts = item.split(|&b| b == b';');
            let name = parts.next().unwrap_or_default().trim_ascii();
            if name.is_empty() {
                continue;
            }
            let mut q = Some(1000);
            for param in parts {
                let param = param.trim_ascii();
                if let Some(v) = param.strip_prefix(b"q=").or_else(|| param.strip_prefix(b"Q=")) {
                    q = qvalue(v);
                }
            }
            // A malformed q-value: the entry is ignored, as if not sent.
            let Some(q) = q else { continue };
            if name == b"*" {
                star = Some(star.map_or(q, |s| s.max(q)));
                continue;
            }
            let named = Coding::ALL.iter().position(|c| {
                name.eq_ignore_ascii_case(c.token().as_bytes())
                    || (*c == Coding::Gzip && name.eq_ignore_ascii_case(b"x-gzip"))
            });
            if let Some(slot) = named.and_then(|i| listed.get_mut(i)) {
                *slot = Some(slot.map_or(q, |s| s.max(q)));
            }
        }
    }
    if !any_field {
        return None;
    }
    let mut best: Option<(Coding, u16)> = None;
    for &coding in offered {
        let index = Coding::ALL.iter().position(|c| *c == coding).unwrap_or(0);
        let q = listed.get(index).copied().flatten().or(star).unwrap_or(0);
        if q > 0 && best.is_none_or(|(_, b)| q > b) {
            best = Some((coding, q));
        }
    }
    best.map(|(c, _)| c)
}

/// A request's compression: its route's policy and the coding its `Accept-Encoding` chose.
#[derive(Clone, Copy, Debug)]
pub struct Negotiated<'a> {
    pub policy: &'a Policy,
    pub chosen: Option<Coding>,
}

impl<'a> Negotiated<'a> {
    /// Negotiates with the request's fields (name, value).
    pub fn of<'f>(policy: &'a Policy, fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>) -> Self {
        let accept = fields
            .into_iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"accept-encoding"))
            .map(|(_, v)| v);
        Negotiated {
            policy,
            chosen: negotiate(accept, &policy.codings),
        }
    }

    /// The verdict for a response with these facts.
    pub fn verdict(&self, facts: &Facts<'_>) -> Verdict {
        facts.verdict(self.policy, self.chosen)
    }
}

/// A q-value (`0`, `0.5`, `1.000`) in per mille; `None` when malformed.
fn qvalue(v: &[u8]) -> Option<u16> {
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(dot) => (v.get(..dot)?, v.get(dot + 1..)?),
        None => (v, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut milli: u16 = 0;
    for i in 0..3 {
        let d = frac.get(i).map_or(0, |b| u16::from(b - b'0'));
        milli = milli * 10 + d;
    }
    match int {
        b"0" => Some(milli),
        b"1" if milli == 0 => Some(1000),
        _ => None,
    }
}

/// What the response head says that the decision needs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Facts<'a> {
    pub status: u16,
    pub head_request: bool,
    pub content_type: Option<&'a [u8]>,
    /// A `Content-Encoding` other than `identity`.
    pub encoded: bool,
    pub content_length: Option<u64>,
    pub content_range: bool,
    pub no_transform: bool,
}

/// What to do with one response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Compress with this coding.
    Compress(Coding),
    /// Eligible, but the client asked for none of the codings: only `Vary` is added.
    VaryOnly,
    /// Not eligible: forwarded untouched.
    Untouched,
}

impl<'a> Facts<'a> {
    /// Gathers the facts from the response's fields (name, value).
    pub fn gather(
        status: u16,
        head_request: bool,
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Facts<'a> {
        let mut f = Facts {
            status,
            head_request,
            ..Facts::default()
        };
        for (name, value) in fields {
            if name.eq_ignore_ascii_case(b"content-type") {
                f.content_type = Some(value);
            } else if name.eq_ignore_ascii_case(b"content-encoding") {
                f.encoded |= !value.trim_ascii().eq_ignore_ascii_case(b"identity");
            } else if name.eq_ignore_ascii_case(b"content-length") {
                f.content_length = std::str::from_utf8(value).ok().and_then(|v| v.trim().parse().ok());
            } else if name.eq_ignore_ascii_case(b"content-range") {
                f.content_range = true;
            } else if name.eq_ignore_ascii_case(b"cache-control") {
                f.no_transform |= value
                    .split(|&b| b == b',')
                    .any(|d| d.trim_ascii().eq_ignore_ascii_case(b"no-transform"));
            }
        }
        f
    }

    /// The decision for this response under `policy`, the client having asked for `chosen`.
    pub fn verdict(&self, policy: &Policy, chosen: Option<Coding>) -> Verdict {
        let eligible = !self.head_request
            && !matches!(self.status, 100..=199 | 204 | 206 | 304)
            && !self.encoded
            && !self.content_range
            && !self.no_transform
            && self.content_type.is_some_and(|t| policy.compresses_type(t))
            && self.content_length.is_none_or(|n| n >= policy.min_size.max(1));
        match chosen {
            _ if !eligible => Verdict::Untouched,
            Some(c) => Verdict::Compress(c),
            None => Verdict::VaryOnly,
        }
    }
}

/// Rewrites an HTTP/1 response head that tollgate wrote (status line, fields, empty line)
/// for `verdict`: with a coding, `Content-Length`, `Transfer-Encoding` and `Accept-Ranges`
/// go, a strong `ETag` turns weak, and `Content-Encoding` (and, with `chunked`,
/// `Transfer-Encoding: chunked`) are added; `Vary` gains `Accept-Encoding` either way (in
/// place, without a copy, when that is all).
pub fn edit_h1_head(head: &mut Vec<u8>, verdict: Verdict, chunked: bool) {
    let coding = match verdict {
        Verdict::Untouched => return,
        Verdict::Compress(c) => c,
        Verdict::VaryOnly => return add_vary_in_place(head),
    };
    let mut out = Vec::with_capacity(head.len() + 64);
    let mut vary_seen = false;
    let mut lines = head.split(|&b| b == b'\n');
    if let Some(status) = lines.next() {
        out.extend_from_slice(status);
        out.push(b'\n');
    }
    for line in lines {
        let text = line.strip_suffix(b"\r").unwrap_or(line);
        let Some((name, value)) = split_field(text) else {
            continue;
        };
        if name.eq_ignore_ascii_case(b"vary") {
            vary_seen = true;
            push_line(&mut out, name, &vary_value(value));
        } else if name.eq_ignore_ascii_case(b"etag") {
            push_line(&mut out, name, &weak_etag(value));
        } else if !(name.eq_ignore_ascii_case(b"content-length")
            || name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"accept-ranges"))
        {
            out.extend_from_slice(text);
            out.extend_from_slice(b"\r\n");
        }
    }
    if !vary_seen {
        push_line(&mut out, b"Vary", b"Accept-Encoding");
    }
    push_line(&mut out, b"Content-Encoding", coding.token().as_bytes());
    if chunked {
        push_line(&mut out, b"Transfer-Encoding", b"chunked");
    }
    out.extend_from_slice(b"\r\n");
    *head = out;
}

/// A field line's name and trimmed value; `None` for the empty line or a line without `:`.
fn split_field(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = line.iter().position(|&b| b == b':')?;
    Some((line.get(..colon)?, line.get(colon + 1..)?.trim_ascii()))
}

/// `Vary: Accept-Encoding` into a head: appended to its `Vary` line (unless that has it or
/// is `*`), else a line of its own before the empty line.
fn add_vary_in_place(head: &mut Vec<u8>) {
    let mut at = 0;
    let mut vary_end = None;
    for line in head.split(|&b| b == b'\n') {
        let end = at + line.len();
        let text = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some((name, value)) = split_field(text)
            && name.eq_ignore_ascii_case(b"vary")
        {
            if vary_has_accept_encoding(value) {
                return;
            }
            vary_end = Some((at + text.len(), value.is_empty()));
            break;
        }
        at = end + 1;
    }
    match vary_end {
        Some((end, empty)) => {
            let add: &[u8] = if empty {
                b"Accept-Encoding"
            } else {
                b", Accept-Encoding"
            };
            head.splice(end..end, add.iter().copied());
        }
        None => {
            let end = head.len().saturating_sub(2);
            head.splice(end..end, b"Vary: Accept-Encoding\r\n".iter().copied());
        }
    }
}

fn vary_has_accept_encoding(value: &[u8]) -> bool {
    value.split(|&b| b == b',').any(|v| {
        let v = v.trim_ascii();
        v == b"*" || v.eq_ignore_ascii_case(b"accept-encoding")
    })
}

fn push_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `Vary` with `Accept-Encoding` in it (kept as is when it has it, or is `*`).
fn vary_value(value: &[u8]) -> Vec<u8> {
    let mut out = value.to_vec();
    if !vary_has_accept_encoding(value) {
        if !out.is_empty() {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(b"Accept-Encoding");
    }
    out
}

/// A strong entity tag made weak (`"x"` → `W/"x"`); a weak one is kept.
fn weak_etag(value: &[u8]) -> Vec<u8> {
    if value.starts_with(b"W/") || !value.starts_with(b"\"") {
        return value.to_vec();
    }
    let mut out = Vec::with_capacity(value.len() + 2);
    out.extend_from_slice(b"W/");
    out.extend_from_slice(value);
    out
}

/// [`edit_h1_head`] for an HTTP/2 response's header map.
pub fn edit_h2_head(headers: &mut http::HeaderMap, verdict: Verdict) {
    use http::header::{ACCEPT_RANGES, CONTENT_ENCODING, CONTENT_LENGTH, ETAG, HeaderValue, VARY};
    let coding = match verdict {
        Verdict::Untouched => return,
        Verdict::Compress(c) => Some(c),
        Verdict::VaryOnly => None,
    };
    let vary: Vec<u8> = {
        let joined: Vec<&[u8]> = headers.get_all(VARY).iter().map(HeaderValue::as_bytes).collect();
        vary_value(&joined.join(&b", "[..]))
    };
    if let Ok(v) = HeaderValue::from_bytes(&vary) {
        headers.insert(VARY, v);
    }
    let Some(coding) = coding else { return };
    headers.remove(CONTENT_LENGTH);
    headers.remove(ACCEPT_RANGES);
    if let Some(tag) = headers.get(ETAG).map(|t| weak_etag(t.as_bytes()))
        && let Ok(v) = HeaderValue::from_bytes(&tag)
    {
        headers.insert(ETAG, v);
    }
    headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding.token()));
}

/// One response's compressor. What each call makes ready collects in an output buffer the
/// caller moves out with [`Encoder::take_output`].
pub struct Encoder {
    inner: Option<Inner>,
    /// The finished stream's last bytes (after [`Encoder::finish`]).
    finished: Vec<u8>,
    /// Bytes in and out, for the ratio counters.
    pub bytes_in: u64,
    pub bytes_out: u64,
}

enum Inner {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("bytes_in", &self.bytes_in)
            .field("bytes_out", &self.bytes_out)
            .finish_non_exhaustive()
    }
}

impl Encoder {
    /// A compressor for `coding` at `policy`'s level; `None` if the coding library refused
    /// to start (the response then goes uncompressed).
    pub fn new(coding: Coding, policy: &Policy) -> Option<Encoder> {
        let inner = match coding {
            Coding::Gzip => Inner::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(policy.gzip_level),
            )),
            Coding::Br => Inner::Br(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                BR_BUFFER,
                policy.br_level,
                BR_WINDOW_LOG,
            ))),
            Coding::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), policy.zstd_level).ok()?;
                e.window_log(ZSTD_WINDOW_LOG).ok()?;
                Inner::Zstd(e)
            }
        };
        Some(Encoder {
            inner: Some(inner),
            finished: Vec::new(),
            bytes_in: 0,
            bytes_out: 0,
        })
    }

    /// Compresses `input`; what is ready goes to the output buffer.
    pub fn push(&mut self, input: &[u8]) -> std::io::Result<()> {
        self.bytes_in += input.len() as u64;
        match &mut self.inner {
            Some(Inner::Gzip(e)) => e.write_all(input),
            Some(Inner::Br(e)) => e.write_all(input),
            Some(Inner::Zstd(e)) => e.write_all(input),
            None => Ok(()),
        }
    }

    /// Makes everything pushed so far decodable output (a sync flush), so a stream (SSE, a
    /// long poll) reaches the client as the server sends it.
    pub fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.inner {
            Some(Inner::Gzip(e)) => e.flush(),
            Some(Inner::Br(e)) => e.flush(),
            Some(Inner::Zstd(e)) => e.flush(),
            None => Ok(()),
        }
    }

    /// Ends the stream: the coding's last bytes go to the output buffer.
    pub fn finish(&mut self) -> std::io::Result<()> {
        let rest = match self.inner.take() {
            Some(Inner::Gzip(e)) => e.finish()?,
            Some(Inner::Br(e)) => e.into_inner(),
            Some(Inner::Zstd(e)) => e.finish()?,
            None => return Ok(()),
        };
        self.finished = rest;
        Ok(())
    }

    fn output(&mut self) -> &mut Vec<u8> {
        match &mut self.inner {
            Some(Inner::Gzip(e)) => e.get_mut(),
            Some(Inner::Br(e)) => e.get_mut(),
            Some(Inner::Zstd(e)) => e.get_mut(),
            None => &mut self.finished,
        }
    }

    /// Whether output is waiting.
    pub fn has_output(&mut self) -> bool {
        !self.output().is_empty()
    }

    /// Hands the ready output to `f` (when there is any), then empties the buffer.
    pub fn drain(&mut self, f: impl FnOnce(&[u8])) {
        let out = self.output();
        if !out.is_empty() {
            let n = out.len() as u64;
            f(out);
            out.clear();
            self.bytes_out += n;
        }
    }

    /// Moves the ready output into `into` (emptied first; the two buffers swap, nothing
    /// is copied).
    pub fn swap_output(&mut self, into: &mut Vec<u8>) {
        into.clear();
        let out = self.output();
        std::mem::swap(out, into);
        self.bytes_out += into.len() as u64;
    }
}

#[cfg(test)]
mod tests;
