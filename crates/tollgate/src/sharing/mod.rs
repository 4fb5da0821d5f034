//! Limits shared across instances (`[shared]`, limits with `shared = true`): every
//! `sync_interval`, one round trip to Redis pushes what this process counted since the last
//! round and reads back the global totals, which the stick tables then decide with (remote
//! total + what is counted here and not pushed yet). One thread per process
//! (`tollgate-share`, its own current_thread runtime), like discovery; nothing here is on the
//! data path, and no request ever waits on Redis.
//!
//! - [`batch`]: sans-io, pending deltas and recent keys -> the round's pipeline, its answer
//!   -> totals.
//!
//! Invariants:
//! - the only writer of the `shared_*` counters of worker 0's `WorkerStats` (its thread
//!   never writes them), so each still has one writer.
//! - Redis unreachable, slow (a round over `shared.timeout`) or answering an error: the
//!   round failed. The first failure of an outage logs one warning, counts an outage, makes
//!   every table forget its remote totals (decisions fall back to local counts) and, with
//!   `fail = "closed"`, sets every table refusing; the first success after it logs one info
//!   line and lifts both. Deltas a failed round could not push stay pending (bounded, see
//!   [`batch::Pending`]) and go with the next round that reaches Redis.
//! - the connection is dropped after any failure and made again at the next round (a reply
//!   that came too late never answers a later round).

pub(crate) mod batch;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use self::batch::{Pending, Recent, SyncEntry, TableSpec};
use crate::config::shared::{FailMode, Sharing};
use crate::stats::WorkerStats;

/// Deltas kept for Redis at most (past that the oldest periods are dropped, counted in
/// `shared_deltas_dropped`).
pub(crate) const MAX_PENDING: usize = 100_000;
/// Deltas one round pushes at most (the others wait for the next round).
pub(crate) const MAX_PUSH: usize = 10_000;
/// Keys one round reads back at most (over all tables).
pub(crate) const MAX_PULL: usize = 10_000;
/// Quiet keys remembered per table for pulling.
pub(crate) const MAX_RECENT: usize = 100_000;

/// What the sync loop needs of a stick table whose limit is shared.
pub(crate) trait SyncTable: Send + Sync {
    fn name(&self) -> &str;
    fn period(&self) -> Duration;
    /// Every count not pushed yet (marked pushed).
    fn take_deltas(&self, out: &mut Vec<SyncEntry>);
    /// The global totals of `key` in `period` and the one before (this process's pushed
    /// counts included), and `scale`: all instances' admissions per own admission, ×256.
    /// Returns when the key was last requested here (unix ms; refused requests included),
    /// `None` when the table holds no entry for it.
    fn set_remote(&self, key: &[u8], period: u64, totals: (u64, u64), scale: u32) -> Option<u64>;
    /// Forgets every remote total.
    fn clear_remote(&self);
    /// `fail = "closed"`: while set, every request the limit covers is refused.
    fn set_refusing(&self, refusing: bool);
}

impl SyncTable for crate::limit::StickTable {
    fn name(&self) -> &str {
        crate::limit::StickTable::name(self)
    }
    fn period(&self) -> Duration {
        crate::limit::StickTable::period(self)
    }
    fn take_deltas(&self, out: &mut Vec<SyncEntry>) {
        crate::limit::StickTable::take_deltas(self, out);
    }
    fn set_remote(&self, key: &[u8], period: u64, totals: (u64, u64), scale: u32) -> Option<u64> {
        crate::limit::StickTable::set_remote(self, key, period, totals, scale)
    }
    fn clear_remote(&self) {
        crate::limit::StickTable::clear_remote(self);
    }
    fn set_refusing(&self, refusing: bool) {
        crate::limit::StickTable::set_refusing(self, refusing);
    }
}

/// Stops the sync thread when dropped, after one last push (bounded by `shared.timeout`).
pub(crate) type Handle = crate::background::Stopper<oneshot::Sender<()>>;

/// Starts the sync thread when `[shared]` is set and some table is shared.
/// `stats`: worker 0's counters (the `shared_*` fields are written here only).
pub(crate) fn start(
    config: Option<&Sharing>,
    tables: Vec<Arc<dyn SyncTable>>,
    stats: Option<Arc<WorkerStats>>,
) -> std::io::Result<Option<Handle>> {
    let (Some(config), false) = (config, tables.is_empty()) else {
        return Ok(None);
    };
    let client = config
        .client()
        .map_err(|e| std::io::Error::other(format!("shared.redis: {e}")))?;
    let (stop, stopped) = oneshot::channel();
    let mut sync = SyncLoop::new(config.clone(), tables, stats.unwrap_or_default());
    let thread = std::thread::Builder::new()
        .name("tollgate-share".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "shared limits cannot start their runtime: counting locally");
                    return;
                }
            };
            rt.block_on(sync.run(client, stopped));
        })?;
    Ok(Some(Handle::new(stop, thread)))
}

struct SyncLoop {
    config: Sharing,
    tables: Vec<Arc<dyn SyncTable>>,
    specs: Vec<TableSpec>,
    stats: Arc<WorkerStats>,
    pending: Pending,
    recent: Recent,
    round: u64,
    /// In an outage: the first failure's reason (logged once).
    down: Option<String>,
    /// A round reached Redis once (the first is logged, so that a wrong address shows at
    /// start, not at the first request).
    reached: bool,
    taken: Vec<SyncEntry>,
}

