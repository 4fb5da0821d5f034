//! Copy buffers: a per-worker pool charged against a byte budget, with a park path.
//!
//! Each worker owns one `BufferPool` (no lock, no atomic on the get/put path). Buffers are
//! allocated lazily up to the worker's share of `global.buffer_budget` and recycled through
//! a free list; once the budget is spent, `get` waits until a buffer is returned instead of
//! allocating. Relays take a buffer only while data is in flight and return it as soon as
//! it is drained, so idle connections hold none.
//!
//! Memory handed back: a pool that never shrank would hold a flood's peak for the process's
//! life. Once a period (`trim`, one per second from the worker), half of the buffers that lay
//! free the whole period (the free list's low-water mark) are freed, so after a burst the
//! pool decays to what the load still uses within seconds, and a steady load, whose buffers
//! are all taken within the period, keeps every one and allocates nothing.
//!
//! Deadlock freedom: a connection holds at most two buffers (one per direction), and one
//! holding none may take its first only if that leaves a buffer free. So `free buffers +
//! connections holding two ≥ 1` always holds: either a buffer is free for a connection that
//! needs its second, or some connection holds both and waits only on its peers, never on
//! the pool. Without that reserve, two echo-like peers can each pin one buffer and wait
//! forever for the other direction's.

use std::cell::{Cell, RefCell};
use std::ops::{Deref, DerefMut};
use std::rc::Rc;
use std::sync::Arc;

use std::task::{Context, Poll, Waker};

use crate::stats::WorkerStats;

/// How often a worker trims its pool (`BufferPool::trim`).
pub(crate) const TRIM_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

pub(crate) struct BufferPool {
    size: usize,
    /// Most buffers this worker may have allocated at once.
    limit: usize,
    allocated: Cell<usize>,
    free: RefCell<Vec<Box<[u8]>>>,
    /// The fewest buffers `free` held since the last `trim`: those lay unused all along.
    low_water: Cell<usize>,
    waiters: RefCell<Vec<Waker>>,
    stats: Arc<WorkerStats>,
}

impl BufferPool {
    pub(crate) fn new(size: usize, budget_bytes: u64, stats: Arc<WorkerStats>) -> Rc<Self> {
        let limit = usize::try_from(budget_bytes / size.max(1) as u64)
            .unwrap_or(usize::MAX)
            .max(2);
        Rc::new(BufferPool {
            size,
            limit,
            allocated: Cell::new(0),
            free: RefCell::new(Vec::new()),
            low_water: Cell::new(0),
            waiters: RefCell::new(Vec::new()),
            stats,
        })
    }

    /// Buffers that can be handed out now: free ones plus those the budget can still allocate.
    fn available(&self) -> usize {
        self.free.borrow().len() + (self.limit - self.allocated.get())
    }

    /// A buffer now if the budget allows. `second` says the caller's connection already
    /// holds a buffer (the other direction's); a first buffer must leave one in reserve.
    pub(crate) fn try_get(self: &Rc<Self>, second: bool) -> Option<PooledBuffer> {
        let reserve = if second { 0 } else { 1 };
        if self.available() <= reserve {
            return None;
        }
        let popped = {
            let mut free = self.free.borrow_mut();
            let b = free.pop();
            self.low_water.set(self.low_water.get().min(free.len()));
            b
        };
        let data = match popped {
            Some(b) => b,
            None if self.allocated.get() < self.limit => {
                self.allocated.set(self.allocated.get() + 1);
                self.stats.buffers_allocated.set(self.allocated.get() as u64);
                vec![0u8; self.size].into_boxed_slice()
            }
            None => return None,
        };
        self.stats.buffers_in_use.add(1);
        Some(PooledBuffer {
            data: Some(data),
            pool: Rc::clone(self),
        })
    }

    /// A buffer, or `Pending` with the task registered to be woken when one is returned.
    /// `parked` is the caller's record of whether it is counted as a waiter; `second` as in
    /// `try_get`.
    pub(crate) fn poll_get(
        self: &Rc<Self>,
        cx: &mut Context<'_>,
        parked: &mut Parked,
        second: bool,
    ) -> Poll<PooledBuffer> {
        if let Some(b) = self.try_get(second) {
            parked.leave(&self.stats);
            return Poll::Ready(b);
        }
        parked.enter(&self.stats);
        let mut waiters = self.waiters.borrow_mut();
        if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
            waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// A buffer, waiting for one to be returned when the budget is spent.
    pub(crate) async fn get(self: &Rc<Self>, second: bool) -> PooledBuffer {
        // Left on drop too: a caller's timeout may cancel this wait.
        struct Waiting<'a>(Parked, &'a WorkerStats);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.leave(self.1);
            }
        }
        let mut waiting = Waiting(Parked::default(), &self.stats);
        std::future::poll_fn(|cx| self.poll_get(cx, &mut waiting.0, second)).await
    }

    fn put(&self, data: Box<[u8]>) {
        self.stats.buffers_in_use.sub(1);
        self.free.borrow_mut().push(data);
        // Wake every waiter: one wins the buffer, the others register again. Waking one
        // could wake a task that no longer waits and strand the rest.
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for w in waiters {
            w.wake();
        }
    }

    /// Frees half (rounded up) of the buffers that lay free since the last call, and starts
    /// the next period; returns how many it freed. Called once a `TRIM_PERIOD` by the
    /// worker's memory tick.
    pub(crate) fn trim(&self) -> usize {
        let mut free = self.free.borrow_mut();
        let unused = self.low_water.get().min(free.len());
        let release = unused.div_ceil(2);
        let keep = free.len() - release;
        free.truncate(keep);
        let floor = free.len().max(8);
        if free.capacity() > 2 * floor {
            free.shrink_to(floor);
        }
        self.low_water.set(free.len());
        drop(free);
        if release > 0 {
            self.allocated.set(self.allocated.get() - release);
            self.stats.buffers_allocated.set(self.allocated.get() as u64);
            self.stats.buffers_released.add(release as u64);
        }
        release
    }

    pub(crate) fn stats(&self) -> &WorkerStats {
        &self.stats
    }
}

