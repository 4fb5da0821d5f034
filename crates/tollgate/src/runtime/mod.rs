//! The process's serving machinery: `workers` threads, each a current_thread tokio runtime
//! (thread-per-core, nothing stolen, nothing migrated), and the phases of stopping.
//!
//! `start` takes already-bound sockets (so a master process or a test can bind them) and
//! returns a `Running` handle: counters, bound addresses, soft stop (stop accepting, finish
//! what is in flight), hard stop (drop everything), join.
//!
//! The UDP sockets of `[frontend.quic]` binds come the same way, explicitly:
//! `StartOptions::udp` (from `listener::udp::bind_quic`, or handed over by the master). The
//! runtime never binds them itself: `start` with a quic config and no UDP sockets serves no
//! HTTP/3 (one warning). Each worker thread serves its own sockets (`BoundUdp::worker`) with
//! the process-wide `quic::Mesh` of all groups.

pub(crate) mod certs;
pub(crate) mod inbox;
pub mod limits;
pub(crate) mod metrics;
mod servers;
pub(crate) mod show;
pub(crate) mod slowstart;
mod tables;
pub(crate) mod watchdog;
pub(crate) mod worker;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::budget::AcceptBudgets;
use crate::command::ServerChange;
use crate::config::Config;
use crate::ctx::Phase;
pub use crate::ctx::Shared;
use crate::ctx::inbox::Message;
use crate::listener::BoundSocket;
use crate::listener::accept::Dispatcher;
use crate::live::backend::BackendLive;
use crate::live::server::ServerView;
use crate::stats::{self, Snapshot, WorkerStats};

/// Longest `Running::apply` waits for every worker thread to act on a command.
pub(crate) const APPLY_TIMEOUT: Duration = Duration::from_secs(1);

pub struct Running {
    shared: Arc<Shared>,
    phase: watch::Sender<Phase>,
    threads: Vec<JoinHandle<std::io::Result<()>>>,
    bound: Vec<(usize, SocketAddr)>,
    /// `(frontend, local address)` of every quic UDP socket the workers serve.
    quic_bound: Vec<(usize, SocketAddr)>,
    /// Accept loops still running (each drops its listener when it returns).
    accepting: Arc<AtomicUsize>,
    /// Every worker thread's inbox, for runtime commands.
    inboxes: Vec<crate::ctx::inbox::Sender>,
    /// Dropped after the workers are joined (it stops the watchdog thread).
    _watchdog: Option<watchdog::Handle>,
    /// The health checker's thread, when some backend has checks (it stops with `Running`).
    checker: Option<JoinHandle<()>>,
    /// DNS discovery's thread (when a backend uses DNS); stops when dropped.
    _discover: Option<crate::discover::Handle>,
    /// The ACME thread (when a frontend orders certificates); stops when dropped.
    _acme: Option<crate::acme::Handle>,
    /// The JWKS refresher (when a route's `auth.jwt` has a `jwks_url`); stops when dropped.
    _jwks: Option<crate::background::Stopper<tokio::sync::oneshot::Sender<()>>>,
    /// The certificate file watch and OCSP fetcher (when a certificate asks); stops when dropped.
    _cert_refresh: Option<crate::tls::refresh::Handle>,
    /// The Redis sync of shared limits (with `[shared]` and a `shared = true` limit); stops
    /// when dropped, after one last push.
    _sharing: Option<crate::sharing::Handle>,
    /// Servers `set server address` replaced, alive while connections to their old address
    /// are (`del server` counts those).
    retired: servers::Retired,
    /// The QUIC mesh, for `quic_hand_over` (`None` without quic sockets).
    quic_mesh: Option<Arc<crate::quic::Mesh>>,
}

/// How often worker 0 logs the counters of all workers (at debug level).
pub(crate) const COUNTERS_PERIOD: Duration = Duration::from_secs(10);

