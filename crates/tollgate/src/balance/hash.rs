//! Consistent hashing with bounded loads (`balance = "hash"`; Mirrokni, Thorup and
//! Zadimoghaddam; HAProxy's `hash-balance-factor`).
//!
//! The ring: every server owns `weight × points_per_weight` points, each the xxh3 of the
//! server's *name* seeded with the point number — names survive reloads and reorderings,
//! positions do not, so a server keeps its points whatever else changes and adding or
//! removing one of N servers moves only the keys of its own arcs (about 1/N). A key maps
//! to the first point clockwise (the smallest point ≥ key, wrapping).
//!
//! Bounded loads: walking clockwise, a server is skipped when taking one more connection
//! would put its live load (process-wide, [`PickContext::load`]) above
//! `ceil(factor × (total + 1) × weight / total_weight)` — with equal weights,
//! `ceil(factor × (total + 1) / n)` — where total and total_weight cover the usable
//! servers. The caps sum to more than the total, so some usable server always fits: the
//! walk ends within one turn. Factor 0 turns the bound off.
//!
//! Invariants: `points` is sorted and `owners[i]` owns `points[i]`; both are rebuilt (rare:
//! a new set version, or a weight command) and never touched on the pick path, which reads
//! them and the live loads and allocates nothing. The same key maps to the same server
//! while the set, the weights and the loads that matter stay the same.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use super::{Balancer, Candidate, PickContext};

/// Ring points per unit of weight: enough that a server's arc is within about 8 % of its
/// share (the spread of a server's arc shrinks as one over the root of its point count).
const POINTS_PER_WEIGHT: u32 = 160;

/// Ring size beyond which points per weight shrink (down to 1), so a backend of a thousand
/// heavy servers costs each worker a few megabytes, not hundreds, and a rebuild (a sort, on
/// the worker thread, when the set or a weight changes) stays short.
const RING_BUDGET: u64 = 1 << 16;

/// The stable hash of a server name, the seed of its ring points.
pub(crate) fn name_hash(name: &str) -> u64 {
    xxh3_64(name.as_bytes())
}

/// The key of a client address: its bytes (an IPv4-mapped IPv6 address as the IPv4 one,
/// so a client keys the same on a v4 and a dual-stack listener).
pub(crate) fn key_of_ip(ip: std::net::IpAddr) -> u64 {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => xxh3_64(&v4.octets()),
        std::net::IpAddr::V6(v6) => xxh3_64(&v6.octets()),
    }
}

/// The key of some request bytes (a target, a header value, a cookie value).
pub(crate) fn key_of_bytes(bytes: &[u8]) -> u64 {
    xxh3_64(bytes)
}

/// The value of cookie `name` in one Cookie field value (`a=1; b=2`), if present.
pub(crate) fn cookie_value<'a>(field: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    field.split(|&b| b == b';').find_map(|pair| {
        let pair = crate::http::h1::headers::trim_ows(pair);
        let eq = pair.iter().position(|&b| b == b'=')?;
        let (n, v) = (pair.get(..eq)?, pair.get(eq + 1..)?);
        (n == name).then_some(v)
    })
}

pub(crate) struct Hash {
    /// Sorted ring points, and the server (position in the set) owning each.
    points: Vec<u64>,
    owners: Vec<u32>,
    name_hashes: Vec<u64>,
    weights: Vec<u32>,
    /// Spreads picks made without a key (a caller that has none) around the ring.
    unkeyed: u64,
}

impl Hash {
    pub(crate) fn new(servers: &[Candidate], _worker: usize) -> Self {
        let mut hash = Hash {
            points: Vec::new(),
            owners: Vec::new(),
            name_hashes: servers.iter().map(|s| s.name_hash).collect(),
            weights: servers.iter().map(|s| s.weight).collect(),
            unkeyed: 0,
        };
        hash.build();
        hash
    }

    pub(crate) fn boxed(servers: &[Candidate], worker: usize) -> Box<dyn Balancer> {
        Box::new(Self::new(servers, worker))
    }

