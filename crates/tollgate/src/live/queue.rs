//! A backend's queue of requests waiting for a server slot: one per backend, shared by
//! every worker thread of the process, strictly first come, first served.
//!
//! A slot freed on a server while requests wait is not given back to the server for
//! whoever looks first: it is handed over, already counted in the server's `active`, to the
//! oldest waiter that can use it (HAProxy's hand-off), so a request arriving later, on any
//! thread, never overtakes one that waits. The new request finds every server full (the
//! freed slot never showed) and queues behind.
//!
//! Cost: the fast path (a server has room) never looks at the queue. A slot release on a
//! server with a `maxconn` reads one atomic (`waiting`) and takes the lock only when it is
//! not zero. The lock is process-wide per backend, and only queued requests take it (to
//! join, leave, or be handed a slot): when they exist every server is full and requests are
//! already waiting for whole connection lifetimes, so a short critical section (a
//! `VecDeque` push, pop or remove, no I/O, no wake-up under the lock) costs nothing that
//! matters, and buys fairness across threads that per-thread queues cannot give.
//!
//! Invariants: `waiting` equals the number of entries; a slot in flight to a waiter
//! ([`Grant`]) is released like any other slot if the waiter is gone, so no slot is ever
//! lost; a waiter keeps its ticket (its place in line) when it is woken to pick again after
//! a state change, and joins back at that place.
//!
//! Lock-free handshake with a releaser: a waiter publishes itself (`waiting` + 1) then looks
//! for room again; a releaser gives its slot back (`active` − 1) then looks at `waiting`
//! again; SeqCst fences between the two steps on both sides make at least one of them see
//! the other, so a slot freed while a request was joining is never missed.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use super::server::{Grant, ServerLive};

/// A waiter's place in line: smaller is older.
pub(crate) type Ticket = u64;

/// What wakes a waiter.
#[derive(Debug)]
pub(crate) enum Wake {
    /// A slot on a server, already counted in its `active`: the waiter owns it now.
    Slot(Grant),
    /// A server's state changed: pick again (a server may have become usable, or the
    /// waiter's only hope may have left). The waiter joins back at its ticket.
    Repick,
}

#[derive(Debug)]
struct Entry {
    ticket: Ticket,
    tx: oneshot::Sender<Wake>,
}

#[derive(Debug, Default)]
struct Waiters {
    next: Ticket,
    /// Ordered by ticket.
    entries: VecDeque<Entry>,
}

#[derive(Debug, Default)]
pub(crate) struct SlotQueue {
    /// `entries.len()`, readable without the lock (what a releasing slot checks).
    waiting: AtomicU32,
    waiters: Mutex<Waiters>,
}

