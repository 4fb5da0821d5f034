//! Flood defenses below the h2 codec: a thin IO wrapper that reads only frame headers (9
//! bytes each, RFC 9113 4.1) of what the client sends and of what tollgate sends, and counts
//! what floods are made of, per connection, within `http2.flood_window`.
//!
//! Owns: [`Scanner`] (sans-io, split-invariant frame-header reader), [`Budgets`] (the counts
//! and limits of one connection), [`Guarded`] (the IO wrapper). Invariants: a count only
//! moves forward within a window; once a limit is passed the connection is *tripped* for
//! good: the wrapper stops handing client bytes to the codec (nothing more of the flood is
//! parsed or buffered) and the connection task sends GOAWAY `ENHANCE_YOUR_CALM` and closes.
//! Header blocks are bounded here in bytes and frames before h2 buffers them (CONTINUATION
//! floods): the block in progress is counted frame by frame as its headers arrive.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::config::model::Http2;
use crate::stats::WorkerStats;

/// The client connection preface, which precedes the client's first frame.
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const WINDOW_UPDATE: u8 = 0x8;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// What a connection was closed for (also the name of its counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flood {
    /// Streams reset by the client faster than served (CVE-2023-44487).
    ClientResets,
    /// Streams tollgate had to reset because of what the client sent (CVE-2025-8671).
    ServerResets,
    Pings,
    Settings,
    EmptyData,
    Priority,
    WindowUpdates,
    /// A header block past `max_header_block_size` or `max_header_block_frames`
    /// (CONTINUATION flood, CVE-2024-27316 family).
    HeaderBlock,
}

impl Flood {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Flood::ClientResets => "rapid reset",
            Flood::ServerResets => "server-provoked resets",
            Flood::Pings => "PING flood",
            Flood::Settings => "SETTINGS flood",
            Flood::EmptyData => "empty DATA flood",
            Flood::Priority => "PRIORITY flood",
            Flood::WindowUpdates => "WINDOW_UPDATE flood",
            Flood::HeaderBlock => "header block too large (CONTINUATION flood)",
        }
    }
}

/// One frame header as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHead {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
}

/// Reads frame headers out of a byte stream however it is split, skipping payloads.
#[derive(Debug, Default)]
pub(crate) struct Scanner {
    /// Bytes of the preface still to skip (client side only).
    preface: usize,
    head: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to skip.
    skip: u64,
}

impl Scanner {
    pub(crate) fn client() -> Self {
        Scanner {
            preface: PREFACE.len(),
            ..Scanner::default()
        }
    }

    pub(crate) fn server() -> Self {
        Scanner::default()
    }

    /// Feeds `bytes`; calls `on_frame` for every frame header completed in them.
    pub(crate) fn feed(&mut self, mut bytes: &[u8], mut on_frame: impl FnMut(FrameHead)) {
        while !bytes.is_empty() {
            if self.preface > 0 {
                let n = self.preface.min(bytes.len());
                self.preface -= n;
                bytes = bytes.get(n..).unwrap_or_default();
                continue;
            }
            if self.skip > 0 {
                let n = usize::try_from(self.skip).unwrap_or(usize::MAX).min(bytes.len());
                self.skip -= n as u64;
                bytes = bytes.get(n..).unwrap_or_default();
                continue;
            }
            let n = (9 - self.have).min(bytes.len());
            if let (Some(dst), Some(src)) = (self.head.get_mut(self.have..self.have + n), bytes.get(..n)) {
                dst.copy_from_slice(src);
            }
            self.have += n;
            bytes = bytes.get(n..).unwrap_or_default();
            if self.have == 9 {
                self.have = 0;
                let [l0, l1, l2, kind, flags, ..] = self.head;
                let len = u32::from_be_bytes([0, l0, l1, l2]);
                self.skip = u64::from(len);
                on_frame(FrameHead { len, kind, flags });
            }
        }
    }
}

/// Counts of one connection in the current window, against `http2`'s limits.
#[derive(Debug)]
pub(crate) struct Budgets {
    limits: Http2,
    window_start: Instant,
    client_resets: u32,
    server_resets: u32,
    pings: u32,
    settings: u32,
    empty_data: u32,
    priority: u32,
    window_updates: u32,
    /// The header block in progress (client side): bytes and frames so far.
    block: Option<(u32, u32)>,
}

impl Budgets {
    pub(crate) fn new(limits: Http2, now: Instant) -> Self {
        Budgets {
            limits,
            window_start: now,
            client_resets: 0,
            server_resets: 0,
            pings: 0,
            settings: 0,
            empty_data: 0,
            priority: 0,
            window_updates: 0,
            block: None,
        }
    }

    fn roll(&mut self, now: Instant) {
        if now.saturating_duration_since(self.window_start) >= self.limits.flood_window {
            let block = self.block;
            *self = Budgets::new(self.limits, now);
            self.block = block;
        }
    }

