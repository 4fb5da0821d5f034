//! One worker thread: a current_thread tokio runtime that owns its listeners, its sessions,
//! its buffer pool and its balancer state (its `ctx::WorkerCtx`). `run` is the thread's
//! body: build the context, start the accept loops, the quic endpoints on its UDP sockets,
//! the inbox and the helper tasks, serve until told to stop, drain, return.

use std::rc::Rc;
use std::sync::Arc;

use tokio::sync::watch;

use crate::ctx::{Phase, Shared, WorkerCtx};
use crate::listener::BoundSocket;
use crate::listener::accept::{self, Dispatcher, Placement};

pub(crate) struct WorkerPlan {
    pub id: usize,
    pub own_sockets: Vec<BoundSocket>,
    /// This worker's UDP sockets of the quic binds (its index in each group).
    pub own_udp: Vec<crate::listener::udp::BoundUdp>,
    /// What they are served with (`Some` whenever any worker has UDP sockets).
    pub quic: Option<crate::quic::Plan>,
    /// Shared sockets this worker accepts from on behalf of all (worker 0 only).
    pub shared_sockets: Vec<BoundSocket>,
    pub inbox: crate::ctx::inbox::Receiver,
    pub dispatcher: Dispatcher,
    /// Where to register this thread for the watchdog, and the progress tick period.
    pub watchdog: Option<(Arc<super::watchdog::Registry>, std::time::Duration)>,
    /// Test hook: spin forever this long after starting (see `StartOptions`).
    pub debug_spin_after: Option<std::time::Duration>,
    /// Count of running accept loops, process-wide (see `Running::accepting`).
    pub accepting: Arc<std::sync::atomic::AtomicUsize>,
}

/// Counts one running accept loop; uncounted when the loop (and its listener) is dropped.
struct Accepting(Arc<std::sync::atomic::AtomicUsize>);

impl Accepting {
    fn new(count: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Accepting(Arc::clone(count))
    }
}

impl Drop for Accepting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The body of a worker thread: serve until told to stop, drain, return.
pub(crate) fn run(plan: WorkerPlan, shared: Arc<Shared>, phase: watch::Receiver<Phase>) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build_local(Default::default())?;
    let progress = Arc::new(crate::stats::Progress::default());
    // Unregisters when the thread's body returns.
    let _registration = match &plan.watchdog {
        Some((registry, _)) => Some(registry.register(plan.id, Arc::clone(&progress), rt.metrics())?),
        None => None,
    };
    if shared
        .config
        .frontends
        .iter()
        .any(|f| f.tls.as_ref().is_some_and(|t| t.ktls.enabled))
    {
        // Probed (and logged) once per process, before any handshake.
        let _ = crate::tls::ktls::available();
    }
    rt.block_on(async move {
        let ctx = WorkerCtx::new(plan.id, shared, phase, Arc::clone(&progress));
        tokio::task::spawn_local(Rc::clone(&ctx).flush_suppressed());
        tokio::task::spawn_local(memory_tick(Rc::clone(&ctx.buffers)));
        if let Some(log) = &ctx.access_log {
            tokio::task::spawn_local(Rc::clone(log).flush_every());
        }
        if plan.id == 0 {
            tokio::task::spawn_local(super::log_counters_every(
                Arc::clone(&ctx.shared),
                super::COUNTERS_PERIOD,
            ));
            tokio::task::spawn_local(super::slowstart::run(Arc::clone(&ctx.shared)));
        }
        if let Some((_, period)) = plan.watchdog {
            // Keeps an idle thread's progress moving (the sessions' polls move it when busy).
            tokio::task::spawn_local(super::watchdog::tick_task(Arc::clone(&progress), period));
        }
        if let Some(after) = plan.debug_spin_after {
            tokio::task::spawn_local(async move {
                tokio::time::sleep(after).await;
                tracing::warn!(
                    worker = plan.id,
                    "debug hook TOLLGATE_DEBUG_SPIN_AFTER_MS: spinning this thread forever"
                );
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            });
        }
        // Rebalancing needs somewhere to go: off with one worker.
        let own = if ctx.shared.config.global.connection_rebalance && ctx.shared.stats.len() > 1 {
            Placement::Rebalance(plan.dispatcher.clone())
        } else {
            Placement::Here
        };
        for sock in plan.own_sockets {
            let listener = accept::listener(sock.socket)?;
            let counted = Accepting::new(&plan.accepting);
            let accepting = accept::accept_loop(Rc::clone(&ctx), sock.frontend, listener, own.clone());
            tokio::task::spawn_local(async move {
                accepting.await;
                drop(counted);
            });
        }
        for sock in plan.shared_sockets {
            let listener = accept::listener(sock.socket)?;
            let d = plan.dispatcher.clone();
            let counted = Accepting::new(&plan.accepting);
            let accepting = accept::accept_loop(Rc::clone(&ctx), sock.frontend, listener, Placement::Shared(d));
            tokio::task::spawn_local(async move {
                accepting.await;
                drop(counted);
            });
        }
        if let Some(quic) = &plan.quic {
            for sock in plan.own_udp {
                crate::quic::serve_socket(&ctx, sock, quic)?;
            }
            crate::quic::serve_inbound(&ctx, quic)?;
        }
        let inbox = tokio::task::spawn_local(super::inbox::run(Rc::clone(&ctx), plan.inbox));
        tokio::task::spawn_local(crate::listener::run_park(Rc::clone(&ctx)));
        ctx.stopping().await;
        // Handoffs sent before every accept loop stopped must still become sessions here.
        ctx.drain(|| {
            plan.accepting.load(std::sync::atomic::Ordering::Acquire) == 0
                && plan.dispatcher.in_flight.pending(ctx.id) == 0
        })
        .await;
        inbox.abort();
        if let Some(log) = &ctx.access_log {
            // The last lines (sessions ended by a hard stop are dropped unlogged).
            log.flush();
        }
        tracing::debug!(worker = ctx.id, "worker stopped");
        Ok(())
    })
}

/// Once a second the worker hands memory back: its buffer pool what lay unused the whole
/// second (`BufferPool::trim`), the allocator the pages freed long enough ago (a quiet
/// thread would keep them otherwise: `tollgate_sys::allocator`).
async fn memory_tick(buffers: Rc<crate::buffer::BufferPool>) {
    let mut tick = tokio::time::interval(crate::buffer::TRIM_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        buffers.trim();
        tollgate_sys::allocator::collect();
    }
}
