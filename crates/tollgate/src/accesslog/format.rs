//! One access log line from one ended stream: the JSON object or the fixed text layout of
//! docs/logging.md, appended to a caller's buffer without allocating (numbers and the
//! date are written digit by digit, strings escaped byte by byte).
//!
//! Invariants: a line is exactly one `\n`-terminated line whatever the input (every byte
//! that could break a line or a field is escaped); the JSON is valid for any input.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use crate::config::log_layout::{CaptureKind, Field, JsonKey, Layout, LogPlan, Piece};
use crate::error::Termination;

/// Bytes of a request target kept for the log; a longer target is cut here and ends in `...`.
pub(crate) const PATH_LIMIT: usize = 1024;
/// Bytes of a method kept (the parser accepts any token).
pub(crate) const METHOD_LIMIT: usize = 32;

/// When each step happened, as offsets from the stream's start (`None`: it never did).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Timings {
    pub head: Option<Duration>,
    pub queued: Option<Duration>,
    pub connected: Option<Duration>,
    pub response: Option<Duration>,
    pub total: Duration,
}

/// What one line says. Names are `None` when there was none (no server chosen).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    /// When the stream began.
    pub time: SystemTime,
    pub client: SocketAddr,
    pub frontend: &'a str,
    pub backend: Option<&'a str>,
    pub server: Option<&'a str>,
    pub server_address: Option<SocketAddr>,
    /// The route that decided (`None`: the default backend, or nothing).
    pub route: Option<&'a str>,
    /// HTTP only: the captured method and target, version, headers (`RequestLine`).
    pub request: Option<&'a RequestLine>,
    /// HTTP: `http` or `https`.
    pub scheme: Option<&'static str>,
    pub status: u16,
    pub bytes_to_server: u64,
    pub bytes_to_client: u64,
    pub timings: Timings,
    pub retries: u32,
    pub termination: Termination,
    pub tls_version: Option<&'static str>,
    pub tls_cipher: Option<&'static str>,
    pub sni: Option<&'a str>,
    /// The verified client certificate's subject, RFC 4514 (printable ASCII only).
    pub client_cert_subject: Option<&'a str>,
    /// HTTP: the request's ID, on a frontend with `request_id` (`http::request_id`: only
    /// bytes that need no escaping, escaped all the same).
    pub request_id: Option<&'a [u8]>,
    /// HTTP: the ID of the trace tollgate started for the request (`[frontend] trace`).
    pub trace_id: Option<&'a [u8]>,
}

#[cfg(test)]
impl Entry<'_> {
    /// A TCP session's line with nothing set: the tests' starting point.
    pub(crate) fn blank() -> Self {
        Entry {
            time: SystemTime::UNIX_EPOCH,
            client: SocketAddr::from(([127, 0, 0, 1], 1)),
            frontend: "f",
            backend: None,
            server: None,
            server_address: None,
            route: None,
            request: None,
            scheme: None,
            status: 0,
            bytes_to_server: 0,
            bytes_to_client: 0,
            timings: Timings::default(),
            retries: 0,
            termination: Termination::NORMAL,
            tls_version: None,
            tls_cipher: None,
            sni: None,
            client_cert_subject: None,
            request_id: None,
            trace_id: None,
        }
    }
}

/// Where one captured value sits in `RequestLine::captured`.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
    cut: bool,
}

/// A request's method and target, copied at head-parse time into storage reused from
/// request to request (`Local::take_line`), bounded by `METHOD_LIMIT` and `PATH_LIMIT`;
/// its HTTP version; and the header and cookie values its frontend's line captures (each
/// cut at the plan's `capture_limit`).
#[derive(Debug, Default)]
pub(crate) struct RequestLine {
    buf: Vec<u8>,
    method_len: usize,
    truncated: bool,
    version: Option<&'static str>,
    captured: Vec<u8>,
    /// Indexed like the plan's captures; `None`: not seen.
    spans: Vec<Option<Span>>,
    /// The client certificate's subject, when the line shows it (empty: none).
    subject: String,
}

impl RequestLine {
    pub(crate) fn with_capacity() -> Self {
        RequestLine {
            buf: Vec::with_capacity(METHOD_LIMIT + PATH_LIMIT),
            ..RequestLine::default()
        }
    }

    /// Keeps `method` and `target` (cut at their limits); never grows past its capacity.
    pub(crate) fn set(&mut self, method: &[u8], target: &[u8]) {
        self.buf.clear();
        let method = method.get(..METHOD_LIMIT).unwrap_or(method);
        self.buf.extend_from_slice(method);
        self.method_len = method.len();
        self.truncated = target.len() > PATH_LIMIT;
        self.buf.extend_from_slice(target.get(..PATH_LIMIT).unwrap_or(target));
    }