    fn build(&mut self) {
        let total: u64 = self.weights.iter().map(|&w| u64::from(w)).sum();
        let per_weight = (RING_BUDGET / total.max(1)).clamp(1, u64::from(POINTS_PER_WEIGHT));
        let mut ring: Vec<(u64, u32)> = Vec::with_capacity(usize::try_from(total * per_weight).unwrap_or(0));
        for (index, (&seed, &weight)) in self.name_hashes.iter().zip(&self.weights).enumerate() {
            let Ok(index) = u32::try_from(index) else { break };
            for point in 0..u64::from(weight) * per_weight {
                ring.push((xxh3_64_with_seed(&seed.to_le_bytes(), point), index));
            }
        }
        ring.sort_unstable();
        (self.points, self.owners) = ring.into_iter().unzip();
    }

    /// The first server clockwise from `key` that `fits`, within one turn of the ring.
    fn walk(&self, key: u64, mut fits: impl FnMut(usize) -> bool) -> Option<usize> {
        let start = self.points.partition_point(|&p| p < key);
        let (after, before) = (self.owners.get(start..)?, self.owners.get(..start)?);
        after
            .iter()
            .chain(before)
            .map(|&owner| owner as usize)
            .find(|&owner| fits(owner))
    }

    /// Usable servers' total load and total weight: what the caps divide.
    fn totals(&self, ctx: &PickContext<'_>) -> (u64, u64) {
        let mut load = 0u64;
        let mut weight = 0u64;
        for (i, &w) in self.weights.iter().enumerate() {
            if w > 0 && ctx.usable(i) {
                load += u64::from(ctx.load(i));
                weight += u64::from(w);
            }
        }
        (load, weight)
    }
}

/// Whether one more connection keeps a server of `weight` within
/// `ceil(factor% × (total_load + 1) × weight / total_weight)`.
fn within_bound(load: u32, weight: u32, factor: u32, total_load: u64, total_weight: u64) -> bool {
    let cap_num = u128::from(factor) * u128::from(total_load + 1) * u128::from(weight);
    let cap_den = 100 * u128::from(total_weight.max(1));
    let cap = cap_num.div_ceil(cap_den);
    u128::from(load) < cap
}

impl Balancer for Hash {
    fn pick(&mut self, ctx: &PickContext<'_>) -> Option<usize> {
        let key = ctx.hash_key.unwrap_or_else(|| {
            self.unkeyed = self.unkeyed.wrapping_add(1);
            xxh3_64(&self.unkeyed.to_le_bytes())
        });
        let usable = |i: usize| ctx.usable(i);
        let factor = ctx.balance_factor();
        if factor == 0 {
            return self.walk(key, usable);
        }
        let (total_load, total_weight) = self.totals(ctx);
        let weights = &self.weights;
        let bounded = |i: usize| {
            usable(i)
                && weights
                    .get(i)
                    .is_some_and(|&w| within_bound(ctx.load(i), w, factor, total_load, total_weight))
        };
        // Loads read from other workers may move under the walk: if no server fits, the
        // key's own usable server is still better than none.
        self.walk(key, bounded).or_else(|| self.walk(key, usable))
    }

    fn set_weight(&mut self, index: usize, weight: u32) {
        if let Some(w) = self.weights.get_mut(index)
            && *w != weight
        {
            *w = weight;
            self.build();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::balance::test_servers;
    use crate::live::ServerId;
    use crate::live::server::ServerLive;

    fn named(names: &[String], weights: &[u32]) -> Vec<Candidate> {
        names
            .iter()
            .zip(weights)
            .enumerate()
            .map(|(i, (name, &weight))| Candidate {
                id: ServerId(i as u32),
                weight,
                name_hash: name_hash(name),
            })
            .collect()
    }

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}-{i}")).collect()
    }

    /// Where each key lands with no load on any server (pure consistent hashing).
    fn owners_of(hash: &Hash, keys: &[u64]) -> Vec<usize> {
        keys.iter()
            .map(|&k| hash.walk(k, |_| true).expect("a server"))
            .collect()
    }

    fn keys(seed: u64, n: usize) -> Vec<u64> {
        (0..n as u64)
            .map(|i| xxh3_64_with_seed(&i.to_le_bytes(), seed))
            .collect()
    }

