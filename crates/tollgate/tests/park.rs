//! The park (`global.park_idle_after`): an idle HTTP/1 connection leaves its task and comes
//! back where it left off — its next requests served (pipelined ones too), a head begun
//! before the park finished after it, a first request's or a begun head's deadline answered
//! 408 (a trickle across parks earns no new one), a keep-alive deadline closing it quietly,
//! the counters back to zero.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Proxy;
use common::http::{http_config, http_origin, ok};

fn start() -> (Proxy, common::http::HttpOrigin) {
    let origin = http_origin(|_| ok("ok"));
    let global = "[global]\nworkers = 1\npark_idle_after = \"20ms\"\n[timeouts]\nhttp_request = \"400ms\"\nhttp_keep_alive = \"400ms\"\n";
    (Proxy::start(&http_config(global, origin.addr)), origin)
}

/// Reads until `n` responses ending in `ok` arrived (or the connection closed).
fn read_responses(c: &mut TcpStream, n: usize) -> String {
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while String::from_utf8_lossy(&got).matches("\r\n\r\nok").count() < n {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(r) => got.extend_from_slice(&buf[..r]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[test]
fn a_parked_connection_serves_its_next_requests_pipelined_or_not() {
    let (proxy, _origin) = start();
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.write_all(b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert!(read_responses(&mut c, 1).starts_with("HTTP/1.1 200"));
    proxy.wait_for("parked after its response", |s| s.sessions_parked == 1);
    // Two requests in one write: both answered, in order, by the resumed session.
    c.write_all(b"GET /2 HTTP/1.1\r\nHost: a\r\n\r\nGET /3 HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let text = read_responses(&mut c, 2);
    assert_eq!(text.matches("HTTP/1.1 200").count(), 2, "{text}");
    proxy.wait_for("parked again", |s| s.sessions_parked == 1 && s.park_resumed >= 1);
    let stats = proxy.running().stats();
    assert_eq!(stats.sessions_active, 1, "{stats:?}");
    assert!(stats.park_entered >= 2, "{stats:?}");
}

#[test]
fn a_silent_connection_is_parked_then_answered_408_at_its_request_deadline() {
    let (proxy, _origin) = start();
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    proxy.wait_for("parked before its first byte", |s| s.sessions_parked == 1);
    let text = read_responses(&mut c, 1);
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?}");
    proxy.wait_for("closed", |s| s.sessions_active == 0 && s.sessions_parked == 0);
}

#[test]
fn a_parked_keep_alive_connection_closes_quietly_at_its_deadline() {
    let (proxy, _origin) = start();
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert!(read_responses(&mut c, 1).starts_with("HTTP/1.1 200"));
    proxy.wait_for("parked", |s| s.sessions_parked == 1);
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(c.read(&mut buf).unwrap(), 0, "expected a quiet close, no bytes");
    proxy.wait_for("counted out", |s| {
        s.sessions_active == 0 && s.sessions_parked == 0 && s.park_expired == 1
    });
}

#[test]
fn a_client_that_closes_while_parked_is_counted_out() {
    let (proxy, _origin) = start();
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert!(read_responses(&mut c, 1).starts_with("HTTP/1.1 200"));
    proxy.wait_for("parked", |s| s.sessions_parked == 1);
    drop(c);
    proxy.wait_for("counted out", |s| s.sessions_active == 0 && s.sessions_parked == 0);
    // A normal client is served meanwhile and after.
    let mut d = TcpStream::connect(proxy.addr).unwrap();
    d.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert!(read_responses(&mut d, 1).starts_with("HTTP/1.1 200"));
}

#[test]
fn a_head_begun_before_the_park_is_finished_after_it() {
    let (proxy, _origin) = start();
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.write_all(b"GET /slow HTTP/1.1\r\nHost: a\r\nUser-Agent: ha").unwrap();
    proxy.wait_for("parked mid-head", |s| s.sessions_parked == 1 && s.buffers_in_use == 0);
    c.write_all(b"lf\r\n\r\n").unwrap();
    let text = read_responses(&mut c, 1);
    assert!(text.starts_with("HTTP/1.1 200"), "{text:?}");
    let stats = proxy.running().stats();
    assert_eq!(stats.park_resumed, 1, "{stats:?}");
    assert_eq!(
        stats.http_heads_waited, 1,
        "one head waited for, counted once: {stats:?}"
    );
}

#[test]
fn a_head_trickled_across_parks_keeps_its_deadline() {
    // http_request is 400 ms; the client sends a byte of its head every 60 ms (each gap
    // long enough to park it) for up to 4 s. Were a resume to start the deadline again,
    // the head would never time out while the trickle lasts.
    let (proxy, _origin) = start();
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\nX-Trickle: ").unwrap();
    let began = std::time::Instant::now();
    let mut w = c.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        for _ in 0..66 {
            if w.write_all(b"x").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(60));
        }
    });
    let text = read_responses(&mut c, 1);
    let took = began.elapsed();
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?}");
    assert!(took < Duration::from_secs(2), "408 only after {took:?}");
    let stats = proxy.running().stats();
    assert!(stats.park_resumed >= 2, "the trickle went through the park: {stats:?}");
    drop(c);
    trickle.join().unwrap();
    proxy.wait_for("closed", |s| s.sessions_active == 0 && s.sessions_parked == 0);
}

