//! The park: idle client connections held outside any task.
//!
//! An HTTP/1 client connection (plain, or HTTP/1.1 over TLS) that waits longer than
//! `global.park_idle_after` for its next request, its first, or the rest of a head it began,
//! leaves its session task: the task ends, its future, its reactor registration, its head
//! scratch and response buffer are freed, and what is left ([`IdleConn`] and
//! [`ParkedGuards`], 160 bytes in a slab, plus a begun head's bytes on their
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
//! three epoll_ctl calls a first park costs (out of tokio's reactor, into the park's set);
//! a client that asks seldom, parked at once after each response (`proxy::http::stream`),
//! pays one: the re-arming of its one-shot registration.
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
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::Arc;

use rustix::event::epoll;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::chunked::{Chunked, ChunkedHeap};
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

/// The deadline heap is compacted once it holds this many more entries than 1.25 times the
/// parked connections.
const COMPACT_DEADLINES_OVER: usize = 64;

/// How long after a connection parked the allocator is asked to give back what the tasks
/// that left freed (`collect_at`): long enough for a wave of parks to come in, well
/// inside the once-a-second memory tick.
const COLLECT_AFTER_PARK: std::time::Duration = std::time::Duration::from_millis(200);

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

/// Where the session of a parked connection stood. Its frontend and its client's address
/// are not kept here: its `show sessions` entry holds them ([`ParkedGuards::opening`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ParkedAt {
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
    /// The socket is in the park's epoll set already, disarmed (it woke once; one-shot):
    /// the next park re-arms it with one `epoll_ctl(MOD)` instead of adding it.
    pub watched: bool,
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

/// What a parked connection's `show sessions` entry says of it, for the session it resumes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Opening {
    pub frontend: usize,
    /// The client (what a PROXY protocol header said, with `accept_proxy`).
    pub peer: SocketAddr,
}

impl ParkedGuards {
    /// The connection's frontend and client, from its `show sessions` entry.
    pub(crate) fn opening(&self) -> Opening {
        Opening {
            frontend: self.entry.frontend(),
            peer: self.entry.client(),
        }
    }

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

/// The parked connections' slots, in chunks that never move ([`Chunked`]): at a million
/// parked connections a doubling `Vec` would move 224 MB in the one park that crossed a
/// power of two.
#[derive(Default)]
struct Slab {
    slots: Chunked<Slot>,
}

impl Slab {
    fn len(&self) -> usize {
        self.slots.len()
    }

    fn get(&self, key: u32) -> Option<&Slot> {
        self.slots.get(key as usize)
    }

    fn get_mut(&mut self, key: u32) -> Option<&mut Slot> {
        self.slots.get_mut(key as usize)
    }

    /// A new empty slot at the end; its key, or `None` past `u32` keys.
    fn push(&mut self) -> Option<u32> {
        let key = u32::try_from(self.slots.len()).ok()?;
        self.slots.push(Slot {
            parked: None,
            generation: 0,
        });
        Some(key)
    }

    /// Every slot's key and generation.
    fn generations(&self) -> Vec<(u32, u32)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(k, s)| Some((u32::try_from(k).ok()?, s.generation)))
            .collect()
    }
}

