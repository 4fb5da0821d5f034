//! First available (HAProxy's `first`): the usable server earliest in config order. Usable
//! already excludes servers at their `maxconn`, so servers fill in order, each up to its
//! `maxconn`, and the later ones stay idle (and can be shut down) while the early ones
//! have room. Weights play no part. Stateless: one pass that stops at the first hit.

use super::{Balancer, Candidate, PickContext};

pub(crate) struct First {
    len: usize,
}

impl First {
    pub(crate) fn new(servers: &[Candidate], _worker: usize) -> Self {
        First { len: servers.len() }
    }

    pub(crate) fn boxed(servers: &[Candidate], worker: usize) -> Box<dyn Balancer> {
        Box::new(Self::new(servers, worker))
    }
}

impl Balancer for First {
    fn pick(&mut self, ctx: &PickContext<'_>) -> Option<usize> {
        (0..self.len).find(|&i| ctx.usable(i))
    }

    /// A weight of 0 already makes the server unusable; other weights do not matter here.
    fn set_weight(&mut self, _index: usize, _weight: u32) {}
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::balance::{candidates_of, test_servers};

    proptest! {
        /// Always the lowest usable index; None when nothing is usable.
        #[test]
        fn picks_the_lowest_usable_index(
            usable_flags in proptest::collection::vec(any::<bool>(), 1..40),
            worker in 0usize..4,
        ) {
            let servers = test_servers(&vec![1; usable_flags.len()]);
            let usable = |i: usize| usable_flags.get(i).copied().unwrap_or(false);
            let ctx = PickContext::new(&servers, &usable, None);
            let mut first = First::new(&candidates_of(&servers), worker);
            prop_assert_eq!(first.pick(&ctx), usable_flags.iter().position(|&u| u));
        }
    }
}