    /// A frame from the client; `Some` when it passes a limit.
    pub(crate) fn on_client_frame(&mut self, f: FrameHead, now: Instant) -> Option<Flood> {
        self.roll(now);
        let l = self.limits;
        let over = |n: &mut u32, max: u32, flood| {
            *n = n.saturating_add(1);
            (*n > max).then_some(flood)
        };
        match f.kind {
            DATA if f.len == 0 && f.flags & END_STREAM == 0 => {
                over(&mut self.empty_data, l.max_empty_data, Flood::EmptyData)
            }
            HEADERS | PUSH_PROMISE => {
                self.block = Some((0, 0));
                self.header_fragment(f)
            }
            CONTINUATION => self.header_fragment(f),
            PRIORITY => over(&mut self.priority, l.max_priority, Flood::Priority),
            RST_STREAM => over(&mut self.client_resets, l.max_client_resets, Flood::ClientResets),
            SETTINGS => over(&mut self.settings, l.max_settings, Flood::Settings),
            PING => over(&mut self.pings, l.max_pings, Flood::Pings),
            WINDOW_UPDATE => over(&mut self.window_updates, l.max_window_updates, Flood::WindowUpdates),
            _ => None,
        }
    }

    /// HEADERS or CONTINUATION: the block grows by this frame; ends with END_HEADERS.
    fn header_fragment(&mut self, f: FrameHead) -> Option<Flood> {
        let (bytes, frames) = self.block.unwrap_or((0, 0));
        let (bytes, frames) = (bytes.saturating_add(f.len), frames.saturating_add(1));
        self.block = if f.flags & END_HEADERS != 0 {
            None
        } else {
            Some((bytes, frames))
        };
        let l = &self.limits;
        (bytes > l.max_header_block_size || frames > l.max_header_block_frames).then_some(Flood::HeaderBlock)
    }

    /// A frame tollgate sends; `Some` when the client made it reset too many streams.
    pub(crate) fn on_server_frame(&mut self, f: FrameHead, now: Instant) -> Option<Flood> {
        self.roll(now);
        if f.kind != RST_STREAM {
            return None;
        }
        self.server_resets = self.server_resets.saturating_add(1);
        (self.server_resets > self.limits.max_server_resets).then_some(Flood::ServerResets)
    }
}

/// What the connection task and the wrapper share.
#[derive(Default)]
pub(crate) struct Trip {
    flood: Cell<Option<Flood>>,
    waker: Cell<Option<Waker>>,
    /// A GOAWAY was written and flushed since (the closing connection may go).
    goaway_flushed: Cell<bool>,
    goaway_waker: Cell<Option<Waker>>,
}

impl Trip {
    pub(crate) fn get(&self) -> Option<Flood> {
        self.flood.get()
    }

