//! The relay: one future driving two `Pump` state machines (client → server and server →
//! client) and the idle watchdog, with no inner tasks, joins or per-operation timers.
//!
//! A pump borrows a pooled buffer only while data is in flight: wait until the source is
//! readable, take a buffer, read, write it all, give it back. A read shorter than the buffer
//! means the socket was drained, so readiness is cleared right there and no extra recv()
//! is spent discovering EAGAIN (HAProxy's trick). EOF in one direction becomes
//! shutdown(Write) on the other (half-close; on a TLS side, close_notify first); the relay
//! ends when both directions are done, on the first error, or when the watchdog fires.
//!
//! The direction that finishes second does not shutdown(2) a plain destination (issue 28:
//! one syscall per connection fewer): both sockets are closed as soon as the relay returns,
//! and close(2) sends the FIN (after anything `MSG_MORE` held back) just as shutdown(Write)
//! would. Both sockets' incoming directions have reached EOF by then, so close(2) finds
//! nothing unread and never resets. The pump still reads until a read returns 0: the
//! reactor's read-closed bit can be set while data that came with the FIN is unread, so a
//! short read followed by that bit does not prove the direction drained.
//!
//! When both sides are plain sockets and splice is on (`[frontend.splice]`), a pump switches
//! to splice(2) through a pooled pipe once `after_bytes` moved in its direction (the step is
//! `relay::splice`'s: the pipe is drained fully before the next splice from the source, so
//! WouldBlock on the source always means "socket empty"). Splicing moves the same progress
//! counter, so the idle watchdog keeps working.

use std::future::poll_fn;
use std::io;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::Resources;
use super::endpoint::Endpoint;
use super::idle::Watchdog;
use super::pipes::{PipePool, PooledPipe};
use super::splice::{SpliceFailed, Spliced, splice_step};
use crate::buffer::{BufferPool, Parked, PooledBuffer};
use crate::config::model::Offload;
use crate::error::{Error, ErrorKind, Side};
use crate::stats::Counter;

/// The bytes one relay moved each way (also counted for the worker as they move).
#[derive(Debug, Default)]
pub(crate) struct Moved {
    pub(crate) to_server: Counter,
    pub(crate) to_client: Counter,
}

/// Relays between two endpoints until both directions reached EOF, one failed, or nothing
/// moved for `idle`; `splice` applies when both are plain sockets.
pub(crate) async fn relay_endpoints<C: Endpoint, S: Endpoint>(
    res: Resources<'_>,
    client: &mut C,
    server: &mut S,
    idle: Duration,
    splice: Offload,
    moved: &Moved,
) -> Result<(), Error> {
    let stats = res.stats;
    let splice_at = splice.enabled.then_some(splice.after_bytes);
    let mut upstream = Pump::new(Side::Front, res, (&stats.bytes_to_server, &moved.to_server), splice_at);
    let mut downstream = Pump::new(Side::Back, res, (&stats.bytes_to_client, &moved.to_client), splice_at);
    let mut watchdog = Watchdog::new(idle);
    let mut progress = 0u64;
    let sleep = tokio::time::sleep(watchdog.tick());
    tokio::pin!(sleep);
    poll_fn(|cx| {
        let down = (downstream.holds_buffer(), downstream.is_done());
        let up = upstream.poll(cx, &mut *client, &mut *server, down, &mut progress)?;
        let up_state = (upstream.holds_buffer(), up);
        let down = downstream.poll(cx, &mut *server, &mut *client, up_state, &mut progress)?;
        if up && down {
            return Poll::Ready(Ok(()));
        }
        while sleep.as_mut().poll(cx).is_ready() {
            if watchdog.on_tick(progress) {
                stats.idle_timeouts.add(1);
                return Poll::Ready(Err(Error::new(
                    ErrorKind::IdleTimeout,
                    Side::Front,
                    format!("no data either way for {idle:?}"),
                )));
            }
            sleep.as_mut().reset(tokio::time::Instant::now() + watchdog.tick());
        }
        Poll::Pending
    })
    .await
}

