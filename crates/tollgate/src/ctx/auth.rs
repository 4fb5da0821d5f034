//! A worker thread's side of route authentication: its budget of password checks in flight
//! (`global.max_auth_checks`) and its cache of recent successes.
//!
//! A password check (bcrypt: milliseconds of CPU by design) never runs on the worker thread:
//! `proxy::auth` runs it on tokio's blocking pool holding a permit of [`AuthWork::permits`],
//! so a flood of guesses costs at most `max_auth_checks` cores per worker and waits
//! (counted) instead of queueing without bound. A success is remembered for
//! [`SUCCESS_TTL`]: a keep-alive client sending the same credentials again is let through by
//! a hash lookup, not a password check. Forward auth's connections to its auth servers are
//! kept here between checks ([`IDLE_FORWARD`] at most).
//!
//! Invariants: the cache holds no credential, only SHA-256 over a per-thread random salt,
//! the users file's random id, the user and the password; entries compare in constant time;
//! at most [`CACHE_SLOTS`] entries (the oldest is replaced). Only this thread touches them.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;

/// How long a verified user and password are let through without a new check.
pub(crate) const SUCCESS_TTL: Duration = Duration::from_secs(300);
/// Successes remembered per worker thread.
pub(crate) const CACHE_SLOTS: usize = 64;
/// Idle connections to forward auth servers kept per worker thread (all servers together):
/// a check reuses one rather than opening (and leaving in TIME_WAIT) a connection each.
pub(crate) const IDLE_FORWARD: usize = 16;

pub(crate) struct AuthWork {
    /// An `Arc`: a permit goes to the blocking pool's thread with its check.
    pub permits: Arc<Semaphore>,
    /// Idle connections to forward auth servers, newest last (at most [`IDLE_FORWARD`]).
    idle: RefCell<Vec<(std::net::SocketAddr, tokio::net::TcpStream)>>,
    salt: [u8; 32],
    cache: RefCell<Vec<(Key, Instant)>>,
}

/// A remembered success: SHA-256 of salt, file id, user, password.
pub(crate) type Key = [u8; 32];

impl AuthWork {
    pub(crate) fn new(max_checks: u32) -> Self {
        let mut salt = [0u8; 32];
        for chunk in salt.chunks_mut(8) {
            chunk.copy_from_slice(&crate::http::request_id::random_u64().to_le_bytes());
        }
        // The cryptographic generator when it answers (the salt must not be guessable).
        let _ = aws_lc_rs::rand::fill(&mut salt);
        AuthWork {
            permits: Arc::new(Semaphore::new(max_checks.max(1) as usize)),
            salt,
            cache: RefCell::new(Vec::new()),
            idle: RefCell::new(Vec::new()),
        }
    }

    pub(crate) fn key(&self, users_id: u64, user: &str, password: &[u8]) -> Key {
        let mut h = Sha256::new();
        h.update(self.salt);
        h.update(users_id.to_le_bytes());
        h.update((user.len() as u64).to_le_bytes());
        h.update(user.as_bytes());
        h.update(password);
        h.finalize().into()
    }

    /// Whether `key` was verified less than `SUCCESS_TTL` ago.
    pub(crate) fn remembered(&self, key: &Key, now: Instant) -> bool {
        let cache = self.cache.borrow();
        // Every live entry is compared, found or not: the time says nothing of which.
        let mut found = subtle::Choice::from(0);
        for (k, at) in cache.iter() {
            let fresh = subtle::Choice::from(u8::from(now.saturating_duration_since(*at) < SUCCESS_TTL));
            found |= k.ct_eq(key) & fresh;
        }
        found.into()
    }

    /// An idle connection to `addr`, if one is kept (the newest: the likeliest alive).
    pub(crate) fn take_idle(&self, addr: std::net::SocketAddr) -> Option<tokio::net::TcpStream> {
        let mut idle = self.idle.borrow_mut();
        let at = idle.iter().rposition(|(a, _)| *a == addr)?;
        Some(idle.remove(at).1)
    }

    /// Keeps `conn` to `addr` for the next check; the oldest goes when the pool is full.
    pub(crate) fn keep_idle(&self, addr: std::net::SocketAddr, conn: tokio::net::TcpStream) {
        let mut idle = self.idle.borrow_mut();
        if idle.len() >= IDLE_FORWARD {
            idle.remove(0);
        }
        idle.push((addr, conn));
    }

    pub(crate) fn remember(&self, key: Key, now: Instant) {
        let mut cache = self.cache.borrow_mut();
        if let Some(slot) = cache.iter_mut().find(|(k, _)| bool::from(k.ct_eq(&key))) {
            slot.1 = now;
        } else if cache.len() < CACHE_SLOTS {
            cache.push((key, now));
        } else if let Some(oldest) = cache.iter_mut().min_by_key(|(_, at)| *at) {
            *oldest = (key, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successes_are_remembered_per_file_and_expire() {
        let w = AuthWork::new(1);
        let now = Instant::now();
        let k = w.key(7, "alice", b"secret");
        assert!(!w.remembered(&k, now));
        w.remember(k, now);
        assert!(w.remembered(&k, now));
        assert!(!w.remembered(&w.key(7, "alice", b"Secret"), now));
        assert!(!w.remembered(&w.key(8, "alice", b"secret"), now), "another file");
        assert!(
            !w.remembered(&w.key(7, "alicesecret", b""), now),
            "the user's length is hashed"
        );
        assert!(!w.remembered(&k, now + SUCCESS_TTL), "expired");
        for i in 0..CACHE_SLOTS as u64 {
            w.remember(w.key(i + 100, "u", b"p"), now + Duration::from_secs(1));
        }
        assert!(!w.remembered(&k, now), "the oldest made room");
        assert_eq!(w.cache.borrow().len(), CACHE_SLOTS);
    }
}