    fn set(&self, flood: Flood) {
        if self.flood.get().is_none() {
            self.flood.set(Some(flood));
        }
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Resolves once a GOAWAY frame left (written and flushed).
    pub(crate) fn goaway_flushed(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(|cx| {
            if self.goaway_flushed.get() {
                Poll::Ready(())
            } else {
                self.goaway_waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
    }

    /// Resolves once the connection is tripped.
    pub(crate) fn tripped(&self) -> impl Future<Output = Flood> + '_ {
        std::future::poll_fn(|cx| match self.flood.get() {
            Some(f) => Poll::Ready(f),
            None => {
                self.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
    }
}

/// The client connection as h2 sees it: every frame header counted on the way in and out.
pub(crate) struct Guarded<T> {
    io: T,
    inbound: Scanner,
    outbound: Scanner,
    budgets: Budgets,
    trip: Rc<Trip>,
    /// `bytes_to_client` counts every byte written here (frames as sent).
    stats: Arc<WorkerStats>,
    /// A GOAWAY frame was written; the next completed flush sends it.
    goaway_written: bool,
}

impl<T> Guarded<T> {
    /// `io` as accepted: the client's preface (even when peeked for h2c) is still to read.
    pub(crate) fn new(io: T, limits: Http2, trip: Rc<Trip>, stats: Arc<WorkerStats>) -> Self {
        Guarded {
            io,
            inbound: Scanner::client(),
            outbound: Scanner::server(),
            budgets: Budgets::new(limits, Instant::now()),
            trip,
            stats,
            goaway_written: false,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.trip.get().is_some() {
            // Nothing more of an abusive client is parsed; the connection task closes it.
            return Poll::Pending;
        }
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        let new = buf.filled().get(before..).unwrap_or_default();
        let mut tripped = None;
        if !new.is_empty() {
            let now = Instant::now();
            let budgets = &mut this.budgets;
            this.inbound.feed(new, |f| {
                if tripped.is_none() {
                    tripped = budgets.on_client_frame(f, now);
                }
            });
        }
        match tripped {
            Some(flood) => {
                this.trip.set(flood);
                // What came with the tripping read is not handed over either.
                buf.set_filled(before);
                Poll::Pending
            }
            None => Poll::Ready(Ok(())),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = std::task::ready!(Pin::new(&mut this.io).poll_write(cx, buf))?;
        this.stats.bytes_to_client.add(n as u64);
        let mut tripped = None;
        let now = Instant::now();
        let budgets = &mut this.budgets;
        let goaway = &mut this.goaway_written;
        this.outbound.feed(buf.get(..n).unwrap_or_default(), |f| {
            *goaway |= f.kind == GOAWAY;
            if tripped.is_none() {
                tripped = budgets.on_server_frame(f, now);
            }
        });
        if let Some(flood) = tripped {
            this.trip.set(flood);
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.io).poll_flush(cx);
        if this.goaway_written && matches!(flushed, Poll::Ready(Ok(()))) {
            this.trip.goaway_flushed.set(true);
            if let Some(w) = this.trip.goaway_waker.take() {
                w.wake();
            }
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = len.to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags, 0, 0, 0, 1]);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn scanner_is_split_invariant() {
        let mut wire = PREFACE.to_vec();
        wire.extend(frame(SETTINGS, 0, &[0; 6]));
        wire.extend(frame(HEADERS, END_HEADERS, b"abc"));
        wire.extend(frame(DATA, END_STREAM, &[7; 40]));
        for split in 1..wire.len() {
            let mut s = Scanner::client();
            let mut seen = Vec::new();
            for piece in wire.chunks(split) {
                s.feed(piece, |f| seen.push(f.kind));
            }
            assert_eq!(seen, vec![SETTINGS, HEADERS, DATA], "split {split}");
        }
    }

    #[test]
    fn each_flood_trips_one_past_its_limit() {
        let limits = Http2 {
            max_pings: 3,
            max_empty_data: 2,
            max_client_resets: 4,
            ..Http2::default()
        };
        let now = Instant::now();
        let mut b = Budgets::new(limits, now);
        let ping = FrameHead {
            len: 8,
            kind: PING,
            flags: 0,
        };
        assert_eq!((0..3).filter_map(|_| b.on_client_frame(ping, now)).count(), 0);
        assert_eq!(b.on_client_frame(ping, now), Some(Flood::Pings));
        let empty = FrameHead {
            len: 0,
            kind: DATA,
            flags: 0,
        };
        let last = FrameHead {
            len: 0,
            kind: DATA,
            flags: END_STREAM,
        };
        assert_eq!(
            b.on_client_frame(last, now),
            None,
            "an empty DATA that ends a stream is fine"
        );
        assert_eq!(b.on_client_frame(empty, now), None);
        assert_eq!(b.on_client_frame(empty, now), None);
        assert_eq!(b.on_client_frame(empty, now), Some(Flood::EmptyData));
        // A new window forgets.
        let later = now + limits.flood_window;
        assert_eq!(b.on_client_frame(ping, later), None);
    }

    #[test]
    fn header_blocks_are_bounded_in_frames_and_bytes() {
        let limits = Http2 {
            max_header_block_frames: 3,
            max_header_block_size: 100,
            ..Http2::default()
        };
        let now = Instant::now();
        let mut b = Budgets::new(limits, now);
        let headers = FrameHead {
            len: 10,
            kind: HEADERS,
            flags: 0,
        };
        let cont = FrameHead {
            len: 10,
            kind: CONTINUATION,
            flags: 0,
        };
        assert_eq!(b.on_client_frame(headers, now), None);
        assert_eq!(b.on_client_frame(cont, now), None);
        assert_eq!(b.on_client_frame(cont, now), None);
        assert_eq!(b.on_client_frame(cont, now), Some(Flood::HeaderBlock));
        let mut b = Budgets::new(limits, now);
        let big = FrameHead {
            len: 101,
            kind: HEADERS,
            flags: END_HEADERS,
        };
        assert_eq!(b.on_client_frame(big, now), Some(Flood::HeaderBlock));
        // Ended blocks start over.
        let mut b = Budgets::new(limits, now);
        let whole = FrameHead {
            len: 60,
            kind: HEADERS,
            flags: END_HEADERS,
        };
        for _ in 0..10 {
            assert_eq!(b.on_client_frame(whole, now), None);
        }
    }

    #[test]
    fn server_resets_are_counted_on_the_way_out() {
        let limits = Http2 {
            max_server_resets: 2,
            ..Http2::default()
        };
        let now = Instant::now();
        let mut b = Budgets::new(limits, now);
        let rst = FrameHead {
            len: 4,
            kind: RST_STREAM,
            flags: 0,
        };
        assert_eq!(b.on_server_frame(rst, now), None);
        assert_eq!(
            b.on_server_frame(
                FrameHead {
                    len: 4,
                    kind: DATA,
                    flags: 0
                },
                now
            ),
            None
        );
        assert_eq!(b.on_server_frame(rst, now), None);
        assert_eq!(b.on_server_frame(rst, now), Some(Flood::ServerResets));
    }
}
