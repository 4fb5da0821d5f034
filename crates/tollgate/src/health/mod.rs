//! Active and passive health: which servers are up.
//!
//! Owns the checker: one thread per process (`tollgate-health`, a current_thread tokio
//! runtime of its own, never a worker thread), started by `runtime::start_with` when some
//! backend has `[backend.health]`, stopped as soon as the generation leaves `Running` (a
//! soft-stopping generation stops checking at once: the next one has taken over).
//!
//! - [`state`]: the rise/fall state machine (sans-io);
//! - [`agent`]: HAProxy's agent protocol (sans-io);
//! - [`schedule`]: when checks run (sans-io);
//! - [`probe`]: one TCP / TLS / HTTP check, one agent query;
//! - [`report`]: what a transition does (live state, logs, kills, the master);
//! - this file: the thread, the supervisor that follows each backend's server set, and each
//!   server's check loop.
//!
//! Invariants: one check task per live server (keyed by its `ServerLive`; a server that
//! leaves the set loses its task at the next rescan); a task runs its checks and agent
//! queries one after the other, so a server never has more than one check connection open;
//! at most `global.max_health_checks` checks are in flight process-wide. The checker is the
//! only writer of a server's operational state, except live traffic reaching
//! `error_limit`, which stores `down` itself (so traffic stops at once) and wakes the
//! server's task to do the rest. Passive counting lives in `live::check` (the proxy sits
//! below this module).

pub(crate) mod agent;
pub(crate) mod probe;
pub(crate) mod report;
pub(crate) mod schedule;
pub(crate) mod state;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::config::health::{CheckKind, HealthCheck};
use crate::ctx::{Phase, Shared};
use crate::live::backend::BackendLive;
use crate::live::check::Outcome;
use crate::live::server::{OperState, ServerLive};
use agent::AgentState;
use probe::{HttpProbe, Probe};
use report::Reporter;
use schedule::Rng;
use state::RiseFall;

pub(crate) use report::seed;

/// How often the supervisor looks for servers added to or removed from a backend.
const RESCAN: Duration = Duration::from_secs(1);

/// Starts the checker thread if any backend has health checks.
pub(crate) fn start(
    shared: Arc<Shared>,
    reporter: Reporter,
    phase: watch::Receiver<Phase>,
) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    if shared.config.backends.iter().all(|b| b.health.is_none()) {
        return Ok(None);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let thread = std::thread::Builder::new()
        .name("tollgate-health".into())
        .spawn(move || {
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, supervise(shared, reporter, phase));
        })?;
    Ok(Some(thread))
}

/// What every check task of the process shares.
struct Checker {
    shared: Arc<Shared>,
    reporter: Reporter,
    permits: Semaphore,
}

/// Keeps one task per checked server until the generation stops running.
async fn supervise(shared: Arc<Shared>, reporter: Reporter, mut phase: watch::Receiver<Phase>) {
    let permits = Semaphore::new(shared.config.global.max_health_checks as usize);
    let checker = Rc::new(Checker {
        shared,
        reporter,
        permits,
    });
    let mut tasks: HashMap<*const ServerLive, AbortHandle> = HashMap::new();
    let mut versions: Vec<u64> = vec![0; checker.shared.backends.len()];
    loop {
        rescan(&checker, &mut versions, &mut tasks);
        tokio::select! {
            changed = phase.changed() => {
                if changed.is_err() || *phase.borrow() != Phase::Running {
                    break;
                }
            }
            () = tokio::time::sleep(RESCAN) => {}
        }
    }
    for task in tasks.values() {
        task.abort();
    }
}

/// Starts tasks for servers new to their backend's set, ends those of servers gone from it.
fn rescan(checker: &Rc<Checker>, versions: &mut [u64], tasks: &mut HashMap<*const ServerLive, AbortHandle>) {
    let mut changed = false;
    for (i, (backend, seen)) in checker.shared.backends.iter().zip(versions.iter_mut()).enumerate() {
        let Some(health) = checker.shared.config.backends.get(i).and_then(|b| b.health.clone()) else {
            continue;
        };
        if backend.version() == *seen {
            continue;
        }
        changed = true;
        let set = backend.servers();
        *seen = set.version;
        for server in set.servers.iter().filter(|s| s.check.settings.enabled) {
            tasks.entry(Arc::as_ptr(server)).or_insert_with(|| {
                let task = watch_server(
                    Rc::clone(checker),
                    Arc::clone(backend),
                    Arc::clone(server),
                    Arc::clone(&health),
                );
                tokio::task::spawn_local(task).abort_handle()
            });
        }
    }
    if changed {
        let live: std::collections::HashSet<*const ServerLive> = checker
            .shared
            .backends
            .iter()
            .flat_map(|b| b.servers().servers.iter().map(Arc::as_ptr).collect::<Vec<_>>())
            .collect();
        tasks.retain(|ptr, task| {
            let keep = live.contains(ptr);
            if !keep {
                task.abort();
            }
            keep
        });
    }
}