    /// Picks `picks` keys in turn, each pick adding one connection to the chosen server
    /// (a slot held, as the proxy does), and returns the servers' final loads.
    fn bounded_picks(servers: &[Arc<ServerLive>], hash: &mut Hash, factor: u32, picks: &[u64]) -> Vec<u32> {
        let mut held = Vec::new();
        for &key in picks {
            let all = |_: usize| true;
            let ctx = PickContext::new(servers, &all, Some(key)).with_balance_factor(factor);
            let total: u64 = (0..servers.len()).map(|i| u64::from(ctx.load(i))).sum();
            let i = hash.pick(&ctx).expect("a server");
            let weight_total: u64 = hash.weights.iter().map(|&w| u64::from(w)).sum();
            let w = u64::from(hash.weights[i]);
            let cap = (u64::from(factor) * (total + 1) * w).div_ceil(100 * weight_total);
            assert!(
                u64::from(ctx.load(i)) < cap,
                "server {i} at load {} over its cap {cap}",
                ctx.load(i)
            );
            held.push(servers[i].try_take().expect("no maxconn"));
        }
        servers.iter().map(|s| s.active()).collect()
    }

    #[test]
    fn the_same_key_reaches_the_same_server_and_different_keys_spread() {
        let mut hash = Hash::new(&named(&names("s", 3), &[1, 1, 1]), 0);
        let servers = test_servers(&[1, 1, 1]);
        let all = |_: usize| true;
        let mut seen = [0u32; 3];
        for key in keys(7, 300) {
            let ctx = PickContext::new(&servers, &all, Some(key));
            let first = hash.pick(&ctx);
            assert_eq!(first, hash.pick(&ctx), "same key, same server");
            seen[first.expect("a server")] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "spread: {seen:?}");
        // A server the caller refuses is walked past; none usable, no pick.
        let not0 = |i: usize| i != 0;
        let ctx = PickContext::new(&servers, &not0, Some(1));
        assert_ne!(hash.pick(&ctx), Some(0));
        let none = |_: usize| false;
        assert_eq!(hash.pick(&PickContext::new(&servers, &none, Some(1))), None);
    }

    #[test]
    fn weight_zero_leaves_the_ring_and_comes_back_to_the_same_keys() {
        let ks = keys(3, 2000);
        let mut hash = Hash::new(&named(&names("w", 4), &[1, 1, 1, 1]), 0);
        let before = owners_of(&hash, &ks);
        hash.set_weight(2, 0);
        let without = owners_of(&hash, &ks);
        assert!(without.iter().all(|&o| o != 2));
        assert!(
            before.iter().zip(&without).all(|(b, w)| *b == 2 || b == w),
            "only the removed server's keys move"
        );
        hash.set_weight(2, 1);
        assert_eq!(owners_of(&hash, &ks), before);
    }

    #[test]
    fn cookie_values_are_found_in_any_position() {
        assert_eq!(cookie_value(b"a=1; uid=42; b=2", b"uid"), Some(&b"42"[..]));
        assert_eq!(cookie_value(b"uid=42", b"uid"), Some(&b"42"[..]));
        assert_eq!(cookie_value(b"xuid=1;uid=", b"uid"), Some(&b""[..]));
        assert_eq!(cookie_value(b"a=1; b=2", b"uid"), None);
        assert_eq!(cookie_value(b"uid", b"uid"), None);
    }

    #[test]
    fn mapped_ipv4_keys_as_ipv4() {
        let v4: std::net::IpAddr = "10.1.2.3".parse().expect("ip");
        let mapped: std::net::IpAddr = "::ffff:10.1.2.3".parse().expect("ip");
        assert_eq!(key_of_ip(v4), key_of_ip(mapped));
        assert_ne!(key_of_ip(v4), key_of_ip("10.1.2.4".parse().expect("ip")));
    }

