//! Accept loops: take budget permits, respect the accept rate, accept, hand the connection
//! to a session on this worker, or, for a shared socket, to the least loaded worker.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::budget::{ConnPermits, Taken};
use crate::runtime::stats::WorkerStats;
use crate::runtime::worker::WorkerCtx;

/// A connection accepted on one worker and served by another.
pub struct Handoff {
    pub frontend: usize,
    /// Handed over as a std socket: it deregisters from the accepting worker's reactor and
    /// registers with the serving worker's, so its events are not routed through the acceptor.
    pub stream: std::net::TcpStream,
    pub peer: SocketAddr,
    pub permits: ConnPermits,
}

/// Senders to every worker's inbox, with their load, for a shared socket's accept loop.
#[derive(Clone)]
pub struct Dispatcher {
    pub inboxes: Vec<mpsc::UnboundedSender<Handoff>>,
    pub stats: Vec<Arc<WorkerStats>>,
}

impl Dispatcher {
    /// The worker with the fewest open connections; `me` wins ties (no handoff needed).
    fn least_loaded(&self, me: usize) -> usize {
        let load = |w: usize| self.stats.get(w).map_or(u64::MAX, |s| s.sessions_active.get());
        let mut best = me;
        for w in 0..self.stats.len() {
            if load(w) < load(best) {
                best = w;
            }
        }
        best
    }
}

pub async fn accept_loop(ctx: Rc<WorkerCtx>, frontend: usize, listener: TcpListener, dispatch: Option<Dispatcher>) {
    let shared = Arc::clone(&ctx.shared);
    loop {
        let permits = tokio::select! {
            biased;
            taken = shared.budgets.acquire(frontend) => match taken {
                Taken::Now(p) => p,
                Taken::AfterWait(p) => {
                    ctx.stats.accept_paused.add(1);
                    tracing::debug!(worker = ctx.id, frontend, "accept resumed after a full maxconn budget");
                    p
                }
            },
            _ = ctx.stopping() => return,
        };
        let wait = shared.budgets.rate.reserve();
        if !wait.is_zero() {
            ctx.stats.accept_rate_delayed.add(1);
            tokio::select! {
                biased;
                _ = tokio::time::sleep(wait) => {}
                _ = ctx.stopping() => return,
            }
        }
        // Stop first: under constant load accept() is always ready, and a stopping
        // generation must still notice it has to stop.
        let accepted = tokio::select! {
            biased;
            _ = ctx.stopping() => return,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                match &dispatch {
                    Some(d) => hand_off(&ctx, d, frontend, stream, peer, permits),
                    None => ctx.spawn_session(frontend, stream, peer, permits),
                }
            }
            Err(e) => {
                drop(permits);
                ctx.stats.accept_errors.add(1);
                accept_error_pause(&e).await;
            }
        }
    }
}

fn hand_off(
    ctx: &Rc<WorkerCtx>,
    d: &Dispatcher,
    frontend: usize,
    stream: TcpStream,
    peer: SocketAddr,
    permits: ConnPermits,
) {
    let target = d.least_loaded(ctx.id);
    if target == ctx.id {
        return ctx.spawn_session(frontend, stream, peer, permits);
    }
    let Ok(std_stream) = stream.into_std() else {
        return;
    };
    let Some(inbox) = d.inboxes.get(target) else {
        return;
    };
    if let Err(mpsc::error::SendError(h)) = inbox.send(Handoff {
        frontend,
        stream: std_stream,
        peer,
        permits,
    }) {
        // The target worker is gone (shutting down): serve it here rather than drop it.
        if let Ok(stream) = TcpStream::from_std(h.stream) {
            ctx.spawn_session(h.frontend, stream, h.peer, h.permits);
        }
    }
}

/// Serves connections other workers handed to this one.
pub async fn inbox_loop(ctx: Rc<WorkerCtx>, mut inbox: mpsc::UnboundedReceiver<Handoff>) {
    while let Some(h) = inbox.recv().await {
        match TcpStream::from_std(h.stream) {
            Ok(stream) => ctx.spawn_session(h.frontend, stream, h.peer, h.permits),
            Err(e) => tracing::debug!(error = %e, "handed-off connection could not be registered"),
        }
    }
}

/// Out of descriptors or memory: pause instead of spinning (the pending connection stays in
/// the backlog). Other errors concern one aborted connection: continue at once.
async fn accept_error_pause(e: &io::Error) {
    match e.raw_os_error() {
        Some(code)
            if code == rustix::io::Errno::MFILE.raw_os_error()
                || code == rustix::io::Errno::NFILE.raw_os_error()
                || code == rustix::io::Errno::NOBUFS.raw_os_error()
                || code == rustix::io::Errno::NOMEM.raw_os_error() =>
        {
            tracing::warn!(error = %e, "accept failed for lack of resources; pausing 100ms");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        _ => tracing::debug!(error = %e, "accept failed"),
    }
}
