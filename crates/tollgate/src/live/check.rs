//! A server's health as every thread sees it: its check settings, the last check's outcome
//! and counts (written by the health checker, read by `show servers`), and the passive
//! error streak (written by whichever worker thread saw the error or the success).
//!
//! Invariants: the streak costs live traffic one relaxed load per success (a store only
//! when it was non-zero) and one relaxed add per error; it is counted only where
//! `settings.error_limit` is non-zero. The error that reaches the limit — exactly one, even
//! with threads racing — marks the server down and wakes the checker (`marked_down`),
//! which owns every later transition; a check that brings the server up clears the streak.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::config::health::ServerCheck;

/// What one check (or a passive mark-down) found. Short codes are HAProxy's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// No check has run yet.
    None,
    /// TCP check: connected.
    L4Ok,
    L4Timeout,
    /// Connect failed (refused, unreachable...).
    L4Con,
    /// TLS handshake timed out.
    L6Timeout,
    /// TLS handshake failed.
    L6Rsp,
    /// HTTP check passed with this status.
    L7Ok(u16),
    L7Timeout,
    /// Not an HTTP response, or the connection closed before its head.
    L7Rsp,
    /// A status outside `expect_status`.
    L7Sts(u16),
    /// `expect_body` not found in the body's first bytes.
    L7Body(u16),
    /// Marked down by errors on live traffic (`error_limit`).
    Passive,
    /// The agent said down, stopped, fail or maint.
    AgentDown,
}

impl Outcome {
    pub(crate) fn passed(self) -> bool {
        matches!(self, Outcome::L4Ok | Outcome::L7Ok(_))
    }

    fn to_u32(self) -> u32 {
        let (kind, status) = match self {
            Outcome::None => (0, 0),
            Outcome::L4Ok => (1, 0),
            Outcome::L4Timeout => (2, 0),
            Outcome::L4Con => (3, 0),
            Outcome::L6Timeout => (4, 0),
            Outcome::L6Rsp => (5, 0),
            Outcome::L7Ok(s) => (6, s),
            Outcome::L7Timeout => (7, 0),
            Outcome::L7Rsp => (8, 0),
            Outcome::L7Sts(s) => (9, s),
            Outcome::L7Body(s) => (10, s),
            Outcome::Passive => (11, 0),
            Outcome::AgentDown => (12, 0),
        };
        (kind << 16) | u32::from(status)
    }

    fn from_u32(v: u32) -> Self {
        let status = (v & 0xffff) as u16;
        match v >> 16 {
            1 => Outcome::L4Ok,
            2 => Outcome::L4Timeout,
            3 => Outcome::L4Con,
            4 => Outcome::L6Timeout,
            5 => Outcome::L6Rsp,
            6 => Outcome::L7Ok(status),
            7 => Outcome::L7Timeout,
            8 => Outcome::L7Rsp,
            9 => Outcome::L7Sts(status),
            10 => Outcome::L7Body(status),
            11 => Outcome::Passive,
            12 => Outcome::AgentDown,
            _ => Outcome::None,
        }
    }

    /// HAProxy's short status code, with the HTTP status where there is one.
    pub(crate) fn short(self) -> String {
        match self {
            Outcome::None => "-".into(),
            Outcome::L4Ok => "L4OK".into(),
            Outcome::L4Timeout => "L4TOUT".into(),
            Outcome::L4Con => "L4CON".into(),
            Outcome::L6Timeout => "L6TOUT".into(),
            Outcome::L6Rsp => "L6RSP".into(),
            Outcome::L7Ok(s) => format!("L7OK/{s}"),
            Outcome::L7Timeout => "L7TOUT".into(),
            Outcome::L7Rsp => "L7RSP".into(),
            Outcome::L7Sts(s) => format!("L7STS/{s}"),
            Outcome::L7Body(s) => format!("L7RSP/{s}"),
            Outcome::Passive => "PASSIVE".into(),
            Outcome::AgentDown => "AGENT".into(),
        }
    }

    /// The reason, for logs and `show servers --json`.
    pub(crate) fn reason(self) -> String {
        match self {
            Outcome::None => "no check yet".into(),
            Outcome::L4Ok => "Layer4 check passed".into(),
            Outcome::L4Timeout => "Layer4 timeout".into(),
            Outcome::L4Con => "Layer4 connection problem (refused or unreachable)".into(),
            Outcome::L6Timeout => "Layer6 timeout (TLS handshake)".into(),
            Outcome::L6Rsp => "Layer6 invalid response (TLS handshake failed)".into(),
            Outcome::L7Ok(s) => format!("Layer7 check passed: {s}"),
            Outcome::L7Timeout => "Layer7 timeout".into(),
            Outcome::L7Rsp => "Layer7 invalid response".into(),
            Outcome::L7Sts(s) => format!("Layer7 wrong status {s}"),
            Outcome::L7Body(s) => format!("Layer7 response body mismatch (status {s})"),
            Outcome::Passive => "consecutive errors on live traffic (error_limit)".into(),
            Outcome::AgentDown => "agent reports the server down".into(),
        }
    }
}

