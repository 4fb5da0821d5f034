//! The rest of a Content-Length body moved by splice(2) (`[frontend.splice]`), in either
//! direction of an HTTP/1 exchange between two plain sockets: the head is parsed and
//! rewritten in user space as always, the body bytes read with it are written from the
//! buffer, and only then does the rest go socket → pipe → socket.
//!
//! Owns: which bodies go by splice (`wanted`: a Content-Length above `after_bytes`; chunked
//! and close-delimited bodies stay in user space, their framing has to be read), getting a
//! pipe and both sockets (`Splicer::start`), and one move's counting (`Splicer::poll_move`):
//! the destination's counting writer and the stream's tally (`SpliceEnd::spliced_into`, so
//! `bytes_to_client`/`bytes_to_server` and the stream record stay exact), the idle
//! watchdog's progress, `bytes_spliced`, `http_bytes_spliced`, `http_bodies_spliced`.
//!
//! Invariants: a splice starts only when the source's userspace buffer holds none of the
//! body, and moves exactly what the tracker says is left (`relay::splice::Exact`), so the
//! next message on either socket — a pipelined request, the next response, bytes a server
//! sent past its Content-Length — is left for the parser. The tracker is advanced by what
//! reached the destination, so a source that closes early is a truncated body exactly as
//! on the copy path. A pipe is pooled again only drained (`relay::pipes`).

use std::io;
use std::rc::Rc;
use std::task::{Context, Poll, ready};

use super::exchange::BodyError;
use crate::config::model::Offload;
use crate::http::h1::{BodyFraming, BodyTracker};
use crate::relay::idle::Progress;
use crate::relay::pipes::PipePool;
use crate::relay::splice::{Exact, SpliceEnd, SpliceFailed, Spliced};
use crate::stats::WorkerStats;

/// Splice steps one poll may take before it yields: a fast pair of sockets never keeps the
/// worker from its other sessions for more than a few pipes' worth.
const STEPS_PER_POLL: u32 = 32;

/// Whether a body framed so goes by splice (when both its ends are plain sockets): a known
/// length above `after_bytes`. A body of `after_bytes` or less is copied: as in TCP mode,
/// nothing short pays for a pipe, and the length says it at the head.
pub(super) fn wanted(splice: Offload, framing: BodyFraming) -> bool {
    splice.enabled && matches!(framing, BodyFraming::ContentLength(n) if n > splice.after_bytes)
}

/// What a body transfer needs to splice: the worker's pipes and counters.
#[derive(Clone, Copy)]
pub(super) struct Splicer<'a> {
    pub(super) pipes: &'a Rc<PipePool>,
    pub(super) stats: &'a WorkerStats,
}

impl Splicer<'_> {
    /// A pipe for the rest of the body `tracker` follows, both sockets made ready for it:
    /// `None` when an end is not a plain socket, nothing is left, or no pipe is free (the
    /// caller copies, and may ask again after its next read).
    pub(super) fn start<R: SpliceEnd, W: SpliceEnd>(
        &self,
        src: &mut R,
        dst: &mut W,
        tracker: &BodyTracker,
    ) -> Option<Exact> {
        let left = tracker.length_left().filter(|&n| n > 0)?;
        if !(src.is_plain() && dst.is_plain()) {
            return None;
        }
        let pipe = self.pipes.try_get()?;
        src.splice_socket()?;
        dst.splice_socket()?;
        self.stats.http_bodies_spliced.add(1);
        Some(Exact::new(pipe, left))
    }

    /// Moves `exact` on until it is done (`Ready(Ok)`), an end would block (`Pending`, a
    /// wakeup registered) or fails: `Read` for the source, `Write` for the destination,
    /// `Framing` (truncated) for a source that closed before the body's end.
    pub(super) fn poll_move<R: SpliceEnd, W: SpliceEnd>(
        &self,
        cx: &mut Context<'_>,
        exact: &mut Exact,
        src: &mut R,
        dst: &mut W,
        tracker: &mut BodyTracker,
        progress: &Progress,
    ) -> Poll<Result<(), BodyError>> {
        for _ in 0..STEPS_PER_POLL {
            if exact.is_done() {
                return Poll::Ready(Ok(()));
            }
            let (Some(s), Some(d)) = (src.splice_socket(), dst.splice_socket()) else {
                return Poll::Ready(Err(BodyError::Read(io::Error::other("splice: an end lost its socket"))));
            };
            match ready!(exact.poll_step(cx, s, d)) {
                Ok(Spliced::In(_)) => {}
                Ok(Spliced::Out(0)) => return Poll::Ready(Err(BodyError::Write(io::ErrorKind::WriteZero.into()))),
                Ok(Spliced::Out(n)) => {
                    dst.spliced_into(n);
                    self.stats.bytes_spliced.add(n as u64);
                    self.stats.http_bytes_spliced.add(n as u64);
                    progress.moved(n);
                    tracker.skip_length(n as u64);
                }
                Ok(Spliced::Eof) => return Poll::Ready(tracker.on_eof().map_err(BodyError::Framing)),
                Err(SpliceFailed::Source(e)) => return Poll::Ready(Err(BodyError::Read(e))),
                Err(SpliceFailed::Destination(e)) => return Poll::Ready(Err(BodyError::Write(e))),
            }
        }
        if exact.is_done() {
            return Poll::Ready(Ok(()));
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
