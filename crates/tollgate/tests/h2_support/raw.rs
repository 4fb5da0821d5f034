//! A raw HTTP/2 client for tests: frames written by hand over a `TcpStream` (preface,
//! SETTINGS, HEADERS with hand-made HPACK — literals without indexing, so no table — DATA,
//! RST_STREAM, PING, CONTINUATION...), and frames read back one at a time.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const ACK: u8 = 0x1;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HPACK integer with an `n`-bit prefix, first byte's high bits `high`.
fn int(out: &mut Vec<u8>, high: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        out.push(high | v as u8);
        return;
    }
    out.push(high | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// A header block of literals without indexing (new names), no Huffman: bytes go as given.
pub fn block(fields: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in fields {
        out.push(0x00);
        int(&mut out, 0, 7, n.len());
        out.extend_from_slice(n);
        int(&mut out, 0, 7, v.len());
        out.extend_from_slice(v);
    }
    out
}

/// A literal *with* incremental indexing (enters the dynamic table), for table bombs.
pub fn indexed_literal(out: &mut Vec<u8>, n: &[u8], v: &[u8]) {
    out.push(0x40);
    int(out, 0, 7, n.len());
    out.extend_from_slice(n);
    int(out, 0, 7, v.len());
    out.extend_from_slice(v);
}

/// An indexed field (index 62 = the newest dynamic entry).
pub fn indexed(out: &mut Vec<u8>, index: usize) {
    int(out, 0x80, 7, index);
}

/// The usual pseudo-headers of a GET to `authority` `path`.
pub fn get(authority: &str, path: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        (b":method".to_vec(), b"GET".to_vec()),
        (b":scheme".to_vec(), b"http".to_vec()),
        (b":authority".to_vec(), authority.as_bytes().to_vec()),
        (b":path".to_vec(), path.as_bytes().to_vec()),
    ]
}

pub fn headers_frame(stream: u32, fields: &[(Vec<u8>, Vec<u8>)], end_stream: bool) -> Vec<u8> {
    let refs: Vec<(&[u8], &[u8])> = fields.iter().map(|(n, v)| (&n[..], &v[..])).collect();
    let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
    frame(HEADERS, flags, stream, &block(&refs))
}

pub struct Conn {
    pub s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Connects, sends the preface and `settings` (id, value pairs), and ACKs the server's.
    pub fn open(addr: SocketAddr, settings: &[(u16, u32)]) -> Conn {
        let s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        let mut c = Conn { s, buf: Vec::new() };
        let mut payload = Vec::new();
        for (id, v) in settings {
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&v.to_be_bytes());
        }
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &payload));
        hello.extend(frame(SETTINGS, ACK, 0, &[]));
        c.s.write_all(&hello).unwrap();
        c
    }

    /// Writes; a write refused because the proxy closed is not a test failure.
    pub fn send(&mut self, bytes: &[u8]) -> bool {
        self.s.write_all(bytes).is_ok()
    }

    /// The next frame within `limit`, or None (closed, reset, or nothing in time).
    pub fn next(&mut self, limit: Duration) -> Option<Frame> {
        let deadline = Instant::now() + limit;
        loop {
            if self.buf.len() >= 9 {
                let len = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
                if self.buf.len() >= 9 + len {
                    let f = Frame {
                        kind: self.buf[3],
                        flags: self.buf[4],
                        stream: u32::from_be_bytes([self.buf[5], self.buf[6], self.buf[7], self.buf[8]]) & 0x7fff_ffff,
                        payload: self.buf[9..9 + len].to_vec(),
                    };
                    self.buf.drain(..9 + len);
                    return Some(f);
                }
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            self.s
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            let mut chunk = [0u8; 16384];
            match self.s.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Frames until GOAWAY (its error code) or until the connection ends / `limit` passes.
    pub fn goaway(&mut self, limit: Duration) -> Option<u32> {
        let deadline = Instant::now() + limit;
        while let Some(f) = self.next(deadline.saturating_duration_since(Instant::now())) {
            if f.kind == GOAWAY && f.payload.len() >= 8 {
                return Some(u32::from_be_bytes([
                    f.payload[4],
                    f.payload[5],
                    f.payload[6],
                    f.payload[7],
                ]));
            }
        }
        None
    }

    /// How `stream` ended: `Reset(code)`, a response head (its first HPACK byte: 0x88 is an
    /// indexed `:status: 200`), GOAWAY or nothing.
    pub fn outcome(&mut self, stream: u32, limit: Duration) -> Outcome {
        let deadline = Instant::now() + limit;
        while let Some(f) = self.next(deadline.saturating_duration_since(Instant::now())) {
            match f.kind {
                RST_STREAM if f.stream == stream => {
                    return Outcome::Reset(u32::from_be_bytes([
                        f.payload[0],
                        f.payload[1],
                        f.payload[2],
                        f.payload[3],
                    ]));
                }
                HEADERS if f.stream == stream => return Outcome::Head(f.payload.first().copied().unwrap_or(0)),
                GOAWAY => return Outcome::GoAway,
                PING if f.flags & ACK == 0 => {
                    let pong = frame(PING, ACK, 0, &f.payload);
                    self.send(&pong);
                }
                _ => {}
            }
        }
        Outcome::Nothing
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Reset(u32),
    Head(u8),
    GoAway,
    Nothing,
}

impl Outcome {
    /// Refused: reset, closed, or answered with anything but 200.
    pub fn refused(&self) -> bool {
        !matches!(self, Outcome::Head(0x88) | Outcome::Nothing)
    }
}
