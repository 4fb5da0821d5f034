//! The per-thread cells `show stat` reads that no other module keeps: per frontend, open
//! and accepted connections, the accept rate, proxy-made 4xx, malformed requests and TLS
//! handshakes; per backend, the stream rate, the longest queue seen and malformed responses.
//!
//! Invariants: one [`ThreadStat`] per worker thread (indexed by worker id, in `Shared`),
//! written only by that thread (relaxed load and store, no `lock` prefix), each cell aligned
//! to 128 bytes so two threads never write one cache line; readers sum every thread's.
//! Nothing here allocates or locks after the generation starts.

use crate::stats::{Counter, FreqCtr};

#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct FrontendStatCell {
    pub sessions_active: Counter,
    pub sessions_total: Counter,
    pub rate: FreqCtr,
    pub proxy_4xx: Counter,
    pub malformed: Counter,
    pub tls_handshakes: Counter,
}

#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct BackendStatCell {
    pub rate: FreqCtr,
    /// The most requests this thread saw waiting in the backend's queue at once.
    pub queue_max: Counter,
    pub malformed_responses: Counter,
}

/// One thread's cells, by frontend and backend index (config order).
#[derive(Debug)]
pub(crate) struct ThreadStat {
    pub frontends: Box<[FrontendStatCell]>,
    pub backends: Box<[BackendStatCell]>,
}

impl ThreadStat {
    pub(crate) fn new(frontends: usize, backends: usize) -> Self {
        ThreadStat {
            frontends: (0..frontends).map(|_| FrontendStatCell::default()).collect(),
            backends: (0..backends).map(|_| BackendStatCell::default()).collect(),
        }
    }

    pub(crate) fn frontend(&self, frontend: usize) -> Option<&FrontendStatCell> {
        self.frontends.get(frontend)
    }

    pub(crate) fn backend(&self, backend: usize) -> Option<&BackendStatCell> {
        self.backends.get(backend)
    }
}

/// Counts one session in or out of its frontend's open connections (a drop guard, so a
/// session dropped by a hard stop is counted out too).
pub(crate) struct OpenSession<'a>(Option<&'a FrontendStatCell>);

impl<'a> OpenSession<'a> {
    pub(crate) fn new(cell: Option<&'a FrontendStatCell>, now_ms: u64) -> Self {
        if let Some(c) = cell {
            c.sessions_active.add(1);
            c.sessions_total.add(1);
            c.rate.add(now_ms);
        }
        OpenSession(cell)
    }
}

impl<'a> OpenSession<'a> {
    /// Leaves the connection counted (a parked connection is still open): `resumed`
    /// makes the guard again. True if a cell counts it.
    pub(crate) fn detach(self) -> bool {
        let counted = self.0.is_some();
        std::mem::forget(self);
        counted
    }

    /// The guard of a connection counted when it opened (and left counted by `detach`).
    pub(crate) fn resumed(cell: Option<&'a FrontendStatCell>) -> Self {
        OpenSession(cell)
    }
}

impl Drop for OpenSession<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.0 {
            c.sessions_active.sub(1);
        }
    }
}
