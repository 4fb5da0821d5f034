//! A stick table: one limit's entries (key → sliding-window counts, requests in flight,
//! last seen), shared by every worker thread of a process.
//!
//! Sharded: a key's hash picks one of up to [`MAX_SHARDS`] shards, each a small map under
//! its own mutex, held for one lookup and a few integer updates (tens of ns, no await, no
//! allocation unless the key is new). The counts are therefore exact across threads. The
//! hash is foldhash with a seed drawn per table, so peers cannot aim keys at one bucket;
//! and a shard never holds more than its share of `size`, which bounds what any collision
//! could cost.
//!
//! Each shard keeps its entries in least-recently-seen order (an index-linked list over its
//! slots): when full, the least recently seen entry that has nothing in flight is evicted
//! (counted); entries idle past `expire` are dropped as new keys come (counted apart). An
//! entry with requests in flight is never evicted, so releasing one always finds it. When
//! every candidate is in flight, a new key is admitted untracked (counted).
//!
//! The Redis sync (`take_deltas`, `set_remote`, `clear_remote`) reads and writes the same
//! entries under the same shard locks; nothing on the request path waits for it.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hashbrown::HashTable;

use super::key::Key;
use super::window::{Admit, Counts, Window};
use crate::config::limit::Limit;

const NIL: u32 = u32::MAX;
/// Shards of the largest tables; smaller tables get fewer (about 1024 entries each), so
/// that a small `size` is an exact LRU over the whole table.
pub(crate) const MAX_SHARDS: usize = 64;
const ENTRIES_PER_SHARD: usize = 1024;
/// How many of the least recently seen entries eviction looks at for one not in flight.
const EVICT_SCAN: usize = 8;

/// One entry's counts not yet pushed to the shared store (`take_deltas`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyncEntry {
    pub key: Box<[u8]>,
    /// The wall-clock period index (`unix ms / period`).
    pub period: u64,
    pub delta: u64,
}

/// A request in flight on an entry (`concurrent`), released when the request ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    shard: u32,
    slot: u32,
    generation: u32,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The rate: the next request fits in this many milliseconds.
    Rate { wait_ms: u64 },
    /// `concurrent` requests of the key are in flight.
    Concurrent,
    /// A shared limit with `fail = "closed"` while the shared store is unreachable.
    Unavailable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Admitted; with a mark to release when it ends if the limit has `concurrent`.
    Pass(Option<Mark>),
    Deny(Refusal),
}

/// A table's counters (read by `show table` and the metrics snapshot).
#[derive(Debug, Default)]
pub(crate) struct TableCounters {
    pub denied: AtomicU64,
    pub tarpitted: AtomicU64,
    /// Entries pushed out by a full table.
    pub evicted: AtomicU64,
    /// Entries dropped after `expire` without a request.
    pub expired: AtomicU64,
    /// New keys admitted without an entry (every candidate for eviction was in flight).
    pub untracked: AtomicU64,
}

/// One entry as `show table` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EntryView {
    pub key: Vec<u8>,
    /// The sliding-window estimate now (0 without `rate`).
    pub rate: u64,
    pub in_flight: u32,
    /// Unix milliseconds.
    pub last_seen_ms: u64,
}

struct Slot {
    hash: u64,
    key: Key,
    /// Least-recently-seen list: towards the oldest and towards the newest.
    older: u32,
    newer: u32,
    last_seen_ms: u64,
    counts: Counts,
    in_flight: u32,
    /// Bumped whenever the slot is freed, so a stale mark finds nothing.
    generation: u32,
    live: bool,
}

#[derive(Default)]
struct Shard {
    /// Slot indexes by the key's hash.
    index: HashTable<u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    newest: u32,
    oldest: u32,
    capacity: usize,
}

/// A shard's lock and map on cache lines of their own: two threads working on keys of
/// different shards never write the same line.
#[repr(align(128))]
struct Padded(Mutex<Shard>);

pub(crate) struct StickTable {
    spec: Limit,
    window: Option<Window>,
    expire_ms: u64,
    hasher: foldhash::quality::RandomState,
    shards: Box<[Padded]>,
    pub(crate) counters: TableCounters,
    /// Set by the Redis sync while the store is unreachable and the limit is shared with
    /// `fail = "closed"`: every request is refused, nothing counted. Written once per outage,
    /// read (relaxed) by every decision: a line every core keeps shared in its cache.
    refusing: AtomicBool,
}

impl std::fmt::Debug for StickTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StickTable").field("name", &self.spec.name).finish()
    }
}

