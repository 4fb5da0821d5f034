//! Metrics the worker threads record per stream and the runtime API reads at scrape time.
//!
//! Owns: the per-thread cells that have no other home — per-frontend stream and byte
//! counters and per-backend timing histograms (connect, response, total) — and the plain,
//! serializable snapshot a worker process answers a `metrics` command with. Per-server
//! counters live with the server (`live::server`), process counters in `stats`.
//!
//! Invariants: one [`ThreadCells`] per worker thread, indexed by worker id, written only by
//! that thread (a relaxed load and store per counter, no `lock` prefix) and each cell type
//! aligned to 128 bytes so no two threads ever write one cache line. Recording a stream
//! allocates nothing and takes no lock; readers sum every thread's cells at scrape time.
//! Histogram buckets are fixed at compile time ([`BUCKETS_US`]) so every thread, process and
//! generation reports the same `le` bounds.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::live::server::ServerView;
use crate::stats::Counter;

/// Upper bounds of the histogram buckets, in microseconds (a last `+Inf` bucket follows):
/// 0.5 ms to 30 s, roughly ×2.5 per step, as Prometheus' default latency buckets.
pub(crate) const BUCKETS_US: [u64; 15] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000,
    10_000_000, 30_000_000,
];
const SLOTS: usize = BUCKETS_US.len() + 1;

/// One thread's histogram of durations: a count per bucket (not cumulative) and the sum.
#[derive(Debug, Default)]
pub(crate) struct HistogramCell {
    buckets: [Counter; SLOTS],
    sum_us: Counter,
}

impl HistogramCell {
    /// Only the owning thread may call this.
    #[inline]
    pub(crate) fn observe(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let slot = BUCKETS_US.partition_point(|&bound| bound < us);
        if let Some(c) = self.buckets.get(slot) {
            c.add(1);
        }
        self.sum_us.add(us);
    }

    fn add_to(&self, out: &mut HistogramSnapshot) {
        if out.buckets.len() < SLOTS {
            out.buckets.resize(SLOTS, 0);
        }
        for (total, c) in out.buckets.iter_mut().zip(&self.buckets) {
            *total += c.get();
        }
        out.sum_us += self.sum_us.get();
    }
}

/// Status classes, in the order of a [`Responses`] row: `1xx` to `5xx`, then any other.
pub(crate) const STATUS_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"];
/// Who made a response: its server, or tollgate itself (an error it answered, a `return`,
/// a redirect, a refusal).
pub(crate) const RESPONSE_SOURCES: [&str; 2] = ["server", "proxy"];
const RESPONSE_SLOTS: usize = STATUS_CLASSES.len() * RESPONSE_SOURCES.len();

/// Responses by status class and by who made them: slot `source * 6 + class`.
#[derive(Debug, Default)]
pub(crate) struct Responses([Counter; RESPONSE_SLOTS]);

impl Responses {
    /// Only the owning thread may call this. Status 0 (no response) counts nothing.
    #[inline]
    fn count(&self, status: u16, by_proxy: bool) {
        if status == 0 {
            return;
        }
        let class = match status {
            100..=599 => usize::from(status / 100 - 1),
            _ => STATUS_CLASSES.len() - 1,
        };
        if let Some(c) = self.0.get(usize::from(by_proxy) * STATUS_CLASSES.len() + class) {
            c.add(1);
        }
    }

    fn add_to(&self, out: &mut Vec<u64>) {
        out.resize(RESPONSE_SLOTS, 0);
        for (total, c) in out.iter_mut().zip(&self.0) {
            *total += c.get();
        }
    }
}

