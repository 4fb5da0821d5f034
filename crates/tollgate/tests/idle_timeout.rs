//! One idle watchdog per connection: an idle connection is closed within 1.25 × the client
//! timeout; one that keeps trickling bytes is not; `timeouts.tunnel` replaces the limit of
//! a TCP relay and of an upgraded (WebSocket) HTTP connection.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::http::{Reply, http_config, http_origin, read_response};
use common::*;

/// After one echoed byte, how long the idle connection `c` stays open (bounded at 6 s).
fn open_after_last_byte(c: &mut TcpStream) -> Duration {
    c.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).unwrap();
    let last_byte = Instant::now();
    c.set_read_timeout(Some(Duration::from_secs(6))).unwrap();
    let n = c.read(&mut b);
    assert!(
        matches!(n, Ok(0)) || matches!(&n, Err(e) if e.kind() == ErrorKind::ConnectionReset),
        "not closed: {n:?}"
    );
    last_byte.elapsed()
}

/// Closed no earlier than `min_ms` and no later than `max_ms` after the last byte.
fn closed_between(closed_after: Duration, min_ms: u64, max_ms: u64) {
    assert!(
        closed_after >= Duration::from_millis(min_ms),
        "closed too early: {closed_after:?}"
    );
    assert!(
        closed_after <= Duration::from_millis(max_ms),
        "closed too late: {closed_after:?}"
    );
}

/// `timeouts.tunnel` supersedes `client` for a TCP relay: a 2 s tunnel limit keeps an idle
/// connection open past the 1 s client limit, and closes it within 1.25 × 2 s.
#[test]
fn a_tcp_relay_idles_out_after_the_tunnel_timeout() {
    let origin = origin(echo);
    let proxy = Proxy::start(&tcp_config(
        "[timeouts]\nclient = \"1s\"\ntunnel = \"2s\"",
        &[("o", origin.addr, 1)],
    ));
    let closed_after = open_after_last_byte(&mut TcpStream::connect(proxy.addr).unwrap());
    closed_between(closed_after, 1990, 2900);
}

/// An upgraded (WebSocket) connection is a tunnel: `timeouts.tunnel` of 1 s closes it
/// though `client` and `server` are 10 s.
#[test]
fn a_websocket_tunnel_idles_out_after_the_tunnel_timeout() {
    let origin = http_origin(|_| {
        Reply::Tunnel(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n".to_vec())
    });
    let proxy = Proxy::start(&http_config(
        "[timeouts]\nclient = \"10s\"\nserver = \"10s\"\ntunnel = \"1s\"",
        origin.addr,
    ));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.write_all(b"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        .unwrap();
    let mut r = std::io::BufReader::new(c.try_clone().unwrap());
    let (status, _, _) = read_response(&mut r).unwrap();
    assert_eq!(status, 101);
    let closed_after = open_after_last_byte(&mut c);
    closed_between(closed_after, 990, 1450);
}

#[test]
fn idle_connection_is_closed_between_one_and_one_and_a_quarter_timeouts() {
    let origin = origin(echo);
    let proxy = Proxy::start(&tcp_config("[timeouts]\nclient = \"1s\"", &[("o", origin.addr, 1)]));
    let closed_after = open_after_last_byte(&mut TcpStream::connect(proxy.addr).unwrap());
    // 1.25 s plus scheduling slack on a busy 2-core machine.
    closed_between(closed_after, 990, 1450);
    assert_eq!(proxy.running().stats().idle_timeouts, 1);
}

#[test]
fn trickling_connection_stays_open() {
    let origin = origin(echo);
    let proxy = Proxy::start(&tcp_config("[timeouts]\nclient = \"1s\"", &[("o", origin.addr, 1)]));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // One byte every 400 ms for 3.2 s: never 1 s without progress.
    for i in 0..8u8 {
        c.write_all(&[i]).unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        assert_eq!(b[0], i);
        thread::sleep(Duration::from_millis(400));
    }
    assert_eq!(proxy.running().stats().idle_timeouts, 0);
}
