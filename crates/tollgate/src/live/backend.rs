//! A backend's live server set: a versioned snapshot swapped whole.
//!
//! Readers (every worker thread, at pick time) load `version` (one relaxed atomic) and
//! compare it with the version their balancer was built for; only when it moved do they
//! load the snapshot and rebuild. Writers (the command applier, the health checker, DNS
//! discovery, slow start; serialized by a lock only writers take) build a new `ServerSet`,
//! store it, then bump `version`, so a reader that sees the new version always finds the new
//! set. A set version changes when servers are added, removed or readdressed, or when a
//! weight changes (balancers hold weights); admin and operational states are read live from
//! each `ServerLive` and need no new version.
//!
//! Servers that leave a set stay alive for as long as a connection holds their slot: their
//! in-flight requests finish, and nothing picks them again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use arc_swap::ArcSwap;

use super::queue::SlotQueue;
use super::server::ServerLive;
use super::{BackendId, IdMap, ServerId};
use crate::config::Backend;

#[derive(Debug)]
pub(crate) struct ServerSet {
    pub version: u64,
    /// Config order (positions mean nothing outside this version).
    pub servers: Vec<Arc<ServerLive>>,
    by_id: IdMap<ServerId, usize>,
}

impl ServerSet {
    pub(crate) fn new(version: u64, servers: Vec<Arc<ServerLive>>) -> Self {
        let by_id = servers.iter().enumerate().map(|(i, s)| (s.id, i)).collect();
        ServerSet {
            version,
            servers,
            by_id,
        }
    }

    pub(crate) fn position(&self, id: ServerId) -> Option<usize> {
        self.by_id.get(&id).copied()
    }

    pub(crate) fn find(&self, name: &str) -> Option<&Arc<ServerLive>> {
        self.servers.iter().find(|s| &*s.name == name)
    }
}

#[derive(Debug)]
pub(crate) struct BackendLive {
    #[expect(dead_code, reason = "identity kept with the live state; nothing reads it by id yet")]
    pub id: BackendId,
    pub name: Arc<str>,
    version: AtomicU64,
    set: ArcSwap<ServerSet>,
    /// Requests waiting for a slot, first come first served (shared with the servers, whose
    /// released slots it hands over).
    queue: Arc<SlotQueue>,
    workers: usize,
    /// Requests waiting for a slot on any of this backend's servers, including those woken
    /// to pick again (what `maxqueue` bounds and `show servers` shows).
    queued: AtomicU32,
    /// Requests refused because `maxqueue` were already waiting.
    queue_full: AtomicU64,
    /// Serializes set writers (read-modify-write of the set); readers never take it.
    writer: std::sync::Mutex<()>,
}

/// A request counted in its backend's queue while it waits.
#[derive(Debug)]
pub(crate) struct QueuedGuard<'a>(&'a AtomicU32);

impl Drop for QueuedGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl BackendLive {
    pub(crate) fn new(backend: &Backend, workers: usize) -> Self {
        let name: Arc<str> = Arc::from(backend.name.as_str());
        let queue = SlotQueue::new();
        let servers = backend
            .servers
            .iter()
            .map(|s| Arc::new(ServerLive::new(s, (backend.id, &name), workers, Arc::clone(&queue))))
            .collect();
        BackendLive {
            id: backend.id,
            name,
            version: AtomicU64::new(1),
            set: ArcSwap::from_pointee(ServerSet::new(1, servers)),
            queue,
            workers,
            queued: AtomicU32::new(0),
            queue_full: AtomicU64::new(0),
            writer: std::sync::Mutex::new(()),
        }
    }

    /// The current set's version: compare before loading the set.
    #[inline]
    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    pub(crate) fn servers(&self) -> Arc<ServerSet> {
        self.set.load_full()
    }

    /// Publishes a new set built from the current one by `change` (which gets the current
    /// servers and the backend's queue for new `ServerLive`s). Writers are serialized.
    /// Queued requests pick again from the new set.
    pub(crate) fn update(
        &self,
        change: impl FnOnce(&[Arc<ServerLive>], &Arc<SlotQueue>, usize) -> Vec<Arc<ServerLive>>,
    ) -> u64 {
        // A poisoned lock only means another writer panicked; the set itself is whole.
        let writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = self.set.load_full();
        let version = current.version + 1;
        let servers = change(&current.servers, &self.queue, self.workers);
        self.set.store(Arc::new(ServerSet::new(version, servers)));
        self.version.store(version, Ordering::Release);
        drop(writer);
        self.state_changed();
        version
    }

    /// Every request queued on this backend picks again now (keeping its place in line).
    /// Server state setters (`ServerLive::set_admin`, `set_oper`, a weight crossing 0) and
    /// `update` call it themselves; anything else that makes a server usable or unusable
    /// without them must call it, or the queue waits for a slot release to notice.
    pub(crate) fn state_changed(&self) {
        self.queue.wake_all();
    }

    /// Bumps the version without changing the set: every thread rebuilds its balancer from
    /// the servers' effective weights (how weight changes made outside the command applier,
    /// by agent checks or slow start, reach the balancers).
    #[allow(dead_code, reason = "used by the health checker and slow start")]
    pub(crate) fn touch(&self) -> u64 {
        self.update(|servers, _, _| servers.to_vec())
    }

    /// Requests waiting for a slot now.
    pub(crate) fn queued(&self) -> u32 {
        self.queued.load(Ordering::Relaxed)
    }

    /// Requests refused so far because the queue was full.
    pub(crate) fn queue_full(&self) -> u64 {
        self.queue_full.load(Ordering::Relaxed)
    }

    /// Counts one request waiting for a slot until the guard drops; `None` (and counted in
    /// `queue_full`) when `maxqueue` (0 = no limit) already wait, process-wide.
    pub(crate) fn enqueue(&self, maxqueue: u32) -> Option<QueuedGuard<'_>> {
        let admitted = self
            .queued
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (maxqueue == 0 || n < maxqueue).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            self.queue_full.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(QueuedGuard(&self.queued))
    }

    /// The line itself: join it, be handed a slot.
    pub(crate) fn queue(&self) -> &SlotQueue {
        &self.queue
    }
}
