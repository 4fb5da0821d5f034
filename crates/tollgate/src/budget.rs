//! Accept budgets: how many client connections may be open (global and per frontend
//! `maxconn`) and how fast new ones may be accepted (`max_accept_rate`).
//!
//! An accept loop takes its permits once a connection is pending on its socket and *before*
//! calling accept(2): at the limit it simply stops accepting, new connections wait in the
//! kernel backlog, and it resumes when a connection closes and its permits drop. Nothing is
//! ever accepted only to be dropped, and an idle loop holds no permit (with several workers,
//! each with its own SO_REUSEPORT socket, a permit held by an idle loop would keep a
//! connection queued on another worker while the frontend serves nothing).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Config;

#[derive(Debug)]
pub(crate) struct AcceptBudgets {
    global: Arc<Semaphore>,
    /// The global semaphore's size (for metrics: in use = size − available).
    global_max: u32,
    frontends: Vec<Option<Arc<Semaphore>>>,
    pub rate: AcceptRate,
}

/// Permits held for the life of one client connection.
#[derive(Debug)]
pub(crate) struct ConnPermits {
    _global: OwnedSemaphorePermit,
    _frontend: Option<OwnedSemaphorePermit>,
}

/// Whether taking permits had to wait (the loop counts pauses).
pub(crate) enum Taken {
    Now(ConnPermits),
    AfterWait(ConnPermits),
}

impl AcceptBudgets {
    /// `global_max`: the process's maxconn (`Global::effective_maxconn`).
    pub(crate) fn new(config: &Config, global_max: u32) -> Self {
        AcceptBudgets {
            global: Arc::new(Semaphore::new(global_max as usize)),
            global_max,
            frontends: config
                .frontends
                .iter()
                .map(|f| (f.maxconn > 0).then(|| Arc::new(Semaphore::new(f.maxconn as usize))))
                .collect(),
            rate: AcceptRate::new(config.global.max_accept_rate),
        }
    }

    /// Permits for one more connection on `frontend`, waiting while a budget is full.
    /// The frontend's permit is taken first so a full frontend does not sit on a global slot.
    pub(crate) async fn acquire(&self, frontend: usize) -> Taken {
        let mut waited = false;
        let fe = match self.frontends.get(frontend).and_then(|f| f.as_ref()) {
            Some(sem) => Some(take(sem, &mut waited).await),
            None => None,
        };
        let global = take(&self.global, &mut waited).await;
        let permits = ConnPermits {
            _global: global,
            _frontend: fe,
        };
        if waited {
            Taken::AfterWait(permits)
        } else {
            Taken::Now(permits)
        }
    }
}

impl AcceptBudgets {
    /// Permits for one more connection now, or `None` while a budget is full: for a
    /// transport that cannot leave a connection waiting in a backlog (QUIC: an Initial is
    /// answered or refused at once).
    pub(crate) fn try_acquire(&self, frontend: usize) -> Option<ConnPermits> {
        let fe = match self.frontends.get(frontend).and_then(|f| f.as_ref()) {
            Some(sem) => Some(Arc::clone(sem).try_acquire_owned().ok()?),
            None => None,
        };
        let global = Arc::clone(&self.global).try_acquire_owned().ok()?;
        Some(ConnPermits {
            _global: global,
            _frontend: fe,
        })
    }

    /// The process maxconn and the connections holding a permit of it now.
    pub(crate) fn global_usage(&self) -> (u32, u64) {
        let free = self.global.available_permits() as u64;
        (self.global_max, u64::from(self.global_max).saturating_sub(free))
    }

    /// Connections holding a permit of `frontend`'s maxconn now (`None`: no maxconn).
    /// `limit` is the frontend's `maxconn`, the semaphore's size.
    pub(crate) fn frontend_in_use(&self, frontend: usize, limit: u32) -> Option<u64> {
        let sem = self.frontends.get(frontend)?.as_ref()?;
        Some(u64::from(limit).saturating_sub(sem.available_permits() as u64))
    }
}

async fn take(sem: &Arc<Semaphore>, waited: &mut bool) -> OwnedSemaphorePermit {
    if let Ok(p) = Arc::clone(sem).try_acquire_owned() {
        return p;
    }
    *waited = true;
    match Arc::clone(sem).acquire_owned().await {
        Ok(p) => p,
        // The budgets never close their semaphores; if one were closed, stop accepting.
        Err(_) => std::future::pending().await,
    }
}

/// A process-wide accept rate limit as a generic cell rate algorithm: each accept reserves
/// the next slot `1/rate` seconds after the previous one; a burst of up to a tenth of a
/// second's worth is admitted at once, beyond that the accept loop sleeps until its slot.
#[derive(Debug)]
pub(crate) struct AcceptRate {
    interval_ns: u64,
    burst_ns: u64,
    epoch: Instant,
    /// Theoretical arrival time of the next accept, in ns since `epoch`.
    next_ns: AtomicU64,
}

impl AcceptRate {
    pub(crate) fn new(per_second: u32) -> Self {
        let interval_ns = if per_second == 0 {
            0
        } else {
            1_000_000_000 / u64::from(per_second)
        };
        AcceptRate {
            interval_ns,
            burst_ns: interval_ns * u64::from((per_second / 10).max(1)),
            epoch: Instant::now(),
            next_ns: AtomicU64::new(0),
        }
    }

    /// How long the caller must wait before accepting one more connection (zero when unlimited).
    pub(crate) fn reserve(&self) -> Duration {
        if self.interval_ns == 0 {
            return Duration::ZERO;
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        let prev = self
            .next_ns
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |t| {
                Some(t.max(now) + self.interval_ns)
            })
            .unwrap_or(now);
        let slot_end = prev.max(now) + self.interval_ns;
        Duration::from_nanos(slot_end.saturating_sub(now + self.burst_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_spaces_accepts_after_the_burst() {
        let rate = AcceptRate::new(100);
        let waits: Vec<Duration> = (0..30).map(|_| rate.reserve()).collect();
        assert!(waits[..10].iter().all(|w| w.is_zero()), "{waits:?}");
        // The 30th accept's slot is ~200 ms past the burst allowance.
        let last = waits[29];
        assert!(
            last > Duration::from_millis(150) && last <= Duration::from_millis(200),
            "{last:?}"
        );
        assert!(AcceptRate::new(0).reserve().is_zero());
    }
}
