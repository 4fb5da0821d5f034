//! One server's live state, shared by every worker thread of the process.
//!
//! Writers: the command applier (admin state, weights; health checks will write the
//! operational state), a connection's owner (its slot on `active`, `queued`), and each
//! worker thread for its own counter cell (single writer: a relaxed load and store, no
//! `lock` prefix, never a line another core writes). Readers: balancers at pick time (one
//! relaxed load per candidate), the runtime API (sums the cells).
//!
//! A slot ([`ServerSlot`]) is taken before connecting and dropped when the server connection
//! closes: it is what enforces `maxconn` and what leastconn-style algorithms read.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::queue::SlotQueue;
use super::{BackendId, ServerId};
use crate::config::Server;
use crate::config::model::ServerTls;
use crate::stats::Counter;

/// What the operator decided (HAProxy's admin state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdminState {
    /// Takes new connections.
    Ready,
    /// No new connections; established ones finish.
    Drain,
    /// No new connections (established ones may be closed with `--kill`).
    Maint,
}

impl AdminState {
    pub fn as_str(self) -> &'static str {
        match self {
            AdminState::Ready => "ready",
            AdminState::Drain => "drain",
            AdminState::Maint => "maint",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ready" => Some(AdminState::Ready),
            "drain" => Some(AdminState::Drain),
            "maint" => Some(AdminState::Maint),
            _ => None,
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            1 => AdminState::Drain,
            2 => AdminState::Maint,
            _ => AdminState::Ready,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            AdminState::Ready => 0,
            AdminState::Drain => 1,
            AdminState::Maint => 2,
        }
    }
}

/// Where a server came from (`show servers`' `SRC`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The config file.
    #[default]
    File,
    /// `ctl add server`.
    Runtime,
    /// DNS discovery (`[[backend.discover]]`).
    Dns,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::File => "file",
            Source::Runtime => "runtime",
            Source::Dns => "dns",
        }
    }
}

/// What the health checks observed (written by them; `unknown` until a check has run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperState {
    Unknown,
    Up,
    Down,
}

impl OperState {
    pub fn as_str(self) -> &'static str {
        match self {
            OperState::Unknown => "unknown",
            OperState::Up => "up",
            OperState::Down => "down",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            1 => OperState::Up,
            2 => OperState::Down,
            _ => OperState::Unknown,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            OperState::Unknown => 0,
            OperState::Up => 1,
            OperState::Down => 2,
        }
    }
}

/// Per-server counters of one worker thread (one cache line group per thread).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct ServerCounters {
    /// Server connections established (fresh, not reused from a pool).
    pub connections: Counter,
    /// HTTP requests sent (TCP mode: sessions relayed).
    pub requests: Counter,
    pub bytes_to_server: Counter,
    pub bytes_to_client: Counter,
    pub connect_failures: Counter,
    /// Attempts moved to another server after this one failed.
    pub retries: Counter,
    /// Responses by status class: 1xx, 2xx, 3xx, 4xx, 5xx, other.
    pub responses: [Counter; 6],
    /// Streams given to this server per second (`show stat`), counted when a slot is taken.
    pub rate: crate::stats::FreqCtr,
}

/// The sum of every thread's `ServerCounters`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterTotals {
    pub connections: u64,
    pub requests: u64,
    pub bytes_to_server: u64,
    pub bytes_to_client: u64,
    pub connect_failures: u64,
    pub retries: u64,
    pub responses_1xx: u64,
    pub responses_2xx: u64,
    pub responses_3xx: u64,
    pub responses_4xx: u64,
    pub responses_5xx: u64,
    pub responses_other: u64,
}

impl CounterTotals {
    /// Adds `o`'s counts to these (a backend's servers, or generations, summed).
    pub fn add(&mut self, o: &CounterTotals) {
        for (t, n) in [
            (&mut self.connections, o.connections),
            (&mut self.requests, o.requests),
            (&mut self.bytes_to_server, o.bytes_to_server),
            (&mut self.bytes_to_client, o.bytes_to_client),
            (&mut self.connect_failures, o.connect_failures),
            (&mut self.retries, o.retries),
            (&mut self.responses_1xx, o.responses_1xx),
            (&mut self.responses_2xx, o.responses_2xx),
            (&mut self.responses_3xx, o.responses_3xx),
            (&mut self.responses_4xx, o.responses_4xx),
            (&mut self.responses_5xx, o.responses_5xx),
            (&mut self.responses_other, o.responses_other),
        ] {
            *t += n;
        }
    }
}