pub(crate) struct Park {
    /// Created on the first park (inside the worker's runtime).
    epoll: RefCell<Option<Rc<AsyncFd<OwnedFd>>>>,
    slots: RefCell<Slab>,
    free: RefCell<Vec<u32>>,
    /// (deadline, key, generation), the earliest on top; the deadline in whole
    /// milliseconds after `epoch`, rounded up (16 bytes an entry, not 24: a connection
    /// may fire a millisecond late, never early). In chunks that never move (a
    /// `BinaryHeap`'s doubling left its old copies' pages resident: `ctx::chunked`).
    deadlines: RefCell<ChunkedHeap<(u64, u32, u32)>>,
    epoch: Instant,
    /// When `run` next asks the allocator to give back what parked tasks freed (set by the
    /// first park after the last time it did).
    collect_at: Cell<Option<Instant>>,
    /// Wakes `run` when a deadline earlier than the ones it waits for was added, or a
    /// collect was scheduled.
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
            epoch: Instant::now(),
            collect_at: Cell::new(None),
            rearm: Notify::new(),
            closed: Cell::new(false),
            stats,
        }
    }

    /// `at` as whole milliseconds after the park's epoch, rounded up.
    fn millis(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.epoch);
        let ms = since.as_millis() + u128::from(!since.subsec_nanos().is_multiple_of(1_000_000));
        u64::try_from(ms).unwrap_or(u64::MAX)
    }

    /// The instant `millis` named.
    fn instant(&self, ms: u64) -> Instant {
        self.epoch + std::time::Duration::from_millis(ms)
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
    pub(crate) fn park(&self, mut parked: Parked) -> Result<(), Parked> {
        if self.closed.get() {
            return Err(parked);
        }
        let Ok(epoll) = self.epoll() else {
            return Err(parked);
        };
        let mut slots = self.slots.borrow_mut();
        let key = match self.free.borrow_mut().pop() {
            Some(k) => k,
            None => match slots.push() {
                Some(k) => k,
                None => return Err(parked),
            },
        };
        let Some(slot) = slots.get_mut(key) else {
            return Err(parked);
        };
        let generation = slot.generation.wrapping_add(1);
        if watch(epoll.get_ref(), &mut parked.conn, key, generation).is_err() {
            self.free.borrow_mut().push(key);
            return Err(parked);
        }
        let deadline = parked.conn.at.deadline;
        slot.generation = generation;
        slot.parked = Some(parked);
        let live = slots.len() - self.free.borrow().len();
        drop(slots);
        let mut deadlines = self.deadlines.borrow_mut();
        let due = self.millis(deadline);
        let earliest = deadlines.peek().is_none_or(|(at, _, _)| due < at);
        deadlines.push((due, key, generation));
        if deadlines.len() > live + live / 4 + COMPACT_DEADLINES_OVER {
            // Connections that left keep their entries until they reach the top: a
            // connection parked after every request (a slow client's) would leave one per
            // request for as long as its keep-alive timeout, and one parked before its first
            // request and after it, two. Dropping those that name a slot that left keeps
            // the heap at most about 1.25 times the parked count (O(n) once every n/4
            // parks).
            let slots = self.slots.borrow();
            deadlines.retain(|&(_, k, g)| is_live(&slots, k, g));
        }
        drop(deadlines);
        let collect = self.collect_at.get().is_none();
        if collect {
            self.collect_at.set(Some(Instant::now() + COLLECT_AFTER_PARK));
        }
        if earliest || collect {
            self.rearm.notify_one();
        }
        self.stats.sessions_parked.add(1);
        self.stats.park_entered.add(1);
        Ok(())
    }

    /// Takes the connection under `key` out of the park if it is still the one parked there
    /// as `generation`. `Woke`: its one-shot event came, so the epoll set has it disarmed
    /// and keeps it for its next park; `Leaves`: it is taken out of the set. The last one
    /// out of a park that had grown (a flood) gives the slab's memory back.
    fn take(&self, key: u32, generation: u32, why: Taken) -> Option<Parked> {
        let mut slots = self.slots.borrow_mut();
        let slot = slots.get_mut(key)?;
        if slot.generation != generation {
            return None;
        }
        let mut parked = slot.parked.take()?;
        let mut free = self.free.borrow_mut();
        free.push(key);
        if free.len() == slots.len() && slots.len() >= SHRINK_EMPTY_AT {
            // Every heap entry names a slot that left: none can match once keys restart.
            *slots = Slab::default();
            *free = Vec::new();
            self.deadlines.borrow_mut().clear();
        }
        drop((slots, free));
        match why {
            Taken::Woke => parked.conn.at.watched = true,
            Taken::Leaves => {
                if let Some(e) = self.epoll.borrow().as_ref() {
                    // Fails only if the socket is gone, which it is not (we own it).
                    let _ = epoll::delete(e.get_ref(), &parked.conn.socket);
                }
                parked.conn.at.watched = false;
            }
        }
        self.stats.sessions_parked.sub(1);
        Some(parked)
    }

    /// The earliest deadline of a connection still parked (stale heap entries dropped).
    fn next_deadline(&self) -> Option<Instant> {
        let slots = self.slots.borrow();
        let mut deadlines = self.deadlines.borrow_mut();
        while let Some((at, key, generation)) = deadlines.peek() {
            if is_live(&slots, key, generation) {
                return Some(self.instant(at));
            }
            deadlines.pop();
        }
        None
    }

    /// Connections whose deadline passed by `now`.
    fn expired(&self, now: Instant) -> Vec<Parked> {
        let mut out = Vec::new();
        loop {
            let top = self.deadlines.borrow().peek();
            match top {
                Some((at, key, generation)) if self.instant(at) <= now => {
                    self.deadlines.borrow_mut().pop();
                    if let Some(p) = self.take(key, generation, Taken::Leaves) {
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
            let collect_at = self.collect_at.get();
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
                            let (key, generation) = unpack(ev.data.u64());
                            if let Some(p) = self.take(key, generation, Taken::Woke) {
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
                () = until(collect_at) => {
                    // The tasks of the connections that parked since freed their futures
                    // and buffers; a worker that goes quiet now (every client idle) would
                    // keep those pages until its next memory tick, up to a second on.
                    self.collect_at.set(None);
                    tollgate_sys::allocator::collect();
                }
                () = rearm => {}
            }
        }
        self.closed.set(true);
        let keys = self.slots.borrow().generations();
        for (key, generation) in keys {
            if let Some(p) = self.take(key, generation, Taken::Leaves) {
                resume(p);
            }
        }
    }
}

/// Why a connection leaves the park.
#[derive(Clone, Copy)]
enum Taken {
    /// Its socket's one-shot event came (readable, closed, an error).
    Woke,
    /// A deadline, or the worker's stop.
    Leaves,
}

/// Whether `key` still holds the connection parked there as `generation`.
fn is_live(slots: &Slab, key: u32, generation: u32) -> bool {
    slots
        .get(key)
        .is_some_and(|s| s.generation == generation && s.parked.is_some())
}

/// An epoll event's data: the slot and the generation of the connection parked in it, so
/// that an event of a connection that left (its slot taken by another) is recognised.
fn pack(key: u32, generation: u32) -> u64 {
    u64::from(generation) << 32 | u64::from(key)
}

fn unpack(data: u64) -> (u32, u32) {
    // Both halves fit by construction (`pack`).
    ((data & u64::from(u32::MAX)) as u32, (data >> 32) as u32)
}

/// Arms the park's epoll for `conn`'s socket, one-shot: the first event disarms it, so a
/// connection that woke leaves the set as it is, with no `epoll_ctl` (`Taken::Woke`), and
/// its next park re-arms it with one. A socket the set does not have (never parked, or
/// taken out) is added; the kernel's answer corrects a wrong guess either way.
fn watch(epoll: &OwnedFd, conn: &mut IdleConn, key: u32, generation: u32) -> io::Result<()> {
    let data = epoll::EventData::new_u64(pack(key, generation));
    let flags = epoll::EventFlags::IN | epoll::EventFlags::RDHUP | epoll::EventFlags::ONESHOT;
    let socket = &conn.socket;
    let first = if conn.at.watched {
        epoll::modify(epoll, socket, data, flags)
    } else {
        epoll::add(epoll, socket, data, flags)
    };
    let done = match first {
        Err(rustix::io::Errno::NOENT) => epoll::add(epoll, socket, data, flags),
        Err(rustix::io::Errno::EXIST) => epoll::modify(epoll, socket, data, flags),
        other => other,
    };
    conn.at.watched = done.is_ok();
    Ok(done?)
}

/// Completes when `deadline` passes; never without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a parked connection holds in the slab, whatever the chunks reserve: its socket,
    /// where its session stood, its guards (the `show sessions` entry, the permits), the
    /// pointers to a TLS state, a PROXY origin and a begun head. 224 B while it also kept
    /// the frontend and the client's address, which the `show sessions` entry holds.
    #[test]
    fn a_parked_connection_s_slot_stays_small() {
        assert!(size_of::<Slot>() <= 160, "a slot is {} B", size_of::<Slot>());
    }

    #[test]
    fn a_deadline_in_milliseconds_is_never_early() {
        let park = Park::new(Arc::new(WorkerStats::default()));
        for nanos in [0, 1, 999_999, 1_000_000, 1_000_001, 2_500_000_000] {
            let at = park.epoch + std::time::Duration::from_nanos(nanos);
            let back = park.instant(park.millis(at));
            assert!(
                back >= at && back - at < std::time::Duration::from_millis(1),
                "{nanos} ns"
            );
        }
        // Before the epoch (cannot happen: a deadline is never in the past when parked).
        assert_eq!(park.millis(park.epoch - std::time::Duration::from_millis(5)), 0);
    }
}
