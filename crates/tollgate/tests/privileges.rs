//! `[global] user`: worker processes run as that user (read from /proc), traffic flows, a
//! reload starts the next generation as that user too, and the master keeps root (it binds
//! addresses a reload adds). Needs root to switch users: skipped otherwise.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::time::Duration;

use common::{echo, origin, tcp_config};
use master_support::{Master, TempDir, exchange, global};

/// The four ids (real, effective, saved, filesystem) of `field` (`Uid:` or `Gid:`) of a process.
fn ids(pid: i32, field: &str) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

fn groups(pid: i32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix("Groups:")).unwrap();
    line.split_whitespace().map(|v| v.parse().unwrap()).collect()
}

#[test]
fn privileges_workers_run_as_the_configured_user_across_reloads() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: switching users needs root");
        return;
    }
    let Some(nobody) = tollgate_sys::credentials::user_by_name("nobody").unwrap() else {
        eprintln!("skipped: no user `nobody` on this machine");
        return;
    };
    let origin = origin(echo);
    let dir = TempDir::new("privileges");
    let config = tcp_config(&global(&dir.0, "user = \"nobody\""), &[("o", origin.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    assert!(
        master
            .wait_log(|l| l.contains("workers run as root"), Duration::ZERO)
            .is_none(),
        "no root warning when workers drop privileges"
    );
    let check_worker = |generation: u64| {
        let (g, pid, state) = master.wait_single_generation(Duration::from_secs(10));
        assert_eq!((g, state.as_str()), (generation, "serving"));
        assert_eq!(ids(pid, "Uid:"), [nobody.uid; 4], "worker {pid} uids");
        assert_eq!(ids(pid, "Gid:"), [nobody.gid; 4], "worker {pid} gids");
        assert_eq!(groups(pid), [nobody.gid], "worker {pid} supplementary groups");
        for i in 0..10 {
            exchange(master.addr, format!("generation {generation} #{i}").as_bytes()).unwrap();
        }
    };
    check_worker(1);
    assert_eq!(ids(master.pid(), "Uid:"), [0; 4], "the master keeps root for reloads");
    master.reload_ok();
    check_worker(2);
}

#[test]
fn privileges_root_workers_are_warned_about_unless_allowed() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: the warning is about running as root");
        return;
    }
    let origin = origin(echo);
    for (extra, warned) in [("", true), ("allow_root = true", false)] {
        let dir = TempDir::new("privileges-root");
        let config = tcp_config(&global(&dir.0, extra), &[("o", origin.addr, 1)]);
        let master = Master::start(dir, &config, &[]);
        let (_, pid, _) = master.wait_single_generation(Duration::from_secs(10));
        assert_eq!(ids(pid, "Uid:"), [0; 4]);
        let warning = master.wait_log(
            |l| l.contains("WARN") && l.contains("workers run as root"),
            Duration::ZERO,
        );
        assert_eq!(warning.is_some(), warned, "{extra:?}: {warning:?}");
        exchange(master.addr, b"as root").unwrap();
    }
}