    pub(crate) fn set_version(&mut self, version: &'static str) {
        self.version = Some(version);
    }

    pub(crate) fn clear(&mut self) {
        self.buf.clear();
        self.method_len = 0;
        self.truncated = false;
        self.version = None;
        self.captured.clear();
        self.spans.clear();
        self.subject.clear();
    }

    /// Storage for the client certificate's subject, for `write` to fill (cleared).
    pub(crate) fn set_client_cert_subject(&mut self, write: impl FnOnce(&mut String)) {
        write(&mut self.subject);
    }

    pub(crate) fn client_cert_subject(&self) -> Option<&str> {
        (!self.subject.is_empty()).then_some(self.subject.as_str())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub(crate) fn method(&self) -> &[u8] {
        self.buf.get(..self.method_len).unwrap_or_default()
    }

    pub(crate) fn path(&self) -> &[u8] {
        self.buf.get(self.method_len..).unwrap_or_default()
    }

    /// The target's query, without `?` (`None`: the target has none).
    pub(crate) fn query(&self) -> Option<&[u8]> {
        let path = self.path();
        let at = path.iter().position(|&b| b == b'?')?;
        path.get(at + 1..)
    }

    pub(crate) fn truncated(&self) -> bool {
        self.truncated
    }

    pub(crate) fn version(&self) -> Option<&'static str> {
        self.version
    }

    /// Copies the request's values `plan` captures: `headers` are the request's fields as
    /// sent, `authority` HTTP/2's `:authority` (the host, where it wins over `Host`).
    pub(crate) fn capture_request<'h>(
        &mut self,
        plan: &LogPlan,
        headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
        authority: Option<&[u8]>,
    ) {
        if plan.captures.is_empty() {
            return;
        }
        self.spans.clear();
        self.spans.resize(plan.captures.len(), None);
        self.captured.clear();
        let wants_cookie = plan.captures.iter().any(|c| c.kind == CaptureKind::Cookie);
        if let Some(host) = authority
            && let Some(i) = plan.captures.iter().position(|c| c.kind == CaptureKind::Host)
        {
            self.keep(i, host, plan.capture_limit);
        }
        for (name, value) in headers {
            for (i, c) in plan.captures.iter().enumerate() {
                let wanted = match c.kind {
                    CaptureKind::RequestHeader => name.eq_ignore_ascii_case(&c.name),
                    CaptureKind::Host => name.eq_ignore_ascii_case(b"host"),
                    CaptureKind::ResponseHeader | CaptureKind::Cookie => false,
                };
                if wanted {
                    // A `traceparent` is kept whole whatever the limit: `trace_id` reads it.
                    let limit = if *c.name == *b"traceparent" {
                        plan.capture_limit.max(crate::http::trace::TRACEPARENT_LEN + 1)
                    } else {
                        plan.capture_limit
                    };
                    self.keep(i, value, limit);
                }
            }
            if wants_cookie && name.eq_ignore_ascii_case(b"cookie") {
                self.capture_cookies(plan, value);
            }
        }
    }

    /// Copies the response's fields `plan` captures.
    pub(crate) fn capture_response<'h>(&mut self, plan: &LogPlan, headers: impl Iterator<Item = (&'h [u8], &'h [u8])>) {
        if !plan.captures.iter().any(|c| c.kind == CaptureKind::ResponseHeader) {
            return;
        }
        self.spans.resize(plan.captures.len(), None);
        for (name, value) in headers {
            for (i, c) in plan.captures.iter().enumerate() {
                if c.kind == CaptureKind::ResponseHeader && name.eq_ignore_ascii_case(&c.name) {
                    self.keep(i, value, plan.capture_limit);
                }
            }
        }
    }

    /// `name=value` pairs of one `Cookie` field (RFC 6265 §4.2.1: `; ` between them).
    fn capture_cookies(&mut self, plan: &LogPlan, field: &[u8]) {
        for pair in field.split(|&b| b == b';') {
            let pair = pair.trim_ascii_start();
            let Some(eq) = pair.iter().position(|&b| b == b'=') else {
                continue;
            };
            let (name, value) = (
                pair.get(..eq).unwrap_or_default(),
                pair.get(eq + 1..).unwrap_or_default(),
            );
            for (i, c) in plan.captures.iter().enumerate() {
                if c.kind == CaptureKind::Cookie && *name == *c.name {
                    self.keep(i, value.trim_ascii_end(), plan.capture_limit);
                }
            }
        }
    }

    /// The first value seen for capture `i` is kept (cut at `limit`).
    fn keep(&mut self, i: usize, value: &[u8], limit: usize) {
        let Some(slot) = self.spans.get_mut(i) else {
            return;
        };
        if slot.is_some() {
            return;
        }
        let kept = value.get(..limit).unwrap_or(value);
        *slot = Some(Span {
            start: self.captured.len() as u32,
            len: kept.len() as u32,
            cut: kept.len() < value.len(),
        });
        self.captured.extend_from_slice(kept);
    }

    /// Capture `i`'s value and whether it was cut (`None`: the field never came).
    pub(crate) fn captured(&self, i: usize) -> Option<(&[u8], bool)> {
        let span = (*self.spans.get(i)?)?;
        let start = span.start as usize;
        Some((self.captured.get(start..start + span.len as usize)?, span.cut))
    }
}

