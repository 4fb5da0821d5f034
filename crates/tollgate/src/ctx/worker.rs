//! A worker thread's context (`WorkerCtx`): what every session on the thread reaches through
//! one `Rc` — its buffer pool, splice pipes, balancers, HTTP server pool, counters, kill and
//! stop signals, and the warn-line budget. Nothing here is shared with another worker except
//! through `Shared` (atomics touched once per connection) and the thread's inbox.
//!
//! Invariants: built once per worker thread, on that thread, and never sent to another;
//! `sessions_active` is counted out by a drop guard (`ActiveSession`), so a stopping worker
//! learns when its last session ended (`drain`) even when sessions are dropped.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{Notify, watch};

use super::backends::LocalBackend;
use super::loglimit::LogLimiter;
use super::pool::ServerPool;
use super::{Phase, Shared};
use crate::buffer::BufferPool;
use crate::relay::Resources;
use crate::relay::pipes::PipePool;
use crate::stats::{Progress, WorkerStats};

pub(crate) struct WorkerCtx {
    pub id: usize,
    pub shared: Arc<Shared>,
    pub stats: Arc<WorkerStats>,
    /// Polls this thread got through (the watchdog's view of it; see `stats::Progress`).
    pub progress: Arc<Progress>,
    pub buffers: Rc<BufferPool>,
    /// splice(2) pipes, this worker's own (`global.max_pipes`).
    pub pipes: Rc<PipePool>,
    /// Response compressors running on this thread (`global.max_compressors`).
    pub compressors: super::compressors::Compressors,
    /// Route authentication's password checks and cached successes (`global.max_auth_checks`).
    pub auth: super::auth::AuthWork,
    /// This thread's view of each backend (balancer over the live server set), in config order.
    pub backends: Vec<LocalBackend>,
    /// Idle HTTP server connections of this worker.
    pub http_pool: ServerPool,
    phase: watch::Receiver<Phase>,
    /// Woken by a `Kill` in the inbox: sessions on a server whose kill epoch moved close.
    pub kills: Notify,
    /// Signalled when the last session of a stopping worker ends.
    drained: Notify,
    /// Budget for warn lines about failures (see `may_warn`).
    warn_limit: RefCell<LogLimiter>,
    /// Wakes the task that reports a window's suppressed warn lines.
    warn_flush: Notify,
    /// This thread's side of the access log (`None`: logs off).
    pub access_log: Option<Rc<crate::accesslog::Local>>,
    /// This thread's live connections (`show sessions`).
    pub sessions: super::sessions::SessionTable,
    /// This thread's last malformed requests and responses (`show errors`).
    pub errors: RefCell<super::errors::ErrorRing>,
    /// This thread's idle HTTP/1 client connections, held outside any task.
    pub park: super::park::Park,
    /// Request-ID storage of ended sessions, for the next ones ([`IdLease`]).
    #[expect(
        clippy::vec_box,
        reason = "a slot moves between here and a session's lease: boxed, no copy and no allocation"
    )]
    id_slots: RefCell<Vec<Box<crate::http::request_id::IdSlot>>>,
}

impl WorkerCtx {
    pub(crate) fn new(
        id: usize,
        shared: Arc<Shared>,
        phase: watch::Receiver<Phase>,
        progress: Arc<Progress>,
    ) -> Rc<Self> {
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
        let backends = shared
            .config
            .backends
            .iter()
            .zip(&shared.backends)
            .map(|(spec, live)| LocalBackend::new(spec, Arc::clone(live), id))
            .collect();
        let http_pool = ServerPool::new(&shared.config);
        let auth = super::auth::AuthWork::new(shared.config.global.max_auth_checks);
        let compressors =
            super::compressors::Compressors::new(shared.config.global.max_compressors, Arc::clone(&stats));
        let park = super::park::Park::new(Arc::clone(&stats));
        let access_log = shared
            .access_log
            .as_ref()
            .map(|log| Rc::new(crate::accesslog::Local::new(Arc::clone(log), Arc::clone(&stats))));
        Rc::new(WorkerCtx {
            id,
            shared,
            stats,
            progress,
            compressors,
            auth,
            buffers,
            pipes,
            backends,
            http_pool,
            phase,
            kills: Notify::new(),
            drained: Notify::new(),
            warn_limit: RefCell::new(LogLimiter::default()),
            warn_flush: Notify::new(),
            access_log,
            sessions: Default::default(),
            errors: Default::default(),
            park,
            id_slots: RefCell::new(Vec::new()),
        })
    }

