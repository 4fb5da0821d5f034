//! The sync loop against a real redis-server (skipped without one, except under `CI=true`):
//! two loops stand for two instances, fake tables for their stick tables.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::batch::SyncEntry;
use super::*;

#[path = "../../tests/shared_support/redis.rs"]
mod redis_server;

#[derive(Default)]
struct FakeTable {
    counted: Mutex<Vec<SyncEntry>>,
    remote: Mutex<HashMap<Vec<u8>, (u64, u64, u64)>>,
    scales: Mutex<Vec<u32>>,
    clears: AtomicUsize,
    refusing: AtomicBool,
}

impl FakeTable {
    fn count(&self, key: &str, period: u64, delta: u64) {
        self.counted.lock().unwrap().push(SyncEntry {
            key: key.as_bytes().into(),
            period,
            delta,
        });
    }
    fn remote(&self, key: &str) -> Option<(u64, u64, u64)> {
        self.remote.lock().unwrap().get(key.as_bytes()).copied()
    }
}

impl SyncTable for FakeTable {
    fn name(&self) -> &str {
        "per_ip"
    }
    fn period(&self) -> Duration {
        Duration::from_secs(3600)
    }
    fn take_deltas(&self, out: &mut Vec<SyncEntry>) {
        out.append(&mut self.counted.lock().unwrap());
    }
    fn set_remote(&self, key: &[u8], period: u64, (current, previous): (u64, u64), scale: u32) -> Option<u64> {
        self.remote
            .lock()
            .unwrap()
            .insert(key.to_vec(), (period, current, previous));
        self.scales.lock().unwrap().push(scale);
        None
    }
    fn clear_remote(&self) {
        self.clears.fetch_add(1, Ordering::Relaxed);
        self.remote.lock().unwrap().clear();
    }
    fn set_refusing(&self, refusing: bool) {
        self.refusing.store(refusing, Ordering::Relaxed);
    }
}

struct Instance {
    sync: SyncLoop,
    table: Arc<FakeTable>,
    client: redis::Client,
    conn: Option<redis::aio::MultiplexedConnection>,
}

impl Instance {
    fn new(url: &str, fail: FailMode, timeout: Duration) -> Instance {
        let table = Arc::new(FakeTable::default());
        let config = Sharing {
            redis: url.into(),
            password: None,
            sync_interval: Duration::from_millis(100),
            timeout,
            fail,
            prefix: "test".into(),
            limits: vec!["per_ip".into()],
        };
        let tables: Vec<Arc<dyn SyncTable>> = vec![table.clone()];
        Instance {
            sync: SyncLoop::new(config, tables, Arc::new(WorkerStats::default())),
            table,
            client: redis::Client::open(url).unwrap(),
            conn: None,
        }
    }
    async fn round(&mut self) {
        self.sync.round(&self.client, &mut self.conn).await;
    }
    fn stat(&self, f: fn(&WorkerStats) -> &crate::stats::Counter) -> u64 {
        f(&self.sync.stats).get()
    }
}

fn now_period() -> u64 {
    crate::limit::now_ms() / 3_600_000
}

#[tokio::test]
async fn two_instances_see_each_others_counts_and_an_outage_falls_back_to_local() {
    let Some(bin) = redis_server::find_or_skip() else {
        return;
    };
    let mut redis = redis_server::RedisServer::start(&bin);
    let url = redis.url();
    let (mut a, mut b) = (
        Instance::new(&url, FailMode::Closed, Duration::from_millis(500)),
        Instance::new(&url, FailMode::Open, Duration::from_millis(500)),
    );
    let p = now_period();
    a.table.count("10.0.0.1", p, 5);
    a.table.count("10.0.0.1", p - 1, 1);
    a.round().await;
    assert_eq!(a.table.remote("10.0.0.1"), Some((p, 5, 1)));
    b.table.count("10.0.0.1", p, 3);
    b.round().await;
    assert_eq!(b.table.remote("10.0.0.1"), Some((p, 8, 1)), "B sees A's counts");
    // Quiet at A now, but counted there within the window: pulled all the same.
    a.round().await;
    assert_eq!(a.table.remote("10.0.0.1"), Some((p, 8, 1)), "A sees B's counts");
    assert_eq!(
        (a.stat(|s| &s.shared_rounds), a.stat(|s| &s.shared_keys_pushed)),
        (2, 2)
    );
    // The share: B pushes 4 while the total grows by 6 (A pushed 2): 1.5 admissions per own.
    a.table.count("10.0.0.1", p, 2);
    a.round().await;
    assert_eq!(
        a.table.scales.lock().unwrap().last(),
        Some(&256),
        "A alone since its last read"
    );
    b.table.count("10.0.0.1", p, 4);
    b.round().await;
    assert_eq!(b.table.remote("10.0.0.1"), Some((p, 14, 1)));
    assert_eq!(b.table.scales.lock().unwrap().last(), Some(&384));
    let ttl: i64 = redis
        .command(&format!("PTTL test:per_ip:10.0.0.1:{p}"))
        .trim_start_matches(':')
        .trim()
        .parse()
        .unwrap();
    assert!(ttl > 3_600_000 && ttl <= 7_200_000, "two periods: {ttl}");

    redis.kill();
    a.table.count("10.0.0.1", p, 2);
    for _ in 0..3 {
        let started = Instant::now();
        a.round().await;
        assert!(started.elapsed() < Duration::from_millis(600), "bounded by the timeout");
    }
    assert_eq!(a.stat(|s| &s.shared_outages), 1, "one outage, however many rounds fail");
    assert_eq!(a.stat(|s| &s.shared_rounds_failed), 3);
    assert_eq!(a.stat(|s| &s.shared_redis_down), 1);
    assert_eq!(a.table.clears.load(Ordering::Relaxed), 1);
    assert_eq!(a.table.remote("10.0.0.1"), None, "decisions fall back to local counts");
    assert!(a.table.refusing.load(Ordering::Relaxed), "fail = closed");
    b.round().await;
    assert!(!b.table.refusing.load(Ordering::Relaxed), "fail = open");

    // Back (empty: nothing persisted): what A counted during the outage is pushed.
    redis.restart();
    a.round().await;
    assert_eq!(a.table.remote("10.0.0.1"), Some((p, 2, 0)));
    assert_eq!(a.stat(|s| &s.shared_redis_down), 0);
    assert!(!a.table.refusing.load(Ordering::Relaxed));
    assert_eq!(a.stat(|s| &s.shared_outages), 1);
}

/// A Redis that accepts and never answers: the round gives up at `timeout`.
#[tokio::test]
async fn a_silent_redis_fails_the_round_at_its_timeout() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = silent.accept().await {
            conns.push(c);
        }
    });
    let mut a = Instance::new(&url, FailMode::Open, Duration::from_millis(150));
    a.table.count("k", now_period(), 1);
    let started = Instant::now();
    a.round().await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_millis(400),
        "{took:?}"
    );
    assert_eq!(a.stat(|s| &s.shared_outages), 1);
    assert_eq!(a.sync.pending.len(), 1, "kept for the next round");
    held.abort();
}
