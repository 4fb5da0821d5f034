//! The rise/fall state machine of one server, sans-io.
//!
//! Choice (documented in docs/config.md): a checked server starts `unknown`, and `unknown`
//! is usable — a fresh process serves at once instead of waiting `rise × interval`.
//! `fall` consecutive failures mark it `down` (from `unknown` or `up`), `rise` consecutive
//! successes mark it `up` (from `unknown` or `down`). A result that agrees with the current
//! state only resets the opposite streak. A server that starts from a carried state (a
//! reload) starts with both streaks at zero: an `up` one needs `fall` failures to go down,
//! a `down` one `rise` successes to come up — no flap, no shortcut.
//!
//! Invariants: at most one transition per observation; `streak < threshold` whenever the
//! state is not the one that threshold leads to.

use crate::live::server::OperState;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RiseFall {
    state: OperState,
    rise: u32,
    fall: u32,
    /// Consecutive passes (reset by a failure).
    passes: u32,
    /// Consecutive failures (reset by a pass).
    failures: u32,
}

impl RiseFall {
    pub(crate) fn new(state: OperState, rise: u32, fall: u32) -> Self {
        RiseFall {
            state,
            rise: rise.max(1),
            fall: fall.max(1),
            passes: 0,
            failures: 0,
        }
    }

    pub(crate) fn state(&self) -> OperState {
        self.state
    }

    /// One check's result; the new state if it changed.
    pub(crate) fn observe(&mut self, passed: bool) -> Option<OperState> {
        if passed {
            self.failures = 0;
            self.passes = self.passes.saturating_add(1);
            if self.state != OperState::Up && self.passes >= self.rise {
                return self.enter(OperState::Up);
            }
        } else {
            self.passes = 0;
            self.failures = self.failures.saturating_add(1);
            if self.state != OperState::Down && self.failures >= self.fall {
                return self.enter(OperState::Down);
            }
        }
        None
    }

    /// Down by another path (live traffic errors, the agent): checks must now pass `rise`
    /// times in a row to bring it back. The new state if it changed.
    pub(crate) fn force_down(&mut self) -> Option<OperState> {
        if self.state == OperState::Down {
            self.passes = 0;
            return None;
        }
        self.enter(OperState::Down)
    }

    fn enter(&mut self, state: OperState) -> Option<OperState> {
        self.state = state;
        self.passes = 0;
        self.failures = 0;
        Some(state)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn unknown_goes_down_after_fall_and_up_after_rise() {
        let mut m = RiseFall::new(OperState::Unknown, 2, 3);
        assert_eq!(m.observe(false), None);
        assert_eq!(m.observe(false), None);
        assert_eq!(m.observe(false), Some(OperState::Down));
        assert_eq!(m.observe(true), None);
        assert_eq!(m.observe(false), None, "a failure resets the rise streak");
        assert_eq!(m.observe(true), None);
        assert_eq!(m.observe(true), Some(OperState::Up));
        assert_eq!(m.observe(true), None);
    }

    #[test]
    fn carried_states_need_full_streaks() {
        let mut up = RiseFall::new(OperState::Up, 2, 3);
        assert_eq!((up.observe(false), up.observe(false)), (None, None));
        assert_eq!(up.observe(false), Some(OperState::Down));
        let mut down = RiseFall::new(OperState::Down, 2, 3);
        assert_eq!(down.observe(true), None);
        assert_eq!(down.observe(true), Some(OperState::Up));
    }

    #[test]
    fn forced_down_needs_rise_passes() {
        let mut m = RiseFall::new(OperState::Up, 3, 3);
        assert_eq!(m.observe(true), None);
        assert_eq!(m.force_down(), Some(OperState::Down));
        assert_eq!(m.force_down(), None);
        assert_eq!((m.observe(true), m.observe(true)), (None, None));
        assert_eq!(m.observe(true), Some(OperState::Up));
    }

    proptest! {
        /// Whatever the sequence: a transition to down happens exactly when the last `fall`
        /// results failed (and the state was not down), to up exactly when the last `rise`
        /// passed since the previous transition.
        #[test]
        fn transitions_follow_streaks(rise in 1u32..5, fall in 1u32..5, results in proptest::collection::vec(any::<bool>(), 0..200)) {
            let mut m = RiseFall::new(OperState::Unknown, rise, fall);
            let mut since: Vec<bool> = Vec::new();
            for r in results {
                let before = m.state();
                since.push(r);
                let tail = |n: u32, v: bool| since.len() >= n as usize && since.iter().rev().take(n as usize).all(|x| *x == v);
                let expected = if r && before != OperState::Up && tail(rise, true) {
                    Some(OperState::Up)
                } else if !r && before != OperState::Down && tail(fall, false) {
                    Some(OperState::Down)
                } else {
                    None
                };
                prop_assert_eq!(m.observe(r), expected);
                if expected.is_some() {
                    since.clear();
                }
            }
        }
    }
}
