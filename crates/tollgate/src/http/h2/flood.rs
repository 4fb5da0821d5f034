//! Flood budgets of one connection: what floods are made of, counted within
//! `Settings::flood_window` (the limits of `[http2]`).
//!
//! Owns [`Budgets`]. Invariants: counts only grow within a window and all restart together
//! when it has passed; passing a limit is reported once, and the connection then dies (the
//! caller stops feeding it). The header block in progress is counted frame by frame, before
//! its bytes are buffered, and survives window roll-over.

use std::time::Instant;

use super::Settings;

/// What a connection was closed for (also the name of its counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flood {
    /// Streams reset by the client faster than served (CVE-2023-44487).
    ClientResets,
    /// Streams the codec had to reset because of what the client sent (CVE-2025-8671).
    ServerResets,
    Pings,
    Settings,
    EmptyData,
    Priority,
    WindowUpdates,
    /// A header block past `max_header_block_size` or `max_header_block_frames`
    /// (CONTINUATION flood, CVE-2024-27316 family).
    HeaderBlock,
    /// Request heads over `max_header_list_size` (each HPACK-decoded in full, then answered
    /// 431): repeated, a cheap way to burn the proxy's CPU.
    OversizedHeads,
}

impl Flood {
    pub fn as_str(self) -> &'static str {
        match self {
            Flood::ClientResets => "rapid reset",
            Flood::ServerResets => "server-provoked resets",
            Flood::Pings => "PING flood",
            Flood::Settings => "SETTINGS flood",
            Flood::EmptyData => "empty DATA flood",
            Flood::Priority => "PRIORITY flood",
            Flood::WindowUpdates => "WINDOW_UPDATE flood",
            Flood::HeaderBlock => "header block too large (CONTINUATION flood)",
            Flood::OversizedHeads => "request heads over max_header_list_size",
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    client_resets: u32,
    server_resets: u32,
    pings: u32,
    settings: u32,
    empty_data: u32,
    priority: u32,
    window_updates: u32,
    oversized_heads: u32,
}

#[derive(Debug)]
pub(crate) struct Budgets {
    window_start: Instant,
    counts: Counts,
    /// The header block in progress: bytes and frames so far.
    block: (u32, u32),
}

impl Budgets {
    pub(crate) fn new(now: Instant) -> Self {
        Budgets {
            window_start: now,
            counts: Counts::default(),
            block: (0, 0),
        }
    }

    fn roll(&mut self, s: &Settings, now: Instant) {
        if now.saturating_duration_since(self.window_start) >= s.flood_window {
            self.window_start = now;
            self.counts = Counts::default();
        }
    }

    /// Counts one more of `kind`; `Err` once past its limit.
    pub(crate) fn count(&mut self, s: &Settings, now: Instant, kind: Flood) -> Result<(), Flood> {
        self.roll(s, now);
        let c = &mut self.counts;
        let (n, max) = match kind {
            Flood::ClientResets => (&mut c.client_resets, s.max_client_resets),
            Flood::ServerResets => (&mut c.server_resets, s.max_server_resets),
            Flood::Pings => (&mut c.pings, s.max_pings),
            Flood::Settings => (&mut c.settings, s.max_settings),
            Flood::EmptyData => (&mut c.empty_data, s.max_empty_data),
            Flood::Priority => (&mut c.priority, s.max_priority),
            Flood::WindowUpdates => (&mut c.window_updates, s.max_window_updates),
            Flood::OversizedHeads => (&mut c.oversized_heads, s.max_oversized_heads),
            Flood::HeaderBlock => return Ok(()),
        };
        *n = n.saturating_add(1);
        if *n > max { Err(kind) } else { Ok(()) }
    }

    /// A HEADERS (`first`) or CONTINUATION frame of `len` bytes joins the block in progress.
    pub(crate) fn header_fragment(&mut self, s: &Settings, first: bool, len: u32) -> Result<(), Flood> {
        let (bytes, frames) = if first { (0, 0) } else { self.block };
        self.block = (bytes.saturating_add(len), frames.saturating_add(1));
        if self.block.0 > s.max_header_block_size || self.block.1 > s.max_header_block_frames {
            Err(Flood::HeaderBlock)
        } else {
            Ok(())
        }
    }
}
