//! One worker thread: a current_thread tokio runtime that owns its listeners, its sessions,
//! its buffer pool and its balancer state. Nothing here is shared with another worker except
//! through `Shared` (atomics touched once per connection) and the handoff inbox.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{Notify, watch};

use super::backends::LocalBackend;
use super::loglimit::LogLimiter;
use super::{Phase, Shared};
use crate::budget::ConnPermits;
use crate::buffer::BufferPool;
use crate::listener::BoundSocket;
use crate::listener::accept::{self, Dispatcher};
use crate::proxy::pipes::PipePool;
use crate::stats::WorkerStats;

pub struct WorkerCtx {
    pub id: usize,
    pub shared: Arc<Shared>,
    pub stats: Arc<WorkerStats>,
    pub buffers: Rc<BufferPool>,
    /// splice(2) pipes, this worker's own (`global.max_pipes`).
    pub pipes: Rc<PipePool>,
    /// This thread's view of each backend (balancer over the live server set), in config order.
    pub backends: Vec<LocalBackend>,
    /// Idle HTTP server connections of this worker.
    pub http_pool: crate::proxy::http::pool::ServerPool,
    phase: watch::Receiver<Phase>,
    /// Woken by a `Kill` in the inbox: sessions on a server whose kill epoch moved close.
    pub kills: Notify,
    /// Signalled when the last session of a stopping worker ends.
    drained: Notify,
    /// Budget for warn lines about failures (see `may_warn`).
    warn_limit: RefCell<LogLimiter>,
    /// Wakes the task that reports a window's suppressed warn lines.
    warn_flush: Notify,
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
            shared.config.global.pipe_size,
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
        let backends = shared
            .config
            .backends
            .iter()
            .zip(&shared.backends)
            .map(|(spec, live)| LocalBackend::new(spec, Arc::clone(live), id))
            .collect();
        let http_pool = crate::proxy::http::pool::ServerPool::new(&shared.config);
        Rc::new(WorkerCtx {
            id,
            shared,
            stats,
            buffers,
            pipes,
            backends,
            http_pool,
            phase,
            kills: Notify::new(),
            drained: Notify::new(),
            warn_limit: RefCell::new(LogLimiter::default()),
            warn_flush: Notify::new(),
        })
    }

    /// Resolves once `server`'s sessions are to close (`maint --kill`): its kill epoch moved
    /// past `epoch`, the one seen when the session connected.
    pub async fn killed(&self, server: &crate::live::server::ServerLive, epoch: u64) {
        loop {
            let woken = self.kills.notified();
            if server.kill_epoch() != epoch {
                return;
            }
            woken.await;
        }
    }

    /// Whether a warn line about a failure may be written now: at most `loglimit::BURST` per
    /// second per worker; the others are counted and reported in one line per second. Reads
    /// the clock, so call it only on a failure path, right before the `warn!`.
    pub fn may_warn(&self) -> bool {
        if !tracing::enabled!(tracing::Level::WARN) {
            return false;
        }
        let admit = self.warn_limit.borrow_mut().admit(Instant::now());
        if admit.ended_suppressed > 0 {
            log_suppressed(self.id, admit.ended_suppressed);
        }
        if admit.arm_flush {
            self.warn_flush.notify_one();
        }
        admit.log
    }

    /// Reports each window's suppressed warn lines once it ends (sleeps unless lines were
    /// suppressed).
    async fn flush_suppressed(self: Rc<Self>) {
        loop {
            self.warn_flush.notified().await;
            let Some(due) = self.warn_limit.borrow().flush_due() else {
                continue;
            };
            tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
            let flushed = self.warn_limit.borrow_mut().flush(Instant::now());
            if let Some(n) = flushed {
                log_suppressed(self.id, n);
            }
        }
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

    /// `stream`: an accepted, non-blocking socket, not registered with the reactor.
    pub fn spawn_session(
        self: &Rc<Self>,
        frontend: usize,
        stream: std::net::TcpStream,
        peer: SocketAddr,
        permits: ConnPermits,
    ) {
        self.stats.sessions_total.add(1);
        self.stats.sessions_active.add(1);
        let ctx = Rc::clone(self);
        let fut = async move {
            // Counted out on drop, so a session whose task is dropped (a hard stop) is too.
            let _active = ActiveSession(&ctx);
            crate::proxy::serve(&ctx, frontend, crate::proxy::lazy::LazySocket::new(stream), peer).await;
            drop(permits);
        };
        tokio::task::spawn_local(fut);
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

/// One open session in `sessions_active`.
struct ActiveSession<'a>(&'a WorkerCtx);

impl Drop for ActiveSession<'_> {
    fn drop(&mut self) {
        let stats = &self.0.stats;
        stats.sessions_active.sub(1);
        if stats.sessions_active.get() == 0 {
            self.0.drained.notify_one();
        }
    }
}

fn log_suppressed(worker: usize, n: u64) {
    tracing::warn!(
        worker,
        suppressed = n,
        "suppressed {n} similar lines (failures are logged at most {} per second per worker)",
        super::loglimit::BURST
    );
}

pub struct WorkerPlan {
    pub id: usize,
    pub own_sockets: Vec<BoundSocket>,
    /// Shared sockets this worker accepts from on behalf of all (worker 0 only).
    pub shared_sockets: Vec<BoundSocket>,
    pub inbox: super::inbox::Receiver,
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
pub fn run(plan: WorkerPlan, shared: Arc<Shared>, phase: watch::Receiver<Phase>) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build_local(Default::default())?;
    let registration = match &plan.watchdog {
        Some((registry, _)) => Some(registry.register(plan.id)?),
        None => None,
    };
    rt.block_on(async move {
        let ctx = WorkerCtx::new(plan.id, shared, phase);
        tokio::task::spawn_local(Rc::clone(&ctx).flush_suppressed());
        if plan.id == 0 {
            tokio::task::spawn_local(super::log_counters_every(
                Arc::clone(&ctx.shared),
                super::COUNTERS_PERIOD,
            ));
        }
        if let (Some(reg), Some((_, period))) = (&registration, plan.watchdog) {
            // Progress for the watchdog: this runs only when the scheduler gets back to its
            // run queue, so it stands still while one task hogs the thread.
            let watched = Arc::clone(&reg.watched);
            tokio::task::spawn_local(async move {
                let mut ticks = tokio::time::interval(period);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    watched.bump();
                }
            });
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
        for sock in plan.own_sockets {
            let listener = accept::listener(sock.socket)?;
            let counted = Accepting::new(&plan.accepting);
            let accepting = accept::accept_loop(Rc::clone(&ctx), sock.frontend, listener, None);
            tokio::task::spawn_local(async move {
                accepting.await;
                drop(counted);
            });
        }
        for sock in plan.shared_sockets {
            let listener = accept::listener(sock.socket)?;
            let d = plan.dispatcher.clone();
            let counted = Accepting::new(&plan.accepting);
            let accepting = accept::accept_loop(Rc::clone(&ctx), sock.frontend, listener, Some(d));
            tokio::task::spawn_local(async move {
                accepting.await;
                drop(counted);
            });
        }
        let inbox = tokio::task::spawn_local(super::inbox::run(Rc::clone(&ctx), plan.inbox));
        ctx.stopping().await;
        ctx.drain().await;
        inbox.abort();
        tracing::debug!(worker = ctx.id, "worker stopped");
        Ok(())
    })
}
