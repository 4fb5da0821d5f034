//! When checks run, sans-io: a server's first check at a uniformly random offset within the
//! interval (so a process start or a reload never checks every server at once), each next
//! one `interval ± jitter` after the previous one ended (HAProxy's `spread-checks`).
//!
//! The randomness is xorshift64*: spreading checks needs no cryptography, only a different
//! sequence per server and per process.

use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator seeded from `salt` (e.g. the server's id) and the clock.
    pub(crate) fn seeded(salt: u64) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng::from_seed(now ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(std::process::id()))
    }

    pub(crate) fn from_seed(seed: u64) -> Self {
        // Zero is xorshift's fixed point.
        Rng(if seed == 0 { 0x2545_F491_4F6C_DD1D } else { seed })
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The first check's offset: uniform in `[0, interval)`.
    pub(crate) fn first_offset(&mut self, interval: Duration) -> Duration {
        interval.mul_f64(self.unit())
    }

    /// The delay to the next check: `interval × (1 + u)`, `u` uniform in `[-j, +j]`,
    /// `j = jitter_percent / 100` (at most 0.5, so a delay is never below half the interval).
    pub(crate) fn next_delay(&mut self, interval: Duration, jitter_percent: u32) -> Duration {
        let j = f64::from(jitter_percent.min(50)) / 100.0;
        interval.mul_f64(1.0 + j * (2.0 * self.unit() - 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_cover_the_interval_evenly() {
        let mut rng = Rng::from_seed(7);
        let interval = Duration::from_secs(1);
        let mut buckets = [0u32; 10];
        for _ in 0..10_000 {
            let o = rng.first_offset(interval);
            assert!(o < interval);
            buckets[(o.as_millis() / 100) as usize] += 1;
        }
        // Each tenth of the interval gets about a tenth of the first checks.
        assert!(buckets.iter().all(|b| (800..1200).contains(b)), "{buckets:?}");
    }

    #[test]
    fn delays_stay_within_the_jitter_and_average_the_interval() {
        let mut rng = Rng::from_seed(11);
        let interval = Duration::from_secs(2);
        let mut total = Duration::ZERO;
        for _ in 0..10_000 {
            let d = rng.next_delay(interval, 10);
            assert!(
                d >= Duration::from_millis(1800) && d <= Duration::from_millis(2200),
                "{d:?}"
            );
            total += d;
        }
        let mean = total / 10_000;
        assert!(
            mean > Duration::from_millis(1980) && mean < Duration::from_millis(2020),
            "{mean:?}"
        );
        assert_eq!(rng.next_delay(interval, 0), interval);
    }
}
