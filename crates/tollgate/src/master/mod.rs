//! The master process: owns the listening sockets, runs worker generations, reloads,
//! supervises. It never proxies.
//!
//! A *generation* is one worker process (the same binary re-executed as `tollgate worker`)
//! running one config. The master binds every socket once, hands duplicates of them to each
//! generation over a socketpair (`SCM_RIGHTS`, see `sockets`; then `command` frames), and waits for its
//! READY. A reload (SIGHUP or `tollgate reload` on the control socket) validates the config
//! file again, binds what is new, starts the next generation on the same sockets, waits for
//! READY, and only then tells the previous generations to soft-stop. Because the master keeps
//! every listening socket open, no accept queue is ever closed by a reload: the old worker
//! simply stops calling accept and the new one takes over the same queues.
//!
//! State owned here (one thread, one `LocalSet`; nothing shared): the socket table, the live
//! generations with their state (`starting` → `serving` → `stopping` → gone), the current
//! config text, and the restart backoff. A generation is removed only when its process has
//! been reaped, and a socket is closed only when no live generation and not the current
//! config uses it — or at SIGTERM, when the master closes them all at once so nothing new is
//! accepted while the generations finish their connections.

mod certs;
pub(crate) mod commands;
pub mod control;
pub(crate) mod desired;
pub(crate) mod metrics;
pub mod notify;
pub mod privileges;
pub(crate) mod show;
pub(crate) mod sockets;
pub(crate) mod supervise;
pub mod worker;

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::unix::OwnedWriteHalf;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::command::{HealthReport, ReloadReport, Reply, ServerChange, ToMaster, ToWorker, codec};
use crate::config::Config;
use crate::config::ids::IdTable;
use crate::error::{Error, ErrorKind, Side};
use crate::listener::BoundSocket;
use crate::listener::udp::BoundUdp;
use commands::Pending;
use control::Request;
use desired::Desired;
use sockets::{Plan, SocketTable};

/// Longest a new worker may take from spawn to READY.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long past `hard_stop_after` the master waits for a stopping worker before SIGKILL.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(5);
/// Longest a reload waits for the old generation to confirm it stopped accepting.
pub(crate) const DRAIN_ACK_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GenState {
    /// Spawned, sockets and config sent, READY not yet received.
    Starting,
    Serving,
    /// Told to soft-stop; removed once reaped.
    Stopping,
}

impl GenState {
    fn as_str(self) -> &'static str {
        match self {
            GenState::Starting => "starting",
            GenState::Serving => "serving",
            GenState::Stopping => "stopping",
        }
    }
}

struct Generation {
    id: u64,
    pid: u32,
    state: GenState,
    to_worker: OwnedWriteHalf,
    /// The sockets it was given (kept open while it lives).
    plan: Plan,
    started: Instant,
    /// `timeouts.hard_stop_after` of the config it runs.
    hard_stop_after: Duration,
    /// When it was told to stop.
    stop: Option<Instant>,
    /// Per worker thread, the sending end of its QUIC handover pair (`quic::handover`):
    /// every newer generation gets a duplicate; closed with the generation.
    quic_in: Vec<OwnedFd>,
}

enum Event {
    Ready(u64),
    Draining(u64),
    Failed(u64, String),
    Exited(u64, Option<ExitStatus>),
    /// A worker's answer to a command the master sent it.
    Reply(u64, Reply),
    /// A worker's checker saw a server's health change.
    Health(u64, HealthReport),
    /// A generation's counters as it ended (its last message before it exits).
    Final(u64, Box<crate::metrics::MetricsSnapshot>),
}

struct Master {
    /// The QUIC connection-ID tag key every generation gets (`ToWorker::Config`).
    quic_key: [u8; 16],
    /// When the master started (`show info`'s uptime).
    began: Instant,
    /// The binary to run workers from, resolved at start: replacing the file on disk and
    /// reloading upgrades the workers.
    exe: PathBuf,
    config_path: PathBuf,
    config: Arc<Config>,
    text: String,
    plan: Plan,
    sockets: SocketTable,
    gens: Vec<Generation>,
    next_id: u64,
    backoff: supervise::Backoff,
    restart_at: Option<Instant>,
    exiting: bool,
    events: mpsc::UnboundedSender<Event>,
    /// Ids, and the runtime changes every new generation re-applies.
    desired: Desired,
    /// Commands sent to workers, waiting for their replies, by master-side request id.
    pending: HashMap<u64, Pending>,
    next_request: u64,
    /// systemd's `NOTIFY_SOCKET`, if set.
    notify: notify::Notifier,
    reloads: ReloadCounts,
    /// The counters of the generations that exited (`commands::Retired`).
    retired: commands::Retired,
}

