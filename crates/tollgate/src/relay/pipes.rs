//! splice(2) pipes: a per-worker pool with a cap (`global.max_pipes`).
//!
//! A relay direction borrows one pipe when it switches to splice and gives it back when it
//! ends. The pipe tracks how many bytes sit in it (`pending`): it goes back to the pool only
//! when that is zero, so the next connection can never receive a previous one's bytes; a
//! pipe dropped with bytes in it (the connection died mid-transfer) is closed instead.
//! Per worker, so no lock; the cap bounds descriptors at `2 × max_pipes × workers`.

use std::cell::{Cell, RefCell};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::rc::Rc;
use std::sync::Arc;

use crate::stats::WorkerStats;

pub(crate) struct PipePool {
    cap: usize,
    size: usize,
    /// Pipes that exist (lent + pooled).
    open: Cell<usize>,
    free: RefCell<Vec<(OwnedFd, OwnedFd)>>,
    stats: Arc<WorkerStats>,
}

impl PipePool {
    /// `size`: capacity asked of the kernel for each new pipe (best effort).
    pub(crate) fn new(cap: usize, size: usize, stats: Arc<WorkerStats>) -> Rc<Self> {
        Rc::new(PipePool {
            cap,
            size,
            open: Cell::new(0),
            free: RefCell::new(Vec::new()),
            stats,
        })
    }

    /// A pipe, or `None` when the cap is reached or the kernel refuses one (the caller
    /// keeps copying through buffers).
    pub(crate) fn try_get(self: &Rc<Self>) -> Option<PooledPipe> {
        let pooled = self.free.borrow_mut().pop();
        let (fds, capacity) = match pooled {
            Some(fds) => {
                let capacity = pipe_capacity(&fds.1);
                (fds, capacity)
            }
            None if self.open.get() < self.cap => {
                let (r, w) = tollgate_sys::splice::pipe_pair().ok()?;
                let capacity = tollgate_sys::splice::set_pipe_size(w.as_fd(), self.size).unwrap_or(16 * 4096);
                self.open.set(self.open.get() + 1);
                ((r, w), capacity)
            }
            None => return None,
        };
        self.stats.pipes_in_use.add(1);
        self.stats.pipes_pooled.set(self.free.borrow().len() as u64);
        Some(PooledPipe {
            fds: Some(fds),
            capacity,
            pending: 0,
            pool: Rc::clone(self),
        })
    }

    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.open.get()
    }
}

fn pipe_capacity(w: &OwnedFd) -> usize {
    rustix::pipe::fcntl_getpipe_size(w).unwrap_or(16 * 4096)
}

/// A pipe on loan; dropping it returns it to the pool if empty, closes it otherwise.
pub(crate) struct PooledPipe {
    fds: Option<(OwnedFd, OwnedFd)>,
    /// Bytes the pipe can hold.
    pub capacity: usize,
    /// Bytes spliced in and not yet out.
    pub pending: usize,
    pool: Rc<PipePool>,
}

impl PooledPipe {
    pub(crate) fn read_end(&self) -> Option<BorrowedFd<'_>> {
        self.fds.as_ref().map(|(r, _)| r.as_fd())
    }

    pub(crate) fn write_end(&self) -> Option<BorrowedFd<'_>> {
        self.fds.as_ref().map(|(_, w)| w.as_fd())
    }
}

impl Drop for PooledPipe {
    fn drop(&mut self) {
        let pool = &self.pool;
        pool.stats.pipes_in_use.sub(1);
        if let Some(fds) = self.fds.take() {
            if self.pending == 0 {
                pool.free.borrow_mut().push(fds);
            } else {
                pool.open.set(pool.open.get().saturating_sub(1));
                drop(fds);
            }
        }
        pool.stats.pipes_pooled.set(pool.free.borrow().len() as u64);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn cap_reuse_and_dirty_pipes_are_closed() {
        let stats = Arc::new(WorkerStats::default());
        let pool = PipePool::new(2, 65536, Arc::clone(&stats));
        let a = pool.try_get().unwrap();
        let mut b = pool.try_get().unwrap();
        assert!(pool.try_get().is_none(), "cap of 2");
        assert_eq!(stats.pipes_in_use.get(), 2);
        drop(a);
        assert_eq!(
            (pool.open(), stats.pipes_pooled.get()),
            (2, 1),
            "a clean pipe is pooled"
        );
        b.pending = 10;
        drop(b);
        assert_eq!(
            (pool.open(), stats.pipes_pooled.get()),
            (1, 1),
            "a dirty pipe is closed"
        );
        assert_eq!(stats.pipes_in_use.get(), 0);
        let c = pool.try_get().unwrap();
        assert!(c.capacity >= 4096);
        assert_eq!(pool.open(), 1, "reused from the pool");
    }
}