enum PumpState {
    /// Waiting for the source to be readable (no buffer held).
    Reading,
    /// Holding `buf[pos..len]` still to be written to the destination; `last`: the source
    /// already saw its peer's FIN, so this is the direction's last data.
    Writing {
        buf: PooledBuffer,
        pos: usize,
        len: usize,
        last: bool,
    },
    /// A chunk was written; make the destination's layer send it before reading more.
    Flushing,
    /// splice(2) mode: the pipe is empty (`pending == 0`, fill it from the source) or holds
    /// `pending` bytes (drain it into the destination).
    Splicing(PooledPipe),
    /// EOF seen; half-closing the destination.
    ShuttingDown,
    /// EOF seen and the destination half-closed.
    Done,
}

/// One direction of a relay: bytes from the source (on side `from`) to the destination.
struct Pump<'a> {
    state: PumpState,
    from: Side,
    pool: &'a Rc<BufferPool>,
    pipes: &'a Rc<PipePool>,
    /// Bytes moved in this direction, worker-wide.
    counter: &'a Counter,
    /// Bytes moved in this direction by this relay (its stream's record).
    tally: &'a Counter,
    spliced: &'a Counter,
    parked: Parked,
    /// Bytes this pump moved.
    moved: u64,
    /// Switch to splice once `moved` reaches this (`None`: never).
    splice_at: Option<u64>,
}

/// A relay dropped while a pump waits for a buffer still counts out of `buffer_waiters`.
impl Drop for Pump<'_> {
    fn drop(&mut self) {
        self.parked.leave(self.pool.stats());
    }
}

impl<'a> Pump<'a> {
    fn new(
        from: Side,
        res: Resources<'a>,
        (counter, tally): (&'a Counter, &'a Counter),
        splice_at: Option<u64>,
    ) -> Self {
        Pump {
            state: PumpState::Reading,
            from,
            pool: res.buffers,
            pipes: res.pipes,
            counter,
            tally,
            spliced: &res.stats.bytes_spliced,
            parked: Parked::default(),
            moved: 0,
            splice_at,
        }
    }

    fn holds_buffer(&self) -> bool {
        matches!(self.state, PumpState::Writing { .. })
    }

    fn is_done(&self) -> bool {
        matches!(self.state, PumpState::Done)
    }

    fn to(&self) -> Side {
        if self.from == Side::Front {
            Side::Back
        } else {
            Side::Front
        }
    }

    fn count(&mut self, n: usize, progress: &mut u64) {
        *progress += n as u64;
        self.moved += n as u64;
        self.counter.add(n as u64);
        self.tally.add(n as u64);
    }

