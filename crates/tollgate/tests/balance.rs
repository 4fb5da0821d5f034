//! Balancing: weights hold over real connections, failed servers are skipped with retries.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;

use common::*;

fn one_exchange(addr: std::net::SocketAddr) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.write_all(b"hi").unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    got
}

#[test]
fn weights_one_two_three_over_600_connections() {
    let origins: Vec<Origin> = (0..3).map(|_| origin(echo)).collect();
    let servers: Vec<(&str, std::net::SocketAddr, u32)> = vec![
        ("a", origins[0].addr, 1),
        ("b", origins[1].addr, 2),
        ("c", origins[2].addr, 3),
    ];
    let proxy = Proxy::start(&tcp_config("[global]\nworkers = 2", &servers));
    for _ in 0..600 {
        assert_eq!(one_exchange(proxy.addr), b"hi");
    }
    for (origin, share) in origins.iter().zip([100.0, 200.0, 300.0]) {
        let got = origin.total.load(Ordering::SeqCst) as f64;
        assert!((got - share).abs() <= share * 0.05, "expected {share} ± 5 %, got {got}");
    }
}

#[test]
fn connect_failure_moves_to_the_next_server() {
    let dead_port = ReservedPort::new(); // refuses connections while held
    let dead = dead_port.addr;
    let live = origin(echo);
    let proxy = Proxy::start(&tcp_config(
        "[global]\nworkers = 1",
        &[("dead", dead, 1), ("live", live.addr, 1)],
    ));
    for _ in 0..10 {
        assert_eq!(one_exchange(proxy.addr), b"hi");
    }
    let stats = proxy.running().stats();
    assert_eq!(live.total.load(Ordering::SeqCst), 10);
    assert!(stats.connect_errors >= 5, "{stats:?}");
    assert_eq!(stats.connect_retries, stats.connect_errors);
}

#[test]
fn all_servers_down_closes_the_client_after_retries() {
    let dead_port = ReservedPort::new(); // refuses connections while held
    let dead = dead_port.addr;
    let cfg = tcp_config("[global]\nworkers = 1", &[("dead", dead, 1)])
        .replace("name = \"be\"", "name = \"be\"\nretries = 2");
    let proxy = Proxy::start(&cfg);
    let mut c = TcpStream::connect(proxy.addr).expect("connect");
    let mut got = Vec::new();
    // Closed without a byte: EOF, or a reset if the close raced our unread data.
    match c.read_to_end(&mut got) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("unexpected {other:?} {got:?}"),
    }
    let stats = proxy.running().stats();
    assert_eq!((stats.connect_attempts, stats.connect_errors), (3, 3));
}
