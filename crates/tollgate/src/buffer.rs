//! Copy buffers: a per-worker pool charged against a byte budget, with a park path.
//!
//! Each worker owns one `BufferPool` (no lock, no atomic on the get/put path). Buffers are
//! allocated lazily up to the worker's share of `global.buffer_budget` and recycled through
//! a free list; once the budget is spent, `get` waits until a buffer is returned instead of
//! allocating. Relays take a buffer only while data is in flight and return it as soon as
//! it is drained, so idle connections hold none.

use std::cell::{Cell, RefCell};
use std::ops::{Deref, DerefMut};
use std::rc::Rc;
use std::sync::Arc;

use tokio::sync::Notify;

use crate::runtime::stats::WorkerStats;

pub struct BufferPool {
    size: usize,
    /// Most buffers this worker may have allocated at once.
    limit: usize,
    allocated: Cell<usize>,
    free: RefCell<Vec<Box<[u8]>>>,
    returned: Notify,
    stats: Arc<WorkerStats>,
}

impl BufferPool {
    pub fn new(size: usize, budget_bytes: u64, stats: Arc<WorkerStats>) -> Rc<Self> {
        let limit = usize::try_from(budget_bytes / size.max(1) as u64)
            .unwrap_or(usize::MAX)
            .max(2);
        Rc::new(BufferPool {
            size,
            limit,
            allocated: Cell::new(0),
            free: RefCell::new(Vec::new()),
            returned: Notify::new(),
            stats,
        })
    }

    pub fn buffer_size(&self) -> usize {
        self.size
    }

    /// A buffer now if one is free or the budget allows a new one.
    pub fn try_get(self: &Rc<Self>) -> Option<PooledBuffer> {
        let data = match self.free.borrow_mut().pop() {
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

    /// A buffer, waiting for one to be returned when the budget is spent.
    pub async fn get(self: &Rc<Self>) -> PooledBuffer {
        if let Some(b) = self.try_get() {
            return b;
        }
        self.stats.buffer_waits.add(1);
        self.stats.buffer_waiters.add(1);
        let b = loop {
            let returned = self.returned.notified();
            if let Some(b) = self.try_get() {
                break b;
            }
            returned.await;
        };
        self.stats.buffer_waiters.sub(1);
        b
    }

    fn put(&self, data: Box<[u8]>) {
        self.stats.buffers_in_use.sub(1);
        self.free.borrow_mut().push(data);
        self.returned.notify_one();
    }
}

/// A buffer on loan from a pool; dropping it returns it.
pub struct PooledBuffer {
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
        let a = pool.get().await;
        let b = pool.get().await;
        assert!(pool.try_get().is_none(), "budget of two buffers is spent");
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let p = Rc::clone(&pool);
                let waiter = tokio::task::spawn_local(async move { p.get().await.len() });
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
}