/// One field's value, as the JSON and text writers render it.
enum Value<'a> {
    Null,
    /// Bytes from the wire or the config: escaped; `true` appends `...` (cut).
    Bytes(&'a [u8], bool),
    Num(u64),
    Millis(Duration),
    /// `IP:port`; port 0 writes the IP alone.
    Addr(SocketAddr),
    Time(SystemTime),
    /// The termination in words (our own text: printable, no quote).
    Words(Termination),
}

fn value<'a>(e: &'a Entry<'a>, field: Field) -> Value<'a> {
    let s = |v: Option<&'a str>| v.map_or(Value::Null, |v| Value::Bytes(v.as_bytes(), false));
    let ms = |v: Option<Duration>| v.map_or(Value::Null, Value::Millis);
    let t = &e.timings;
    match field {
        Field::Time => Value::Time(e.time),
        Field::Client => Value::Addr(e.client),
        Field::ClientIp => Value::Addr(SocketAddr::new(e.client.ip(), 0)),
        Field::ClientPort => Value::Num(u64::from(e.client.port())),
        Field::Frontend => s(Some(e.frontend)),
        Field::Backend => s(e.backend),
        Field::Server => s(e.server),
        Field::ServerAddress => e.server_address.map_or(Value::Null, Value::Addr),
        Field::Route => s(e.route),
        Field::Method => e.request.map_or(Value::Null, |r| Value::Bytes(r.method(), false)),
        Field::Path => e.request.map_or(Value::Null, |r| Value::Bytes(r.path(), r.truncated())),
        Field::Query => e
            .request
            .and_then(|r| Some((r.query()?, r.truncated())))
            .map_or(Value::Null, |(q, cut)| Value::Bytes(q, cut)),
        Field::Scheme => s(e.scheme),
        Field::Version => s(e.request.and_then(RequestLine::version)),
        Field::Status => Value::Num(u64::from(e.status)),
        Field::BytesToServer => Value::Num(e.bytes_to_server),
        Field::BytesToClient => Value::Num(e.bytes_to_client),
        Field::HeadMs => ms(t.head),
        Field::QueuedMs => ms(t.queued),
        Field::ConnectedMs => ms(t.connected),
        Field::ResponseMs => ms(t.response),
        Field::TotalMs => Value::Millis(t.total),
        Field::Retries => Value::Num(u64::from(e.retries)),
        Field::Termination => Value::Words(e.termination),
        Field::TerminationCode => Value::Bytes(e.termination.as_str().as_bytes(), false),
        Field::TlsVersion => s(e.tls_version),
        Field::TlsCipher => s(e.tls_cipher),
        Field::Sni => s(e.sni),
        Field::ClientCertSubject => s(e
            .client_cert_subject
            .or_else(|| e.request.and_then(RequestLine::client_cert_subject))),
        Field::RequestId => e.request_id.map_or(Value::Null, |id| Value::Bytes(id, false)),
        Field::TraceId(i) => e
            .trace_id
            .or_else(|| {
                let (sent, cut) = e.request?.captured(usize::from(i))?;
                (!cut).then(|| crate::http::trace::trace_id(sent)).flatten()
            })
            .map_or(Value::Null, |id| Value::Bytes(id, false)),
        Field::Captured(i) => e
            .request
            .and_then(|r| r.captured(usize::from(i)))
            .map_or(Value::Null, |(v, cut)| Value::Bytes(v, cut)),
    }
}

/// Appends `e` as a line of `layout`.
pub(crate) fn line(layout: &Layout, e: &Entry<'_>, out: &mut Vec<u8>) {
    match layout {
        Layout::Json(keys) => json(keys, e, out),
        Layout::FixedText => text(e, out),
        Layout::Template(pieces) => template(pieces, e, out),
    }
}

