//! Per-stream state of the server connection and the table of open streams.
//!
//! Owns [`Stream`] (which halves are open, both flow-control windows, the request body's
//! accounting) and [`Streams`] (open streams in a small `Vec`, found by id with a linear
//! scan: at most `max_concurrent_streams` of them). Invariants: a stream is in the table
//! while either half is open and it was not reset; any client-initiated id up to the highest
//! seen that is not in the table is closed (no memory is kept per closed stream, but for a
//! short ring of the latest resets, whose late frames are ignored: RFC 9113 §5.1).

#[derive(Debug, Clone)]
pub(crate) struct Stream {
    pub id: u32,
    /// The client may still send DATA / trailers (not half-closed (remote)).
    pub remote_open: bool,
    /// We may still send (not half-closed (local)).
    pub local_open: bool,
    /// The final (non-1xx) response head went out.
    pub head_sent: bool,
    /// What we may still send; negative after a SETTINGS_INITIAL_WINDOW_SIZE decrease.
    pub send_window: i64,
    /// What the client may still send.
    pub recv_window: i64,
    /// Bytes released (or padding) not yet returned by a WINDOW_UPDATE.
    pub recv_pending: u32,
    /// DATA bytes handed to the app and not yet released.
    pub held: u64,
    pub content_length: Option<u64>,
    /// DATA bytes received (padding excluded).
    pub received: u64,
}

impl Stream {
    pub(crate) fn new(id: u32, send_window: i64, recv_window: i64, end_stream: bool) -> Self {
        Stream {
            id,
            remote_open: !end_stream,
            local_open: true,
            head_sent: false,
            send_window,
            recv_window,
            recv_pending: 0,
            held: 0,
            content_length: None,
            received: 0,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Streams {
    open: Vec<Stream>,
}

impl Streams {
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    /// No stream open: the list's room goes back.
    pub(crate) fn release_if_empty(&mut self) {
        if self.open.is_empty() {
            self.open = Vec::new();
        }
    }

    pub(crate) fn get(&self, id: u32) -> Option<&Stream> {
        self.open.iter().find(|s| s.id == id)
    }

    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut Stream> {
        self.open.iter_mut().find(|s| s.id == id)
    }

    pub(crate) fn insert(&mut self, s: Stream) {
        debug_assert!(self.get(s.id).is_none());
        self.open.push(s);
    }

    pub(crate) fn remove(&mut self, id: u32) -> Option<Stream> {
        let at = self.open.iter().position(|s| s.id == id)?;
        Some(self.open.swap_remove(at))
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Stream> {
        self.open.iter_mut()
    }
}

/// The latest streams we reset, whose in-flight frames are ignored (RFC 9113 §5.1: for "a
/// period"; here, until 64 more resets happened).
#[derive(Debug)]
pub(crate) struct RecentResets {
    ids: [u32; 64],
    next: usize,
}

impl Default for RecentResets {
    fn default() -> Self {
        RecentResets { ids: [0; 64], next: 0 }
    }
}

impl RecentResets {
    pub(crate) fn add(&mut self, id: u32) {
        if let Some(slot) = self.ids.get_mut(self.next) {
            *slot = id;
        }
        self.next = (self.next + 1) % self.ids.len();
    }

    pub(crate) fn contains(&self, id: u32) -> bool {
        id != 0 && self.ids.contains(&id)
    }
}
