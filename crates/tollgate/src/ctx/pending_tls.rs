//! TLS connections not yet through their handshake, counted by source, process-wide
//! (`global.max_handshakes_per_source`).
//!
//! Owns: one count per source of the TLS connections (termination) that are waiting for
//! their ClientHello or handshaking. A connection takes its place at accept, before a byte is
//! read, and gives it back when its handshake ends, either way (the [`SourcePlace`] guard).
//! So one source can neither fill the process with idle connections waiting for a
//! ClientHello nor hold more than its share of `max_handshakes` slots with hellos it never
//! follows up.
//!
//! A source is an IPv4 address, or an IPv6 /64 (one host's share of a network: an attacker
//! given a /64 has 2^64 addresses); an IPv4-mapped IPv6 address counts as its IPv4 address.
//! The table holds only sources with a connection in that phase (an entry goes at zero), so
//! it never holds more entries than there are such connections (at most `maxconn`).
//! One lock for every worker thread: taken twice per TLS connection, for a hash lookup.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// What a source is counted as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    V4(u32),
    /// The upper 64 bits of the address.
    V6(u64),
}

impl Source {
    fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(u32::from(v4)),
                None => Source::V6(u64::try_from(u128::from(v6) >> 64).unwrap_or(u64::MAX)),
            },
        }
    }
}

/// Per-source counts of connections before the end of their handshake.
#[derive(Debug)]
pub(crate) struct PendingBySource {
    limit: u32,
    counts: Mutex<HashMap<Source, u32, foldhash::fast::RandomState>>,
}

impl PendingBySource {
    pub(crate) fn new(limit: u32) -> Self {
        PendingBySource {
            limit,
            counts: Mutex::new(HashMap::default()),
        }
    }

    /// A place for a new connection from `ip`, or `None` if its source holds `limit` already.
    pub(crate) fn enter(&self, ip: IpAddr) -> Option<SourcePlace<'_>> {
        let source = Source::of(ip);
        let mut counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = counts.entry(source).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(SourcePlace { table: self, source })
    }

    /// Sources with at least one connection before the end of its handshake.
    #[cfg(test)]
    fn sources(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    fn leave(&self, source: Source) {
        let mut counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&source) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(&source);
            }
        }
    }
}

/// One connection's place in its source's count, given back on drop.
#[derive(Debug)]
pub(crate) struct SourcePlace<'a> {
    table: &'a PendingBySource,
    source: Source,
}

impl Drop for SourcePlace<'_> {
    fn drop(&mut self) {
        self.table.leave(self.source);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_holds_at_most_limit_and_gets_places_back() {
        let t = PendingBySource::new(2);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let a = t.enter(ip).unwrap();
        let b = t.enter(ip).unwrap();
        assert!(t.enter(ip).is_none());
        // Another source is not affected.
        let other = t.enter("192.0.2.2".parse().unwrap()).unwrap();
        drop(a);
        let c = t.enter(ip).unwrap();
        drop((b, c, other));
        assert_eq!(t.sources(), 0, "an entry goes at zero");
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        let t = PendingBySource::new(1);
        let _a = t.enter("2001:db8:1:2::1".parse().unwrap()).unwrap();
        assert!(t.enter("2001:db8:1:2:ffff::9".parse().unwrap()).is_none());
        let _b = t.enter("2001:db8:1:3::1".parse().unwrap()).unwrap();
        let _c = t.enter("192.0.2.7".parse().unwrap()).unwrap();
        assert!(t.enter("::ffff:192.0.2.7".parse().unwrap()).is_none());
    }
}