/// The probe for `server`: its address (or `check_port`), its TLS, the HTTP request.
fn probe_for(server: &ServerLive, health: &HealthCheck) -> Probe {
    let settings = server.check.settings;
    let addr = SocketAddr::new(server.address.ip(), settings.port.unwrap_or(server.address.port()));
    let host = match server.tls.as_ref().map(|t| &t.server_name) {
        Some(rustls::pki_types::ServerName::DnsName(name)) => name.as_ref().to_string(),
        _ => server.address.to_string(),
    };
    Probe {
        addr,
        tls: server.tls.clone().filter(|_| settings.tls),
        http: match &health.kind {
            CheckKind::Tcp => None,
            CheckKind::Http(http) => Some(HttpProbe::new(http, &host)),
        },
        send_proxy: settings.send_proxy,
    }
}

/// One server's checks and agent queries, forever (aborted by the supervisor).
async fn watch_server(
    checker: Rc<Checker>,
    backend: Arc<BackendLive>,
    server: Arc<ServerLive>,
    health: Arc<HealthCheck>,
) {
    let probe = probe_for(&server, &health);
    let agent_addr = server
        .check
        .settings
        .agent_port
        .map(|p| SocketAddr::new(server.address.ip(), p));
    // A carried state (reload) starts the machine where the previous generation left it.
    let mut machine = RiseFall::new(server.oper(), health.rise, health.fall);
    let mut agent = AgentState::with_percent(server.agent_percent());
    let mut rng = Rng::seeded(u64::from(server.id.0));
    let start = Instant::now();
    let mut next_check = start + rng.first_offset(health.interval);
    let mut next_agent = agent_addr.map(|_| start + rng.first_offset(health.agent_interval));
    let (mut buf, mut scratch) = (Vec::new(), crate::http::h1::HeadScratch::new());
    loop {
        let due = next_agent.map_or(next_check, |a| a.min(next_check));
        tokio::select! {
            () = tokio::time::sleep_until(due) => {}
            () = server.check.marked_down.notified() => {
                // Live traffic stored `down` already; the machine and the rest follow.
                machine.force_down();
                server.check.note(Outcome::Passive);
                checker.reporter.transition(&backend, &server, &health, (OperState::Down, Outcome::Passive), true);
                continue;
            }
        }
        let now = Instant::now();
        if now >= next_check {
            let outcome = {
                let Ok(_permit) = checker.permits.acquire().await else {
                    return;
                };
                probe.run(health.timeout, &mut buf, &mut scratch).await
            };
            server.check.record(outcome);
            if buf.capacity() > probe::MAX_HEAD * 2 {
                buf = Vec::new();
            }
            machine.observe(outcome.passed());
            settle(&checker, &backend, &server, &health, &machine, &agent, outcome);
            next_check = Instant::now() + rng.next_delay(health.interval, health.jitter_percent);
        }
        if let (Some(addr), Some(at)) = (agent_addr, next_agent)
            && now >= at
        {
            let reply = {
                let Ok(_permit) = checker.permits.acquire().await else {
                    return;
                };
                probe::agent(addr, health.timeout).await
            };
            if let Some(reply) = reply {
                agent.apply(reply);
                checker
                    .reporter
                    .agent_percent(&backend, &server, agent.weight_percent());
                settle(
                    &checker,
                    &backend,
                    &server,
                    &health,
                    &machine,
                    &agent,
                    server.check.last(),
                );
            }
            next_agent = Some(Instant::now() + rng.next_delay(health.agent_interval, health.jitter_percent));
        }
    }
}

/// Brings the live state in line with the checks and the agent: down while the agent holds
/// the server down, else what the rise/fall machine says (`unknown` stays as it is).
fn settle(
    checker: &Checker,
    backend: &BackendLive,
    server: &ServerLive,
    health: &HealthCheck,
    machine: &RiseFall,
    agent: &AgentState,
    last: Outcome,
) {
    let (want, why) = if agent.holds_down() {
        // Shown as the reason for as long as the agent holds it down.
        server.check.note(Outcome::AgentDown);
        (OperState::Down, Outcome::AgentDown)
    } else {
        (machine.state(), last)
    };
    if want != server.oper() && want != OperState::Unknown {
        checker.reporter.transition(backend, server, health, (want, why), false);
    }
}