/// Appends `e` as one JSON object of `keys` and a newline.
pub(crate) fn json(keys: &[JsonKey], e: &Entry<'_>, out: &mut Vec<u8>) {
    out.push(b'{');
    for key in keys {
        out.extend_from_slice(&key.prefix);
        match value(e, key.field) {
            Value::Null => out.extend_from_slice(b"null"),
            Value::Bytes(b, cut) => {
                out.push(b'"');
                json_escape(b, out);
                if cut {
                    out.extend_from_slice(b"...");
                }
                out.push(b'"');
            }
            Value::Num(n) => num(n, out),
            Value::Millis(d) => millis(d, out),
            Value::Addr(a) => {
                out.push(b'"');
                addr_or_ip(a, out);
                out.push(b'"');
            }
            Value::Time(t) => {
                out.push(b'"');
                rfc3339(t, out);
                out.push(b'"');
            }
            Value::Words(t) => {
                out.push(b'"');
                words(t, out);
                out.push(b'"');
            }
        }
    }
    out.extend_from_slice(b"}\n");
}

/// Appends `e` as the template's text and a newline: a missing value is `-`; bytes from the
/// wire are escaped as nginx does (`"`, `\`, controls and bytes outside ASCII as `\xHH`; a
/// space stays), so a header can neither end the line nor break out of quotes.
pub(crate) fn template(pieces: &[Piece], e: &Entry<'_>, out: &mut Vec<u8>) {
    for piece in pieces {
        let field = match piece {
            Piece::Literal(text) => {
                out.extend_from_slice(text);
                continue;
            }
            Piece::Field(f) => *f,
        };
        match value(e, field) {
            Value::Null => out.push(b'-'),
            Value::Bytes(b, cut) => {
                quoted_escape(b, out);
                if cut {
                    out.extend_from_slice(b"...");
                }
            }
            Value::Num(n) => num(n, out),
            Value::Millis(d) => millis(d, out),
            Value::Addr(a) => addr_or_ip(a, out),
            Value::Time(t) => rfc3339(t, out),
            Value::Words(t) => words(t, out),
        }
    }
    out.push(b'\n');
}

