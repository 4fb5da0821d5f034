//! TLS connections not yet through their handshake, counted by source, process-wide
//! (`global.max_handshakes_per_source`).
//!
//! Owns: one count per source of the TLS connections (termination) that are waiting for
//! their ClientHello or handshaking, and their total. A connection takes its place at
//! accept, before a byte is read, and gives it back when its handshake ends, either way
//! (the [`SourcePlace`] guard).
//!
//! The bound is a fair share under pressure, not a cap on a busy client: a source past it
//! is refused only while the process is short — at accept, once as many connections are
//! before their handshake as there are handshake slots (`max_handshakes`); at the slot,
//! when none is free (the caller asks [`SourcePlace::over`]). A load generator or a NAT
//! opening more than the bound from one address at once is served as long as nothing is
//! short; a source holding ClientHellos it never follows up cannot hold more than its share
//! of the slots others wait for.
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
    state: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    by_source: HashMap<Source, u32, foldhash::fast::RandomState>,
    total: u32,
}

impl PendingBySource {
    pub(crate) fn new(limit: u32) -> Self {
        PendingBySource {
            limit,
            state: Mutex::new(Counts::default()),
        }
    }

    /// A place for a new connection from `ip`; `None` if its source holds `limit` already
    /// while `short_at` connections or more are before their handshake (the slots).
    pub(crate) fn enter(&self, ip: IpAddr, short_at: u32) -> Option<SourcePlace<'_>> {
        let source = Source::of(ip);
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Counts { by_source, total } = &mut *state;
        let count = by_source.entry(source).or_insert(0);
        let over = *count >= self.limit;
        if over && *total >= short_at {
            if *count == 0 {
                by_source.remove(&source);
            }
            return None;
        }
        *count += 1;
        *total += 1;
        Some(SourcePlace {
            table: self,
            source,
            over,
        })
    }

    /// Sources with at least one connection before the end of its handshake.
    #[cfg(test)]
    fn sources(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .by_source
            .len()
    }

    fn leave(&self, source: Source) {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.total = state.total.saturating_sub(1);
        if let Some(count) = state.by_source.get_mut(&source) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.by_source.remove(&source);
            }
        }
    }
}

/// One connection's place in its source's count, given back on drop.
#[derive(Debug)]
pub(crate) struct SourcePlace<'a> {
    table: &'a PendingBySource,
    source: Source,
    over: bool,
}

impl SourcePlace<'_> {
    /// Its source already held its bound when it came: refused rather than queued when no
    /// handshake slot is free.
    pub(crate) fn over(&self) -> bool {
        self.over
    }
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
    fn a_source_past_its_bound_is_refused_only_when_the_process_is_short() {
        let t = PendingBySource::new(2);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        // Plenty of slots (short at 10): past its bound, a source is still let in, marked.
        let a = t.enter(ip, 10).unwrap();
        let b = t.enter(ip, 10).unwrap();
        assert!(!a.over() && !b.over());
        let c = t.enter(ip, 10).unwrap();
        assert!(c.over());
        // Short (3 before their handshake, short at 3): refused; another source is not.
        assert!(t.enter(ip, 3).is_none());
        let other = t.enter("192.0.2.2".parse().unwrap(), 3).unwrap();
        assert!(!other.over());
        drop((a, c));
        let d = t.enter(ip, 3).unwrap();
        assert!(!d.over());
        drop((b, d, other));
        assert_eq!(t.sources(), 0, "an entry goes at zero");
        assert_eq!(t.state.lock().unwrap().total, 0);
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        let t = PendingBySource::new(1);
        let _a = t.enter("2001:db8:1:2::1".parse().unwrap(), 0).unwrap();
        assert!(t.enter("2001:db8:1:2:ffff::9".parse().unwrap(), 0).is_none());
        let _b = t.enter("2001:db8:1:3::1".parse().unwrap(), 0).unwrap();
        let _c = t.enter("192.0.2.7".parse().unwrap(), 0).unwrap();
        assert!(t.enter("::ffff:192.0.2.7".parse().unwrap(), 0).is_none());
        assert_eq!(t.sources(), 3, "a refused source leaves no entry");
    }
}
