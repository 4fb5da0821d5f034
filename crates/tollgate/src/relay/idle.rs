//! One idle watchdog per connection instead of a timer per read or write.
//!
//! The relay bumps a plain progress counter for every chunk it moves (an integer add, no
//! clock read, no timer touched); the watchdog wakes every `idle / 4`, compares, and
//! reports the connection idle once nothing moved for `idle`. A stalled connection is
//! therefore closed between `idle` and `1.25 × idle` after its last byte.

use std::cell::Cell;
use std::time::Duration;

/// The sans-io part: fed the progress counter at every tick, says when `idle` has passed.
#[derive(Debug)]
pub(crate) struct Watchdog {
    idle: Duration,
    tick: Duration,
    last: u64,
    quiet: Duration,
}

impl Watchdog {
    pub(crate) fn new(idle: Duration) -> Self {
        Watchdog {
            idle,
            tick: (idle / 4).max(Duration::from_millis(1)),
            last: 0,
            quiet: Duration::ZERO,
        }
    }

    /// How often the owner should call `on_tick`.
    pub(crate) fn tick(&self) -> Duration {
        self.tick
    }

    /// Called once per tick with the current progress; true once nothing moved for `idle`.
    pub(crate) fn on_tick(&mut self, progress: u64) -> bool {
        if progress != self.last {
            self.last = progress;
            self.quiet = Duration::ZERO;
            return false;
        }
        self.quiet += self.tick;
        self.quiet >= self.idle
    }
}

/// Bytes moved by a connection in either direction, shared with an async `watchdog`.
#[derive(Debug, Default)]
pub(crate) struct Progress(Cell<u64>);

impl Progress {
    #[inline]
    pub(crate) fn moved(&self, bytes: usize) {
        self.0.set(self.0.get().wrapping_add(bytes as u64));
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.get()
    }
}

/// Resolves when `progress` has not changed for `idle`. One timer, re-armed in place (no
/// allocation).
pub(crate) async fn watchdog(progress: &Progress, idle: Duration) {
    let mut dog = Watchdog::new(idle);
    let sleep = tokio::time::sleep(dog.tick());
    tokio::pin!(sleep);
    loop {
        sleep.as_mut().await;
        if dog.on_tick(progress.get()) {
            return;
        }
        let next = sleep.deadline() + dog.tick();
        sleep.as_mut().reset(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn sans_io_counts_quiet_ticks() {
        let mut dog = Watchdog::new(Duration::from_secs(4));
        assert_eq!(dog.tick(), Duration::from_secs(1));
        assert!(!dog.on_tick(5), "progress resets");
        assert!(!dog.on_tick(5) && !dog.on_tick(5) && !dog.on_tick(5));
        assert!(dog.on_tick(5), "fourth quiet tick = idle");
    }

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
