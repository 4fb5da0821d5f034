//! Power of two choices on live load (HAProxy's `random`, draws = 2): draw two distinct
//! usable servers, each with probability proportional to its weight, and take the one
//! whose live load (process-wide, as leastconn reads it) divided by weight is lower; on a
//! tie the first drawn. With loads in proportion to weights (all idle, say) this is a
//! weighted random draw; under load it steers away from the busier of the two without
//! leastconn's full scan.
//!
//! A draw is a binary search over cumulative weights, retried a few times when it hits an
//! unusable server; when most servers are unusable, one weighted reservoir pass over the
//! usable ones decides instead (same distribution, bounded work). The generator is a
//! xorshift64* owned by the worker, seeded once per build: no syscall, no allocation, no
//! shared state per pick.

use std::hash::{BuildHasher, Hasher};

use super::{Balancer, Candidate, PickContext, lighter};

/// Rejected draws before falling back to one reservoir pass.
const DRAW_TRIES: usize = 4;

pub(crate) struct Random {
    weights: Vec<u32>,
    /// `cumulative[i]` = sum of `weights[..=i]`.
    cumulative: Vec<u64>,
    rng: XorShift,
}

impl Random {
    pub(crate) fn new(servers: &[Candidate], worker: usize) -> Self {
        // Random per process and per build (RandomState's keys), distinct per worker.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(worker);
        Self::seeded(servers, h.finish())
    }

    pub(crate) fn seeded(servers: &[Candidate], seed: u64) -> Self {
        let weights: Vec<u32> = servers.iter().map(|s| s.weight).collect();
        let mut r = Random {
            cumulative: vec![0; weights.len()],
            weights,
            rng: XorShift::new(seed),
        };
        r.accumulate();
        r
    }

    pub(crate) fn boxed(servers: &[Candidate], worker: usize) -> Box<dyn Balancer> {
        Box::new(Self::new(servers, worker))
    }

    fn accumulate(&mut self) {
        let mut sum = 0u64;
        for (c, w) in self.cumulative.iter_mut().zip(&self.weights) {
            sum += u64::from(*w);
            *c = sum;
        }
    }

    /// One usable server other than `except`, drawn with probability proportional to weight.
    fn draw(&mut self, ctx: &PickContext<'_>, except: Option<usize>) -> Option<usize> {
        let total = self.cumulative.last().copied().unwrap_or(0);
        if total == 0 {
            return None;
        }
        let ok = |i: usize| Some(i) != except && ctx.usable(i);
        for _ in 0..DRAW_TRIES {
            let r = self.rng.below(total);
            let i = self.cumulative.partition_point(|&c| c <= r);
            if ok(i) {
                return Some(i);
            }
        }
        self.reservoir(ok)
    }

    /// Weighted reservoir sampling over the servers `ok` accepts: exact, one pass.
    fn reservoir(&mut self, ok: impl Fn(usize) -> bool) -> Option<usize> {
        let mut seen = 0u64;
        let mut chosen = None;
        for (i, &w) in self.weights.iter().enumerate() {
            if w == 0 || !ok(i) {
                continue;
            }
            seen += u64::from(w);
            if self.rng.below(seen) < u64::from(w) {
                chosen = Some(i);
            }
        }
        chosen
    }
}

impl Balancer for Random {
    fn pick(&mut self, ctx: &PickContext<'_>) -> Option<usize> {
        let a = self.draw(ctx, None)?;
        let Some(b) = self.draw(ctx, Some(a)) else {
            return Some(a);
        };
        let weight = |i: usize| self.weights.get(i).copied().unwrap_or(0);
        Some(if lighter(ctx.load(b), weight(b), ctx.load(a), weight(a)) {
            b
        } else {
            a
        })
    }

    fn set_weight(&mut self, index: usize, weight: u32) {
        if let Some(w) = self.weights.get_mut(index) {
            *w = weight;
            self.accumulate();
        }
    }
}

