//! Budgets: maxconn pauses accepting (never accept-and-drop), server maxconn queues,
//! the buffer budget parks connections instead of allocating, accept rate spaces accepts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// An origin that holds each connection `hold` before answering "done" and closing.
fn slow_origin(hold: Duration) -> Origin {
    origin(move |s: &mut TcpStream| {
        let mut b = [0u8; 16];
        let _ = s.read(&mut b);
        thread::sleep(hold);
        let _ = s.write_all(b"done");
    })
}

fn run_clients(addr: std::net::SocketAddr, n: usize) -> Vec<String> {
    let clients: Vec<_> = (0..n)
        .map(|_| {
            thread::spawn(move || {
                let mut c = TcpStream::connect(addr).expect("connect");
                c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut got = String::new();
                // A refused connection (queue timeout) shows up as a reset or an empty answer.
                match c.write_all(b"go").and_then(|()| c.read_to_string(&mut got)) {
                    Ok(_) => got,
                    Err(e) => format!("error: {e}"),
                }
            })
        })
        .collect();
    clients.into_iter().map(|c| c.join().expect("client")).collect()
}

#[test]
fn frontend_maxconn_caps_concurrency_and_serves_everyone() {
    let origin = slow_origin(Duration::from_millis(150));
    let mut cfg = tcp_config("", &[("o", origin.addr, 1)]);
    cfg = cfg.replace("default_backend = \"be\"", "default_backend = \"be\"\nmaxconn = 5");
    let proxy = Proxy::start(&cfg);
    let answers = run_clients(proxy.addr, 20);
    assert!(answers.iter().all(|a| a == "done"), "{answers:?}");
    assert_eq!(origin.total.load(Ordering::SeqCst), 20);
    let peak = origin.peak.load(Ordering::SeqCst);
    assert!(peak <= 5, "origin saw {peak} connections at once");
    assert!(proxy.running().stats().accept_paused > 0, "accepting never paused");
}

#[test]
fn global_maxconn_caps_concurrency_and_serves_everyone() {
    let origin = slow_origin(Duration::from_millis(150));
    let proxy = Proxy::start(&tcp_config(
        "[global]\nmaxconn = 5\nworkers = 2",
        &[("o", origin.addr, 1)],
    ));
    let answers = run_clients(proxy.addr, 20);
    assert!(answers.iter().all(|a| a == "done"), "{answers:?}");
    let peak = origin.peak.load(Ordering::SeqCst);
    assert!(peak <= 5, "origin saw {peak} connections at once");
    assert_eq!(origin.total.load(Ordering::SeqCst), 20);
}

#[test]
fn server_maxconn_queues_connections_until_a_slot_frees() {
    let origin = slow_origin(Duration::from_millis(100));
    let cfg = tcp_config("", &[("o", origin.addr, 1)]).replace("weight = 1", "weight = 1\nmaxconn = 2");
    let proxy = Proxy::start(&cfg);
    let answers = run_clients(proxy.addr, 10);
    assert!(answers.iter().all(|a| a == "done"), "{answers:?}");
    assert!(origin.peak.load(Ordering::SeqCst) <= 2);
    let stats = proxy.running().stats();
    assert!(stats.server_queued > 0, "{stats:?}");
    assert_eq!(stats.queue_timeouts, 0);
}

#[test]
fn server_queue_times_out() {
    let origin = slow_origin(Duration::from_millis(1500));
    let cfg = tcp_config("[timeouts]\nqueue = \"200ms\"", &[("o", origin.addr, 1)])
        .replace("weight = 1", "weight = 1\nmaxconn = 1");
    let proxy = Proxy::start(&cfg);
    let answers = run_clients(proxy.addr, 3);
    let served = answers.iter().filter(|a| *a == "done").count();
    assert_eq!(served, 1, "{answers:?}");
    assert_eq!(proxy.running().stats().queue_timeouts, 2);
}

#[test]
fn buffer_budget_parks_connections_instead_of_allocating() {
    // One worker, a budget of exactly two 16 KiB buffers. Two clients upload 32 MiB to an
    // echo origin but read nothing until told: once the kernel buffers are full the proxy
    // holds both buffers with echoes it cannot deliver, and every other transfer must park
    // until a buffer comes back; nothing is allocated past the budget.
    let origin = origin(echo);
    let proxy = Proxy::start(&tcp_config(
        "[global]\nworkers = 1\nbuffer_size = \"16KiB\"\nbuffer_budget = \"32KiB\"",
        &[("o", origin.addr, 1)],
    ));
    let addr = proxy.addr;
    let transfer = move |mib: u64, go: std::sync::mpsc::Receiver<()>| {
        let c = TcpStream::connect(addr).unwrap();
        let mut w = c.try_clone().unwrap();
        let writer = thread::spawn(move || {
            let mut block = payload_block(mib, 1 << 20);
            let sent = write_mib(&mut w, mib, &mut block).unwrap();
            w.shutdown(std::net::Shutdown::Write).unwrap();
            sent
        });
        let _ = go.recv();
        let mut r = c;
        let (n, got) = read_all_hashed(&mut r).unwrap();
        assert_eq!(
            (n, got),
            (mib << 20, writer.join().unwrap()),
            "echo of {mib} MiB differs"
        );
    };
    let (go1, wait1) = std::sync::mpsc::channel();
    let (go2, wait2) = std::sync::mpsc::channel();
    let stalled = [
        thread::spawn(move || transfer(32, wait1)),
        thread::spawn(move || transfer(33, wait2)),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = proxy.running().stats();
        if stats.buffers_in_use == 2 && stats.buffer_waiters > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no transfer ever parked on a spent budget: {stats:?}"
        );
        thread::sleep(Duration::from_millis(5));
    }
    // A third, well-behaved transfer parks too, and completes once the stall ends.
    let (go3, wait3) = std::sync::mpsc::channel();
    go3.send(()).unwrap();
    let third = thread::spawn(move || transfer(1, wait3));
    go1.send(()).unwrap();
    go2.send(()).unwrap();
    for t in stalled {
        t.join().expect("stalled client");
    }
    third.join().expect("third client");
    proxy.wait_idle(Duration::from_secs(10));
    let stats = proxy.running().stats();
    assert_eq!(stats.buffers_allocated, 2, "{stats:?}");
    assert!(stats.buffer_waits > 0);
    assert_eq!((stats.buffers_in_use, stats.buffer_waiters), (0, 0), "{stats:?}");
}