/// `IP:port`, or the IP alone for port 0 (`client_ip`).
fn addr_or_ip(a: SocketAddr, out: &mut Vec<u8>) {
    if a.port() != 0 {
        return addr(a, out);
    }
    match a.ip() {
        std::net::IpAddr::V4(v4) => ipv4(v4, out),
        std::net::IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// Appends `e` in the text layout (docs/logging.md):
/// `TIME CLIENT FRONTEND BACKEND/SERVER "METHOD PATH" STATUS TO_SERVER TO_CLIENT
/// HEAD/QUEUED/CONNECTED/RESPONSE/TOTAL RETRIES CODE "WORDS" TLS_VERSION SNI`, then
/// ` REQUEST_ID` for a request that has one.
pub(crate) fn text(e: &Entry<'_>, out: &mut Vec<u8>) {
    rfc3339(e.time, out);
    out.push(b' ');
    addr(e.client, out);
    out.push(b' ');
    text_escape(e.frontend.as_bytes(), out);
    out.push(b' ');
    text_escape(e.backend.unwrap_or("-").as_bytes(), out);
    out.push(b'/');
    text_escape(e.server.unwrap_or("-").as_bytes(), out);
    out.extend_from_slice(b" \"");
    match e.request {
        Some(r) => {
            text_escape(r.method(), out);
            out.push(b' ');
            text_escape(r.path(), out);
            if r.truncated() {
                out.extend_from_slice(b"...");
            }
        }
        None => out.push(b'-'),
    }
    out.extend_from_slice(b"\" ");
    for n in [u64::from(e.status), e.bytes_to_server, e.bytes_to_client] {
        num(n, out);
        out.push(b' ');
    }
    let t = &e.timings;
    for (i, value) in [t.head, t.queued, t.connected, t.response, Some(t.total)]
        .into_iter()
        .enumerate()
    {
        if i > 0 {
            out.push(b'/');
        }
        match value {
            Some(d) => millis(d, out),
            None => out.push(b'-'),
        }
    }
    out.push(b' ');
    num(u64::from(e.retries), out);
    out.push(b' ');
    out.extend_from_slice(e.termination.as_str().as_bytes());
    out.extend_from_slice(b" \"");
    words(e.termination, out);
    out.extend_from_slice(b"\" ");
    out.extend_from_slice(e.tls_version.unwrap_or("-").as_bytes());
    out.push(b' ');
    text_escape(e.sni.unwrap_or("-").as_bytes(), out);
    if let Some(id) = e.request_id {
        out.push(b' ');
        text_escape(id, out);
    }
    out.push(b'\n');
}

fn words(t: Termination, out: &mut Vec<u8>) {
    let (who, when) = t.words();
    out.extend_from_slice(who.as_bytes());
    if !when.is_empty() {
        out.extend_from_slice(b" while ");
        out.extend_from_slice(when.as_bytes());
    }
}

/// Milliseconds with three decimals (microsecond resolution).
fn millis(d: Duration, out: &mut Vec<u8>) {
    let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    num(us / 1000, out);
    out.push(b'.');
    padded(us % 1000, 3, out);
}

/// A number in decimal, without `core::fmt` (a log line is written per request).
fn num(n: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// `n` in exactly `width` digits (zero-padded; higher digits of a wider `n` are cut).
fn padded(mut n: u64, width: usize, out: &mut Vec<u8>) {
    let mut digits = [b'0'; 20];
    let width = width.min(digits.len());
    for slot in digits.iter_mut().take(width).rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out.extend_from_slice(digits.get(..width).unwrap_or_default());
}

/// `IP:port` (`[v6]:port`), as `SocketAddr`'s `Display` writes it; IPv4 without `core::fmt`.
fn addr(a: SocketAddr, out: &mut Vec<u8>) {
    match a {
        SocketAddr::V4(v4) => {
            ipv4(*v4.ip(), out);
            out.push(b':');
            num(u64::from(v4.port()), out);
        }
        SocketAddr::V6(_) => {
            let _ = write!(out, "{a}");
        }
    }
}

/// Dotted decimal, without `core::fmt`.
fn ipv4(ip: std::net::Ipv4Addr, out: &mut Vec<u8>) {
    for (i, octet) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            out.push(b'.');
        }
        num(u64::from(octet), out);
    }
}

/// Copies `s` to `out` in runs of bytes `plain` accepts (one copy per run, not a push per
/// byte: a line is written per request), each other byte written by `escaped`.
#[inline]
fn escape_runs(s: &[u8], out: &mut Vec<u8>, plain: impl Fn(u8) -> bool, escaped: impl Fn(u8, &mut Vec<u8>)) {
    let mut rest = s;
    while let Some(at) = rest.iter().position(|&b| !plain(b)) {
        out.extend_from_slice(rest.get(..at).unwrap_or_default());
        if let Some(&b) = rest.get(at) {
            escaped(b, out);
        }
        rest = rest.get(at + 1..).unwrap_or_default();
    }
    out.extend_from_slice(rest);
}

/// `"` and `\` escaped, control bytes and bytes outside ASCII as `\u00XX` (a request
/// target is bytes, not necessarily UTF-8: each byte stands for itself).
fn json_escape(s: &[u8], out: &mut Vec<u8>) {
    escape_runs(
        s,
        out,
        |b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\',
        |b, out| match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            _ => {
                out.extend_from_slice(b"\\u00");
                hex(b, out);
            }
        },
    );
}

/// `\xHH` for a byte a text line must not carry as it is.
fn hex_escaped(b: u8, out: &mut Vec<u8>) {
    out.extend_from_slice(b"\\x");
    hex(b, out);
}

/// `"`, `\`, controls and bytes outside ASCII as `\xHH`, a space kept (a template's values).
fn quoted_escape(s: &[u8], out: &mut Vec<u8>) {
    escape_runs(
        s,
        out,
        |b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\',
        hex_escaped,
    );
}

/// Bytes outside printable ASCII, space, `"` and `\` as `\xHH`: a field never contains a
/// space, so the layout splits on spaces.
fn text_escape(s: &[u8], out: &mut Vec<u8>) {
    escape_runs(
        s,
        out,
        |b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\',
        hex_escaped,
    );
}

fn hex(b: u8, out: &mut Vec<u8>) {
    let digit = |n: u8| if n < 10 { b'0' + n } else { b'a' + n - 10 };
    out.push(digit(b >> 4));
    out.push(digit(b & 0xf));
}

thread_local! {
    /// The last second `rfc3339` wrote, and its text up to the seconds: lines of one
    /// second share it (the calendar is worked out once a second, not once a line).
    static SECOND: std::cell::Cell<(u64, [u8; 19])> = const { std::cell::Cell::new((u64::MAX, [0; 19])) };
}

/// `2026-01-02T03:04:05.678Z`.
pub(crate) fn rfc3339(t: SystemTime, out: &mut Vec<u8>) {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (cached, mut text) = SECOND.with(std::cell::Cell::get);
    if cached != secs {
        let mut fresh = Vec::with_capacity(24);
        calendar(secs, &mut fresh);
        if let Some(head) = fresh.get(..19) {
            text.copy_from_slice(head);
            SECOND.with(|s| s.set((secs, text)));
        }
    }
    out.extend_from_slice(&text);
    out.push(b'.');
    padded(u64::from(since.subsec_millis()), 3, out);
    out.push(b'Z');
}

