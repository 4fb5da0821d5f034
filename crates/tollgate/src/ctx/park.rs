//! The park: idle client connections held outside any task.
//!
//! An HTTP/1 client connection (plain, or HTTP/1.1 over TLS) that waits longer than
//! `global.park_idle_after` for its next request, its first, or the rest of a head it began,
//! leaves its session task: the task ends, its future, its reactor registration, its head
//! scratch and response buffer are freed, and what is left ([`IdleConn`] and
//! [`ParkedGuards`], about 200 bytes in a slab, plus a begun head's bytes on their
//! right-sized shelf, plus over TLS the boxed rustls connection, about 6.4 KB with its
//! buffers) waits here. One epoll instance of
//! the park's own, registered with the worker's reactor as one descriptor, watches every
//! parked socket; one heap orders their deadlines. When a socket becomes readable (a
//! request, a close, an error) or the deadline of a first request or of a begun head passes,
//! the park hands the connection back (`run`'s `resume`), which starts a new session task
//! for it where the old one left off (its session answers 408 at such a deadline). A
//! keep-alive deadline that passes closes the connection here, quietly, as the session
//! would have.
//!
//! Why not a task per idle connection: a tokio task and a reactor registration are 128-byte
//! aligned cells of a few hundred bytes each, before any state; a million idle keep-alive
//! connections would hold gigabytes that no budget counts. Parked, a connection holds its
//! socket (kernel memory) and this slab entry. A connection is parked only after the grace
//! time, so a busy keep-alive client (the next request within milliseconds) never pays the
//! three epoll_ctl calls a park and a resume cost.
//!
//! Invariants: only the owning worker thread touches the park (it is `!Send`); a slab entry
//! is in the epoll set exactly while it is in the slab (added on park, deleted on resume;
//! closing the socket removes it too); heap entries name a slab key and its generation and
//! are dropped lazily once that entry left. A TLS connection is parked only with nothing
//! buffered above the socket but half a record (no plaintext or close_notify to read, no
//! record to write, `ClientStream::can_park`): what wakes it must be the socket. Once the
//! worker stops, `run` hands every parked
//! connection back (their sessions then end as any idle one does at a stop) and the park
//! refuses new ones.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::Arc;

use rustix::event::epoll;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::origin::Origin;
use super::sessions::{Opened, Registered, SessionEntry};
use super::stat::OpenSession;
use super::worker::{ActiveSession, WorkerCtx};
use crate::budget::ConnPermits;
use crate::stats::WorkerStats;

/// Events taken from the park's epoll per system call.
const EVENTS_PER_WAIT: usize = 256;

/// A park whose slab grew to this many entries frees it once the last one left.
const SHRINK_EMPTY_AT: usize = 1024;

/// What a session needs to go on with an idle connection where it left off.
pub(crate) struct IdleConn {
    pub socket: std::net::TcpStream,
    /// A terminated TLS connection's state, its handshake done, nothing buffered in it but
    /// what the socket must complete (a partial record): its keys, sequence numbers and
    /// buffers (boxed: a plain connection pays a pointer for it). `None`: plain HTTP/1.
    pub tls: Option<Box<rustls::ServerConnection>>,
    /// The session's PROXY protocol facts, when it had a header.
    pub origin: Option<Rc<Origin>>,
    /// The session counted itself in its frontend's current sessions (`accept_proxy`).
    pub open_counted: bool,
    /// The bytes of a head begun and not finished (a slow client, the overload case),
    /// right-sized; empty for a connection between requests.
    pub shelf: Box<[u8]>,
    pub at: ParkedAt,
}

/// Where the session of a parked connection stood.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ParkedAt {
    pub frontend: usize,
    /// The client (what a PROXY protocol header said, with `accept_proxy`).
    pub peer: SocketAddr,
    /// False once parking failed (the kernel refused the socket): it is not tried again.
    pub may_park: bool,
    /// Requests served on the connection so far (0: waiting for its first).
    pub served: u64,
    pub accepted: Instant,
    /// When the next stream (request) began: the end of the last response, or the accept.
    pub stream_began: Instant,
    /// When the wait ends: `http_request` after the accept for a first request (or after
    /// the first byte of a later one begun on the shelf), `http_keep_alive` after the last
    /// response for a later one.
    pub deadline: Instant,
}

impl IdleConn {
    /// Its session answers at the deadline (408: a request was due, or begun), rather
    /// than the park closing it quietly (a keep-alive wait between requests).
    fn answers_at_deadline(&self) -> bool {
        self.at.served == 0 || !self.shelf.is_empty()
    }
}

/// The counted things a session holds for its whole life, without a borrow of the worker:
/// a parked connection is still open (`sessions_active`, its frontend's current sessions,
/// its `show sessions` entry, its `maxconn` permits). `resume` gives them back to a new
/// task; closing a parked connection counts it out as the task's guards would have.
pub(crate) struct ParkedGuards {
    pub entry: Rc<SessionEntry>,
    /// The frontend's current-sessions gauge counts this connection.
    pub open_counted: bool,
    pub permits: ConnPermits,
}

