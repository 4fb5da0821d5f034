//! TCP mode: connect to a server and relay bytes both ways.
//!
//! The relay is one future driving two `Pump` state machines (client → server and server →
//! client) and the idle watchdog, with no inner tasks, joins or per-operation timers.
//! A pump borrows a pooled buffer only while data is in flight: wait until the source is
//! readable, take a buffer, read, write it all, give it back. A read shorter than the buffer
//! means the socket was drained, so readiness is cleared right there and no extra recv()
//! is spent discovering EAGAIN (HAProxy's trick). EOF in one direction becomes
//! shutdown(Write) on the other (half-close; on a TLS side, close_notify first); the session
//! ends when both directions are done, on the first error, or when the watchdog fires.
//!
//! Either side may be TLS (`Endpoint`: a plain socket, or a rustls stream whose plaintext
//! is relayed). When both sides are plain sockets and `[frontend.splice]` is on, a pump
//! switches to splice(2) through a pooled pipe once `after_bytes` moved in its direction;
//! the pipe is drained fully before the next splice from the source, so WouldBlock on the
//! source always means "socket empty". Splicing moves the same progress counter, so the
//! idle watchdog keeps working.
//!
//! Session start: a TLS frontend terminates (`tls::terminate::accept`) and routes on the
//! SNI the handshake saw; a plain frontend with `sni` routes peeks the ClientHello
//! (`tls::passthrough`) and routes without decrypting; otherwise `default_backend`.

use std::future::poll_fn;
use std::io::{self, Read};
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::idle::Watchdog;
use super::pipes::{PipePool, PooledPipe};
use super::record::StreamRecord;
use crate::buffer::{BufferPool, Parked, PooledBuffer};
use crate::config::model::{Frontend, Offload};
use crate::error::{Error, ErrorKind, Side};
use crate::runtime::stats::Counter;
use crate::runtime::worker::WorkerCtx;
use crate::tls::{ktls, passthrough};

pub async fn serve(
    ctx: &Rc<WorkerCtx>,
    frontend: usize,
    client: TcpStream,
    rec: &mut StreamRecord,
) -> Result<(), Error> {
    let fe = ctx
        .shared
        .config
        .frontends
        .get(frontend)
        .ok_or_else(|| Error::new(ErrorKind::NoServer, Side::Internal, "no such frontend"))?;
    if let Some(tls) = &fe.tls {
        // Boxed: the TLS states are large, and a plain TCP session should not carry (and copy
        // into its task) their size.
        return Box::pin(serve_tls(ctx, fe, tls, client, rec)).await;
    }
    let backend = match fe.sni_routes {
        Some(_) => inspect(ctx, fe, &client).await?,
        None => fe
            .default_backend
            .ok_or_else(|| Error::new(ErrorKind::NoServer, Side::Internal, "frontend has no backend"))?,
    };
    to_server(ctx, fe, backend, &client, rec).await
}

async fn serve_tls(
    ctx: &Rc<WorkerCtx>,
    fe: &Frontend,
    tls: &crate::config::model::FrontendTls,
    client: TcpStream,
    rec: &mut StreamRecord,
) -> Result<(), Error> {
    if tls.ktls.enabled && tls.server_config.enable_secret_extraction {
        // Eligible for kTLS (decided at config load, after the probe): rustls over a
        // CorkStream, handed to the kernel after `after_bytes` (tls::ktls).
        let client = crate::tls::terminate::accept(ctx, tls, ktls::CorkStream::new(client)).await?;
        let backend = route_sni(ctx, fe, client.get_ref().1.server_name())?;
        let client = ktls::KtlsClient::new(client, tls.ktls.after_bytes, &ctx.stats);
        return to_server(ctx, fe, backend, client, rec).await;
    }
    let client = crate::tls::terminate::accept(ctx, tls, client).await?;
    let backend = route_sni(ctx, fe, client.get_ref().1.server_name())?;
    to_server(ctx, fe, backend, Layered(client), rec).await
}

fn route_sni(ctx: &WorkerCtx, fe: &Frontend, sni: Option<&str>) -> Result<usize, Error> {
    passthrough::route(fe, sni).ok_or_else(|| {
        ctx.stats.sni_rejected.add(1);
        Error::new(ErrorKind::Tls, Side::Front, format!("no route for SNI {sni:?}"))
    })
}