/// Reloads by outcome since the master started (for metrics).
#[derive(Debug, Default)]
struct ReloadCounts {
    done: u64,
    refused: u64,
}

fn internal(context: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::io(Side::Internal, context, e)
}

/// Reads and validates the config file, ids from `ids`; the error text is
/// `FILE:LINE:COL: message` lines.
fn load(path: &Path, ids: &mut IdTable) -> Result<(Config, String), String> {
    let (mut config, text) = crate::config::load_with_text(path).map_err(|e| e.to_string())?;
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    ids.assign(&mut config);
    Ok((config, text))
}

/// Runs the master until SIGTERM (graceful) or SIGINT (fast), on `config` (read from
/// `config_path` as `text`, see `config::load_with_text`) and the `sockets` and `quic` UDP
/// sockets bound for it (`listener::bind_all`, `listener::udp::bind_quic`): the caller binds,
/// so a port in use is reported before anything starts.
pub fn run(
    config_path: &Path,
    config: Config,
    text: String,
    sockets: Vec<BoundSocket>,
    quic: Vec<BoundUdp>,
) -> Result<(), Error> {
    let exe = std::env::current_exe().map_err(internal("locate own binary"))?;
    privileges::warn_if_root(&config.global);
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    // The master's id table: the first config's ids, kept for its whole life.
    let mut desired = Desired::default();
    let mut config = config;
    desired.ids.assign(&mut config);
    for s in sockets.iter().filter(|s| s.worker.is_none_or(|w| w == 0)) {
        let frontend = config.frontends.get(s.frontend).map_or("", |f| f.name.as_str());
        tracing::info!(frontend = %frontend, addr = %s.local, "listening");
    }
    for s in quic.iter().filter(|s| s.worker == 0) {
        let frontend = config.frontends.get(s.frontend).map_or("", |f| f.name.as_str());
        tracing::info!(frontend = %frontend, addr = %s.local, "listening (quic, UDP)");
    }
    let (sockets, plan) = SocketTable::from_bound(sockets, quic);
    let admin = config.admin.bind.map(metrics::bind).transpose()?;
    tracing::info!(config = %config_path.display(), pid = std::process::id(), "master: {}", config.summary());

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(internal("master runtime"))?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let control_path = config.global.control_socket.clone();
        let config_access = config.global.control_access;
        let mut quic_key = [0u8; 16];
        aws_lc_rs::rand::fill(&mut quic_key)
            .map_err(|_| Error::new(crate::error::ErrorKind::Io, Side::Internal, "no random source"))?;
        let mut master = Master {
            quic_key,
            exe,
            config_path: config_path.to_path_buf(),
            config: Arc::new(config),
            text,
            plan,
            sockets,
            gens: Vec::new(),
            began: Instant::now(),
            next_id: 1,
            backoff: supervise::Backoff::default(),
            restart_at: None,
            exiting: false,
            events: events_tx,
            desired,
            pending: HashMap::new(),
            retired: commands::Retired::default(),
            next_request: 1,
            notify: notify::Notifier::from_env(),
            reloads: ReloadCounts::default(),
        };
        let (requests_tx, mut requests) = mpsc::unbounded_channel();
        if let Some(listener) = admin {
            metrics::spawn(listener, master.config.admin.stats_auth.clone(), requests_tx.clone());
        }
        let control = match control::bind(&control_path, config_access) {
            Ok(listener) => {
                tracing::info!(path = %control_path.display(), "control socket ready (tollgate reload)");
                tokio::task::spawn_local(control::serve(listener, requests_tx));
                true
            }
            // Two masters on one control socket would be two masters on one config.
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(Error::io(Side::Internal, "control socket", e));
            }
            Err(e) => {
                tracing::warn!(path = %control_path.display(), error = %e, "no control socket: reload with SIGHUP");
                false
            }
        };
        let result = master.serve(&mut events, &mut requests).await;
        if control {
            let _ = std::fs::remove_file(&control_path);
        }
        result
    })
}

