//! The handle of a worker process's background thread (discovery, ACME, the Redis sync, the
//! watchdog): dropping it drops the thread's stop signal, then joins the thread, so a
//! process never exits, or hands over to a new generation, with one still running. Each
//! thread owns the receiving end and returns once the sender is gone.

use std::thread::JoinHandle;

/// Stops and joins its thread on drop. `S` is the stop signal's sending half (a tokio
/// `oneshot::Sender` or a std `mpsc::Sender`: dropping either wakes the receiver).
pub(crate) struct Stopper<S> {
    stop: Option<S>,
    thread: Option<JoinHandle<()>>,
}

impl<S> Stopper<S> {
    pub(crate) fn new(stop: S, thread: JoinHandle<()>) -> Self {
        Stopper {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl<S> Drop for Stopper<S> {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
