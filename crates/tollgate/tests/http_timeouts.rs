//! HTTP timeouts: slowloris clients get 408 after `http_request` without delaying anyone
//! else; an idle keep-alive connection is closed after `http_keep_alive`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::http::*;
use common::*;

#[test]
fn slowloris_gets_408_and_does_not_delay_others() {
    let origin = http_origin(|_| ok("quick"));
    let proxy = Proxy::start(&http_config("[timeouts]\nhttp_request = \"2s\"", origin.addr));
    let head = b"GET / HTTP/1.1\r\nHost: slow\r\nX-Padding: aaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut slow: Vec<TcpStream> = (0..200).map(|_| TcpStream::connect(proxy.addr).unwrap()).collect();
    let started = Instant::now();
    let mut worst = Duration::ZERO;
    // One header byte per second per connection, with normal requests timed in between.
    for (second, byte) in head.iter().enumerate().take(3) {
        for s in &mut slow {
            let _ = s.write_all(&[*byte]);
        }
        let t = Instant::now();
        let out = raw_exchange(proxy.addr, b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        worst = worst.max(t.elapsed());
        assert!(out.ends_with("quick"), "normal request failed: {out}");
        let next = started + Duration::from_secs(second as u64 + 1);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    assert!(worst < Duration::from_millis(100), "a normal request took {worst:?}");
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 408"), "slow client got {out:?}");
    }
    let closed_after = started.elapsed();
    assert!(
        closed_after >= Duration::from_secs(2) && closed_after < Duration::from_secs(5),
        "{closed_after:?}"
    );
    assert_eq!(proxy.running().stats().http_proxy_4xx, 200);
    assert_eq!(origin.requests().len(), 3, "no slow request reached the origin");
}

#[test]
fn idle_keepalive_connection_is_closed_quietly() {
    let origin = http_origin(|_| ok("x"));
    let proxy = Proxy::start(&http_config("[timeouts]\nhttp_keep_alive = \"500ms\"", origin.addr));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut r).unwrap().0, 200);
    let t = Instant::now();
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "no 408 on an idle keep-alive connection: {rest:?}");
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(450) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
}
