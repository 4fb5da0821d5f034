//! Heap bytes an idle client connection holds, counted by the allocator: a figure that a busy
//! machine does not move (bytes, not time), so a change that makes idle connections fatter
//! fails here before anyone benchmarks it.
//!
//! Each test starts the proxy in this process, opens a first batch of connections (so that
//! slabs, pools and per-thread spares have grown to a power of two), then as many more as
//! double them, and divides the growth of the process's live heap bytes by that number.
//! The client side allocates nothing per connection (std sockets in a vector made big
//! enough beforehand) and the origin answers from a fixed buffer on one pooled connection,
//! so what grows is the proxy's. Each waits for its condition through the proxy's own
//! counters (bounded), never for a fixed time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;

use common::Proxy;
use tollgate_sys::alloc_count::{CountingAlloc, live_bytes};

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

/// Budgets, heap bytes per idle connection (what the layouts asked for; the allocator's
/// rounding and the kernel's socket memory are not in it).
/// Measured 368 (the slab entry, the `show sessions` entry, the deadline).
const PARKED_HTTP_BUDGET: i64 = 512;
/// A connection whose client sent half a head and went quiet (the overload case): parked,
/// its bytes on a shelf of their size, no buffer, no task. Before the park took begun heads
/// it was 7,845 in a debug build (the session task and its future); measured 423.
const HALF_HEAD_BUDGET: i64 = 640;

/// An idle TCP relay, both sockets open, no byte sent: its task (the relay's states, 3.6 KB
/// in a debug build), two reactor registrations (256 B each), its `show sessions` entry.
/// Measured 4,464; 11,144 while a TCP session's task had an HTTP session's size and its
/// relay in a box of its own.
const IDLE_TCP_BUDGET: i64 = 5120;

/// Connections of the first batch, then of the measured one (the total is a power of two,
/// so a slab that doubles grows by exactly the measured batch's share).
const FIRST: usize = 256;
const MEASURED: usize = 768;

/// An origin that answers every request on a connection with the same 2-byte response,
/// reading into a fixed buffer (nothing allocated per request).
fn origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut pending = 0usize;
                loop {
                    let Ok(n) = conn.read(&mut buf[pending..]) else { return };
                    if n == 0 {
                        return;
                    }
                    pending += n;
                    // One response per complete head (the proxy sends bodiless GETs).
                    while let Some(end) = buf[..pending].windows(4).position(|w| w == b"\r\n\r\n") {
                        if conn
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                            .is_err()
                        {
                            return;
                        }
                        buf.copy_within(end + 4..pending, 0);
                        pending -= end + 4;
                    }
                    if pending == buf.len() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// One keep-alive request on a new connection; the connection stays open, idle.
fn request(proxy: SocketAddr) -> TcpStream {
    let mut c = TcpStream::connect(proxy).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: idle.test\r\n\r\n").unwrap();
    let mut got = [0u8; 256];
    let mut n = 0;
    while !got[..n].ends_with(b"ok") {
        let r = c.read(&mut got[n..]).unwrap();
        assert!(
            r > 0,
            "proxy closed the connection: {:?}",
            String::from_utf8_lossy(&got[..n])
        );
        n += r;
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got[..n])
    );
    c
}

fn config(origin: SocketAddr) -> String {
    common::http::http_config(
        "[global]\nworkers = 1\nmaxconn = 4096\npark_idle_after = \"20ms\"\n[timeouts]\nhttp_keep_alive = \"60s\"\nhttp_request = \"60s\"\n",
        origin,
    )
}

#[test]
fn an_idle_keep_alive_connection_holds_only_its_parked_entry() {
    let origin = origin();
    let proxy = Proxy::start(&config(origin));
    let mut clients = Vec::with_capacity(FIRST + MEASURED);
    for _ in 0..FIRST {
        clients.push(request(proxy.addr));
    }
    proxy.wait_for("first batch parked", |s| s.sessions_parked == FIRST as u64);
    let before = live_bytes();
    for _ in 0..MEASURED {
        clients.push(request(proxy.addr));
    }
    proxy.wait_for("every connection parked", |s| {
        s.sessions_parked == (FIRST + MEASURED) as u64
    });
    let per_conn = (live_bytes() - before) / MEASURED as i64;
    eprintln!("heap bytes per parked idle HTTP/1.1 connection: {per_conn}");
    assert!(
        per_conn <= PARKED_HTTP_BUDGET,
        "an idle connection holds {per_conn} heap bytes (budget {PARKED_HTTP_BUDGET})"
    );
    // Still served: a parked connection goes back to a session at its next request.
    let mut c = clients.pop().unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: idle.test\r\n\r\n").unwrap();
    let mut got = [0u8; 256];
    let mut n = 0;
    while !got[..n].ends_with(b"ok") {
        let r = c.read(&mut got[n..]).unwrap();
        assert!(r > 0, "closed after parking");
        n += r;
    }
    proxy.wait_for("resumed", |s| s.park_resumed >= 1);
}