    #[test]
    fn a_big_heavy_backend_stays_within_the_ring_budget() {
        let hash = Hash::new(&named(&names("big", 1000), &[256; 1000]), 0);
        // One point per unit of weight: the floor, each server keeps 256.
        assert_eq!(hash.points.len(), 1000 * 256);
        let small = Hash::new(&named(&names("small", 100), &[16; 100]), 0);
        assert!(small.points.len() as u64 <= RING_BUDGET, "{}", small.points.len());
        assert!(small.points.len() >= 100 * 16 * 40, "{}", small.points.len());
        assert!(hash.points.is_sorted());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// However skewed the keys (few distinct ones, so plain hashing would pile up),
        /// no pick puts a server above its bounded-load cap.
        #[test]
        fn bounded_load_is_never_exceeded(
            weights in prop::collection::vec(1u32..=4, 1..12),
            factor in prop_oneof![Just(100u32), Just(125), 100u32..=300],
            distinct in 1u64..20,
            seed in any::<u64>(),
        ) {
            let servers = test_servers(&weights);
            let mut hash = Hash::new(&named(&names(&seed.to_string(), weights.len()), &weights), 0);
            let picks: Vec<u64> = (0..400u64).map(|i| xxh3_64_with_seed(&(i % distinct).to_le_bytes(), seed)).collect();
            let loads = bounded_picks(&servers, &mut hash, factor, &picks);
            prop_assert_eq!(loads.iter().sum::<u32>(), 400);
        }

        /// Adding or removing one of N servers moves about 1/N of the keys, and only keys
        /// of the changed server (removal) or to it (addition).
        #[test]
        fn one_server_more_or_less_remaps_about_one_nth(n in 3usize..=30, seed in any::<u64>()) {
            let all = names(&seed.to_string(), n + 1);
            let ks = keys(seed, 10_000);
            let small = Hash::new(&named(&all[..n], &vec![1; n]), 0);
            let big = Hash::new(&named(&all, &vec![1; n + 1]), 0);
            let (a, b) = (owners_of(&small, &ks), owners_of(&big, &ks));
            let moved = a.iter().zip(&b).filter(|(x, y)| x != y).count();
            let fraction = moved as f64 / ks.len() as f64;
            let expected = 1.0 / (n + 1) as f64;
            prop_assert!(fraction > 0.5 * expected && fraction < 2.0 * expected,
                "moved {fraction:.4}, expected about {expected:.4}");
            // Positions of the first n servers are the same in both sets: a key that moved
            // moved to the added server (or, read the other way, from the removed one).
            prop_assert!(a.iter().zip(&b).all(|(x, y)| x == y || *y == n));
        }

        /// Key shares follow weights: over 20k keys and 20 servers, the servers of each
        /// weight get their weight's share within ±10 %.
        #[test]
        fn key_shares_follow_weights(heavy in 2u32..=4, seed in any::<u64>()) {
            let weights: Vec<u32> = (0..20).map(|i| if i % 2 == 0 { 1 } else { heavy }).collect();
            let hash = Hash::new(&named(&names(&seed.to_string(), 20), &weights), 0);
            let owners = owners_of(&hash, &keys(seed ^ 1, 20_000));
            let heavy_keys = owners.iter().filter(|&&o| o % 2 == 1).count() as f64;
            let expected = 20_000.0 * f64::from(heavy) / f64::from(heavy + 1);
            prop_assert!((heavy_keys / expected - 1.0).abs() < 0.10,
                "heavy servers got {heavy_keys}, expected {expected}");
            let light_expected = 20_000.0 - expected;
            let light_keys = 20_000.0 - heavy_keys;
            prop_assert!((light_keys / light_expected - 1.0).abs() < 0.10,
                "light servers got {light_keys}, expected {light_expected}");
        }

        /// While nothing changes, a key keeps its server (through the bounded walk too).
        #[test]
        fn a_key_keeps_its_server(weights in prop::collection::vec(1u32..=8, 1..10), key in any::<u64>()) {
            let servers = test_servers(&weights);
            let mut hash = Hash::new(&named(&names("k", weights.len()), &weights), 0);
            let all = |_: usize| true;
            let ctx = PickContext::new(&servers, &all, Some(key));
            let first = hash.pick(&ctx);
            for _ in 0..5 {
                prop_assert_eq!(hash.pick(&ctx), first);
            }
        }
    }
}
