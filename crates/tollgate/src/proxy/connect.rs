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
use crate::ctx::backends::{LocalBackend, Tried};
use crate::error::{Error, ErrorKind, Side};
use crate::live::ServerId;
use crate::live::server::{ServerLive, ServerSlot};

/// A slot on a server, as this worker holds it: dropping it releases the slot and tells
/// this worker's balancer.
pub(crate) struct HeldSlot<'a> {
    slot: Option<ServerSlot>,
    backend: &'a LocalBackend,
}

impl HeldSlot<'_> {
    pub(crate) fn server(&self) -> Option<&Arc<ServerLive>> {
        self.slot.as_ref().map(ServerSlot::server)
    }
}

impl Drop for HeldSlot<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            let id = slot.server().id;
            drop(slot);
            self.backend.released(id);
        }
    }
}

/// A server connection ready for a session: a socket (TCP mode), or what HTTP mode keeps
/// (`S`, which a fresh socket becomes).
pub(crate) struct Connected<'a, S = TcpStream> {
    pub stream: S,
    pub slot: HeldSlot<'a>,
    pub server: Arc<ServerLive>,
    /// Taken from the idle pool rather than freshly connected.
    pub reused: bool,
    /// When the server was chosen (its slot taken) and when the connection was ready.
    pub chosen: Instant,
    pub connected: Instant,
}

/// A fresh connection to a server of `backend` (TCP mode).
pub(crate) async fn connect<'a>(
    ctx: &'a WorkerCtx,
    backend: usize,
    retries: &mut u32,
) -> Result<Connected<'a, TcpStream>, Error> {
    connect_or_reuse(ctx, backend, |_| None, retries).await
}

fn no_server(context: String) -> Error {
    Error::new(ErrorKind::NoServer, Side::Back, context)
}

/// A connection to a server of `backend`: the balancer picks the server, `reuse(server)` may
/// offer an idle connection to it, otherwise a new one is opened. Connect failures move to
/// another server, up to the backend's `retries` (each one counted in `retries`, for the
/// stream's record).
pub(crate) async fn connect_or_reuse<'a, S: From<TcpStream>>(
    ctx: &'a WorkerCtx,
    backend: usize,
    mut reuse: impl FnMut(ServerId) -> Option<S>,
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
    let mut tried = Tried::default();
    let mut last_error: Option<Error> = None;
    let mut previous: Option<Arc<ServerLive>> = None;
    for attempt in 0..attempts {
        let slot = match take_server(ctx, local, &tried).await {
            Ok(found) => found,
            Err(e) => return Err(last_error.unwrap_or(e.at(backend, None))),
        };
        // Counted once a server is in hand: a retry that found no server made no attempt.
        if let Some(failed) = previous.take() {
            ctx.stats.connect_retries.add(1);
            *retries += 1;
            failed.counters(ctx.id).retries.add(1);
        }
        let Some(server) = slot.server().cloned() else {
            continue;
        };
        let chosen = Instant::now();
        if let Some(stream) = reuse(server.id) {
            return Ok(Connected {
                stream,
                slot,
                server,
                reused: true,
                chosen,
                connected: chosen,
            });
        }
        tried.insert(server.id);
        // Every server tried once: start over rather than give up early.
        if tried.len() >= local.len() {
            tried.clear();
        }
        ctx.stats.connect_attempts.add(1);
        let context = || format!("connect {}/{}", spec.name, server.name);
        let error = match tokio::time::timeout(config.timeouts.connect, TcpStream::connect(server.address)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                server.counters(ctx.id).connections.add(1);
                return Ok(Connected {
                    stream: S::from(stream),
                    slot,
                    server,
                    reused: false,
                    chosen,
                    connected: Instant::now(),
                });
            }
            Ok(Err(e)) => Error::new(ErrorKind::Connect, Side::Back, context()).with_source(e),
            Err(_) => Error::new(ErrorKind::ConnectTimeout, Side::Back, context()),
        };
        ctx.stats.connect_errors.add(1);
        server.counters(ctx.id).connect_failures.add(1);
        tracing::debug!(error = %error, attempt, "connect failed");
        last_error = Some(error.retryable(true).at(backend, Some(server.id)));
        previous = Some(server);
    }
    Err(last_error.unwrap_or_else(|| no_server("no server".into()).at(backend, None)))
}

/// A server and a slot on it; parks on the backend's slot-released notification when every
/// usable server is full, until `timeouts.queue`. Fails at once when no server is usable at
/// all (drained, in maintenance or down): waiting cannot help.
async fn take_server<'a>(ctx: &WorkerCtx, local: &'a LocalBackend, tried: &Tried) -> Result<HeldSlot<'a>, Error> {
    let deadline = Instant::now() + ctx.shared.config.timeouts.queue;
    let mut queued = None;
    loop {
        // Register interest before looking, so a slot freed in between is not missed.
        let released = local.live.slot_released();
        tokio::pin!(released);
        released.as_mut().enable();
        let fresh = |s: &ServerLive| s.has_room() && !tried.contains(s.id);
        let room = |s: &ServerLive| s.has_room();
        // Every server with room already failed once: going back to one beats queueing.
        let picked = local.pick(&fresh, None).or_else(|| {
            if tried.is_empty() {
                None
            } else {
                local.pick(&room, None)
            }
        });
        if let Some(server) = picked {
            if let Some(slot) = server.try_take() {
                local.taken(server.id);
                return Ok(HeldSlot {
                    slot: Some(slot),
                    backend: local,
                });
            }
            continue; // another worker took the last slot between pick and take
        }
        if !local.any_usable() {
            return Err(no_server(format!("backend {}: no usable server", local.live.name)));
        }
        if queued.is_none() {
            queued = Some(local.live.enqueue());
            ctx.stats.server_queued.add(1);
        }
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
