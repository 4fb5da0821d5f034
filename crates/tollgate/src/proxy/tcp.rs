//! TCP mode: connect to a server and relay bytes both ways.
//!
//! The relay is one future driving two `Pump` state machines (client → server and server →
//! client) and the idle watchdog, with no inner tasks, joins or per-operation timers.
//! A pump borrows a pooled buffer only while data is in flight: wait until the source is
//! readable, take a buffer, read, write it all, give it back. A read shorter than the buffer
//! means the socket was drained, so readiness is cleared right there and no extra recv()
//! is spent discovering EAGAIN (HAProxy's trick). EOF in one direction becomes
//! shutdown(Write) on the other (half-close); the session ends when both directions are
//! done, on the first error, or when the watchdog fires.

use std::future::{Future, poll_fn};
use std::io::{self, Read};
use std::net::Shutdown;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use socket2::SockRef;
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::idle::Watchdog;
use crate::buffer::{BufferPool, Parked, PooledBuffer};
use crate::error::{Error, ErrorKind, Side};
use crate::runtime::stats::Counter;
use crate::runtime::worker::WorkerCtx;

pub async fn serve(ctx: &Rc<WorkerCtx>, frontend: usize, client: TcpStream) -> Result<(), Error> {
    let config = &ctx.shared.config;
    let backend = config
        .frontends
        .get(frontend)
        .and_then(|f| f.default_backend)
        .ok_or_else(|| Error::new(ErrorKind::NoServer, Side::Internal, "frontend has no backend"))?;
    let server = super::connect::connect(ctx, backend).await?;
    let idle = config.timeouts.client.min(config.timeouts.server);
    relay(ctx, &client, &server.stream, idle).await
}

/// Relays until both directions reached EOF, one failed, or nothing moved for `idle`.
pub async fn relay(ctx: &WorkerCtx, client: &TcpStream, server: &TcpStream, idle: Duration) -> Result<(), Error> {
    let stats = &ctx.stats;
    let mut upstream = Pump::new(Side::Front, client, server, &ctx.buffers, &stats.bytes_to_server);
    let mut downstream = Pump::new(Side::Back, server, client, &ctx.buffers, &stats.bytes_to_client);
    let mut watchdog = Watchdog::new(idle);
    let mut progress = 0u64;
    let sleep = tokio::time::sleep(watchdog.tick());
    tokio::pin!(sleep);
    let result = poll_fn(|cx| {
        let down_holds = downstream.holds_buffer();
        let up = upstream.poll(cx, down_holds, &mut progress)?;
        let up_holds = upstream.holds_buffer();
        let down = downstream.poll(cx, up_holds, &mut progress)?;
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
    .await;
    upstream.parked.leave(stats);
    downstream.parked.leave(stats);
    result
}

enum PumpState {
    /// Waiting for the source to be readable (no buffer held).
    Reading,
    /// Holding `buf[pos..len]` still to be written to the destination.
    Writing { buf: PooledBuffer, pos: usize, len: usize },
    /// EOF seen and the destination half-closed.
    Done,
}

/// One direction of a relay: bytes from `src` (on side `from`) to `dst`.
struct Pump<'a> {
    state: PumpState,
    from: Side,
    src: &'a TcpStream,
    dst: &'a TcpStream,
    pool: &'a Rc<BufferPool>,
    /// Bytes moved in this direction, worker-wide.
    counter: &'a Counter,
    parked: Parked,
}

impl<'a> Pump<'a> {
    fn new(from: Side, src: &'a TcpStream, dst: &'a TcpStream, pool: &'a Rc<BufferPool>, counter: &'a Counter) -> Self {
        Pump {
            state: PumpState::Reading,
            from,
            src,
            dst,
            pool,
            counter,
            parked: Parked::default(),
        }
    }

    fn holds_buffer(&self) -> bool {
        matches!(self.state, PumpState::Writing { .. })
    }

    fn to(&self) -> Side {
        if self.from == Side::Front {
            Side::Back
        } else {
            Side::Front
        }
    }

    /// Moves as much as possible without blocking; `Ok(true)` once the direction is done.
    /// `other_holds_buffer`: the opposite direction holds a buffer, so this one may take
    /// the pool's reserve (see `buffer`).
    fn poll(&mut self, cx: &mut Context<'_>, other_holds_buffer: bool, progress: &mut u64) -> Result<bool, Error> {
        let (src, dst) = (self.src, self.dst);
        loop {
            match &mut self.state {
                PumpState::Done => return Ok(true),
                PumpState::Reading => {
                    match src.poll_read_ready(cx) {
                        Poll::Pending => return Ok(false),
                        Poll::Ready(Err(e)) => return Err(Error::io(self.from, "wait readable", e)),
                        Poll::Ready(Ok(())) => {}
                    }
                    let Poll::Ready(mut buf) = self.pool.poll_get(cx, &mut self.parked, other_holds_buffer) else {
                        return Ok(false);
                    };
                    match read_draining(src, &mut buf) {
                        Ok(0) => {
                            // The peer may already be gone; its own direction reports that.
                            let _ = SockRef::from(dst).shutdown(Shutdown::Write);
                            self.state = PumpState::Done;
                        }
                        Ok(len) => self.state = PumpState::Writing { buf, pos: 0, len },
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(Error::io(self.from, "read", e)),
                    }
                }
                PumpState::Writing { buf, pos, len } => {
                    match dst.poll_write_ready(cx) {
                        Poll::Pending => return Ok(false),
                        Poll::Ready(Err(e)) => return Err(Error::io(self.to(), "wait writable", e)),
                        Poll::Ready(Ok(())) => {}
                    }
                    let pending = buf.get(*pos..*len).unwrap_or_default();
                    match dst.try_io(Interest::WRITABLE, || SockRef::from(dst).send(pending)) {
                        Ok(written) => {
                            *pos += written;
                            *progress += written as u64;
                            self.counter.add(written as u64);
                            if *pos >= *len {
                                self.state = PumpState::Reading;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(Error::io(self.to(), "write", e)),
                    }
                }
            }
        }
    }
}

/// One recv(). A read shorter than the buffer drained the socket, so it is reported to
/// tokio as WouldBlock (clearing readiness, with the bytes kept): the next wait then costs
/// no extra recv() returning EAGAIN. Data arriving later raises a new edge-triggered event.
fn read_draining(src: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    let capacity = buf.len();
    let mut got = 0;
    let result = src.try_io(Interest::READABLE, || {
        let n = (&*SockRef::from(src)).read(buf)?;
        got = n;
        if n > 0 && n < capacity {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(n)
        }
    });
    match result {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(got),
        other => other,
    }
}