/// Whether one waiter is counted in `buffer_waiters`; `leave` it (or drop the owner after
/// calling `leave`) so the gauge returns to zero.
#[derive(Debug, Default)]
pub(crate) struct Parked(bool);

impl Parked {
    fn enter(&mut self, stats: &WorkerStats) {
        if !self.0 {
            self.0 = true;
            stats.buffer_waits.add(1);
            stats.buffer_waiters.add(1);
        }
    }

    pub(crate) fn leave(&mut self, stats: &WorkerStats) {
        if self.0 {
            self.0 = false;
            stats.buffer_waiters.sub(1);
        }
    }
}

/// A buffer on loan from a pool; dropping it returns it.
pub(crate) struct PooledBuffer {
    data: Option<Box<[u8]>>,
    pool: Rc<BufferPool>,
}

impl Deref for PooledBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.data.as_deref().unwrap_or(&[])
    }
}

impl DerefMut for PooledBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.data.as_deref_mut().unwrap_or(&mut [])
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        if let Some(data) = self.data.take() {
            self.pool.put(data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn budget_parks_until_a_buffer_returns() {
        let stats = Arc::new(WorkerStats::default());
        let pool = BufferPool::new(1024, 2048, Arc::clone(&stats));
        let a = pool.get(false).await;
        assert!(
            pool.try_get(false).is_none(),
            "the last buffer is a connection's second"
        );
        let b = pool.get(true).await;
        assert!(pool.try_get(true).is_none(), "budget of two buffers is spent");
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let p = Rc::clone(&pool);
                let waiter = tokio::task::spawn_local(async move { p.get(true).await.len() });
                tokio::task::yield_now().await;
                assert_eq!(stats.buffer_waiters.get(), 1);
                drop(a);
                assert_eq!(waiter.await.expect("waiter"), 1024);
            })
            .await;
        assert_eq!(stats.buffers_allocated.get(), 2);
        assert_eq!(stats.buffer_waits.get(), 1);
        drop(b);
        assert_eq!(stats.buffers_in_use.get(), 0);
    }

    /// A burst's buffers go back by halves once they lie unused a whole period; buffers a
    /// steady load takes within every period stay.
    #[test]
    fn trim_frees_what_lay_unused_and_keeps_what_is_used() {
        let stats = Arc::new(WorkerStats::default());
        let pool = BufferPool::new(64, 64 * 100, Arc::clone(&stats));
        let burst: Vec<_> = (0..16).map(|i| pool.try_get(i > 0).expect("budget")).collect();
        drop(burst);
        assert_eq!(pool.trim(), 0, "the period of the burst: they were in use");
        // Steady: eight taken and returned within each period.
        let steady: Vec<_> = (0..8).map(|i| pool.try_get(i > 0).expect("free")).collect();
        drop(steady);
        assert_eq!(pool.trim(), 4, "half of the 8 that lay unused go");
        let steady: Vec<_> = (0..12).map(|i| pool.try_get(i > 0).expect("free")).collect();
        drop(steady);
        assert_eq!(pool.trim(), 0, "all 12 were taken this period");
        let freed: Vec<usize> = (0..6).map(|_| pool.trim()).collect();
        assert_eq!(freed, [6, 3, 2, 1, 0, 0]);
        assert_eq!(stats.buffers_allocated.get(), 0);
        assert_eq!(stats.buffers_released.get(), 16);
        assert_eq!(stats.buffers_in_use.get(), 0);
        // It allocates again on demand.
        let again = pool.try_get(false).expect("budget");
        assert_eq!(again.len(), 64);
        assert_eq!(stats.buffers_allocated.get(), 1);
    }

    /// A wait cancelled by the caller (a timeout around a read) leaves `buffer_waiters`.
    #[tokio::test(flavor = "current_thread")]
    async fn cancelled_wait_is_counted_out() {
        let stats = Arc::new(WorkerStats::default());
        let pool = BufferPool::new(1024, 2048, Arc::clone(&stats));
        let held = (pool.get(false).await, pool.get(true).await);
        let waited = tokio::time::timeout(std::time::Duration::from_millis(10), pool.get(true)).await;
        assert!(waited.is_err(), "the budget is spent");
        assert_eq!((stats.buffer_waits.get(), stats.buffer_waiters.get()), (1, 0));
        drop(held);
    }

    #[test]
    fn reserve_keeps_one_buffer_for_a_second_direction() {
        let pool = BufferPool::new(1024, 3 * 1024, Arc::new(WorkerStats::default()));
        let first_a = pool.try_get(false).expect("first of A");
        let first_b = pool.try_get(false).expect("first of B");
        assert!(pool.try_get(false).is_none(), "C may not take the reserve");
        let second_a = pool.try_get(true).expect("A's second comes from the reserve");
        drop((first_a, first_b, second_a));
    }
}
