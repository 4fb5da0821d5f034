//! Slow start: after a server comes up (admin state back to `ready`, or operational state
//! from `down` to `up`), its effective weight ramps from about 1 to its weight over its
//! `slowstart` period, so a cold server (empty caches, JIT, connection pools) is not handed
//! its full share at once.
//!
//! `ServerLive` notes when a ramp starts (`set_admin` / `set_oper`, on a not-up → up
//! transition only: a process that starts, or a reload, ramps nothing) and wakes the ticker
//! through [`started`]. The ticker (`runtime::slowstart`, one task per process) calls
//! [`step`] every `tick(slowstart)` while something ramps and sleeps otherwise; `step`
//! moves each ramping server's `ramp_permille` and bumps the backend's set version when an
//! effective weight changed, so every thread's balancer rebuilds from the new weights.
//!
//! The math here is sans-io; the clock is a process-wide monotonic millisecond count.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::backend::BackendLive;

/// Woken (`notify_waiters`) whenever a ramp starts. Process-wide on purpose: the writers
/// of states (command applier, health checks) need no handle on the ticker, and a process
/// that runs several worker generations (tests) only makes each ticker look once more.
static STARTED: Notify = Notify::const_new();

/// Shortest interval between two ramp steps.
pub(crate) const MIN_TICK: Duration = Duration::from_millis(100);

/// Milliseconds on the process's monotonic clock, plus one (so 0 can mean "never").
pub(crate) fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_millis())
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

/// Completes after the next ramp starts; `enable()` it before looking for ramping servers,
/// or a start between the look and the wait is missed.
pub(crate) fn started() -> tokio::sync::futures::Notified<'static> {
    STARTED.notified()
}

pub(crate) fn wake_ticker() {
    STARTED.notify_waiters();
}

/// The ramp after `elapsed` of `period`, per mille: at least 1 (a ramping server takes
/// some traffic, or nobody sees it work), 1000 once the period is over.
pub(crate) fn permille(elapsed: Duration, period: Duration) -> u32 {
    if period.is_zero() || elapsed >= period {
        return 1000;
    }
    let p = elapsed.as_millis().saturating_mul(1000) / period.as_millis().max(1);
    u32::try_from(p).unwrap_or(1000).clamp(1, 1000)
}

/// How often a ramp over `period` is stepped: 20 steps, but not more than every `MIN_TICK`.
pub(crate) fn tick(period: Duration) -> Duration {
    (period / 20).max(MIN_TICK)
}

/// What one step did to one server's ramp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RampStep {
    /// Balancers must rebuild: the effective weight moved, or the ramp is new to the ticker.
    pub changed: bool,
    /// When to step again (`None`: the ramp is over).
    pub next: Option<Duration>,
}

/// Steps every ramping server of `backends` at `now` (from [`now_ms`]); bumps the version
/// of each backend where a weight changed. Returns when to step again, `None` if nothing
/// ramps any more.
pub(crate) fn step(backends: &[std::sync::Arc<BackendLive>], now: u64) -> Option<Duration> {
    let mut next: Option<Duration> = None;
    for backend in backends {
        let mut changed = false;
        for server in &backend.servers().servers {
            let Some(s) = server.step_ramp(now) else {
                continue;
            };
            changed |= s.changed;
            if let Some(t) = s.next {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        if changed {
            backend.touch();
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramp_starts_above_zero_grows_and_ends_at_full() {
        let period = Duration::from_secs(2);
        assert_eq!(permille(Duration::ZERO, period), 1);
        assert_eq!(permille(Duration::from_millis(500), period), 250);
        assert_eq!(permille(Duration::from_secs(1), period), 500);
        assert_eq!(permille(Duration::from_secs(2), period), 1000);
        assert_eq!(permille(Duration::from_secs(60), period), 1000);
        assert_eq!(permille(Duration::from_secs(1), Duration::ZERO), 1000);
    }

    fn server(slowstart: Duration) -> crate::live::server::ServerLive {
        let spec = crate::config::Server {
            id: crate::live::ServerId(0),
            name: "s".into(),
            address: std::net::SocketAddr::from(([127, 0, 0, 1], 1)),
            host: None,
            weight: 100,
            maxconn: 0,
            backup: false,
            tls: None,
            proto: Default::default(),
            slowstart,
            check: Default::default(),
            send_proxy: None,
        };
        let backend: std::sync::Arc<str> = "b".into();
        crate::live::server::ServerLive::new(
            &spec,
            (crate::live::BackendId(0), &backend),
            1,
            crate::live::queue::SlotQueue::new(),
        )
    }

    #[test]
    fn a_server_ramps_only_after_coming_up_and_stops_at_its_weight() {
        use crate::live::server::{AdminState, OperState};
        let s = server(Duration::from_secs(2));
        // Up from the start, and unknown -> up: no ramp.
        assert_eq!(s.step_ramp(now_ms()), None);
        s.set_oper(OperState::Up);
        assert_eq!(s.step_ramp(now_ms()), None);
        assert_eq!(s.effective_weight(), 100);
        // Ready -> drain -> ready: ramps from the bottom.
        s.set_admin(AdminState::Drain);
        s.set_admin(AdminState::Ready);
        assert_eq!(s.effective_weight(), 1);
        let since = now_ms();
        let first = s.step_ramp(since).unwrap();
        assert!(first.changed, "a new ramp makes balancers rebuild");
        assert_eq!(first.next, Some(tick(Duration::from_secs(2))));
        let half = s.step_ramp(since + 1000).unwrap();
        assert!(half.changed);
        // `since` is a little after the ramp began: a little above half.
        assert!((50..=60).contains(&s.effective_weight()), "{}", s.effective_weight());
        let done = s.step_ramp(since + 2100).unwrap();
        assert_eq!((done.changed, done.next), (true, None));
        assert_eq!(s.effective_weight(), 100);
        assert_eq!(s.step_ramp(since + 3000), None, "over");
        // Down -> up ramps too; without slowstart nothing does.
        s.set_oper(OperState::Down);
        s.set_oper(OperState::Up);
        assert_eq!(s.effective_weight(), 1);
        let plain = server(Duration::ZERO);
        plain.set_admin(AdminState::Maint);
        plain.set_admin(AdminState::Ready);
        assert_eq!((plain.effective_weight(), plain.step_ramp(now_ms())), (100, None));
    }

    #[test]
    fn ticks_are_a_twentieth_but_not_below_the_floor() {
        assert_eq!(tick(Duration::from_secs(30)), Duration::from_millis(1500));
        assert_eq!(tick(Duration::from_secs(1)), MIN_TICK);
    }
}
