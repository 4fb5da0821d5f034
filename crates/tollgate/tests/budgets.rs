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
