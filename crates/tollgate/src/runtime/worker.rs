//! One worker thread: a current_thread tokio runtime that owns its listeners, its sessions,
//! its buffer pool and its balancer state. Nothing here is shared with another worker except
//! through `Shared` (atomics touched once per connection) and the handoff inbox.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc, watch};

use super::stats::WorkerStats;
use super::{Phase, Shared};
use crate::balance::{self, Balancer, Candidate};
use crate::buffer::BufferPool;
use crate::listener::BoundSocket;
use crate::listener::accept::{self, Dispatcher, Handoff};
use crate::listener::budget::ConnPermits;
use crate::proxy::pipes::PipePool;

pub struct WorkerCtx {
    pub id: usize,
    pub shared: Arc<Shared>,
    pub stats: Arc<WorkerStats>,
    pub buffers: Rc<BufferPool>,
    /// splice(2) pipes, this worker's own (`global.max_pipes`).
    pub pipes: Rc<PipePool>,
    /// One balancer per backend, in config order.
    pub balancers: Vec<RefCell<Box<dyn Balancer>>>,
    phase: watch::Receiver<Phase>,
    /// Signalled when the last session of a stopping worker ends.
    drained: Notify,
}

impl WorkerCtx {
    fn new(id: usize, shared: Arc<Shared>, phase: watch::Receiver<Phase>) -> Rc<Self> {
        let stats = shared.stats.get(id).cloned().unwrap_or_default();
        let workers = shared.config.global.workers.max(1) as u64;
        let buffers = BufferPool::new(
            shared.config.global.buffer_size,
            shared.config.global.buffer_budget / workers,
            Arc::clone(&stats),
        );
        let pipes = PipePool::new(
            shared.config.global.max_pipes as usize,
            shared.config.global.buffer_size,
            Arc::clone(&stats),
        );
        if shared
            .config
            .frontends
            .iter()
            .any(|f| f.tls.as_ref().is_some_and(|t| t.ktls.enabled))
        {
            // Probed (and logged) once per process, before any handshake.
            let _ = crate::tls::ktls::available();
        }
        let balancers = shared
            .config
            .backends
            .iter()
            .map(|b| {
                let candidates: Vec<Candidate> = b.servers.iter().map(|s| Candidate { weight: s.weight }).collect();
                let build = balance::lookup(&b.balance).unwrap_or(balance::RoundRobin::boxed);
                RefCell::new(build(&candidates, id))
            })
            .collect();
        Rc::new(WorkerCtx {
            id,
            shared,
            stats,
            buffers,
            pipes,
            balancers,
            phase,
            drained: Notify::new(),
        })
    }

    /// True once the worker was asked to stop: sessions finish what they are doing and a
    /// keep-alive connection closes after its current response.
    pub fn is_stopping(&self) -> bool {
        *self.phase.borrow() != Phase::Running
    }

    /// Resolves once the worker is asked to stop accepting.
    pub async fn stopping(&self) {
        let mut phase = self.phase.clone();
        let _ = phase.wait_for(|p| *p != Phase::Running).await;
    }

    pub fn spawn_session(self: &Rc<Self>, frontend: usize, stream: TcpStream, peer: SocketAddr, permits: ConnPermits) {
        self.stats.sessions_total.add(1);
        self.stats.sessions_active.add(1);
        let ctx = Rc::clone(self);
        tokio::task::spawn_local(async move {
            crate::proxy::serve(&ctx, frontend, stream, peer).await;
            drop(permits);
            ctx.stats.sessions_active.sub(1);
            if ctx.stats.sessions_active.get() == 0 {
                ctx.drained.notify_one();
            }
        });
    }

    async fn drain(&self) {
        let mut phase = self.phase.clone();
        loop {
            let drained = self.drained.notified();
            if self.stats.sessions_active.get() == 0 {
                return;
            }
            tokio::select! {
                _ = drained => {}
                _ = phase.wait_for(|p| *p == Phase::HardStop) => return,
            }
        }
    }
}

pub struct WorkerPlan {
    pub id: usize,
    pub own_sockets: Vec<BoundSocket>,
    /// Shared sockets this worker accepts from on behalf of all (worker 0 only).
    pub shared_sockets: Vec<BoundSocket>,
    pub inbox: mpsc::UnboundedReceiver<Handoff>,
    pub dispatcher: Dispatcher,
}

/// The body of a worker thread: serve until told to stop, drain, return.
pub fn run(plan: WorkerPlan, shared: Arc<Shared>, phase: watch::Receiver<Phase>) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build_local(Default::default())?;
    rt.block_on(async move {
        let ctx = WorkerCtx::new(plan.id, shared, phase);
        for sock in plan.own_sockets {
            let listener = tokio::net::TcpListener::from_std(sock.socket)?;
            tokio::task::spawn_local(accept::accept_loop(Rc::clone(&ctx), sock.frontend, listener, None));
        }
        for sock in plan.shared_sockets {
            let listener = tokio::net::TcpListener::from_std(sock.socket)?;
            let d = plan.dispatcher.clone();
            tokio::task::spawn_local(accept::accept_loop(Rc::clone(&ctx), sock.frontend, listener, Some(d)));
        }
        let inbox = tokio::task::spawn_local(accept::inbox_loop(Rc::clone(&ctx), plan.inbox));
        ctx.stopping().await;
        ctx.drain().await;
        inbox.abort();
        tracing::debug!(worker = ctx.id, "worker stopped");
        Ok(())
    })
}
