//! A worker thread's registry of its live client connections, for `show sessions`.
//!
//! Owns: a slab of [`SessionEntry`]s (one per open connection) and a few spare entries
//! to reuse. The session's task reaches its own entry through a task-local (`CURRENT`), so
//! the code that moves a session from state to state needs no handle passed down to it:
//! [`note`] updates the entry in place (a `Cell` store).
//!
//! Invariants: only the owning thread touches the registry (it is `!Send`; the runtime
//! API asks the thread to walk it through its inbox), so no lock, no atomic shared across
//! cores. Insert and remove are O(1) (a free list of slab indexes); an entry is allocated
//! only when no spare is left, so a steady connection rate allocates nothing. Entries never
//! hold a borrow of the slab across an await.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Instant;

use crate::command::show::SessionView;
use crate::http::request_id::IdSlot;
use crate::ids::ServerId;
use crate::relay::Moved;

/// Spare entries kept for reuse beyond the live ones.
const SPARES: usize = 256;

/// What a connection is doing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionState {
    Handshake,
    ReadingRequest,
    Queued,
    Connecting,
    Forwarding,
    IdleKeepalive,
    Tunnel,
    Closing,
}

impl SessionState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SessionState::Handshake => "handshake",
            SessionState::ReadingRequest => "reading-request",
            SessionState::Queued => "queued",
            SessionState::Connecting => "connecting",
            SessionState::Forwarding => "forwarding",
            SessionState::IdleKeepalive => "idle-keepalive",
            SessionState::Tunnel => "tunnel",
            SessionState::Closing => "closing",
        }
    }
}

/// One open connection. Written by its session's task, read when the thread walks.
#[derive(Debug)]
pub(crate) struct SessionEntry {
    id: Cell<u64>,
    slot: Cell<usize>,
    began: Cell<Instant>,
    client: Cell<SocketAddr>,
    frontend: Cell<usize>,
    tls: Cell<bool>,
    /// A QUIC connection (HTTP/3).
    quic: Cell<bool>,
    pub state: Cell<SessionState>,
    pub backend: Cell<Option<usize>>,
    pub server: Cell<Option<ServerId>>,
    /// Bytes of the streams that ended (HTTP requests), added as each ends.
    pub bytes_in: Cell<u64>,
    pub bytes_out: Cell<u64>,
    /// What a relay (TCP session, tunnel) has moved so far, live.
    pub moved: Moved,
}

impl SessionEntry {
    fn new(now: Instant) -> Self {
        SessionEntry {
            id: Cell::new(0),
            slot: Cell::new(0),
            began: Cell::new(now),
            client: Cell::new(SocketAddr::from(([0, 0, 0, 0], 0))),
            frontend: Cell::new(0),
            tls: Cell::new(false),
            quic: Cell::new(false),
            state: Cell::new(SessionState::ReadingRequest),
            backend: Cell::new(None),
            server: Cell::new(None),
            bytes_in: Cell::new(0),
            bytes_out: Cell::new(0),
            moved: Moved::default(),
        }
    }

    fn reset(&self, id: u64, slot: usize, opened: Opened) {
        self.id.set(id);
        self.slot.set(slot);
        self.began.set(opened.at);
        self.client.set(opened.client);
        self.frontend.set(opened.frontend);
        self.tls.set(opened.tls);
        self.quic.set(opened.quic);
        self.state.set(opened.state);
        self.backend.set(None);
        self.server.set(None);
        self.bytes_in.set(0);
        self.bytes_out.set(0);
        self.moved.to_server.set(0);
        self.moved.to_client.set(0);
    }

    /// Its place in the registry (`SessionTable::show_request_id`).
    pub(crate) fn slot(&self) -> usize {
        self.slot.get()
    }

    pub(crate) fn frontend(&self) -> usize {
        self.frontend.get()
    }

    /// The client's address (what a trusted PROXY protocol header said, once it did).
    pub(crate) fn client(&self) -> SocketAddr {
        self.client.get()
    }

    /// The client is at `addr` (what a trusted PROXY protocol header said).
    pub(crate) fn set_client(&self, addr: SocketAddr) {
        self.client.set(addr);
    }

    /// The server this connection is on now (`None`: none).
    pub(crate) fn on_server(&self, backend: usize, server: Option<ServerId>) {
        self.backend.set(Some(backend));
        self.server.set(server);
    }

    /// One stream ended with these bytes.
    pub(crate) fn add_bytes(&self, to_server: u64, to_client: u64) {
        self.bytes_in.set(self.bytes_in.get() + to_server);
        self.bytes_out.set(self.bytes_out.get() + to_client);
    }
}

/// A new connection's facts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opened {
    pub at: Instant,
    pub client: SocketAddr,
    pub frontend: usize,
    pub tls: bool,
    /// HTTP/3 over QUIC (`tls` is true too).
    pub quic: bool,
    pub state: SessionState,
}

