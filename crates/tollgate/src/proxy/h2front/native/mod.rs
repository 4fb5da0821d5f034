//! The connection task of an HTTP/2 client connection on tollgate's own codec
//! (`http::h2::ServerConn`, sans-io): it reads the client's bytes into the codec, turns the
//! codec's events into streams (each a future polled inside this task, in a reused slot)
//! and stream wake-ups, and writes what the codec and the streams queued.
//!
//! One round: read what the socket has (the codec parses it and queues acks, window
//! updates and resets), hand the events out, poll every stream that can go further (their
//! responses are encoded straight into the codec's output), then write the output at once:
//! the frames of every stream that answered leave together, in one TLS record and one write.
//! Reading stops while more than `MAX_UNWRITTEN` bytes wait (a client that does not read
//! gets nothing more parsed). Ends: idle (no stream for `timeouts.http_keep_alive`, or none
//! ever within `timeouts.http_request`) and worker stopping (reload, stop) → graceful GOAWAY,
//! open streams finish; a flood or a protocol error → the codec's GOAWAY, every stream
//! dropped, closed once it is written (within `GOAWAY_FLUSH`); the client closing → every
//! stream dropped (they lost their client).

mod bridge;
mod handles;

use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::Stream as _;
use futures_util::stream::FuturesUnordered;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

pub(crate) use bridge::{Bridge, Output};
pub(crate) use handles::{RecvStream, SendResponse, SendStream, StreamError, bridged};

use super::check::{self, Checked, Refusal};
use super::{ConnInfo, slots, stream};
use crate::ctx::WorkerCtx;
use crate::error::{Error, ErrorKind, Side};
use crate::http::h2::{ConnError, Event, Fields, Flood, Reason, RequestHead, ServerConn, Settings};
use crate::stats::WorkerStats;
use handles::Shared;

/// How long an ending connection may take to write its GOAWAY before it is dropped, and
/// how long a graceful one waits for the client's PING answer before its final GOAWAY.
const GOAWAY_FLUSH: Duration = Duration::from_secs(1);
/// Room kept free in the read buffer: one read takes up to this much.
const READ_SIZE: usize = 32 * 1024;
/// A connection without a read buffer (new, or gone quiet) reads this much on the stack
/// first: the buffer is made only once bytes came. A request's HEADERS frame fits.
const FIRST_READ: usize = 2 * 1024;
/// Output waiting to be written past which the client's bytes are not read.
const MAX_UNWRITTEN: usize = 512 * 1024;
/// Rounds of one poll before the task yields to the others on this thread.
const ROUNDS: usize = 16;

/// How the connection ended.
enum End {
    /// Gone away and every stream done, or the client closed.
    Closed,
    /// The codec's connection error (GOAWAY queued).
    Failed(ConnError),
}

