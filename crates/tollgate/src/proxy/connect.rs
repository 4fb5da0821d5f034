//! Getting a server connection for a session: ask the worker's view of the backend for a
//! usable server with room, take a slot on it, connect with a timeout; on failure try
//! another server, up to the backend's `retries`. When every usable server is at its
//! maxconn, wait (parked, not polling) for a slot up to `timeouts.queue`.
//!
//! Servers already tried are remembered by id (`Tried`), so a retry never goes back to a
//! failed server however large the backend, until every server has been tried once.

use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::ctx::WorkerCtx;
use crate::ctx::backends::{LocalBackend, Position, Take, Tried};
use crate::error::{Error, ErrorKind, Side};
use crate::live::ServerId;
use crate::live::backend::QueuedGuard;
use crate::live::server::{OperState, ServerLive, ServerSlot};

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

/// A fresh connection to a server of `backend` (TCP mode); `hash_key` as for
/// [`connect_or_reuse`].
pub(crate) async fn connect<'a>(
    ctx: &'a WorkerCtx,
    backend: usize,
    hash_key: Option<u64>,
    retries: &mut u32,
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
    retries: &mut u32,
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
    let attempts = spec.retries.saturating_add(1);
    let context = |slot: &HeldSlot<'_>| format!("connect {}/{}", spec.name, slot.server().name);
    let mut tried = Tried::default();
    let mut last_error: Option<Error> = None;
    let mut previous: Option<Arc<ServerLive>> = None;
    for attempt in 0..attempts {
        let slot = match take_server(ctx, local, &tried, hash_key, prefer).await {
            Ok(found) => found,
            Err(e) => return Err(last_error.unwrap_or(e.at(backend, None))),
        };
        // Counted once a server is in hand: a retry that found no server made no attempt.
        if let Some(failed) = previous.take() {
            ctx.stats.connect_retries.add(1);
            *retries += 1;
            failed.counters(ctx.id).retries.add(1);
        }
        let chosen = Instant::now();
        let (id, address) = (slot.server().id, slot.server().address);
        if let Some(stream) = reuse(slot.server(), chosen) {
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
        let error = match tokio::time::timeout(config.timeouts.connect, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                slot.server().counters(ctx.id).connections.add(1);
                return Ok(Connected {
                    stream: S::from(stream),
                    slot,
                    reused: false,
                    chosen,
                    connected: Instant::now(),
                });
            }
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

/// A server and a slot on it; parks on the backend's slot-released notification when every
/// usable server is full, until `timeouts.queue`. Fails at once when no server is usable at
/// all (drained, in maintenance or down): waiting cannot help. A usable `prefer` server
/// not yet tried is the only one taken (waited for when full, like HAProxy's persistence).
async fn take_server<'a>(
    ctx: &WorkerCtx,
    local: &'a LocalBackend,
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
        if let Some(sticky) = prefer.and_then(|id| local.take_by_id(id, &|s| !tried.contains(s.id))) {
            return held(sticky);
        }
        // Every server with room already failed once: going back to one beats queueing.
        let take = |accept: &dyn Fn(&ServerLive) -> bool| held(local.take(accept, hash_key));
        take(&fresh).or_else(|| if tried.is_empty() { None } else { take(&room) })
    };
    let mut queue: Option<(Instant, QueuedGuard<'_>)> = None;
    loop {
        // The common case takes a slot at once, without registering for releases (a lock
        // on the backend's `Notify`) or reading the clock.
        match attempt() {
            Some(Some(held)) => return Ok(held),
            Some(None) => continue,
            None => {}
        }
        // Nothing free: register for a release, then look again, so a slot freed in
        // between is not missed.
        let released = local.live.slot_released();
        tokio::pin!(released);
        released.as_mut().enable();
        match attempt() {
            Some(Some(held)) => return Ok(held),
            Some(None) => continue,
            None => {}
        }
        if !local.any_usable() {
            return Err(no_server(format!("backend {}: no usable server", local.live.name)));
        }
        let deadline = match &queue {
            Some((deadline, _)) => *deadline,
            None => {
                ctx.stats.server_queued.add(1);
                let deadline = Instant::now() + ctx.shared.config.timeouts.queue;
                queue = Some((deadline, local.live.enqueue()));
                deadline
            }
        };
        if tokio::time::timeout_at(deadline, released).await.is_err() {
            ctx.stats.queue_timeouts.add(1);
            return Err(Error::new(
                ErrorKind::QueueTimeout,
                Side::Back,
                format!(
                    "backend {}: every server at maxconn for {:?}",
                    local.live.name, ctx.shared.config.timeouts.queue
                ),
            ));
        }
    }
}
