//! Restart policy for workers that die unexpectedly (sans-io: fed lifetimes, returns delays).
//!
//! The first death after a worker lived at least `STABLE` is restarted at once; each further
//! death of a short-lived worker doubles the delay from `FIRST_DELAY`, up to `MAX_DELAY`.

use std::time::Duration;

/// A worker that lived this long counts as healthy: its death restarts at once.
pub(crate) const STABLE: Duration = Duration::from_secs(10);
pub(crate) const FIRST_DELAY: Duration = Duration::from_millis(100);
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub(crate) struct Backoff {
    /// Consecutive deaths of workers that lived less than `STABLE`.
    quick_deaths: u32,
}

impl Backoff {
    /// A serving worker died after living `lived`: how long to wait before the restart.
    pub(crate) fn on_death(&mut self, lived: Duration) -> Duration {
        if lived >= STABLE {
            self.quick_deaths = 0;
        }
        let delay = match self.quick_deaths {
            0 => Duration::ZERO,
            n => FIRST_DELAY.saturating_mul(1 << (n - 1).min(16)).min(MAX_DELAY),
        };
        self.quick_deaths = self.quick_deaths.saturating_add(1);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immediate_then_doubling_then_capped_then_reset() {
        let mut b = Backoff::default();
        let quick = Duration::from_millis(50);
        let delays: Vec<u128> = (0..10).map(|_| b.on_death(quick).as_millis()).collect();
        assert_eq!(delays, [0, 100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000]);
        assert_eq!(b.on_death(STABLE), Duration::ZERO, "a healthy run resets the backoff");
        assert_eq!(b.on_death(quick), FIRST_DELAY);
    }
}
