//! Weighted least connections (HAProxy's `leastconn`): the usable server whose live load
//! (connections open plus requests queued, process-wide: every worker's slots, not this
//! thread's view) divided by its weight is lowest. Ties go round-robin: the scan starts
//! after the last winner, so servers equally loaded take turns.
//!
//! Cost: one pass over the set, two relaxed loads per usable server; no allocation.

use super::{Balancer, Candidate, PickContext, lighter};

pub(crate) struct LeastConn {
    weights: Vec<u32>,
    /// Where the next scan starts (one past the last winner): the round-robin tie break.
    next: usize,
}

impl LeastConn {
    pub(crate) fn new(servers: &[Candidate], worker: usize) -> Self {
        LeastConn {
            weights: servers.iter().map(|s| s.weight).collect(),
            // Workers start apart so their tie breaks do not all land on server 0.
            next: worker.checked_rem(servers.len()).unwrap_or(0),
        }
    }

    pub(crate) fn boxed(servers: &[Candidate], worker: usize) -> Box<dyn Balancer> {
        Box::new(Self::new(servers, worker))
    }
}

impl Balancer for LeastConn {
    fn pick(&mut self, ctx: &PickContext<'_>) -> Option<usize> {
        let n = self.weights.len();
        let mut best: Option<(usize, u32, u32)> = None;
        // From `next` to the end, then from the start: no division per candidate.
        for i in (self.next..n).chain(0..self.next.min(n)) {
            let weight = self.weights.get(i).copied().unwrap_or(0);
            if weight == 0 || !ctx.usable(i) {
                continue;
            }
            let load = ctx.load(i);
            // Strictly lighter only: among equals the first in scan order wins.
            if best.is_none_or(|(_, bl, bw)| lighter(load, weight, bl, bw)) {
                best = Some((i, load, weight));
            }
        }
        let (winner, _, _) = best?;
        self.next = (winner + 1) % n;
        Some(winner)
    }

    fn set_weight(&mut self, index: usize, weight: u32) {
        if let Some(w) = self.weights.get_mut(index) {
            *w = weight;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::balance::{candidates_of, hold, test_servers};

    #[test]
    fn ties_rotate_and_load_wins() {
        let servers = test_servers(&[1, 1, 1]);
        let mut lc = LeastConn::new(&candidates_of(&servers), 0);
        let all = |_: usize| true;
        let ctx = PickContext::new(&servers, &all, None);
        let seq: Vec<Option<usize>> = (0..4).map(|_| lc.pick(&ctx)).collect();
        assert_eq!(seq, [Some(0), Some(1), Some(2), Some(0)]);
        let _held = hold(&servers, &[(0, 2), (2, 1)]);
        assert_eq!(lc.pick(&ctx), Some(1));
        assert_eq!(lc.pick(&ctx), Some(1));
    }

    #[test]
    fn weight_divides_load() {
        // 3 on a weight-4 server (0.75) is lighter than 1 on a weight-1 server.
        let servers = test_servers(&[1, 4]);
        let mut lc = LeastConn::new(&candidates_of(&servers), 0);
        let _held = hold(&servers, &[(0, 1), (1, 3)]);
        let all = |_: usize| true;
        assert_eq!(lc.pick(&PickContext::new(&servers, &all, None)), Some(1));
    }

    proptest! {
        /// Never an unusable server nor one at weight 0; always one of minimal load/weight;
        /// None when nothing is usable.
        #[test]
        fn picks_a_least_loaded_usable_server(
            spec in proptest::collection::vec((0u32..=256, 0u32..6, any::<bool>()), 1..10),
            worker in 0usize..4,
            picks in 1usize..20,
        ) {
            let weights: Vec<u32> = spec.iter().map(|s| s.0).collect();
            let servers = test_servers(&weights);
            let loads: Vec<(usize, u32)> = spec.iter().enumerate().map(|(i, s)| (i, s.1)).collect();
            let _held = hold(&servers, &loads);
            let usable = |i: usize| spec.get(i).is_some_and(|s| s.2);
            let ctx = PickContext::new(&servers, &usable, None);
            let mut lc = LeastConn::new(&candidates_of(&servers), worker);
            for _ in 0..picks {
                let got = lc.pick(&ctx);
                let Some(i) = got else {
                    prop_assert!(spec.iter().all(|s| !s.2 || s.0 == 0));
                    continue;
                };
                prop_assert!(usable(i) && spec[i].0 > 0);
                let (load, weight) = (spec[i].1, spec[i].0);
                for (j, other) in spec.iter().enumerate() {
                    if other.2 && other.0 > 0 {
                        prop_assert!(!lighter(other.1, other.0, load, weight), "{j} lighter than {i}");
                    }
                }
            }
        }
    }
}
