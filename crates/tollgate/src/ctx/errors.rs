//! A worker thread's last malformed messages, for `show errors` (HAProxy's error captures).
//!
//! Owns: a ring of the last [`RING`] captures of this thread, requests refused as malformed
//! (per frontend) and responses refused as malformed (per backend and server) together.
//! Each capture keeps up to [`CAPTURE_MAX`] bytes of the message, from its first byte, the
//! offending byte's offset, the error in words, when, and who.
//!
//! Invariants: touched only on the error path (a good request never reaches this module)
//! and only by the owning thread (a `RefCell` in its context; the runtime API asks the
//! thread to copy it out through its inbox). Once the ring is full, a new capture reuses
//! the oldest one's buffer: memory is bounded by `RING × CAPTURE_MAX` per thread.

use std::collections::VecDeque;
use std::net::SocketAddr;

use super::sessions::Names;
use crate::command::show::ErrorCapture;
use crate::ids::ServerId;

/// Captures kept per thread (both sides together; the oldest goes first).
pub(crate) const RING: usize = 32;
/// Bytes kept of one message.
pub(crate) const CAPTURE_MAX: usize = 16 * 1024;

/// Which message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Request,
    Response,
}

/// What the refusing code knows, borrowed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused<'a> {
    pub direction: Direction,
    pub client: SocketAddr,
    pub frontend: usize,
    pub backend: Option<usize>,
    pub server: Option<ServerId>,
    pub error: &'static str,
    pub offset: usize,
    pub bytes: &'a [u8],
    /// The request's ID (`[frontend] request_id`; empty: none, as for a request refused
    /// before it got one).
    pub request_id: &'a [u8],
}

#[derive(Debug)]
struct Capture {
    time_ms: u64,
    direction: Direction,
    client: SocketAddr,
    frontend: usize,
    backend: Option<usize>,
    server: Option<ServerId>,
    error: &'static str,
    offset: usize,
    length: usize,
    bytes: Vec<u8>,
    request_id: Option<Box<str>>,
}

#[derive(Debug, Default)]
pub(crate) struct ErrorRing {
    ring: VecDeque<Capture>,
}

impl ErrorRing {
    /// Keeps a copy of `r` (the oldest capture makes room, and lends its buffer).
    pub(crate) fn record(&mut self, r: Refused<'_>) {
        let mut bytes = match self.ring.len() {
            n if n >= RING => self.ring.pop_front().map(|c| c.bytes).unwrap_or_default(),
            _ => Vec::new(),
        };
        bytes.clear();
        bytes.extend_from_slice(r.bytes.get(..CAPTURE_MAX).unwrap_or(r.bytes));
        let time_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.ring.push_back(Capture {
            time_ms,
            direction: r.direction,
            client: r.client,
            frontend: r.frontend,
            backend: r.backend,
            server: r.server,
            error: r.error,
            offset: r.offset,
            length: r.bytes.len(),
            bytes,
            // `http::request_id` lets only printable ASCII through; lossy all the same.
            request_id: (!r.request_id.is_empty()).then(|| String::from_utf8_lossy(r.request_id).into()),
        });
    }

    /// Every capture, oldest first, for the runtime API.
    pub(crate) fn view(&self, worker: u32, names: &dyn Names) -> Vec<ErrorCapture> {
        self.ring.iter().map(|c| view_of(c, worker, names)).collect()
    }
}

fn view_of(c: &Capture, worker: u32, names: &dyn Names) -> ErrorCapture {
    let (escaped, escaped_offset) = escape(&c.bytes, c.offset);
    ErrorCapture {
        time_ms: c.time_ms,
        generation: 0,
        worker,
        side: match c.direction {
            Direction::Request => "request",
            Direction::Response => "response",
        }
        .to_string(),
        client: c.client.to_string(),
        frontend: names.frontend(c.frontend),
        backend: c.backend.and_then(|b| names.backend(b)),
        server: c.backend.zip(c.server).and_then(|(b, s)| names.server(b, s)),
        error: c.error.to_string(),
        offset: c.offset as u64,
        length: c.length as u64,
        captured: c.bytes.len() as u64,
        escaped,
        escaped_offset,
        request_id: c.request_id.as_deref().map(str::to_string),
    }
}

/// `bytes` printable: ASCII graphic characters and spaces as they are, `\r` `\n` `\t` `\\`,
/// anything else `\xHH`; and where byte `offset` starts in the text.
pub(crate) fn escape(bytes: &[u8], offset: usize) -> (String, u64) {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() + bytes.len() / 8);
    let mut at = None;
    for (i, &b) in bytes.iter().enumerate() {
        if i == offset {
            at = Some(out.len());
        }
        match b {
            b'\r' => out.push_str("\\r"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\\' => out.push_str("\\\\"),
            b' '..=b'~' => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    let at = at.unwrap_or(out.len());
    (out, at as u64)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    struct Plain;
    impl Names for Plain {
        fn frontend(&self, f: usize) -> String {
            format!("fe{f}")
        }
        fn backend(&self, b: usize) -> Option<String> {
            Some(format!("be{b}"))
        }
        fn server(&self, _: usize, s: ServerId) -> Option<String> {
            Some(format!("s{}", s.0))
        }
    }

    fn refused(bytes: &[u8], offset: usize) -> Refused<'_> {
        Refused {
            direction: Direction::Request,
            client: "127.0.0.1:9".parse().unwrap(),
            frontend: 0,
            backend: None,
            server: None,
            error: "bad header name",
            offset,
            bytes,
            request_id: b"",
        }
    }

    #[test]
    fn escaping_marks_the_offending_byte() {
        let (text, at) = escape(b"GET / HTTP/1.1\r\nBa\x01d: x\r\n", 18);
        assert_eq!(text, "GET / HTTP/1.1\\r\\nBa\\x01d: x\\r\\n");
        assert_eq!(&text[at as usize..at as usize + 4], "\\x01");
        assert_eq!(escape(b"ab", 9).1, 2);
    }

    #[test]
    fn the_ring_keeps_the_last_captures_bounded() {
        let mut ring = ErrorRing::default();
        let big = vec![b'a'; CAPTURE_MAX + 100];
        ring.record(refused(&big, 3));
        for i in 0..RING {
            ring.record(refused(format!("GET /{i}").as_bytes(), 1));
        }
        let all = ring.view(0, &Plain);
        assert_eq!(all.len(), RING);
        // The big one was the oldest: gone; the newest is last.
        assert!(all.iter().all(|c| c.length < 100));
        assert_eq!(all[RING - 1].escaped, format!("GET /{}", RING - 1));
        let mut one = ErrorRing::default();
        one.record(refused(&big, 3));
        let c = &one.view(0, &Plain)[0];
        assert_eq!((c.length, c.captured), ((CAPTURE_MAX + 100) as u64, CAPTURE_MAX as u64));
    }
}