    /// Moves as much as possible without blocking; `Ok(true)` once the direction is done.
    /// `other`: whether the opposite direction holds a buffer (then this one may take the
    /// pool's reserve, see `buffer`) and whether it is done (then this direction's end is
    /// the relay's, and the destination is about to be closed).
    fn poll<S: Endpoint, D: Endpoint>(
        &mut self,
        cx: &mut Context<'_>,
        src: &mut S,
        dst: &mut D,
        (other_holds_buffer, other_done): (bool, bool),
        progress: &mut u64,
    ) -> Result<bool, Error> {
        // Set once this poll registered for the source's next readiness and found nothing:
        // readiness cannot change before this poll returns (one thread), so no need to ask again.
        let mut src_armed = false;
        loop {
            match &mut self.state {
                PumpState::Done => return Ok(true),
                PumpState::ShuttingDown => match if other_done {
                    dst.poll_shutdown_before_close(cx)
                } else {
                    dst.poll_shutdown_write(cx)
                } {
                    Poll::Pending => return Ok(false),
                    // The peer may already be gone; its own direction reports that.
                    Poll::Ready(_) => self.state = PumpState::Done,
                },
                PumpState::Reading => {
                    if self.splice_at.is_some_and(|at| self.moved >= at)
                        && src.raw().is_some()
                        && dst.raw().is_some()
                        && let Some(pipe) = self.pipes.try_get()
                    {
                        self.state = PumpState::Splicing(pipe);
                        continue;
                    }
                    if src_armed {
                        return Ok(false);
                    }
                    match src.poll_read_ready(cx) {
                        Poll::Pending => return Ok(false),
                        Poll::Ready(Err(e)) => return Err(Error::io(self.from, "wait readable", e)),
                        Poll::Ready(Ok(())) => {}
                    }
                    let Poll::Ready(mut buf) = self.pool.poll_get(cx, &mut self.parked, other_holds_buffer) else {
                        return Ok(false);
                    };
                    match src.poll_read(cx, &mut buf) {
                        Poll::Pending => return Ok(false),
                        Poll::Ready(Ok(0)) => self.state = PumpState::ShuttingDown,
                        Poll::Ready(Ok(len)) => {
                            // A short read drained the socket; if the FIN came with it, the
                            // write can carry it (one segment instead of data, then FIN).
                            let last = len < buf.len()
                                && match src.poll_peer_closed(cx) {
                                    Poll::Pending => {
                                        src_armed = true;
                                        false
                                    }
                                    Poll::Ready(closed) => closed,
                                };
                            self.state = PumpState::Writing { buf, pos: 0, len, last };
                        }
                        Poll::Ready(Err(e)) => match src.read_failed(e) {
                            Ok(()) => self.state = PumpState::ShuttingDown,
                            Err(e) => return Err(Error::io(self.from, "read", e)),
                        },
                    }
                }
                PumpState::Writing { buf, pos, len, last } => {
                    let pending = buf.get(*pos..*len).unwrap_or_default();
                    let write = if *last {
                        dst.poll_write_last(cx, pending)
                    } else {
                        dst.poll_write(cx, pending)
                    };
                    match write {
                        Poll::Pending => return Ok(false),
                        Poll::Ready(Ok(0)) => {
                            return Err(Error::io(self.to(), "write", io::ErrorKind::WriteZero.into()));
                        }
                        Poll::Ready(Ok(written)) => {
                            *pos += written;
                            let done = *pos >= *len;
                            self.count(written, progress);
                            if done {
                                self.state = PumpState::Flushing;
                            }
                        }
                        Poll::Ready(Err(e)) => return Err(Error::io(self.to(), "write", e)),
                    }
                }
                PumpState::Flushing => match dst.poll_flush(cx) {
                    Poll::Pending => return Ok(false),
                    Poll::Ready(Ok(())) => self.state = PumpState::Reading,
                    Poll::Ready(Err(e)) => return Err(Error::io(self.to(), "flush", e)),
                },
                PumpState::Splicing(pipe) => {
                    let (Some(s), Some(d)) = (src.raw(), dst.raw()) else {
                        return Err(Error::new(ErrorKind::Io, Side::Internal, "splice needs two sockets"));
                    };
                    let capacity = pipe.capacity;
                    match splice_step(cx, s, d, pipe, capacity) {
                        Poll::Pending => return Ok(false),
                        Poll::Ready(Ok(Spliced::Eof)) => self.state = PumpState::ShuttingDown,
                        Poll::Ready(Ok(Spliced::In(_))) => {}
                        Poll::Ready(Ok(Spliced::Out(n))) => {
                            self.spliced.add(n as u64);
                            self.count(n, progress);
                        }
                        Poll::Ready(Err(SpliceFailed::Source(e))) => match src.read_failed(e) {
                            // Only with the pipe empty: a source error happens while filling it.
                            Ok(()) => self.state = PumpState::ShuttingDown,
                            Err(e) => return Err(Error::io(self.from, "splice", e)),
                        },
                        Poll::Ready(Err(SpliceFailed::Destination(e))) => {
                            return Err(Error::io(self.to(), "splice", e));
                        }
                    }
                }
            }
        }
    }
}
