//! HTTP/2 frames (RFC 9113 §4, §6): the 9-byte header, every frame type's parse with the
//! checks its own bytes allow, and the writers of what a server sends.
//!
//! Owns no state: [`parse`] looks at one whole frame (header + payload) and either borrows
//! its parts or names the error RFC 9113 gives it (connection or stream); what depends on
//! the connection's state (stream states, windows, CONTINUATION order) is `conn`'s. Writers
//! append to a caller's `Vec<u8>` and never allocate beyond growing it.

use std::fmt;

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const HEADER_LEN: usize = 9;
/// SETTINGS_MAX_FRAME_SIZE bounds (RFC 9113 §6.5.2).
pub const MIN_MAX_FRAME_SIZE: u32 = 16_384;
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// The largest window (RFC 9113 §6.9.1).
pub const MAX_WINDOW: i64 = (1 << 31) - 1;
/// The initial window every stream and the connection start with (RFC 9113 §6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;

pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    pub const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
}

/// An HTTP/2 error code (RFC 9113 §7); unknown codes are kept as received.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reason(pub u32);

impl Reason {
    pub const NO_ERROR: Reason = Reason(0x0);
    pub const PROTOCOL_ERROR: Reason = Reason(0x1);
    pub const INTERNAL_ERROR: Reason = Reason(0x2);
    pub const FLOW_CONTROL_ERROR: Reason = Reason(0x3);
    pub const SETTINGS_TIMEOUT: Reason = Reason(0x4);
    pub const STREAM_CLOSED: Reason = Reason(0x5);
    pub const FRAME_SIZE_ERROR: Reason = Reason(0x6);
    pub const REFUSED_STREAM: Reason = Reason(0x7);
    pub const CANCEL: Reason = Reason(0x8);
    pub const COMPRESSION_ERROR: Reason = Reason(0x9);
    pub const CONNECT_ERROR: Reason = Reason(0xa);
    pub const ENHANCE_YOUR_CALM: Reason = Reason(0xb);
    pub const INADEQUATE_SECURITY: Reason = Reason(0xc);
    pub const HTTP_1_1_REQUIRED: Reason = Reason(0xd);

    pub fn as_str(self) -> &'static str {
        match self.0 {
            0x0 => "NO_ERROR",
            0x1 => "PROTOCOL_ERROR",
            0x2 => "INTERNAL_ERROR",
            0x3 => "FLOW_CONTROL_ERROR",
            0x4 => "SETTINGS_TIMEOUT",
            0x5 => "STREAM_CLOSED",
            0x6 => "FRAME_SIZE_ERROR",
            0x7 => "REFUSED_STREAM",
            0x8 => "CANCEL",
            0x9 => "COMPRESSION_ERROR",
            0xa => "CONNECT_ERROR",
            0xb => "ENHANCE_YOUR_CALM",
            0xc => "INADEQUATE_SECURITY",
            0xd => "HTTP_1_1_REQUIRED",
            _ => "unknown",
        }
    }
}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:#x})", self.as_str(), self.0)
    }
}

/// A stream identifier (31 bits; 0 is the connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub u32);