/// Peeks the ClientHello (a pooled buffer is held only while peeking) and routes on its SNI.
async fn inspect(ctx: &WorkerCtx, fe: &Frontend, client: &TcpStream) -> Result<usize, Error> {
    let deadline = Instant::now() + ctx.shared.config.timeouts.tls_inspect;
    let hello = {
        let mut buf = ctx.buffers.get(false).await;
        passthrough::peek_client_hello(client, &mut buf, deadline).await
    };
    match hello {
        Ok(info) => route_sni(ctx, fe, info.sni()),
        Err(e) => {
            ctx.stats.sni_inspect_failures.add(1);
            // A client that hung up is routine; anything else is a refusal worth a warn line.
            let kind = match &e {
                passthrough::InspectError::Truncated => ErrorKind::PeerClosed,
                passthrough::InspectError::Io(io) if crate::error::is_peer_reset(io) => ErrorKind::PeerClosed,
                _ => ErrorKind::Tls,
            };
            Err(Error::new(kind, Side::Front, format!("SNI inspection: {e}")))
        }
    }
}

/// Connects to a server of `backend` (TLS if that server asks for it) and relays.
async fn to_server<C: Endpoint>(
    ctx: &WorkerCtx,
    fe: &Frontend,
    backend: usize,
    mut client: C,
    rec: &mut StreamRecord,
) -> Result<(), Error> {
    let config = &ctx.shared.config;
    rec.backend = Some(backend);
    let super::connect::Connected {
        stream: server,
        slot: _slot,
        server: live,
        chosen,
        connected,
        ..
    } = super::connect::connect(ctx, backend, &mut rec.retries).await?;
    rec.server = Some(live.id);
    rec.timing.chosen = Some(rec.timing.since(chosen));
    rec.timing.connected = Some(rec.timing.since(connected));
    let moved = Moved::default();
    let idle = config.timeouts.client.min(config.timeouts.server);
    let epoch = live.kill_epoch();
    let relay = async {
        match live.tls.as_ref().map(|t| (t, &live.name)) {
            Some((tls, name)) => {
                let server = crate::tls::backend::connect(tls, server, config.timeouts.tls_handshake, name)
                    .await
                    .inspect_err(|_| ctx.stats.tls_backend_errors.add(1))
                    .map_err(|e| e.at(backend, Some(live.id)))?;
                relay_endpoints(ctx, &mut client, &mut Layered(server), idle, fe.splice, &moved).await
            }
            None => relay_endpoints(ctx, &mut client, &mut &server, idle, fe.splice, &moved).await,
        }
    };
    let relayed = tokio::select! {
        biased;
        relayed = relay => relayed,
        () = ctx.killed(&live, epoch) => Err(Error::new(
            ErrorKind::Killed,
            Side::Internal,
            format!("server {}/{} put in maintenance with --kill", live.backend_name, live.name),
        )),
    };
    rec.bytes_to_server = moved.to_server.get();
    rec.bytes_to_client = moved.to_client.get();
    relayed.map_err(|e| e.at(backend, Some(live.id)))
}

/// The bytes one relay moved each way (also counted for the worker as they move).
#[derive(Debug, Default)]
pub struct Moved {
    pub to_server: Counter,
    pub to_client: Counter,
}

