//! The load-balancing algorithms over real sockets: leastconn reads the process-wide live
//! counts, first fills servers in order up to their maxconn, random follows the weights.
//!
//! Each origin names itself with its first byte, so the client learns which server its
//! connection reached without asking the proxy.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

/// An origin that sends its name (one byte), then echoes until EOF.
fn named(name: u8) -> Origin {
    origin(move |s| {
        if s.write_all(&[name]).is_ok() {
            echo(s);
        }
    })
}

/// Two servers `a` and `b` under `balance`, with extra keys after each server's name.
fn config(workers: usize, balance: &str, a: (SocketAddr, u32, &str), b: (SocketAddr, u32, &str)) -> String {
    tcp_config(
        &format!("[global]\nworkers = {workers}"),
        &[("a", a.0, a.1), ("b", b.0, b.1)],
    )
    .replace("name = \"be\"\n", &format!("name = \"be\"\nbalance = \"{balance}\"\n"))
    .replace("name = \"a\"\n", &format!("name = \"a\"\n{}\n", a.2))
    .replace("name = \"b\"\n", &format!("name = \"b\"\n{}\n", b.2))
}

/// Opens a connection and returns it with the name of the server it reached (the server
/// holds its slot from then on, until the connection closes).
fn open(proxy: SocketAddr) -> (TcpStream, u8) {
    let mut c = TcpStream::connect(proxy).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"x").unwrap();
    let mut name = [0u8; 1];
    c.read_exact(&mut name).expect("the server names itself");
    (c, name[0])
}

/// One short connection, closed and its slot released before returning: the next pick
/// sees every server idle again.
fn short(proxy: &Proxy) -> u8 {
    let (mut c, name) = open(proxy.addr);
    c.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    assert_eq!(rest, b"x");
    wait_active(proxy, |_| 0);
    name
}

/// Waits (bounded) until each server's live active count is `want(name)`.
fn wait_active(proxy: &Proxy, want: impl Fn(&str) -> u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let servers = proxy.running().show_servers(Some("be"));
        if servers.iter().all(|s| s.active == want(&s.name)) {
            return;
        }
        assert!(Instant::now() < deadline, "active counts never settled: {servers:?}");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn leastconn_sends_new_connections_to_the_idle_server() {
    const HELD: usize = 4;
    let (a, b) = (named(b'a'), named(b'b'));
    let proxy = Proxy::start(&config(2, "leastconn", (a.addr, 1, ""), (b.addr, 1, "")));
    // Equal loads alternate, so 2×HELD connections put HELD on each; closing b's leaves
    // HELD long-lived connections on a and none on b.
    let mut on_a = Vec::new();
    let mut on_b = Vec::new();
    for _ in 0..2 * HELD {
        let (c, name) = open(proxy.addr);
        if name == b'a' { on_a.push(c) } else { on_b.push(c) }
    }
    assert_eq!((on_a.len(), on_b.len()), (HELD, HELD), "ties must alternate");
    drop(on_b);
    wait_active(&proxy, |name| if name == "a" { HELD as u32 } else { 0 });
    // Each worker sees a's connections, whichever worker opened them: every new one goes
    // to b until b is as loaded as a (round-robin would have sent half of them to a).
    let mut new = Vec::new();
    for i in 0..HELD {
        let (c, name) = open(proxy.addr);
        assert_eq!(name, b'b', "connection {i} went to the busy server");
        new.push(c);
    }
    // Short connections on top: b (HELD) and a (HELD) are tied now and take turns.
    let names: Vec<u8> = (0..2)
        .map(|_| {
            let (c, name) = open(proxy.addr);
            new.push(c);
            name
        })
        .collect();
    assert!(
        names.contains(&b'a') && names.contains(&b'b'),
        "ties must alternate: {names:?}"
    );
}

#[test]
fn first_fills_a_up_to_its_maxconn_then_b() {
    let (a, b) = (named(b'a'), named(b'b'));
    let proxy = Proxy::start(&config(2, "first", (a.addr, 1, "maxconn = 2"), (b.addr, 1, "")));
    let held: Vec<(TcpStream, u8)> = (0..4).map(|_| open(proxy.addr)).collect();
    let names: Vec<u8> = held.iter().map(|h| h.1).collect();
    assert_eq!(names, b"aabb", "a takes its two, then b takes the rest");
    // A slot freed on a is taken again before b gets another.
    let mut held = held;
    drop(held.remove(0));
    wait_active(&proxy, |name| if name == "a" { 1 } else { 2 });
    assert_eq!(open(proxy.addr).1, b'a');
    // Sequential short connections never reach b while a has room.
    drop(held);
    wait_active(&proxy, |_| 0);
    assert!((0..20).all(|_| short(&proxy) == b'a'));
}

#[test]
fn random_follows_weights_one_to_three_over_1000_connections() {
    let (a, b) = (named(b'a'), named(b'b'));
    let proxy = Proxy::start(&config(2, "random", (a.addr, 1, ""), (b.addr, 3, "")));
    let on_a = (0..1000).filter(|_| short(&proxy) == b'a').count();
    // Independent draws: the standard deviation is 13.7 connections, so the bound is ±5 %
    // of all connections (±50, 3.6 sigma), not ±5 % of a's 250.
    assert!((200..=300).contains(&on_a), "a got {on_a} of 1000, expected 250 ± 50");
}

#[test]
fn every_algorithm_queues_when_all_servers_are_full_and_serves_on_a_freed_slot() {
    for balance in ["leastconn", "random", "first"] {
        let (a, b) = (named(b'a'), named(b'b'));
        let proxy = Proxy::start(&config(
            1,
            balance,
            (a.addr, 1, "maxconn = 1"),
            (b.addr, 1, "maxconn = 1"),
        ));
        let (held_a, first) = open(proxy.addr);
        let (held_b, second) = open(proxy.addr);
        let mut names = [first, second];
        names.sort_unstable();
        assert_eq!(&names, b"ab", "{balance}: one connection on each server");
        // Both full: the third waits in the queue, reaching no server.
        let mut waiting = TcpStream::connect(proxy.addr).expect("connect");
        waiting.write_all(b"x").unwrap();
        waiting.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let mut name = [0u8; 1];
        let early = waiting.read(&mut name);
        assert!(early.is_err(), "{balance}: a full server answered: {early:?}");
        assert_eq!(a.total.load(std::sync::atomic::Ordering::SeqCst), 1, "{balance}");
        assert_eq!(b.total.load(std::sync::atomic::Ordering::SeqCst), 1, "{balance}");
        // A freed slot on a serves it, on a.
        let freed = if first == b'a' { held_a } else { held_b };
        drop(freed);
        waiting.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        waiting.read_exact(&mut name).expect("served once a slot freed");
        assert_eq!(name[0], b'a', "{balance}");
    }
}
