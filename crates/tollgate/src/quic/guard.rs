//! A bound on HTTP/3 frames the h3 crate would buffer whole. h3 reads a HEADERS frame (or a
//! SETTINGS, GOAWAY or unknown frame) completely into memory before it decodes it, with no
//! limit of its own, and returning QUIC flow-control credit as it reads: one request with an
//! 8 MiB HEADERS frame costs 8 MiB and, through h3's list of pieces, time quadratic in them
//! (a worker stalled for seconds). So every stream h3 reads passes through [`Guarded`],
//! which reads the HTTP/3 frame headers (RFC 9114 §7.1: type and length, two varints) as the
//! bytes go by and stops the stream with H3_EXCESSIVE_LOAD at the header of a frame over
//! its bound — before its payload is read. DATA frames are streamed by h3 and not bounded
//! here (the bridge's window bounds them).
//!
//! Owns [`GuardedConn`] (h3_quinn's connection, its streams wrapped) and the frame scanner.
//! Invariant: a non-DATA frame longer than its bound is never handed to h3.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use h3::quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, StreamId, WriteBuf};

use crate::stats::WorkerStats;

/// H3_EXCESSIVE_LOAD (RFC 9114 §8.1).
const EXCESSIVE_LOAD: u64 = 0x107;
/// Frames other than DATA and HEADERS (SETTINGS, GOAWAY, MAX_PUSH_ID, unknown and grease
/// types): none needs more.
const OTHER_FRAME_MAX: u64 = 16 * 1024;

/// Where the scanner is in a stream's frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// Reading a frame header: `n` bytes of it so far.
    Header { bytes: [u8; 16], n: usize },
    /// Inside a frame's payload: `left` bytes to pass.
    Payload { left: u64 },
    /// A stream that is not framed (a unidirectional stream's type is read first by h3;
    /// QPACK streams are not HTTP/3 frames): passed as is.
    Opaque,
}

/// The frame scanner of one stream.
#[derive(Debug)]
pub(crate) struct Frames {
    scan: Scan,
    headers_max: u64,
    /// A unidirectional stream: its first varint is the stream type, then frames on a
    /// control stream (type 0x00), nothing to judge on others.
    uni_type_pending: bool,
}

/// A QUIC variable-length integer at the start of `b` (RFC 9000 §16): (value, length), or
/// `None` if `b` is too short.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let len = 1usize << (first >> 6);
    let bytes = b.get(..len)?;
    let mut v = u64::from(first & 0x3f);
    for &x in bytes.iter().skip(1) {
        v = (v << 8) | u64::from(x);
    }
    Some((v, len))
}

impl Frames {
    pub(crate) fn request(headers_max: u64) -> Frames {
        Frames {
            scan: Scan::Header { bytes: [0; 16], n: 0 },
            headers_max,
            uni_type_pending: false,
        }
    }

    pub(crate) fn unidirectional(headers_max: u64) -> Frames {
        Frames {
            uni_type_pending: true,
            ..Frames::request(headers_max)
        }
    }

    /// Follows `data`; `Err` at the header of a frame over its bound.
    pub(crate) fn pass(&mut self, mut data: &[u8]) -> Result<(), ()> {
        // Bounded: each round consumes at least one byte or returns.
        while !data.is_empty() {
            match &mut self.scan {
                Scan::Opaque => return Ok(()),
                Scan::Payload { left } => {
                    let take = usize::try_from(*left).unwrap_or(usize::MAX).min(data.len());
                    *left -= take as u64;
                    data = data.get(take..).unwrap_or_default();
                    if *left == 0 {
                        self.scan = Scan::Header { bytes: [0; 16], n: 0 };
                    }
                }
                Scan::Header { bytes, n } => {
                    let room = bytes.len() - *n;
                    let take = room.min(data.len());
                    if let (Some(to), Some(from)) = (bytes.get_mut(*n..*n + take), data.get(..take)) {
                        to.copy_from_slice(from);
                    }
                    let have = *n + take;
                    let seen = bytes.get(..have).unwrap_or_default();
                    if self.uni_type_pending {
                        let Some((ty, len)) = varint(seen) else {
                            *n = have;
                            return Ok(());
                        };
                        self.uni_type_pending = false;
                        // Only the control stream (0x00) carries frames.
                        if ty != 0 {
                            self.scan = Scan::Opaque;
                            return Ok(());
                        }
                        data = data.get(len.saturating_sub(*n)..).unwrap_or_default();
                        self.scan = Scan::Header { bytes: [0; 16], n: 0 };
                        continue;
                    }
                    let parsed = varint(seen).and_then(|(ty, a)| {
                        let (len, b) = varint(seen.get(a..)?)?;
                        Some((ty, len, a + b))
                    });
                    let Some((ty, len, header_len)) = parsed else {
                        *n = have;
                        return Ok(());
                    };
                    let bound = match ty {
                        0x0 => u64::MAX,
                        0x1 => self.headers_max,
                        _ => OTHER_FRAME_MAX,
                    };
                    if len > bound {
                        return Err(());
                    }
                    data = data.get(header_len.saturating_sub(*n)..).unwrap_or_default();
                    self.scan = if len == 0 {
                        Scan::Header { bytes: [0; 16], n: 0 }
                    } else {
                        Scan::Payload { left: len }
                    };
                }
            }
        }
        Ok(())
    }
}

