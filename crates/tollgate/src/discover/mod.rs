//! Servers from DNS: host-named server addresses re-resolved every
//! `resolvers.resolve_interval`, and backends filled from SRV records
//! (`[[backend.discover]]`). One thread per process (`tollgate-dns`, its own current_thread
//! runtime), never one per worker thread; nothing here is on the data path.
//!
//! - [`resolve`]: the hickory resolver and the two lookups.
//! - [`plan`]: sans-io, answers + current set -> the steps of the next set.
//!
//! Invariants:
//! - every change goes through `BackendLive::update` (a new set version; each worker thread
//!   rebuilds its balancer at its next pick). A readdressed server is a new `ServerLive` with
//!   the same id, carrying over its state, weights and counters (`ServerLive::readdressed`);
//!   connections in flight to the old address finish, and the pool reuses no idle one to it.
//! - a failed lookup changes nothing (the last good answer stays), is counted
//!   (`dns_failures`) and logged once per change of outcome, not at every interval.
//! - discovered servers get ids from [`DISCOVERED_IDS`] upwards, allocated here: the master's
//!   id table hands out ids from 0 and would need 2^31 names to reach them. Within a process
//!   an id is never reused for another server: a name that leaves and comes back gets its old
//!   id again. Across worker processes (a reload) a discovered server may get another id.
//! - at start (`start`), the first round runs before the workers serve (bounded by the
//!   resolver's timeouts): a name that does not resolve then leaves its server unresolved
//!   (unusable, `unresolved` in `show servers`) instead of refusing to start (HAProxy's
//!   `init-addr none`); later rounds resolve it.

pub(crate) mod plan;
pub(crate) mod resolve;

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::TokioResolver;
use tokio::sync::oneshot;

use crate::live::queue::SlotQueue;

use self::plan::{Answers, SrvRecord, Step, Wanted};
use self::resolve::Failure;
use crate::config::Server;
use crate::config::model::Discover;
use crate::ctx::Shared;
use crate::ctx::inbox::{Message, Sender};
use crate::live::server::ServerLive;
use crate::live::{IdMap, ServerId};

/// The first id of servers discovered at run time.
pub(crate) const DISCOVERED_IDS: u32 = 1 << 31;

/// Stops the discovery thread when dropped (and waits for it: at most one lookup's timeout).
pub(crate) type Handle = crate::background::Stopper<oneshot::Sender<()>>;

/// Starts discovery when any backend uses DNS, and returns once the first round is done
/// (or took longer than its bound: its servers then start unresolved and resolve later).
/// `inboxes`: every worker thread's, to drop idle connections to removed servers.
pub(crate) fn start(shared: &Arc<Shared>, inboxes: Vec<Sender>) -> std::io::Result<Option<Handle>> {
    let config = &shared.config;
    if !config.backends.iter().any(|b| b.uses_dns()) {
        return Ok(None);
    }
    let resolvers = config.resolvers.clone();
    // One lookup's worst case is timeout × attempts per nameserver; a round runs SRV then
    // address lookups, each set concurrently.
    let first_round = resolvers.timeout * resolvers.attempts * 2 * (resolvers.nameservers.len().max(1) as u32)
        + Duration::from_secs(1);
    let (stop, stopped) = oneshot::channel();
    let (ready, first_done) = std::sync::mpsc::channel();
    let mut discovery = Discovery::new(Arc::clone(shared), inboxes);
    let thread = std::thread::Builder::new().name("tollgate-dns".into()).spawn(move || {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!(error = %e, "DNS discovery cannot start its runtime");
                return;
            }
        };
        rt.block_on(discovery.run(resolvers, ready, stopped));
    })?;
    match first_done.recv_timeout(first_round) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => tracing::warn!(
            "the first DNS resolution did not finish within {first_round:?}: servers without an answer start unresolved"
        ),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            tracing::error!("DNS discovery stopped before its first round: host-named servers stay unresolved");
        }
    }
    Ok(Some(Handle::new(stop, thread)))
}

