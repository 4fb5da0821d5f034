//! The process's serving machinery: `workers` threads, each a current_thread tokio runtime
//! (thread-per-core, nothing stolen, nothing migrated), and the phases of stopping.
//!
//! `start` takes already-bound sockets (so a master process or a test can bind them) and
//! returns a `Running` handle: counters, bound addresses, soft stop (stop accepting, finish
//! what is in flight), hard stop (drop everything), join.

pub mod limits;
pub mod loglimit;
pub mod stats;
pub mod watchdog;
pub mod worker;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::config::Config;
use crate::listener::BoundSocket;
use crate::listener::accept::Dispatcher;
use crate::listener::budget::AcceptBudgets;
use crate::server::BackendState;
use stats::{Snapshot, WorkerStats};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Running,
    /// Stop accepting; sessions in flight run to their end.
    SoftStop,
    /// Close everything now.
    HardStop,
}

/// What every worker of one generation shares (read-mostly; atomics touched per connection).
pub struct Shared {
    pub config: Arc<Config>,
    pub backends: Vec<BackendState>,
    pub budgets: AcceptBudgets,
    pub stats: Vec<Arc<WorkerStats>>,
    /// `global.max_handshakes`: TLS handshakes in progress, process-wide.
    pub handshakes: Arc<tokio::sync::Semaphore>,
}

pub struct Running {
    shared: Arc<Shared>,
    phase: watch::Sender<Phase>,
    threads: Vec<JoinHandle<std::io::Result<()>>>,
    bound: Vec<(usize, SocketAddr)>,
    /// Accept loops still running (each drops its listener when it returns).
    accepting: Arc<AtomicUsize>,
    /// Dropped after the workers are joined (it stops the watchdog thread).
    _watchdog: Option<watchdog::Handle>,
}

/// How often worker 0 logs the counters of all workers (at debug level).
pub const COUNTERS_PERIOD: Duration = Duration::from_secs(10);

/// Logs every worker's counters, summed, at debug (`counters: name=value ...`, or
/// `counters at stop: ...`); nothing, and no formatting, otherwise.
/// Runs in the process that serves, so with a master it is the worker process that logs.
pub fn log_counters(shared: &Shared, when: &str) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let snapshot = stats::sum(shared.stats.iter().map(|s| s.as_ref()));
    let mut line = String::with_capacity(1024);
    for (name, value) in snapshot.fields() {
        use std::fmt::Write;
        let _ = write!(line, " {name}={value}");
    }
    tracing::debug!(pid = std::process::id(), "counters{when}:{line}");
}

/// Worker 0's task: `log_counters` every `period`, the first one `period` after start.
pub async fn log_counters_every(shared: Arc<Shared>, period: Duration) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        log_counters(&shared, "");
    }
}

/// Knobs for `start_with` beyond the config.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Test hook (`TOLLGATE_DEBUG_SPIN_AFTER_MS`): worker thread 0 spins forever this long
    /// after it starts, for the watchdog tests.
    pub debug_spin_after: Option<Duration>,
}

/// Starts the workers on `sockets` (from `listener::bind_all` or inherited).
pub fn start(config: Arc<Config>, sockets: Vec<BoundSocket>) -> std::io::Result<Running> {
    start_with(config, sockets, StartOptions::default())
}

/// `start` with options; also starts the watchdog when `config.watchdog.enabled`.
pub fn start_with(config: Arc<Config>, sockets: Vec<BoundSocket>, options: StartOptions) -> std::io::Result<Running> {
    let watch = config.watchdog;
    let registry = watch.enabled.then(|| Arc::new(watchdog::Registry::default()));
    let watchdog = match &registry {
        Some(r) => Some(watchdog::start(Arc::clone(r), watch)?),
        None => None,
    };
    let workers = config.global.workers.max(1);
    let shared = Arc::new(Shared {
        backends: config.backends.iter().map(BackendState::new).collect(),
        budgets: AcceptBudgets::new(&config),
        stats: (0..workers).map(|_| Arc::new(WorkerStats::default())).collect(),
        handshakes: Arc::new(tokio::sync::Semaphore::new(config.global.max_handshakes as usize)),
        config,
    });
    let bound: Vec<(usize, SocketAddr)> = sockets.iter().map(|s| (s.frontend, s.local)).collect();
    let (phase, phase_rx) = watch::channel(Phase::Running);
    let (senders, mut receivers): (Vec<_>, Vec<_>) = (0..workers).map(|_| mpsc::unbounded_channel()).unzip();
    let dispatcher = Dispatcher {
        inboxes: senders,
        stats: shared.stats.clone(),
    };

    let mut own: Vec<Vec<BoundSocket>> = (0..workers).map(|_| Vec::new()).collect();
    let mut shared_sockets = Vec::new();
    for s in sockets {
        match s.worker.and_then(|w| own.get_mut(w)) {
            Some(list) => list.push(s),
            None => shared_sockets.push(s),
        }
    }
    let accepting = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::with_capacity(workers);
    for (id, own_sockets) in own.into_iter().enumerate().rev() {
        let plan = worker::WorkerPlan {
            id,
            own_sockets,
            shared_sockets: if id == 0 {
                std::mem::take(&mut shared_sockets)
            } else {
                Vec::new()
            },
            inbox: receivers.pop().ok_or_else(|| std::io::Error::other("missing inbox"))?,
            dispatcher: dispatcher.clone(),
            watchdog: registry.clone().map(|r| (r, watchdog::tick(&watch))),
            debug_spin_after: options.debug_spin_after.filter(|_| id == 0),
            accepting: Arc::clone(&accepting),
        };
        let (shared, phase_rx) = (Arc::clone(&shared), phase_rx.clone());
        let handle = std::thread::Builder::new()
            .name(format!("tollgate-w{id}"))
            .spawn(move || worker::run(plan, shared, phase_rx))?;
        threads.push(handle);
    }
    Ok(Running {
        shared,
        phase,
        threads,
        bound,
        accepting,
        _watchdog: watchdog,
    })
}

impl Running {
    /// Every worker's counters, summed.
    pub fn stats(&self) -> Snapshot {
        stats::sum(self.shared.stats.iter().map(|s| s.as_ref()))
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The first address actually bound for `frontend` (port 0 resolved).
    pub fn local_addr(&self, frontend: &str) -> Option<SocketAddr> {
        let idx = self.shared.config.frontends.iter().position(|f| f.name == frontend)?;
        self.bound.iter().find(|(fe, _)| *fe == idx).map(|(_, a)| *a)
    }

    /// Accept loops still running; 0 once a stopping generation accepts no more connections
    /// (its duplicates of the listening sockets are closed).
    pub fn accepting(&self) -> usize {
        self.accepting.load(Ordering::SeqCst)
    }

    pub fn soft_stop(&self) {
        let _ = self.phase.send(Phase::SoftStop);
    }

    pub fn hard_stop(&self) {
        let _ = self.phase.send(Phase::HardStop);
    }

    /// Waits for every worker to return, then logs the final counters (at debug).
    pub fn join(mut self) -> std::io::Result<()> {
        for t in std::mem::take(&mut self.threads) {
            t.join()
                .map_err(|_| std::io::Error::other("a worker thread panicked"))??;
        }
        log_counters(&self.shared, " at stop");
        Ok(())
    }

    pub fn is_finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }
}
