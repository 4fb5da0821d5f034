//! Rate limits and concurrency limits (`[[frontend.limit]]`): the stick tables that count
//! them and the decision a request (TCP mode: a connection) gets.
//!
//! - [`window`]: one key's sliding window (two wall-clock buckets, HAProxy's freq_ctr) and
//!   its burst tokens, sans-io.
//! - [`table`]: a stick table — one per limit per worker process, shared by every worker
//!   thread of the generation (so counts are exact across threads), sharded, LRU-bounded,
//!   with the delta/remote-total interface the Redis sync uses.
//! - [`key`]: key bytes (inline up to 22 bytes) and how each key kind is encoded.
//! - [`LimitSet`]: a frontend's limits in the order written; `check` evaluates the ones
//!   whose key the request has, reading the wall clock once.
//!
//! Sharing across instances (the Redis sync builds on this): `ctx::Shared::tables()` walks
//! every table of a generation; a sync round calls [`StickTable::take_deltas`] (counts not
//! yet pushed, by wall-clock period), pushes them, and hands each key's global totals back
//! with `set_remote`; an outage calls `clear_remote`, and decisions fall back to local
//! counts (with `fail = "closed"`, `set_refusing` makes every decision a refusal until it
//! is back). `set_remote` also carries the key's share, all instances' admissions per own
//! admission (`window::Counts::remote_scale`). Nothing on the request path waits for it.
//! `concurrent` is never shared.
//!
//! Invariants: a frontend without limits costs nothing (an empty set is checked by one
//! branch, no clock read). A request is refused by the first limit it is over; limits
//! before that one have counted it (as HAProxy's trackers do). Requests in flight are held
//! in a [`Held`] and released when it is dropped — also when a later limit refuses.

pub(crate) mod key;
pub(crate) mod table;
pub(crate) mod window;

#[cfg(test)]
mod proptests;

use std::net::IpAddr;
use std::sync::Arc;

pub(crate) use table::StickTable;
// The Redis sync (issue 15, item 5) builds on these; nothing else calls them yet.
#[allow(unused_imports)]
pub(crate) use table::SyncEntry;

use crate::config::limit::{Limit, LimitAction, LimitKey, MAX_KEY_LEN, MAX_LIMITS_PER_FRONTEND};
use table::{Check, Mark, Refusal};

/// What a request offers the keys: each kind is asked only if a limit uses it.
pub(crate) trait Facts {
    /// The client's address (after a PROXY header: the one it carried).
    fn source(&self) -> IpAddr;
    fn sni(&self) -> Option<&str>;
    /// The first value of the header `name` (lowercase).
    fn header(&self, name: &str) -> Option<&[u8]>;
    /// The path, without the query.
    fn path(&self) -> Option<&[u8]>;
}

/// A frontend's limits, one stick table each.
#[derive(Debug, Default)]
pub(crate) struct LimitSet {
    tables: Vec<Arc<StickTable>>,
}

/// A refusal: which limit, what to do, and when the rate would admit the request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused<'a> {
    pub table: &'a StickTable,
    pub action: LimitAction,
    /// Seconds for `Retry-After` (at least 1; for a concurrency refusal, 1).
    pub retry_after: u64,
}

/// The requests in flight one request (connection) holds on its limits; released on drop.
#[derive(Debug, Default)]
pub(crate) struct Held<'a> {
    set: Option<&'a LimitSet>,
    marks: [Option<(u8, Mark)>; MAX_LIMITS_PER_FRONTEND],
}

