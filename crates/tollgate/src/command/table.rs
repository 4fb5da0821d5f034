//! `show table LIMIT` and `clear table LIMIT [KEY]`: a stick table (`[[frontend.limit]]`)
//! read or emptied. What is asked (`TableOp`) and what comes back (`TableReport`), master →
//! the serving worker process → `ctl`.
//!
//! Invariants: plain data, additive like the rest of the protocol. Answers are bounded: at
//! most [`MAX_TABLE_ROWS`] entries listed (the highest rates first), the rest counted.

use serde::{Deserialize, Serialize};

/// The most entries one `show table` answer lists.
pub const MAX_TABLE_ROWS: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum TableOp {
    Show {
        limit: String,
    },
    /// Forget `key`'s entry (as `show table` prints keys: an address for `source`), or
    /// every entry.
    Clear {
        limit: String,
        #[serde(default)]
        key: Option<String>,
    },
}

impl TableOp {
    pub fn limit(&self) -> &str {
        match self {
            TableOp::Show { limit } | TableOp::Clear { limit, .. } => limit,
        }
    }
}

/// One stick table: its limit as configured, its counters, its entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableReport {
    pub name: String,
    pub frontend: String,
    /// `source`, `header:NAME`, `sni` or `path`.
    pub key: String,
    /// As written (`100/s`); `None` without `rate`.
    #[serde(default)]
    pub rate: Option<String>,
    #[serde(default)]
    pub burst: u64,
    /// 0: no concurrency limit.
    #[serde(default)]
    pub concurrent: u32,
    pub action: String,
    pub size: u64,
    pub entries: u64,
    pub denied: u64,
    pub tarpitted: u64,
    pub evicted: u64,
    pub expired: u64,
    #[serde(default)]
    pub untracked: u64,
    #[serde(default)]
    pub rows: Vec<TableRow>,
    /// Entries not listed (over `MAX_TABLE_ROWS`).
    #[serde(default)]
    pub rows_left_out: u64,
}

/// One entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableRow {
    /// An address for `source`; else the bytes, non-printable ones as `\xHH`.
    pub key: String,
    /// The sliding window's estimate now (requests per window).
    pub rate: u64,
    /// Requests (connections) in flight.
    pub in_flight: u32,
    /// Unix milliseconds, and how long ago.
    pub last_seen_ms: u64,
    pub idle_ms: u64,
}