/// One thread's counters of one frontend.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct FrontendCell {
    /// Streams ended: HTTP requests, TCP sessions.
    pub streams: Counter,
    /// Bytes from clients forwarded to servers, and bytes written to clients.
    pub bytes_in: Counter,
    pub bytes_out: Counter,
    /// Connections closed by the frontend's `allow` / `deny` lists (at accept) or by a TCP
    /// `deny = true` route.
    pub conn_denied: Counter,
    responses: Responses,
    /// Request head (TCP: accept) to the end of the stream.
    duration: HistogramCell,
    /// HTTP/2 streams opened by clients; streams the client reset (RST_STREAM) and streams
    /// refused as malformed (a stream error).
    pub h2_streams: Counter,
    pub h2_client_resets: Counter,
    pub h2_stream_errors: Counter,
    /// HTTP/3 (`[frontend.quic]`): see `quic_frontend_counters!`.
    pub quic_connections: Counter,
    pub h3_streams: Counter,
    pub quic_handshake_failures: Counter,
    pub quic_refused: Counter,
    pub quic_retries: Counter,
    pub quic_datagrams_in: Counter,
    pub quic_datagrams_out: Counter,
    pub quic_lost_packets: Counter,
}

/// One thread's counters of one route (`[[frontend.route]]`).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct RouteCell {
    requests: Counter,
    /// Requests its `auth` refused (401/403, or the forward auth server's answer).
    auth_refused: Counter,
    responses: Responses,
    duration: HistogramCell,
}

/// One thread's timing histograms of one backend.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct BackendCell {
    /// Streams that reached the backend (a server chosen or tried).
    pub requests: Counter,
    pub connect: HistogramCell,
    pub response: HistogramCell,
    pub total: HistogramCell,
}

/// What one worker thread records, by frontend and backend index (config order; a
/// generation's frontends and backends never change).
#[derive(Debug)]
pub(crate) struct ThreadCells {
    pub frontends: Box<[FrontendCell]>,
    pub backends: Box<[BackendCell]>,
    /// Every frontend's routes, one after the other: frontend i's start at `route_base[i]`.
    routes: Box<[RouteCell]>,
    route_base: Box<[usize]>,
}

/// How long the steps of one stream took, as the sink measured them (`None`: not reached).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamTimes {
    pub connect: Option<Duration>,
    pub response: Option<Duration>,
    pub total: Duration,
}

/// One ended stream, as the metrics count it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ended {
    pub frontend: usize,
    /// The route that decided, by index in the frontend's routes.
    pub route: Option<u16>,
    pub backend: Option<usize>,
    /// Bytes in (client to server) and out (to the client).
    pub bytes: (u64, u64),
    /// The status the client got (0: none) and whether tollgate made that response.
    pub status: u16,
    pub by_proxy: bool,
    pub times: StreamTimes,
}

impl ThreadCells {
    /// Cells for `routes[i]` routes of each frontend i, and `backends` backends.
    pub(crate) fn new(routes: &[usize], backends: usize) -> Self {
        let mut route_base = Vec::with_capacity(routes.len());
        let mut total = 0;
        for n in routes {
            route_base.push(total);
            total += n;
        }
        ThreadCells {
            frontends: routes.iter().map(|_| FrontendCell::default()).collect(),
            backends: (0..backends).map(|_| BackendCell::default()).collect(),
            routes: (0..total).map(|_| RouteCell::default()).collect(),
            route_base: route_base.into_boxed_slice(),
        }
    }

    pub(crate) fn frontend(&self, frontend: usize) -> Option<&FrontendCell> {
        self.frontends.get(frontend)
    }

    fn route(&self, frontend: usize, route: u16) -> Option<&RouteCell> {
        self.routes.get(self.route_base.get(frontend)? + usize::from(route))
    }

    /// A request of `frontend`'s route `route` its `auth` refused.
    pub(crate) fn auth_refused(&self, frontend: usize, route: u16) {
        if let Some(r) = self.route(frontend, route) {
            r.auth_refused.add(1);
        }
    }

    /// One ended stream: its frontend's (and route's, and backend's, if it had them).
    #[inline]
    pub(crate) fn stream(&self, e: &Ended) {
        let times = &e.times;
        if let Some(f) = self.frontends.get(e.frontend) {
            f.streams.add(1);
            f.bytes_in.add(e.bytes.0);
            f.bytes_out.add(e.bytes.1);
            f.responses.count(e.status, e.by_proxy);
            f.duration.observe(times.total);
        }
        if let Some(r) = e.route.and_then(|r| self.route(e.frontend, r)) {
            r.requests.add(1);
            r.responses.count(e.status, e.by_proxy);
            r.duration.observe(times.total);
        }
        if let Some(b) = e.backend.and_then(|b| self.backends.get(b)) {
            b.requests.add(1);
            if let Some(d) = times.connect {
                b.connect.observe(d);
            }
            if let Some(d) = times.response {
                b.response.observe(d);
            }
            b.total.observe(times.total);
        }
    }
}

