//! One key's sliding window, sans-io: two fixed buckets (the current period and the one
//! before), the previous one weighted by the share of the window not yet elapsed (HAProxy's
//! `freq_ctr`). Period indexes come from the wall clock (`unix ms / period`), so every
//! instance agrees on where a period starts: counts pushed to a shared store add up.
//!
//! A request is admitted at rate when, counting it, `cur + ⌊prev × (P − e) / P⌋ ≤ rate`
//! (`e`: the time elapsed in the current period, `P` the period), in integers. Rounding the
//! weighted part down is HAProxy's choice too: a client that saturates its limit gets
//! exactly `rate` in each period (by its end), not one less. Admitted requests count; refused ones do not (a client over its rate
//! gets `rate` requests per window, however hard it pushes).
//!
//! `burst`: a token bucket of `burst` requests per key, full at first and refilled
//! continuously at `burst` per period. A request the rate refuses is admitted while a token
//! is left, using it (and counting in the window like any other). So a key that kept under
//! its rate may go `burst` above it at once; within one period at most `rate + 2 × burst`
//! pass (a full bucket plus what refills meanwhile); and a client that never stops gets
//! `max(rate, burst)` per period in the long run, since requests taken with a token keep the
//! window's estimate up and so delay the ones the rate admits.
//!
//! With a remote total (all instances' counts for a period, from the shared store) the
//! count of a bucket is `remote + (local − pushed)`: the remote total already holds what this
//! instance pushed. Without one it is the local count. What is counted here since the last
//! sync is scaled by `remote_scale`: the sync's estimate of how many requests all instances
//! admit per request this one admits (others admit meanwhile too, unseen until the next
//! sync); 1 when alone or unknown. Without it, N instances each filling the room a sync
//! showed would overshoot by the others' share of one interval, at every interval.

/// The window's rule: at most `rate` per `period_ms`, `burst` above it at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub period_ms: u64,
    pub rate: u64,
    pub burst: u64,
}

/// One key's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// The wall-clock period index `cur` counts in (0: never counted).
    pub period: u64,
    pub cur: u64,
    /// Counted in `period - 1`.
    pub prev: u64,
    /// Of `cur` and `prev`, what was handed to the shared store already.
    pub pushed_cur: u64,
    pub pushed_prev: u64,
    /// The period of the last remote totals (0: none known), the total of that period and
    /// of the one before.
    pub remote_period: u64,
    pub remote_cur: u64,
    pub remote_prev: u64,
    /// All instances' admissions per own admission, ×256 (0 or 256: one, this instance alone).
    pub remote_scale: u32,
    /// Burst tokens, in token·ms (one token = `period_ms` of them), and when last refilled.
    pub credit: u64,
    pub credit_at: u64,
    /// `credit` was filled once (a new key starts with a full bucket).
    pub credit_started: bool,
}

/// How a request fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Within the rate.
    Rate,
    /// Above the rate, on a burst token.
    Burst,
    /// Refused: the rate admits the next request in this many milliseconds (at least 1).
    Wait(u64),
}

impl Counts {
    /// Moves the buckets to `period` (the current one): a period later, `cur` becomes
    /// `prev`; two or more, both start over.
    pub(crate) fn roll(&mut self, period: u64) {
        if period <= self.period {
            return;
        }
        if period == self.period + 1 {
            self.prev = self.cur;
            self.pushed_prev = self.pushed_cur;
        } else {
            self.prev = 0;
            self.pushed_prev = 0;
        }
        self.cur = 0;
        self.pushed_cur = 0;
        self.period = period;
    }

    /// The counts the decision uses for the current (`period`, rolled to) and previous bucket.
    pub(crate) fn effective(&self, period: u64) -> (u64, u64) {
        let local_cur = self.cur.saturating_sub(self.pushed_cur);
        let local_prev = self.prev.saturating_sub(self.pushed_prev);
        let scaled = |n: u64| match self.remote_scale {
            0..=256 => n,
            k => n.saturating_mul(u64::from(k)) >> 8,
        };
        match self.remote_period {
            0 => (self.cur, self.prev),
            r if r == period => (self.remote_cur + scaled(local_cur), self.remote_prev + local_prev),
            // Nothing known of the new period yet: what this one counted in it, scaled.
            r if r + 1 == period => (scaled(self.cur), self.remote_cur + local_prev),
            _ => (self.cur, self.prev),
        }
    }

    /// The window's estimate at `now_ms`: the current bucket plus the previous one weighted
    /// by what is left of the period (rounded down).
    pub(crate) fn estimate(&self, w: &Window, now_ms: u64) -> u64 {
        let period = now_ms / w.period_ms;
        let mut c = *self;
        c.roll(period);
        let (cur, prev) = c.effective(period);
        let left = w.period_ms - now_ms % w.period_ms;
        cur.saturating_add(weighted(prev, left, w.period_ms))
    }

    /// Decides one request at `now_ms` and counts it if admitted.
    pub(crate) fn admit(&mut self, w: &Window, now_ms: u64) -> Admit {
        let period = now_ms / w.period_ms;
        let elapsed = now_ms % w.period_ms;
        self.roll(period);
        let (cur, prev) = self.effective(period);
        let left = w.period_ms - elapsed;
        if cur.saturating_add(1).saturating_add(weighted(prev, left, w.period_ms)) <= w.rate {
            self.cur += 1;
            return Admit::Rate;
        }
        if w.burst > 0 {
            let full = w.burst * w.period_ms;
            if !self.credit_started {
                (self.credit, self.credit_started) = (full, true);
            } else {
                let refill = now_ms.saturating_sub(self.credit_at).saturating_mul(w.burst);
                self.credit = self.credit.saturating_add(refill).min(full);
            }
            self.credit_at = now_ms;
            if self.credit >= w.period_ms {
                self.credit -= w.period_ms;
                self.cur += 1;
                return Admit::Burst;
            }
            // A token is back in (P − credit) / burst ms, unless the rate admits sooner.
            let token = (w.period_ms - self.credit).div_ceil(w.burst);
            return Admit::Wait(wait_ms(w, cur, prev, elapsed).min(token).max(1));
        }
        Admit::Wait(wait_ms(w, cur, prev, elapsed).max(1))
    }
}

