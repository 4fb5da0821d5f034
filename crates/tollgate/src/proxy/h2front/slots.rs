//! Heap slots for a connection's stream futures, reused from one stream to the next.
//!
//! A stream's future is several KiB (every state of a forwarded exchange). Pushed as it is,
//! the connection's `FuturesUnordered` allocated room for it and copied it whole on the way
//! in, for every stream. Here each future lives in a boxed slot: a stream that ends drops its
//! future in place and hands the slot back to its connection's spares, and the next stream is
//! written into a spare (no allocation; `FuturesUnordered` moves only the pointer).
//! Invariant: a slot is either in one [`Slotted`] or among the spares, never both; at most
//! [`MAX_SPARES`] slots wait per connection (a burst of streams does not keep its peak of
//! memory for the connection's life).
//!
//! Each stream poll that returns bumps the worker's watchdog progress (`stats::Progress`):
//! one connection task's poll may run many streams (each connecting to its server), and a
//! thread doing that is busy, not stuck.

use std::cell::RefCell;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::stats::Progress;

/// Spare slots a connection keeps for its next streams.
const MAX_SPARES: usize = 16;

type Slot<F> = Pin<Box<Option<F>>>;

/// The slots of one connection that no stream holds now.
pub(super) struct Spares<F> {
    free: RefCell<Vec<Slot<F>>>,
    progress: Arc<Progress>,
}

impl<F: Future<Output = ()>> Spares<F> {
    pub(super) fn new(progress: Arc<Progress>) -> Self {
        Spares {
            free: RefCell::new(Vec::new()),
            progress,
        }
    }

    /// The future `make` makes, in a spare slot or in a new one when none is left. (Made
    /// where it is stored: passed in made, the whole future would be copied into the slot.)
    #[inline(always)]
    pub(super) fn slot(&self, make: impl FnOnce() -> F) -> Slotted<'_, F> {
        let spare = self.free.borrow_mut().pop();
        let slot = match spare {
            Some(mut slot) => {
                slot.set(Some(make()));
                slot
            }
            None => Box::pin(Some(make())),
        };
        Slotted {
            slot: Some(slot),
            spares: self,
        }
    }

    /// The connection went quiet: its spare slots are freed (the next stream makes one).
    pub(super) fn release(&self) {
        self.free.borrow_mut().clear();
    }

    fn give_back(&self, slot: Slot<F>) {
        let mut free = self.free.borrow_mut();
        if free.len() < MAX_SPARES {
            free.push(slot);
        }
    }
}

/// One stream's future in its slot; the slot goes back to the spares once the future is done.
pub(super) struct Slotted<'a, F> {
    slot: Option<Slot<F>>,
    spares: &'a Spares<F>,
}

impl<F: Future<Output = ()>> Future for Slotted<'_, F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let spares = self.spares;
        let Some(slot) = self.slot.as_mut() else {
            return Poll::Ready(());
        };
        let Some(fut) = slot.as_mut().as_pin_mut() else {
            return Poll::Ready(());
        };
        let polled = fut.poll(cx);
        spares.progress.bump();
        if polled.is_pending() {
            return Poll::Pending;
        }
        // Dropped in place now (what it holds goes at once), the room kept for the next.
        slot.set(None);
        if let Some(slot) = self.slot.take() {
            spares.give_back(slot);
        }
        Poll::Ready(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    /// A future that is ready at its second poll and counts its drops.
    struct Twice {
        polled: bool,
        drops: Rc<std::cell::Cell<u32>>,
    }

    impl Future for Twice {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.polled {
                return Poll::Ready(());
            }
            self.polled = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    impl Drop for Twice {
        fn drop(&mut self) {
            self.drops.set(self.drops.get() + 1);
        }
    }

    #[test]
    fn finished_slots_are_reused_and_bounded() {
        let drops = Rc::new(std::cell::Cell::new(0));
        let twice = || Twice {
            polled: false,
            drops: Rc::clone(&drops),
        };
        let progress = Arc::new(Progress::default());
        let spares = Spares::new(Arc::clone(&progress));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut first = spares.slot(twice);
        let address = |s: &Slotted<'_, Twice>| s.slot.as_ref().map(|b| std::ptr::from_ref::<Option<Twice>>(b).addr());
        let at = address(&first);
        assert!(Pin::new(&mut first).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut first).poll(&mut cx).is_ready());
        assert_eq!(progress.get(), 2, "each stream poll that returned is watchdog progress");
        // Dropped when done, not when its slot is reused.
        assert_eq!(drops.get(), 1);
        drop(first);
        let second = spares.slot(twice);
        assert_eq!(address(&second), at, "the finished slot is reused");
        // A future dropped unfinished takes its slot with it.
        drop(second);
        assert_eq!(drops.get(), 2);
        assert!(spares.free.borrow().is_empty());
        // More finished at once than are kept: the spares stay bounded.
        let mut many: Vec<_> = (0..MAX_SPARES + 4).map(|_| spares.slot(twice)).collect();
        for s in &mut many {
            assert!(Pin::new(&mut *s).poll(&mut cx).is_pending());
            assert!(Pin::new(&mut *s).poll(&mut cx).is_ready());
        }
        assert_eq!(spares.free.borrow().len(), MAX_SPARES);
        assert_eq!(drops.get(), 2 + MAX_SPARES as u32 + 4);
    }
}