/// A histogram summed over threads: per-bucket counts (not cumulative; the last is `+Inf`)
/// and the sum of the observations in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramSnapshot {
    #[serde(default)]
    pub buckets: Vec<u64>,
    #[serde(default)]
    pub sum_us: u64,
}

impl HistogramSnapshot {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// A budget: its limit, how much is taken now, how many times a taker had to wait
/// (`parked`), and how many wait now. `None`: that budget has no such figure.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetMetrics {
    pub name: String,
    pub limit: u64,
    #[serde(default)]
    pub in_use: Option<u64>,
    #[serde(default)]
    pub parked: Option<u64>,
    #[serde(default)]
    pub waiting: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontendMetrics {
    pub name: String,
    pub streams: u64,
    /// Responses by status class and source: `responses[source * 6 + class]`
    /// ([`STATUS_CLASSES`], [`RESPONSE_SOURCES`]).
    #[serde(default)]
    pub responses: Vec<u64>,
    /// Request head (TCP: accept) to the end of each stream.
    #[serde(default)]
    pub duration: HistogramSnapshot,
    /// HTTP/2: streams clients opened, reset themselves, and had refused as malformed.
    #[serde(default)]
    pub h2_streams: u64,
    #[serde(default)]
    pub h2_client_resets: u64,
    #[serde(default)]
    pub h2_stream_errors: u64,
    /// HTTP/3: connections, streams, handshakes failed, connections refused and retried,
    /// datagrams in and out, packets lost.
    #[serde(default)]
    pub quic_connections: u64,
    #[serde(default)]
    pub h3_streams: u64,
    #[serde(default)]
    pub quic_handshake_failures: u64,
    #[serde(default)]
    pub quic_refused: u64,
    #[serde(default)]
    pub quic_retries: u64,
    #[serde(default)]
    pub quic_datagrams_in: u64,
    #[serde(default)]
    pub quic_datagrams_out: u64,
    #[serde(default)]
    pub quic_lost_packets: u64,

    /// The frontend's routes, in config order.
    #[serde(default)]
    pub routes: Vec<RouteMetrics>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// The frontend's `maxconn` (0: none) and its open connections now: those holding its
    /// permits with a `maxconn`, its open sessions without one.
    #[serde(default)]
    pub maxconn: u32,
    #[serde(default)]
    pub connections: Option<u64>,
    /// An operator disabled it (`ctl disable frontend`): not accepting, still serving.
    #[serde(default)]
    pub disabled: bool,
    /// Connections closed by `allow` / `deny` or a TCP `deny = true` route.
    #[serde(default)]
    pub conn_denied: u64,
    /// TLS frontends: handshakes served a stapled OCSP response, OCSP responses fetched and
    /// accepted, fetches failed (`None`: not a TLS frontend).
    #[serde(default)]
    pub ocsp_staples: Option<u64>,
    #[serde(default)]
    pub ocsp_fetch_ok: Option<u64>,
    #[serde(default)]
    pub ocsp_fetch_failed: Option<u64>,
}

/// One route's streams: how many, their responses (as a frontend's), their durations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteMetrics {
    pub name: String,
    pub requests: u64,
    #[serde(default)]
    pub auth_refused: u64,
    /// With `auth.jwt` from a `jwks_url`: its refresher's figures.
    #[serde(default)]
    pub jwks: Option<JwksMetrics>,
    #[serde(default)]
    pub responses: Vec<u64>,
    #[serde(default)]
    pub duration: HistogramSnapshot,
}