/// `2026-01-02T03:04:05`: the date and time of `secs` since the epoch.
fn calendar(secs: u64, out: &mut Vec<u8>) {
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let day = secs % 86_400;
    padded(y.max(0) as u64, 4, out);
    let parts = [
        (b'-', u64::from(m), 2),
        (b'-', u64::from(d), 2),
        (b'T', day / 3600, 2),
        (b':', day % 3600 / 60, 2),
        (b':', day % 60, 2),
    ];
    for (sep, n, width) in parts {
        out.push(sep);
        padded(n, width, out);
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn entry(request: Option<&RequestLine>) -> Entry<'_> {
        Entry {
            time: SystemTime::UNIX_EPOCH + Duration::from_millis(1_767_323_045_678),
            client: "127.0.0.1:5000".parse().unwrap(),
            frontend: "fe",
            backend: Some("be"),
            server: Some("a"),
            request,
            status: 504,
            bytes_to_server: 78,
            bytes_to_client: 120,
            timings: Timings {
                head: Some(Duration::from_micros(120)),
                queued: Some(Duration::from_micros(130)),
                connected: Some(Duration::from_micros(300)),
                response: None,
                total: Duration::from_micros(1_000_250),
            },
            retries: 1,
            termination: Termination(*b"sH"),
            ..Entry::blank()
        }
    }

    /// The JSON line with `[log]`'s default keys.
    fn json(e: &Entry<'_>, out: &mut Vec<u8>) {
        line(&LogPlan::default().layout, e, out);
    }

    #[test]
    fn addresses_and_numbers_read_as_display_writes_them() {
        for a in [
            "127.0.0.1:80",
            "10.200.3.4:65535",
            "0.0.0.0:0",
            "[::1]:443",
            "[2001:db8::7]:8080",
        ] {
            let a: SocketAddr = a.parse().unwrap();
            let mut out = Vec::new();
            addr(a, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), a.to_string());
        }
        for (n, width, text) in [(7, 3, "007"), (0, 2, "00"), (2026, 4, "2026"), (999, 3, "999")] {
            let mut out = Vec::new();
            padded(n, width, &mut out);
            assert_eq!(out, text.as_bytes());
        }
        let mut out = Vec::new();
        millis(Duration::from_micros(12_003_045), &mut out);
        assert_eq!(out, b"12003.045");
    }

    #[test]
    fn dates_are_rfc3339_utc_with_millis() {
        let mut out = Vec::new();
        rfc3339(SystemTime::UNIX_EPOCH, &mut out);
        assert_eq!(out, b"1970-01-01T00:00:00.000Z");
        out.clear();
        // 2000-02-29 (a leap day in a century year) 12:34:56.789
        rfc3339(
            SystemTime::UNIX_EPOCH + Duration::from_millis(951_827_696_789),
            &mut out,
        );
        assert_eq!(String::from_utf8(out).unwrap(), "2000-02-29T12:34:56.789Z");
    }

    #[test]
    fn json_lines_are_valid_and_escaped() {
        let mut line = RequestLine::with_capacity();
        line.set(b"GET", b"/a\"b\\c\x01\xff");
        let mut out = Vec::new();
        json(&entry(Some(&line)), &mut out);
        assert_eq!(out.last(), Some(&b'\n'));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["path"], "/a\"b\\c\u{1}\u{ff}");
        assert_eq!(v["time"], "2026-01-02T03:04:05.678Z");
        assert_eq!(v["status"], 504);
        assert_eq!(v["queued_ms"], 0.13);
        assert_eq!(v["response_ms"], serde_json::Value::Null);
        assert_eq!(v["total_ms"], 1000.25);
        assert_eq!(v["termination"], "server timeout while waiting for the response head");
        assert_eq!(v["termination_code"], "sH");
        assert_eq!(v["sni"], serde_json::Value::Null);
        assert_eq!(v["request_id"], serde_json::Value::Null);
        let id = b"0190b3c2-7d4e-7a1b-9c3d-5e6f7a8b9c0d";
        let mut out = Vec::new();
        json(
            &Entry {
                request_id: Some(&id[..]),
                ..entry(None)
            },
            &mut out,
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["request_id"], "0190b3c2-7d4e-7a1b-9c3d-5e6f7a8b9c0d");
    }

    #[test]
    fn long_targets_are_cut_and_marked() {
        let mut line = RequestLine::with_capacity();
        let cap = line.buf.capacity();
        line.set(&[b'M'; 100], &[b'x'; 5000]);
        assert_eq!(line.buf.capacity(), cap, "no growth past the limits");
        assert_eq!(line.method().len(), METHOD_LIMIT);
        let mut out = Vec::new();
        text(&entry(Some(&line)), &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(&format!(" {}...\" ", "x".repeat(PATH_LIMIT))), "{text}");
    }

    #[test]
    fn text_layout_is_fixed() {
        let mut line = RequestLine::with_capacity();
        line.set(b"GET", b"/x y");
        let mut out = Vec::new();
        text(&entry(Some(&line)), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "2026-01-02T03:04:05.678Z 127.0.0.1:5000 fe be/a \"GET /x\\x20y\" 504 78 120 \
             0.120/0.130/0.300/-/1000.250 1 sH \"server timeout while waiting for the response head\" - -\n"
        );
        let mut tcp = entry(None);
        (tcp.status, tcp.termination, tcp.tls_version, tcp.sni) =
            (0, Termination::NORMAL, Some("TLSv1.3"), Some("a.test"));
        let mut out = Vec::new();
        text(&tcp, &mut out);
        let out = String::from_utf8(out).unwrap();
        assert!(
            out.ends_with(" be/a \"-\" 0 78 120 0.120/0.130/0.300/-/1000.250 1 -- \"normal\" TLSv1.3 a.test\n"),
            "{out}"
        );
        let mut out = Vec::new();
        text(
            &Entry {
                request_id: Some(&b"abc-1"[..]),
                ..entry(Some(&line))
            },
            &mut out,
        );
        let out = String::from_utf8(out).unwrap();
        assert!(out.ends_with(" - - abc-1\n"), "the ID last, after the SNI: {out}");
    }

    fn capture_plan(fields: &[&str], limit: usize) -> LogPlan {
        let list: Vec<String> = fields.iter().map(|f| format!("\"{f}\"")).collect();
        let text = format!(
            "[log]\naccess = \"stdout\"\nfields = [{}]\ncapture_limit = {limit}\n[[frontend]]\nname = \"f\"\n\
             bind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n[[backend]]\nname = \"b\"\n\
             [[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:1\"\n",
            list.join(", ")
        );
        crate::config::parse(&text, "t.toml").unwrap().log.plan
    }

    #[test]
    fn captures_keep_the_first_value_cut_at_the_limit() {
        let plan = capture_plan(
            &[
                "header.x-a",
                "cookie.sid",
                "cookie.Other",
                "host",
                "response_header.server",
                "header.x-missing",
            ],
            8,
        );
        let mut line = RequestLine::with_capacity();
        line.set(b"GET", b"/p?q=1&r");
        let headers: [(&[u8], &[u8]); 5] = [
            (b"X-A", b"first"),
            (b"x-a", b"second"),
            (b"Cookie", b"a=1; sid=abcdefghijkl; other=x"),
            (b"cookie", b"Other=y"),
            (b"Host", b"h.example"),
        ];
        line.capture_request(&plan, headers.into_iter(), None);
        line.capture_response(&plan, [(&b"Server"[..], &b"nginx"[..])].into_iter());
        assert_eq!(line.captured(0), Some((&b"first"[..], false)), "the first instance");
        assert_eq!(line.captured(1), Some((&b"abcdefgh"[..], true)), "cut at 8 bytes");
        assert_eq!(
            line.captured(2),
            Some((&b"y"[..], false)),
            "cookie names are case-sensitive"
        );
        assert_eq!(line.captured(3), Some((&b"h.exampl"[..], true)));
        assert_eq!(line.captured(4), Some((&b"nginx"[..], false)));
        assert_eq!(line.captured(5), None);
        assert_eq!(line.query(), Some(&b"q=1&r"[..]));
        // HTTP/2: `:authority` is the host, whatever `host` says.
        line.clear();
        let h2: [(&[u8], &[u8]); 1] = [(b"host", b"other")];
        line.capture_request(&plan, h2.into_iter(), Some(b"a.b"));
        assert_eq!(line.captured(3), Some((&b"a.b"[..], false)));
        assert_eq!(line.captured(0), None, "cleared with the request");
        let mut out = Vec::new();
        let e = Entry {
            request: Some(&line),
            ..Entry::blank()
        };
        super::line(&plan.layout, &e, &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["host"], "a.b");
        assert_eq!(v["header.x-a"], serde_json::Value::Null);
    }

    /// What a client can put in a header value cannot end the line nor break out of its
    /// quotes, in either format.
    #[test]
    fn hostile_values_are_escaped_in_both_formats() {
        let hostile: &[u8] = b"a\"b\\c\r\n{\"x\":1}\x00\x1b[31m\x7f\xff d\te";
        for layout in [
            capture_plan(&["header.x", "path"], 256).layout,
            Layout::Template(vec![
                Piece::Literal(b"\"".to_vec().into()),
                Piece::Field(Field::Captured(0)),
                Piece::Literal(b"\" ".to_vec().into()),
                Piece::Field(Field::Path),
            ]),
        ] {
            let plan = LogPlan {
                layout,
                ..capture_plan(&["header.x"], 256)
            };
            let mut line = RequestLine::with_capacity();
            line.set(b"GET", hostile);
            line.capture_request(&plan, [(&b"x"[..], hostile)].into_iter(), None);
            let e = Entry {
                request: Some(&line),
                ..Entry::blank()
            };
            let mut out = Vec::new();
            super::line(&plan.layout, &e, &mut out);
            assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1, "{out:?}");
            assert_eq!(out.last(), Some(&b'\n'));
            assert!(
                out.iter().all(|&b| b == b'\n' || (0x20..0x7f).contains(&b)),
                "printable: {out:?}"
            );
            let text = String::from_utf8(out.clone()).unwrap();
            match &plan.layout {
                Layout::Json(_) => {
                    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
                    let want: String = hostile.iter().map(|&b| char::from(b)).collect();
                    assert_eq!(v["header.x"], want, "JSON round-trips every byte");
                    assert_eq!(v["path"], want);
                }
                _ => {
                    assert_eq!(
                        text,
                        "\"a\\x22b\\x5cc\\x0d\\x0a{\\x22x\\x22:1}\\x00\\x1b[31m\\x7f\\xff d\\x09e\" \
                         a\\x22b\\x5cc\\x0d\\x0a{\\x22x\\x22:1}\\x00\\x1b[31m\\x7f\\xff d\\x09e\n"
                    );
                    assert_eq!(text.matches('"').count(), 2, "only the template's own quotes");
                }
            }
        }
    }

    #[test]
    fn every_field_has_a_value_in_both_formats() {
        let all: Vec<&str> = crate::config::log_layout::FIELDS.iter().map(|(n, _)| *n).collect();
        let plan = capture_plan(&all, 256);
        let mut line = RequestLine::with_capacity();
        line.set(b"GET", b"/x?y=1");
        line.set_version("HTTP/1.1");
        let e = Entry {
            server_address: Some("127.0.0.1:8080".parse().unwrap()),
            route: Some("api"),
            scheme: Some("https"),
            tls_version: Some("TLSv1.3"),
            tls_cipher: Some("TLS_AES_128_GCM_SHA256"),
            sni: Some("a.example"),
            client_cert_subject: Some("CN=c"),
            request_id: Some(&b"id-1"[..]),
            ..entry(Some(&line))
        };
        let mut out = Vec::new();
        super::line(&plan.layout, &e, &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let want = serde_json::json!({
            "time": "2026-01-02T03:04:05.678Z", "client": "127.0.0.1:5000", "client_ip": "127.0.0.1",
            "client_port": 5000, "frontend": "fe", "backend": "be", "server": "a",
            "server_address": "127.0.0.1:8080", "route": "api", "method": "GET", "path": "/x?y=1",
            "query": "y=1", "scheme": "https", "version": "HTTP/1.1", "status": 504,
            "bytes_to_server": 78, "bytes_to_client": 120, "head_ms": 0.12, "queued_ms": 0.13,
            "connected_ms": 0.3, "response_ms": null, "total_ms": 1000.25, "retries": 1,
            "termination": "server timeout while waiting for the response head",
            "termination_code": "sH", "tls_version": "TLSv1.3", "tls_cipher": "TLS_AES_128_GCM_SHA256",
            "sni": "a.example", "client_cert_subject": "CN=c", "request_id": "id-1"
        });
        assert_eq!(v, want);
        let pieces: Vec<Piece> = crate::config::log_layout::FIELDS
            .iter()
            .flat_map(|(_, f)| [Piece::Field(*f), Piece::Literal(b"|".to_vec().into())])
            .collect();
        let mut out = Vec::new();
        super::line(&Layout::Template(pieces), &e, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "2026-01-02T03:04:05.678Z|127.0.0.1:5000|127.0.0.1|5000|fe|be|a|127.0.0.1:8080|api|GET|/x?y=1|y=1|\
             https|HTTP/1.1|504|78|120|0.120|0.130|0.300|-|1000.250|1|\
             server timeout while waiting for the response head|sH|TLSv1.3|TLS_AES_128_GCM_SHA256|a.example|CN=c|id-1|\n"
        );
    }
}
