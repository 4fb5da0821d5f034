//! Property tests: the window against a naive model that keeps every period's count, and
//! the table's counts under random interleavings (threads racing on shared keys; check and
//! release in random order against a model of what is in flight).
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;

use super::table::{Check, StickTable};
use super::window::{Admit, Counts, Window};
use crate::config::limit::{Limit, LimitAction, LimitKey, Rate};

const T0: u64 = 1_700_000_000_000;

fn spec(rate: Option<u64>, concurrent: u32, size: u32) -> Limit {
    Limit {
        name: "p".into(),
        key: LimitKey::Source,
        rate: rate.map(|count| Rate {
            count,
            period: Duration::from_millis(100),
        }),
        burst: 0,
        concurrent,
        action: LimitAction::TooMany,
        size,
        expire: Duration::from_secs(60),
    }
}

proptest! {
    /// Without burst, `admit` is exactly the naive sliding window: every period's admitted
    /// count kept, the previous one weighted by what is left of the current period.
    #[test]
    fn window_matches_the_naive_model(
        period in 1u64..500,
        rate in 1u64..50,
        steps in proptest::collection::vec((0u64..300, 1usize..8), 1..200),
    ) {
        let w = Window { period_ms: period, rate, burst: 0 };
        let mut c = Counts::default();
        let mut naive: HashMap<u64, u64> = HashMap::new();
        let mut now = T0;
        for (dt, tries) in steps {
            now += dt;
            for _ in 0..tries {
                let p = now / period;
                let cur = naive.get(&p).copied().unwrap_or(0);
                let prev = p.checked_sub(1).and_then(|q| naive.get(&q)).copied().unwrap_or(0);
                let left = period - now % period;
                let expect = cur + 1 + prev * left / period <= rate;
                let got = c.admit(&w, now);
                prop_assert_eq!(got == Admit::Rate, expect, "at {} (cur {} prev {})", now, cur, prev);
                if expect {
                    *naive.entry(p).or_default() += 1;
                }
                prop_assert!(naive.get(&p).copied().unwrap_or(0) <= rate);
                prop_assert_eq!(c.estimate(&w, now), cur + u64::from(expect) + prev * left / period);
                if let Admit::Wait(d) = got {
                    // The wait is exact: one ms earlier the rate still refuses.
                    let mut later = c;
                    prop_assert_eq!(later.admit(&w, now + d), Admit::Rate);
                    if d > 1 {
                        let mut earlier = c;
                        prop_assert!(matches!(earlier.admit(&w, now + d - 1), Admit::Wait(_)));
                    }
                }
            }
        }
    }

    /// With burst, no period ever admits more than `rate + 2 × burst` (a full bucket, and
    /// what refills during the period).
    #[test]
    fn burst_bounds_every_period(
        rate in 1u64..20,
        burst in 0u64..20,
        steps in proptest::collection::vec(0u64..60, 1..300),
    ) {
        let w = Window { period_ms: 100, rate, burst };
        let mut c = Counts::default();
        let mut per_period: HashMap<u64, u64> = HashMap::new();
        let mut now = T0;
        for dt in steps {
            now += dt;
            if matches!(c.admit(&w, now), Admit::Rate | Admit::Burst) {
                *per_period.entry(now / 100).or_default() += 1;
            }
        }
        prop_assert!(per_period.values().all(|&n| n <= rate + 2 * burst), "{:?}", per_period);
    }

    /// With burst, the wait a refusal names is right: a request then is admitted.
    #[test]
    fn burst_waits_are_kept(
        rate in 1u64..20,
        burst in 1u64..20,
        steps in proptest::collection::vec(0u64..60, 1..300),
    ) {
        let w = Window { period_ms: 100, rate, burst };
        let mut c = Counts::default();
        let mut now = T0;
        for dt in steps {
            now += dt;
            if let Admit::Wait(d) = c.admit(&w, now) {
                let mut later = c;
                prop_assert!(matches!(later.admit(&w, now + d), Admit::Rate | Admit::Burst), "wait {} at {}", d, now);
            }
        }
    }

    /// Checks and releases in random order: a key is admitted exactly while fewer than
    /// `concurrent` of its requests are in flight.
    #[test]
    fn in_flight_matches_the_model(ops in proptest::collection::vec((0u8..4, any::<bool>()), 1..300)) {
        let t = StickTable::new(&spec(None, 3, 100));
        let mut held: HashMap<u8, Vec<super::table::Mark>> = HashMap::new();
        for (key, release) in ops {
            let mine = held.entry(key).or_default();
            if release && !mine.is_empty() {
                t.release(mine.remove(0));
                continue;
            }
            match t.check(&[key], T0) {
                Check::Pass(Some(m)) => {
                    prop_assert!(mine.len() < 3);
                    mine.push(m);
                }
                Check::Deny(_) => prop_assert_eq!(mine.len(), 3),
                Check::Pass(None) => prop_assert!(false, "untracked with room"),
            }
        }
    }
}

/// Four threads race on three keys: each key is admitted exactly `rate` times in all, however
/// the threads interleave (no per-thread undercount, no double count).
#[test]
fn racing_threads_admit_exactly_the_rate() {
    let table = std::sync::Arc::new(StickTable::new(&Limit {
        rate: Some(Rate {
            count: 500,
            period: Duration::from_secs(3600),
        }),
        expire: Duration::from_secs(7200),
        ..spec(None, 0, 1000)
    }));
    let now = super::now_ms();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let t = std::sync::Arc::clone(&table);
            std::thread::spawn(move || {
                let mut admitted = [0u64; 3];
                for i in 0..3000usize {
                    let key = i % 3;
                    if t.check(&[key as u8], now) == Check::Pass(None) {
                        admitted[key] += 1;
                    }
                }
                admitted
            })
        })
        .collect();
    let mut total = [0u64; 3];
    for t in threads {
        for (sum, n) in total.iter_mut().zip(t.join().unwrap()) {
            *sum += n;
        }
    }
    assert_eq!(total, [500, 500, 500]);
}
