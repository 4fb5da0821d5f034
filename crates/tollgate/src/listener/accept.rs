//! Accept loops: wait for a pending connection, take budget permits, respect the accept
//! rate, accept, hand the connection to a session on this worker, or, for a shared socket,
//! to the least loaded worker.
//!
//! Invariant: a loop holds `maxconn` permits only between a connection becoming pending on
//! its socket and that connection being accepted (then the session holds them). An idle
//! loop holds none, so N slots are N connections across every worker, and a slot that
//! frees goes to whichever loop has a connection waiting.
//!
//! Rebalancing (`connection_rebalance`): a worker's own SO_REUSEPORT socket gets whatever
//! the kernel's 4-tuple hash sends it, which with few long-lived connections can crowd one
//! worker while another idles. On each accept the worker compares its open sessions with
//! the least loaded worker's (relaxed loads of their counters, no lock) and, when it has
//! more than `least + 1 + least / 4` ([`crowded`]), hands the connection over
//! through that worker's inbox. The slack grows with the load, so it reacts to 6 against 1
//! and not to 13 against 12, and a connection that stays costs only those loads.
//!
//! Accepted sockets are non-blocking and *not* registered with the reactor: a session
//! registers its client socket only when it first has to wait (`relay::lazy`), and a
//! handed-off socket crosses workers without a deregistration. TCP_NODELAY is set once on
//! the listening socket; Linux copies it into every accepted one, which saves a setsockopt
//! per connection.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use rustix::net::SocketFlags;
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use super::spawn_session;
use crate::budget::Taken;
use crate::ctx::WorkerCtx;
use crate::ctx::inbox::{Handoff, HandoffCounts, InFlight, Message};
use crate::stats::WorkerStats;

/// Senders to every worker's inbox, with their load, for a shared socket's accept loop.
#[derive(Clone)]
pub(crate) struct Dispatcher {
    pub inboxes: Vec<crate::ctx::inbox::Sender>,
    pub stats: Vec<Arc<WorkerStats>>,
    /// Connections handed to each worker, not yet served (a stopping worker waits for its own).
    pub in_flight: Arc<HandoffCounts>,
}

impl Dispatcher {
    fn load(&self, w: usize) -> u64 {
        self.stats.get(w).map_or(u64::MAX, |s| s.sessions_active.get())
    }

    /// The worker with the fewest open connections; `me` wins ties (no handoff needed).
    fn least_loaded(&self, me: usize) -> usize {
        let mut best = me;
        for w in 0..self.stats.len() {
            if self.load(w) < self.load(best) {
                best = w;
            }
        }
        best
    }

    /// Where a connection accepted by `me` on its own socket should be served: another
    /// worker only if `me` is crowded compared with the least loaded one.
    fn rebalance_target(&self, me: usize) -> Option<usize> {
        let least = self.least_loaded(me);
        (least != me && crowded(self.load(me), self.load(least))).then_some(least)
    }
}

/// A worker with `mine` open sessions is crowded next to one with `least`: `mine` is above
/// `least + 1 + least / 4` (a slack that grows with the load, so noise at high connection
/// counts moves nothing).
pub(crate) fn crowded(mine: u64, least: u64) -> bool {
    mine > least.saturating_add(1).saturating_add(least / 4)
}

/// Who serves what an accept loop accepts.
#[derive(Clone)]
pub(crate) enum Placement {
    /// This worker, always.
    Here,
    /// This worker's own SO_REUSEPORT socket: here, unless this worker is crowded.
    Rebalance(Dispatcher),
    /// A shared socket: the least loaded worker.
    Shared(Dispatcher),
}

/// A listening socket registered with this worker's reactor.
pub(crate) type Listener = AsyncFd<std::net::TcpListener>;

/// Prepares a bound, non-blocking listening socket for `accept_loop`.
pub(crate) fn listener(socket: std::net::TcpListener) -> io::Result<Listener> {
    // Inherited by accepted sockets (checked by the test below).
    socket2::SockRef::from(&socket).set_tcp_nodelay(true)?;
    tollgate_sys::reactor::register_listener(socket)
}

/// One connection: non-blocking, close-on-exec, not registered anywhere (the accept loop
/// does the same in steps, taking its permits between readiness and accept(2)).
#[cfg(test)]
async fn accept(listener: &Listener) -> io::Result<(std::net::TcpStream, SocketAddr)> {
    loop {
        let mut ready = listener.readable().await?;
        if let Ok(accepted) = ready.try_io(|l| accept_nonblocking(l.get_ref())) {
            return accepted;
        }
    }
}

fn accept_nonblocking(listener: &std::net::TcpListener) -> io::Result<(std::net::TcpStream, SocketAddr)> {
    let (fd, addr) = rustix::net::acceptfrom_with(listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)?;
    let peer = addr
        .and_then(|a| SocketAddr::try_from(a).ok())
        .ok_or_else(|| io::Error::other("accepted a connection without an IP peer address"))?;
    Ok((std::net::TcpStream::from(fd), peer))
}

