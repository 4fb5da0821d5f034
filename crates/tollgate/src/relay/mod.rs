//! Byte movers: everything that carries a session's bytes without knowing what they mean
//! or which session they belong to.
//!
//! - [`endpoint`]: the `Endpoint` trait (one side of a relay) and its plain and layered
//!   (TLS) implementations.
//! - [`pump`]: `relay_endpoints`, two pumps and an idle watchdog in one future, with
//!   splice(2) when both sides are plain sockets.
//! - [`pipes`]: the per-worker pool of splice pipes.
//! - [`lazy`]: a client socket that joins the reactor only when it first has to wait.
//! - [`idle`]: the idle watchdog (a progress counter checked on a tick).
//! - [`counted`]: a writer that counts the bytes its inner writer accepted.
//! - [`server_conn`]: an HTTP server connection (plain or TLS), pooled between requests.
//!
//! Invariant: nothing here sees a worker (`ctx`), a session or the config's routing; a
//! relay gets what it uses ([`Resources`]) from its caller. So `tls` (kTLS endpoints),
//! `ctx` (the pools) and `proxy` (sessions) can all build on it.

pub mod counted;
pub mod endpoint;
pub mod idle;
pub mod lazy;
pub mod pipes;
pub mod pump;
pub mod server_conn;

use std::rc::Rc;

pub use endpoint::{Endpoint, Layered};
pub use pump::relay_endpoints;
pub use server_conn::ServerConn;

use crate::buffer::BufferPool;
use crate::stats::WorkerStats;
use pipes::PipePool;

/// What a relay borrows from its worker: copy buffers, splice pipes, and the counters it
/// moves (bytes each way, bytes spliced, idle timeouts).
#[derive(Clone, Copy)]
pub struct Resources<'a> {
    pub buffers: &'a Rc<BufferPool>,
    pub pipes: &'a Rc<PipePool>,
    pub stats: &'a WorkerStats,
}