impl Held<'_> {
    fn release(&mut self) {
        let Some(set) = self.set else { return };
        for (table, mark) in self.marks.iter_mut().filter_map(Option::take) {
            if let Some(t) = set.tables.get(usize::from(table)) {
                t.release(mark);
            }
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

/// The error context of a refused request: static, so a flood of refusals allocates nothing
/// for it (`show table` and the counters name the limit).
pub(crate) const OVER_LIMIT: &str = "over a [[frontend.limit]]";

/// Unix time in milliseconds: the clock every instance's periods are cut from.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl LimitSet {
    /// No limits.
    pub(crate) const EMPTY: LimitSet = LimitSet { tables: Vec::new() };

    pub(crate) fn new(limits: &[Limit]) -> LimitSet {
        LimitSet {
            tables: limits.iter().map(|l| Arc::new(StickTable::new(l))).collect(),
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    pub(crate) fn tables(&self) -> &[Arc<StickTable>] {
        &self.tables
    }

    /// Counts the request against every limit `only` accepts (by index and key) whose key the
    /// request has,
    /// in order; the first one it is over refuses it (and what it held so far is released).
    pub(crate) fn check<'a, F: Facts + ?Sized>(
        &'a self,
        facts: &F,
        only: impl Fn(usize, &LimitKey) -> bool,
        held: &mut Held<'a>,
    ) -> Result<(), Refused<'a>> {
        // The clock is read once, and only when some limit applies.
        let mut now = None;
        let mut buf = [0u8; MAX_KEY_LEN];
        for (i, t) in self.tables.iter().enumerate() {
            let spec = t.spec();
            if !only(i, &spec.key) {
                continue;
            }
            let key: &[u8] = match &spec.key {
                LimitKey::Source => key::source(facts.source(), &mut buf),
                LimitKey::Header(name) => match facts.header(name) {
                    Some(v) => key::cut(v),
                    None => continue,
                },
                LimitKey::Sni => match facts.sni() {
                    Some(name) => key::sni(name, &mut buf),
                    None => continue,
                },
                LimitKey::Path => match facts.path() {
                    Some(p) => key::cut(p),
                    None => continue,
                },
            };
            match t.check(key, *now.get_or_insert_with(now_ms)) {
                Check::Pass(None) => {}
                Check::Pass(Some(mark)) => {
                    held.set = Some(self);
                    match held.marks.iter_mut().find(|m| m.is_none()) {
                        Some(free) => *free = Some((i as u8, mark)),
                        // More marks than limits cannot be: release rather than leak.
                        None => t.release(mark),
                    }
                }
                Check::Deny(why) => {
                    held.release();
                    t.counters.denied.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if matches!(spec.action, LimitAction::Tarpit(_)) {
                        t.counters.tarpitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    let retry_after = match why {
                        Refusal::Rate { wait_ms } => wait_ms.div_ceil(1000).max(1),
                        Refusal::Concurrent | Refusal::Unavailable => 1,
                    };
                    return Err(Refused {
                        table: t,
                        action: spec.action,
                        retry_after,
                    });
                }
            }
        }
        Ok(())
    }
}

/// `check`'s `only` for an HTTP request: the limits its route leaves counting it (bit i:
/// limit i; `route::decide`), whatever their key (a request's keys are all known at once).
pub(crate) fn bits(mask: u8) -> impl Fn(usize, &LimitKey) -> bool {
    move |i, _| i < 8 && mask & (1 << i) != 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use std::time::Duration;

    use super::*;
    use crate::config::limit::Rate;

    struct Req<'a> {
        ip: IpAddr,
        header: Option<&'a [u8]>,
    }

    impl Facts for Req<'_> {
        fn source(&self) -> IpAddr {
            self.ip
        }
        fn sni(&self) -> Option<&str> {
            None
        }
        fn header(&self, name: &str) -> Option<&[u8]> {
            assert_eq!(name, "x-key");
            self.header
        }
        fn path(&self) -> Option<&[u8]> {
            None
        }
    }

    fn limit(name: &str, key: LimitKey, rate: Option<u64>, concurrent: u32) -> Limit {
        Limit {
            name: name.into(),
            key,
            rate: rate.map(|count| Rate {
                count,
                period: Duration::from_secs(60),
            }),
            burst: 0,
            concurrent,
            action: LimitAction::Close,
            size: 100,
            expire: Duration::from_secs(120),
        }
    }

    #[test]
    fn limits_apply_in_order_and_a_missing_header_skips_its_limit() {
        let set = LimitSet::new(&[
            limit("conc", LimitKey::Source, None, 1),
            limit("hdr", LimitKey::Header("x-key".into()), Some(1), 0),
        ]);
        let ip = "192.0.2.7".parse().unwrap();
        let with = Req { ip, header: Some(b"a") };
        let without = Req { ip, header: None };
        let mut held = Held::default();
        set.check(&with, bits(0xff), &mut held).unwrap();
        // The source has one in flight: refused by the first limit.
        let mut second = Held::default();
        let refused = set.check(&without, bits(0xff), &mut second).unwrap_err();
        assert_eq!(refused.table.name(), "conc");
        drop(held);
        // Released: the header limit refuses the second `a`, and the source's mark goes too.
        let mut third = Held::default();
        assert_eq!(
            set.check(&with, bits(0xff), &mut third).unwrap_err().table.name(),
            "hdr"
        );
        let mut fourth = Held::default();
        set.check(&without, bits(0xff), &mut fourth).unwrap();
        let t = &set.tables()[1];
        assert_eq!(t.counters.denied.load(std::sync::atomic::Ordering::Relaxed), 1);
        // Only the source limit, at accept (TCP mode's first check).
        let mut fifth = Held::default();
        assert!(set.check(&with, |_, k| *k == LimitKey::Source, &mut fifth).is_err());
    }

    #[test]
    fn an_empty_set_checks_nothing() {
        let set = LimitSet::default();
        let mut held = Held::default();
        let req = Req {
            ip: "::1".parse().unwrap(),
            header: None,
        };
        assert!(
            set.check(&req, |_, _| panic!("no limit to ask about"), &mut held)
                .is_ok()
        );
    }
}
