//! Smooth weighted round-robin (nginx's): each pick adds every usable server's weight to its
//! running score, takes the highest, and subtracts the total from the winner. Over one cycle
//! of `sum(weights)` picks each server is chosen exactly `weight` times, interleaved
//! (5:1:1 gives a a b a c a a, not a a a a a b c).
//!
//! Each worker owns its own state. Worker `w` starts `w` picks into the cycle, so a client
//! whose consecutive connections land on different workers still sees the rotation.

use super::{Balancer, Candidate, PickContext};

pub(crate) struct RoundRobin {
    weights: Vec<i64>,
    scores: Vec<i64>,
}

impl RoundRobin {
    pub(crate) fn new(servers: &[Candidate], worker: usize) -> Self {
        let mut rr = RoundRobin {
            weights: servers.iter().map(|s| i64::from(s.weight)).collect(),
            scores: vec![0; servers.len()],
        };
        for _ in 0..worker {
            rr.advance(|_| true);
        }
        rr
    }

    pub(crate) fn boxed(servers: &[Candidate], worker: usize) -> Box<dyn Balancer> {
        Box::new(Self::new(servers, worker))
    }
}

impl Balancer for RoundRobin {
    fn pick(&mut self, ctx: &PickContext<'_>) -> Option<usize> {
        self.advance(|i| ctx.usable(i))
    }

    fn set_weight(&mut self, index: usize, weight: u32) {
        if let Some(w) = self.weights.get_mut(index) {
            *w = i64::from(weight);
        }
        if let Some(s) = self.scores.get_mut(index) {
            *s = 0;
        }
    }
}

impl RoundRobin {
    /// One step of the smooth rotation over the servers `usable` accepts.
    fn advance(&mut self, usable: impl Fn(usize) -> bool) -> Option<usize> {
        let mut total = 0;
        let mut best: Option<usize> = None;
        let mut best_score = i64::MIN;
        for (i, (score, weight)) in self.scores.iter_mut().zip(&self.weights).enumerate() {
            if *weight == 0 || !usable(i) {
                continue;
            }
            *score += weight;
            total += weight;
            if *score > best_score {
                best_score = *score;
                best = Some(i);
            }
        }
        if let Some(score) = best.and_then(|i| self.scores.get_mut(i)) {
            *score -= total;
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates(weights: &[u32]) -> Vec<Candidate> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &weight)| Candidate {
                id: crate::live::ServerId(i as u32),
                weight,
                name_hash: 0,
            })
            .collect()
    }

    #[test]
    fn smooth_and_exact_over_a_cycle() {
        let mut rr = RoundRobin::new(&candidates(&[5, 1, 1]), 0);
        let seq: Vec<usize> = (0..7).filter_map(|_| rr.advance(|_| true)).collect();
        assert_eq!(seq, [0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn weights_hold_across_workers_and_skips() {
        let mut counts = [0usize; 3];
        for worker in 0..2 {
            let mut rr = RoundRobin::new(&candidates(&[1, 2, 3]), worker);
            for _ in 0..300 {
                counts[rr.advance(|_| true).expect("a server")] += 1;
            }
        }
        assert_eq!(counts, [100, 200, 300]);
        let mut rr = RoundRobin::new(&candidates(&[1, 1]), 0);
        assert_eq!(rr.advance(|i| i == 1), Some(1));
        assert_eq!(rr.advance(|_| false), None);
    }

    #[test]
    fn workers_start_at_different_points() {
        let first = |w| RoundRobin::new(&candidates(&[1, 1]), w).advance(|_| true);
        assert_ne!(first(0), first(1));
    }
}

#[cfg(test)]
mod context_tests {
    use super::*;
    use crate::balance::{PickContext, test_servers};

    #[test]
    fn a_thousand_servers_share_picks_evenly_through_the_context() {
        let servers = test_servers(&vec![1; 1000]);
        let candidates: Vec<Candidate> = servers
            .iter()
            .map(|s| Candidate {
                id: s.id,
                weight: s.weight(),
                name_hash: 0,
            })
            .collect();
        let mut rr = RoundRobin::new(&candidates, 0);
        let mut counts = vec![0u32; 1000];
        let all = |_: usize| true;
        let ctx = PickContext::new(&servers, &all, None);
        for _ in 0..5000 {
            counts[rr.pick(&ctx).expect("a server")] += 1;
        }
        assert!(counts.iter().all(|&c| c == 5), "uneven: {:?}", &counts[..10]);
        // Unusable servers are skipped; the rest share their picks.
        let odd = |i: usize| i % 2 == 1;
        let ctx = PickContext::new(&servers, &odd, None);
        let mut counts = vec![0u32; 1000];
        for _ in 0..1000 {
            counts[rr.pick(&ctx).expect("a server")] += 1;
        }
        assert!(
            counts
                .iter()
                .enumerate()
                .all(|(i, &c)| if i % 2 == 1 { c == 2 } else { c == 0 })
        );
    }
}
