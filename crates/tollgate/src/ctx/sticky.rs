//! Sticky sessions, a worker thread's side: each server's cookie value and the
//! `Set-Cookie` line it is given, and the way back from a request's value to a server.
//!
//! The value is opaque: 16 hex digits of the xxh3 of a fixed domain string, the backend's
//! name and the server's name — not its address, not its name in clear. Names are what an
//! operator keeps stable, so a value survives reloads, restarts, readdressing, and is the
//! same on every tollgate instance with the same config (clients may move between them). It
//! is not a secret: a client that sends another server's value is sent there, as with
//! HAProxy's clear-text cookies.
//!
//! Invariants: the table is rebuilt only when the set's servers change (added, removed):
//! weight changes also move the set version, and then only the version is noted. Built
//! lines are reused for every response; a lookup allocates nothing.

use std::cell::RefCell;
use std::io::Write;

use crate::config::model::Sticky;
use crate::live::ServerId;
use crate::live::backend::BackendLive;

/// Hex digits in a cookie value.
const VALUE_LEN: usize = 16;

const CACHE_PRIVATE: &[u8] = b"Cache-Control: private\r\n";

/// The cookie value of server `server` of backend `backend`.
pub(crate) fn value_of(backend: &str, server: &str) -> u64 {
    let mut input = Vec::with_capacity(32 + backend.len() + server.len());
    input.extend_from_slice(b"tollgate sticky v1\0");
    input.extend_from_slice(backend.as_bytes());
    input.push(0);
    input.extend_from_slice(server.as_bytes());
    xxhash_rust::xxh3::xxh3_64(&input)
}

/// A cookie value as sent: exactly 16 lowercase hex digits; anything else is no value.
fn parse_value(text: &[u8]) -> Option<u64> {
    if text.len() != VALUE_LEN {
        return None;
    }
    text.iter().try_fold(0u64, |acc, &b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        Some(acc << 4 | u64::from(digit))
    })
}

struct Entries {
    version: u64,
    /// The set's server ids, in set order: what the entries were built for.
    ids: Vec<ServerId>,
    /// Sorted by value.
    by_value: Vec<(u64, ServerId)>,
    /// Sorted by id: the `Set-Cookie` line, followed by `Cache-Control: private`.
    lines: Vec<(ServerId, Box<[u8]>)>,
}

/// One sticky backend's table, on one worker thread.
pub(crate) struct StickyTable {
    spec: Sticky,
    entries: RefCell<Entries>,
}

impl StickyTable {
    pub(crate) fn new(spec: &Sticky, live: &BackendLive) -> Self {
        let table = StickyTable {
            spec: spec.clone(),
            entries: RefCell::new(Entries {
                version: u64::MAX,
                ids: Vec::new(),
                by_value: Vec::new(),
                lines: Vec::new(),
            }),
        };
        table.refresh(live);
        table
    }

    /// The cookie's name.
    pub(crate) fn cookie(&self) -> &[u8] {
        self.spec.cookie.as_bytes()
    }

    /// The server a request's cookie value names, if it is one of the set's servers.
    pub(crate) fn server_of(&self, live: &BackendLive, value: &[u8]) -> Option<ServerId> {
        let value = parse_value(value)?;
        self.refresh(live);
        let entries = self.entries.try_borrow().ok()?;
        let at = entries.by_value.binary_search_by_key(&value, |&(v, _)| v).ok()?;
        entries.by_value.get(at).map(|&(_, id)| id)
    }

    /// Runs `f` with the header lines a response from server `id` gets: its `Set-Cookie`,
    /// plus `Cache-Control: private` when `nocache` is on and `kept_private` is false. Empty
    /// when the server has left the set (nothing to stick to).
    pub(crate) fn with_lines<R>(&self, id: ServerId, kept_private: bool, f: impl FnOnce(&[u8]) -> R) -> R {
        let Ok(entries) = self.entries.try_borrow() else {
            return f(b"");
        };
        let Ok(at) = entries.lines.binary_search_by_key(&id, |(i, _)| *i) else {
            return f(b"");
        };
        let line = entries.lines.get(at).map_or(&[][..], |(_, l)| &l[..]);
        if self.spec.nocache && !kept_private {
            f(line)
        } else {
            f(line
                .get(..line.len().saturating_sub(CACHE_PRIVATE.len()))
                .unwrap_or_default())
        }
    }

