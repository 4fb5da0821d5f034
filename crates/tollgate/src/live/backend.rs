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
use tokio::sync::Notify;

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
    slot_freed: Arc<Notify>,
    workers: usize,
    /// Requests waiting for a slot on any of this backend's servers.
    queued: AtomicU32,
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
        let slot_freed = Arc::new(Notify::new());
        let servers = backend
            .servers
            .iter()
            .map(|s| {
                Arc::new(ServerLive::new(
                    s,
                    (backend.id, &name),
                    workers,
                    Arc::clone(&slot_freed),
                ))
            })
            .collect();
        BackendLive {
            id: backend.id,
            name,
            version: AtomicU64::new(1),
            set: ArcSwap::from_pointee(ServerSet::new(1, servers)),
            slot_freed,
            workers,
            queued: AtomicU32::new(0),
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
    /// servers and the backend's notify for new `ServerLive`s). Writers are serialized.
    pub(crate) fn update(
        &self,
        change: impl FnOnce(&[Arc<ServerLive>], &Arc<Notify>, usize) -> Vec<Arc<ServerLive>>,
    ) -> u64 {
        // A poisoned lock only means another writer panicked; the set itself is whole.
        let _writer = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = self.set.load_full();
        let version = current.version + 1;
        let servers = change(&current.servers, &self.slot_freed, self.workers);
        self.set.store(Arc::new(ServerSet::new(version, servers)));
        self.version.store(version, Ordering::Release);
        version
    }

    /// Bumps the version without changing the set: every thread rebuilds its balancer from
    /// the servers' effective weights (how weight changes made outside the command applier,
    /// by agent checks or slow start, reach the balancers).
    #[allow(dead_code, reason = "used by the health checker and slow start")]
    pub(crate) fn touch(&self) -> u64 {
        self.update(|servers, _, _| servers.to_vec())
    }

    pub(crate) fn queued(&self) -> u32 {
        self.queued.load(Ordering::Relaxed)
    }

    /// Counts one request waiting for a slot until the guard drops.
    pub(crate) fn enqueue(&self) -> QueuedGuard<'_> {
        self.queued.fetch_add(1, Ordering::Relaxed);
        QueuedGuard(&self.queued)
    }

    /// Completes when a slot on one of this backend's limited servers is released. Call
    /// `enable()` on the pinned future before checking for room, or a release may be missed.
    pub(crate) fn slot_released(&self) -> tokio::sync::futures::Notified<'_> {
        self.slot_freed.notified()
    }
}
