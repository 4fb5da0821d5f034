//! Per-server live state shared by every worker: the connection count that enforces the
//! server's `maxconn`, a wait list for connections parked on a full server, and counters.
//!
//! Touched once per connection (never per read or write): a slot is taken before connecting
//! and given back when the server connection closes. With `maxconn = 0` taking a slot is one
//! relaxed increment; with a limit it is a compare-and-swap loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use tokio::sync::Notify;

use crate::config::{Backend, Server};

#[derive(Debug)]
pub struct ServerState {
    pub name: String,
    pub maxconn: u32,
    active: AtomicU32,
    pub connects: AtomicU64,
    pub connect_errors: AtomicU64,
    /// The backend's notification, shared by its servers: a freed slot on any of them may
    /// unpark a connection waiting for the backend.
    slot_freed: Arc<Notify>,
}

impl ServerState {
    pub fn new(server: &Server, slot_freed: Arc<Notify>) -> Self {
        ServerState {
            name: server.name.clone(),
            maxconn: server.maxconn,
            active: AtomicU32::new(0),
            connects: AtomicU64::new(0),
            connect_errors: AtomicU64::new(0),
            slot_freed,
        }
    }

    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Relaxed)
    }

    pub fn has_room(&self) -> bool {
        self.maxconn == 0 || self.active() < self.maxconn
    }

    /// Takes a connection slot if the server is below its maxconn.
    pub fn try_take(self: &Arc<Self>) -> Option<ServerSlot> {
        if self.maxconn == 0 {
            self.active.fetch_add(1, Ordering::Relaxed);
        } else {
            self.active
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                    (n < self.maxconn).then_some(n + 1)
                })
                .ok()?;
        }
        Some(ServerSlot {
            server: Arc::clone(self),
        })
    }
}

/// A held connection slot; dropping it releases the slot and wakes one parked waiter.
#[derive(Debug)]
pub struct ServerSlot {
    server: Arc<ServerState>,
}

impl ServerSlot {
    pub fn server(&self) -> &ServerState {
        &self.server
    }
}

impl Drop for ServerSlot {
    fn drop(&mut self) {
        self.server.active.fetch_sub(1, Ordering::AcqRel);
        if self.server.maxconn != 0 {
            self.server.slot_freed.notify_waiters();
        }
    }
}

/// The live state of one backend's servers, in config order.
#[derive(Debug)]
pub struct BackendState {
    pub name: String,
    pub servers: Vec<Arc<ServerState>>,
    slot_freed: Arc<Notify>,
}

impl BackendState {
    pub fn new(backend: &Backend) -> Self {
        let slot_freed = Arc::new(Notify::new());
        BackendState {
            name: backend.name.clone(),
            servers: backend
                .servers
                .iter()
                .map(|s| Arc::new(ServerState::new(s, Arc::clone(&slot_freed))))
                .collect(),
            slot_freed,
        }
    }

    /// Completes when a slot on one of this backend's limited servers is released. Call
    /// `enable()` on the pinned future before checking for room, or a release may be missed.
    pub fn slot_released(&self) -> tokio::sync::futures::Notified<'_> {
        self.slot_freed.notified()
    }
}