/// A route's JWKS refresher (`auth.jwt.jwks_url`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JwksMetrics {
    pub fetches_ok: u64,
    pub fetches_failed: u64,
    /// Early fetches tokens with an unknown `kid` asked for.
    pub early_requests: u64,
    /// Unix seconds of the last good fetch (0: none yet).
    pub last_ok_unix: u64,
    /// Keys in the set in use.
    pub keys: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendMetrics {
    pub name: String,
    /// Streams that reached it (a server chosen or tried).
    #[serde(default)]
    pub requests: u64,
    /// Requests waiting for a slot on one of its servers now.
    #[serde(default)]
    pub queued: u32,
    #[serde(default)]
    pub connect: HistogramSnapshot,
    #[serde(default)]
    pub response: HistogramSnapshot,
    #[serde(default)]
    pub total: HistogramSnapshot,
}

/// One stick table (`[[frontend.limit]]`): its counters since the generation started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitMetrics {
    pub name: String,
    pub frontend: String,
    /// Entries held now, and the most it may hold (`size`).
    pub entries: u64,
    pub size: u64,
    /// Requests (TCP: connections) refused, and of those, tarpitted.
    pub denied: u64,
    pub tarpitted: u64,
    /// Entries pushed out by a full table, and dropped after `expire` idle.
    pub evicted: u64,
    pub expired: u64,
    /// New keys admitted without an entry: every candidate for eviction had requests in flight.
    #[serde(default)]
    pub untracked: u64,
}

/// Everything one worker process reports at a scrape (fields are additive).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    /// Worker threads.
    #[serde(default)]
    pub workers: u32,
    /// Every process counter (`stats::Snapshot::fields`), summed over threads.
    #[serde(default)]
    pub counters: Vec<(String, u64)>,
    #[serde(default)]
    pub budgets: Vec<BudgetMetrics>,
    #[serde(default)]
    pub frontends: Vec<FrontendMetrics>,
    #[serde(default)]
    pub backends: Vec<BackendMetrics>,
    #[serde(default)]
    pub servers: Vec<ServerView>,
    /// Every TLS frontend's certificates.
    #[serde(default)]
    pub certs: Vec<CertMetrics>,
    /// Every stick table, in frontend then limit order.
    #[serde(default)]
    pub limits: Vec<LimitMetrics>,
}

/// One certificate's expiry, and its frontend's OCSP counters (repeated per certificate of
/// the frontend: the counters are the store's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertMetrics {
    pub frontend: String,
    /// Its first name (`*.a.example` for a wildcard), the serial (hex), where it came from.
    pub name: String,
    pub serial: String,
    pub source: String,
    /// Unix seconds.
    pub not_after: i64,
}

impl FrontendCell {
    /// This thread's figures added to `m` (the frontend's, and its routes').
    pub(crate) fn add_to(&self, m: &mut FrontendMetrics) {
        m.streams += self.streams.get();
        m.bytes_in += self.bytes_in.get();
        m.bytes_out += self.bytes_out.get();
        m.conn_denied += self.conn_denied.get();
        m.h2_streams += self.h2_streams.get();
        m.h2_client_resets += self.h2_client_resets.get();
        m.h2_stream_errors += self.h2_stream_errors.get();
        m.quic_connections += self.quic_connections.get();
        m.h3_streams += self.h3_streams.get();
        m.quic_handshake_failures += self.quic_handshake_failures.get();
        m.quic_refused += self.quic_refused.get();
        m.quic_retries += self.quic_retries.get();
        m.quic_datagrams_in += self.quic_datagrams_in.get();
        m.quic_datagrams_out += self.quic_datagrams_out.get();
        m.quic_lost_packets += self.quic_lost_packets.get();
        self.responses.add_to(&mut m.responses);
        self.duration.add_to(&mut m.duration);
    }
}

impl ThreadCells {
    /// This thread's figures of `frontend`'s route `route` added to `m`.
    pub(crate) fn add_route_to(&self, frontend: usize, route: u16, m: &mut RouteMetrics) {
        if let Some(r) = self.route(frontend, route) {
            m.requests += r.requests.get();
            m.auth_refused += r.auth_refused.get();
            r.responses.add_to(&mut m.responses);
            r.duration.add_to(&mut m.duration);
        }
    }
}