/// Serves one HTTP/2 client connection to its end.
///
/// A plain function over an `async` block: the socket goes into the driver here and the
/// block captures the driver, so the connection's future holds the socket once (an `async
/// fn` keeps its argument beside the local it is moved into, rust-lang/rust#62958; over
/// TLS that is a 1.1 KB stream).
pub(crate) fn serve<T>(ctx: &Rc<WorkerCtx>, info: ConnInfo, io: T) -> impl Future<Output = Result<(), Error>> + '_
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let mut d = Driver {
        io,
        input: BytesMut::new(),
        read_closed: false,
        unflushed: false,
        going_away: false,
        final_goaway: false,
    };
    let info = Rc::new(info);
    async move {
        let config = &ctx.shared.config;
        let timeouts = config.timeouts;
        ctx.stats.h2_connections.add(1);
        let shared = Shared::new(
            ServerConn::new(Settings::from(&config.http2)),
            config.http2.max_send_buffer as usize,
        );
        // Declared before `streams`, which borrows it (and so is dropped first).
        let spares = slots::Spares::new(Arc::clone(&ctx.progress));
        let mut streams = FuturesUnordered::new();
        // No stream yet: the first must come within http_request; later, http_keep_alive.
        let idle = tokio::time::sleep_until(Instant::now() + timeouts.http_request);
        tokio::pin!(idle);
        // Once the last stream is done, the same timer fires first after `park_idle_after` of
        // quiet (then the buffers kept for a burst go back, and it is set to this keep-alive
        // deadline): a busy client's next streams come sooner and find them still there.
        let quiet_after = config.global.park_idle_after;
        let mut quiet_until: Option<Instant> = None;
        let stopping = ctx.stopping();
        tokio::pin!(stopping);
        let ended = std::future::poll_fn(|cx| {
            for _ in 0..ROUNDS {
                let mut moved = false;
                match d.read(&shared, cx) {
                    Poll::Ready(Ok(received)) => {
                        moved = true;
                        // The events before a connection error are handed out too.
                        dispatch(ctx, &shared, &info, (&spares, &mut streams), stream::serve);
                        if let Err(e) = received {
                            return Poll::Ready(Ok(End::Failed(e)));
                        }
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => {}
                }
                // Bounded: a poll never runs a stream twice.
                while let Poll::Ready(Some(())) = Pin::new(&mut streams).poll_next(cx) {
                    moved = true;
                    if streams.is_empty() && !d.going_away {
                        let now = Instant::now();
                        let keep_alive = now + timeouts.http_keep_alive;
                        quiet_until = Some(keep_alive);
                        idle.as_mut().reset((now + quiet_after).min(keep_alive));
                    }
                }
                match d.write(&shared, &ctx.stats, cx) {
                    Ok(wrote) => moved |= wrote,
                    Err(e) => return Poll::Ready(Err(e)),
                }
                if streams.is_empty()
                    && !d.going_away
                    && let Some(keep_alive) = quiet_until
                    && idle.as_mut().poll(cx).is_ready()
                {
                    // Quiet for `park_idle_after`: what was kept for a burst goes back.
                    quiet_until = None;
                    d.release_if_empty();
                    shared.release_idle();
                    info.release_spares();
                    spares.release();
                    ctx.stats.h2_quiet_released.add(1);
                    idle.as_mut().reset(keep_alive);
                }
                moved |= d.go_away_when_due(&shared, streams.is_empty(), (idle.as_mut(), stopping.as_mut()), cx);
                if d.finished(&shared, streams.is_empty()) {
                    return Poll::Ready(Ok(End::Closed));
                }
                if !moved {
                    return Poll::Pending;
                }
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await;
        let failed = match ended {
            Ok(End::Closed) => None,
            Ok(End::Failed(e)) => Some(e),
            Err(e) => {
                tracing::debug!(peer = %info.peer, error = %e, "h2 connection ended");
                None
            }
        };
        // Streams still running now have lost their client (or the connection was abusive).
        shared.close_all();
        drop(streams);
        let Some(e) = failed else { return Ok(()) };
        // The codec queued its GOAWAY: once it is written nothing else is owed.
        let _ = tokio::time::timeout(GOAWAY_FLUSH, flush(&mut d.io, &shared, &ctx.stats)).await;
        match e.flood {
            Some(flood) => {
                count_flood(ctx, flood);
                tracing::debug!(peer = %info.peer, flood = flood.as_str(), "h2 connection closed: ENHANCE_YOUR_CALM");
                Err(Error::new(ErrorKind::BadRequest(400), Side::Front, flood.as_str()))
            }
            None => {
                tracing::debug!(peer = %info.peer, code = e.code.as_str(), why = e.why, "h2 connection error");
                Ok(())
            }
        }
    }
}

/// The socket side of the connection task and where its ending stands.
struct Driver<T> {
    io: T,
    /// Client bytes the codec has not consumed yet (a partial frame).
    input: BytesMut,
    read_closed: bool,
    /// Written but not yet flushed (TLS may hold a record).
    unflushed: bool,
    /// A graceful GOAWAY went out (idle, or the worker stopping)...
    going_away: bool,
    /// ...and the final one, after the client's PING answer or `GOAWAY_FLUSH`.
    final_goaway: bool,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Driver<T> {
    /// Reads what the socket has into the codec (nothing while `MAX_UNWRITTEN` bytes wait):
    /// `Ready(Ok(_))` once bytes came (the codec's verdict on them) or the client closed.
    fn read(&mut self, shared: &Shared, cx: &mut Context<'_>) -> Poll<io::Result<Result<(), ConnError>>> {
        if self.read_closed || shared.conn.borrow().output().len() >= MAX_UNWRITTEN {
            return Poll::Pending;
        }
        let read = if self.input.capacity() == 0 {
            // No buffer (a new connection, or one that went quiet): a read on the stack
            // first, the buffer made only once bytes came.
            let mut first = [0u8; FIRST_READ];
            let mut buf = tokio::io::ReadBuf::new(&mut first);
            match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    self.input.reserve(READ_SIZE);
                    self.input.extend_from_slice(buf.filled());
                    Poll::Ready(Ok(buf.filled().len()))
                }
                Poll::Ready(Ok(())) => Poll::Ready(Ok(0)),
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            }
        } else {
            if self.input.capacity() - self.input.len() < READ_SIZE / 2 {
                self.input.reserve(READ_SIZE);
            }
            tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.input)
        };
        match read {
            Poll::Ready(Ok(0)) => {
                self.read_closed = true;
                Poll::Ready(Ok(Ok(())))
            }
            Poll::Ready(Ok(_)) => {
                let received = shared
                    .conn
                    .borrow_mut()
                    .receive(&mut self.input, std::time::Instant::now());
                Poll::Ready(Ok(received))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Gives the read buffer back when the codec holds no partial frame in it.
    fn release_if_empty(&mut self) {
        if self.input.is_empty() {
            self.input = BytesMut::new();
        }
    }

    /// Writes what the codec queued as far as the socket takes it, then flushes; `true` if
    /// anything went.
    fn write(&mut self, shared: &Shared, stats: &WorkerStats, cx: &mut Context<'_>) -> io::Result<bool> {
        let wrote = match write_out(&mut self.io, shared, stats, cx) {
            Poll::Ready(Ok(wrote)) => wrote,
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => false,
        };
        if wrote {
            self.unflushed = true;
            shared.on_written();
        }
        if self.unflushed {
            match Pin::new(&mut self.io).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.unflushed = false,
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => {}
            }
        }
        Ok(wrote)
    }

    /// The graceful GOAWAY once the worker stops or the connection is idle, and the final one
    /// when its PING is not answered in time; `true` if one was queued.
    fn go_away_when_due(
        &mut self,
        shared: &Shared,
        no_streams: bool,
        (mut idle, stopping): (Pin<&mut tokio::time::Sleep>, Pin<&mut impl Future<Output = ()>>),
        cx: &mut Context<'_>,
    ) -> bool {
        if !self.going_away {
            if stopping.poll(cx).is_ready() || no_streams && idle.as_mut().poll(cx).is_ready() {
                shared.conn.borrow_mut().goaway_graceful();
                self.going_away = true;
                // The final GOAWAY goes when the client answers the PING, or then.
                idle.reset(Instant::now() + GOAWAY_FLUSH);
                return true;
            }
        } else if !self.final_goaway && idle.poll(cx).is_ready() {
            shared.conn.borrow_mut().goaway(Reason::NO_ERROR);
            self.final_goaway = true;
            return true;
        }
        false
    }

    /// Everything written, and the client gone (its streams lost their client) or the
    /// connection gone away with every stream done.
    fn finished(&self, shared: &Shared, no_streams: bool) -> bool {
        let conn = shared.conn.borrow();
        conn.output().is_empty() && !self.unflushed && (self.read_closed || no_streams && conn.is_done())
    }
}

/// The codec's events to the streams: new ones started, the others woken.
fn dispatch<'s, F, S>(
    ctx: &WorkerCtx,
    shared: &Rc<Shared>,
    info: &Rc<ConnInfo>,
    (spares, streams): (&'s slots::Spares<F>, &mut FuturesUnordered<slots::Slotted<'s, F>>),
    start: S,
) where
    F: Future<Output = ()>,
    S: Fn(Rc<ConnInfo>, Result<Checked, Refusal>, http::Request<RecvStream>, SendResponse) -> F,
{
    // Bounded: each event was made by the bytes just received.
    loop {
        let event = shared.conn.borrow_mut().poll_event();
        let Some(event) = event else { return };
        match event {
            Event::Request { id, head, end_stream } => {
                ctx.stats.h2_streams.add(1);
                if let Some(f) = ctx.shared.metrics.get(ctx.id).and_then(|t| t.frontend(info.frontend)) {
                    f.h2_streams.add(1);
                }
                let checked = check::request(&head, end_stream);
                let parts = request_parts(&head, info.header_map());
                shared.conn.borrow_mut().recycle(head);
                match parts {
                    Some(parts) => {
                        let (body, respond) = shared.open(id, end_stream);
                        let request = http::Request::from_parts(parts, body);
                        streams.push(spares.slot(|| start(Rc::clone(info), checked, request, respond)));
                    }
                    None => shared.conn.borrow_mut().reset(id, Reason::PROTOCOL_ERROR),
                }
            }
            Event::HeadTooLarge { id, .. } => {
                ctx.stats.h2_streams.add(1);
                if let Some(f) = ctx.shared.metrics.get(ctx.id).and_then(|t| t.frontend(info.frontend)) {
                    f.h2_streams.add(1);
                }
                let _ = shared.conn.borrow_mut().send_headers(id, 431, std::iter::empty(), true);
            }
            Event::Data { id, data, end_stream } => shared.on_data(id, data, end_stream),
            Event::Trailers { id, fields } => {
                let map = header_map(&fields);
                shared.conn.borrow_mut().recycle_fields(fields);
                shared.on_trailers(id, map);
            }
            Event::Reset { id, code, why } => {
                if let Some(f) = ctx.shared.metrics.get(ctx.id).and_then(|t| t.frontend(info.frontend)) {
                    match why {
                        None => f.h2_client_resets.add(1),
                        Some(_) => f.h2_stream_errors.add(1),
                    }
                }
                if let Some(why) = why {
                    tracing::debug!(peer = %info.peer, stream = id.0, code = code.as_str(), why, "h2 stream refused");
                }
                shared.on_reset(id, code);
            }
            Event::SendWindow { id } => shared.on_window(id),
        }
    }
}

/// The codec's output to the socket as far as it takes it now; `true` if anything went.
/// `bytes_to_client` counts the frames as written (heads HPACK-encoded).
fn write_out<T: AsyncWrite + Unpin>(
    io: &mut T,
    shared: &Shared,
    stats: &WorkerStats,
    cx: &mut Context<'_>,
) -> Poll<io::Result<bool>> {
    let mut wrote = false;
    // Bounded: each round writes some bytes or ends.
    loop {
        let mut conn = shared.conn.borrow_mut();
        if conn.output().is_empty() {
            return Poll::Ready(Ok(wrote));
        }
        match Pin::new(&mut *io).poll_write(cx, conn.output()) {
            Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
            Poll::Ready(Ok(n)) => {
                conn.consume_output(n);
                stats.bytes_to_client.add(n as u64);
                wrote = true;
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending if wrote => return Poll::Ready(Ok(true)),
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// Writes and flushes everything the codec queued.
async fn flush<T: AsyncWrite + Unpin>(io: &mut T, shared: &Shared, stats: &WorkerStats) -> io::Result<()> {
    std::future::poll_fn(|cx| {
        // Bounded: each round writes some bytes or waits.
        loop {
            match write_out(io, shared, stats, cx) {
                Poll::Ready(Ok(_)) if shared.conn.borrow().output().is_empty() => break,
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Pin::new(&mut *io).poll_flush(cx)
    })
    .await
}

/// A validated request head as `http` parts (what routing and forwarding read), its fields
/// in `headers` (empty).
pub(crate) fn request_parts(head: &RequestHead, headers: http::HeaderMap) -> Option<http::request::Parts> {
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = http::Method::from_bytes(head.method()).ok()?;
    parts.version = http::Version::HTTP_2;
    // One copy of the head's bytes: authority, path and values are slices of it.
    let shared = HeadBytes::of(head.fields());
    let mut uri = http::uri::Parts::default();
    if let Some(a) = head.authority() {
        uri.authority = Some(http::uri::Authority::from_maybe_shared(shared.slice(a)).ok()?);
        uri.scheme = match head.scheme() {
            Some(b"https") => Some(http::uri::Scheme::HTTPS),
            Some(b"http") => Some(http::uri::Scheme::HTTP),
            Some(other) => Some(http::uri::Scheme::try_from(other).ok()?),
            None => None,
        };
    }
    if let Some(p) = head.path() {
        uri.path_and_query = Some(http::uri::PathAndQuery::from_maybe_shared(shared.slice(p)).ok()?);
    }
    parts.uri = http::Uri::from_parts(uri).ok()?;
    parts.headers = headers;
    shared.fill(head.fields(), &mut parts.headers);
    Some(parts)
}

/// Validated fields (lowercase token names, clean values) as a header map.
fn header_map(fields: &Fields) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    HeadBytes::of(fields).fill(fields, &mut map);
    map
}

/// A head's arena copied once, for the `http` types that own their bytes.
struct HeadBytes<'a> {
    arena: &'a [u8],
    bytes: Bytes,
}

impl<'a> HeadBytes<'a> {
    fn of(fields: &'a Fields) -> Self {
        HeadBytes {
            arena: fields.arena(),
            bytes: Bytes::copy_from_slice(fields.arena()),
        }
    }

    /// `part` (a slice of the arena) in the copy, without copying it again.
    fn slice(&self, part: &[u8]) -> Bytes {
        let start = part.as_ptr().addr().wrapping_sub(self.arena.as_ptr().addr());
        match start.checked_add(part.len()) {
            Some(end) if end <= self.bytes.len() => self.bytes.slice(start..end),
            _ => Bytes::copy_from_slice(part),
        }
    }

    /// Appends `fields` to `map`.
    fn fill(&self, fields: &Fields, map: &mut http::HeaderMap) {
        map.reserve(fields.len());
        for (name, value) in fields.iter() {
            let value = http::HeaderValue::from_maybe_shared(self.slice(value));
            if let (Ok(n), Ok(v)) = (http::HeaderName::from_bytes(name), value) {
                map.append(n, v);
            }
        }
    }
}

fn count_flood(ctx: &WorkerCtx, flood: Flood) {
    let s = &ctx.stats;
    let counter = match flood {
        Flood::ClientResets => &s.h2_flood_client_resets,
        Flood::ServerResets => &s.h2_flood_server_resets,
        Flood::Pings => &s.h2_flood_pings,
        Flood::Settings => &s.h2_flood_settings,
        Flood::EmptyData => &s.h2_flood_empty_data,
        Flood::Priority => &s.h2_flood_priority,
        Flood::WindowUpdates => &s.h2_flood_window_updates,
        Flood::HeaderBlock => &s.h2_flood_header_block,
        Flood::OversizedHeads => &s.h2_flood_oversized_heads,
    };
    counter.add(1);
}