impl Master {
    async fn serve(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<Event>,
        requests: &mut mpsc::UnboundedReceiver<Request>,
    ) -> Result<(), Error> {
        let sig = |kind| signal(kind).map_err(internal("signal handler"));
        let (mut hup, mut term, mut int, mut usr1) = (
            sig(SignalKind::hangup())?,
            sig(SignalKind::terminate())?,
            sig(SignalKind::interrupt())?,
            sig(SignalKind::user_defined1())?,
        );
        let plan = self.plan.clone();
        let config = Arc::clone(&self.config);
        let text = self.text.clone();
        let first = self
            .spawn(&config, &text, &plan, Vec::new(), Vec::new())
            .map_err(internal("starting the first worker"))?;
        if let Err(msg) = self.wait_ready(first, events).await {
            self.kill_all();
            self.reap_all(events, Duration::from_secs(2)).await;
            return Err(Error::new(
                ErrorKind::Io,
                Side::Internal,
                format!("first worker: {msg}"),
            ));
        }
        self.notify.ready(&self.status_line());
        let mut ticker = tokio::time::interval(Duration::from_millis(250));
        loop {
            let restart_at = self.restart_at;
            tokio::select! {
                Some(ev) = events.recv() => self.on_event(ev),
                Some(req) = requests.recv() => self.on_request(req, events).await,
                _ = hup.recv() => {
                    tracing::info!("SIGHUP: reloading");
                    let _ = self.reload(events).await;
                }
                _ = usr1.recv() => {
                    tracing::info!("SIGUSR1: workers reopen their access logs");
                    self.reopen_logs().await;
                }
                _ = term.recv() => {
                    tracing::info!("SIGTERM: soft-stopping the workers, then exiting");
                    self.notify.stopping("stopping: finishing the connections in flight");
                    self.shutdown(events, &mut int).await;
                    return Ok(());
                }
                _ = int.recv() => {
                    tracing::info!("SIGINT: killing the workers and exiting now");
                    self.notify.stopping("stopping now (SIGINT)");
                    self.exiting = true;
                    self.kill_all();
                    self.reap_all(events, Duration::from_secs(2)).await;
                    return Ok(());
                }
                _ = sleep_until_opt(restart_at), if restart_at.is_some() => self.restart(),
                _ = ticker.tick() => {
                    self.enforce_deadlines();
                    self.expire_pending();
                    crate::config::tickets::step();
                }
            }
        }
    }

    /// Starts one worker process on `plan` with `config`, which applies `changes` before it
    /// says ready; returns its generation id.
    fn spawn(
        &mut self,
        config: &Config,
        text: &str,
        plan: &Plan,
        changes: Vec<ServerChange>,
        certs: Vec<crate::command::CertInstall>,
    ) -> std::io::Result<u64> {
        let health = self.desired.health_for(&self.config, config);
        let id = self.next_id;
        self.next_id += 1;
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        let mut child = tokio::process::Command::new(&self.exe)
            .arg("worker")
            .arg("--generation")
            .arg(id.to_string())
            // Only the master speaks for the service (systemd's NotifyAccess=main).
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .spawn()?;
        let pid = child.id().unwrap_or(0);
        tracing::info!(generation = id, pid, "worker started");
        let pairs = self.quic_pairs(config)?;
        let handoff = || -> std::io::Result<()> {
            ours.set_write_timeout(Some(Duration::from_secs(10)))?;
            tollgate_sys::fdpass::send_listeners(ours.as_fd(), &self.sockets.labelled(plan)?)?;
            // Then the QUIC handover ends (an empty batch without quic binds).
            tollgate_sys::fdpass::send_listeners(ours.as_fd(), &self.handover_labels(&pairs.1))?;
            let path = config
                .source
                .as_ref()
                .map_or_else(|| self.config_path.display().to_string(), |p| p.display().to_string());
            let msg = ToWorker::Config {
                path,
                text: text.to_string(),
                ids: self.desired.ids.clone(),
                changes,
                disabled_frontends: self.desired.disabled_frontends(config),
                health,
                certs,
                // The master's own keys, as of this period (`config::tickets`).
                tickets: crate::config::tickets::current(),
                quic_key: Some(self.quic_key),
            };
            codec::write(&mut &ours, &msg)?;
            ours.set_nonblocking(true)
        };
        let chan = handoff().and_then(|()| tokio::net::UnixStream::from_std(ours));
        let chan = match chan {
            Ok(c) => c,
            Err(e) => {
                let _ = child.start_kill();
                tokio::task::spawn_local(async move {
                    let _ = child.wait().await;
                });
                return Err(e);
            }
        };
        let (rd, wr) = chan.into_split();
        tokio::task::spawn_local(watch(id, child, rd, self.events.clone()));
        self.gens.push(Generation {
            id,
            pid,
            state: GenState::Starting,
            to_worker: wr,
            plan: plan.clone(),
            started: Instant::now(),
            hard_stop_after: config.timeouts.hard_stop_after,
            stop: None,
            quic_in: pairs.0,
        });
        Ok(id)
    }

