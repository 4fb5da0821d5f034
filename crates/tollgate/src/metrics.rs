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
}

/// One thread's timing histograms of one backend.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct BackendCell {
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
}

/// How long the steps of one stream took, as the sink measured them (`None`: not reached).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamTimes {
    pub connect: Option<Duration>,
    pub response: Option<Duration>,
    pub total: Duration,
}

impl ThreadCells {
    pub(crate) fn new(frontends: usize, backends: usize) -> Self {
        ThreadCells {
            frontends: (0..frontends).map(|_| FrontendCell::default()).collect(),
            backends: (0..backends).map(|_| BackendCell::default()).collect(),
        }
    }

    /// One ended stream of `frontend` (and of `backend`, if it reached one).
    #[inline]
    pub(crate) fn stream(&self, frontend: usize, bytes: (u64, u64), backend: Option<usize>, times: &StreamTimes) {
        if let Some(f) = self.frontends.get(frontend) {
            f.streams.add(1);
            f.bytes_in.add(bytes.0);
            f.bytes_out.add(bytes.1);
        }
        if let Some(b) = backend.and_then(|b| self.backends.get(b)) {
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

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendMetrics {
    pub name: String,
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
        let cells = [ThreadCells::new(1, 1), ThreadCells::new(1, 1)];
        let ms = Duration::from_millis;
        let times = |connect, response, total| StreamTimes {
            connect,
            response,
            total,
        };
        cells[0].stream(0, (10, 20), Some(0), &times(Some(ms(1)), None, ms(40)));
        cells[1].stream(0, (1, 2), Some(0), &times(None, Some(ms(2)), ms(60_000)));
        cells[1].stream(0, (1, 2), None, &times(None, None, ms(1)));
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
        assert!(std::mem::align_of::<BackendCell>() >= 128);
    }
}