/// One backend's DNS work.
struct BackendDns {
    /// Index in `config.backends` and `shared.backends`.
    index: usize,
    /// Host names of its configured servers.
    hosts: Vec<String>,
    discover: Vec<Discover>,
    /// What a discovered server takes from its backend: slow start, and checks when the
    /// backend has `[backend.health]` (on the server's own port, no agent, no TLS: a
    /// discovered server has none of those settings).
    slowstart: std::time::Duration,
    check: crate::config::health::ServerCheck,
    /// Discovered servers: the discover entry each came from.
    origin: IdMap<ServerId, usize>,
    /// Discovered names and their ids (kept after a removal: the id comes back with the name).
    ids: HashMap<String, ServerId>,
}

struct Discovery {
    shared: Arc<Shared>,
    inboxes: Vec<Sender>,
    backends: Vec<BackendDns>,
    next_id: u32,
    /// Names whose last lookup failed, and how (logged when this changes).
    failing: HashMap<String, &'static str>,
}

impl Discovery {
    fn new(shared: Arc<Shared>, inboxes: Vec<Sender>) -> Self {
        let backends = shared
            .config
            .backends
            .iter()
            .enumerate()
            .filter(|(_, b)| b.uses_dns())
            .map(|(index, b)| {
                let mut hosts: Vec<String> = b.servers.iter().filter_map(|s| s.host.clone()).collect();
                hosts.sort();
                hosts.dedup();
                BackendDns {
                    index,
                    hosts,
                    discover: b.discover.clone(),
                    slowstart: b.slowstart,
                    check: crate::config::health::ServerCheck {
                        enabled: b.health.is_some(),
                        error_limit: b.health.as_ref().map_or(0, |h| h.error_limit),
                        ..Default::default()
                    },
                    origin: IdMap::default(),
                    ids: HashMap::new(),
                }
            })
            .collect();
        Discovery {
            shared,
            inboxes,
            backends,
            next_id: DISCOVERED_IDS,
            failing: HashMap::new(),
        }
    }