#[test]
fn a_begun_head_parked_is_answered_408_at_its_deadline() {
    let (proxy, _origin) = start();
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n").unwrap();
    proxy.wait_for("parked mid-head", |s| s.sessions_parked == 1);
    let text = read_responses(&mut c, 1);
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?}");
    proxy.wait_for("closed", |s| s.sessions_active == 0 && s.sessions_parked == 0);
    assert_eq!(proxy.running().stats().park_expired, 0, "answered, not closed quietly");
}

#[test]
fn a_connection_parked_before_its_first_request_then_gets_the_keep_alive_time() {
    // The first request's deadline (300 ms) is the park's while it waits; once a request
    // came, the next wait is http_keep_alive's (5 s), not what is left of the first one.
    let origin = http_origin(|_| ok("ok"));
    let global = "[global]\nworkers = 1\npark_idle_after = \"20ms\"\n[timeouts]\nhttp_request = \"300ms\"\nhttp_keep_alive = \"5s\"\n";
    let proxy = Proxy::start(&http_config(global, origin.addr));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    let accepted = std::time::Instant::now();
    proxy.wait_for("parked before its first byte", |s| s.sessions_parked == 1);
    c.write_all(b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    assert!(read_responses(&mut c, 1).starts_with("HTTP/1.1 200"));
    proxy.wait_for("parked after its response", |s| {
        s.sessions_parked == 1 && s.park_entered == 2
    });
    // Past the first request's deadline (no signal exists for a close that must not come).
    std::thread::sleep(Duration::from_millis(700).saturating_sub(accepted.elapsed()));
    c.write_all(b"GET /2 HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    let text = read_responses(&mut c, 1);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "closed at the first request's deadline: {text:?}"
    );
    assert_eq!(proxy.running().stats().park_expired, 0);
}

/// A client that thinks longer than `park_idle_after` between requests: once it came back
/// from the park after such a wait, its connection goes back to the park right after the
/// response (no `park_idle_after` in a task first), re-armed in the park's epoll set
/// (one-shot, `epoll_ctl(MOD)`). A request that then comes quickly is woken from there and
/// served, and that connection waits `park_idle_after` in its task again.
#[test]
fn a_client_that_asks_seldom_goes_back_to_the_park_at_once() {
    let origin = http_origin(|_| ok("ok"));
    let idle = Duration::from_secs(1);
    // The proxy's timer starts at its write of the response, a moment before the client has
    // read it: waits are judged against half of park_idle_after, not all of it.
    let half = idle / 2;
    let global = "[global]\nworkers = 1\npark_idle_after = \"1s\"\n[timeouts]\nhttp_request = \"30s\"\nhttp_keep_alive = \"30s\"\n";
    let proxy = Proxy::start(&http_config(global, origin.addr));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    let mut ask = |path: &str| {
        c.write_all(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
            .unwrap();
        let text = read_responses(&mut c, 1);
        assert!(text.starts_with("HTTP/1.1 200"), "{text:?}");
        std::time::Instant::now()
    };
    let answered = ask("/1");
    proxy.wait_for("parked after park_idle_after", |s| s.park_entered == 1);
    assert!(
        answered.elapsed() >= half,
        "parked {:?} after the response",
        answered.elapsed()
    );
    // Asked again after more than park_idle_after: a client that asks seldom.
    let answered = ask("/2");
    proxy.wait_for("parked again", |s| s.park_entered == 2 && s.park_resumed == 1);
    let waited = answered.elapsed();
    assert!(waited < half, "parked {waited:?} after the response, not at once");
    // Asked again at once: served from the park, then back to waiting in its task first.
    let answered = ask("/3");
    proxy.wait_for("parked a third time", |s| s.park_entered == 3 && s.park_resumed == 2);
    let waited = answered.elapsed();
    assert!(waited >= half, "a quick client parked {waited:?} after its response");
    let stats = proxy.running().stats();
    assert_eq!(
        (stats.sessions_active, stats.sessions_parked, stats.park_expired),
        (1, 1, 0),
        "{stats:?}"
    );
    drop(c);
    proxy.wait_for("counted out", |s| s.sessions_active == 0 && s.sessions_parked == 0);
}