/// Process counters (`stats::Snapshot::fields`) that are gauges: the rest count up.
pub(crate) const PROCESS_GAUGES: &[&str] = &[
    "sessions_active",
    "sessions_parked",
    "buffers_allocated",
    "buffers_in_use",
    "buffer_waiters",
    "tls_handshakes_active",
    "tls_hello_waiting",
    "pipes_in_use",
    "pipes_pooled",
    "compressors_in_use",
    "auth_verifying",
    "shared_redis_down",
];

impl HistogramSnapshot {
    fn add(&mut self, other: &HistogramSnapshot) {
        if self.buckets.len() < other.buckets.len() {
            self.buckets.resize(other.buckets.len(), 0);
        }
        for (total, n) in self.buckets.iter_mut().zip(&other.buckets) {
            *total += n;
        }
        self.sum_us += other.sum_us;
    }
}

fn add_rows(total: &mut Vec<u64>, other: &[u64]) {
    if total.len() < other.len() {
        total.resize(other.len(), 0);
    }
    for (t, n) in total.iter_mut().zip(other) {
        *t += n;
    }
}

fn add_opt(total: &mut Option<u64>, other: Option<u64>) {
    if let Some(n) = other {
        *total = Some(total.unwrap_or(0) + n);
    }
}

impl MetricsSnapshot {
    /// Adds `other`, one generation's figures, to these: every counter, series matched by
    /// name. A `live` generation's gauges are added too (connections open now, in every
    /// live generation) and its settings and states (limits, weights, server states) taken,
    /// so generations absorbed oldest first leave the newest's; a retired generation (one
    /// that exited) adds its counters only.
    pub fn absorb(&mut self, other: &MetricsSnapshot, live: bool) {
        if live {
            self.workers = other.workers;
            self.certs.clone_from(&other.certs);
        }
        for (name, v) in &other.counters {
            if !live && PROCESS_GAUGES.contains(&name.as_str()) {
                continue;
            }
            match self.counters.iter_mut().find(|(n, _)| n == name) {
                Some((_, total)) => *total += v,
                None => self.counters.push((name.clone(), *v)),
            }
        }
        for b in &other.budgets {
            let i = match self.budgets.iter().position(|x| x.name == b.name) {
                Some(i) => i,
                None => {
                    self.budgets.push(BudgetMetrics {
                        name: b.name.clone(),
                        limit: b.limit,
                        ..BudgetMetrics::default()
                    });
                    self.budgets.len() - 1
                }
            };
            let Some(t) = self.budgets.get_mut(i) else { continue };
            add_opt(&mut t.parked, b.parked);
            if live {
                t.limit = b.limit;
                add_opt(&mut t.in_use, b.in_use);
                add_opt(&mut t.waiting, b.waiting);
            }
        }
        for f in &other.frontends {
            let t = entry(
                &mut self.frontends,
                |x| x.name == f.name,
                || FrontendMetrics {
                    name: f.name.clone(),
                    ..FrontendMetrics::default()
                },
            );
            t.absorb(f, live);
        }
        for b in &other.backends {
            let t = entry(
                &mut self.backends,
                |x| x.name == b.name,
                || BackendMetrics {
                    name: b.name.clone(),
                    ..BackendMetrics::default()
                },
            );
            t.requests += b.requests;
            t.connect.add(&b.connect);
            t.response.add(&b.response);
            t.total.add(&b.total);
            if live {
                t.queued += b.queued;
            }
        }
        for s in &other.servers {
            absorb_server(&mut self.servers, s, live);
        }
        for l in &other.limits {
            let t = entry(
                &mut self.limits,
                |x| x.name == l.name && x.frontend == l.frontend,
                || LimitMetrics {
                    name: l.name.clone(),
                    frontend: l.frontend.clone(),
                    ..LimitMetrics::default()
                },
            );
            t.denied += l.denied;
            t.tarpitted += l.tarpitted;
            t.evicted += l.evicted;
            t.expired += l.expired;
            t.untracked += l.untracked;
            if live {
                t.entries += l.entries;
                t.size = l.size;
            }
        }
    }
}