    /// The first round, `ready`, then a round every interval until `stop` fires or drops.
    async fn run(
        &mut self,
        config: crate::config::model::Resolvers,
        ready: std::sync::mpsc::Sender<()>,
        mut stop: oneshot::Receiver<()>,
    ) {
        let mut resolver: Option<TokioResolver> = None;
        let mut ready = Some(ready);
        let mut ticks = tokio::time::interval(config.resolve_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = ticks.tick() => {}
            }
            if resolver.is_none() {
                resolver = match resolve::build(&config) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        self.observe(
                            "[resolvers]",
                            Err(&Failure {
                                kind: "config",
                                detail: e,
                            }),
                        );
                        None
                    }
                };
            }
            if let Some(r) = &resolver {
                r.clear_cache();
                tokio::select! {
                    _ = &mut stop => return,
                    () = self.round(r) => {}
                }
            }
            // The first round is over (answered or failed): the workers may serve.
            if let Some(ready) = ready.take() {
                let _ = ready.send(());
            }
        }
    }

    /// Asks every name once, then updates every backend whose answer moved.
    async fn round(&mut self, resolver: &TokioResolver) {
        let srv_names: HashSet<String> = self
            .backends
            .iter()
            .flat_map(|b| b.discover.iter().map(|d| d.srv.clone()))
            .collect();
        let srv_answers = lookup_all(resolver, srv_names, resolve::srv).await;
        let mut names: HashSet<String> = self.backends.iter().flat_map(|b| b.hosts.iter().cloned()).collect();
        for records in srv_answers.values().filter_map(|r| r.as_ref().ok()) {
            names.extend(records.iter().map(|r| r.target.clone()));
        }
        let ip_answers = lookup_all(resolver, names, resolve::addresses).await;
        for (name, answer) in &srv_answers {
            self.observe(name, answer.as_ref().map(|_| ()));
        }
        for (name, answer) in &ip_answers {
            self.observe(name, answer.as_ref().map(|_| ()));
        }
        for i in 0..self.backends.len() {
            self.update(i, &srv_answers, &ip_answers);
        }
    }

    /// Counts a failure, and logs when a name's outcome changes.
    fn observe(&mut self, name: &str, outcome: Result<(), &Failure>) {
        match outcome {
            Err(f) => {
                if let Some(stats) = self.shared.stats.first() {
                    stats.dns_failures.add(1);
                }
                if self.failing.get(name) != Some(&f.kind) {
                    tracing::warn!(
                        name,
                        reason = f.kind,
                        "DNS resolution failed, keeping the last good answer: {}",
                        f.detail
                    );
                    self.failing.insert(name.to_string(), f.kind);
                }
            }
            Ok(()) => {
                if self.failing.remove(name).is_some() {
                    tracing::info!(name, "DNS resolution works again");
                }
            }
        }
    }

    /// Publishes backend `i`'s next set if the answers change it.
    fn update(
        &mut self,
        i: usize,
        srv_answers: &HashMap<String, Result<Vec<SrvRecord>, Failure>>,
        ip_answers: &HashMap<String, Result<Vec<IpAddr>, Failure>>,
    ) {
        let Some(b) = self.backends.get_mut(i) else {
            return;
        };
        let Some(live) = self.shared.backends.get(b.index).cloned() else {
            return;
        };
        let current = live.servers();
        let answers = answers_for(b, &current.servers, srv_answers, ip_answers);
        let origin = |id: ServerId| b.origin.get(&id).copied();
        if plan::steps(&current.servers, &origin, &answers).is_empty() {
            return;
        }
        let mut next = NextSet {
            backend: (spec_backend(&self.shared, b.index), Arc::clone(&live.name)),
            b,
            next_id: &mut self.next_id,
            removed: Vec::new(),
        };
        live.update(|servers, notify, workers| {
            let origin = |id: ServerId| next.b.origin.get(&id).copied();
            let steps = plan::steps(servers, &origin, &answers);
            if steps.is_empty() {
                return servers.to_vec();
            }
            let mut out = Vec::with_capacity(steps.len());
            for step in steps {
                next.apply(step, &mut out, (notify, workers));
            }
            out
        });
        let removed = next.removed;
        if let Some(stats) = self.shared.stats.first() {
            stats.dns_updates.add(1);
        }
        for id in removed {
            self.forget(id);
        }
    }

    /// Every worker thread drops its idle connections to a removed server (nothing picks it
    /// again, so its pool list would otherwise keep them open).
    fn forget(&self, server: ServerId) {
        let (done, _) = std::sync::mpsc::channel();
        for inbox in &self.inboxes {
            let _ = inbox.send(Message::Kill {
                server,
                done: done.clone(),
            });
        }
    }
}

/// Builds a backend's next set from its steps (inside `BackendLive::update`).
struct NextSet<'a> {
    backend: (crate::live::BackendId, Arc<str>),
    b: &'a mut BackendDns,
    next_id: &'a mut u32,
    /// Servers that left the set: their idle pooled connections are dropped afterwards.
    removed: Vec<ServerId>,
}