impl StickTable {
    pub(crate) fn new(spec: &Limit) -> StickTable {
        let size = spec.size.max(1) as usize;
        let shards = (size / ENTRIES_PER_SHARD)
            .clamp(1, MAX_SHARDS)
            .next_power_of_two()
            .min(MAX_SHARDS);
        let shards = (0..shards)
            .map(|i| {
                // `size` split exactly: the first `size % shards` shards take one more.
                let capacity = size / shards + usize::from(i < size % shards);
                Padded(Mutex::new(Shard {
                    newest: NIL,
                    oldest: NIL,
                    capacity,
                    ..Shard::default()
                }))
            })
            .collect();
        StickTable {
            window: spec.rate.map(|r| Window {
                period_ms: u64::try_from(r.period.as_millis()).unwrap_or(u64::MAX).max(1),
                rate: r.count,
                burst: spec.burst,
            }),
            expire_ms: u64::try_from(spec.expire.as_millis()).unwrap_or(u64::MAX),
            hasher: foldhash::quality::RandomState::default(),
            shards,
            counters: TableCounters::default(),
            refusing: AtomicBool::new(false),
            spec: spec.clone(),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    /// The window's period; zero for a limit without `rate` (nothing to sync).
    pub(crate) fn period(&self) -> Duration {
        self.spec.rate.map_or(Duration::ZERO, |r| r.period)
    }

    pub(crate) fn spec(&self) -> &Limit {
        &self.spec
    }

    /// The shard `hash` falls in, locked (`None` only for a table without shards, which
    /// `new` never makes).
    fn shard_of(&self, hash: u64) -> Option<(u32, MutexGuard<'_, Shard>)> {
        // The high half: hashbrown indexes buckets with the low bits and tags with the top 7.
        let i = ((hash >> 32) as usize) & (self.shards.len().max(1) - 1);
        let m = self.shards.get(i)?;
        Some((i as u32, m.0.lock().unwrap_or_else(PoisonError::into_inner)))
    }

    /// Decides one request (connection) of `key` at `now_ms` (unix ms) and counts it.
    pub(crate) fn check(&self, key: &[u8], now_ms: u64) -> Check {
        if self.refusing.load(Ordering::Relaxed) {
            return Check::Deny(Refusal::Unavailable);
        }
        let hash = self.hasher.hash_one(key);
        let Some((shard_no, mut shard)) = self.shard_of(hash) else {
            return Check::Pass(None);
        };
        let i = match shard.find(hash, key) {
            Some(i) => {
                shard.touch(i);
                i
            }
            None => match shard.insert(hash, key, now_ms, self) {
                Some(i) => i,
                None => {
                    self.counters.untracked.fetch_add(1, Ordering::Relaxed);
                    return Check::Pass(None);
                }
            },
        };
        let Some(slot) = shard.slots.get_mut(i as usize) else {
            return Check::Pass(None);
        };
        slot.last_seen_ms = now_ms;
        let concurrent = self.spec.concurrent;
        if concurrent > 0 && slot.in_flight >= concurrent {
            return Check::Deny(Refusal::Concurrent);
        }
        if let Some(w) = &self.window
            && let Admit::Wait(wait_ms) = slot.counts.admit(w, now_ms)
        {
            return Check::Deny(Refusal::Rate { wait_ms });
        }
        if concurrent == 0 {
            return Check::Pass(None);
        }
        slot.in_flight += 1;
        Check::Pass(Some(Mark {
            shard: shard_no,
            slot: i,
            generation: slot.generation,
        }))
    }

    /// A request admitted with `mark` ended.
    pub(crate) fn release(&self, mark: Mark) {
        let Some(m) = self.shards.get(mark.shard as usize) else {
            return;
        };
        let mut shard = m.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = shard.slots.get_mut(mark.slot as usize)
            && slot.live
            && slot.generation == mark.generation
        {
            slot.in_flight = slot.in_flight.saturating_sub(1);
        }
    }

    fn each_shard(&self, mut f: impl FnMut(&mut Shard)) {
        for m in &self.shards {
            f(&mut m.0.lock().unwrap_or_else(PoisonError::into_inner));
        }
    }

    /// Entries held now (idle ones not yet dropped included).
    pub(crate) fn entries(&self) -> u64 {
        let mut n = 0;
        self.each_shard(|s| n += s.index.len() as u64);
        n
    }

    /// Up to `max` entries not expired at `now_ms`, highest rate first (then most in flight),
    /// and how many more there are.
    pub(crate) fn show(&self, now_ms: u64, max: usize) -> (Vec<EntryView>, u64) {
        let mut out = Vec::new();
        self.each_shard(|s| {
            for slot in s.slots.iter().filter(|s| s.live) {
                if slot.in_flight == 0 && slot.last_seen_ms.saturating_add(self.expire_ms) < now_ms {
                    continue;
                }
                out.push(EntryView {
                    key: slot.key.as_bytes().to_vec(),
                    rate: self.window.map_or(0, |w| slot.counts.estimate(&w, now_ms)),
                    in_flight: slot.in_flight,
                    last_seen_ms: slot.last_seen_ms,
                });
            }
        });
        out.sort_by(|a, b| (b.rate, b.in_flight, &a.key).cmp(&(a.rate, a.in_flight, &b.key)));
        let more = out.len().saturating_sub(max) as u64;
        out.truncate(max);
        (out, more)
    }

    /// Forgets `key`'s entry (`None`: every entry); how many were forgotten. An entry with
    /// requests in flight keeps its place (so they are released into it) but loses its counts.
    pub(crate) fn clear(&self, key: Option<&[u8]>) -> u64 {
        let mut n = 0;
        let mut clear_one = |s: &mut Shard, i: u32| {
            match s.slots.get_mut(i as usize) {
                Some(slot) if slot.in_flight > 0 => slot.counts = Counts::default(),
                Some(_) => s.remove(i),
                None => return,
            }
            n += 1;
        };
        match key {
            Some(key) => {
                let hash = self.hasher.hash_one(key);
                if let Some((_, mut s)) = self.shard_of(hash)
                    && let Some(i) = s.find(hash, key)
                {
                    clear_one(&mut s, i);
                }
            }
            None => self.each_shard(|s| {
                let live: Vec<u32> = s.index.iter().copied().collect();
                for i in live {
                    clear_one(s, i);
                }
            }),
        }
        n
    }

    /// Appends, for every entry counted since the last call, the wall-clock period index and
    /// the count not yet pushed; marks them pushed.
    pub(crate) fn take_deltas(&self, out: &mut Vec<SyncEntry>) {
        self.each_shard(|s| {
            for slot in s.slots.iter_mut().filter(|s| s.live) {
                let c = &mut slot.counts;
                if c.prev > c.pushed_prev && c.period > 0 {
                    out.push(SyncEntry {
                        key: slot.key.as_bytes().into(),
                        period: c.period - 1,
                        delta: c.prev - c.pushed_prev,
                    });
                    c.pushed_prev = c.prev;
                }
                if c.cur > c.pushed_cur {
                    out.push(SyncEntry {
                        key: slot.key.as_bytes().into(),
                        period: c.period,
                        delta: c.cur - c.pushed_cur,
                    });
                    c.pushed_cur = c.cur;
                }
            }
        });
    }

    /// Records the global totals (all instances, this one's pushed counts included) Redis
    /// returned for `key` in `period` and `period - 1`. A key this instance holds no entry
    /// for is ignored. `scale`: all instances' admissions per own admission, ×256
    /// (`window::Counts::remote_scale`). Returns when the key was last seen here (refused
    /// requests included), `None` without an entry.
    pub(crate) fn set_remote(
        &self,
        key: &[u8],
        period: u64,
        (cur_total, prev_total): (u64, u64),
        scale: u32,
    ) -> Option<u64> {
        let hash = self.hasher.hash_one(key);
        let (_, mut s) = self.shard_of(hash)?;
        let i = s.find(hash, key)?;
        let slot = s.slots.get_mut(i as usize)?;
        let c = &mut slot.counts;
        (c.remote_period, c.remote_cur, c.remote_prev) = (period, cur_total, prev_total);
        c.remote_scale = scale;
        Some(slot.last_seen_ms)
    }

    /// `fail = "closed"`: refuse every request while `refusing` (the shared store is down).
    pub(crate) fn set_refusing(&self, refusing: bool) {
        self.refusing.store(refusing, Ordering::Relaxed);
    }

    /// Forgets every remote total: decisions fall back to local counts (Redis down).
    pub(crate) fn clear_remote(&self) {
        self.each_shard(|s| {
            for slot in &mut s.slots {
                slot.counts.remote_period = 0;
            }
        });
    }
}

impl Shard {
    fn find(&self, hash: u64, key: &[u8]) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(hash, |&i| {
                slots
                    .get(i as usize)
                    .is_some_and(|s| s.hash == hash && s.key.as_bytes() == key)
            })
            .copied()
    }

    fn link(&mut self, i: u32) -> Option<&mut Slot> {
        self.slots.get_mut(i as usize)
    }

    fn unlink(&mut self, i: u32) {
        let Some(s) = self.link(i) else { return };
        let (older, newer) = (s.older, s.newer);
        (s.older, s.newer) = (NIL, NIL);
        match self.link(older) {
            Some(o) => o.newer = newer,
            None => self.oldest = newer,
        }
        match self.link(newer) {
            Some(n) => n.older = older,
            None => self.newest = older,
        }
    }

    fn push_newest(&mut self, i: u32) {
        let newest = self.newest;
        if let Some(s) = self.link(i) {
            (s.older, s.newer) = (newest, NIL);
        }
        match self.link(newest) {
            Some(n) => n.newer = i,
            None => self.oldest = i,
        }
        self.newest = i;
    }

    fn touch(&mut self, i: u32) {
        if self.newest != i {
            self.unlink(i);
            self.push_newest(i);
        }
    }

    fn remove(&mut self, i: u32) {
        self.unlink(i);
        let Some(s) = self.slots.get_mut(i as usize) else {
            return;
        };
        let hash = s.hash;
        s.live = false;
        s.in_flight = 0;
        s.generation = s.generation.wrapping_add(1);
        if let Ok(entry) = self.index.find_entry(hash, |&j| j == i) {
            entry.remove();
        }
        self.free.push(i);
    }

    /// A new entry for `key` (the table full: after evicting one), or `None` when every
    /// candidate for eviction has requests in flight.
    fn insert(&mut self, hash: u64, key: &[u8], now_ms: u64, table: &StickTable) -> Option<u32> {
        // Idle entries go first, two per insert at most (they are the oldest).
        for _ in 0..2 {
            let oldest = self.oldest;
            match self.slots.get(oldest as usize) {
                Some(s) if s.in_flight == 0 && s.last_seen_ms.saturating_add(table.expire_ms) < now_ms => {
                    self.remove(oldest);
                    table.counters.expired.fetch_add(1, Ordering::Relaxed);
                }
                _ => break,
            }
        }
        if self.index.len() >= self.capacity {
            let mut candidate = self.oldest;
            let mut victim = None;
            for _ in 0..EVICT_SCAN {
                match self.slots.get(candidate as usize) {
                    Some(s) if s.in_flight == 0 => {
                        victim = Some(candidate);
                        break;
                    }
                    Some(s) => candidate = s.newer,
                    None => break,
                }
            }
            self.remove(victim?);
            table.counters.evicted.fetch_add(1, Ordering::Relaxed);
        }
        let slot = Slot {
            hash,
            key: Key::new(key),
            older: NIL,
            newer: NIL,
            last_seen_ms: now_ms,
            counts: Counts::default(),
            in_flight: 0,
            generation: 0,
            live: true,
        };
        let i = match self.free.pop() {
            Some(i) => {
                let generation = self.slots.get(i as usize).map_or(0, |s| s.generation);
                *self.slots.get_mut(i as usize)? = Slot { generation, ..slot };
                i
            }
            None => {
                self.slots.push(slot);
                u32::try_from(self.slots.len() - 1).ok()?
            }
        };
        let slots = &self.slots;
        self.index
            .insert_unique(hash, i, |&j| slots.get(j as usize).map_or(0, |s| s.hash));
        self.push_newest(i);
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;
    use crate::config::limit::{LimitAction, LimitKey, Rate};

    pub(crate) fn spec(rate: Option<u64>, concurrent: u32, size: u32) -> Limit {
        Limit {
            name: "t".into(),
            key: LimitKey::Source,
            rate: rate.map(|count| Rate {
                count,
                period: Duration::from_secs(1),
            }),
            burst: 0,
            concurrent,
            action: LimitAction::TooMany,
            size,
            expire: Duration::from_secs(60),
        }
    }

    const NOW: u64 = 1_700_000_000_000;

    #[test]
    fn each_key_gets_its_own_rate() {
        let t = StickTable::new(&spec(Some(3), 0, 100));
        for key in [&b"a"[..], b"b"] {
            for _ in 0..3 {
                assert_eq!(t.check(key, NOW), Check::Pass(None));
            }
            assert!(matches!(t.check(key, NOW), Check::Deny(Refusal::Rate { .. })));
        }
        assert_eq!(t.entries(), 2);
        let (shown, more) = t.show(NOW, 10);
        assert_eq!((shown.len(), more, shown[0].rate), (2, 0, 3));
    }

    #[test]
    fn concurrency_is_held_until_released() {
        let t = StickTable::new(&spec(None, 2, 100));
        let marks: Vec<Mark> = (0..2)
            .map(|_| match t.check(b"k", NOW) {
                Check::Pass(Some(m)) => m,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(t.check(b"k", NOW), Check::Deny(Refusal::Concurrent));
        t.release(marks[0]);
        assert!(matches!(t.check(b"k", NOW), Check::Pass(Some(_))));
    }

    #[test]
    fn a_full_table_evicts_the_least_recently_seen_idle_entry() {
        let t = StickTable::new(&spec(Some(100), 0, 3));
        for k in [b"a", b"b", b"c"] {
            t.check(k, NOW);
        }
        t.check(b"a", NOW + 1); // `b` is now the oldest
        t.check(b"d", NOW + 2);
        assert_eq!(t.counters.evicted.load(Ordering::Relaxed), 1);
        let keys: Vec<Vec<u8>> = t.show(NOW + 2, 10).0.into_iter().map(|e| e.key).collect();
        assert!(!keys.contains(&b"b".to_vec()) && keys.len() == 3, "{keys:?}");
        // Idle past `expire`: dropped as expired, not evicted.
        t.check(b"e", NOW + 61_000 + 2);
        assert_eq!(t.counters.expired.load(Ordering::Relaxed), 2);
        assert_eq!(t.entries(), 2);
    }

    #[test]
    fn entries_in_flight_are_never_evicted() {
        let t = StickTable::new(&spec(None, 5, 1));
        let Check::Pass(Some(mark)) = t.check(b"a", NOW) else {
            panic!()
        };
        // The only slot is busy: `b` passes untracked.
        assert_eq!(t.check(b"b", NOW), Check::Pass(None));
        assert_eq!(t.counters.untracked.load(Ordering::Relaxed), 1);
        t.release(mark);
        assert!(matches!(t.check(b"b", NOW), Check::Pass(Some(_))));
        assert_eq!(t.counters.evicted.load(Ordering::Relaxed), 1);
        // A stale mark (its entry evicted) releases nothing.
        t.release(mark);
        assert_eq!(t.check(b"b", NOW), Check::Pass(Some(Mark { generation: 1, ..mark })));
    }

    #[test]
    fn clear_forgets_one_key_or_all() {
        let t = StickTable::new(&spec(Some(1), 0, 100));
        t.check(b"a", NOW);
        t.check(b"b", NOW);
        assert_eq!(t.clear(Some(b"a")), 1);
        assert_eq!(t.check(b"a", NOW), Check::Pass(None));
        assert!(matches!(t.check(b"b", NOW), Check::Deny(_)));
        assert_eq!(t.clear(None), 2);
        assert_eq!(t.entries(), 0);
    }

    #[test]
    fn a_refusing_table_refuses_everything_and_counts_nothing() {
        let t = StickTable::new(&spec(Some(10), 0, 100));
        t.set_refusing(true);
        assert_eq!(t.check(b"k", NOW), Check::Deny(Refusal::Unavailable));
        let mut out = Vec::new();
        t.take_deltas(&mut out);
        assert!(out.is_empty(), "{out:?}");
        t.set_refusing(false);
        assert_eq!(t.check(b"k", NOW), Check::Pass(None));
    }

    #[test]
    fn deltas_are_pushed_once_and_remote_totals_count() {
        let t = StickTable::new(&spec(Some(10), 0, 100));
        let period = NOW / 1000;
        for _ in 0..4 {
            t.check(b"k", NOW);
        }
        let mut out = Vec::new();
        t.take_deltas(&mut out);
        assert_eq!(
            out,
            vec![SyncEntry {
                key: (*b"k").into(),
                period,
                delta: 4
            }]
        );
        out.clear();
        t.take_deltas(&mut out);
        assert!(out.is_empty());
        t.check(b"k", NOW);
        // Others counted 5: 4 pushed + 5 = 9, plus one local not pushed = 10: full.
        assert_eq!(t.set_remote(b"k", period, (9, 0), 256), Some(NOW), "last seen");
        assert_eq!(t.set_remote(b"absent", period, (9, 0), 256), None);
        assert!(matches!(t.check(b"k", NOW), Check::Deny(_)));
        t.clear_remote();
        assert_eq!(t.check(b"k", NOW), Check::Pass(None));
        // The next period pushes what was left in the previous one under its index.
        t.check(b"k", NOW + 1000);
        t.take_deltas(&mut out);
        assert_eq!(
            out.iter().map(|e| (e.period, e.delta)).collect::<Vec<_>>(),
            vec![(period, 2), (period + 1, 1)]
        );
        assert_eq!((t.name(), t.period()), ("t", Duration::from_secs(1)));
    }
}