/// The guards of a session's task: counted out when they drop (the connection closed),
/// or handed to the park (`park`) while the connection waits there.
pub(crate) struct SessionGuards<'a> {
    active: ActiveSession<'a>,
    open: Option<OpenSession<'a>>,
    registered: Registered<'a>,
    permits: ConnPermits,
}

impl<'a> SessionGuards<'a> {
    /// A new connection's: in `sessions_active` already (counted by whoever spawned its
    /// task), in its frontend's current sessions if `counted` (not yet with
    /// `accept_proxy`: `proxy::serve` counts it once admitted), in the registry from now.
    pub(crate) fn open(ctx: &'a WorkerCtx, opened: Opened, counted: bool, permits: ConnPermits) -> Self {
        SessionGuards {
            active: ActiveSession::new(ctx),
            open: counted.then(|| ctx.open_session(opened.frontend, opened.at)),
            registered: ctx.sessions.open(opened),
            permits,
        }
    }

    pub(crate) fn entry(&self) -> Rc<SessionEntry> {
        self.registered.entry()
    }

    /// What the park keeps of them. `open_counted`: the session counted itself in its
    /// frontend's current sessions (`accept_proxy`) and left that count standing.
    pub(crate) fn park(self, open_counted: bool) -> ParkedGuards {
        self.active.detach();
        let counted = self.open.is_some_and(OpenSession::detach);
        ParkedGuards {
            entry: self.registered.detach(),
            open_counted: open_counted || counted,
            permits: self.permits,
        }
    }
}

impl ParkedGuards {
    /// The guards again, for the task that serves the connection on.
    pub(crate) fn resume(self, ctx: &WorkerCtx) -> SessionGuards<'_> {
        let cell = self
            .open_counted
            .then(|| ctx.stat().and_then(|s| s.frontend(self.entry.frontend())))
            .flatten();
        SessionGuards {
            active: ActiveSession::new(ctx),
            open: self.open_counted.then(|| OpenSession::resumed(cell)),
            registered: ctx.sessions.reattach(self.entry),
            permits: self.permits,
        }
    }

    /// The connection closed while parked: counted out as its task's guards would be.
    pub(crate) fn close(self, ctx: &WorkerCtx) {
        drop(self.resume(ctx));
    }
}

/// An idle connection and its guards.
pub(crate) struct Parked {
    pub conn: IdleConn,
    pub guards: ParkedGuards,
}

struct Slot {
    parked: Option<Parked>,
    generation: u32,
}

pub(crate) struct Park {
    /// Created on the first park (inside the worker's runtime).
    epoll: RefCell<Option<Rc<AsyncFd<OwnedFd>>>>,
    slots: RefCell<Vec<Slot>>,
    free: RefCell<Vec<u32>>,
    deadlines: RefCell<BinaryHeap<Reverse<(Instant, u32, u32)>>>,
    /// Wakes `run` when a deadline earlier than the ones it waits for was added.
    rearm: Notify,
    closed: Cell<bool>,
    stats: Arc<WorkerStats>,
}

impl Park {
    pub(crate) fn new(stats: Arc<WorkerStats>) -> Self {
        Park {
            epoll: RefCell::new(None),
            slots: RefCell::default(),
            free: RefCell::default(),
            deadlines: RefCell::default(),
            rearm: Notify::new(),
            closed: Cell::new(false),
            stats,
        }
    }

    /// The park's epoll instance, made on first use.
    fn epoll(&self) -> io::Result<Rc<AsyncFd<OwnedFd>>> {
        if let Some(e) = self.epoll.borrow().as_ref() {
            return Ok(Rc::clone(e));
        }
        let fd = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let registered = Rc::new(tollgate_sys::reactor::register_readable(fd)?);
        *self.epoll.borrow_mut() = Some(Rc::clone(&registered));
        Ok(registered)
    }

    /// Parks `parked`; gives it back if the park is closed (the worker stops) or the
    /// kernel refused the socket, so the caller serves it on. (Given back by value, not
    /// boxed: the refusal is rare and a box would be an allocation per park.)
    #[allow(clippy::result_large_err)]
    pub(crate) fn park(&self, parked: Parked) -> Result<(), Parked> {
        if self.closed.get() {
            return Err(parked);
        }
        let Ok(epoll) = self.epoll() else {
            return Err(parked);
        };
        let mut slots = self.slots.borrow_mut();
        let key = match self.free.borrow_mut().pop() {
            Some(k) => k,
            None => match u32::try_from(slots.len()) {
                Ok(k) => {
                    slots.push(Slot {
                        parked: None,
                        generation: 0,
                    });
                    k
                }
                Err(_) => return Err(parked),
            },
        };
        let Some(slot) = slots.get_mut(key as usize) else {
            return Err(parked);
        };
        let data = epoll::EventData::new_u64(u64::from(key));
        let flags = epoll::EventFlags::IN | epoll::EventFlags::RDHUP;
        if epoll::add(epoll.get_ref(), &parked.conn.socket, data, flags).is_err() {
            self.free.borrow_mut().push(key);
            return Err(parked);
        }
        let deadline = parked.conn.at.deadline;
        slot.generation = slot.generation.wrapping_add(1);
        let generation = slot.generation;
        slot.parked = Some(parked);
        drop(slots);
        let mut deadlines = self.deadlines.borrow_mut();
        let earliest = deadlines.peek().is_none_or(|Reverse((at, _, _))| deadline < *at);
        deadlines.push(Reverse((deadline, key, generation)));
        drop(deadlines);
        if earliest {
            self.rearm.notify_one();
        }
        self.stats.sessions_parked.add(1);
        self.stats.park_entered.add(1);
        Ok(())
    }