impl NextSet<'_> {
    /// `new`: what a new `ServerLive` needs (the backend's notify, the worker count).
    fn apply(&mut self, step: Step<'_>, out: &mut Vec<Arc<ServerLive>>, new: (&Arc<SlotQueue>, usize)) {
        let backend = &*self.backend.1;
        match step {
            Step::Keep { server, weight } => {
                if let Some(w) = weight {
                    server.set_weight(w);
                }
                out.push(Arc::clone(server));
            }
            Step::Move {
                server,
                address,
                backup,
                weight,
            } => {
                if server.resolved {
                    tracing::info!(backend, server = %server.name, %address, backup, "DNS: server readdressed");
                } else {
                    tracing::info!(backend, server = %server.name, %address, "DNS: server resolved");
                }
                let moved = server.readdressed(address, backup);
                if let Some(w) = weight {
                    moved.set_weight(w);
                }
                out.push(Arc::new(moved));
            }
            Step::Remove(server) => {
                tracing::info!(backend, server = %server.name, "DNS: server removed");
                self.removed.push(server.id);
            }
            Step::Add { discover, wanted } => {
                tracing::info!(
                    backend,
                    server = %wanted.name,
                    address = %wanted.address,
                    backup = wanted.backup,
                    weight = wanted.weight,
                    "DNS: server added"
                );
                out.push(Arc::new(self.add(discover, &wanted, new)));
            }
        }
    }

    /// A discovered server: its name's id (a new one the first time), resolved at once.
    fn add(&mut self, discover: usize, wanted: &Wanted, (queue, workers): (&Arc<SlotQueue>, usize)) -> ServerLive {
        let next_id = &mut *self.next_id;
        let id = *self.b.ids.entry(wanted.name.clone()).or_insert_with(|| {
            let id = ServerId(*next_id);
            *next_id = next_id.saturating_add(1);
            id
        });
        self.b.origin.insert(id, discover);
        let maxconn = self.b.discover.get(discover).map_or(0, |d| d.maxconn);
        let spec = discovered_spec(id, wanted, maxconn, (self.b.slowstart, self.b.check));
        let backend = (self.backend.0, &self.backend.1);
        let mut live =
            ServerLive::new(&spec, backend, workers, Arc::clone(queue)).readdressed(wanted.address, wanted.backup);
        live.source = crate::live::server::Source::Dns;
        live
    }
}

fn spec_backend(shared: &Shared, index: usize) -> crate::live::BackendId {
    shared.config.backends.get(index).map(|b| b.id).unwrap_or_default()
}

/// The config a discovered server would have had (it becomes a `ServerLive` at once).
fn discovered_spec(
    id: ServerId,
    wanted: &Wanted,
    maxconn: u32,
    (slowstart, check): (std::time::Duration, crate::config::health::ServerCheck),
) -> Server {
    Server {
        id,
        name: wanted.name.clone(),
        address: wanted.address,
        host: Some(wanted.target.clone()),
        weight: wanted.weight,
        maxconn,
        backup: wanted.backup,
        tls: None,
        proto: Default::default(),
        slowstart,
        check,
        send_proxy: None,
    }
}

/// Backend `b`'s share of a round's answers.
fn answers_for(
    b: &BackendDns,
    current: &[Arc<ServerLive>],
    srv_answers: &HashMap<String, Result<Vec<SrvRecord>, Failure>>,
    ip_answers: &HashMap<String, Result<Vec<IpAddr>, Failure>>,
) -> Answers {
    let ips = |name: &str| ip_answers.get(name).and_then(|r| r.as_ref().ok()).cloned();
    let last = |name: &str| {
        current
            .iter()
            .find(|s| &*s.name == name && s.resolved)
            .map(|s| s.address)
    };
    Answers {
        hosts: b.hosts.iter().map(|h| (h.clone(), ips(h))).collect(),
        srv: b
            .discover
            .iter()
            .map(|d| {
                let records = srv_answers.get(&d.srv)?.as_ref().ok()?;
                Some(plan::wanted(records, &ips, &last))
            })
            .collect(),
    }
}

/// Looks every name up at once.
async fn lookup_all<T, F, Fut>(
    resolver: &TokioResolver,
    names: HashSet<String>,
    lookup: F,
) -> HashMap<String, Result<T, Failure>>
where
    T: Send + 'static,
    F: Fn(TokioResolver, String) -> Fut,
    Fut: std::future::Future<Output = Result<T, Failure>> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    for name in names {
        let query = lookup(resolver.clone(), name.clone());
        set.spawn(async move { (name, query.await) });
    }
    let mut out = HashMap::new();
    while let Some(joined) = set.join_next().await {
        if let Ok((name, answer)) = joined {
            out.insert(name, answer);
        }
    }
    out
}