    /// Storage for one session's request IDs, from this thread's spares: no allocation per
    /// connection once a few have ended.
    pub(crate) fn id_lease(&self) -> IdLease<'_> {
        IdLease {
            ctx: self,
            slot: Some(self.spare_id_slot()),
        }
    }

    /// Request-ID storage from this thread's spares (made when none is left).
    pub(crate) fn spare_id_slot(&self) -> Box<crate::http::request_id::IdSlot> {
        let spare = self.id_slots.try_borrow_mut().ok().and_then(|mut s| s.pop());
        spare.unwrap_or_default()
    }

    /// Request-ID storage back to this thread's spares.
    pub(crate) fn give_id_slot(&self, mut slot: Box<crate::http::request_id::IdSlot>) {
        if let Ok(mut spares) = self.id_slots.try_borrow_mut()
            && spares.len() < 1024
        {
            slot.clear();
            spares.push(slot);
        }
    }

    /// Resolves once `server`'s sessions are to close (`maint --kill`): its kill epoch moved
    /// past `epoch`, the one seen when the session connected. `waiter` is a registration
    /// with this thread's kill notifications (`kills.notified()`), made once per session and
    /// kept across its requests: a registration per request would lock and unlock the
    /// `Notify` twice per request. A `Notified` hears every `notify_waiters` from its
    /// creation on, even before its first poll, so no kill falls between check and wait.
    pub(crate) async fn killed<'n>(
        &'n self,
        server: &crate::live::server::ServerLive,
        epoch: u64,
        mut waiter: std::pin::Pin<&mut tokio::sync::futures::Notified<'n>>,
    ) {
        loop {
            if server.kill_epoch() != epoch {
                return;
            }
            waiter.as_mut().await;
            waiter.set(self.kills.notified());
        }
    }

    /// Whether a warn line about a failure may be written now: at most `loglimit::BURST` per
    /// second per worker; the others are counted and reported in one line per second. Reads
    /// the clock, so call it only on a failure path, right before the `warn!`.
    pub(crate) fn may_warn(&self) -> bool {
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
    pub(crate) async fn flush_suppressed(self: Rc<Self>) {
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
    ///
    /// Asked per request, so it reads the channel's version (one atomic load) rather than its
    /// value: `borrow` takes the channel's `RwLock`, two read-modify-writes on a line every
    /// worker of the process shares. Only stop phases are ever sent (`runtime::Running`) and
    /// this receiver never marks a value seen, so a version other than its own means a stop.
    pub(crate) fn is_stopping(&self) -> bool {
        match self.phase.has_changed() {
            Ok(changed) => changed,
            // The sender is gone: its last word stands.
            Err(_) => *self.phase.borrow() != Phase::Running,
        }
    }

    /// Resolves once the worker is asked to stop accepting.
    pub(crate) async fn stopping(&self) {
        let mut phase = self.phase.clone();
        let _ = phase.wait_for(|p| *p != Phase::Running).await;
    }

    /// Counts a new session of `frontend` in `show stat` (current and total sessions, rate)
    /// until the guard drops.
    pub(crate) fn open_session(&self, frontend: usize, at: Instant) -> super::stat::OpenSession<'_> {
        let cell = self.stat().and_then(|s| s.frontend(frontend));
        super::stat::OpenSession::new(cell, crate::stats::epoch_ms(at))
    }

    /// This thread's `show stat` cells.
    pub(crate) fn stat(&self) -> Option<&super::stat::ThreadStat> {
        self.shared.stat.get(self.id)
    }

    /// A connection of `frontend` closed by its `allow` / `deny` lists or a TCP `deny` route.
    pub(crate) fn count_denied(&self, frontend: usize) {
        self.stats.conn_denied.add(1);
        if let Some(cell) = self.shared.metrics.get(self.id).and_then(|t| t.frontends.get(frontend)) {
            cell.conn_denied.add(1);
        }
    }

    /// The current session's TLS handshake completed (counted for its frontend; its state
    /// moves on with what the session does next).
    pub(crate) fn handshake_done(&self) {
        super::sessions::note(|e| {
            if let Some(c) = self.stat().and_then(|s| s.frontend(e.frontend())) {
                c.tls_handshakes.add(1);
            }
        });
    }

    /// Keeps a malformed message for `show errors` (error path only).
    pub(crate) fn capture_error(&self, refused: super::errors::Refused<'_>) {
        if let Some(cells) = self.stat() {
            match (refused.direction, refused.backend) {
                (super::errors::Direction::Request, _) => {
                    if let Some(c) = cells.frontend(refused.frontend) {
                        c.malformed.add(1);
                    }
                }
                (super::errors::Direction::Response, Some(b)) => {
                    if let Some(c) = cells.backend(b) {
                        c.malformed_responses.add(1);
                    }
                }
                (super::errors::Direction::Response, None) => {}
            }
        }
        if let Ok(mut ring) = self.errors.try_borrow_mut() {
            ring.record(refused);
        }
    }

    /// What a relay borrows from this worker.
    pub(crate) fn relay(&self) -> Resources<'_> {
        Resources {
            buffers: &self.buffers,
            pipes: &self.pipes,
            stats: &self.stats,
        }
    }

    /// Resolves once no session is left and `no_more_arrivals` says none can come (no
    /// accept loop of the process runs, no handoff to this thread is on its way), or at a
    /// hard stop.
    pub(crate) async fn drain(&self, no_more_arrivals: impl Fn() -> bool) {
        let mut phase = self.phase.clone();
        loop {
            let drained = self.drained.notified();
            let arrivals_done = no_more_arrivals();
            if arrivals_done && self.stats.sessions_active.get() == 0 {
                return;
            }
            // Arrivals (other threads' accept loops ending, handoffs reaching this inbox)
            // signal nothing here: looked at again shortly, only while stopping.
            let recheck = async {
                if arrivals_done {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            };
            tokio::select! {
                _ = drained => {}
                _ = recheck => {}
                _ = phase.wait_for(|p| *p == Phase::HardStop) => return,
            }
        }
    }
}

