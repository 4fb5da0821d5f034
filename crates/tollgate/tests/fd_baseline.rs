//! 10 000 short connections through the proxy leave no descriptor behind.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

use common::*;

#[test]
fn ten_thousand_short_connections_return_fds_to_baseline() {
    let origin = origin(echo);
    let proxy = Proxy::start(&tcp_config("", &[("o", origin.addr, 1)]));
    // Warm up so lazily created descriptors (epoll, eventfd, pools) exist before the baseline.
    for _ in 0..20 {
        ping(proxy.addr);
    }
    proxy.wait_idle(Duration::from_secs(5));
    wait_origin_idle(&origin);
    let baseline = open_fds();
    let addr = proxy.addr;
    let threads: Vec<_> = (0..4)
        .map(|_| thread::spawn(move || (0..2500).for_each(|_| ping(addr))))
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    proxy.wait_idle(Duration::from_secs(10));
    wait_origin_idle(&origin);
    assert_eq!(open_fds(), baseline, "descriptors leaked");
    let stats = proxy.running().stats();
    assert_eq!(stats.sessions_total, 10_020);
    assert_eq!(stats.connect_errors, 0);
}

fn ping(addr: std::net::SocketAddr) {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.write_all(b"ping").unwrap();
    let mut b = [0u8; 4];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ping");
}

fn wait_origin_idle(origin: &Origin) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while origin.current.load(std::sync::atomic::Ordering::SeqCst) != 0 {
        assert!(std::time::Instant::now() < deadline, "origin connections still open");
        thread::sleep(Duration::from_millis(5));
    }
}