impl ServerCounters {
    pub(crate) const fn new() -> Self {
        ServerCounters {
            connections: Counter::new(),
            requests: Counter::new(),
            bytes_to_server: Counter::new(),
            bytes_to_client: Counter::new(),
            connect_failures: Counter::new(),
            retries: Counter::new(),
            responses: [const { Counter::new() }; 6],
            rate: crate::stats::FreqCtr::new(),
        }
    }

    /// Counts one response status in its class.
    pub(crate) fn response(&self, status: u16) {
        let class = match status {
            100..=599 => usize::from(status / 100) - 1,
            _ => 5,
        };
        if let Some(c) = self.responses.get(class) {
            c.add(1);
        }
    }
}

#[derive(Debug)]
pub(crate) struct ServerLive {
    pub id: ServerId,
    pub backend: BackendId,
    pub backend_name: Arc<str>,
    pub name: Arc<str>,
    /// Where new connections go. A host-named server gets a new `ServerLive` (same id) when
    /// its name resolves to another address (`discover`).
    pub address: SocketAddr,
    /// The host name `address` was resolved from (a host-named or discovered server).
    pub host: Option<Arc<str>>,
    /// False while a host name has never resolved: `address` is a placeholder, the server
    /// is unusable.
    pub resolved: bool,
    pub maxconn: u32,
    pub backup: bool,
    /// TLS to this server (`tls = true`), with its verifier and SNI.
    pub tls: Option<ServerTls>,
    /// HTTP/1.1 or HTTP/2 to this server (`proto`).
    pub proto: crate::config::model::ServerProto,
    /// Connections open with a PROXY protocol header of this version (`send_proxy`).
    pub send_proxy: Option<crate::proxyproto::Version>,
    /// Health checks: settings, last outcome, passive error streak.
    pub check: super::check::CheckLive,
    /// Set once, before the server joins a set; carried by `readdressed`.
    pub source: Source,
    admin: AtomicU8,
    oper: AtomicU8,
    configured_weight: AtomicU32,
    /// What an agent check last reported, percent of the configured weight (100 = as
    /// configured). Written by the health checker only.
    agent_percent: AtomicU32,
    /// Slow start's ramp, per mille of the weight (1000 = fully up). Written by a state
    /// change that starts a ramp and by the slow start ticker.
    ramp_permille: AtomicU32,
    /// How long a ramp lasts (zero = this server does not ramp).
    slowstart: std::time::Duration,
    /// `slowstart::now_ms()` when the current ramp started; 0 = not ramping.
    ramp_since: AtomicU64,
    /// The `ramp_since` last stepped (by the ticker, or by the command applier right after a
    /// state change): a ramp not stepped yet makes balancers rebuild even if its first step
    /// changes no weight.
    ramp_seen: AtomicU64,
    /// `configured × agent % × ramp`, recomputed by whichever of the three changed.
    effective_weight: AtomicU32,
    active: AtomicU32,
    queued: AtomicU32,
    /// Moved by `maint --kill`: sessions on this server that connected under an older
    /// value close.
    kill_epoch: AtomicU64,
    /// Unix seconds of the last admin or operational state change (0 = never).
    last_change: AtomicU64,
    /// One cell per worker thread, indexed by worker id. Shared with the `ServerLive`s that
    /// replace this one on a readdress, so a server's counters outlive its addresses.
    cells: Arc<[ServerCounters]>,
    /// The backend's queue, shared by its servers: a slot freed on any of them goes to the
    /// oldest request waiting, and a state change wakes every waiter to pick again.
    queue: Arc<SlotQueue>,
}

/// A point-in-time view of a server for the runtime API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerView {
    pub id: ServerId,
    pub backend: String,
    pub name: String,
    /// Unspecified (`0.0.0.0:port`) while `resolved` is false.
    pub address: SocketAddr,
    /// The host name the address comes from (host-named and discovered servers).
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default = "resolved_default")]
    pub resolved: bool,
    pub admin: AdminState,
    pub oper: OperState,
    pub weight: u32,
    pub effective_weight: u32,
    pub backup: bool,
    pub maxconn: u32,
    pub active: u32,
    /// Requests waiting for this server in particular (always 0 today: requests queue per
    /// backend, see `backend_queued`).
    pub queued: u32,
    pub last_change: u64,
    pub counters: CounterTotals,
    /// The server's backend: requests waiting for a slot on any of its servers now, and
    /// requests refused so far because `maxqueue` were waiting.
    #[serde(default)]
    pub backend_queued: u32,
    #[serde(default)]
    pub backend_queue_full: u64,
    /// Health checks (absent when nothing checks this server).
    #[serde(default)]
    pub check: Option<super::check::CheckView>,
    /// Where the server came from (older workers: `file`).
    #[serde(default)]
    pub source: Source,
}