    /// Takes the connection under `key` out of the park (and out of its epoll set). The
    /// last one out of a park that had grown (a flood) gives the slab's memory back.
    fn take(&self, key: u32) -> Option<Parked> {
        let mut slots = self.slots.borrow_mut();
        let parked = slots.get_mut(key as usize)?.parked.take()?;
        let mut free = self.free.borrow_mut();
        free.push(key);
        if free.len() == slots.len() && slots.len() >= SHRINK_EMPTY_AT {
            // Every heap entry names a slot that left: none can match once keys restart.
            *slots = Vec::new();
            *free = Vec::new();
            *self.deadlines.borrow_mut() = BinaryHeap::new();
        }
        drop((slots, free));
        if let Some(e) = self.epoll.borrow().as_ref() {
            // Fails only if the socket is gone, which it is not (we own it).
            let _ = epoll::delete(e.get_ref(), &parked.conn.socket);
        }
        self.stats.sessions_parked.sub(1);
        Some(parked)
    }

    /// The earliest deadline of a connection still parked (stale heap entries dropped).
    fn next_deadline(&self) -> Option<Instant> {
        let slots = self.slots.borrow();
        let mut deadlines = self.deadlines.borrow_mut();
        while let Some(Reverse((at, key, generation))) = deadlines.peek().copied() {
            let live = slots
                .get(key as usize)
                .is_some_and(|s| s.generation == generation && s.parked.is_some());
            if live {
                return Some(at);
            }
            deadlines.pop();
        }
        None
    }

    /// Connections whose deadline passed by `now`.
    fn expired(&self, now: Instant) -> Vec<Parked> {
        let mut out = Vec::new();
        loop {
            let top = self.deadlines.borrow().peek().copied();
            match top {
                Some(Reverse((at, key, generation))) if at <= now => {
                    self.deadlines.borrow_mut().pop();
                    let live = self
                        .slots
                        .borrow()
                        .get(key as usize)
                        .is_some_and(|s| s.generation == generation);
                    if live && let Some(p) = self.take(key) {
                        out.push(p);
                    }
                }
                _ => return out,
            }
        }
    }

    /// Watches the parked connections until the worker stops: a readable one, or a first
    /// request whose deadline passed, goes to `resume`; a keep-alive one whose deadline
    /// passed to `close`. At the stop every parked connection goes to `resume`.
    pub(crate) async fn run(
        &self,
        stopping: impl Future<Output = ()>,
        resume: impl Fn(Parked),
        close: impl Fn(Parked),
    ) {
        tokio::pin!(stopping);
        let mut events: Vec<epoll::Event> = Vec::with_capacity(EVENTS_PER_WAIT);
        loop {
            let epoll = self.epoll.borrow().as_ref().map(Rc::clone);
            let deadline = self.next_deadline();
            let rearm = self.rearm.notified();
            let readable = async {
                match &epoll {
                    Some(e) => e.readable().await.ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = &mut stopping => break,
                guard = readable => {
                    let Some(mut guard) = guard else { continue };
                    let Some(e) = &epoll else { continue };
                    loop {
                        events.clear();
                        let n = match epoll::wait(e.get_ref(), rustix::buffer::spare_capacity(&mut events), Some(&rustix::time::Timespec::default())) {
                            Ok(n) => n,
                            Err(rustix::io::Errno::INTR) => continue,
                            Err(_) => 0,
                        };
                        for ev in events.drain(..) {
                            let key = ev.data.u64();
                            if let Some(p) = u32::try_from(key).ok().and_then(|k| self.take(k)) {
                                self.stats.park_resumed.add(1);
                                resume(p);
                            }
                        }
                        if n < EVENTS_PER_WAIT {
                            break;
                        }
                    }
                    guard.clear_ready();
                }
                () = until(deadline) => {
                    for p in self.expired(Instant::now()) {
                        if p.conn.answers_at_deadline() {
                            // A first request's wait, or a head begun: its session answers 408.
                            resume(p);
                        } else {
                            self.stats.park_expired.add(1);
                            close(p);
                        }
                    }
                }
                () = rearm => {}
            }
        }
        self.closed.set(true);
        let keys: Vec<u32> = (0..self.slots.borrow().len())
            .filter_map(|k| u32::try_from(k).ok())
            .collect();
        for key in keys {
            if let Some(p) = self.take(key) {
                resume(p);
            }
        }
    }
}

/// Completes when `deadline` passes; never without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
