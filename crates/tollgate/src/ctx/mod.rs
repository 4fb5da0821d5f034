//! What a session works with: the context of its worker thread and of the worker
//! generation it belongs to. `proxy`, `tls` and `listener` read it; `runtime` builds it.
//!
//! - [`Shared`]: what every worker thread of one generation shares — the config, the live
//!   state of every backend, the accept budgets, every worker's counters, the handshake
//!   budget; each TLS frontend's live certificate store (`cert_store`, in the config).
//!   Read-mostly: atomics touched once per connection, no lock per request.
//! - [`worker::WorkerCtx`]: one worker thread's own state (buffer pool, splice pipes,
//!   balancers, HTTP server pool, stop and kill signals, warn-line budget).
//! - [`backends`]: a thread's view of one backend (its balancer over the live server set).
//! - [`pool`]: the thread's idle HTTP server connections.
//! - [`sticky`]: a sticky backend's cookie values and `Set-Cookie` lines, per thread.
//! - [`inbox`]: the messages a thread's inbox carries (connection handoffs, commands).
//! - [`loglimit`]: the warn-line budget (sans-io).
//! - [`compressors`]: the thread's budget of response compressors.
//! - [`auth`]: the thread's budget of password checks and its cache of recent successes.
//! - [`origin`]: a session's client and TLS facts, for a server's PROXY protocol header.
//! - [`park`]: idle HTTP/1 client connections held outside any task (no future, no
//!   reactor registration, no buffer), watched by one epoll instance per thread.
//! - [`sessions`], [`errors`], [`stat`]: what `show sessions`, `show errors` and `show
//!   stat` read: the thread's live connections, its last malformed messages, its cells.
//! - `Shared::limits`: each frontend's stick tables (`limit`), one `Arc` per limit that every
//!   thread of the generation counts into.
//!
//! Invariant: nothing here imports `runtime`, `listener`, `proxy` or `tls`; a worker's
//! context is plain state plus the few methods sessions need, built once per thread.

pub(crate) mod auth;
pub(crate) mod backends;
pub(crate) mod chunked;
pub(crate) mod compressors;
pub(crate) mod errors;
pub(crate) mod inbox;
pub(crate) mod loglimit;
pub(crate) mod origin;
pub(crate) mod park;
pub(crate) mod pending_tls;
pub(crate) mod pool;
pub(crate) mod sessions;
pub(crate) mod stat;
pub(crate) mod sticky;
pub(crate) mod worker;

use std::sync::Arc;

pub(crate) use worker::WorkerCtx;

use crate::budget::AcceptBudgets;
use crate::config::Config;
use crate::config::cert_store::CertStore;
use crate::live::backend::BackendLive;
use crate::stats::WorkerStats;

/// Where a worker generation is in its life; every worker thread watches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    /// Stop accepting; sessions in flight run to their end.
    SoftStop,
    /// Close everything now.
    HardStop,
}

/// What every worker of one generation shares (read-mostly; atomics touched per connection).
pub struct Shared {
    pub(crate) config: Arc<Config>,
    /// Live state of every backend, in config order (shared by every worker thread).
    pub(crate) backends: Vec<Arc<BackendLive>>,
    pub(crate) budgets: AcceptBudgets,
    /// Every worker's counters, by worker id.
    pub stats: Vec<Arc<WorkerStats>>,
    /// `global.max_handshakes`: TLS handshakes in progress, process-wide.
    pub(crate) handshakes: Arc<tokio::sync::Semaphore>,
    /// `global.max_handshakes_per_source`: TLS connections before the end of their
    /// handshake, by source, process-wide.
    pub(crate) pending_tls: pending_tls::PendingBySource,
    /// The process's access log (`None`: `log.access = "off"`).
    pub(crate) access_log: Option<Arc<crate::accesslog::AccessLog>>,
    /// Per-frontend counters and per-backend timing histograms, by worker id.
    pub(crate) metrics: Vec<crate::metrics::ThreadCells>,
    /// Frontends an operator disabled (`ctl disable frontend`): their accept loops wait.
    pub(crate) paused: FrontendSwitch,
    /// `show stat`'s own per-thread cells, by worker id.
    pub(crate) stat: Vec<stat::ThreadStat>,
    /// Each frontend's `[[frontend.limit]]` stick tables, by frontend index: one per limit
    /// for the whole generation, so every thread counts into the same entries.
    pub(crate) limits: Vec<crate::limit::LimitSet>,
}

/// A frontend with no limits (or an index past the config): checks nothing.
static NO_LIMITS: crate::limit::LimitSet = crate::limit::LimitSet::EMPTY;

impl Shared {
    /// The limits of `frontend`.
    #[inline]
    pub(crate) fn limits(&self, frontend: usize) -> &crate::limit::LimitSet {
        self.limits.get(frontend).unwrap_or(&NO_LIMITS)
    }

    /// Every stick table of the generation, in frontend then limit order (what the Redis
    /// sync walks).
    pub(crate) fn tables(&self) -> impl Iterator<Item = &std::sync::Arc<crate::limit::StickTable>> {
        self.limits.iter().flat_map(|l| l.tables())
    }

    /// The stick table named `name`, in whichever frontend it is.
    pub(crate) fn table(&self, name: &str) -> Option<&std::sync::Arc<crate::limit::StickTable>> {
        self.tables().find(|t| t.name() == name)
    }
}

impl Shared {
    /// Every TLS frontend's live certificate store, with the frontend's name (the same
    /// stores the handshakes of this generation read: see `config::cert_store`).
    pub fn cert_stores(&self) -> impl Iterator<Item = (&str, &Arc<CertStore>)> {
        self.config
            .frontends
            .iter()
            .filter_map(|f| f.tls.as_ref().map(|t| (f.name.as_str(), &t.certs)))
    }

    /// The certificate store of the TLS frontend `frontend`.
    pub fn cert_store(&self, frontend: &str) -> Option<&Arc<CertStore>> {
        self.cert_stores().find(|(name, _)| *name == frontend).map(|(_, s)| s)
    }
}

/// Which frontends accept, as the operator set it at run time. Accept loops read one
/// relaxed flag per accept; a disabled frontend's loops wait for `enabled` (connections
/// stay in the kernel's backlog meanwhile).
#[derive(Debug)]
pub(crate) struct FrontendSwitch {
    disabled: Box<[std::sync::atomic::AtomicBool]>,
    enabled: tokio::sync::Notify,
}

impl FrontendSwitch {
    pub(crate) fn new(frontends: usize, disabled: impl Fn(usize) -> bool) -> Self {
        FrontendSwitch {
            disabled: (0..frontends)
                .map(|f| std::sync::atomic::AtomicBool::new(disabled(f)))
                .collect(),
            enabled: tokio::sync::Notify::new(),
        }
    }

    pub(crate) fn is_disabled(&self, frontend: usize) -> bool {
        self.disabled
            .get(frontend)
            .is_some_and(|d| d.load(std::sync::atomic::Ordering::Acquire))
    }

    pub(crate) fn set(&self, frontend: usize, enabled: bool) {
        if let Some(d) = self.disabled.get(frontend) {
            d.store(!enabled, std::sync::atomic::Ordering::Release);
        }
        if enabled {
            self.enabled.notify_waiters();
        }
    }

    /// Resolves once `frontend` is enabled.
    pub(crate) async fn wait_enabled(&self, frontend: usize) {
        loop {
            let enabled = self.enabled.notified();
            tokio::pin!(enabled);
            enabled.as_mut().enable();
            if !self.is_disabled(frontend) {
                return;
            }
            enabled.await;
        }
    }
}