/// A receiving stream whose frames are judged before h3 sees them.
pub(crate) struct Guarded<R> {
    inner: R,
    frames: Frames,
    stats: Arc<WorkerStats>,
}

impl<R: quic::RecvStream<Buf = Bytes>> quic::RecvStream for Guarded<R> {
    type Buf = Bytes;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        let polled = self.inner.poll_data(cx);
        if let Poll::Ready(Ok(Some(data))) = &polled
            && self.frames.pass(data.chunk()).is_err()
        {
            self.stats.h3_refused.add(1);
            self.inner.stop_sending(EXCESSIVE_LOAD);
            return Poll::Ready(Err(StreamErrorIncoming::StreamTerminated {
                error_code: EXCESSIVE_LOAD,
            }));
        }
        polled
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.inner.stop_sending(error_code);
    }

    fn recv_id(&self) -> StreamId {
        self.inner.recv_id()
    }
}

/// A request stream: its receiving side guarded.
pub(crate) struct GuardedBidi<B: Buf> {
    inner: h3_quinn::BidiStream<B>,
    frames: Frames,
    stats: Arc<WorkerStats>,
}

impl<B: Buf> quic::RecvStream for GuardedBidi<B> {
    type Buf = Bytes;

    fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        let polled = quic::RecvStream::poll_data(&mut self.inner, cx);
        if let Poll::Ready(Ok(Some(data))) = &polled
            && self.frames.pass(data.chunk()).is_err()
        {
            self.stats.h3_refused.add(1);
            quic::RecvStream::stop_sending(&mut self.inner, EXCESSIVE_LOAD);
            return Poll::Ready(Err(StreamErrorIncoming::StreamTerminated {
                error_code: EXCESSIVE_LOAD,
            }));
        }
        polled
    }

    fn stop_sending(&mut self, error_code: u64) {
        quic::RecvStream::stop_sending(&mut self.inner, error_code);
    }

    fn recv_id(&self) -> StreamId {
        quic::RecvStream::recv_id(&self.inner)
    }
}

impl<B: Buf> quic::SendStream<B> for GuardedBidi<B> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        quic::SendStream::poll_ready(&mut self.inner, cx)
    }

    fn send_data<T: Into<WriteBuf<B>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        quic::SendStream::send_data(&mut self.inner, data)
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        quic::SendStream::poll_finish(&mut self.inner, cx)
    }

    fn reset(&mut self, reset_code: u64) {
        quic::SendStream::reset(&mut self.inner, reset_code);
    }

    fn send_id(&self) -> StreamId {
        quic::SendStream::send_id(&self.inner)
    }
}

impl<B: Buf> quic::BidiStream<B> for GuardedBidi<B> {
    type SendStream = h3_quinn::SendStream<B>;
    type RecvStream = Guarded<h3_quinn::RecvStream>;

    fn split(self) -> (Self::SendStream, Self::RecvStream) {
        let (send, recv) = quic::BidiStream::split(self.inner);
        (
            send,
            Guarded {
                inner: recv,
                frames: self.frames,
                stats: self.stats,
            },
        )
    }
}

/// h3_quinn's connection with every stream a client opens guarded; the streams h3 opens
/// itself go through `opener`.
pub(crate) struct GuardedConn {
    inner: h3_quinn::Connection,
    opener: GuardedOpener,
}

impl GuardedConn {
    pub(crate) fn new(conn: quinn::Connection, headers_max: u64, stats: Arc<WorkerStats>) -> Self {
        let inner = h3_quinn::Connection::new(conn);
        let opener = GuardedOpener {
            inner: quic::Connection::<Bytes>::opener(&inner),
            headers_max,
            stats,
        };
        GuardedConn { inner, opener }
    }
}

impl<B: Buf> quic::Connection<B> for GuardedConn {
    type RecvStream = Guarded<h3_quinn::RecvStream>;
    type OpenStreams = GuardedOpener;

    fn poll_accept_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::RecvStream, ConnectionErrorIncoming>> {
        let (headers_max, stats) = (self.opener.headers_max, &self.opener.stats);
        quic::Connection::<B>::poll_accept_recv(&mut self.inner, cx).map_ok(|inner| Guarded {
            inner,
            frames: Frames::unidirectional(headers_max),
            stats: Arc::clone(stats),
        })
    }