/// The names `view` prints, looked up by the caller (it knows the config and live sets).
pub(crate) trait Names {
    fn frontend(&self, frontend: usize) -> String;
    fn backend(&self, backend: usize) -> Option<String>;
    fn server(&self, backend: usize, server: ServerId) -> Option<String>;
}

/// A slab that grew to this many slots is freed once every slot is free again.
const SHRINK_EMPTY_AT: usize = 1024;

#[derive(Debug, Default)]
pub(crate) struct SessionTable {
    slots: RefCell<Vec<Option<Rc<SessionEntry>>>>,
    /// By slot: a copy of the ID of the HTTP/1 request in flight there (`[frontend]
    /// request_id`), for `show sessions`. Beside the entries, not in them: a thread whose
    /// frontends have no request IDs keeps this empty, and no entry carries room for it.
    shown_ids: RefCell<Vec<Option<Box<IdSlot>>>>,
    free: RefCell<Vec<usize>>,
    spare: RefCell<Vec<Rc<SessionEntry>>>,
    next_id: Cell<u64>,
}

impl SessionTable {
    /// Registers a new connection; it leaves the registry when the guard drops.
    pub(crate) fn open(&self, opened: Opened) -> Registered<'_> {
        let entry = self
            .spare
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| Rc::new(SessionEntry::new(opened.at)));
        let id = self.next_id.get() + 1;
        self.next_id.set(id);
        let mut slots = self.slots.borrow_mut();
        let slot = match self.free.borrow_mut().pop() {
            Some(i) => i,
            None => {
                slots.push(None);
                slots.len() - 1
            }
        };
        entry.reset(id, slot, opened);
        if let Some(s) = slots.get_mut(slot) {
            *s = Some(Rc::clone(&entry));
        }
        Registered {
            table: self,
            entry,
            detached: false,
        }
    }

    /// A parked connection's entry, registered all along, back under a guard.
    pub(crate) fn reattach(&self, entry: Rc<SessionEntry>) -> Registered<'_> {
        Registered {
            table: self,
            entry,
            detached: false,
        }
    }

    /// The request in flight on the connection at `slot` has this ID; `spare` gives storage
    /// for it the first time (the thread's spares: no allocation per request).
    pub(crate) fn show_request_id(&self, slot: usize, id: &IdSlot, spare: impl FnOnce() -> Box<IdSlot>) {
        let Ok(mut shown) = self.shown_ids.try_borrow_mut() else {
            return;
        };
        if shown.len() <= slot {
            shown.resize_with(slot + 1, || None);
        }
        if let Some(place) = shown.get_mut(slot) {
            place.get_or_insert_with(spare).copy_from(id);
        }
    }

    /// The request at `slot` ended: its ID's storage, for the thread's spares.
    pub(crate) fn take_request_id(&self, slot: usize) -> Option<Box<IdSlot>> {
        self.shown_ids.try_borrow_mut().ok()?.get_mut(slot)?.take()
    }

    fn close(&self, entry: &Rc<SessionEntry>) {
        let slot = entry.slot.get();
        if let Ok(mut shown) = self.shown_ids.try_borrow_mut()
            && let Some(place) = shown.get_mut(slot)
        {
            *place = None;
        }
        let mut slots = self.slots.borrow_mut();
        if slots.get_mut(slot).and_then(Option::take).is_some() {
            let mut free = self.free.borrow_mut();
            free.push(slot);
            // The last one out of a slab a flood made big gives its memory back.
            if free.len() == slots.len() && slots.len() >= SHRINK_EMPTY_AT {
                *slots = Vec::new();
                *free = Vec::new();
                if let Ok(mut shown) = self.shown_ids.try_borrow_mut() {
                    *shown = Vec::new();
                }
            }
        }
    }

    /// Live connections, at most `limit` of those `keep` accepts (with how many more it
    /// accepted). Runs on the owning thread.
    pub(crate) fn view(
        &self,
        worker: u32,
        names: &dyn Names,
        keep: &dyn Fn(&SessionEntry) -> bool,
        limit: usize,
    ) -> (Vec<SessionView>, u64) {
        let now = Instant::now();
        let slots = self.slots.borrow();
        let shown = self.shown_ids.try_borrow().ok();
        let mut out = Vec::new();
        let mut left_out = 0;
        for e in slots.iter().flatten().filter(|e| keep(e)) {
            if out.len() >= limit {
                left_out += 1;
                continue;
            }
            out.push(view_of(e, shown.as_deref().map(Vec::as_slice), worker, names, now));
        }
        (out, left_out)
    }
}