impl StreamId {
    pub fn get(self) -> u32 {
        self.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    /// The reserved bit is dropped (RFC 9113 §4.1: ignored on receipt).
    pub stream: u32,
}

impl FrameHeader {
    pub fn parse(b: &[u8]) -> Option<FrameHeader> {
        let &[l0, l1, l2, kind, flags, s0, s1, s2, s3, ..] = b else {
            return None;
        };
        Some(FrameHeader {
            len: u32::from_be_bytes([0, l0, l1, l2]),
            kind,
            flags,
            stream: u32::from_be_bytes([s0, s1, s2, s3]) & 0x7fff_ffff,
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        let [_, l0, l1, l2] = self.len.to_be_bytes();
        out.extend_from_slice(&[l0, l1, l2, self.kind, self.flags]);
        out.extend_from_slice(&self.stream.to_be_bytes());
    }
}

/// What a frame's own bytes prove wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    Connection(Reason, &'static str),
    Stream(u32, Reason, &'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    pub dependency: u32,
    pub exclusive: bool,
    pub weight: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    Data {
        stream: u32,
        end_stream: bool,
        /// The data's place in the payload (padding excluded).
        data: (usize, usize),
    },
    Headers {
        stream: u32,
        end_stream: bool,
        end_headers: bool,
        priority: Option<Priority>,
        fragment: &'a [u8],
    },
    Priority {
        stream: u32,
    },
    RstStream {
        stream: u32,
        code: Reason,
    },
    /// `params` checked: a multiple of 6 bytes, known settings in range; read with [`settings`].
    Settings {
        ack: bool,
        params: &'a [u8],
    },
    Ping {
        ack: bool,
        payload: [u8; 8],
    },
    GoAway {
        last_stream: u32,
        code: Reason,
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    Continuation {
        stream: u32,
        end_headers: bool,
        fragment: &'a [u8],
    },
    /// An extension frame type: ignored (RFC 9113 §4.1).
    Unknown,
}

fn conn(reason: Reason, why: &'static str) -> FrameError {
    FrameError::Connection(reason, why)
}

fn u32_at(p: &[u8], at: usize) -> u32 {
    match p.get(at..at + 4) {
        Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
        _ => 0,
    }
}

/// Strips padding (RFC 9113 §6.1): the payload's content after the pad length byte, or an
/// error when the padding does not fit.
fn unpad(h: &FrameHeader, payload: &[u8]) -> Result<(usize, usize), FrameError> {
    if h.flags & flag::PADDED == 0 {
        return Ok((0, payload.len()));
    }
    let pad = usize::from(
        *payload
            .first()
            .ok_or(conn(Reason::PROTOCOL_ERROR, "padded frame without pad length"))?,
    );
    if pad >= payload.len() {
        return Err(conn(Reason::PROTOCOL_ERROR, "padding longer than the payload"));
    }
    Ok((1, payload.len() - pad))
}

/// Parses one frame; `payload` is exactly `h.len` bytes.
pub fn parse<'a>(h: &FrameHeader, payload: &'a [u8]) -> Result<Frame<'a>, FrameError> {
    let stream = h.stream;
    let need_stream = |what| {
        if stream == 0 {
            Err(conn(Reason::PROTOCOL_ERROR, what))
        } else {
            Ok(())
        }
    };
    let need_conn = |what| {
        if stream != 0 {
            Err(conn(Reason::PROTOCOL_ERROR, what))
        } else {
            Ok(())
        }
    };
    match h.kind {
        kind::DATA => {
            need_stream("DATA on stream 0")?;
            let data = unpad(h, payload)?;
            Ok(Frame::Data {
                stream,
                end_stream: h.flags & flag::END_STREAM != 0,
                data,
            })
        }
        kind::HEADERS => {
            need_stream("HEADERS on stream 0")?;
            let (mut start, end) = unpad(h, payload)?;
            let mut priority = None;
            if h.flags & flag::PRIORITY != 0 {
                if end < start + 5 {
                    return Err(conn(Reason::FRAME_SIZE_ERROR, "HEADERS too short for its priority"));
                }
                let dep = u32_at(payload, start);
                priority = Some(Priority {
                    dependency: dep & 0x7fff_ffff,
                    exclusive: dep & 0x8000_0000 != 0,
                    weight: payload.get(start + 4).copied().unwrap_or(0),
                });
                start += 5;
            }
            Ok(Frame::Headers {
                stream,
                end_stream: h.flags & flag::END_STREAM != 0,
                end_headers: h.flags & flag::END_HEADERS != 0,
                priority,
                fragment: payload.get(start..end).unwrap_or_default(),
            })
        }
        kind::PRIORITY => {
            need_stream("PRIORITY on stream 0")?;
            if payload.len() != 5 {
                return Err(FrameError::Stream(
                    stream,
                    Reason::FRAME_SIZE_ERROR,
                    "PRIORITY not 5 bytes",
                ));
            }
            if u32_at(payload, 0) & 0x7fff_ffff == stream {
                return Err(FrameError::Stream(
                    stream,
                    Reason::PROTOCOL_ERROR,
                    "stream depends on itself",
                ));
            }
            Ok(Frame::Priority { stream })
        }
        kind::RST_STREAM => {
            need_stream("RST_STREAM on stream 0")?;
            if payload.len() != 4 {
                return Err(conn(Reason::FRAME_SIZE_ERROR, "RST_STREAM not 4 bytes"));
            }
            Ok(Frame::RstStream {
                stream,
                code: Reason(u32_at(payload, 0)),
            })
        }
        kind::SETTINGS => {
            need_conn("SETTINGS on a stream")?;
            let ack = h.flags & flag::ACK != 0;
            if ack && !payload.is_empty() {
                return Err(conn(Reason::FRAME_SIZE_ERROR, "SETTINGS ack with a payload"));
            }
            if !payload.len().is_multiple_of(6) {
                return Err(conn(Reason::FRAME_SIZE_ERROR, "SETTINGS not a multiple of 6 bytes"));
            }
            for (id, value) in settings(payload) {
                check_setting(id, value)?;
            }
            Ok(Frame::Settings { ack, params: payload })
        }
        kind::PUSH_PROMISE => Err(conn(Reason::PROTOCOL_ERROR, "PUSH_PROMISE from a client")),
        kind::PING => {
            need_conn("PING on a stream")?;
            let Ok(payload) = <[u8; 8]>::try_from(payload) else {
                return Err(conn(Reason::FRAME_SIZE_ERROR, "PING not 8 bytes"));
            };
            Ok(Frame::Ping {
                ack: h.flags & flag::ACK != 0,
                payload,
            })
        }
        kind::GOAWAY => {
            need_conn("GOAWAY on a stream")?;
            if payload.len() < 8 {
                return Err(conn(Reason::FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes"));
            }
            Ok(Frame::GoAway {
                last_stream: u32_at(payload, 0) & 0x7fff_ffff,
                code: Reason(u32_at(payload, 4)),
            })
        }
        kind::WINDOW_UPDATE => {
            if payload.len() != 4 {
                return Err(conn(Reason::FRAME_SIZE_ERROR, "WINDOW_UPDATE not 4 bytes"));
            }
            let increment = u32_at(payload, 0) & 0x7fff_ffff;
            if increment == 0 {
                return Err(if stream == 0 {
                    conn(Reason::PROTOCOL_ERROR, "connection WINDOW_UPDATE of 0")
                } else {
                    FrameError::Stream(stream, Reason::PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
                });
            }
            Ok(Frame::WindowUpdate { stream, increment })
        }
        kind::CONTINUATION => {
            need_stream("CONTINUATION on stream 0")?;
            Ok(Frame::Continuation {
                stream,
                end_headers: h.flags & flag::END_HEADERS != 0,
                fragment: payload,
            })
        }
        _ => Ok(Frame::Unknown),
    }
}

/// RFC 9113 §6.5.2 (and RFC 8441 §3 for ENABLE_CONNECT_PROTOCOL); unknown settings pass.
fn check_setting(id: u16, value: u32) -> Result<(), FrameError> {
    match id {
        setting::ENABLE_PUSH | setting::ENABLE_CONNECT_PROTOCOL if value > 1 => {
            Err(conn(Reason::PROTOCOL_ERROR, "boolean setting not 0 or 1"))
        }
        setting::INITIAL_WINDOW_SIZE if i64::from(value) > MAX_WINDOW => Err(conn(
            Reason::FLOW_CONTROL_ERROR,
            "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
        )),
        setting::MAX_FRAME_SIZE if !(MIN_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&value) => {
            Err(conn(Reason::PROTOCOL_ERROR, "SETTINGS_MAX_FRAME_SIZE out of range"))
        }
        _ => Ok(()),
    }
}

/// The (identifier, value) pairs of a SETTINGS payload.
pub fn settings(params: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    params.chunks_exact(6).map(|p| match *p {
        [a, b, c, d, e, f] => (u16::from_be_bytes([a, b]), u32::from_be_bytes([c, d, e, f])),
        _ => (0, 0),
    })
}

pub fn write_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    FrameHeader {
        len: len as u32,
        kind,
        flags,
        stream,
    }
    .write(out);
}

pub fn write_settings(out: &mut Vec<u8>, params: &[(u16, u32)]) {
    write_header(out, params.len() * 6, kind::SETTINGS, 0, 0);
    for &(id, value) in params {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub fn write_settings_ack(out: &mut Vec<u8>) {
    write_header(out, 0, kind::SETTINGS, flag::ACK, 0);
}

pub fn write_ping(out: &mut Vec<u8>, ack: bool, payload: [u8; 8]) {
    write_header(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.extend_from_slice(&payload);
}

pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: Reason) {
    write_header(out, 8, kind::GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&code.0.to_be_bytes());
}

pub fn write_rst_stream(out: &mut Vec<u8>, stream: u32, code: Reason) {
    write_header(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&code.0.to_be_bytes());
}

pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    write_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

pub fn write_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end_stream: bool) {
    write_header(
        out,
        data.len(),
        kind::DATA,
        if end_stream { flag::END_STREAM } else { 0 },
        stream,
    );
    out.extend_from_slice(data);
}

/// A header block as HEADERS + CONTINUATION frames of at most `max_frame` payload bytes.
pub fn write_header_block(out: &mut Vec<u8>, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let mut chunks = block.chunks(max_frame.max(1));
    let first = chunks.next().unwrap_or_default();
    let mut rest = chunks.peekable();
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if rest.peek().is_none() {
        flags |= flag::END_HEADERS;
    }
    write_header(out, first.len(), kind::HEADERS, flags, stream);
    out.extend_from_slice(first);
    while let Some(chunk) = rest.next() {
        let flags = if rest.peek().is_none() { flag::END_HEADERS } else { 0 };
        write_header(out, chunk.len(), kind::CONTINUATION, flags, stream);
        out.extend_from_slice(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Result<Frame<'_>, FrameError> {
        let h = FrameHeader {
            len: payload.len() as u32,
            kind,
            flags,
            stream,
        };
        let mut out = Vec::new();
        h.write(&mut out);
        assert_eq!(FrameHeader::parse(&out), Some(h));
        parse(&h, payload)
    }

    fn conn_err(r: Result<Frame<'_>, FrameError>) -> Reason {
        match r {
            Err(FrameError::Connection(reason, _)) => reason,
            other => panic!("not a connection error: {other:?}"),
        }
    }

    #[test]
    fn validation() {
        use Reason as R;
        assert_eq!(conn_err(frame(kind::DATA, 0, 0, b"x")), R::PROTOCOL_ERROR);
        assert_eq!(
            conn_err(frame(kind::DATA, flag::PADDED, 1, &[3, 1, 2])),
            R::PROTOCOL_ERROR
        );
        assert_eq!(conn_err(frame(kind::DATA, flag::PADDED, 1, &[])), R::PROTOCOL_ERROR);
        assert_eq!(
            frame(kind::DATA, flag::PADDED, 1, &[1, 7, 0]),
            Ok(Frame::Data {
                stream: 1,
                end_stream: false,
                data: (1, 2)
            })
        );
        assert_eq!(
            conn_err(frame(kind::HEADERS, flag::PRIORITY, 1, &[0, 0, 0])),
            R::FRAME_SIZE_ERROR
        );
        assert_eq!(
            frame(kind::PRIORITY, 0, 3, &[0, 0, 0, 3, 16]),
            Err(FrameError::Stream(3, R::PROTOCOL_ERROR, "stream depends on itself"))
        );
        assert!(matches!(
            frame(kind::PRIORITY, 0, 3, &[0, 0, 0, 1]),
            Err(FrameError::Stream(3, R::FRAME_SIZE_ERROR, _))
        ));
        assert_eq!(conn_err(frame(kind::RST_STREAM, 0, 1, &[0, 0, 0])), R::FRAME_SIZE_ERROR);
        assert_eq!(
            conn_err(frame(kind::SETTINGS, flag::ACK, 0, &[0; 6])),
            R::FRAME_SIZE_ERROR
        );
        assert_eq!(conn_err(frame(kind::SETTINGS, 0, 0, &[0; 5])), R::FRAME_SIZE_ERROR);
        assert_eq!(conn_err(frame(kind::SETTINGS, 0, 1, &[])), R::PROTOCOL_ERROR);
        assert_eq!(
            conn_err(frame(kind::SETTINGS, 0, 0, &[0, 2, 0, 0, 0, 2])),
            R::PROTOCOL_ERROR
        );
        assert_eq!(
            conn_err(frame(kind::SETTINGS, 0, 0, &[0, 4, 0x80, 0, 0, 0])),
            R::FLOW_CONTROL_ERROR
        );
        assert_eq!(
            conn_err(frame(kind::SETTINGS, 0, 0, &[0, 5, 0, 0, 0x3f, 0xff])),
            R::PROTOCOL_ERROR
        );
        assert_eq!(
            conn_err(frame(kind::SETTINGS, 0, 0, &[0, 5, 1, 0, 0, 0])),
            R::PROTOCOL_ERROR
        );
        assert!(
            frame(
                kind::SETTINGS,
                0,
                0,
                &[0, 0x77, 1, 0, 0, 0, 0, 4, 0x7f, 0xff, 0xff, 0xff]
            )
            .is_ok()
        );
        assert_eq!(conn_err(frame(kind::PUSH_PROMISE, 0, 1, &[0; 4])), R::PROTOCOL_ERROR);
        assert_eq!(conn_err(frame(kind::PING, 0, 0, &[0; 7])), R::FRAME_SIZE_ERROR);
        assert_eq!(conn_err(frame(kind::PING, 0, 1, &[0; 8])), R::PROTOCOL_ERROR);
        assert_eq!(conn_err(frame(kind::GOAWAY, 0, 0, &[0; 7])), R::FRAME_SIZE_ERROR);
        assert_eq!(conn_err(frame(kind::WINDOW_UPDATE, 0, 0, &[0; 4])), R::PROTOCOL_ERROR);
        assert_eq!(conn_err(frame(kind::WINDOW_UPDATE, 0, 1, &[0; 5])), R::FRAME_SIZE_ERROR);
        assert!(matches!(
            frame(kind::WINDOW_UPDATE, 0, 1, &[0x80, 0, 0, 0]),
            Err(FrameError::Stream(1, R::PROTOCOL_ERROR, _))
        ));
        assert_eq!(conn_err(frame(kind::CONTINUATION, 0, 0, &[])), R::PROTOCOL_ERROR);
        assert_eq!(frame(0xfa, 0xff, 0, b"whatever"), Ok(Frame::Unknown));
    }

    #[test]
    fn header_block_split() {
        let block: Vec<u8> = (0..40u8).collect();
        let mut out = Vec::new();
        write_header_block(&mut out, 5, &block, true, 16);
        let mut at = 0;
        let mut got = Vec::new();
        let mut kinds = Vec::new();
        while at < out.len() {
            let h = FrameHeader::parse(&out[at..]).unwrap();
            kinds.push((h.kind, h.flags, h.len));
            got.extend_from_slice(&out[at + 9..at + 9 + h.len as usize]);
            at += 9 + h.len as usize;
        }
        assert_eq!(got, block);
        assert_eq!(
            kinds,
            [
                (kind::HEADERS, flag::END_STREAM, 16),
                (kind::CONTINUATION, 0, 16),
                (kind::CONTINUATION, flag::END_HEADERS, 8)
            ]
        );
    }
}
