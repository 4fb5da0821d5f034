//! When to order next, sans-io: renewal at two thirds of a certificate's lifetime (or
//! `renew_before` its end), and the backoff of failed attempts. Both are jittered so that
//! many certificates (or many tollgates behind one CA) do not all ask at the same second.

use std::time::{Duration, SystemTime};

/// The first retry after a failed order; each further failure doubles it...
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_secs(2);
/// ...up to this (a CA's failed-validation limits count per hour).
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(3600);

/// When a certificate valid `not_before..not_after` is renewed: at two thirds of its
/// lifetime, or `renew_before` its end when given (never before `not_before`), moved
/// earlier by up to `jitter` (0.0..1.0) of a twentieth of its lifetime.
pub(crate) fn renew_at(
    not_before: SystemTime,
    not_after: SystemTime,
    renew_before: Option<Duration>,
    jitter: f64,
) -> SystemTime {
    let lifetime = not_after.duration_since(not_before).unwrap_or_default();
    let at = match renew_before {
        Some(before) => not_after.checked_sub(before).unwrap_or(not_before).max(not_before),
        None => not_before + lifetime * 2 / 3,
    };
    let spread = lifetime.div_f64(20.0).mul_f64(jitter.clamp(0.0, 1.0));
    at.checked_sub(spread).unwrap_or(at).max(not_before)
}

/// The wait after the `failures`-th failure in a row (1 = the first), jittered by
/// `jitter` (0.0..1.0) within ±20 %.
pub(crate) fn backoff(failures: u32, jitter: f64) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    let base = BACKOFF_FIRST.saturating_mul(1u32 << doublings).min(BACKOFF_MAX);
    base.mul_f64(0.8 + 0.4 * jitter.clamp(0.0, 1.0))
}

/// A number in 0.0..1.0 that differs between calls (clock nanoseconds through a mixer):
/// jitter needs no better randomness.
pub(crate) fn jitter() -> f64 {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mixed = xxhash_rust::xxh3::xxh3_64(&(u64::from(nanos) ^ u64::from(std::process::id())).to_le_bytes());
    (mixed >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: SystemTime = SystemTime::UNIX_EPOCH;

    #[test]
    fn renewal_at_two_thirds_moved_earlier_by_jitter() {
        let day = Duration::from_secs(86_400);
        let end = T0 + day * 90;
        assert_eq!(renew_at(T0, end, None, 0.0), T0 + day * 60);
        // the most jitter: a twentieth of 90 days earlier
        assert_eq!(renew_at(T0, end, None, 1.0), T0 + day * 60 - day * 90 / 20);
        assert!(renew_at(T0, end, None, 0.5) < T0 + day * 60);
    }

    #[test]
    fn renew_before_counts_from_the_end_and_never_before_the_start() {
        let end = T0 + Duration::from_secs(100);
        assert_eq!(
            renew_at(T0, end, Some(Duration::from_secs(10)), 0.0),
            T0 + Duration::from_secs(90)
        );
        assert_eq!(renew_at(T0, end, Some(Duration::from_secs(1000)), 0.0), T0);
    }

    #[test]
    fn backoff_doubles_and_is_bounded() {
        assert_eq!(backoff(1, 0.5), BACKOFF_FIRST);
        assert_eq!(backoff(2, 0.5), BACKOFF_FIRST * 2);
        assert_eq!(backoff(4, 0.5), BACKOFF_FIRST * 8);
        assert_eq!(backoff(40, 0.5), BACKOFF_MAX);
        assert!(backoff(3, 0.0) >= BACKOFF_FIRST * 4 * 8 / 10);
        assert!(backoff(3, 1.0) <= BACKOFF_FIRST * 4 * 12 / 10);
    }

    #[test]
    fn jitter_is_in_range() {
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j));
        }
    }
}
