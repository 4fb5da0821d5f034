//! One idle watchdog per connection instead of a timer per read or write.
//!
//! The relay bumps a plain progress counter for every chunk it moves (an integer add, no
//! clock read, no timer touched); the watchdog wakes every `idle / 4`, compares, and
//! resolves once nothing moved for `idle`. A stalled connection is therefore closed between
//! `idle` and `1.25 × idle` after its last byte.

use std::cell::Cell;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior, interval_at};

/// Bytes moved by a connection in either direction, as the watchdog sees them.
#[derive(Debug, Default)]
pub struct Progress(Cell<u64>);

impl Progress {
    #[inline]
    pub fn moved(&self, bytes: usize) {
        self.0.set(self.0.get().wrapping_add(bytes as u64));
    }

    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

/// Resolves when `progress` has not changed for `idle`.
pub async fn watchdog(progress: &Progress, idle: Duration) {
    let tick = (idle / 4).max(Duration::from_millis(1));
    let mut ticks = interval_at(Instant::now() + tick, tick);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last = progress.get();
    let mut quiet = Duration::ZERO;
    loop {
        ticks.tick().await;
        let now = progress.get();
        if now != last {
            last = now;
            quiet = Duration::ZERO;
        } else {
            quiet += tick;
            if quiet >= idle {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn fires_between_idle_and_one_and_a_quarter_idle() {
        let progress = Progress::default();
        let start = Instant::now();
        watchdog(&progress, Duration::from_secs(4)).await;
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(4) && waited <= Duration::from_secs(5),
            "{waited:?}"
        );
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn progress_keeps_it_quiet() {
        let progress = Progress::default();
        let start = Instant::now();
        let feeder = async {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                progress.moved(1);
            }
        };
        let ((), fired_at) = tokio::join!(feeder, async {
            watchdog(&progress, Duration::from_secs(2)).await;
            start.elapsed()
        });
        // It fires only after the feeder stops: 10 s of trickle, then 2 to 2.5 s of quiet.
        assert!(
            fired_at >= Duration::from_secs(12) && fired_at <= Duration::from_millis(12_500),
            "{fired_at:?}"
        );
    }
}