pub(crate) async fn accept_loop(ctx: Rc<WorkerCtx>, frontend: usize, listener: Listener, placement: Placement) {
    let shared = Arc::clone(&ctx.shared);
    // One stop signal for the loop's whole life: made per accept, its waiter would be
    // registered and removed again for every connection.
    let stop = ctx.stopping();
    tokio::pin!(stop);
    loop {
        // Disabled by the operator: take no budget and accept nothing until enabled.
        if shared.paused.is_disabled(frontend) {
            tokio::select! {
                biased;
                _ = &mut stop => return,
                () = shared.paused.wait_enabled(frontend) => {}
            }
        }
        // Wait for a pending connection *before* taking a budget slot: a loop that held its
        // permits while idle would keep `maxconn` slots from the other workers' loops, whose
        // connections would then wait in their backlog while the frontend serves nothing.
        let mut ready = tokio::select! {
            biased;
            _ = &mut stop => return,
            r = listener.readable() => match r {
                Ok(ready) => ready,
                Err(e) => {
                    ctx.stats.accept_errors.add(1);
                    accept_error_pause(&e).await;
                    continue;
                }
            },
        };
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
            _ = &mut stop => return,
        };
        let wait = shared.budgets.rate.reserve();
        if !wait.is_zero() {
            ctx.stats.accept_rate_delayed.add(1);
            tokio::select! {
                biased;
                _ = tokio::time::sleep(wait) => {}
                _ = &mut stop => return,
            }
        }
        // Stop first: under constant load accept() is always ready, and a stopping
        // generation must still notice it has to stop (the pending connection stays in the
        // backlog for the next generation).
        if ctx.is_stopping() {
            return;
        }
        // Disabled while this loop waited for permits: leave the connection in the backlog,
        // where it waits until the frontend is enabled (the top of the loop).
        if shared.paused.is_disabled(frontend) {
            continue;
        }
        let accepted = match ready.try_io(|l| accept_nonblocking(l.get_ref())) {
            Ok(accepted) => accepted,
            // Gone before accept(2) (the client reset it): hand the permits back, wait again.
            Err(_would_block) => continue,
        };
        match accepted {
            // Refused by `allow` / `deny` before any handoff: dropped (closed) here.
            Ok((_, peer)) if !super::admit(&ctx, frontend, peer.ip()) => {}
            Ok((stream, peer)) => match &placement {
                Placement::Here => spawn_session(&ctx, frontend, stream, peer, permits),
                Placement::Rebalance(d) => match d.rebalance_target(ctx.id) {
                    Some(target) => {
                        if hand_off(
                            &ctx,
                            d,
                            target,
                            Handoff {
                                frontend,
                                stream,
                                peer,
                                permits,
                                in_flight: None,
                            },
                        ) {
                            ctx.stats.connections_rebalanced.add(1);
                        }
                    }
                    None => spawn_session(&ctx, frontend, stream, peer, permits),
                },
                Placement::Shared(d) => {
                    let handoff = Handoff {
                        frontend,
                        stream,
                        peer,
                        permits,
                        in_flight: None,
                    };
                    hand_off(&ctx, d, d.least_loaded(ctx.id), handoff);
                }
            },
            Err(e) => {
                drop(permits);
                ctx.stats.accept_errors.add(1);
                accept_error_pause(&e).await;
            }
        }
    }
}

/// Has `target` serve the connection; true if it went to another worker. The socket was
/// never registered with this worker's reactor, so it leaves nothing behind here.
fn hand_off(ctx: &Rc<WorkerCtx>, d: &Dispatcher, target: usize, mut h: Handoff) -> bool {
    let inbox = match d.inboxes.get(target) {
        Some(inbox) if target != ctx.id => inbox,
        _ => {
            spawn_session(ctx, h.frontend, h.stream, h.peer, h.permits);
            return false;
        }
    };
    h.in_flight = Some(InFlight::new(&d.in_flight, target));
    match inbox.send(Message::Connection(h)) {
        Ok(()) => true,
        Err(mpsc::error::SendError(Message::Connection(h))) => {
            // The target worker is gone (shutting down): serve it here rather than drop it.
            spawn_session(ctx, h.frontend, h.stream, h.peer, h.permits);
            false
        }
        Err(_) => false,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The saved setsockopt relies on Linux copying TCP_NODELAY from the listening socket
    /// into accepted ones, and sessions rely on accepted sockets being non-blocking.
    #[test]
    fn crowded_needs_a_lead_proportional_to_the_least_load() {
        // least 0: more than 1.
        assert!(!crowded(1, 0));
        assert!(crowded(2, 0));
        // least 1: more than 2.
        assert!(!crowded(2, 1));
        assert!(crowded(3, 1));
        // least 4: more than 6; least 12: more than 16 (13 against 12 stays put).
        assert!(!crowded(6, 4));
        assert!(crowded(7, 4));
        assert!(!crowded(13, 12));
        assert!(!crowded(16, 12));
        assert!(crowded(17, 12));
        assert!(!crowded(u64::MAX, u64::MAX));
    }

    #[tokio::test]
    async fn accepted_sockets_inherit_nodelay_and_are_nonblocking() {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let listener = listener(std_listener).unwrap();
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (accepted, peer) = accept(&listener).await.unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        assert!(
            accepted.nodelay().unwrap(),
            "TCP_NODELAY not inherited from the listener"
        );
        let mut buf = [0u8; 1];
        let err = std::io::Read::read(&mut &accepted, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock, "accepted socket is blocking");
    }
}
