//! Getting a server connection for a session: ask the worker's view of the backend for a
//! usable server with room, take a slot on it, connect with a timeout; on failure try
//! another server, up to the backend's `retries` (or the route's). When every usable server is at its
//! maxconn, wait in the backend's queue (first come first served across threads, see
//! `live::queue`) for a slot up to `timeouts.queue`, or refuse at once beyond `maxqueue`.
//!
//! Servers already tried are remembered by id (`Tried`), so a retry never goes back to a
//! failed server however large the backend, until every server has been tried once.

use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::config::model::QueueOptions;
use crate::ctx::WorkerCtx;
use crate::ctx::backends::{LocalBackend, Position, Take, Tried};
use crate::ctx::sessions::{self, SessionState};
use crate::error::{Error, ErrorKind, Side};
use crate::live::ServerId;
use crate::live::backend::QueuedGuard;
use crate::live::queue::{Ticket, Wake};
use crate::live::server::{OperState, ServerLive, ServerSlot};

/// A request's retries: how many it had so far (its record's count, every kind) and, when
/// its route sets `retries`, the most it may have; otherwise connect retries follow the
/// backend's `retries`.
pub(crate) struct Retries<'r> {
    pub done: &'r mut u32,
    pub budget: Option<u32>,
}

impl<'r> Retries<'r> {
    /// The backend's rules (TCP mode, and HTTP traffic whose route sets nothing).
    pub(crate) fn backend(done: &'r mut u32) -> Self {
        Retries { done, budget: None }
    }

    /// The same budget, lent for one attempt at a connection.
    pub(crate) fn reborrow(&mut self) -> Retries<'_> {
        Retries {
            done: self.done,
            budget: self.budget,
        }
    }

    /// Connect retries allowed from here, given the backend's `retries`.
    fn connect_retries(&self, backend_retries: u32) -> u32 {
        self.budget.map_or(backend_retries, |b| b.saturating_sub(*self.done))
    }
}

/// A slot on a server, as this worker holds it: dropping it releases the slot and tells
/// this worker's balancer.
pub(crate) struct HeldSlot<'a> {
    slot: ServerSlot,
    at: Position,
    backend: &'a LocalBackend,
}

impl HeldSlot<'_> {
    pub(crate) fn server(&self) -> &Arc<ServerLive> {
        self.slot.server()
    }

    /// Where the pick found it (the stream record's hint for the sink).
    pub(crate) fn position(&self) -> Position {
        self.at
    }
}

impl Drop for HeldSlot<'_> {
    fn drop(&mut self) {
        // The slot itself (a field) is released right after this.
        self.backend.released(self.slot.server().id, self.at);
    }
}

/// A server connection ready for a session: a socket (TCP mode), or what HTTP mode keeps
/// (`S`, which a fresh socket becomes). The server is `slot.server()`.
pub(crate) struct Connected<'a, S = TcpStream> {
    pub stream: S,
    pub slot: HeldSlot<'a>,
    /// Taken from the idle pool rather than freshly connected.
    pub reused: bool,
    /// When the server was chosen (its slot taken) and when the connection was ready.
    pub chosen: Instant,
    pub connected: Instant,
}

impl<'a, S> Connected<'a, S> {
    /// The stream apart from the rest (slot, timings), to put back around another view of
    /// it (`with`): an HTTP server connection is an HTTP/1 stream or an HTTP/2 lease.
    pub(crate) fn take_stream(self) -> (S, Connected<'a, ()>) {
        let Connected {
            stream,
            slot,
            reused,
            chosen,
            connected,
        } = self;
        let rest = Connected {
            stream: (),
            slot,
            reused,
            chosen,
            connected,
        };
        (stream, rest)
    }
}

impl<'a> Connected<'a, ()> {
    pub(crate) fn with<T>(self, stream: T) -> Connected<'a, T> {
        let Connected {
            slot,
            reused,
            chosen,
            connected,
            ..
        } = self;
        Connected {
            stream,
            slot,
            reused,
            chosen,
            connected,
        }
    }
}