/// One open session in `sessions_active` (counted in by the code that spawns the session,
/// out when this is dropped).
pub(crate) struct ActiveSession<'a>(&'a WorkerCtx);

impl<'a> ActiveSession<'a> {
    pub(crate) fn new(ctx: &'a WorkerCtx) -> Self {
        ActiveSession(ctx)
    }

    /// Leaves the session counted (a parked connection is still open); `new` makes the
    /// guard again when it is resumed.
    pub(crate) fn detach(self) {
        std::mem::forget(self);
    }
}

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

/// One session's request-ID storage (`[frontend] request_id`); back to its thread's spares
/// when dropped.
pub(crate) struct IdLease<'a> {
    ctx: &'a WorkerCtx,
    /// Always `Some` until dropped.
    slot: Option<Box<crate::http::request_id::IdSlot>>,
}

impl IdLease<'_> {
    pub(crate) fn slot_mut(&mut self) -> Option<&mut crate::http::request_id::IdSlot> {
        self.slot.as_deref_mut()
    }

    /// The current request's ID; empty when it has none.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.slot
            .as_deref()
            .map_or(&[][..], crate::http::request_id::IdSlot::as_bytes)
    }
}

impl Drop for IdLease<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.ctx.give_id_slot(slot);
        }
    }
}