    /// A new generation's QUIC handover pairs, one per worker thread when its config has
    /// quic binds: (the sending ends the master keeps, the receiving ends it hands over).
    fn quic_pairs(&self, config: &Config) -> std::io::Result<(Vec<OwnedFd>, Vec<OwnedFd>)> {
        if crate::listener::udp::quic_binds(config).next().is_none() {
            return Ok((Vec::new(), Vec::new()));
        }
        let mut keep = Vec::new();
        let mut give = Vec::new();
        for _ in 0..config.global.workers.max(1) {
            let (tx, rx) = std::os::unix::net::UnixDatagram::pair()?;
            keep.push(OwnedFd::from(tx));
            give.push(OwnedFd::from(rx));
        }
        Ok((keep, give))
    }

    /// The handover batch: `in#T` (this generation's receiving end for thread T), then
    /// `out:G#T` (generation G's sending end for its thread T) for every live generation
    /// with quic binds.
    fn handover_labels<'a>(&'a self, inbound: &'a [OwnedFd]) -> Vec<(String, BorrowedFd<'a>)> {
        let mut labels: Vec<(String, BorrowedFd<'a>)> = inbound
            .iter()
            .enumerate()
            .map(|(t, fd)| (format!("in#{t}"), fd.as_fd()))
            .collect();
        if inbound.is_empty() {
            return labels;
        }
        for g in &self.gens {
            for (t, fd) in g.quic_in.iter().enumerate() {
                labels.push((format!("out:{}#{t}", g.id), fd.as_fd()));
            }
        }
        labels
    }

    /// Handles events until generation `id` is READY (or failed, or timed out).
    async fn wait_ready(&mut self, id: u64, events: &mut mpsc::UnboundedReceiver<Event>) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let outcome = loop {
            tokio::select! {
                ev = events.recv() => {
                    let Some(ev) = ev else { break Err("event channel closed".to_string()) };
                    let verdict = match &ev {
                        Event::Ready(i) if *i == id => Some(Ok(())),
                        Event::Failed(i, m) if *i == id => Some(Err(m.clone())),
                        Event::Exited(i, s) if *i == id => Some(Err(format!("the new worker exited: {}", show(s)))),
                        _ => None,
                    };
                    self.on_event(ev);
                    if let Some(v) = verdict {
                        break v;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    break Err(format!("the new worker was not ready after {READY_TIMEOUT:?}"));
                }
            }
        };
        if outcome.is_err()
            && let Some(g) = self.gens.iter().find(|g| g.id == id)
        {
            kill(g.pid);
        }
        outcome
    }

    /// A reload as the service manager and the metrics see it: `RELOADING=1`, the reload,
    /// `READY=1` whatever its outcome (a refused reload leaves the old generation serving).
    async fn reload(&mut self, events: &mut mpsc::UnboundedReceiver<Event>) -> Result<ReloadReport, String> {
        self.notify.reloading();
        let outcome = self.reload_generation(events).await;
        match &outcome {
            Ok(_) => self.reloads.done += 1,
            Err(_) => self.reloads.refused += 1,
        }
        self.notify.ready(&self.status_line());
        outcome
    }

    async fn reload_generation(&mut self, events: &mut mpsc::UnboundedReceiver<Event>) -> Result<ReloadReport, String> {
        let began = Instant::now();
        let refuse = |text: String| {
            tracing::error!("reload refused, the current generation keeps serving: {text}");
            Err(text)
        };
        let (config, text) = match load(&self.config_path, &mut self.desired.ids) {
            Ok(x) => x,
            Err(msg) => return refuse(msg),
        };
        if config.global.control_socket != self.config.global.control_socket
            || config.global.control_access != self.config.global.control_access
            || config.global.master != self.config.global.master
        {
            tracing::warn!(
                "global.control_socket, control_socket_mode, control_socket_group and master take effect at the next start, not on reload"
            );
        }
        if config.admin != self.config.admin {
            tracing::warn!("[admin] bind and stats_auth take effect at the next start, not on reload");
        }
        if config.global.run_as != self.config.global.run_as
            || config.global.allow_root != self.config.global.allow_root
        {
            privileges::warn_if_root(&config.global);
        }
        let plan = match self.sockets.ensure(&config) {
            Ok(p) => p,
            Err(e) => {
                self.release_sockets();
                return refuse(e.to_string());
            }
        };
        let carried = self.desired.preview(&self.config, &config);
        // A reload reads the certificate files again: runtime certificates are not carried.
        let id = match self.spawn(&config, &text, &plan, carried, Vec::new()) {
            Ok(id) => id,
            Err(e) => {
                self.release_sockets();
                return refuse(format!("starting a worker: {e}"));
            }
        };
        if let Err(msg) = self.wait_ready(id, events).await {
            self.release_sockets();
            self.check_serving(Duration::ZERO);
            return refuse(msg);
        }
        let mut report = self.desired.reconcile(&self.config, &config);
        for line in &report.kept {
            tracing::info!("reload kept runtime change {line}");
        }
        for line in &report.overridden {
            tracing::warn!("reload dropped runtime change {line}");
        }
        self.config = Arc::new(config);
        self.text = text;
        self.plan = plan;
        let stopping = self.stop_all_but(id).await;
        self.await_draining(&stopping, events).await;
        self.release_sockets();
        let stopping = stopping.len();
        let pid = self.gens.iter().find(|g| g.id == id).map_or(0, |g| g.pid);
        let took = began.elapsed();
        tracing::info!(generation = id, pid, ?took, stopping, "reload done");
        report.text = format!(
            "reloaded: generation {id} (pid {pid}) serving after {} ms; {stopping} previous generation(s) soft-stopping",
            took.as_millis()
        );
        Ok(report)
    }

    /// Handles events until every generation of `ids` said it stopped accepting (or exited),
    /// at most `DRAIN_ACK_TIMEOUT`: once a reload answers, only the new generation accepts.
    async fn await_draining(&mut self, ids: &[u64], events: &mut mpsc::UnboundedReceiver<Event>) {
        let mut waiting: Vec<u64> = ids.to_vec();
        let deadline = Instant::now() + DRAIN_ACK_TIMEOUT;
        while !waiting.is_empty() {
            tokio::select! {
                Some(ev) = events.recv() => {
                    if let Event::Draining(i) | Event::Exited(i, _) = &ev {
                        waiting.retain(|w| w != i);
                    }
                    self.on_event(ev);
                }
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(generations = ?waiting, "old generation(s) did not confirm they stopped accepting");
                    return;
                }
            }
        }
    }

    /// Tells every generation (stopping ones too: they still log) to reopen its access log.
    async fn reopen_logs(&mut self) {
        for g in &mut self.gens {
            let sent = tokio::time::timeout(
                Duration::from_secs(1),
                codec::write_async(&mut g.to_worker, &ToWorker::ReopenLogs),
            );
            if !matches!(sent.await, Ok(Ok(()))) {
                tracing::warn!(
                    generation = g.id,
                    pid = g.pid,
                    "could not tell the worker to reopen its logs"
                );
            }
        }
    }

    /// Tells every generation but `keep` to soft-stop; returns their ids.
    async fn stop_all_but(&mut self, keep: u64) -> Vec<u64> {
        let mut told = Vec::new();
        let successor_has_quic = self.gens.iter().any(|g| g.id == keep && !g.quic_in.is_empty());
        for g in self
            .gens
            .iter_mut()
            .filter(|g| g.id != keep && g.state != GenState::Stopping)
        {
            if !g.quic_in.is_empty() && successor_has_quic {
                // Before the stop: from now on the new generation reads the QUIC sockets.
                let _ = tokio::time::timeout(
                    Duration::from_secs(1),
                    codec::write_async(&mut g.to_worker, &ToWorker::HandOver),
                )
                .await;
            }
            let sent = tokio::time::timeout(
                Duration::from_secs(1),
                codec::write_async(&mut g.to_worker, &ToWorker::Stop),
            );
            if !matches!(sent.await, Ok(Ok(()))) {
                tracing::warn!(
                    generation = g.id,
                    pid = g.pid,
                    "could not tell the worker to stop; killing it"
                );
                kill(g.pid);
            }
            g.state = GenState::Stopping;
            g.stop = Some(Instant::now());
            told.push(g.id);
        }
        told
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Ready(id) => {
                if let Some(g) = self
                    .gens
                    .iter_mut()
                    .find(|g| g.id == id && g.state == GenState::Starting)
                {
                    g.state = GenState::Serving;
                    tracing::info!(generation = id, pid = g.pid, "worker serving");
                }
                self.notify.status(&self.status_line());
            }
            Event::Draining(id) => tracing::debug!(generation = id, "stopped accepting"),
            Event::Failed(id, msg) => tracing::error!(generation = id, "worker failed to start: {msg}"),
            Event::Reply(generation, reply) => self.on_reply(generation, reply),
            Event::Health(generation, report) => {
                // A stopping generation no longer checks; what it said last is stale.
                if self
                    .gens
                    .iter()
                    .any(|g| g.id == generation && g.state != GenState::Stopping)
                {
                    self.desired.record_health(report);
                }
            }
            Event::Final(id, metrics) => self.retired.retire(id, Some(&metrics)),
            Event::Exited(id, status) => {
                // Without its last word (a crash): the counters it last reported.
                self.retired.retire(id, None);
                self.forget_generation(id);
                let Some(pos) = self.gens.iter().position(|g| g.id == id) else {
                    return;
                };
                let g = self.gens.remove(pos);
                let lived = g.started.elapsed();
                match g.state {
                    GenState::Stopping => {
                        tracing::info!(generation = id, pid = g.pid, status = %show(&status), "stopped generation exited")
                    }
                    _ if self.exiting => {}
                    // Refused its config or failed before READY: the start or reload that
                    // waited for it has said why; this is no crash.
                    GenState::Starting => tracing::info!(
                        generation = id, pid = g.pid, status = %show(&status),
                        "the worker of a generation that did not start exited"
                    ),
                    _ => tracing::warn!(
                        generation = id, pid = g.pid, status = %show(&status), ?lived,
                        "worker died unexpectedly"
                    ),
                }
                if g.state != GenState::Stopping {
                    self.check_serving(lived);
                }
                self.release_sockets();
                self.notify.status(&self.status_line());
            }
        }
    }

    /// After a worker was lost: if no generation serves or is starting, schedule a restart.
    fn check_serving(&mut self, lived: Duration) {
        if self.exiting || self.restart_at.is_some() || self.gens.iter().any(|g| g.state != GenState::Stopping) {
            return;
        }
        let delay = self.backoff.on_death(lived);
        tracing::warn!(?delay, "no worker serving: restarting one with the current config");
        self.restart_at = Some(Instant::now() + delay);
    }

    fn restart(&mut self) {
        self.restart_at = None;
        let (config, text, plan) = (Arc::clone(&self.config), self.text.clone(), self.plan.clone());
        if let Err(e) = self.spawn(&config, &text, &plan, self.desired.changes(), self.desired.certs()) {
            tracing::error!(error = %e, "restarting a worker failed");
            self.check_serving(Duration::ZERO);
        }
    }

    /// Kills stopping workers past `hard_stop_after` + grace and workers stuck starting.
    fn enforce_deadlines(&mut self) {
        let now = Instant::now();
        for g in &self.gens {
            let late = match (g.state, g.stop) {
                (GenState::Stopping, Some(at)) => now > at + g.hard_stop_after + KILL_GRACE,
                (GenState::Starting, _) => now > g.started + READY_TIMEOUT + KILL_GRACE,
                _ => false,
            };
            if late {
                tracing::warn!(
                    generation = g.id,
                    pid = g.pid,
                    state = g.state.as_str(),
                    "worker overdue: killing it"
                );
                kill(g.pid);
            }
        }
    }

    /// Closes the sockets neither a live generation nor the current config uses.
    fn release_sockets(&mut self) {
        let used: HashSet<&str> = self
            .gens
            .iter()
            .flat_map(|g| g.plan.iter())
            .chain(self.plan.iter())
            .map(|(k, _)| k.as_str())
            .collect();
        for key in self.sockets.retain(&used) {
            tracing::info!(key = %key, "listening socket closed (no generation uses it)");
        }
    }

    fn kill_all(&self) {
        for g in &self.gens {
            kill(g.pid);
        }
    }

    /// Processes events until every generation is reaped or `limit` passes.
    async fn reap_all(&mut self, events: &mut mpsc::UnboundedReceiver<Event>, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.gens.is_empty() {
            tokio::select! {
                Some(ev) = events.recv() => self.on_event(ev),
                _ = tokio::time::sleep_until(deadline) => return,
            }
        }
    }

    /// SIGTERM: stop accepting at once, soft-stop every generation, wait for them (killing
    /// the overdue), return.
    ///
    /// The master closes its listening sockets first and the workers close theirs as they
    /// stop, so the sockets are gone within the workers' reaction time: new connections are
    /// refused (ECONNREFUSED) instead of queued and reset when the last process exits.
    async fn shutdown(&mut self, events: &mut mpsc::UnboundedReceiver<Event>, int: &mut Signal) {
        self.exiting = true;
        self.restart_at = None;
        // Every listening socket the master holds, whoever uses it: nothing accepts any more.
        self.sockets = SocketTable::default();
        let stopping = self.stop_all_but(0).await;
        self.await_draining(&stopping, events).await;
        tracing::info!(
            generations = self.gens.len(),
            "stopped accepting: listening sockets closed; finishing the connections in flight"
        );
        let mut ticker = tokio::time::interval(Duration::from_millis(250));
        while !self.gens.is_empty() {
            tokio::select! {
                Some(ev) = events.recv() => self.on_event(ev),
                _ = int.recv() => {
                    self.kill_all();
                    self.reap_all(events, Duration::from_secs(2)).await;
                    return;
                }
                _ = ticker.tick() => self.enforce_deadlines(),
            }
        }
        tracing::info!("every worker stopped; master exiting");
    }

    /// One line for systemd's `STATUS=`: what serves now.
    fn status_line(&self) -> String {
        let workers = self.config.global.workers;
        let stopping = self.gens.iter().filter(|g| g.state == GenState::Stopping).count();
        match self.gens.iter().find(|g| Some(g.id) == self.serving_generation()) {
            Some(g) => format!(
                "serving generation {} (pid {}), {workers} worker threads; {stopping} generation(s) stopping",
                g.id, g.pid
            ),
            None => "no generation serving".to_string(),
        }
    }

    fn status(&self) -> crate::command::StatusReport {
        crate::command::StatusReport {
            pid: std::process::id(),
            config: self.config_path.display().to_string(),
            sockets: self.sockets.len(),
            serving: self.serving_generation(),
            generations: self
                .gens
                .iter()
                .map(|g| crate::command::GenerationStatus {
                    generation: g.id,
                    pid: g.pid,
                    state: g.state.as_str().to_string(),
                    up_ms: u64::try_from(g.started.elapsed().as_millis()).unwrap_or(u64::MAX),
                })
                .collect(),
        }
    }
}