fn resolved_default() -> bool {
    true
}

impl ServerLive {
    pub(crate) fn new(server: &Server, backend: (BackendId, &Arc<str>), workers: usize, queue: Arc<SlotQueue>) -> Self {
        ServerLive {
            id: server.id,
            backend: backend.0,
            backend_name: Arc::clone(backend.1),
            name: Arc::from(server.name.as_str()),
            address: server.address,
            host: server.host.as_deref().map(Arc::from),
            // A host name is unresolved until `discover` readdresses the server.
            resolved: server.host.is_none(),
            maxconn: server.maxconn,
            backup: server.backup,
            tls: server.tls.clone(),
            proto: server.proto,
            send_proxy: server.send_proxy,
            check: super::check::CheckLive::new(server.check),
            source: Source::File,
            admin: AtomicU8::new(AdminState::Ready.to_u8()),
            oper: AtomicU8::new(OperState::Unknown.to_u8()),
            configured_weight: AtomicU32::new(server.weight),
            agent_percent: AtomicU32::new(100),
            ramp_permille: AtomicU32::new(1000),
            slowstart: server.slowstart,
            ramp_since: AtomicU64::new(0),
            ramp_seen: AtomicU64::new(0),
            effective_weight: AtomicU32::new(server.weight),
            active: AtomicU32::new(0),
            queued: AtomicU32::new(0),
            kill_epoch: AtomicU64::new(0),
            last_change: AtomicU64::new(0),
            cells: (0..workers.max(1)).map(|_| ServerCounters::default()).collect(),
            queue,
        }
    }

    /// The same server (id, name, settings) at another address, or with another `backup`
    /// flag, for the next set version. Carried over: admin and operational state, configured
    /// weight, agent percentage, slow-start ramp, check counts and last outcome, kill epoch, last change, and the counters
    /// (the cells are shared, so connections still open on this one keep counting into
    /// them). Not carried over: `active` and `queued`, which stay with this `ServerLive`
    /// until its connections close — the new address starts with no connection, and during
    /// the overlap each address is held to `maxconn` separately.
    pub(crate) fn readdressed(&self, address: SocketAddr, backup: bool) -> ServerLive {
        let load = |a: &AtomicU32| AtomicU32::new(a.load(Ordering::Relaxed));
        ServerLive {
            id: self.id,
            backend: self.backend,
            backend_name: Arc::clone(&self.backend_name),
            name: Arc::clone(&self.name),
            address,
            host: self.host.clone(),
            resolved: true,
            maxconn: self.maxconn,
            backup,
            tls: self.tls.clone(),
            proto: self.proto,
            send_proxy: self.send_proxy,
            check: self.check.carried(),
            source: self.source,
            slowstart: self.slowstart,
            ramp_since: AtomicU64::new(self.ramp_since.load(Ordering::Relaxed)),
            ramp_seen: AtomicU64::new(self.ramp_seen.load(Ordering::Relaxed)),
            admin: AtomicU8::new(self.admin.load(Ordering::Relaxed)),
            oper: AtomicU8::new(self.oper.load(Ordering::Relaxed)),
            configured_weight: load(&self.configured_weight),
            agent_percent: load(&self.agent_percent),
            ramp_permille: load(&self.ramp_permille),
            effective_weight: load(&self.effective_weight),
            active: AtomicU32::new(0),
            queued: AtomicU32::new(0),
            kill_epoch: AtomicU64::new(self.kill_epoch.load(Ordering::Relaxed)),
            last_change: AtomicU64::new(self.last_change.load(Ordering::Relaxed)),
            cells: Arc::clone(&self.cells),
            queue: Arc::clone(&self.queue),
        }
    }

