//! A worker thread's inbox: the one way into a thread from outside it. Carries connections
//! handed over by another thread's accept loop and the runtime commands the worker process
//! fans out to every thread (weights for the thread's balancers, sessions to close).
//!
//! Unbounded on purpose: its senders are accept loops under the maxconn budget (so the
//! number of handoffs in flight is bounded by it) and the command applier (a few messages
//! per operator command).

use std::rc::Rc;

use tokio::sync::mpsc;

use super::worker::WorkerCtx;
use crate::listener::accept::Handoff;
use crate::live::ServerId;

pub enum Message {
    Connection(Handoff),
    /// A server's effective weight changed: tell this thread's balancer of `backend`.
    Weight {
        backend: usize,
        server: ServerId,
        weight: u32,
        done: Ack,
    },
    /// Close this thread's sessions on `server` (its kill epoch moved) and its idle pooled
    /// connections to it.
    Kill {
        server: ServerId,
        done: Ack,
    },
}

/// Dropped by the thread once it has acted on a command: the applier waits for every
/// thread's, so a command's answer means "in effect on every thread".
pub type Ack = std::sync::mpsc::Sender<()>;

pub type Sender = mpsc::UnboundedSender<Message>;
pub type Receiver = mpsc::UnboundedReceiver<Message>;

/// Runs the inbox until the worker stops.
pub async fn run(ctx: Rc<WorkerCtx>, mut inbox: Receiver) {
    while let Some(msg) = inbox.recv().await {
        match msg {
            Message::Connection(h) => ctx.spawn_session(h.frontend, h.stream, h.peer, h.permits),
            Message::Weight {
                backend,
                server,
                weight,
                done,
            } => {
                if let Some(b) = ctx.backends.get(backend) {
                    b.set_weight(server, weight);
                }
                drop(done);
            }
            Message::Kill { server, done } => {
                ctx.http_pool.forget(server);
                ctx.kills.notify_waiters();
                drop(done);
            }
        }
    }
}
