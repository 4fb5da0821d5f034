//! A set of address blocks asked one question: is this address in any of them? The route
//! `source` condition and a frontend's `allow` / `deny` lists use it.
//!
//! Built once at load: each block becomes the range of addresses it covers, and the ranges
//! (one table for IPv4, one for IPv6) are sorted and merged into disjoint, non-adjacent
//! intervals. A lookup is one binary search: about 17 comparisons for 100,000 blocks, no
//! hashing, no allocation (`benches/prefix_set.rs`).
//!
//! Invariants: each table is sorted by start, intervals are disjoint and not adjacent
//! (`end + 1 < next.start`), so "contained" ⇔ "the last interval starting at or before the
//! address ends at or after it". An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is looked up
//! as its IPv4 address, as [`Cidr::contains`] does.

use std::net::IpAddr;

use super::route::Cidr;

/// The blocks as written (for `explain` and errors) and the merged interval tables.
#[derive(Debug, Clone, Default)]
pub struct PrefixSet {
    written: Vec<Cidr>,
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl PrefixSet {
    pub fn new(blocks: Vec<Cidr>) -> PrefixSet {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for b in &blocks {
            let (first, last) = b.range();
            if b.is_ipv4() {
                // A v4 block's range fits in 32 bits by construction.
                v4.push((
                    u32::try_from(first).unwrap_or(u32::MAX),
                    u32::try_from(last).unwrap_or(u32::MAX),
                ));
            } else {
                v6.push((first, last));
            }
        }
        PrefixSet {
            written: blocks,
            v4: merge(v4),
            v6: merge(v6),
        }
    }

    /// The blocks in the order they were written.
    pub fn blocks(&self) -> &[Cidr] {
        &self.written
    }

    pub fn is_empty(&self) -> bool {
        self.written.is_empty()
    }

    /// Whether `ip` is in any block.
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => within(&self.v4, u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => within(&self.v4, u32::from(v4)),
                None => within(&self.v6, u128::from(v6)),
            },
        }
    }
}

/// A frontend's `allow` / `deny` lists, checked once per connection at accept on the client
/// address: the socket's peer, or (with PROXY protocol) the address its header carries.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Set: only these sources are accepted.
    pub allow: Option<PrefixSet>,
    /// These sources are refused, whatever `allow` says.
    pub deny: Option<PrefixSet>,
}

impl Access {
    /// Whether a connection from `client` may go on.
    #[inline]
    pub fn admits(&self, client: IpAddr) -> bool {
        let denied = self.deny.as_ref().is_some_and(|d| d.contains(client));
        let allowed = self.allow.as_ref().is_none_or(|a| a.contains(client));
        allowed && !denied
    }

    /// No list: every connection is admitted without a lookup.
    pub fn is_open(&self) -> bool {
        self.allow.is_none() && self.deny.is_none()
    }
}

/// Sorts and coalesces overlapping or adjacent ranges.
fn merge<T: Copy + Ord + Step>(mut ranges: Vec<(T, T)>) -> Vec<(T, T)> {
    ranges.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match out.last_mut() {
            Some(last) if last.1.next().is_none_or(|after| start <= after) => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out.shrink_to_fit();
    out
}

#[inline]
fn within<T: Copy + Ord>(table: &[(T, T)], x: T) -> bool {
    // The number of intervals starting at or before `x`; the last of them is the candidate.
    let after = table.partition_point(|&(start, _)| start <= x);
    after
        .checked_sub(1)
        .and_then(|i| table.get(i))
        .is_some_and(|&(_, end)| x <= end)
}

/// The successor of an address, `None` at the top of the space.
trait Step: Sized {
    fn next(self) -> Option<Self>;
}

impl Step for u32 {
    fn next(self) -> Option<u32> {
        self.checked_add(1)
    }
}

impl Step for u128 {
    fn next(self) -> Option<u128> {
        self.checked_add(1)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn set(blocks: &[&str]) -> PrefixSet {
        PrefixSet::new(blocks.iter().map(|b| Cidr::parse(b).unwrap()).collect())
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn membership_v4_v6_and_mapped() {
        let s = set(&["10.0.0.0/8", "192.0.2.0/24", "2001:db8::/32", "::1"]);
        for yes in [
            "10.0.0.0",
            "10.255.255.255",
            "192.0.2.77",
            "2001:db8:ffff::1",
            "::1",
            "::ffff:10.1.2.3",
        ] {
            assert!(s.contains(ip(yes)), "{yes}");
        }
        for no in [
            "11.0.0.0",
            "9.255.255.255",
            "192.0.3.0",
            "2001:db9::",
            "::2",
            "127.0.0.1",
            "::ffff:11.0.0.1",
        ] {
            assert!(!s.contains(ip(no)), "{no}");
        }
        assert_eq!(s.blocks().len(), 4);
    }

    #[test]
    fn whole_spaces_overlaps_and_adjacency_merge() {
        let s = set(&["0.0.0.0/0"]);
        assert!(s.contains(ip("255.255.255.255")) && s.contains(ip("0.0.0.0")));
        assert!(!s.contains(ip("::2")), "a v4 block says nothing about v6");
        let s = set(&["::/0"]);
        assert!(s.contains(ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")));
        let s = set(&["10.0.0.0/9", "10.128.0.0/9", "10.1.0.0/16", "255.255.255.255"]);
        assert_eq!(s.v4, vec![(0x0A00_0000, 0x0AFF_FFFF), (u32::MAX, u32::MAX)]);
        assert!(set(&[]).is_empty() && !set(&[]).contains(ip("1.2.3.4")));
    }

    fn block() -> impl Strategy<Value = Cidr> {
        prop_oneof![
            (any::<u32>(), 0u8..=32).prop_map(|(a, len)| {
                let mask = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
                Cidr::parse(&format!("{}/{len}", std::net::Ipv4Addr::from(a & mask))).unwrap()
            }),
            (any::<u128>(), 0u8..=128).prop_map(|(a, len)| {
                let mask = if len == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(len))
                };
                Cidr::parse(&format!("{}/{len}", std::net::Ipv6Addr::from(a & mask))).unwrap()
            }),
        ]
    }

    /// Addresses near the blocks' edges as well as random ones, so hits and misses both occur.
    fn probe(blocks: &[Cidr], pick: usize, delta: i8, random: u128, v4: bool) -> IpAddr {
        match blocks.get(pick % blocks.len().max(1)) {
            Some(b) if !pick.is_multiple_of(3) => {
                let (first, last) = b.range();
                let base = if delta >= 0 { last } else { first };
                let x = base.wrapping_add_signed(i128::from(delta));
                if b.is_ipv4() {
                    IpAddr::from(std::net::Ipv4Addr::from((x & u128::from(u32::MAX)) as u32))
                } else {
                    IpAddr::from(std::net::Ipv6Addr::from(x))
                }
            }
            _ if v4 => IpAddr::from(std::net::Ipv4Addr::from(random as u32)),
            _ => IpAddr::from(std::net::Ipv6Addr::from(random)),
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_linear_scan(
            blocks in prop::collection::vec(block(), 0..40),
            probes in prop::collection::vec((any::<usize>(), -2i8..=2, any::<u128>(), any::<bool>()), 1..40),
        ) {
            let s = PrefixSet::new(blocks.clone());
            for (pick, delta, random, v4) in probes {
                let a = probe(&blocks, pick, delta, random, v4);
                prop_assert_eq!(s.contains(a), blocks.iter().any(|b| b.contains(a)), "{}", a);
            }
        }
    }
}