    /// The server moved by an operator (`set server address`): `readdressed`, except that
    /// its health starts afresh — `unknown`, no check history, no agent percentage — since
    /// what was observed at the old address says nothing about the new one.
    pub(crate) fn moved(&self, address: SocketAddr) -> ServerLive {
        let mut moved = self.readdressed(address, self.backup);
        moved.check = super::check::CheckLive::new(self.check.settings);
        moved.oper.store(OperState::Unknown.to_u8(), Ordering::Relaxed);
        moved.agent_percent.store(100, Ordering::Relaxed);
        moved.recompute_effective_weight();
        moved.stamp();
        moved
    }

    pub(crate) fn admin(&self) -> AdminState {
        AdminState::from_u8(self.admin.load(Ordering::Relaxed))
    }

    pub(crate) fn oper(&self) -> OperState {
        OperState::from_u8(self.oper.load(Ordering::Relaxed))
    }

    /// Sets the admin state; true if it changed (then requests queued on the backend pick
    /// again: a drained server's waiters move on, a readied one takes them). Back to `ready`
    /// from `drain` or `maint` (and not seen down) starts slow start.
    pub(crate) fn set_admin(&self, state: AdminState) -> bool {
        let old = AdminState::from_u8(self.admin.swap(state.to_u8(), Ordering::AcqRel));
        if old == state {
            return false;
        }
        self.touch();
        if old != AdminState::Ready && self.is_up() {
            self.start_ramp();
        }
        true
    }

    /// Sets the operational state; true if it changed (queued requests pick again, as for
    /// `set_admin`: the health checker needs nothing more to redispatch them). From `down`
    /// to `up` (while `ready`) starts slow start; `unknown` to `up` does not (a process that
    /// starts ramps nothing).
    pub(crate) fn set_oper(&self, state: OperState) -> bool {
        let old = OperState::from_u8(self.oper.swap(state.to_u8(), Ordering::AcqRel));
        if old == state {
            return false;
        }
        self.touch();
        if old == OperState::Down && self.is_up() {
            self.start_ramp();
        }
        true
    }

    /// Ready and not seen down: what "came up" means for slow start (weight aside).
    fn is_up(&self) -> bool {
        self.admin() == AdminState::Ready && self.oper() != OperState::Down
    }

    /// Restarts the ramp from its bottom and wakes the ticker (no-op without `slowstart`).
    fn start_ramp(&self) {
        if self.slowstart.is_zero() {
            return;
        }
        self.ramp_since.store(super::slowstart::now_ms(), Ordering::Release);
        self.set_ramp_permille(super::slowstart::permille(std::time::Duration::ZERO, self.slowstart));
        super::slowstart::wake_ticker();
    }

    /// Moves this server's ramp to `now` (`slowstart::step`); `None` if it does not ramp.
    pub(crate) fn step_ramp(&self, now: u64) -> Option<super::slowstart::RampStep> {
        let since = self.ramp_since.load(Ordering::Acquire);
        if since == 0 {
            return None;
        }
        let fresh = self.ramp_seen.swap(since, Ordering::Relaxed) != since;
        let elapsed = std::time::Duration::from_millis(now.saturating_sub(since));
        let permille = super::slowstart::permille(elapsed, self.slowstart);
        let done = permille >= 1000;
        // A ramp restarted since `since` was read is the newer one's to step.
        if done
            && self
                .ramp_since
                .compare_exchange(since, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return Some(super::slowstart::RampStep {
                changed: fresh,
                next: Some(super::slowstart::MIN_TICK),
            });
        }
        let moved = self.set_ramp_permille(permille);
        Some(super::slowstart::RampStep {
            changed: fresh || moved,
            next: (!done).then(|| super::slowstart::tick(self.slowstart)),
        })
    }

    /// A state change: stamped, and the backend's queued requests pick again.
    fn touch(&self) {
        self.stamp();
        self.queue.wake_all();
    }