/// xorshift64* (Vigna): 64 bits of state, good enough to spread picks, never zero.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (`n > 0`) by multiply-shift: no division, bias below 2^-32 for
    /// the totals weights can reach.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::balance::{candidates_of, hold, test_servers};

    fn counts(r: &mut Random, ctx: &PickContext<'_>, picks: usize) -> Vec<usize> {
        let mut counts = vec![0; r.weights.len()];
        for _ in 0..picks {
            counts[r.pick(ctx).expect("a server")] += 1;
        }
        counts
    }

    #[test]
    fn one_to_three_within_five_percent() {
        let servers = test_servers(&[1, 3]);
        let mut r = Random::seeded(&candidates_of(&servers), 7);
        let all = |_: usize| true;
        let got = counts(&mut r, &PickContext::new(&servers, &all, None), 100_000);
        for (got, want) in got.iter().zip([25_000.0, 75_000.0]) {
            assert!((*got as f64 - want).abs() <= want * 0.05, "{got} vs {want}");
        }
    }

    #[test]
    fn the_less_loaded_of_two_wins() {
        // Two servers: both are always drawn, so the idle one always wins.
        let servers = test_servers(&[1, 1]);
        let _held = hold(&servers, &[(0, 3)]);
        let mut r = Random::seeded(&candidates_of(&servers), 1);
        let all = |_: usize| true;
        assert_eq!(counts(&mut r, &PickContext::new(&servers, &all, None), 100), [0, 100]);
    }

    #[test]
    fn mostly_unusable_sets_fall_back_to_the_exact_pass() {
        let servers = test_servers(&vec![1; 100]);
        let mut r = Random::seeded(&candidates_of(&servers), 3);
        let only = |i: usize| i == 57;
        let got = counts(&mut r, &PickContext::new(&servers, &only, None), 50);
        assert_eq!(got[57], 50);
    }

    #[test]
    fn a_weight_set_to_zero_is_never_drawn_and_256_outweighs_1() {
        let servers = test_servers(&[256, 1, 1]);
        let mut r = Random::seeded(&candidates_of(&servers), 11);
        let all = |_: usize| true;
        let ctx = PickContext::new(&servers, &all, None);
        let got = counts(&mut r, &ctx, 25_800);
        assert!(got[0] > 25_000 && got[1] > 0 && got[2] > 0, "{got:?}");
        r.set_weight(0, 0);
        let got = counts(&mut r, &ctx, 1000);
        assert_eq!(got[0], 0);
        assert!(got[1] > 400 && got[2] > 400, "{got:?}");
    }

    proptest! {
        /// Equal (zero) loads: each server's share is its weight's share, within 5 points;
        /// never an unusable server nor one at weight 0; None when nothing is usable.
        #[test]
        fn shares_follow_weights_over_usable_servers(
            spec in proptest::collection::vec((0u32..=256, any::<bool>()), 1..8),
            seed in any::<u64>(),
        ) {
            let weights: Vec<u32> = spec.iter().map(|s| s.0).collect();
            let servers = test_servers(&weights);
            let usable = |i: usize| spec.get(i).is_some_and(|s| s.1);
            let ctx = PickContext::new(&servers, &usable, None);
            let mut r = Random::seeded(&candidates_of(&servers), seed);
            let total: u32 = spec.iter().filter(|s| s.1).map(|s| s.0).sum();
            if total == 0 {
                prop_assert_eq!(r.pick(&ctx), None);
                return Ok(());
            }
            let picks = 10_000;
            let mut counts = vec![0usize; spec.len()];
            for _ in 0..picks {
                let i = r.pick(&ctx);
                prop_assert!(i.is_some_and(usable), "{:?}", i);
                counts[i.unwrap_or(0)] += 1;
            }
            for (i, s) in spec.iter().enumerate() {
                let want = if s.1 { f64::from(s.0) / f64::from(total) } else { 0.0 };
                let got = counts[i] as f64 / picks as f64;
                prop_assert!((got - want).abs() <= 0.05, "server {}: {} vs {}", i, got, want);
            }
        }
    }
}
