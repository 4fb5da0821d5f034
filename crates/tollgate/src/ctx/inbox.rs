//! A worker thread's inbox: the one way into a thread from outside it. Carries connections
//! handed over by another thread's accept loop and the runtime commands the worker process
//! fans out to every thread (weights for the thread's balancers, sessions to close). The
//! loop that acts on them is `runtime::inbox::run`.
//!
//! Unbounded on purpose: its senders are accept loops under the maxconn budget (so the
//! number of handoffs in flight is bounded by it) and the command applier (a few messages
//! per operator command).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc;

use crate::budget::ConnPermits;
use crate::live::ServerId;

/// Connections handed to each worker and not yet turned into a session there. A stopping
/// worker keeps its inbox until its count is zero and no accept loop of the process runs
/// any more: a connection accepted just before the stop and still in the channel would
/// otherwise be dropped unserved (a reset, during every reload).
#[derive(Debug)]
pub(crate) struct HandoffCounts(Box<[AtomicUsize]>);

impl HandoffCounts {
    pub(crate) fn new(workers: usize) -> Self {
        HandoffCounts((0..workers).map(|_| AtomicUsize::new(0)).collect())
    }

    /// Handed to `worker` and not served yet.
    pub(crate) fn pending(&self, worker: usize) -> usize {
        self.0.get(worker).map_or(0, |c| c.load(Ordering::Acquire))
    }
}

/// One handed-over connection in its target's count, until dropped (after its session is
/// spawned, or with the message if the target never read it).
#[derive(Debug)]
pub(crate) struct InFlight {
    counts: Arc<HandoffCounts>,
    worker: usize,
}

impl InFlight {
    pub(crate) fn new(counts: &Arc<HandoffCounts>, worker: usize) -> Self {
        if let Some(c) = counts.0.get(worker) {
            c.fetch_add(1, Ordering::AcqRel);
        }
        InFlight {
            counts: Arc::clone(counts),
            worker,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(c) = self.counts.0.get(self.worker) {
            c.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A connection accepted on one worker and served by another.
pub(crate) struct Handoff {
    pub frontend: usize,
    /// Never registered with the accepting worker's reactor; the serving worker's session
    /// registers it if it has to wait, so its events are not routed through the acceptor.
    pub stream: std::net::TcpStream,
    pub peer: SocketAddr,
    pub permits: ConnPermits,
    /// Counted in the target's `HandoffCounts` while on its way.
    pub in_flight: Option<InFlight>,
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
    /// Copy out what only this thread can read (`show sessions`, `show errors`).
    Show {
        query: ThreadQuery,
        reply: std::sync::mpsc::Sender<ThreadAnswer>,
    },
}

/// What a `Show` message asks one thread for.
#[derive(Debug, Clone)]
pub(crate) enum ThreadQuery {
    /// Its live connections (on one backend, or one of its servers, by name).
    Sessions {
        backend: Option<String>,
        server: Option<String>,
    },
    /// Its last malformed requests and responses.
    Errors,
}

/// One thread's answer to a `ThreadQuery`.
#[derive(Debug)]
pub(crate) enum ThreadAnswer {
    Sessions {
        sessions: Vec<crate::command::show::SessionView>,
        left_out: u64,
    },
    Errors(Vec<crate::command::show::ErrorCapture>),
}

/// Dropped by the thread once it has acted on a command: the applier waits for every
/// thread's, so a command's answer means "in effect on every thread".
pub(crate) type Ack = std::sync::mpsc::Sender<()>;

pub(crate) type Sender = mpsc::UnboundedSender<Message>;
pub(crate) type Receiver = mpsc::UnboundedReceiver<Message>;
