//! One idle watchdog per connection: an idle connection is closed within 1.25 × the client
//! timeout; one that keeps trickling bytes is not.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::*;

#[test]
fn idle_connection_is_closed_between_one_and_one_and_a_quarter_timeouts() {
    let origin = origin(echo);
    let proxy = Proxy::start(&tcp_config("[timeouts]\nclient = \"1s\"", &[("o", origin.addr, 1)]));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).unwrap();
    let last_byte = Instant::now();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let n = c.read(&mut b);
    let closed_after = last_byte.elapsed();
    assert!(
        matches!(n, Ok(0)) || matches!(&n, Err(e) if e.kind() == ErrorKind::ConnectionReset),
        "{n:?}"
    );
    assert!(
        closed_after >= Duration::from_millis(990),
        "closed too early: {closed_after:?}"
    );
    // 1.25 s plus scheduling slack on a busy 2-core machine.
    assert!(
        closed_after <= Duration::from_millis(1450),
        "closed too late: {closed_after:?}"
    );
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