#[derive(Debug)]
pub(crate) struct CheckLive {
    pub settings: ServerCheck,
    /// Consecutive errors on live traffic (only counted with an `error_limit`).
    errors: AtomicU32,
    /// Woken when live traffic marks the server down: the checker takes over at once.
    pub marked_down: Notify,
    checks: AtomicU64,
    failed: AtomicU64,
    last: AtomicU32,
}

/// A server's checks, for the runtime API (absent for a server nothing checks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckView {
    /// HAProxy's short code of the last check (`L7OK/200`, `L4CON`, `-` before the first).
    pub status: String,
    /// Why, in words.
    pub reason: String,
    /// Checks run, and how many failed.
    pub checks: u64,
    pub failed: u64,
    /// Current streak of errors on live traffic (`error_limit`).
    #[serde(default)]
    pub errors: u32,
    /// The agent's weight percentage (100 without an agent).
    #[serde(default)]
    pub agent_percent: u32,
}

impl CheckLive {
    pub(crate) fn new(settings: ServerCheck) -> Self {
        CheckLive {
            settings,
            errors: AtomicU32::new(0),
            marked_down: Notify::new(),
            checks: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last: AtomicU32::new(Outcome::None.to_u32()),
        }
    }

    /// The same check state for the server at a new address (`ServerLive::readdressed`):
    /// the counts and the last outcome carry over, the live-traffic error streak starts
    /// again (it was about the old address).
    pub(crate) fn carried(&self) -> Self {
        let load = |a: &AtomicU64| AtomicU64::new(a.load(Ordering::Relaxed));
        CheckLive {
            settings: self.settings,
            errors: AtomicU32::new(0),
            marked_down: Notify::new(),
            checks: load(&self.checks),
            failed: load(&self.failed),
            last: AtomicU32::new(self.last.load(Ordering::Relaxed)),
        }
    }

    /// Records a check's outcome (the checker's thread only).
    pub(crate) fn record(&self, outcome: Outcome) {
        self.checks.fetch_add(1, Ordering::Relaxed);
        if !outcome.passed() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        self.last.store(outcome.to_u32(), Ordering::Relaxed);
    }

    /// Notes why the server went down without counting a check (passive, agent).
    pub(crate) fn note(&self, outcome: Outcome) {
        self.last.store(outcome.to_u32(), Ordering::Relaxed);
    }

    pub(crate) fn last(&self) -> Outcome {
        Outcome::from_u32(self.last.load(Ordering::Relaxed))
    }

    /// Live traffic succeeded on this server: the error streak ends.
    #[inline]
    pub(crate) fn traffic_ok(&self) {
        if self.settings.error_limit != 0 && self.errors.load(Ordering::Relaxed) != 0 {
            self.errors.store(0, Ordering::Relaxed);
        }
    }

    /// Live traffic failed on this server; true for the one error that reaches the limit.
    #[inline]
    pub(crate) fn traffic_error(&self) -> bool {
        let limit = self.settings.error_limit;
        limit != 0 && self.errors.fetch_add(1, Ordering::Relaxed) + 1 == limit
    }

    pub(crate) fn clear_errors(&self) {
        self.errors.store(0, Ordering::Relaxed);
    }

    pub(crate) fn view(&self, agent_percent: u32) -> Option<CheckView> {
        if !self.settings.enabled {
            return None;
        }
        let last = self.last();
        Some(CheckView {
            status: last.short(),
            reason: last.reason(),
            checks: self.checks.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            agent_percent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_survive_their_encoding() {
        let all = [
            Outcome::None,
            Outcome::L4Ok,
            Outcome::L4Timeout,
            Outcome::L4Con,
            Outcome::L6Timeout,
            Outcome::L6Rsp,
            Outcome::L7Ok(204),
            Outcome::L7Timeout,
            Outcome::L7Rsp,
            Outcome::L7Sts(500),
            Outcome::L7Body(200),
            Outcome::Passive,
            Outcome::AgentDown,
        ];
        for o in all {
            assert_eq!(Outcome::from_u32(o.to_u32()), o);
        }
    }

    #[test]
    fn exactly_one_error_reaches_the_limit_and_a_success_resets() {
        let c = CheckLive::new(ServerCheck {
            enabled: true,
            error_limit: 3,
            ..ServerCheck::default()
        });
        assert!(!c.traffic_error() && !c.traffic_error());
        c.traffic_ok();
        assert!(!c.traffic_error() && !c.traffic_error());
        assert!(c.traffic_error());
        assert!(!c.traffic_error(), "only the error that reaches the limit marks down");
        let off = CheckLive::new(ServerCheck::default());
        assert!((0..10).all(|_| !off.traffic_error()));
    }
}