    fn poll_accept_bidi(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::BidiStream, ConnectionErrorIncoming>> {
        let (headers_max, stats) = (self.opener.headers_max, &self.opener.stats);
        quic::Connection::<B>::poll_accept_bidi(&mut self.inner, cx).map_ok(|inner| GuardedBidi {
            inner,
            frames: Frames::request(headers_max),
            stats: Arc::clone(stats),
        })
    }

    fn opener(&self) -> Self::OpenStreams {
        self.opener.clone()
    }
}

impl<B: Buf> quic::OpenStreams<B> for GuardedConn {
    type BidiStream = GuardedBidi<B>;
    type SendStream = h3_quinn::SendStream<B>;

    fn poll_open_bidi(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        quic::OpenStreams::<B>::poll_open_bidi(&mut self.opener, cx)
    }

    fn poll_open_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        quic::OpenStreams::<B>::poll_open_send(&mut self.opener, cx)
    }

    fn close(&mut self, code: h3::error::Code, reason: &[u8]) {
        quic::OpenStreams::<B>::close(&mut self.opener, code, reason);
    }
}

/// The stream opener h3 keeps (it opens its control and QPACK streams with it).
pub(crate) struct GuardedOpener {
    inner: h3_quinn::OpenStreams,
    headers_max: u64,
    /// Where refusals are counted (`h3_refused`).
    stats: Arc<WorkerStats>,
}

impl Clone for GuardedOpener {
    fn clone(&self) -> Self {
        GuardedOpener {
            inner: self.inner.clone(),
            headers_max: self.headers_max,
            stats: Arc::clone(&self.stats),
        }
    }
}

impl<B: Buf> quic::OpenStreams<B> for GuardedOpener {
    type BidiStream = GuardedBidi<B>;
    type SendStream = h3_quinn::SendStream<B>;

    fn poll_open_bidi(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        let (headers_max, stats) = (self.headers_max, &self.stats);
        quic::OpenStreams::<B>::poll_open_bidi(&mut self.inner, cx).map_ok(|inner| GuardedBidi {
            inner,
            frames: Frames::request(headers_max),
            stats: Arc::clone(stats),
        })
    }

    fn poll_open_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        quic::OpenStreams::<B>::poll_open_send(&mut self.inner, cx)
    }

    fn close(&mut self, code: h3::error::Code, reason: &[u8]) {
        quic::OpenStreams::<B>::close(&mut self.inner, code, reason);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn frame(ty: u8, len: usize) -> Vec<u8> {
        // Two-byte varints for the length (0x40 prefix), as h3 writes them.
        let mut f = vec![ty, 0x40 | (len >> 8) as u8, len as u8];
        f.resize(3 + len, 0xaa);
        f
    }

    #[test]
    fn frames_within_bounds_pass_in_any_split() {
        let mut all = frame(0x1, 300);
        all.extend(frame(0x0, 5000 & 0x3fff));
        all.extend(frame(0x21, 10));
        all.extend(frame(0x1, 0));
        for split in [1, 2, 3, 7, 1000, all.len()] {
            let mut f = Frames::request(1024);
            for piece in all.chunks(split) {
                assert_eq!(f.pass(piece), Ok(()), "split {split}");
            }
            assert_eq!(f.scan, Scan::Header { bytes: [0; 16], n: 0 });
        }
    }

    #[test]
    fn an_oversized_headers_or_other_frame_is_refused_at_its_header() {
        let mut f = Frames::request(1024);
        assert_eq!(f.pass(&frame(0x1, 2000)[..3]), Err(()));
        let mut f = Frames::request(1 << 20);
        // An unknown (grease) frame type of 20 KiB: over the 16 KiB bound.
        assert_eq!(f.pass(&[0x21, 0x80, 0x00, 0x50, 0x00]), Err(()));
        // DATA is not bounded here.
        let mut f = Frames::request(1024);
        assert_eq!(f.pass(&[0x00, 0xbf, 0xff, 0xff, 0xff]), Ok(()));
    }

    #[test]
    fn a_control_stream_is_judged_after_its_type_and_other_streams_pass() {
        let mut control = Frames::unidirectional(1024);
        assert_eq!(control.pass(&[0x00]), Ok(()));
        assert_eq!(control.pass(&frame(0x4, 8)), Ok(()));
        assert_eq!(control.pass(&[0x21, 0x80, 0x00, 0x50, 0x00]), Err(()));
        // A QPACK encoder stream (type 0x02): instructions, not frames.
        let mut encoder = Frames::unidirectional(1024);
        assert_eq!(encoder.pass(&[0x02, 0x3f, 0xff, 0xff, 0xff, 0x7f]), Ok(()));
    }
}