/// Reads a worker's messages until its end closes, then reaps it.
async fn watch(
    id: u64,
    mut child: tokio::process::Child,
    mut from_worker: tokio::net::unix::OwnedReadHalf,
    events: mpsc::UnboundedSender<Event>,
) {
    while let Ok(Some(body)) = codec::read_body_async(&mut from_worker).await {
        let event = match codec::decode::<ToMaster>(&body) {
            Ok(ToMaster::Ready) => Event::Ready(id),
            Ok(ToMaster::Draining) => Event::Draining(id),
            Ok(ToMaster::Failed { message }) => Event::Failed(id, message),
            Ok(ToMaster::Reply(reply)) => Event::Reply(id, reply),
            Ok(ToMaster::Health(report)) => Event::Health(id, report),
            Ok(ToMaster::Final(metrics)) => Event::Final(id, metrics),
            Err(e) => {
                tracing::warn!(generation = id, error = %e, "bad message from a worker");
                continue;
            }
        };
        let _ = events.send(event);
    }
    let status = child.wait().await.ok();
    let _ = events.send(Event::Exited(id, status));
}

fn kill(pid: u32) {
    let pid = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw);
    if let Some(pid) = pid {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

fn show(status: &Option<ExitStatus>) -> String {
    status.map_or_else(|| "unknown".to_string(), |s| s.to_string())
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
