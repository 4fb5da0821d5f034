//! The live model: what every worker thread of a process knows about backends and servers
//! *now*, as opposed to what the config file said at load.
//!
//! - ids (`config::ids`): stable identities. A server or backend keeps its id across reloads
//!   for as long as its name does; an id is never reused for another server within a
//!   master's life. The master owns the table and sends it to each generation with the
//!   config.
//! - [`server`]: one [`server::ServerLive`] per server, shared by every worker thread of the
//!   process: admin and operational state, configured and effective weight, active
//!   connections, queued requests, counters. One writer per field (the command applier for
//!   states and weights, the owning thread for its counter cell), any number of readers;
//!   plain atomics, no lock.
//! - [`check`]: a server's health-check settings, last outcome and passive error streak.
//! - [`queue`]: a backend's queue of requests waiting for a slot, shared by every worker
//!   thread, first come first served (a freed slot is handed to the oldest waiter).
//! - [`backend`]: a backend's server set as a versioned snapshot, swapped whole. A worker
//!   thread compares one atomic version per pick and rebuilds its balancer only when it moved.
//! - [`slowstart`]: a server that comes up ramps its effective weight over `slowstart`.
//!
//! Invariants: a `ServerLive` is never mutated in its identity (id, backend, name, address,
//! maxconn); a changed address or a removed server is a new set version. Positions in a set
//! are not identities: whatever outlives a set version is keyed by [`ServerId`].

pub(crate) mod backend;
pub(crate) mod check;
pub(crate) mod queue;
pub(crate) mod server;
pub(crate) mod slowstart;

pub(crate) use crate::ids::{BackendId, IdMap, ServerId};