/// `⌊prev × left / period⌋`, in u64 unless the product overflows it (only remote totals
/// that large could).
#[inline]
fn weighted(prev: u64, left: u64, period: u64) -> u64 {
    match prev.checked_mul(left) {
        Some(product) => product / period,
        None => u64::try_from(u128::from(prev) * u128::from(left) / u128::from(period)).unwrap_or(u64::MAX),
    }
}

/// How long until the rate admits one more request, nothing else being counted meanwhile.
fn wait_ms(w: &Window, cur: u64, prev: u64, elapsed: u64) -> u64 {
    let p = u128::from(w.period_ms);
    let left = w.period_ms - elapsed;
    if cur < w.rate {
        // This period: ⌊prev × (left − d) / P⌋ ≤ rate − cur − 1, i.e.
        // prev × (left − d) < (rate − cur) × P.
        let room = u128::from(w.rate - cur) * p - 1;
        let allowed = if prev == 0 { u128::MAX } else { room / u128::from(prev) };
        return u64::try_from(u128::from(left).saturating_sub(allowed)).unwrap_or(u64::MAX);
    }
    // The next one: `cur` becomes the previous bucket; 1 + ⌊cur × (P − e') / P⌋ ≤ rate, i.e.
    // cur × (P − e') < rate × P.
    let allowed = (u128::from(w.rate) * p - 1) / u128::from(cur.max(1));
    let into_next = p.saturating_sub(allowed);
    left.saturating_add(u64::try_from(into_next).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Window = Window {
        period_ms: 1000,
        rate: 10,
        burst: 0,
    };

    /// Admits as many as the window lets through at `now`.
    fn drain(c: &mut Counts, w: &Window, now: u64) -> u64 {
        let mut n = 0;
        while matches!(c.admit(w, now), Admit::Rate | Admit::Burst) {
            n += 1;
            assert!(n <= 1_000_000, "bounded");
        }
        n
    }

    #[test]
    fn a_saturating_client_gets_the_rate_per_window() {
        let mut c = Counts::default();
        let start = 1_000_000;
        assert_eq!(drain(&mut c, &W, start + 300), 10);
        // Next period, a fifth in: the previous bucket still weighs 4/5 × 10 = 8.
        assert_eq!(drain(&mut c, &W, start + 1200), 2);
        // At its end, the whole rate: 10 in the period.
        assert_eq!(drain(&mut c, &W, start + 1999), 8);
        assert_eq!(c.estimate(&W, start + 1999), 10);
        // Two periods of silence: everything forgotten.
        assert_eq!(drain(&mut c, &W, start + 4000), 10);
    }

    #[test]
    fn the_wait_is_when_the_next_request_fits() {
        let mut c = Counts::default();
        let now = 5_000_250;
        assert_eq!(drain(&mut c, &W, now), 10);
        let Admit::Wait(d) = c.admit(&W, now) else { panic!() };
        // Next period at +750; there prev = 10 weighs ⌊10 × 999/1000⌋ = 9 one ms in.
        assert_eq!(d, 750 + 1);
        let mut probe = c;
        assert!(matches!(probe.admit(&W, now + d - 1), Admit::Wait(_)));
        assert_eq!(c.admit(&W, now + d), Admit::Rate);
    }

    #[test]
    fn burst_goes_above_the_rate_once_then_refills_over_a_window() {
        let w = Window { burst: 5, ..W };
        let mut c = Counts::default();
        let now = 9_000_000;
        assert_eq!(drain(&mut c, &w, now), 15);
        // Half a window later, half the tokens are back (and the rate has no room yet).
        assert_eq!(drain(&mut c, &w, now + 500), 2);
        // Half a token is left: the next one is back in 100 ms (1000 / 5 per token).
        assert_eq!(c.admit(&w, now + 500), Admit::Wait(100));
        assert_eq!(c.admit(&w, now + 600), Admit::Burst);
    }

    #[test]
    fn remote_totals_replace_what_was_pushed() {
        let mut c = Counts::default();
        let now = 2_000_100;
        for _ in 0..4 {
            c.admit(&W, now);
        }
        c.pushed_cur = 4;
        // Other instances counted 5 more: 9 in all; one more fits.
        c.remote_period = now / 1000;
        c.remote_cur = 9;
        assert_eq!(c.effective(now / 1000), (9, 0));
        assert_eq!(drain(&mut c, &W, now), 1);
        // Next period: the remote total is the previous bucket's.
        c.roll(now / 1000 + 1);
        assert_eq!(c.effective(now / 1000 + 1), (0, 10));
    }

    #[test]
    fn counts_since_the_last_sync_are_scaled_by_the_instances_share() {
        let mut c = Counts::default();
        let now = 2_000_100;
        for _ in 0..4 {
            c.admit(&W, now);
        }
        c.pushed_cur = 3;
        (c.remote_period, c.remote_cur, c.remote_scale) = (now / 1000, 6, 512);
        // One counted since the sync; the others admitted as many meanwhile (×2).
        assert_eq!(c.effective(now / 1000), (8, 0));
        c.roll(now / 1000 + 1);
        c.cur = 3;
        assert_eq!(c.effective(now / 1000 + 1), (6, 7));
        c.remote_scale = 0;
        assert_eq!(c.effective(now / 1000 + 1), (3, 7));
    }
}