impl SlotQueue {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(SlotQueue::default())
    }

    fn lock(&self) -> MutexGuard<'_, Waiters> {
        // A panic while holding it cannot leave the deque half-changed (std operations).
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether anyone waits (a hint: exact only under the lock).
    #[inline]
    pub(crate) fn has_waiters(&self) -> bool {
        self.waiting.load(Ordering::Relaxed) != 0
    }

    /// Requests in line now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> u32 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Joins the line: at the back with a new ticket, or back at `ticket` (a waiter woken to
    /// pick again keeps its place). Look for room again after this (see the module doc).
    pub(crate) fn join(&self, ticket: Option<Ticket>) -> Waiter<'_> {
        let (tx, rx) = oneshot::channel();
        let mut waiters = self.lock();
        let ticket = ticket.unwrap_or_else(|| {
            waiters.next += 1;
            waiters.next
        });
        let at = waiters.entries.partition_point(|e| e.ticket < ticket);
        waiters.entries.insert(at, Entry { ticket, tx });
        self.waiting.fetch_add(1, Ordering::Relaxed);
        drop(waiters);
        std::sync::atomic::fence(Ordering::SeqCst);
        Waiter {
            queue: self,
            ticket,
            rx,
            in_line: true,
        }
    }

    /// Gives a slot on `server` (already counted in its `active`) to the oldest waiter;
    /// false if nobody waits (the caller still owns the slot).
    pub(super) fn hand_over(&self, server: &Arc<ServerLive>) -> bool {
        let mut grant = Grant::new(Arc::clone(server));
        loop {
            let Some(entry) = self.pop_front() else {
                grant.disarm();
                return false;
            };
            // Sent outside the lock: waking a task on another thread may be a syscall.
            match entry.tx.send(Wake::Slot(grant)) {
                Ok(()) => return true,
                // That waiter gave up meanwhile (its timeout, its client): the next one.
                Err(Wake::Slot(back)) => grant = back,
                Err(Wake::Repick) => return false,
            }
        }
    }

    fn pop_front(&self) -> Option<Entry> {
        let mut waiters = self.lock();
        let entry = waiters.entries.pop_front()?;
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        Some(entry)
    }

    /// A server's state or the server set changed: every waiter picks again (a server may
    /// have become usable; the one it waited for may have gone). Each keeps its ticket.
    pub(crate) fn wake_all(&self) {
        if !self.has_waiters() {
            return;
        }
        let entries = {
            let mut waiters = self.lock();
            self.waiting.store(0, Ordering::Relaxed);
            std::mem::take(&mut waiters.entries)
        };
        for entry in entries {
            // A waiter already gone has nothing to redo.
            let _ = entry.tx.send(Wake::Repick);
        }
    }

    /// Takes `ticket`'s entry out of line, if it is still there (dropped by the caller,
    /// outside the lock).
    fn remove(&self, ticket: Ticket) -> Option<Entry> {
        let mut waiters = self.lock();
        let at = waiters.entries.partition_point(|e| e.ticket < ticket);
        if waiters.entries.get(at).is_none_or(|e| e.ticket != ticket) {
            return None;
        }
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        waiters.entries.remove(at)
    }
}

/// One request in line; leaving it (drop) removes it. A slot handed over but not yet taken
/// out is released when the waiter drops.
#[derive(Debug)]
pub(crate) struct Waiter<'q> {
    queue: &'q SlotQueue,
    ticket: Ticket,
    rx: oneshot::Receiver<Wake>,
    /// Its entry is still in line (not popped by a wake it received): only then does
    /// dropping it remove an entry, so a waiter that joined back at the same ticket keeps
    /// its own.
    in_line: bool,
}

