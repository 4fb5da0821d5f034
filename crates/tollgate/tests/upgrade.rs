//! Binary upgrade: a reload runs the worker from the binary's path on disk, so replacing the
//! file and reloading upgrades the workers without closing a socket.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::{echo, origin, tcp_config};
use master_support::{BIN, Master, TempDir, exchange, global};

#[test]
fn reload_runs_the_replaced_binary_on_the_same_sockets() {
    let origin = origin(echo);
    // Under the target dir: same file system as the build, so the "installed" binary can be
    // a hard link (a copy otherwise).
    let dir = TempDir::under(Path::new(env!("CARGO_TARGET_TMPDIR")), "upgrade");
    let installed = dir.0.join("tollgate");
    if std::fs::hard_link(BIN, &installed).is_err() {
        std::fs::copy(BIN, &installed).unwrap();
    }
    let marker = dir.0.join("new-binary-ran");
    let script = dir.0.join("tollgate.new");
    let config = tcp_config(&global(&dir.0, ""), &[("o", origin.addr, 1)]);
    let master = Master::start_bin(&installed, dir, &config, &[]);
    exchange(master.addr, b"old binary").unwrap();

    // The upgrade: a new file renamed over the path (a script that leaves a mark, then runs
    // the build), as a package manager would.
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$@\" > '{}'\nexec '{BIN}' \"$@\"\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&script, &installed).unwrap();
    master.reload_ok();
    let args = std::fs::read_to_string(&marker).expect("the replaced binary ran");
    assert!(args.starts_with("worker --generation 2"), "{args}");
    let (generation, _, _) = master.wait_single_generation(Duration::from_secs(10));
    assert_eq!(generation, 2);
    for i in 0..10 {
        exchange(master.addr, format!("new binary {i}").as_bytes()).unwrap();
    }
}
