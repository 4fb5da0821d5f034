//! The watchdog: a worker thread that spins (test hook `TOLLGATE_DEBUG_SPIN_AFTER_MS`,
//! first generation only) is reported after `warn_after` of CPU without progress, the worker
//! aborts after `abort_after`, and the master restarts it on the same sockets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::time::{Duration, Instant};

use common::{echo, origin, tcp_config};
use master_support::{Master, TempDir, exchange, global};

#[test]
fn spinning_worker_is_reported_aborted_and_restarted() {
    let origin = origin(echo);
    let dir = TempDir::new("watchdog");
    let extra = "[watchdog]\nwarn_after = \"100ms\"\nabort_after = \"1s\"\n";
    let config = tcp_config(&format!("{}{extra}", global(&dir.0, "")), &[("o", origin.addr, 1)]);
    let master = Master::start(dir, &config, &[("TOLLGATE_DEBUG_SPIN_AFTER_MS", "300")]);
    let (_, pid1, _) = master.wait_single_generation(Duration::from_secs(5));
    let limit = Duration::from_secs(10);
    let (warn_at, warn) = master
        .wait_log_from(0, |l| l.contains("burning CPU without scheduler progress"), limit)
        .expect("stall warning");
    assert!(
        warn.contains("worker=0") && warn.contains("thread=tollgate-w0"),
        "{warn}"
    );
    let started = Instant::now();
    let (abort_at, _) = master
        .wait_log_from(0, |l| l.contains("stuck past abort_after"), limit)
        .expect("abort");
    assert!(abort_at > warn_at, "warned before aborting");
    let (died_at, died) = master
        .wait_log_from(0, |l| l.contains("worker died unexpectedly"), limit)
        .expect("master saw the death");
    assert!(died_at > abort_at && died.contains(&format!("pid={pid1}")), "{died}");
    let (generation, pid2, _) = master.wait_single_generation(limit);
    assert_eq!(generation, 2);
    assert_ne!(pid2, pid1);
    assert!(started.elapsed() < limit);
    for i in 0..10 {
        exchange(master.addr, format!("after restart {i}").as_bytes()).unwrap();
    }
    // Exactly one warning and one abort: the restarted worker does not spin.
    assert_eq!(master.log_count(|l| l.contains("stuck past abort_after")), 1);
}