impl FrontendMetrics {
    fn absorb(&mut self, f: &FrontendMetrics, live: bool) {
        self.streams += f.streams;
        self.bytes_in += f.bytes_in;
        self.bytes_out += f.bytes_out;
        self.conn_denied += f.conn_denied;
        self.h2_streams += f.h2_streams;
        self.h2_client_resets += f.h2_client_resets;
        self.h2_stream_errors += f.h2_stream_errors;
        self.quic_connections += f.quic_connections;
        self.h3_streams += f.h3_streams;
        self.quic_handshake_failures += f.quic_handshake_failures;
        self.quic_refused += f.quic_refused;
        self.quic_retries += f.quic_retries;
        self.quic_datagrams_in += f.quic_datagrams_in;
        self.quic_datagrams_out += f.quic_datagrams_out;
        self.quic_lost_packets += f.quic_lost_packets;
        add_rows(&mut self.responses, &f.responses);
        self.duration.add(&f.duration);
        add_opt(&mut self.ocsp_staples, f.ocsp_staples);
        add_opt(&mut self.ocsp_fetch_ok, f.ocsp_fetch_ok);
        add_opt(&mut self.ocsp_fetch_failed, f.ocsp_fetch_failed);
        if live {
            self.maxconn = f.maxconn;
            self.disabled = f.disabled;
            add_opt(&mut self.connections, f.connections);
        }
        for r in &f.routes {
            let t = entry(
                &mut self.routes,
                |x| x.name == r.name,
                || RouteMetrics {
                    name: r.name.clone(),
                    ..RouteMetrics::default()
                },
            );
            t.requests += r.requests;
            t.auth_refused += r.auth_refused;
            // A retired generation's fetches still count; its time and keys are the live
            // one's when there is one.
            if let Some(j) = &r.jwks {
                let tj = t.jwks.get_or_insert_with(JwksMetrics::default);
                tj.fetches_ok += j.fetches_ok;
                tj.fetches_failed += j.fetches_failed;
                tj.early_requests += j.early_requests;
                tj.last_ok_unix = tj.last_ok_unix.max(j.last_ok_unix);
                tj.keys = tj.keys.max(j.keys);
            }
            add_rows(&mut t.responses, &r.responses);
            t.duration.add(&r.duration);
        }
    }
}

/// A server's counters added to its row (matched by backend and name); a live
/// generation's row gives the states and adds its gauges.
fn absorb_server(rows: &mut Vec<ServerView>, s: &ServerView, live: bool) {
    let at = rows.iter().position(|x| x.backend == s.backend && x.name == s.name);
    let Some(row) = at.and_then(|i| rows.get_mut(i)) else {
        let mut row = s.clone();
        if !live {
            (row.active, row.queued, row.backend_queued) = (0, 0, 0);
        }
        rows.push(row);
        return;
    };
    row.counters.add(&s.counters);
    row.backend_queue_full += s.backend_queue_full;
    if live {
        let (counters, full) = (row.counters, row.backend_queue_full);
        let (active, queued, backend_queued) = (row.active, row.queued, row.backend_queued);
        *row = s.clone();
        row.counters = counters;
        row.backend_queue_full = full;
        row.active += active;
        row.queued += queued;
        row.backend_queued += backend_queued;
    }
}

/// The element `matches` finds, or a new one `make` builds, pushed.
fn entry<T>(items: &mut Vec<T>, matches: impl Fn(&T) -> bool, make: impl FnOnce() -> T) -> &mut T {
    let at = match items.iter().position(matches) {
        Some(i) => i,
        None => {
            items.push(make());
            items.len() - 1
        }
    };
    // `at` is in range: found, or just pushed.
    #[expect(clippy::indexing_slicing, reason = "the index was found or pushed just above")]
    &mut items[at]
}