/// A fresh connection to a server of `backend` (TCP mode); `hash_key` as for
/// [`connect_or_reuse`].
pub(crate) async fn connect<'a>(
    ctx: &'a WorkerCtx,
    backend: usize,
    hash_key: Option<u64>,
    retries: Retries<'_>,
) -> Result<Connected<'a, TcpStream>, Error> {
    let connected = connect_or_reuse(ctx, backend, hash_key, None, |_, _| None, retries).await?;
    // TCP mode sees nothing of the server's answers: a connection is its success.
    connected.slot.server().check.traffic_ok();
    Ok(connected)
}

/// Passive health: one more error on live traffic to `server` (a failed or timed-out
/// connect, an invalid or missing response). The one that reaches the backend's
/// `error_limit` marks the server down at once — no new connection picks it from here on —
/// and wakes its checker, which logs it and acts on it; passing checks bring it back.
pub(crate) fn server_error(server: &ServerLive) {
    if server.check.traffic_error() && server.set_oper(OperState::Down) {
        server.check.marked_down.notify_one();
    }
}

fn no_server(context: String) -> Error {
    Error::new(ErrorKind::NoServer, Side::Back, context)
}

/// A connection to a server of `backend`: the balancer picks the server, `reuse(server, now)` may
/// offer an idle connection to it, otherwise a new one is opened. Connect failures move to
/// another server, up to the backend's `retries` (each one counted in `retries`, for the
/// stream's record). `hash_key` is the connection's or request's key for a hashing
/// balancer (`None` for every other algorithm). `prefer` is the server a sticky request
/// names: taken while it is usable (waited for when full), the balancer picks otherwise and
/// after a failed connect to it.
pub(crate) async fn connect_or_reuse<'a, S: From<TcpStream>>(
    ctx: &'a WorkerCtx,
    backend: usize,
    hash_key: Option<u64>,
    prefer: Option<ServerId>,
    mut reuse: impl FnMut(&ServerLive, Instant) -> Option<S>,
    retries: Retries<'_>,
) -> Result<Connected<'a, S>, Error> {
    let config = &ctx.shared.config;
    let spec = config
        .backends
        .get(backend)
        .ok_or_else(|| Error::new(ErrorKind::NoServer, Side::Internal, "no such backend"))?;
    let local = ctx
        .backends
        .get(backend)
        .ok_or_else(|| Error::new(ErrorKind::NoServer, Side::Internal, "no such backend"))?;
    if local.is_empty() {
        return Err(no_server(format!("backend {} has no server", spec.name)).at(backend, None));
    }
    let attempts = retries.connect_retries(spec.retries).saturating_add(1);
    let context = |slot: &HeldSlot<'_>| format!("connect {}/{}", spec.name, slot.server().name);
    let mut tried = Tried::default();
    let mut last_error: Option<Error> = None;
    let mut previous: Option<Arc<ServerLive>> = None;
    sessions::note(|e| e.on_server(backend, None));
    for attempt in 0..attempts {
        let slot = match take_server(ctx, local, spec.queue, &tried, hash_key, prefer).await {
            Ok(found) => found,
            Err(e) => return Err(last_error.unwrap_or(e.at(backend, None))),
        };
        // Counted once a server is in hand: a retry that found no server made no attempt.
        if let Some(failed) = previous.take() {
            ctx.stats.connect_retries.add(1);
            *retries.done += 1;
            failed.counters(ctx.id).retries.add(1);
        }
        let chosen = Instant::now();
        picked(ctx, backend, slot.server(), chosen);
        let (id, address) = (slot.server().id, slot.server().address);
        if let Some(stream) = reuse(slot.server(), chosen) {
            sessions::set_state(SessionState::Forwarding);
            return Ok(Connected {
                stream,
                slot,
                reused: true,
                chosen,
                connected: chosen,
            });
        }
        tried.insert(id);
        // Every server tried once: start over rather than give up early.
        if tried.len() >= local.len() {
            tried.clear();
        }
        ctx.stats.connect_attempts.add(1);
        sessions::set_state(SessionState::Connecting);
        let error = match tokio::time::timeout(config.connect_timeout(backend), open(address)).await {
            // `send_proxy`: the PROXY header goes first (a failure to write it is a failed connect).
            Ok(Ok(stream)) if super::send_proxy::open(ctx, spec, slot.server(), &stream).is_ok() => {
                let _ = stream.set_nodelay(true);
                slot.server().counters(ctx.id).connections.add(1);
                sessions::set_state(SessionState::Forwarding);
                return Ok(Connected {
                    stream: S::from(stream),
                    slot,
                    reused: false,
                    chosen,
                    connected: Instant::now(),
                });
            }
            Ok(Ok(_)) => Error::new(
                ErrorKind::Connect,
                Side::Back,
                format!("{}: PROXY header", context(&slot)),
            ),
            Ok(Err(e)) => Error::new(ErrorKind::Connect, Side::Back, context(&slot)).with_source(e),
            Err(_) => Error::new(ErrorKind::ConnectTimeout, Side::Back, context(&slot)),
        };
        let server = Arc::clone(slot.server());
        server_error(&server);
        ctx.stats.connect_errors.add(1);
        server.counters(ctx.id).connect_failures.add(1);
        tracing::debug!(error = %error, attempt, "connect failed");
        last_error = Some(error.retryable(true).at(backend, Some(id)));
        previous = Some(server);
    }
    Err(last_error.unwrap_or_else(|| no_server("no server".into()).at(backend, None)))
}

