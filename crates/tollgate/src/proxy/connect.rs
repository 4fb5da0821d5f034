//! Getting a server connection for a session: ask the backend's balancer for a server with
//! room, take a slot on it, connect with a timeout; on failure try another server, up to the
//! backend's `retries`. When every server is at its maxconn, wait (parked, not polling) for a
//! slot up to `timeouts.queue`.

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Side};
use crate::runtime::worker::WorkerCtx;
use crate::server::{BackendState, ServerSlot};

/// Chooses a server with room; backup servers only when no primary server has room.
fn pick(ctx: &WorkerCtx, backend: usize, state: &BackendState, tried: u64) -> Option<usize> {
    let servers = &ctx.shared.config.backends.get(backend)?.servers;
    let mut balancer = ctx.balancers.get(backend)?.borrow_mut();
    let usable = |backup: bool| {
        move |i: usize| {
            let room = state.servers.get(i).is_some_and(|s| s.has_room());
            let role = servers.get(i).is_some_and(|s| s.backup == backup);
            room && role && (i >= 64 || tried & (1 << i) == 0)
        }
    };
    balancer.pick(&usable(false)).or_else(|| balancer.pick(&usable(true)))
}

/// A server connection ready for a session: a socket (TCP mode), or what HTTP mode keeps
/// (`S`, which a fresh socket becomes).
pub struct Connected<S = TcpStream> {
    pub stream: S,
    pub slot: ServerSlot,
    /// Index of the server in its backend.
    pub server: usize,
    /// Taken from the idle pool rather than freshly connected.
    pub reused: bool,
}

/// A fresh connection to a server of `backend` (TCP mode).
pub async fn connect(ctx: &WorkerCtx, backend: usize) -> Result<Connected, Error> {
    connect_or_reuse(ctx, backend, |_| None).await
}

/// A connection to a server of `backend`: the balancer picks the server, `reuse(server)` may
/// offer an idle connection to it, otherwise a new one is opened. Connect failures move to
/// another server, up to the backend's `retries`.
pub async fn connect_or_reuse<S: From<TcpStream>>(
    ctx: &WorkerCtx,
    backend: usize,
    mut reuse: impl FnMut(usize) -> Option<S>,
) -> Result<Connected<S>, Error> {
    let config = &ctx.shared.config;
    let no_backend = || Error::new(ErrorKind::NoServer, Side::Internal, "no such backend");
    let state = ctx.shared.backends.get(backend).ok_or_else(no_backend)?;
    let spec = config.backends.get(backend).ok_or_else(no_backend)?;
    if spec.servers.is_empty() {
        return Err(Error::new(
            ErrorKind::NoServer,
            Side::Back,
            format!("backend {} has no server", spec.name),
        )
        .at(backend, None));
    }
    let attempts = spec.retries.saturating_add(1);
    let mut tried: u64 = 0;
    let mut last_error = None;
    for attempt in 0..attempts {
        let (index, slot) = match take_server(ctx, backend, state, tried).await {
            Ok(found) => found,
            Err(e) => return Err(last_error.unwrap_or(e.at(backend, None))),
        };
        // Counted once a server is in hand: a retry that found no server made no attempt.
        if attempt > 0 {
            ctx.stats.connect_retries.add(1);
        }
        if let Some(stream) = reuse(index) {
            return Ok(Connected {
                stream,
                slot,
                server: index,
                reused: true,
            });
        }
        if index < 64 {
            tried |= 1 << index;
        }
        // Every server tried once: start over rather than give up early.
        if spec.servers.len() < 64 && tried.count_ones() as usize >= spec.servers.len() {
            tried = 0;
        }
        let Some(server) = spec.servers.get(index) else {
            continue;
        };
        ctx.stats.connect_attempts.add(1);
        slot.server()
            .connects
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let error = match tokio::time::timeout(config.timeouts.connect, TcpStream::connect(server.address)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(Connected {
                    stream: S::from(stream),
                    slot,
                    server: index,
                    reused: false,
                });
            }
            Ok(Err(e)) => Error::new(
                ErrorKind::Connect,
                Side::Back,
                format!("connect {}/{}", spec.name, server.name),
            )
            .with_source(e),
            Err(_) => Error::new(
                ErrorKind::ConnectTimeout,
                Side::Back,
                format!("connect {}/{}", spec.name, server.name),
            ),
        };
        ctx.stats.connect_errors.add(1);
        slot.server()
            .connect_errors
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(error = %error, attempt, "connect failed");
        last_error = Some(error.retryable(true).at(backend, Some(index)));
    }
    Err(last_error.unwrap_or_else(|| Error::new(ErrorKind::NoServer, Side::Back, "no server").at(backend, None)))
}

/// A server and a slot on it; parks on the backend's slot-released notification when every
/// usable server is full, until `timeouts.queue`.
async fn take_server(
    ctx: &WorkerCtx,
    backend: usize,
    state: &BackendState,
    tried: u64,
) -> Result<(usize, ServerSlot), Error> {
    let deadline = Instant::now() + ctx.shared.config.timeouts.queue;
    let mut queued = false;
    loop {
        // Register interest before looking, so a slot freed in between is not missed.
        let released = state.slot_released();
        tokio::pin!(released);
        released.as_mut().enable();
        if let Some(index) = pick(ctx, backend, state, tried) {
            if let Some(slot) = state.servers.get(index).and_then(|s| s.try_take()) {
                return Ok((index, slot));
            }
            continue; // another worker took the last slot between pick and take
        }
        if !queued {
            queued = true;
            ctx.stats.server_queued.add(1);
        }
        if tokio::time::timeout_at(deadline, released).await.is_err() {
            ctx.stats.queue_timeouts.add(1);
            return Err(Error::new(
                ErrorKind::QueueTimeout,
                Side::Back,
                format!(
                    "backend {}: every server at maxconn for {:?}",
                    state.name, ctx.shared.config.timeouts.queue
                ),
            ));
        }
    }
}