impl SyncLoop {
    fn new(config: Sharing, tables: Vec<Arc<dyn SyncTable>>, stats: Arc<WorkerStats>) -> Self {
        let specs = tables
            .iter()
            .map(|t| TableSpec {
                name: t.name().to_string(),
                period_ms: u64::try_from(t.period().as_millis()).unwrap_or(u64::MAX).max(1),
            })
            .collect();
        let recent = Recent::new(tables.len(), MAX_RECENT);
        SyncLoop {
            config,
            tables,
            specs,
            stats,
            pending: Pending::new(MAX_PENDING),
            recent,
            round: 0,
            down: None,
            reached: false,
            taken: Vec::new(),
        }
    }

    async fn run(&mut self, client: redis::Client, mut stop: oneshot::Receiver<()>) {
        let mut conn: Option<redis::aio::MultiplexedConnection> = None;
        let mut ticks = tokio::time::interval(self.config.sync_interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stopping = tokio::select! {
                _ = &mut stop => true,
                _ = ticks.tick() => false,
            };
            self.round(&client, &mut conn).await;
            if stopping {
                return;
            }
        }
    }

    /// Collects the deltas, sends one batch, applies its answer (or the outage rules).
    async fn round(&mut self, client: &redis::Client, conn: &mut Option<redis::aio::MultiplexedConnection>) {
        let now_ms = crate::limit::now_ms();
        self.collect(now_ms);
        self.round += 1;
        let specs = &self.specs;
        let now = |t: usize| specs.get(t).map_or(0, |s| s.period_at(now_ms));
        let mut batch = batch::build(
            &self.config.prefix,
            specs,
            &self.pending,
            &mut self.recent,
            (self.round, MAX_PUSH, MAX_PULL),
            now,
        );
        // Nothing to say: no traffic, unless Redis was never reached or an outage needs to
        // learn that it is back.
        if batch.is_empty() {
            if self.down.is_none() && self.reached {
                return;
            }
            batch.pipeline.cmd("PING").ignore();
        }
        let answer = tokio::time::timeout(self.config.timeout, async {
            if conn.is_none() {
                // The round's own bound is the one that counts (the client's defaults differ).
                let bounds = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.config.timeout))
                    .set_response_timeout(Some(self.config.timeout));
                *conn = Some(client.get_multiplexed_async_connection_with_config(&bounds).await?);
            }
            match conn.as_mut() {
                Some(c) => batch.pipeline.query_async::<Vec<redis::Value>>(c).await,
                None => Err(redis::RedisError::from((redis::ErrorKind::Io, "no connection"))),
            }
        })
        .await;
        let outcome = match answer {
            Err(_) => Err(format!("no answer within {:?}", self.config.timeout)),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(reply)) => batch::parse(batch.pulls, reply),
        };
        match outcome {
            Ok(totals) => {
                let pushed = batch.pushed.len() as u64;
                self.pending.pushed(&batch.pushed);
                self.stats.shared_rounds.add(1);
                self.stats.shared_keys_pushed.add(pushed);
                self.stats.shared_keys_pulled.add(totals.len() as u64);
                for r in totals {
                    let scale = self.recent.observe(&r, r.mine);
                    let (Some(t), Some(spec)) = (self.tables.get(r.table), self.specs.get(r.table)) else {
                        continue;
                    };
                    // Requested here lately, if only refused: keep pulling it (its count
                    // here stays, so would the others' go unseen).
                    if let Some(seen) = t.set_remote(&r.key, r.period, (r.current, r.previous), scale) {
                        self.recent.touch(r.table, &r.key, spec.period_at(seen));
                    }
                }
                self.up();
            }
            Err(reason) => {
                *conn = None;
                self.stats.shared_rounds_failed.add(1);
                self.fail(reason);
            }
        }
    }

    /// Takes every table's new counts into `pending`, and forgets what no window reads.
    fn collect(&mut self, now_ms: u64) {
        for (i, table) in self.tables.iter().enumerate() {
            self.taken.clear();
            table.take_deltas(&mut self.taken);
            for e in &self.taken {
                self.recent.touch(i, &e.key, e.period);
            }
            self.pending.add(i, self.taken.drain(..));
        }
        let specs = &self.specs;
        let now = |t: usize| specs.get(t).map_or(0, |s| s.period_at(now_ms));
        let dropped = self.pending.trim(now);
        self.recent.trim(now);
        if dropped > 0 {
            self.stats.shared_deltas_dropped.add(dropped);
        }
    }

    fn fail(&mut self, reason: String) {
        if self.down.is_some() {
            return;
        }
        let closed = self.config.fail == FailMode::Closed;
        // The tables first: once the warning is out, decisions already follow it.
        for t in &self.tables {
            t.clear_remote();
            if closed {
                t.set_refusing(true);
            }
        }
        self.stats.shared_outages.add(1);
        self.stats.shared_redis_down.set(1);
        tracing::warn!(
            redis = %self.config.shown_url(),
            fail = self.config.fail.as_str(),
            "shared limits: Redis unreachable ({reason}); {}",
            if closed {
                "refusing what shared limits cover until it is back (fail = \"closed\")"
            } else {
                "limiting with this instance's counts until it is back"
            }
        );
        self.down = Some(reason);
    }

    fn up(&mut self) {
        if !self.reached {
            self.reached = true;
            if self.down.is_none() {
                tracing::info!(
                    redis = %self.config.shown_url(),
                    limits = self.tables.len(),
                    "shared limits: Redis reachable, counting across instances"
                );
            }
        }
        if self.down.take().is_none() {
            return;
        }
        for t in &self.tables {
            t.set_refusing(false);
        }
        self.stats.shared_redis_down.set(0);
        tracing::info!(redis = %self.config.shown_url(), "shared limits: Redis reachable again, counts shared");
    }
}

#[cfg(test)]
mod tests;