/// Logs every worker's counters, summed, at debug (`counters: name=value ...`, or
/// `counters at stop: ...`); nothing, and no formatting, otherwise.
/// Runs in the process that serves, so with a master it is the worker process that logs.
pub(crate) fn log_counters(shared: &Shared, when: &str) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let snapshot = stats::sum(shared.stats.iter().map(|s| s.as_ref()));
    let mut line = String::with_capacity(1024);
    for (name, value) in snapshot.fields() {
        use std::fmt::Write;
        let _ = write!(line, " {name}={value}");
    }
    // Per worker, the two that show how evenly connections are spread across cores.
    per_worker(&mut line, shared, "sessions_active_by_worker", |w| {
        w.sessions_active.get()
    });
    per_worker(&mut line, shared, "connections_rebalanced_by_worker", |w| {
        w.connections_rebalanced.get()
    });
    tracing::debug!(pid = std::process::id(), "counters{when}:{line}");
}

/// Appends ` name=v0,v1,...` (one value per worker) to the counters line.
fn per_worker(line: &mut String, shared: &Shared, name: &str, value: impl Fn(&WorkerStats) -> u64) {
    use std::fmt::Write;
    let _ = write!(line, " {name}=");
    for (i, w) in shared.stats.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        let _ = write!(line, "{sep}{}", value(w));
    }
}

/// Worker 0's task: `log_counters` every `period`, the first one `period` after start.
pub(crate) async fn log_counters_every(shared: Arc<Shared>, period: Duration) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        log_counters(&shared, "");
    }
}

/// Knobs for `start_with` beyond the config.
#[derive(Debug, Default)]
pub struct StartOptions {
    /// Test hook (`TOLLGATE_DEBUG_SPIN_AFTER_MS`): worker thread 0 spins forever this long
    /// after it starts, for the watchdog tests.
    pub debug_spin_after: Option<Duration>,
    /// Health states a previous generation left (from the master), applied before serving.
    pub health_seed: Vec<crate::command::HealthReport>,
    /// Where the checker reports each change (the worker process forwards them to the master).
    pub health_reports: Option<mpsc::UnboundedSender<crate::command::HealthReport>>,
    /// Frontends an operator disabled before this generation: they accept nothing until
    /// enabled (from the master, across a reload).
    pub disabled_frontends: Vec<String>,
    /// The UDP sockets of the config's `[frontend.quic]` binds (`listener::udp::bind_quic`,
    /// or from the master), each served by the worker thread it names. Empty: no HTTP/3.
    pub udp: Vec<crate::listener::udp::BoundUdp>,
    /// This process's generation (the master's `--generation N`; 0 in a process without a
    /// master): QUIC connection IDs carry it (modulo 8).
    pub generation: u64,
    /// From the master: the QUIC tag key and the pairs to and from other generations
    /// (`quic::handover`); default without a master.
    pub quic_handover: crate::quic::handover::Handover,
}

/// Starts the workers on `sockets` (from `listener::bind_all` or inherited).
pub fn start(config: Arc<Config>, sockets: Vec<BoundSocket>) -> std::io::Result<Running> {
    start_with(config, sockets, StartOptions::default())
}

