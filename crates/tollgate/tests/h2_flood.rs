//! HTTP/2 flood defenses (issue 13, item 5), each sent by a raw-frame client: the abusive
//! connection gets GOAWAY ENHANCE_YOUR_CALM and is closed, the flood's counter moves, the
//! worker's buffers are all back, and a well-behaved client on the same worker keeps its
//! latency (p99 within 2× its baseline, with a small floor for loopback noise).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
#[path = "h2_support/origin.rs"]
mod origin;
#[path = "h2_support/raw.rs"]
mod raw;

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::Proxy;
use raw::*;

fn proxy(origin: SocketAddr) -> Proxy {
    Proxy::start(&format!(
        "[global]\nworkers = 1\n[timeouts]\nclient = \"1s\"\n[http2]\nmax_pings = 50\nmax_settings = 50\nmax_empty_data = 50\n\
         max_priority = 200\nmax_window_updates = 1000\nmax_client_resets = 100\nmax_server_resets = 50\nmax_header_block_frames = 16\n\
         max_header_list_size = \"4KiB\"\nmax_oversized_heads = 20\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\ndefault_backend = \"be\"\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n"
    ))
}

fn post_open(stream: u32) -> Vec<u8> {
    let fields = vec![
        (b":method".to_vec(), b"POST".to_vec()),
        (b":scheme".to_vec(), b"http".to_vec()),
        (b":authority".to_vec(), b"example.com".to_vec()),
        (b":path".to_vec(), b"/up".to_vec()),
    ];
    headers_frame(stream, &fields, false)
}