/// A new connection to `address`: socket(2), a non-blocking connect(2), then one wait for
/// the reactor's first event on it. tokio's `TcpStream::connect` then asks SO_ERROR with a
/// getsockopt(2) every time; here the event itself says how the connect ended (a refused
/// or failed one raises EPOLLERR / EPOLLHUP, an established one only EPOLLOUT), so only a
/// failure costs the getsockopt that names its cause.
async fn open(address: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM.nonblocking(),
        Some(Protocol::TCP),
    )?;
    match socket.connect(&address.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {}
        Err(e) => return Err(e),
    }
    let stream = TcpStream::from_std(socket.into())?;
    let ready = stream
        .ready(tokio::io::Interest::WRITABLE | tokio::io::Interest::ERROR)
        .await?;
    if ready.is_error() || ready.is_write_closed() {
        return Err(stream.take_error()?.unwrap_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "connection closed while connecting",
            )
        }));
    }
    Ok(stream)
}

/// A server and a slot on it. When every usable server is full, waits in the backend's
/// queue ([`wait_in_queue`]). Fails at once when no server is usable at all (drained, in
/// maintenance or down): waiting cannot help. A usable `prefer` server (a sticky request)
/// is the only one taken, waited for in the queue when full like HAProxy's persistence; a
/// connect failure to it moves the request to another server unless `redispatch = false`,
/// which retries the same server while it stays usable.
async fn take_server<'a>(
    ctx: &WorkerCtx,
    local: &'a LocalBackend,
    queue: QueueOptions,
    tried: &Tried,
    hash_key: Option<u64>,
    prefer: Option<ServerId>,
) -> Result<HeldSlot<'a>, Error> {
    let fresh = |s: &ServerLive| s.has_room() && !tried.contains(s.id);
    let room = |s: &ServerLive| s.has_room();
    let held = |take: Take| match take {
        Take::Slot(slot, at) => Some(Some(HeldSlot {
            slot,
            at,
            backend: local,
        })),
        Take::Lost => Some(None),
        Take::Nothing => None,
    };
    let attempt = || {
        let again = |s: &ServerLive| !queue.redispatch || !tried.contains(s.id);
        if let Some(sticky) = prefer.and_then(|id| local.take_by_id(id, &again)) {
            return held(sticky);
        }
        // Every server with room already failed once: going back to one beats queueing.
        let take = |accept: &dyn Fn(&ServerLive) -> bool| held(local.take(accept, hash_key));
        take(&fresh).or_else(|| if tried.is_empty() { None } else { take(&room) })
    };
    // A pick that lost its server's last slot to another thread picks again (that server
    // no longer has room, so this ends).
    let free_slot = || loop {
        match attempt() {
            Some(Some(held)) => return Some(held),
            Some(None) => continue,
            None => return None,
        }
    };
    // The common case: a slot at once, without touching the queue or reading the clock.
    match free_slot() {
        Some(held) => Ok(held),
        None => wait_in_queue(ctx, local, queue, free_slot).await,
    }
}