#[test]
fn accept_rate_spaces_new_connections() {
    let origin = origin(echo);
    let proxy = Proxy::start(&tcp_config("[global]\nmax_accept_rate = 50", &[("o", origin.addr, 1)]));
    let start = Instant::now();
    for _ in 0..30 {
        let mut c = TcpStream::connect(proxy.addr).unwrap();
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
    }
    // 5 are admitted as a burst, the other 25 at 50/s: at least ~0.5 s.
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(450), "{took:?}");
    assert!(proxy.running().stats().accept_rate_delayed > 0);
}

/// One quick exchange ("go" → "done") that must finish within `limit`.
fn quick_exchange(addr: std::net::SocketAddr, limit: Duration) -> Result<(), String> {
    let started = Instant::now();
    let mut c = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    c.set_read_timeout(Some(limit)).unwrap();
    let mut got = String::new();
    c.write_all(b"go")
        .and_then(|()| c.read_to_string(&mut got))
        .map_err(|e| format!("after {:?}: {e}", started.elapsed()))?;
    if got != "done" {
        return Err(format!("answered {got:?} after {:?}", started.elapsed()));
    }
    Ok(())
}

/// With several workers, each with its own SO_REUSEPORT socket, a frontend `maxconn` of N
/// means N connections across all of them: an idle accept loop holds no slot, so a
/// connection the kernel queues on any worker is served at once while a slot is free, and
/// the budget reads 0 in use once every connection has closed. (Before the fix, each idle
/// loop held a permit taken before accept(2): with `maxconn = 1` and 2 workers about half
/// the connections hung on the worker without one.)
fn frontend_maxconn_is_shared_by_workers(workers: u32) {
    let origin = slow_origin(Duration::ZERO);
    let cfg = tcp_config(&format!("[global]\nworkers = {workers}"), &[("o", origin.addr, 1)])
        .replace("default_backend = \"be\"", "default_backend = \"be\"\nmaxconn = 1");
    let proxy = Proxy::start(&cfg);
    for i in 0..12 {
        if let Err(e) = quick_exchange(proxy.addr, Duration::from_secs(2)) {
            panic!("workers = {workers}, maxconn = 1: connection {i} of 12 not served: {e}");
        }
        proxy.wait_idle(Duration::from_secs(5));
    }
    // A closed session gives its slot back as its task ends, a moment after it stopped
    // counting as active: wait (bounded) for the budget to read it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let m = loop {
        let m = proxy.running().metrics();
        let fe = m.frontends.iter().find(|f| f.name == "fe").unwrap();
        if fe.connections == Some(0) || std::time::Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let fe = m.frontends.iter().find(|f| f.name == "fe").unwrap();
    assert_eq!(fe.connections, Some(0), "frontend slots in use while idle: {fe:?}");
    let maxconn = m.budgets.iter().find(|b| b.name == "maxconn").unwrap();
    assert_eq!(
        maxconn.in_use,
        Some(0),
        "process maxconn slots in use while idle: {maxconn:?}"
    );
}

#[test]
fn frontend_maxconn_is_shared_by_two_workers() {
    frontend_maxconn_is_shared_by_workers(2);
}

#[test]
fn frontend_maxconn_is_shared_by_four_workers() {
    frontend_maxconn_is_shared_by_workers(4);
}

/// `maxconn = 2` with 2 workers and one connection held open: the second slot serves every
/// quick connection at once, whichever worker the kernel queues it on.
#[test]
fn a_held_connection_leaves_the_other_slot_to_quick_ones() {
    let origin = origin(|s: &mut TcpStream| {
        let mut b = [0u8; 16];
        let n = s.read(&mut b).unwrap_or(0);
        if &b[..n] == b"hold" {
            // Held until the client goes away.
            let _ = s.read(&mut b);
        } else {
            let _ = s.write_all(b"done");
        }
    });
    let cfg = tcp_config("[global]\nworkers = 2", &[("o", origin.addr, 1)])
        .replace("default_backend = \"be\"", "default_backend = \"be\"\nmaxconn = 2");
    let proxy = Proxy::start(&cfg);
    let mut held = TcpStream::connect(proxy.addr).unwrap();
    held.write_all(b"hold").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while origin.total.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the held connection never reached the origin"
        );
        thread::sleep(Duration::from_millis(5));
    }
    for i in 0..12 {
        if let Err(e) = quick_exchange(proxy.addr, Duration::from_secs(2)) {
            panic!("maxconn = 2 with one held: quick connection {i} of 12 not served: {e}");
        }
    }
    drop(held);
}
