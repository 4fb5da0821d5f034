//! Supervision: a killed worker is restarted and serves within a second; SIGTERM lets a slow
//! request finish before the master exits 0, and refuses new connections from the moment it
//! arrives; twenty reloads leave the master's descriptors and memory where they were after
//! the first; neither the master nor its worker lets the kernel fold its heap into
//! transparent huge pages.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{echo, origin, tcp_config};
use master_support::{Master, TempDir, exchange, global};
use rustix::process::Signal;

#[test]
fn killed_worker_is_restarted_and_serves_within_a_second() {
    let origin = origin(echo);
    let dir = TempDir::new("sup-kill");
    let config = tcp_config(&global(&dir.0, ""), &[("o", origin.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    exchange(master.addr, b"before").unwrap();
    let (_, pid, _) = master.wait_single_generation(Duration::from_secs(5));

    master.signal(pid, Signal::KILL);
    let killed = Instant::now();
    // A connection made right away waits in the master's accept queue for the new worker.
    exchange(master.addr, b"right after the kill").unwrap();
    let served_after = killed.elapsed();
    assert!(
        served_after < Duration::from_secs(1),
        "served again after {served_after:?}"
    );
    let (generation, new_pid, _) = master.wait_single_generation(Duration::from_secs(5));
    assert_eq!(generation, 2);
    assert_ne!(new_pid, pid);
    assert!(
        master
            .wait_log(|l| l.contains("worker died unexpectedly"), Duration::from_secs(2))
            .is_some()
    );
    for i in 0..20 {
        exchange(master.addr, format!("after {i}").as_bytes()).unwrap();
    }
}

/// `THP_enabled` of /proc/PID/status (Linux 5.0+): `None` when the kernel does not say.
fn thp_enabled(pid: i32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(|v| v.trim().to_owned())
}

#[test]
fn the_master_and_its_worker_run_with_transparent_huge_pages_off() {
    // A huge page made of an arena range holding a few live pages is resident whole: idle
    // connections would cost kilobytes more RSS each (`tollgate_sys::allocator`).
    let origin = origin(echo);
    let dir = TempDir::new("sup-thp");
    let config = tcp_config(&global(&dir.0, ""), &[("o", origin.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    exchange(master.addr, b"served").unwrap();
    let (_, worker, _) = master.wait_single_generation(Duration::from_secs(5));
    // The test process itself has them on (a kernel built without them says 0 for every
    // process, and there is nothing to check).
    let ours = thp_enabled(std::process::id().try_into().unwrap());
    if ours.as_deref() != Some("1") {
        eprintln!("skipped: this kernel has no transparent huge pages to turn off (THP_enabled: {ours:?})");
        return;
    }
    assert_eq!(thp_enabled(master.pid()).as_deref(), Some("0"), "master");
    assert_eq!(thp_enabled(worker).as_deref(), Some("0"), "worker");
}

#[test]
fn sigterm_finishes_a_slow_request_then_the_master_exits_0() {
    // Answers 1.5 s after the request arrives.
    let slow = origin(|s| {
        let mut req = [0u8; 4];
        if s.read_exact(&mut req).is_ok() {
            std::thread::sleep(Duration::from_millis(1500));
            let _ = s.write_all(b"done");
        }
    });
    let dir = TempDir::new("sup-term");
    let config = tcp_config(&global(&dir.0, ""), &[("o", slow.addr, 1)]);
    let mut master = Master::start(dir, &config, &[]);
    let mut c = TcpStream::connect(master.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"slow").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while slow.current.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "request never reached the origin");
        std::thread::sleep(Duration::from_millis(5));
    }
    master.signal(master.pid(), Signal::TERM);
    let mut answer = [0u8; 4];
    c.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"done");
    assert!(
        master.child.try_wait().unwrap().is_none(),
        "master still up while the request ran"
    );
    drop(c);
    let status = master.wait_exit(Duration::from_secs(10)).expect("master exits");
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(
        TcpStream::connect(master.addr).is_err(),
        "sockets closed with the master"
    );
}

/// While a slow request finishes after SIGTERM, a new connection is refused (ECONNREFUSED),
/// not accepted into a queue nobody serves any more and reset when the master exits.
#[test]
fn sigterm_refuses_new_connections_at_once_while_a_slow_request_finishes() {
    let answer = Arc::new(AtomicBool::new(false));
    let release = Arc::clone(&answer);
    // Answers once the test lets it (bounded), so the request is in flight for as long as
    // the test needs.
    let slow = origin(move |s| {
        let mut req = [0u8; 4];
        if s.read_exact(&mut req).is_ok() {
            let deadline = Instant::now() + Duration::from_secs(20);
            while !release.load(Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = s.write_all(b"done");
        }
    });
    let dir = TempDir::new("sup-term-refuse");
    let config = tcp_config(&global(&dir.0, ""), &[("o", slow.addr, 1)]);
    let mut master = Master::start(dir, &config, &[]);
    let mut c = TcpStream::connect(master.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(b"slow").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while slow.current.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "request never reached the origin");
        std::thread::sleep(Duration::from_millis(5));
    }
    let from = master.log_len();
    master.signal(master.pid(), Signal::TERM);
    master
        .wait_log_from(from, |l| l.contains("stopped accepting"), Duration::from_secs(5))
        .expect("the master says it stopped accepting");
    for _ in 0..5 {
        let err = TcpStream::connect(master.addr).expect_err("a new connection after SIGTERM was accepted");
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    }
    assert!(
        master.child.try_wait().unwrap().is_none(),
        "master still up while the request runs"
    );
    answer.store(true, Ordering::SeqCst);
    let mut got = [0u8; 4];
    c.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"done", "the request in flight finished");
    drop(c);
    let status = master.wait_exit(Duration::from_secs(10)).expect("master exits");
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[test]
fn twenty_reloads_leave_master_fds_and_rss_flat() {
    let origin = origin(echo);
    let dir = TempDir::new("sup-fds");
    let config = tcp_config(&global(&dir.0, ""), &[("o", origin.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    master.reload_ok();
    master.wait_single_generation(Duration::from_secs(10));
    exchange(master.addr, b"warm").unwrap();
    let (fds1, rss1) = master.fds_and_rss();
    for i in 0..19 {
        master.reload_ok();
        exchange(master.addr, format!("reload {i}").as_bytes()).unwrap();
    }
    let (generation, _, _) = master.wait_single_generation(Duration::from_secs(10));
    assert_eq!(generation, 21);
    // The master closes a finished generation's channel and our status connection a moment
    // after answering: a leak stays above the baseline, a late close comes back to it.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (fds20, rss20) = loop {
        let (fds, rss) = master.fds_and_rss();
        if fds == fds1 || Instant::now() > deadline {
            break (fds, rss);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!("master after 1 reload: {fds1} fds, {rss1} KiB; after 20: {fds20} fds, {rss20} KiB");
    assert_eq!(fds20, fds1, "master descriptors");
    assert!(
        rss20 <= rss1 + (rss1 / 10).max(1024),
        "master RSS grew: {rss1} KiB -> {rss20} KiB"
    );
}

#[test]
fn stopping_generation_closes_leftovers_after_hard_stop_after() {
    let origin = origin(echo);
    let dir = TempDir::new("sup-hard");
    let g = format!("{}[timeouts]\nhard_stop_after = \"1s\"\n", global(&dir.0, ""));
    let master = Master::start(dir, &tcp_config(&g, &[("o", origin.addr, 1)]), &[]);
    let mut idle = TcpStream::connect(master.addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    idle.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    idle.read_exact(&mut b).unwrap();
    master.reload_ok();
    let reloaded = Instant::now();
    // The idle relay of generation 1 is closed at hard_stop_after, not before.
    let n = idle.read(&mut b).unwrap_or(0);
    let closed_after = reloaded.elapsed();
    assert_eq!(n, 0);
    assert!(
        closed_after >= Duration::from_millis(900) && closed_after < Duration::from_secs(4),
        "{closed_after:?}"
    );
    let (generation, _, _) = master.wait_single_generation(Duration::from_secs(5));
    assert_eq!(generation, 2);
    exchange(master.addr, b"new generation").unwrap();
}

/// The control socket is the owner's alone (0600) unless `control_socket_mode` opens it to
/// a group, and `ctl` still reaches it; a mode that locks the owner out is refused.
#[test]
fn the_control_socket_is_owner_only_by_default_and_takes_its_configured_mode() {
    use std::os::unix::fs::PermissionsExt;
    let origin = origin(echo);
    for (extra, want) in [("", 0o600), ("control_socket_mode = \"0660\"", 0o660)] {
        let dir = TempDir::new("sup-ctlmode");
        let config = tcp_config(&global(&dir.0, extra), &[("o", origin.addr, 1)]);
        let master = Master::start(dir, &config, &[]);
        let mode = std::fs::metadata(&master.socket).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, want, "{extra:?}: mode {mode:o}");
        assert!(master.ctl_ok(&["show", "servers"]).contains("o"));
    }
    let dir = TempDir::new("sup-ctlmode-bad");
    let bad = tcp_config(
        &global(&dir.0, "control_socket_mode = \"0460\""),
        &[("o", origin.addr, 1)],
    );
    let file = dir.0.join("bad.toml");
    std::fs::write(&file, bad).unwrap();
    let (code, _, err) = master_support::check(&file);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("global.control_socket_mode"), "{err}");
}

/// Only a stale socket at the control socket's path is replaced: a regular file, or a
/// symlink (to a file, or to a live socket elsewhere), is refused with a warning and left
/// as it was, and the master serves (reloading on SIGHUP).
#[test]
fn the_control_socket_never_replaces_a_file_or_follows_a_link() {
    use std::os::unix::fs::PermissionsExt;
    let origin = origin(echo);
    let outside = TempDir::new("sup-ctlpath-outside");
    let target = outside.0.join("precious");
    std::fs::write(&target, "keep me").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    for (what, make) in [
        (
            "a regular file",
            Box::new(|p: &std::path::Path| std::fs::write(p, "keep me").unwrap()) as Box<dyn Fn(&std::path::Path)>,
        ),
        (
            "a symlink",
            Box::new(|p: &std::path::Path| std::os::unix::fs::symlink(&target, p).unwrap()),
        ),
    ] {
        let dir = TempDir::new("sup-ctlpath");
        let config = tcp_config(
            &global(&dir.0, "control_socket_mode = \"0666\""),
            &[("o", origin.addr, 1)],
        );
        let socket = dir.0.join("ctl.sock");
        make(&socket);
        let master = Master::start(dir, &config, &[]);
        let line = master
            .wait_log(|l| l.contains("no control socket"), Duration::from_secs(5))
            .unwrap_or_else(|| panic!("{what}: no warning"));
        assert!(
            line.contains(what) && line.contains("only a stale control socket is replaced"),
            "{line}"
        );
        let kind = std::fs::symlink_metadata(&socket).unwrap().file_type();
        assert!(kind.is_file() || kind.is_symlink(), "{what} was replaced");
        assert_eq!(std::fs::read_to_string(&socket).unwrap(), "keep me", "{what}");
        let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{what}: the link's target changed mode");
        exchange(master.addr, b"still serving").unwrap();
    }
}