#[test]
fn a_client_half_way_through_its_head_holds_what_it_sent_and_no_buffer() {
    let origin = origin();
    let proxy = Proxy::start(&config(origin));
    let half = |proxy: SocketAddr| {
        let mut c = TcpStream::connect(proxy).unwrap();
        c.write_all(b"GET /slow HTTP/1.1\r\nHost: idle.test\r\nUser-Agent: half")
            .unwrap();
        c
    };
    let mut clients = Vec::with_capacity(FIRST + MEASURED);
    for _ in 0..FIRST {
        clients.push(half(proxy.addr));
    }
    proxy.wait_for("first batch parked mid-head", |s| {
        s.sessions_parked == FIRST as u64 && s.buffers_in_use == 0
    });
    let before = live_bytes();
    for _ in 0..MEASURED {
        clients.push(half(proxy.addr));
    }
    proxy.wait_for("every connection parked mid-head", |s| {
        s.sessions_parked == (FIRST + MEASURED) as u64 && s.buffers_in_use == 0
    });
    let per_conn = (live_bytes() - before) / MEASURED as i64;
    eprintln!("heap bytes per connection half-way through its head: {per_conn}");
    assert!(
        per_conn <= HALF_HEAD_BUDGET,
        "a half-received head holds {per_conn} heap bytes (budget {HALF_HEAD_BUDGET})"
    );
    // The rest of a head still completes it.
    let mut c = clients.pop().unwrap();
    c.write_all(b"\r\n\r\n").unwrap();
    let mut got = [0u8; 256];
    let mut n = 0;
    while !got[..n].ends_with(b"ok") {
        let r = c.read(&mut got[n..]).unwrap();
        assert!(r > 0, "closed mid-head");
        n += r;
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got[..n])
    );
}

/// An origin that accepts connections and holds them, reading nothing (a TCP relay's server
/// side, idle); `held` counts them. Nothing is allocated per connection (the vector is big
/// enough beforehand).
fn holding_origin() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let held = std::sync::Arc::new(AtomicUsize::new(0));
    let count = std::sync::Arc::clone(&held);
    thread::spawn(move || {
        let mut conns = Vec::with_capacity(2 * (FIRST + MEASURED));
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            conns.push(conn);
            count.store(conns.len(), Ordering::SeqCst);
        }
    });
    (addr, held)
}

#[test]
fn an_idle_tcp_relay_holds_its_two_sockets_and_a_small_state() {
    use std::sync::atomic::Ordering;
    let (origin, held) = holding_origin();
    let global =
        "[global]\nworkers = 1\nmaxconn = 4096\n[timeouts]\nclient = \"60s\"\nserver = \"60s\"\ntunnel = \"60s\"\n";
    let proxy = Proxy::start(&common::tcp_config(global, &[("s", origin, 1)]));
    let wait_relays = |n: usize| {
        proxy.wait_for("relays open", |s| s.sessions_active == n as u64);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while held.load(Ordering::SeqCst) < n {
            assert!(
                std::time::Instant::now() < until,
                "origin holds {} of {n}",
                held.load(Ordering::SeqCst)
            );
            thread::yield_now();
        }
    };
    let mut clients = Vec::with_capacity(FIRST + MEASURED);
    for _ in 0..FIRST {
        clients.push(TcpStream::connect(proxy.addr).unwrap());
    }
    wait_relays(FIRST);
    let before = live_bytes();
    for _ in 0..MEASURED {
        clients.push(TcpStream::connect(proxy.addr).unwrap());
    }
    wait_relays(FIRST + MEASURED);
    let per_conn = (live_bytes() - before) / MEASURED as i64;
    eprintln!("heap bytes per idle TCP relay: {per_conn}");
    assert!(
        per_conn <= IDLE_TCP_BUDGET,
        "an idle TCP relay holds {per_conn} heap bytes (budget {IDLE_TCP_BUDGET})"
    );
}

/// What a crowd of connections took is given back once they are gone: the park's slab, the
/// session table's, the buffers their requests used (the pool trims what lies unused).
/// Measured 52,664 left of the 511,992 the crowd of 1,024 held: mostly the session table's
/// 256 spare entries (about 150 B each, kept so that a steady connection rate allocates
/// none), the rest queues that grew to the crowd's simultaneous wake-ups.
const LEFT_AFTER_THE_CROWD: i64 = 64 * 1024;

#[test]
fn the_memory_of_a_crowd_is_given_back_once_it_left() {
    let origin = origin();
    let proxy = Proxy::start(&config(origin));
    // Warm: one connection served, parked and closed (the park's epoll, the thread's
    // first-use state, the origin connection in the pool).
    drop(request(proxy.addr));
    proxy.wait_for("warm-up closed, its buffers freed", |s| {
        s.sessions_active == 0 && s.buffers_allocated == 0
    });
    let before = live_bytes();
    let mut clients = Vec::with_capacity(FIRST + MEASURED);
    for _ in 0..FIRST + MEASURED {
        clients.push(request(proxy.addr));
    }
    proxy.wait_for("the crowd parked", |s| s.sessions_parked == (FIRST + MEASURED) as u64);
    let crowd = live_bytes() - before;
    clients.clear();
    proxy.wait_for("the crowd gone, its buffers freed", |s| {
        s.sessions_active == 0 && s.buffers_allocated == 0
    });
    let left = live_bytes() - before;
    eprintln!(
        "heap bytes held by {} parked connections: {crowd}; left once they closed: {left}",
        FIRST + MEASURED
    );
    assert!(
        left <= LEFT_AFTER_THE_CROWD,
        "{left} heap bytes stay after the crowd left (budget {LEFT_AFTER_THE_CROWD}; the crowd held {crowd})"
    );
}