/// Relays until both directions reached EOF, one failed, or nothing moved for `idle`;
/// `splice` applies when both are plain sockets.
pub async fn relay_endpoints<C: Endpoint, S: Endpoint>(
    ctx: &WorkerCtx,
    client: &mut C,
    server: &mut S,
    idle: Duration,
    splice: Offload,
    moved: &Moved,
) -> Result<(), Error> {
    let stats = &ctx.stats;
    let splice_at = splice.enabled.then_some(splice.after_bytes);
    let mut upstream = Pump::new(Side::Front, ctx, (&stats.bytes_to_server, &moved.to_server), splice_at);
    let mut downstream = Pump::new(Side::Back, ctx, (&stats.bytes_to_client, &moved.to_client), splice_at);
    let mut watchdog = Watchdog::new(idle);
    let mut progress = 0u64;
    let sleep = tokio::time::sleep(watchdog.tick());
    tokio::pin!(sleep);
    poll_fn(|cx| {
        let down_holds = downstream.holds_buffer();
        let up = upstream.poll(cx, &mut *client, &mut *server, down_holds, &mut progress)?;
        let up_holds = upstream.holds_buffer();
        let down = downstream.poll(cx, &mut *server, &mut *client, up_holds, &mut progress)?;
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

/// One side of a relay: a plain socket, or a stream with a layer (TLS) whose plaintext is
/// relayed. `Pending` always means a waker was registered.
pub trait Endpoint {
    /// Cheap readiness check before a buffer is taken (a layered stream says "ready" and
    /// lets the read decide).
    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// `Ok(0)` = end of stream.
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;
    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>>;
    /// Pushes out anything the layer buffered (a plain socket buffers nothing).
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// Half-close: no more data from us (TLS: close_notify, then shutdown(Write)).
    fn poll_shutdown_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// The socket, when the bytes on it are the payload itself (splice is possible).
    fn raw(&self) -> Option<&TcpStream>;
    /// Asked right after a read that drained the socket. `Ready(true)`: the peer's FIN has
    /// been seen (the reactor's read-closed bit, which stays set), so what was read is the
    /// last data. `Pending`: nothing is waiting and a wakeup is registered. `Ready(false)`:
    /// data is waiting, or this endpoint cannot tell (only a plain socket can).
    fn poll_peer_closed(&mut self, _cx: &mut Context<'_>) -> Poll<bool> {
        Poll::Ready(false)
    }
    /// Writes the last data before this side is half-closed: a plain socket holds back a
    /// partial segment (`MSG_MORE`) so that the shutdown sends it with the FIN.
    fn poll_write_last(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write(cx, buf)
    }
    /// A read (or a splice from `raw()`) failed with `e`: `Ok(())` makes it end of stream
    /// (a kTLS socket meeting the peer's close_notify), `Err` ends the session.
    fn read_failed(&mut self, e: io::Error) -> io::Result<()> {
        Err(e)
    }
}

impl Endpoint for &TcpStream {
    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        TcpStream::poll_read_ready(self, cx)
    }

    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        loop {
            match read_draining(self, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready!(TcpStream::poll_read_ready(self, cx))?,
                other => return Poll::Ready(other),
            }
        }
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let stream: &TcpStream = self;
        loop {
            match stream.try_io(Interest::WRITABLE, || SockRef::from(stream).send(buf)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready!(stream.poll_write_ready(cx))?,
                other => return Poll::Ready(other),
            }
        }
    }

    fn poll_flush(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown_write(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(SockRef::from(*self).shutdown(Shutdown::Write))
    }

    fn poll_peer_closed(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        // The cheap check first: usually nothing is waiting, and the wakeup it registers is
        // the one the next read needs anyway.
        ready!(TcpStream::poll_read_ready(self, cx)).ok();
        let ready = self.ready(Interest::READABLE);
        Poll::Ready(matches!(std::pin::pin!(ready).poll(cx), Poll::Ready(Ok(r)) if r.is_read_closed()))
    }

    fn poll_write_last(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        super::lazy::poll_send_more(self, cx, buf)
    }

    fn raw(&self) -> Option<&TcpStream> {
        Some(self)
    }
}

/// A stream with a layer (a rustls client or server stream).
pub struct Layered<T>(pub T);

impl<T: AsyncRead + AsyncWrite + Unpin> Endpoint for Layered<T> {
    fn poll_read_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut rb = ReadBuf::new(buf);
        match ready!(Pin::new(&mut self.0).poll_read(cx, &mut rb)) {
            Ok(()) => Poll::Ready(Ok(rb.filled().len())),
            // A TLS peer that closed without close_notify: treat as end of stream, like
            // most clients expect (the relay half-closes the other side as for a FIN).
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(0)),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn raw(&self) -> Option<&TcpStream> {
        None
    }
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
        ctx: &'a WorkerCtx,
        (counter, tally): (&'a Counter, &'a Counter),
        splice_at: Option<u64>,
    ) -> Self {
        Pump {
            state: PumpState::Reading,
            from,
            pool: &ctx.buffers,
            pipes: &ctx.pipes,
            counter,
            tally,
            spliced: &ctx.stats.bytes_spliced,
            parked: Parked::default(),
            moved: 0,
            splice_at,
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

    fn count(&mut self, n: usize, progress: &mut u64) {
        *progress += n as u64;
        self.moved += n as u64;
        self.counter.add(n as u64);
        self.tally.add(n as u64);
    }

    /// Moves as much as possible without blocking; `Ok(true)` once the direction is done.
    /// `other_holds_buffer`: the opposite direction holds a buffer, so this one may take
    /// the pool's reserve (see `buffer`).
    fn poll<S: Endpoint, D: Endpoint>(
        &mut self,
        cx: &mut Context<'_>,
        src: &mut S,
        dst: &mut D,
        other_holds_buffer: bool,
        progress: &mut u64,
    ) -> Result<bool, Error> {
        // Set once this poll registered for the source's next readiness and found nothing:
        // readiness cannot change before this poll returns (one thread), so no need to ask again.
        let mut src_armed = false;
        loop {
            match &mut self.state {
                PumpState::Done => return Ok(true),
                PumpState::ShuttingDown => match dst.poll_shutdown_write(cx) {
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
                    match splice_step(cx, s, d, pipe) {
                        Poll::Pending => return Ok(false),
                        Poll::Ready(Ok(Spliced::Eof)) => self.state = PumpState::ShuttingDown,
                        Poll::Ready(Ok(Spliced::In)) => {}
                        Poll::Ready(Ok(Spliced::Out(n))) => {
                            self.spliced.add(n as u64);
                            self.count(n, progress);
                        }
                        Poll::Ready(Err((true, e))) => match src.read_failed(e) {
                            // Only with the pipe empty: a source error happens while filling it.
                            Ok(()) => self.state = PumpState::ShuttingDown,
                            Err(e) => return Err(Error::io(self.from, "splice", e)),
                        },
                        Poll::Ready(Err((false, e))) => return Err(Error::io(self.to(), "splice", e)),
                    }
                }
            }
        }
    }
}

enum Spliced {
    /// Source bytes now sit in the pipe.
    In,
    /// This many bytes left the pipe for the destination.
    Out(usize),
    /// The source reached EOF with the pipe empty.
    Eof,
}

/// One splice step: fill the empty pipe from `src`, or drain it into `dst`. Errors say
/// whether the source (`true`) or the destination failed.
fn splice_step(
    cx: &mut Context<'_>,
    src: &TcpStream,
    dst: &TcpStream,
    pipe: &mut PooledPipe,
) -> Poll<Result<Spliced, (bool, io::Error)>> {
    let (Some(r), Some(w)) = (pipe.read_end(), pipe.write_end()) else {
        return Poll::Ready(Err((true, io::ErrorKind::BrokenPipe.into())));
    };
    if pipe.pending == 0 {
        loop {
            let moved = src.try_io(Interest::READABLE, || {
                tollgate_sys::splice::splice_move(src.as_fd(), w, pipe.capacity)
            });
            match moved {
                Ok(0) => return Poll::Ready(Ok(Spliced::Eof)),
                Ok(n) => {
                    pipe.pending = n;
                    return Poll::Ready(Ok(Spliced::In));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Err(e) = ready!(src.poll_read_ready(cx)) {
                        return Poll::Ready(Err((true, e)));
                    }
                }
                Err(e) => return Poll::Ready(Err((true, e))),
            }
        }
    }
    loop {
        let moved = dst.try_io(Interest::WRITABLE, || {
            tollgate_sys::splice::splice_move(r, dst.as_fd(), pipe.pending)
        });
        match moved {
            Ok(n) => {
                pipe.pending = pipe.pending.saturating_sub(n);
                return Poll::Ready(Ok(Spliced::Out(n)));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if let Err(e) = ready!(dst.poll_write_ready(cx)) {
                    return Poll::Ready(Err((false, e)));
                }
            }
            Err(e) => return Poll::Ready(Err((false, e))),
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
