//! A worker thread's inbox: the one way into a thread from outside it. Carries connections
//! handed over by another thread's accept loop and the runtime commands the worker process
//! fans out to every thread (weights for the thread's balancers, sessions to close). The
//! loop that acts on them is `runtime::inbox::run`.
//!
//! Unbounded on purpose: its senders are accept loops under the maxconn budget (so the
//! number of handoffs in flight is bounded by it) and the command applier (a few messages
//! per operator command).

use std::net::SocketAddr;

use tokio::sync::mpsc;

use crate::budget::ConnPermits;
use crate::live::ServerId;

/// A connection accepted on one worker and served by another.
pub(crate) struct Handoff {
    pub frontend: usize,
    /// Never registered with the accepting worker's reactor; the serving worker's session
    /// registers it if it has to wait, so its events are not routed through the acceptor.
    pub stream: std::net::TcpStream,
    pub peer: SocketAddr,
    pub permits: ConnPermits,
}

pub(crate) enum Message {
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
pub(crate) type Ack = std::sync::mpsc::Sender<()>;

pub(crate) type Sender = mpsc::UnboundedSender<Message>;
pub(crate) type Receiver = mpsc::UnboundedReceiver<Message>;
