//! Load-balancing algorithms: one small trait, one file per algorithm, one explicit registry.
//!
//! A `Balancer` is per worker thread (shared-nothing: no lock, no atomic per pick) and
//! sans-io: it sees server indexes, weights and a usability predicate, never sockets.
//! It hears events (weight changed, connection taken/released) so stateful algorithms
//! (leastconn, bounded-load hashing) can plug in without changing callers.

mod roundrobin;

pub use roundrobin::RoundRobin;

/// What a balancer knows about a server: its index in the backend and its weight.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    pub weight: u32,
}

pub trait Balancer {
    /// Chooses one server among those for which `usable(index)` is true.
    fn pick(&mut self, usable: &dyn Fn(usize) -> bool) -> Option<usize>;

    /// A server's weight changed (0 = taken out of rotation).
    fn set_weight(&mut self, index: usize, weight: u32);

    /// A connection to `index` was opened / closed. Stateless algorithms ignore these.
    fn taken(&mut self, _index: usize) {}
    fn released(&mut self, _index: usize) {}
}

pub type Constructor = fn(servers: &[Candidate], worker: usize) -> Box<dyn Balancer>;

/// Every algorithm, by the name used in `backend.balance`.
pub const ALGORITHMS: &[(&str, Constructor)] = &[("roundrobin", RoundRobin::boxed)];

pub const DEFAULT: &str = "roundrobin";

pub fn lookup(name: &str) -> Option<Constructor> {
    ALGORITHMS.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

pub fn names() -> Vec<&'static str> {
    ALGORITHMS.iter().map(|(n, _)| *n).collect()
}