fn view_of(
    e: &SessionEntry,
    shown: Option<&[Option<Box<IdSlot>>]>,
    worker: u32,
    names: &dyn Names,
    now: Instant,
) -> SessionView {
    let backend = e.backend.get();
    SessionView {
        id: e.id.get(),
        worker,
        age_ms: u64::try_from(now.saturating_duration_since(e.began.get()).as_millis()).unwrap_or(u64::MAX),
        client: e.client.get().to_string(),
        frontend: names.frontend(e.frontend.get()),
        backend: backend.and_then(|b| names.backend(b)),
        server: backend.zip(e.server.get()).and_then(|(b, s)| names.server(b, s)),
        bytes_in: e.bytes_in.get() + e.moved.to_server.get(),
        bytes_out: e.bytes_out.get() + e.moved.to_client.get(),
        state: e.state.get().as_str().to_string(),
        tls: e.tls.get(),
        quic: e.quic.get(),
        request_id: shown
            .and_then(|ids| ids.get(e.slot.get())?.as_deref())
            .map(|id| String::from_utf8_lossy(id.as_bytes()).into_owned())
            .filter(|t| !t.is_empty()),
    }
}

/// A connection in the registry; dropping it takes it out (and keeps its entry as a spare).
pub(crate) struct Registered<'a> {
    table: &'a SessionTable,
    entry: Rc<SessionEntry>,
    /// Handed to the park: the connection stays in the registry (`reattach`).
    detached: bool,
}

impl Registered<'_> {
    pub(crate) fn entry(&self) -> Rc<SessionEntry> {
        Rc::clone(&self.entry)
    }

    /// The entry, left in the registry for a parked connection (`SessionTable::reattach`
    /// puts it back under a guard).
    pub(crate) fn detach(mut self) -> Rc<SessionEntry> {
        self.detached = true;
        Rc::clone(&self.entry)
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        self.table.close(&self.entry);
        let mut spare = self.table.spare.borrow_mut();
        // Reused only when no one else holds it (the task-local is gone by now).
        if spare.len() < SPARES && Rc::strong_count(&self.entry) == 1 {
            spare.push(Rc::clone(&self.entry));
        }
    }
}

tokio::task_local! {
    /// The entry of the session whose task is running.
    static CURRENT: Rc<SessionEntry>;
}

/// Runs `fut` (a session's whole life) with `entry` as its current session.
pub(crate) fn scope<F: std::future::Future>(entry: Rc<SessionEntry>, fut: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(entry, fut)
}

/// Updates the current session's entry (nothing outside a session's task).
#[inline]
pub(crate) fn note(f: impl FnOnce(&SessionEntry)) {
    let _ = CURRENT.try_with(|e| f(e));
}

/// The current session's state becomes `state`.
#[inline]
pub(crate) fn set_state(state: SessionState) {
    note(|e| e.state.set(state));
}

/// The current session's entry (a relay counts into its `moved`).
pub(crate) fn current() -> Option<Rc<SessionEntry>> {
    CURRENT.try_with(Rc::clone).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    struct Plain;
    impl Names for Plain {
        fn frontend(&self, f: usize) -> String {
            format!("fe{f}")
        }
        fn backend(&self, b: usize) -> Option<String> {
            Some(format!("be{b}"))
        }
        fn server(&self, _: usize, s: ServerId) -> Option<String> {
            Some(format!("s{}", s.0))
        }
    }

    fn opened(frontend: usize) -> Opened {
        Opened {
            at: Instant::now(),
            client: "127.0.0.1:9".parse().unwrap(),
            frontend,
            tls: false,
            quic: false,
            state: SessionState::ReadingRequest,
        }
    }

    #[test]
    fn entries_come_and_go_in_place_and_are_reused() {
        let t = SessionTable::default();
        let a = t.open(opened(0));
        let b = t.open(opened(1));
        b.entry().on_server(2, Some(ServerId(5)));
        b.entry().state.set(SessionState::Forwarding);
        let all = |_: &SessionEntry| true;
        let (rows, left) = t.view(1, &Plain, &all, 10);
        assert_eq!((rows.len(), left), (2, 0));
        assert_eq!(rows[1].server.as_deref(), Some("s5"));
        assert_eq!(rows[1].state, "forwarding");
        let (rows, left) = t.view(1, &Plain, &all, 1);
        assert_eq!((rows.len(), left), (1, 1));
        let first = Rc::as_ptr(&a.entry());
        drop(a);
        assert_eq!(t.view(1, &Plain, &all, 10).0.len(), 1);
        // The freed slot and entry serve the next connection, reset.
        let c = t.open(opened(3));
        assert_eq!(Rc::as_ptr(&c.entry()), first);
        assert_eq!(t.slots.borrow().len(), 2);
        let (rows, _) = t.view(1, &Plain, &all, 10);
        assert!(
            rows.iter()
                .any(|r| r.frontend == "fe3" && r.backend.is_none() && r.id == 3)
        );
    }
}