impl Waiter<'_> {
    pub(crate) fn ticket(&self) -> Ticket {
        self.ticket
    }

    /// Until a slot is handed over or the waiter must pick again.
    pub(crate) async fn woken(&mut self) -> Wake {
        // The sender dropped unsent only if the queue itself went away: pick again.
        let wake = (&mut self.rx).await.unwrap_or(Wake::Repick);
        self.in_line = false;
        wake
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        // Before `rx` drops: a grant it may hold releases its slot, which may take the lock.
        if self.in_line {
            drop(self.queue.remove(self.ticket));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::live::server::OperState;

    /// Polls once: `Some` if ready.
    fn poll_now<F: Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
        match f.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        }
    }

    fn woken_now(w: &mut Waiter<'_>) -> Option<Wake> {
        poll_now(pin!(w.woken()))
    }

    /// A server with `maxconn = 1` on `queue`.
    fn full_server(queue: &Arc<SlotQueue>) -> Arc<ServerLive> {
        let server = crate::config::Server {
            id: crate::live::ServerId(0),
            name: "s".into(),
            address: std::net::SocketAddr::from(([127, 0, 0, 1], 1)),
            host: None,
            weight: 1,
            maxconn: 1,
            backup: false,
            tls: None,
            proto: Default::default(),
            slowstart: std::time::Duration::ZERO,
            check: Default::default(),
            send_proxy: None,
        };
        let backend: Arc<str> = Arc::from("test");
        Arc::new(ServerLive::new(
            &server,
            (crate::live::BackendId(0), &backend),
            1,
            Arc::clone(queue),
        ))
    }

    #[test]
    fn a_freed_slot_goes_to_the_oldest_waiter_and_a_late_request_finds_none() {
        let queue = SlotQueue::new();
        let server = full_server(&queue);
        let held = server.try_take().expect("the one slot");
        let (mut first, mut second) = (queue.join(None), queue.join(None));
        assert!(first.ticket() < second.ticket());
        assert_eq!(queue.len(), 2);
        drop(held);
        assert_eq!(server.active(), 1, "handed over, not given back");
        assert!(server.try_take().is_none(), "a newcomer does not see the freed slot");
        let Some(Wake::Slot(grant)) = woken_now(&mut first) else {
            panic!("the oldest waiter gets the slot")
        };
        assert!(woken_now(&mut second).is_none(), "the younger one still waits");
        let slot = grant.into_slot().expect("a slot");
        drop(first);
        drop(slot);
        let Some(Wake::Slot(grant)) = woken_now(&mut second) else {
            panic!("then the next")
        };
        assert_eq!(queue.len(), 0);
        drop(grant);
        drop(second);
        assert_eq!(server.active(), 0, "a grant nobody took out is released");
    }

    #[test]
    fn a_waiter_that_left_is_skipped_and_an_untaken_grant_released() {
        let queue = SlotQueue::new();
        let server = full_server(&queue);
        let held = server.try_take().expect("the one slot");
        let gone = queue.join(None);
        let next = queue.join(None);
        drop(gone);
        assert_eq!(queue.len(), 1, "leaving removes the entry");
        drop(held);
        assert_eq!((server.active(), queue.len()), (1, 0), "in flight to `next`");
        // Handed over to a waiter that gives up before taking it out: back to the server.
        drop(next);
        assert_eq!(server.active(), 0);
    }

    #[test]
    fn a_state_change_wakes_every_waiter_who_rejoins_in_its_place() {
        let queue = SlotQueue::new();
        let server = full_server(&queue);
        let held = server.try_take().expect("the one slot");
        let mut a = queue.join(None);
        let mut b = queue.join(None);
        let (ta, tb) = (a.ticket(), b.ticket());
        // The health checker's path: an operational state change wakes the backend's line.
        assert!(server.set_oper(OperState::Down));
        assert!(matches!(woken_now(&mut a), Some(Wake::Repick)));
        assert!(matches!(woken_now(&mut b), Some(Wake::Repick)));
        assert_eq!(queue.len(), 0);
        // b picks again first (another thread), yet a keeps its place ahead of it.
        drop(b);
        let mut b = queue.join(Some(tb));
        drop(a);
        let mut a = queue.join(Some(ta));
        let _c = queue.join(None);
        assert!(server.set_oper(OperState::Up));
        drop((woken_now(&mut a), woken_now(&mut b)));
        let mut a = queue.join(Some(ta));
        let mut b = queue.join(Some(tb));
        drop(held);
        let Some(Wake::Slot(_slot)) = woken_now(&mut a) else {
            panic!("the older ticket first")
        };
        assert!(woken_now(&mut b).is_none());
    }

    #[test]
    fn a_drained_servers_slot_is_not_handed_over() {
        let queue = SlotQueue::new();
        let server = full_server(&queue);
        let held = server.try_take().expect("the one slot");
        let mut w = queue.join(None);
        assert!(server.set_admin(crate::live::server::AdminState::Drain));
        assert!(matches!(woken_now(&mut w), Some(Wake::Repick)));
        let ticket = w.ticket();
        drop(w);
        let mut w = queue.join(Some(ticket));
        drop(held);
        assert!(woken_now(&mut w).is_none(), "nothing new may go to a drained server");
        assert_eq!(server.active(), 0);
    }
}
