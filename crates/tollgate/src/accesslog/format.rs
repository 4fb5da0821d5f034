//! One access log line from one ended stream: the JSON object or the fixed text layout of
//! docs/logging.md, appended to a caller's buffer without allocating (numbers and the
//! date are written digit by digit, strings escaped byte by byte).
//!
//! Invariants: a line is exactly one `\n`-terminated line whatever the input (every byte
//! that could break a line or a field is escaped); the JSON is valid for any input.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

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
    /// HTTP only: the captured method and target (`RequestLine`).
    pub request: Option<&'a RequestLine>,
    pub status: u16,
    pub bytes_to_server: u64,
    pub bytes_to_client: u64,
    pub timings: Timings,
    pub retries: u32,
    pub termination: Termination,
    pub tls_version: Option<&'static str>,
    pub sni: Option<&'a str>,
    /// HTTP: the request's ID, on a frontend with `request_id` (`http::request_id`: only
    /// bytes that need no escaping, escaped all the same).
    pub request_id: Option<&'a [u8]>,
}

/// A request's method and target, copied at head-parse time into storage reused from
/// request to request (`Local::take_line`), bounded by `METHOD_LIMIT` and `PATH_LIMIT`.
#[derive(Debug, Default)]
pub(crate) struct RequestLine {
    buf: Vec<u8>,
    method_len: usize,
    truncated: bool,
}

impl RequestLine {
    pub(crate) fn with_capacity() -> Self {
        RequestLine {
            buf: Vec::with_capacity(METHOD_LIMIT + PATH_LIMIT),
            method_len: 0,
            truncated: false,
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

    pub(crate) fn clear(&mut self) {
        self.buf.clear();
        self.method_len = 0;
        self.truncated = false;
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

    pub(crate) fn truncated(&self) -> bool {
        self.truncated
    }
}

/// Appends `e` as one JSON object and a newline.
pub(crate) fn json(e: &Entry<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"time\":\"");
    rfc3339(e.time, out);
    out.extend_from_slice(b"\",\"client\":\"");
    addr(e.client, out);
    out.extend_from_slice(b"\",\"frontend\":");
    json_str(Some(e.frontend.as_bytes()), out);
    out.extend_from_slice(b",\"backend\":");
    json_str(e.backend.map(str::as_bytes), out);
    out.extend_from_slice(b",\"server\":");
    json_str(e.server.map(str::as_bytes), out);
    out.extend_from_slice(b",\"method\":");
    json_str(e.request.map(RequestLine::method), out);
    out.extend_from_slice(b",\"path\":");
    match e.request {
        Some(r) => {
            out.push(b'"');
            json_escape(r.path(), out);
            if r.truncated() {
                out.extend_from_slice(b"...");
            }
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"status\":");
    num(u64::from(e.status), out);
    out.extend_from_slice(b",\"bytes_to_server\":");
    num(e.bytes_to_server, out);
    out.extend_from_slice(b",\"bytes_to_client\":");
    num(e.bytes_to_client, out);
    let t = &e.timings;
    let fields: [(&[u8], _); 5] = [
        (b",\"head_ms\":", t.head),
        (b",\"queued_ms\":", t.queued),
        (b",\"connected_ms\":", t.connected),
        (b",\"response_ms\":", t.response),
        (b",\"total_ms\":", Some(t.total)),
    ];
    for (name, value) in fields {
        out.extend_from_slice(name);
        match value {
            Some(d) => millis(d, out),
            None => out.extend_from_slice(b"null"),
        }
    }
    out.extend_from_slice(b",\"retries\":");
    num(u64::from(e.retries), out);
    out.extend_from_slice(b",\"termination\":\"");
    words(e.termination, out);
    out.extend_from_slice(b"\",\"termination_code\":");
    json_str(Some(e.termination.as_str().as_bytes()), out);
    out.extend_from_slice(b",\"tls_version\":");
    json_str(e.tls_version.map(str::as_bytes), out);
    out.extend_from_slice(b",\"sni\":");
    json_str(e.sni.map(str::as_bytes), out);
    out.extend_from_slice(b",\"request_id\":");
    json_str(e.request_id, out);
    out.extend_from_slice(b"}\n");
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
            for (i, octet) in v4.ip().octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                num(u64::from(octet), out);
            }
            out.push(b':');
            num(u64::from(v4.port()), out);
        }
        SocketAddr::V6(_) => {
            let _ = write!(out, "{a}");
        }
    }
}

fn json_str(s: Option<&[u8]>, out: &mut Vec<u8>) {
    match s {
        Some(s) => {
            out.push(b'"');
            json_escape(s, out);
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
}

/// `"` and `\` escaped, control bytes and bytes outside ASCII as `\u00XX` (a request
/// target is bytes, not necessarily UTF-8: each byte stands for itself).
fn json_escape(s: &[u8], out: &mut Vec<u8>) {
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x20..=0x7e => out.push(b),
            _ => {
                out.extend_from_slice(b"\\u00");
                hex(b, out);
            }
        }
    }
}

/// Bytes outside printable ASCII, space, `"` and `\` as `\xHH`: a field never contains a
/// space, so the layout splits on spaces.
fn text_escape(s: &[u8], out: &mut Vec<u8>) {
    for &b in s {
        match b {
            b'"' | b'\\' => {
                out.extend_from_slice(b"\\x");
                hex(b, out);
            }
            0x21..=0x7e => out.push(b),
            _ => {
                out.extend_from_slice(b"\\x");
                hex(b, out);
            }
        }
    }
}

fn hex(b: u8, out: &mut Vec<u8>) {
    let digit = |n: u8| if n < 10 { b'0' + n } else { b'a' + n - 10 };
    out.push(digit(b >> 4));
    out.push(digit(b & 0xf));
}

/// `2026-01-02T03:04:05.678Z`.
pub(crate) fn rfc3339(t: SystemTime, out: &mut Vec<u8>) {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let day = secs % 86_400;
    padded(y.max(0) as u64, 4, out);
    let parts = [
        (b'-', u64::from(m), 2),
        (b'-', u64::from(d), 2),
        (b'T', day / 3600, 2),
        (b':', day % 3600 / 60, 2),
        (b':', day % 60, 2),
        (b'.', u64::from(since.subsec_millis()), 3),
    ];
    for (sep, n, width) in parts {
        out.push(sep);
        padded(n, width, out);
    }
    out.push(b'Z');
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
            tls_version: None,
            sni: None,
            request_id: None,
        }
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
}