    /// Brings the table up to the set's version: a rebuild only if its servers changed.
    fn refresh(&self, live: &BackendLive) {
        let version = live.version();
        let Ok(mut entries) = self.entries.try_borrow_mut() else {
            return;
        };
        if entries.version == version {
            return;
        }
        let set = live.servers();
        if !entries.ids.iter().copied().eq(set.servers.iter().map(|s| s.id)) {
            entries.ids = set.servers.iter().map(|s| s.id).collect();
            entries.by_value = set
                .servers
                .iter()
                .map(|s| (value_of(&live.name, &s.name), s.id))
                .collect();
            entries.by_value.sort_unstable();
            entries.lines = set
                .servers
                .iter()
                .map(|s| (s.id, self.line(value_of(&live.name, &s.name))))
                .collect();
            entries.lines.sort_unstable_by_key(|(id, _)| *id);
        }
        entries.version = set.version;
    }

    /// `Set-Cookie: NAME=VALUE; Path=..[; Domain=..][; HttpOnly][; Secure]` and the
    /// `Cache-Control: private` line after it.
    fn line(&self, value: u64) -> Box<[u8]> {
        let s = &self.spec;
        let mut out = Vec::with_capacity(96);
        let _ = write!(out, "Set-Cookie: {}={value:016x}; Path={}", s.cookie, s.path);
        if let Some(domain) = &s.domain {
            let _ = write!(out, "; Domain={domain}");
        }
        if s.httponly {
            out.extend_from_slice(b"; HttpOnly");
        }
        if s.secure {
            out.extend_from_slice(b"; Secure");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(CACHE_PRIVATE);
        out.into_boxed_slice()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use std::sync::Arc;

    use super::*;

    #[test]
    fn values_round_trip_and_nothing_else_parses() {
        let v = value_of("app", "a");
        assert_eq!(parse_value(format!("{v:016x}").as_bytes()), Some(v));
        assert_ne!(value_of("app", "a"), value_of("app", "b"));
        assert_ne!(
            value_of("app", "ab"),
            value_of("appa", "b"),
            "the separator keeps names apart"
        );
        for bad in [
            &b""[..],
            b"0123456789abcde",
            b"0123456789abcdef0",
            b"0123456789ABCDEF",
            b"0123456789abcdeg",
        ] {
            assert_eq!(parse_value(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_table_maps_values_to_servers_and_gives_their_lines() {
        let text = "[[frontend]]\nname = \"f\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"app\"\n\
                    [[backend]]\nname = \"app\"\nmode = \"http\"\n[backend.sticky]\ncookie = \"SRV\"\ndomain = \"example.com\"\n\
                    [[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:1\"\n\
                    [[backend.server]]\nname = \"b\"\naddress = \"127.0.0.1:2\"\n";
        let config = crate::config::parse(text, "t.toml").expect("valid");
        let spec = config.backends.first().expect("a backend");
        let live = Arc::new(BackendLive::new(spec, 1));
        let table = StickyTable::new(spec.sticky.as_ref().expect("sticky"), &live);
        let b = spec.servers[1].id;
        let value = format!("{:016x}", value_of("app", "b"));
        assert_eq!(table.server_of(&live, value.as_bytes()), Some(b));
        assert_eq!(table.server_of(&live, b"ffffffffffffffff"), None);
        let line = table.with_lines(b, false, |l| String::from_utf8(l.to_vec()).expect("utf8"));
        assert_eq!(
            line,
            format!("Set-Cookie: SRV={value}; Path=/; Domain=example.com; HttpOnly\r\nCache-Control: private\r\n")
        );
        let line = table.with_lines(b, true, |l| String::from_utf8(l.to_vec()).expect("utf8"));
        assert_eq!(
            line,
            format!("Set-Cookie: SRV={value}; Path=/; Domain=example.com; HttpOnly\r\n")
        );
        assert!(table.with_lines(ServerId(999), false, |l| l.is_empty()));
    }
}
