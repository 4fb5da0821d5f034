//! Load-balancing algorithms: one small trait, one file per algorithm, one explicit registry.
//!
//! A `Balancer` is per worker thread (shared-nothing: no lock, no atomic written per pick)
//! and sans-io: it sees the candidates of one server-set version through a [`PickContext`]
//! (identity, live load, usability, a hash key when its algorithm wants one), never sockets.
//! It is rebuilt when the set's version moves, so its indexes are positions in that version.
//! It hears events — weight changed, connection taken, connection released — so stateful
//! algorithms (leastconn, bounded-load hashing) plug in without changing callers.

mod first;
pub(crate) mod hash;
mod leastconn;
mod random;
mod roundrobin;

use std::sync::Arc;

pub(crate) use first::First;
pub(crate) use hash::Hash;
pub(crate) use leastconn::LeastConn;
pub(crate) use random::Random;
pub(crate) use roundrobin::RoundRobin;

use crate::live::ServerId;
use crate::live::server::ServerLive;

/// What a balancer is built from: a server's identity, its effective weight and the hash
/// of its name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    #[expect(
        dead_code,
        reason = "the pick context promised to algorithms; round-robin reads none of it, leastconn and hashing will"
    )]
    pub id: ServerId,
    pub weight: u32,
    /// The stable hash of the server's name ([`hash::name_hash`]): what consistent hashing
    /// places it by, the same across reloads wherever the server sits in the set.
    pub name_hash: u64,
}

/// What a pick may look at: the set's servers (their live load, identity and weight) and
/// which of them the caller will accept now.
pub(crate) struct PickContext<'a> {
    servers: &'a [Arc<ServerLive>],
    usable: &'a dyn Fn(usize) -> bool,
    /// The request's hash key (client address, URI, header), for algorithms that ask for one.
    pub hash_key: Option<u64>,
    /// The backend's `hash_balance_factor` (percent; 0 = no bound), for bounded-load hashing.
    balance_factor: u32,
}

impl<'a> PickContext<'a> {
    pub(crate) fn new(
        servers: &'a [Arc<ServerLive>],
        usable: &'a dyn Fn(usize) -> bool,
        hash_key: Option<u64>,
    ) -> Self {
        PickContext {
            servers,
            usable,
            hash_key,
            balance_factor: crate::config::DEFAULT_HASH_BALANCE_FACTOR,
        }
    }

    /// The backend's `hash_balance_factor`, when it is not the default.
    pub(crate) fn with_balance_factor(mut self, percent: u32) -> Self {
        self.balance_factor = percent;
        self
    }

    /// How far above the (weighted) average load a server may go, in percent; 0 = unbounded.
    pub(crate) fn balance_factor(&self) -> u32 {
        self.balance_factor
    }

    #[expect(
        dead_code,
        reason = "the pick context promised to algorithms; round-robin reads none of it, leastconn and hashing will"
    )]
    pub(crate) fn len(&self) -> usize {
        self.servers.len()
    }

    #[expect(
        dead_code,
        reason = "the pick context promised to algorithms; round-robin reads none of it, leastconn and hashing will"
    )]
    pub(crate) fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The caller accepts `index` now (state, role, room, not already tried).
    #[inline]
    pub(crate) fn usable(&self, index: usize) -> bool {
        (self.usable)(index)
    }

    #[expect(
        dead_code,
        reason = "the pick context promised to algorithms; round-robin reads none of it, leastconn and hashing will"
    )]
    pub(crate) fn id(&self, index: usize) -> Option<ServerId> {
        self.servers.get(index).map(|s| s.id)
    }

    /// Connections open plus requests queued on the server, process-wide.
    pub(crate) fn load(&self, index: usize) -> u32 {
        self.servers
            .get(index)
            .map_or(u32::MAX, |s| s.active().saturating_add(s.queued()))
    }
}