/// `start` with options; also starts the watchdog when `config.watchdog.enabled`.
pub fn start_with(config: Arc<Config>, sockets: Vec<BoundSocket>, options: StartOptions) -> std::io::Result<Running> {
    let config = resolve_quic_ports(config, &options.udp);
    let watch = config.watchdog;
    let registry = watch.enabled.then(|| Arc::new(watchdog::Registry::default()));
    let watchdog = match &registry {
        Some(r) => Some(watchdog::start(Arc::clone(r), watch)?),
        None => None,
    };
    let workers = config.global.workers.max(1);
    let shared = Arc::new(Shared {
        backends: config
            .backends
            .iter()
            .map(|b| Arc::new(BackendLive::new(b, workers)))
            .collect(),
        budgets: AcceptBudgets::new(&config, config.global.effective_maxconn(limits::nofile_limit())),
        stats: (0..workers).map(|_| Arc::new(WorkerStats::default())).collect(),
        handshakes: Arc::new(tokio::sync::Semaphore::new(config.global.max_handshakes as usize)),
        pending_tls: crate::ctx::pending_tls::PendingBySource::new(config.global.max_handshakes_per_source),
        access_log: crate::accesslog::AccessLog::start(&config.log, workers)?,
        metrics: (0..workers)
            .map(|_| {
                let route_counts: Vec<usize> = config.frontends.iter().map(|f| f.routes.len()).collect();
                crate::metrics::ThreadCells::new(&route_counts, config.backends.len())
            })
            .collect(),
        stat: (0..workers)
            .map(|_| crate::ctx::stat::ThreadStat::new(config.frontends.len(), config.backends.len()))
            .collect(),
        paused: crate::ctx::FrontendSwitch::new(config.frontends.len(), |f| {
            config
                .frontends
                .get(f)
                .is_some_and(|fe| options.disabled_frontends.contains(&fe.name))
        }),
        limits: config
            .frontends
            .iter()
            .map(|f| crate::limit::LimitSet::new(&f.limits))
            .collect(),
        config,
    });
    crate::health::seed(&shared.backends, &options.health_seed);
    let bound: Vec<(usize, SocketAddr)> = sockets.iter().map(|s| (s.frontend, s.local)).collect();
    let (own_udp, quic) = quic_plan(
        &shared.config,
        options.udp,
        (options.generation, options.quic_handover),
        workers,
    )?;
    let quic_mesh = quic.as_ref().map(|p| Arc::clone(&p.mesh));
    let quic_bound: Vec<(usize, SocketAddr)> = own_udp.iter().flatten().map(|s| (s.frontend, s.local)).collect();
    let (phase, phase_rx) = watch::channel(Phase::Running);
    let (senders, mut receivers): (Vec<_>, Vec<_>) = (0..workers).map(|_| mpsc::unbounded_channel()).unzip();
    // Host names resolve (or are given up on) before any worker serves.
    let discover = crate::discover::start(&shared, senders.clone())?;
    let acme = crate::acme::start(&shared)?;
    let jwks = start_jwks(&shared)?;
    let sharing = crate::sharing::start(
        shared.config.sharing.as_ref(),
        shared_tables(&shared),
        shared.stats.first().cloned(),
    )?;
    let dispatcher = Dispatcher {
        inboxes: senders.clone(),
        stats: shared.stats.clone(),
        in_flight: Arc::new(crate::ctx::inbox::HandoffCounts::new(workers)),
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
    for ((id, own_sockets), own_udp) in own.into_iter().enumerate().zip(own_udp).rev() {
        let plan = worker::WorkerPlan {
            id,
            own_sockets,
            own_udp,
            quic: quic.clone(),
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
    let reporter = crate::health::report::Reporter {
        inboxes: senders.clone(),
        master: options.health_reports,
    };
    let cert_refresh = match crate::tls::refresh::start(&shared.config) {
        Ok(r) => r,
        Err(e) => {
            let _ = phase.send(Phase::HardStop);
            return Err(e);
        }
    };
    let checker = match crate::health::start(Arc::clone(&shared), reporter, phase_rx) {
        Ok(c) => c,
        Err(e) => {
            // The worker threads run already: stop them rather than leave them unowned.
            let _ = phase.send(Phase::HardStop);
            return Err(e);
        }
    };
    Ok(Running {
        shared,
        phase,
        threads,
        bound,
        quic_bound,
        accepting,
        inboxes: senders,
        _watchdog: watchdog,
        checker,
        _discover: discover,
        _acme: acme,
        _jwks: jwks,
        _cert_refresh: cert_refresh,
        _sharing: sharing,
        retired: servers::Retired::default(),
        quic_mesh,
    })
}

/// `config` with every quic bind written with port 0 (tests) replaced by the address its
/// sockets got, so what the workers announce (`Alt-Svc`, from the first quic bind) names a
/// port a client can reach. Unchanged (not copied) when no bind has port 0.
fn resolve_quic_ports(config: Arc<Config>, udp: &[crate::listener::udp::BoundUdp]) -> Arc<Config> {
    if !udp.iter().any(|s| s.configured.port() == 0) {
        return config;
    }
    let mut resolved = (*config).clone();
    let mut group = 0;
    for f in &mut resolved.frontends {
        let Some(q) = &mut f.quic else { continue };
        let binds: Vec<std::net::SocketAddr> = q
            .binds
            .iter()
            .map(|&addr| {
                let local = udp.iter().find(|s| s.group == group).map(|s| s.local);
                group += 1;
                local.filter(|_| addr.port() == 0).unwrap_or(addr)
            })
            .collect();
        *q = crate::config::model::Quic::new(binds, q.zero_rtt, q.alt_svc_max_age);
    }
    Arc::new(resolved)
}

/// Each worker's UDP sockets (by `BoundUdp::worker`), and the quic plan they are served with
/// (`None` without sockets).
fn quic_plan(
    config: &Config,
    udp: Vec<crate::listener::udp::BoundUdp>,
    (generation, handover): (u64, crate::quic::handover::Handover),
    workers: usize,
) -> std::io::Result<(Vec<Vec<crate::listener::udp::BoundUdp>>, Option<crate::quic::Plan>)> {
    let mut own: Vec<Vec<_>> = (0..workers).map(|_| Vec::new()).collect();
    if udp.is_empty() {
        for f in config.frontends.iter().filter(|f| f.quic.is_some()) {
            tracing::warn!(frontend = %f.name, "[frontend.quic] configured but no UDP socket given: HTTP/3 not served");
        }
        return Ok((own, None));
    }
    // Groups as numbered by the config (every quic bind), or as the sockets say if more.
    let groups = crate::listener::udp::quic_binds(config)
        .count()
        .max(udp.iter().map(|s| s.group + 1).max().unwrap_or(0));
    for s in udp {
        let worker = s.worker;
        own.get_mut(worker)
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("UDP socket {} is for worker {worker} of {workers}", s.key()),
                )
            })?
            .push(s);
    }
    let plan = crate::quic::Plan {
        mesh: crate::quic::Mesh::new(groups, workers, handover)?,
        generation,
    };
    Ok((own, Some(plan)))
}