/// Sums one histogram over every thread.
pub(crate) fn sum_histogram<'a>(cells: impl IntoIterator<Item = &'a HistogramCell>) -> HistogramSnapshot {
    let mut out = HistogramSnapshot::default();
    for c in cells {
        c.add_to(&mut out);
    }
    if out.buckets.is_empty() {
        out.buckets.resize(SLOTS, 0);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_whose_bound_holds_them() {
        let cells = [ThreadCells::new(&[1], 1), ThreadCells::new(&[1], 1)];
        let ms = Duration::from_millis;
        let ended = |bytes, backend, connect, response, total| Ended {
            frontend: 0,
            route: None,
            backend,
            bytes,
            status: 200,
            by_proxy: false,
            times: StreamTimes {
                connect,
                response,
                total,
            },
        };
        cells[0].stream(&ended((10, 20), Some(0), Some(ms(1)), None, ms(40)));
        cells[1].stream(&ended((1, 2), Some(0), None, Some(ms(2)), ms(60_000)));
        cells[1].stream(&ended((1, 2), None, None, None, ms(1)));
        let f = &cells[1].frontends[0];
        assert_eq!((f.streams.get(), f.bytes_in.get(), f.bytes_out.get()), (2, 2, 4));
        let connect = sum_histogram(cells.iter().map(|c| &c.backends[0].connect));
        // 1 ms is `le="0.001"`, the second bucket.
        assert_eq!(connect.buckets[1], 1);
        assert_eq!(connect.count(), 1);
        let total = sum_histogram(cells.iter().map(|c| &c.backends[0].total));
        assert_eq!(total.buckets[6], 1, "40 ms is le=0.05: {total:?}");
        assert_eq!(total.buckets[SLOTS - 1], 1, "60 s is +Inf");
        assert_eq!(total.sum_us, 60_040_000);
        assert_eq!(cells.iter().map(|c| c.backends[0].requests.get()).sum::<u64>(), 2);
        assert!(std::mem::align_of::<BackendCell>() >= 128);
    }

    #[test]
    fn responses_count_by_class_and_source_per_frontend_and_route() {
        // Frontend 0 has no route, frontend 1 has two.
        let cells = ThreadCells::new(&[0, 2], 0);
        let ended = |frontend, route, status, by_proxy| Ended {
            frontend,
            route,
            backend: None,
            bytes: (0, 0),
            status,
            by_proxy,
            times: StreamTimes {
                connect: None,
                response: None,
                total: Duration::from_millis(3),
            },
        };
        for e in [
            ended(1, Some(1), 200, false),
            ended(1, Some(1), 503, true),
            ended(1, Some(0), 404, false),
            ended(1, None, 404, true),
            ended(1, Some(1), 0, false),
            ended(1, Some(1), 999, false),
            ended(0, None, 101, false),
            ended(1, Some(7), 200, false),
        ] {
            cells.stream(&e);
        }
        let mut f = FrontendMetrics::default();
        cells.frontends[1].add_to(&mut f);
        let at = |class: usize, proxy: bool| usize::from(proxy) * 6 + class;
        let mut want = vec![0u64; 12];
        want[at(1, false)] = 2; // two 200s from servers (the unknown route's too)
        want[at(4, true)] = 1;
        want[at(3, false)] = 1;
        want[at(3, true)] = 1;
        want[at(5, false)] = 1; // 999
        assert_eq!(f.responses, want, "status 0 is no response");
        assert_eq!((f.streams, f.duration.count()), (7, 7));
        let route = |r| {
            let mut m = RouteMetrics::default();
            cells.add_route_to(1, r, &mut m);
            m
        };
        let r1 = route(1);
        assert_eq!(r1.requests, 4);
        assert_eq!(
            (
                r1.responses[at(1, false)],
                r1.responses[at(4, true)],
                r1.responses[at(5, false)]
            ),
            (1, 1, 1)
        );
        assert_eq!(route(0).requests, 1);
        assert_eq!(route(9).requests, 0, "no such route: nothing, no panic");
        let mut f0 = FrontendMetrics::default();
        cells.frontends[0].add_to(&mut f0);
        assert_eq!(f0.responses[at(0, false)], 1);
    }
}