pub(crate) trait Balancer {
    /// Chooses one server among the usable ones.
    fn pick(&mut self, ctx: &PickContext<'_>) -> Option<usize>;

    /// A server's effective weight changed (0 = taken out of rotation).
    fn set_weight(&mut self, index: usize, weight: u32);

    /// A connection to `index` was opened / closed. Stateless algorithms ignore these.
    fn taken(&mut self, _index: usize) {}
    fn released(&mut self, _index: usize) {}
}

pub(crate) type Constructor = fn(servers: &[Candidate], worker: usize) -> Box<dyn Balancer>;

/// Every algorithm, by the name used in `backend.balance`. Config validation checks names
/// against `config::BALANCE_ALGORITHMS`, which must list the same names (tested below).
pub(crate) const ALGORITHMS: &[(&str, Constructor)] = &[
    ("roundrobin", RoundRobin::boxed),
    ("leastconn", LeastConn::boxed),
    ("random", Random::boxed),
    ("first", First::boxed),
    ("hash", Hash::boxed),
];

/// `load_a / weight_a < load_b / weight_b`, exactly (cross-multiplied in 64 bits: no
/// division, no rounding). Callers skip weight 0.
#[inline]
pub(crate) fn lighter(load_a: u32, weight_a: u32, load_b: u32, weight_b: u32) -> bool {
    u64::from(load_a) * u64::from(weight_b) < u64::from(load_b) * u64::from(weight_a)
}

pub(crate) fn lookup(name: &str) -> Option<Constructor> {
    ALGORITHMS.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

/// Test support: live servers with these weights, ids 0.., in backend "test".
#[cfg(test)]
pub(crate) fn test_servers(weights: &[u32]) -> Vec<Arc<ServerLive>> {
    let queue = crate::live::queue::SlotQueue::new();
    let backend: Arc<str> = Arc::from("test");
    weights
        .iter()
        .enumerate()
        .map(|(i, &weight)| {
            let server = crate::config::Server {
                id: ServerId(i as u32),
                name: format!("s{i}"),
                address: std::net::SocketAddr::from(([127, 0, 0, 1], 1)),
                host: None,
                weight,
                maxconn: 0,
                backup: false,
                tls: None,
                proto: Default::default(),
                slowstart: std::time::Duration::ZERO,
                check: Default::default(),
                send_proxy: None,
            };
            Arc::new(ServerLive::new(
                &server,
                (crate::live::BackendId(0), &backend),
                1,
                Arc::clone(&queue),
            ))
        })
        .collect()
}

/// Test support: the candidates a balancer is built from, as a worker would build them.
#[cfg(test)]
pub(crate) fn candidates_of(servers: &[Arc<ServerLive>]) -> Vec<Candidate> {
    servers
        .iter()
        .map(|s| Candidate {
            id: s.id,
            weight: s.effective_weight(),
            name_hash: hash::name_hash(&s.name),
        })
        .collect()
}

/// Test support: gives each `(index, n)` server `n` more active connections (live slots,
/// as workers take them) until the returned slots drop.
#[cfg(test)]
pub(crate) fn hold(servers: &[Arc<ServerLive>], loads: &[(usize, u32)]) -> Vec<crate::live::server::ServerSlot> {
    loads
        .iter()
        .flat_map(|&(i, n)| (0..n).map(move |_| i))
        .filter_map(|i| servers.get(i).and_then(|s| s.try_take()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config names algorithms from `config::BALANCE_ALGORITHMS` (config sits below
    /// balance): it must list exactly the registry's names, so that every name a config
    /// accepts has an algorithm and every algorithm can be named.
    #[test]
    fn config_lists_exactly_the_registered_algorithms() {
        let registered: Vec<&str> = ALGORITHMS.iter().map(|(name, _)| *name).collect();
        assert_eq!(registered, crate::config::BALANCE_ALGORITHMS);
        assert!(lookup(crate::config::DEFAULT_BALANCE).is_some());
    }
}