/// Starts the refresher of every `jwks_url` key set the routes use, and waits (bounded by
/// one fetch's timeout) for each set's first fetch, so a new generation does not begin by
/// refusing every token while its keys are on the way. A fetch that fails leaves the set
/// empty (tokens refused, counted, retried in the background): the generation starts anyway.
fn start_jwks(
    shared: &Shared,
) -> std::io::Result<Option<crate::background::Stopper<tokio::sync::oneshot::Sender<()>>>> {
    use std::sync::atomic::Ordering;
    let sets: Vec<Arc<crate::auth::jwt::Jwks>> = shared
        .config
        .frontends
        .iter()
        .flat_map(|f| f.routes.iter())
        .filter_map(|r| r.auth.as_ref()?.jwks().cloned())
        .collect();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let Some(thread) = crate::auth::jwt::spawn_refresher(sets.clone(), stopped)? else {
        return Ok(None);
    };
    let deadline = std::time::Instant::now() + crate::auth::jwt::FETCH_TIMEOUT + std::time::Duration::from_secs(1);
    let tried = |s: &crate::auth::jwt::Jwks| {
        s.url().is_none()
            || s.stats().fetches_ok.load(Ordering::Relaxed) + s.stats().fetches_failed.load(Ordering::Relaxed) > 0
    };
    // Start-up only: polled, as the refresher has no signal of its own to wait on.
    while !sets.iter().all(|s| tried(s)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(Some(crate::background::Stopper::new(stop, thread)))
}

/// The stick tables of the limits `[shared]` lists (`shared = true`).
fn shared_tables(shared: &Shared) -> Vec<Arc<dyn crate::sharing::SyncTable>> {
    let Some(sharing) = &shared.config.sharing else {
        return Vec::new();
    };
    shared
        .tables()
        .filter(|t| sharing.limits.iter().any(|name| name == t.name()))
        .map(|t| Arc::clone(t) as Arc<dyn crate::sharing::SyncTable>)
        .collect()
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

    /// Every address `frontend` is bound to, in the order of its `bind` list.
    pub fn local_addrs(&self, frontend: &str) -> Vec<SocketAddr> {
        let Some(idx) = self.shared.config.frontends.iter().position(|f| f.name == frontend) else {
            return Vec::new();
        };
        let mut out: Vec<SocketAddr> = Vec::new();
        for (_, a) in self.bound.iter().filter(|(fe, _)| *fe == idx) {
            if !out.contains(a) {
                out.push(*a);
            }
        }
        out
    }

    /// Every local address of `frontend`'s quic UDP sockets (port 0 resolved), each once, in
    /// the order of its `quic.bind` list.
    pub fn quic_addrs(&self, frontend: &str) -> Vec<SocketAddr> {
        let Some(idx) = self.shared.config.frontends.iter().position(|f| f.name == frontend) else {
            return Vec::new();
        };
        let mut out: Vec<SocketAddr> = Vec::new();
        for (_, a) in self.quic_bound.iter().filter(|(fe, _)| *fe == idx) {
            if !out.contains(a) {
                out.push(*a);
            }
        }
        out
    }

    /// Accept loops still running; 0 once a stopping generation accepts no more connections
    /// (its duplicates of the listening sockets are closed).
    pub fn accepting(&self) -> usize {
        self.accepting.load(Ordering::SeqCst)
    }

    /// Applies a runtime change to the live state every thread reads, and tells every
    /// thread what it must act on itself (its balancer's weights, its sessions to close).
    pub(crate) fn apply(&self, change: &ServerChange) -> Result<(), String> {
        self.apply_checked(change, true)
    }

    /// `apply` for a change re-applied to a generation before it serves (kept across a
    /// reload): a deletion needs no drained server, there is no traffic to protect yet.
    pub(crate) fn reapply(&self, change: &ServerChange) -> Result<(), String> {
        self.apply_checked(change, false)
    }

    fn apply_checked(&self, change: &ServerChange, checked: bool) -> Result<(), String> {
        let config = &self.shared.config;
        let index = config
            .backends
            .iter()
            .position(|b| b.name == change.backend)
            .ok_or_else(|| format!("no backend `{}`", change.backend))?;
        let backend = self.shared.backends.get(index).ok_or("no live state for the backend")?;
        if !self.change_set(index, change, checked)? {
            return Ok(());
        }
        let set = backend.servers();
        let server = set
            .find(&change.server)
            .ok_or_else(|| format!("no server `{}` in backend `{}`", change.server, change.backend))?;
        let id = server.id;
        // States are read live at every pick: in effect for every thread once stored.
        if let Some(state) = change.state
            && server.set_admin(state)
        {
            // A ramp this started is in the balancers before the command is answered (the
            // ticker then takes it from there).
            crate::live::slowstart::step(&self.shared.backends, crate::live::slowstart::now_ms());
        }
        let (ack, acked) = std::sync::mpsc::channel();
        if let Some(weight) = change.weight {
            server.set_weight(weight);
            // The agent's percentage and slow start scale what balancers use.
            let weight = server.effective_weight();
            self.tell_threads(|| Message::Weight {
                backend: index,
                server: id,
                weight,
                done: ack.clone(),
            });
        }
        if change.kill {
            server.kill_sessions();
            self.tell_threads(|| Message::Kill {
                server: id,
                done: ack.clone(),
            });
        }
        drop(ack);
        // Every thread drops its ack once it acted (a stopped thread drops it unread).
        let deadline = std::time::Instant::now() + APPLY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match acked.recv_timeout(left) {
                Ok(()) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    return Err(format!("not every worker thread acted within {APPLY_TIMEOUT:?}"));
                }
            }
        }
    }

    /// Enables or disables a frontend (`ctl enable|disable frontend`): a disabled one accepts
    /// nothing (its sockets stay bound; connections wait in the backlog) and keeps serving
    /// the connections it has.
    pub(crate) fn set_frontend(&self, name: &str, enabled: bool) -> Result<(), String> {
        let index = self
            .shared
            .config
            .frontends
            .iter()
            .position(|f| f.name == name)
            .ok_or_else(|| format!("no frontend `{name}`"))?;
        self.shared.paused.set(index, enabled);
        Ok(())
    }

    /// Swaps a certificate into its frontend's store (`ctl set cert`); what it did, in words.
    pub(crate) fn set_cert(&self, cert: &crate::command::CertInstall) -> Result<String, String> {
        certs::set_cert(&self.shared, cert)
    }

    fn tell_threads(&self, msg: impl Fn() -> Message) {
        for inbox in &self.inboxes {
            // A thread that has already stopped has nothing left to change.
            let _ = inbox.send(msg());
        }
    }

    /// Every thread's metrics of this process, summed (the answer to a scrape).
    pub fn metrics(&self) -> crate::metrics::MetricsSnapshot {
        metrics::snapshot(&self.shared)
    }

    /// This process's answer to a `show stat|sessions|errors|budgets`.
    pub(crate) fn show(
        &self,
        query: &crate::command::show::Query,
    ) -> Result<crate::command::show::GenerationShow, String> {
        show::answer(&self.shared, &self.inboxes, query)
    }

    /// This process's `show stat` rows (every frontend, backend and server).
    pub fn show_stat(&self) -> crate::command::show::StatReport {
        show::stat(&self.shared, None, None)
    }

    /// `show table` / `clear table` on this process's stick tables.
    pub fn table(&self, op: &crate::command::table::TableOp) -> Result<crate::command::Answer, String> {
        tables::answer(&self.shared, op)
    }

    /// Every server's live state (of one backend).
    pub fn show_servers(&self, backend: Option<&str>) -> Vec<ServerView> {
        self.shared
            .backends
            .iter()
            .filter(|b| backend.is_none_or(|name| *b.name == *name))
            .flat_map(|b| {
                let (queued, queue_full) = (b.queued(), b.queue_full());
                b.servers()
                    .servers
                    .iter()
                    .map(|s| ServerView {
                        backend_queued: queued,
                        backend_queue_full: queue_full,
                        ..s.view()
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// A newer generation reads the QUIC sockets now (a reload): this one stops reading
    /// them and gets its connections' datagrams from it.
    pub fn quic_hand_over(&self) {
        if let Some(mesh) = &self.quic_mesh {
            mesh.hand_over();
        }
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
        if let Some(checker) = self.checker.take() {
            checker
                .join()
                .map_err(|_| std::io::Error::other("the health checker panicked"))?;
        }
        log_counters(&self.shared, " at stop");
        if let Some(log) = &self.shared.access_log {
            log.finish();
        }
        Ok(())
    }

    /// Reopens the access log file (SIGUSR1, after logrotate renamed it).
    pub fn reopen_logs(&self) {
        if let Some(log) = &self.shared.access_log {
            log.reopen();
        }
    }

    pub fn is_finished(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn quic_binds_on_port_0_are_announced_with_the_port_they_got() {
        let config = crate::listener::udp::tests::config(2, &[&["127.0.0.1:0", "127.0.0.1:0"], &["127.0.0.1:0"]]);
        let udp = crate::listener::udp::bind_quic(&config).unwrap();
        let resolved = resolve_quic_ports(Arc::new(config), &udp);
        let at = |group: usize| udp.iter().find(|s| s.group == group).unwrap().local;
        let q0 = resolved.frontends[0].quic.as_ref().unwrap();
        assert_eq!(q0.binds, [at(0), at(1)]);
        let alt = format!("h3=\":{}\"; ma=86400", at(0).port());
        assert_eq!(resolved.frontends[0].alt_svc(), Some(alt.as_bytes()));
        assert_eq!(resolved.frontends[1].quic.as_ref().unwrap().binds, [at(2)]);
        // Nothing on port 0: the same config, not a copy.
        let fixed = Arc::clone(&resolved);
        assert!(Arc::ptr_eq(&resolve_quic_ports(Arc::clone(&fixed), &[]), &fixed));
    }
}
