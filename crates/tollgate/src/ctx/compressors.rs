//! A worker thread's budget of response compressors (`global.max_compressors`).
//!
//! Compression is CPU and memory (each compressor holds its coding's window): a thread runs
//! at most `max` at once. Over it, an eligible response goes uncompressed, counted
//! (`compress_over_budget`): nothing waits for a compressor.
//!
//! Invariants: `in_use` and the `compressors_in_use` gauge are counted out by the drop of
//! [`Compressing`], so a response that ends early (a client gone, a server reset) gives its
//! slot back; only this thread touches `in_use` (a `Cell`).

use std::cell::Cell;
use std::sync::Arc;

use crate::http::compress::{Coding, Encoder, Policy};
use crate::stats::WorkerStats;

pub(crate) struct Compressors {
    in_use: Cell<u32>,
    max: u32,
    stats: Arc<WorkerStats>,
}

/// One response's compressor, holding a slot of its thread's budget.
pub(crate) struct Compressing<'a> {
    pub encoder: Encoder,
    budget: &'a Compressors,
}

impl Compressors {
    pub(crate) fn new(max: u32, stats: Arc<WorkerStats>) -> Self {
        Compressors {
            in_use: Cell::new(0),
            max,
            stats,
        }
    }

    /// A compressor for one response, or `None` when the thread's are all busy (counted).
    pub(crate) fn start(&self, coding: Coding, policy: &Policy) -> Option<Compressing<'_>> {
        if self.in_use.get() >= self.max {
            self.stats.compress_over_budget.add(1);
            return None;
        }
        let encoder = Encoder::new(coding, policy)?;
        self.in_use.set(self.in_use.get() + 1);
        self.stats.compressors_in_use.add(1);
        self.stats.compressed_responses.add(1);
        Some(Compressing { encoder, budget: self })
    }
}

impl Drop for Compressing<'_> {
    fn drop(&mut self) {
        let b = self.budget;
        b.in_use.set(b.in_use.get().saturating_sub(1));
        b.stats.compressors_in_use.sub(1);
        b.stats.compress_bytes_in.add(self.encoder.bytes_in);
        b.stats.compress_bytes_out.add(self.encoder.bytes_out);
    }
}