    fn stamp(&self) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.last_change.store(now, Ordering::Relaxed);
    }

    pub(crate) fn kill_epoch(&self) -> u64 {
        self.kill_epoch.load(Ordering::Acquire)
    }

    /// Asks every session on this server to close (each worker thread is then told to look).
    pub(crate) fn kill_sessions(&self) {
        self.kill_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// The weight the config (or a runtime command) set.
    pub(crate) fn weight(&self) -> u32 {
        self.configured_weight.load(Ordering::Relaxed)
    }

    /// The weight balancers use now: the configured one scaled by the agent's percentage
    /// and the slow-start ramp.
    pub(crate) fn effective_weight(&self) -> u32 {
        self.effective_weight.load(Ordering::Relaxed)
    }

    /// Sets the configured weight; true if the effective weight changed.
    pub(crate) fn set_weight(&self, weight: u32) -> bool {
        self.configured_weight.store(weight, Ordering::Relaxed);
        self.recompute_effective_weight()
    }

    /// An agent check's `N%`; true if the effective weight changed.
    pub(crate) fn set_agent_percent(&self, percent: u32) -> bool {
        self.agent_percent.store(percent, Ordering::Relaxed);
        self.recompute_effective_weight()
    }

    pub(crate) fn agent_percent(&self) -> u32 {
        self.agent_percent.load(Ordering::Relaxed)
    }

    /// Slow start's ramp in per mille (clamped to 1000); true if the effective weight changed.
    pub(crate) fn set_ramp_permille(&self, permille: u32) -> bool {
        self.ramp_permille.store(permille.min(1000), Ordering::Relaxed);
        self.recompute_effective_weight()
    }

    #[allow(dead_code, reason = "written by health checks and slow start")]
    pub(crate) fn ramp_permille(&self) -> u32 {
        self.ramp_permille.load(Ordering::Relaxed)
    }

    /// Writers of the three factors may race; each recomputes from all three after its own
    /// store, so the last one to finish stores a value that includes every store before it.
    fn recompute_effective_weight(&self) -> bool {
        let weight = effective_weight(
            self.configured_weight.load(Ordering::Relaxed),
            self.agent_percent.load(Ordering::Relaxed),
            self.ramp_permille.load(Ordering::Relaxed),
        );
        let before = self.effective_weight.swap(weight, Ordering::Relaxed);
        // Weight 0 is out of rotation: crossing it changes usability like a state does.
        if (before == 0) != (weight == 0) {
            self.queue.wake_all();
        }
        before != weight
    }

    /// May take new connections: resolved, ready, not seen down, weight above zero.
    pub(crate) fn is_usable(&self) -> bool {
        self.resolved
            && self.admin() == AdminState::Ready
            && self.oper() != OperState::Down
            && self.effective_weight() > 0
    }

    pub(crate) fn active(&self) -> u32 {
        self.active.load(Ordering::Relaxed)
    }

    pub(crate) fn queued(&self) -> u32 {
        self.queued.load(Ordering::Relaxed)
    }

    pub(crate) fn has_room(&self) -> bool {
        self.maxconn == 0 || self.active() < self.maxconn
    }

    /// This worker thread's counter cell (only that thread may write it).
    pub(crate) fn counters(&self, worker: usize) -> &ServerCounters {
        self.cells.get(worker).unwrap_or(&DISCARDED)
    }

    pub(crate) fn totals(&self) -> CounterTotals {
        let mut t = CounterTotals::default();
        for c in self.cells.iter() {
            t.connections += c.connections.get();
            t.requests += c.requests.get();
            t.bytes_to_server += c.bytes_to_server.get();
            t.bytes_to_client += c.bytes_to_client.get();
            t.connect_failures += c.connect_failures.get();
            t.retries += c.retries.get();
            let r = |i: usize| c.responses.get(i).map_or(0, Counter::get);
            t.responses_1xx += r(0);
            t.responses_2xx += r(1);
            t.responses_3xx += r(2);
            t.responses_4xx += r(3);
            t.responses_5xx += r(4);
            t.responses_other += r(5);
        }
        t
    }

    /// Streams per second given to this server now, and its busiest second (the sum of
    /// every thread's, so an upper bound of the process's busiest second).
    pub(crate) fn rates(&self, now_ms: u64) -> (u64, u64) {
        self.cells
            .iter()
            .fold((0, 0), |(r, m), c| (r + c.rate.rate(now_ms), m + c.rate.max(now_ms)))
    }

    pub(crate) fn view(&self) -> ServerView {
        ServerView {
            id: self.id,
            backend: self.backend_name.to_string(),
            name: self.name.to_string(),
            address: self.address,
            host: self.host.as_deref().map(str::to_string),
            resolved: self.resolved,
            admin: self.admin(),
            oper: self.oper(),
            weight: self.weight(),
            effective_weight: self.effective_weight(),
            backup: self.backup,
            maxconn: self.maxconn,
            active: self.active(),
            queued: self.queued(),
            last_change: self.last_change.load(Ordering::Relaxed),
            counters: self.totals(),
            check: self.check.view(self.agent_percent()),
            backend_queued: 0,
            backend_queue_full: 0,
            source: self.source,
        }
    }

    /// Takes a connection slot if the server is below its maxconn.
    pub(crate) fn try_take(self: &Arc<Self>) -> Option<ServerSlot> {
        self.take_count().then(|| ServerSlot {
            server: Arc::clone(self),
        })
    }

    /// Counts one more slot in `active` if below maxconn.
    fn take_count(&self) -> bool {
        if self.maxconn == 0 {
            self.active.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        self.active
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < self.maxconn).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back one slot: to the oldest request queued on the backend if any (the slot
    /// changes hands, `active` stays), else to the server. Servers without a maxconn are
    /// never full, so nobody waits for their slots.
    fn release(self: &Arc<Self>) {
        if self.maxconn == 0 {
            self.active.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        // Nothing new may go to a server that is not usable: its slot just goes back.
        if self.queue.has_waiters() && self.is_usable() && self.queue.hand_over(self) {
            return;
        }
        self.active.fetch_sub(1, Ordering::AcqRel);
        // A request joining the queue meanwhile may have seen this slot still taken; it looks
        // again after joining, this looks again after giving back (see `queue`'s doc).
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.queue.has_waiters() && self.is_usable() && self.take_count() && !self.queue.hand_over(self) {
            self.active.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Counts a request waiting for this server in particular until the guard drops.
    #[expect(
        dead_code,
        reason = "no request is bound to one server yet (every algorithm moves on to a server with room, and \
                  queued requests take the first slot freed on any usable server); a sticky request that \
                  waits for its server will count here"
    )]
    pub(crate) fn enqueue(self: &Arc<Self>) -> QueuedGuard {
        self.queued.fetch_add(1, Ordering::Relaxed);
        QueuedGuard(Arc::clone(self))
    }
}

/// `configured × percent/100 × permille/1000`, rounded up so that a server with any weight
/// left keeps at least 1 (a ramping server must take *some* traffic to be seen working);
/// 0 only when one factor is 0.
pub(crate) fn effective_weight(configured: u32, percent: u32, permille: u32) -> u32 {
    let scaled = u64::from(configured) * u64::from(percent) * u64::from(permille);
    u32::try_from(scaled.div_ceil(100_000)).unwrap_or(u32::MAX)
}

/// Where a worker id past the cells would count (only a misconfigured caller): counted
/// nowhere rather than panicking.
static DISCARDED: ServerCounters = ServerCounters::new();

/// A held connection slot; dropping it releases the slot (to the oldest queued request,
/// if any).
#[derive(Debug)]
pub(crate) struct ServerSlot {
    server: Arc<ServerLive>,
}

impl ServerSlot {
    pub(crate) fn server(&self) -> &Arc<ServerLive> {
        &self.server
    }
}

impl Drop for ServerSlot {
    fn drop(&mut self) {
        self.server.release();
    }
}

/// A slot on its way to a queued request (counted in the server's `active`): the waiter
/// takes it out as a [`ServerSlot`]; if the waiter is gone first, dropping the grant
/// releases the slot like any other, so a hand-over never loses one.
#[derive(Debug)]
pub(crate) struct Grant(Option<Arc<ServerLive>>);

impl Grant {
    pub(super) fn new(server: Arc<ServerLive>) -> Self {
        Grant(Some(server))
    }

    /// The slot, now the waiter's.
    pub(crate) fn into_slot(mut self) -> Option<ServerSlot> {
        self.0.take().map(|server| ServerSlot { server })
    }

    /// Forgets the slot without releasing it: the caller still holds it.
    pub(super) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if let Some(server) = self.0.take() {
            server.release();
        }
    }
}

/// A request counted in its server's `queued` while it waits.
#[derive(Debug)]
pub(crate) struct QueuedGuard(Arc<ServerLive>);

impl Drop for QueuedGuard {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::effective_weight;

    #[test]
    fn effective_weight_scales_and_never_rounds_a_live_server_to_zero() {
        assert_eq!(effective_weight(10, 100, 1000), 10);
        assert_eq!(effective_weight(10, 50, 1000), 5);
        assert_eq!(effective_weight(10, 100, 500), 5);
        assert_eq!(effective_weight(10, 75, 1), 1);
        assert_eq!(effective_weight(256, 100, 1000), 256);
        assert_eq!(effective_weight(0, 100, 1000), 0);
        assert_eq!(effective_weight(10, 0, 1000), 0);
        assert_eq!(effective_weight(10, 100, 0), 0);
    }
}