/// Every usable server is full: waits in the backend's queue, first come first served
/// across every worker thread, until a slot released on any usable server is handed over
/// (up to `timeouts.queue`, then 503). Refused at once when `maxqueue` requests already
/// wait. A server state change wakes the line: each waiter picks again (keeping its
/// place), so a server that became usable takes them at once, and when none is usable any
/// more they fail at once instead of waiting for their timeout.
///
/// Balancing keys (`hash`) do not bind a queued request to one server: bounded-load
/// hashing already moves on to the next server with room, and in line the request takes
/// the first slot freed on any usable server.
async fn wait_in_queue<'a>(
    ctx: &WorkerCtx,
    local: &'a LocalBackend,
    options: QueueOptions,
    free_slot: impl Fn() -> Option<HeldSlot<'a>>,
) -> Result<HeldSlot<'a>, Error> {
    let live = &local.live;
    let limit = ctx.shared.config.timeouts.queue;
    let mut ticket: Option<Ticket> = None;
    let mut counted: Option<(Instant, QueuedGuard<'_>)> = None;
    loop {
        if !local.any_usable() {
            return Err(no_server(format!("backend {}: no usable server", live.name)));
        }
        let deadline = match &counted {
            Some((deadline, _)) => *deadline,
            None => {
                let Some(guard) = live.enqueue(options.maxqueue) else {
                    ctx.stats.queue_full.add(1);
                    return Err(Error::new(
                        ErrorKind::QueueFull,
                        Side::Back,
                        format!(
                            "backend {}: every server at maxconn and {} requests queued (maxqueue)",
                            live.name, options.maxqueue
                        ),
                    ));
                };
                ctx.stats.server_queued.add(1);
                queued(ctx, local, live.queued());
                let deadline = Instant::now() + limit;
                counted = Some((deadline, guard));
                deadline
            }
        };
        let mut waiter = live.queue().join(ticket);
        ticket = Some(waiter.ticket());
        // A slot freed while this request joined may have been missed by its releaser:
        // taken here, it goes straight back to the oldest waiter (perhaps this one).
        drop(free_slot());
        let wake = match tokio::time::timeout_at(deadline, waiter.woken()).await {
            Ok(wake) => wake,
            Err(_) => {
                ctx.stats.queue_timeouts.add(1);
                return Err(Error::new(
                    ErrorKind::QueueTimeout,
                    Side::Back,
                    format!("backend {}: every server at maxconn for {limit:?}", live.name),
                ));
            }
        };
        drop(waiter);
        if let Wake::Slot(grant) = wake
            && let Some(slot) = grant.into_slot()
        {
            // Drained or down since it was handed over: back it goes (to the next waiter
            // if the server is still usable for them), and this one picks again.
            if slot.server().is_usable() {
                let at = local.adopted(slot.server().id);
                return Ok(HeldSlot {
                    slot,
                    at,
                    backend: local,
                });
            }
        }
        if let Some(held) = free_slot() {
            return Ok(held);
        }
    }
}

/// A server was picked for a stream: the session's entry names it, and the backend's and
/// server's stream rates count it (from the clock read the pick made anyway).
fn picked(ctx: &WorkerCtx, backend: usize, server: &ServerLive, at: Instant) {
    sessions::note(|e| e.on_server(backend, Some(server.id)));
    let now_ms = crate::stats::epoch_ms(at.into_std());
    if let Some(cell) = ctx.stat().and_then(|s| s.backend(backend)) {
        cell.rate.add(now_ms);
    }
    server.counters(ctx.id).rate.add(now_ms);
}

/// A request joined the backend's queue (`waiting` now, itself included).
fn queued(ctx: &WorkerCtx, local: &LocalBackend, waiting: u32) {
    sessions::set_state(SessionState::Queued);
    // The queue path only: finding the index costs a scan of the thread's backends.
    let backend = ctx.backends.iter().position(|b| std::ptr::eq(b, local));
    if let Some(cell) = backend.and_then(|b| ctx.stat().and_then(|s| s.backend(b))) {
        cell.queue_max.set(cell.queue_max.get().max(u64::from(waiting)));
    }
}
