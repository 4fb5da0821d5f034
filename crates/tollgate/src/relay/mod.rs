//! Byte movers: everything that carries a session's bytes without knowing what they mean
//! or which session they belong to.
//!
//! - [`endpoint`]: the `Endpoint` trait (one side of a relay) and its plain and layered
//!   (TLS) implementations.
//! - [`pump`]: `relay_endpoints`, two pumps and an idle watchdog in one future, with
//!   splice(2) when both sides are plain sockets.
//! - [`pipes`]: the per-worker pool of splice pipes.
//! - [`splice`]: the splice(2) step, `Exact` (an HTTP body of a known length, never a byte
//!   past it) and `SpliceEnd` (what a body's end says about its socket).
//! - [`lazy`]: a client socket that joins the reactor only when it first has to wait.
//! - [`idle`]: the idle watchdog (a progress counter checked on a tick).
//! - [`counted`]: a writer that counts the bytes its inner writer accepted.
//! - [`server_conn`]: an HTTP server connection (plain or TLS), pooled between requests.
//!
//! Invariant: nothing here sees a worker (`ctx`), a session or the config's routing; a
//! relay gets what it uses ([`Resources`]) from its caller. So `tls` (kTLS endpoints),
//! `ctx` (the pools) and `proxy` (sessions) can all build on it.

pub(crate) mod counted;
pub(crate) mod endpoint;
pub(crate) mod idle;
pub(crate) mod lazy;
pub(crate) mod pipes;
pub(crate) mod pump;
pub(crate) mod server_conn;
pub(crate) mod splice;

use std::rc::Rc;

pub(crate) use endpoint::{Endpoint, Layered};
pub(crate) use pump::{Moved, relay_endpoints};
pub(crate) use server_conn::ServerConn;

use crate::buffer::BufferPool;
use crate::stats::WorkerStats;
use pipes::PipePool;

/// What a relay borrows from its worker: copy buffers, splice pipes, and the counters it
/// moves (bytes each way, bytes spliced, idle timeouts).
#[derive(Clone, Copy)]
pub(crate) struct Resources<'a> {
    pub buffers: &'a Rc<BufferPool>,
    pub pipes: &'a Rc<PipePool>,
    pub stats: &'a WorkerStats,
}