/// The flood's bytes, written in batches until the proxy stops reading or closes.
fn flood_bytes(kind: &str) -> Vec<u8> {
    let mut out = Vec::new();
    match kind {
        "ping" => (0..10_000u64).for_each(|i| out.extend(frame(PING, 0, 0, &i.to_be_bytes()))),
        "settings" => (0..10_000).for_each(|_| out.extend(frame(SETTINGS, 0, 0, &[]))),
        "empty-data" => {
            out.extend(post_open(1));
            (0..10_000).for_each(|_| out.extend(frame(DATA, 0, 1, &[])));
        }
        "priority" => (0..10_000u32).for_each(|i| out.extend(frame(PRIORITY, 0, 2 * i + 101, &[0, 0, 0, 0, 16]))),
        "window-update" => (0..100_000).for_each(|_| out.extend(frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()))),
        "rapid-reset" => (0..10_000u32).for_each(|i| {
            out.extend(headers_frame(2 * i + 1, &raw::get("example.com", "/r"), true));
            out.extend(frame(RST_STREAM, 0, 2 * i + 1, &8u32.to_be_bytes()));
        }),
        "continuation" => {
            let head = block(&[(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/")]);
            out.extend(frame(HEADERS, 0, 1, &head));
            let filler = block(&[(b"x-filler", &[b'a'; 90])]);
            (0..10_000).for_each(|_| out.extend(frame(CONTINUATION, 0, 1, &filler)));
        }
        "server-resets" => (0..10_000u32).for_each(|i| {
            // A connection-specific field: a malformed request the proxy must reset.
            let mut fields = raw::get("example.com", "/m");
            fields.push((b"connection".to_vec(), b"close".to_vec()));
            out.extend(headers_frame(2 * i + 1, &fields, true));
        }),
        "oversized-heads" => (0..1000u32).for_each(|i| out.extend(oversized_head(2 * i + 1))),
        _ => unreachable!(),
    }
    out
}

/// A GET whose head is over the proxy's `max_header_list_size` (4 KiB): answered 431.
fn oversized_head(stream: u32) -> Vec<u8> {
    let mut fields = raw::get("example.com", "/big");
    fields.push((b"x-big".to_vec(), vec![b'a'; 10_000]));
    headers_frame(stream, &fields, true)
}

/// HTTP/1.1 keep-alive GETs on one connection; each request's latency.
fn latencies(addr: SocketAddr, n: usize) -> Vec<Duration> {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    (0..n)
        .map(|_| {
            let t = Instant::now();
            w.write_all(b"GET /size/100 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let (status, _, body) = common::http::read_response(&mut r).unwrap();
            assert_eq!((status, body.len()), (200, 100));
            t.elapsed()
        })
        .collect()
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() * 99 / 100]
}

fn run_flood(proxy: &Proxy, kind: &str) -> Option<u32> {
    let mut conn = Conn::open(proxy.addr, &[]);
    let bytes = flood_bytes(kind);
    // Written from another thread: the proxy stops reading a tripped connection, so a
    // blocking write could wait forever; the GOAWAY is read meanwhile.
    let mut w = conn.s.try_clone().unwrap();
    w.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let writer = thread::spawn(move || {
        for piece in bytes.chunks(64 * 1024) {
            if w.write_all(piece).is_err() {
                return;
            }
        }
    });
    let code = conn.goaway(Duration::from_secs(10));
    // The proxy closes after its GOAWAY: the socket reaches EOF (bounded).
    let closed = conn.next(Duration::from_secs(5)).is_none();
    assert!(closed, "{kind}: connection still open after GOAWAY");
    drop(conn);
    writer.join().unwrap();
    code
}

#[test]
fn every_flood_gets_enhance_your_calm_and_others_stay_fast() {
    let o = origin::start();
    let proxy = proxy(o.addr);
    // Warm-up: the first requests pay for the origin connection and the proxy's buffers.
    latencies(proxy.addr, 20);
    let t = Instant::now();
    let baseline = p99(latencies(proxy.addr, 200));
    eprintln!("baseline {baseline:?} in {:?}", t.elapsed());
    let floods = [
        "ping",
        "settings",
        "empty-data",
        "priority",
        "window-update",
        "rapid-reset",
        "continuation",
        "server-resets",
        "oversized-heads",
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let addr = proxy.addr;
    let stop2 = stop.clone();
    let good = thread::spawn(move || {
        let mut all = Vec::new();
        while !stop2.load(Ordering::SeqCst) {
            all.extend(latencies(addr, 50));
        }
        all
    });
    for kind in floods {
        let t = Instant::now();
        assert_eq!(run_flood(&proxy, kind), Some(ENHANCE_YOUR_CALM), "{kind}");
        eprintln!("{kind}: closed after {:?}", t.elapsed());
    }
    stop.store(true, Ordering::SeqCst);
    let during = p99(good.join().unwrap());
    let stats = proxy.running().stats();
    let counted = [
        ("ping", stats.h2_flood_pings),
        ("settings", stats.h2_flood_settings),
        ("empty-data", stats.h2_flood_empty_data),
        ("priority", stats.h2_flood_priority),
        ("window-update", stats.h2_flood_window_updates),
        ("rapid-reset", stats.h2_flood_client_resets),
        ("continuation", stats.h2_flood_header_block),
        ("server-resets", stats.h2_flood_server_resets),
        ("oversized-heads", stats.h2_flood_oversized_heads),
    ];
    for (kind, n) in counted {
        assert_eq!(n, 1, "{kind}: {stats:?}");
    }
    eprintln!("well-behaved p99: baseline {baseline:?}, during the floods {during:?}");
    let bound = (baseline * 2).max(Duration::from_millis(25));
    assert!(during <= bound, "well-behaved p99 {during:?} vs baseline {baseline:?}");
    proxy.wait_idle(Duration::from_secs(10));
    assert_eq!(proxy.running().stats().buffers_in_use, 0, "buffers released");
}

#[test]
fn hpack_bomb_is_refused_before_it_is_expanded() {
    let o = origin::start();
    let proxy = proxy(o.addr);
    let mut conn = Conn::open(proxy.addr, &[]);
    // One 4,000-byte entry in the dynamic table, then 1,000 references to it: 4 MB decoded
    // from a ~1 KB block, far over max_header_list_size.
    let mut b = block(&[
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":authority", b"x"),
        (b":path", b"/bomb"),
    ]);
    indexed_literal(&mut b, b"x-big", &[b'a'; 4000]);
    for _ in 0..1000 {
        indexed(&mut b, 62);
    }
    conn.send(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &b));
    let outcome = conn.outcome(1, Duration::from_secs(5));
    assert!(outcome.refused(), "{outcome:?}");
    assert!(o.seen().is_empty(), "the bomb reached the origin");
    // The same connection (or a new one) still serves.
    let mut conn = Conn::open(proxy.addr, &[]);
    conn.send(&headers_frame(1, &raw::get("x", "/size/10"), true));
    assert_eq!(conn.outcome(1, Duration::from_secs(5)), Outcome::Head(0x88));
}

/// Issue 27, item 12: request heads over `max_header_list_size`, repeated on one connection,
/// are answered 431 up to `max_oversized_heads` (20 here), then the connection gets GOAWAY
/// ENHANCE_YOUR_CALM and is closed, and `h2_flood_oversized_heads` moves; an HTTP/2 client
/// on another connection is served meanwhile. (Sent one at a time: heads read together
/// with the one past the budget get no 431, the connection being dead by then.)
#[test]
fn oversized_heads_are_cut_after_their_budget() {
    let o = origin::start();
    let proxy = proxy(o.addr);
    let mut bad = Conn::open(proxy.addr, &[]);
    for i in 0..20u32 {
        bad.send(&oversized_head(2 * i + 1));
        let outcome = bad.outcome(2 * i + 1, Duration::from_secs(5));
        assert!(
            matches!(outcome, Outcome::Head(_)),
            "head {i} answered (431): {outcome:?}"
        );
        if i == 10 {
            // Meanwhile, another connection is served.
            let mut good = Conn::open(proxy.addr, &[]);
            good.send(&headers_frame(1, &raw::get("example.com", "/size/10"), true));
            assert_eq!(good.outcome(1, Duration::from_secs(5)), Outcome::Head(0x88));
        }
    }
    assert_eq!(proxy.running().stats().h2_flood_oversized_heads, 0);
    // The 21st within the window: GOAWAY ENHANCE_YOUR_CALM, then the close.
    bad.send(&oversized_head(41));
    assert_eq!(bad.goaway(Duration::from_secs(5)), Some(ENHANCE_YOUR_CALM));
    assert!(bad.next(Duration::from_secs(5)).is_none(), "closed after the GOAWAY");
    assert_eq!(proxy.running().stats().h2_flood_oversized_heads, 1);
    assert!(
        o.seen().iter().all(|s| s.target != "/big"),
        "an oversized head reached the origin"
    );
    // And others are still served after.
    let mut good = Conn::open(proxy.addr, &[]);
    good.send(&headers_frame(1, &raw::get("example.com", "/size/10"), true));
    assert_eq!(good.outcome(1, Duration::from_secs(5)), Outcome::Head(0x88));
}

#[test]
fn zero_window_stall_is_timed_out_and_its_buffers_freed() {
    let o = origin::start();
    let proxy = proxy(o.addr);
    // SETTINGS_INITIAL_WINDOW_SIZE = 0: no response DATA may ever be sent.
    let mut conn = Conn::open(proxy.addr, &[(0x4, 0)]);
    conn.send(&headers_frame(1, &raw::get("x", "/size/10000000"), true));
    let t = Instant::now();
    let mut reset = None;
    while let Some(f) = conn.next(Duration::from_secs(10)) {
        if f.kind == RST_STREAM && f.stream == 1 {
            reset = Some(t.elapsed());
            break;
        }
    }
    let after = reset.expect("stream reset after timeouts.client");
    assert!(after < Duration::from_secs(8), "{after:?}");
    drop(conn);
    proxy.wait_idle(Duration::from_secs(10));
    let stats = proxy.running().stats();
    assert_eq!(stats.buffers_in_use, 0, "{stats:?}");
}

/// The proxy's resident memory (this process: the proxy runs in it).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_client_that_does_not_read_gets_nothing_more_queued() {
    let o = origin::start();
    // timeouts.client above the time the client does not read (else the stalled stream
    // is reset, as it should be).
    let proxy = Proxy::start(&format!(
        "[global]\nworkers = 1\n[timeouts]\nclient = \"20s\"\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\ndefault_backend = \"be\"\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        o.addr
    ));
    // Windows as large as HTTP/2 allows: only the proxy's own bound on unwritten output
    // (`http2.max_send_buffer`) stops a 100 MB response from piling up for a client that
    // does not read its socket.
    let mut conn = Conn::open(proxy.addr, &[(0x4, 0x7fff_ffff)]);
    conn.send(&frame(WINDOW_UPDATE, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes()));
    let total: usize = 100_000_000;
    let before = rss_kib();
    conn.send(&headers_frame(1, &raw::get("x", &format!("/size/{total}")), true));
    // Three seconds of not reading, sampled: time for the origin to send it all.
    let mut peak = before;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        peak = peak.max(rss_kib());
        thread::sleep(Duration::from_millis(10));
    }
    eprintln!("RSS grew by {} KiB while the client did not read", peak - before);
    assert!(
        peak.saturating_sub(before) < 32 * 1024,
        "RSS grew by {} KiB",
        peak - before
    );
    // Then the whole body arrives.
    let mut got = 0;
    let mut ended = false;
    while let Some(f) = conn.next(Duration::from_secs(20)) {
        if f.stream != 1 {
            continue;
        }
        if f.kind == DATA {
            got += f.payload.len();
            if f.flags & END_STREAM != 0 {
                ended = true;
                break;
            }
        }
        assert_ne!(f.kind, RST_STREAM, "stream reset after {got} bytes");
    }
    assert!(ended, "stream ended after {got} bytes");
    assert_eq!(got, total);
}
