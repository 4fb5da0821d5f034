//! The slow start ticker: one task per process (on worker 0) that steps every ramping
//! server's weight (`live::slowstart::step`) while something ramps, and otherwise waits
//! for a ramp to start without a timer.

use std::sync::Arc;

use crate::ctx::Shared;
use crate::live::slowstart;

/// Runs until the worker stops (the task is dropped with its runtime).
pub(crate) async fn run(shared: Arc<Shared>) {
    loop {
        let started = slowstart::started();
        tokio::pin!(started);
        // Registered before looking, so a ramp that starts right after the look still wakes us.
        started.as_mut().enable();
        match slowstart::step(&shared.backends, slowstart::now_ms()) {
            Some(next) => tokio::time::sleep(next).await,
            None => started.await,
        }
    }
}
