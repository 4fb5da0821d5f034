//! Heap bytes an idle client connection holds, counted by the allocator: a figure that a busy
//! machine does not move (bytes, not time), so a change that makes idle connections fatter
//! fails here before anyone benchmarks it.
//!
//! Each test starts the proxy in this process, opens a first batch of connections (so that
//! slabs, pools and per-thread spares have grown to a power of two), then as many more as
//! double them, and divides the growth of the process's live heap bytes by that number.
//! The client side allocates nothing per connection (std sockets in a vector made big
//! enough beforehand) and the origin answers from a fixed buffer on one pooled connection,
//! so what grows is the proxy's. A TLS client (rustls, a real handshake) is dropped once its
//! response has come, its socket kept open: the client's TLS state is freed, the proxy's
//! stays. Each waits for its condition through the proxy's own counters (bounded), never for
//! a fixed time.
//!
//! `IDLE_MEMORY_HOLD=1` ends the process right after a measurement, its connections open, so
//! that `heaptrack` reports what they hold as leaked, by call site (docs/benchmarks.md).
//!
//! What the counting allocator sees is Rust's heap: aws-lc (the TLS crypto) allocates its
//! key schedules with C `malloc` (two AEAD contexts of about 600 bytes per TLS connection),
//! which these figures leave out; docs/benchmarks.md has both.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;
#[path = "h2_support/raw.rs"]
mod raw;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;

use common::Proxy;
use common::tls::{Ca, TempDir, cert_entry};
use rustls::pki_types::ServerName;
use tollgate::stats::Snapshot;
use tollgate_sys::alloc_count::{CountingAlloc, live_bytes};

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

/// Budgets, heap bytes per idle connection (what the layouts asked for; the allocator's
/// rounding and the kernel's socket memory are not in it).
/// Measured 160: the `show sessions` entry and what grows with the count. The park's slab
/// slot (160 B) and deadline (24 B) are in 256 KiB chunks the first batch already made
/// (`ctx::chunked`), so they are not in this growth; `ctx::park::tests` bounds the slot's
/// size. Before the chunks it was 384 (the slot then 224: it kept the frontend and the
/// client's address that the `show sessions` entry holds).
const PARKED_HTTP_BUDGET: i64 = 512;
/// An idle HTTP/1.1 connection after one response that has not parked yet (the first
/// `park_idle_after` of every wait): its session task, which is what it waits in, plus the
/// reactor registration and the `show sessions` entry. Measured 2,992 in a debug build;
/// 8,104 while the request's exchange was part of the task's state and the session was
/// stored three times over (its loop's argument, that loop's binding, the caller's match).
const IN_TASK_HTTP_BUDGET: i64 = 3_584;
/// A connection whose client sent half a head and went quiet (the overload case): parked,
/// its bytes on a shelf of their size, no buffer, no task. Before the park took begun heads
/// it was 7,845 in a debug build (the session task and its future); measured 423.
const HALF_HEAD_BUDGET: i64 = 640;

/// An idle TCP relay, both sockets open, no byte sent: its task (the relay's states), two
/// reactor registrations (256 B each), its `show sessions` entry. Measured 3,152; 4,464
/// while a plain relay's task also had room for a TLS server's handshake and stream and for
/// the ClientHello peek (1.3 KB, now boxed on their own paths: `proxy::tcp`); 11,144 while
/// a TCP session's task had an HTTP session's size and its relay in a box of its own.
const IDLE_TCP_BUDGET: i64 = 3_584;
/// An idle HTTP/1.1 connection over TLS after one response, parked with its rustls state.
/// Measured 6,817 (heaptrack, per connection): the rustls deframer's buffer (4,096: rustls
/// keeps 4 KiB once it has read, and has no call to free it), the boxed `ServerConnection`
/// (1,168), its handshake deframer's spans (640), its TLS 1.3 traffic state (224), its two
/// record queues (96 each), its record-layer boxes (48 each), SNI and ALPN (17); the park's
/// slab entry (224) and the `show sessions` entry (152 + 16). In its task it was 26,689: the
/// session task (7,249) and the boxed TLS session future (13,268) are gone. aws-lc's two
/// AEAD contexts (592 bytes each, C heap) come on top.
const TLS_HTTP_BUDGET: i64 = 7_168;
/// An idle HTTP/2 connection with prior knowledge (h2c) after one stream: its task and
/// boxed connection future, the codec's state (settings, windows, HPACK tables). Measured
/// 3,120; 3,888 while its task's future kept the connection's socket and state twice (an
/// `async fn` argument beside the local it moved into, rust-lang/rust#62958); 5,648 while
/// it was served in the task of the HTTP session that read its preface
/// (an HTTP/1 session's size, about 1.9 KB); 9,488 while it kept, once quiet, what its streams left for the next ones (the
/// response head scratch, 1,280; the stream handle table's slots, 1,310; a request head
/// buffer, 512; a header map, 384; the codec's open-stream list, 256); 48,744 while it
/// also kept its 32 KiB read buffer, a spare stream slot (5,200), the codec's output and
/// encode buffers and spare heads.
const H2C_BUDGET: i64 = 3_840;
/// An idle HTTP/2 connection over TLS (ALPN h2) after one stream: the same, and the rustls
/// connection in its tokio-rustls stream. Measured 9,484; 13,844 while its own task's future
/// held the TLS stream (1.1 KB) three times over (`async fn` arguments beside the locals
/// they moved into), 14,212 in the HTTP session's task, 18,068 before the same spares went
/// back, 57,294 before the buffers did.
const H2_TLS_BUDGET: i64 = 10_240;

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
fn an_idle_keep_alive_connection_in_its_task_holds_the_task_of_its_wait_only() {
    let origin = origin();
    let proxy = Proxy::start(&common::http::http_config(
        "[global]\nworkers = 1\nmaxconn = 4096\npark_idle_after = \"10m\"\n[timeouts]\nhttp_keep_alive = \"60s\"\nhttp_request = \"60s\"\n",
        origin,
    ));
    let kept = request(proxy.addr);
    let (per_conn, clients) = per_connection(&proxy, || request(proxy.addr), answered);
    eprintln!("heap bytes per idle HTTP/1.1 connection in its task: {per_conn}");
    assert!(
        per_conn <= IN_TASK_HTTP_BUDGET,
        "an idle connection in its task holds {per_conn} heap bytes (budget {IN_TASK_HTTP_BUDGET})"
    );
    assert_eq!(
        proxy.running().stats().sessions_parked,
        0,
        "nothing parked: the task was measured"
    );
    // The connection waits in its task and is still served there.
    let mut c = kept;
    c.write_all(b"GET / HTTP/1.1\r\nHost: idle.test\r\n\r\n").unwrap();
    let (got, n) = read_until(&mut c, |b| b.ends_with(b"ok"));
    assert!(
        got[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got[..n])
    );
    drop(clients);
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

/// With the caller's one connection already open (kept, to be used again after), opens
/// `FIRST - 1` more with `open`, waits until the proxy's counters say `settled` for `FIRST`,
/// then `MEASURED` more: the live heap's growth over the second batch, per connection (the
/// totals powers of two, so that the proxy's slabs double exactly over the measured batch).
/// The connections are handed back, open.
fn per_connection<C>(
    proxy: &Proxy,
    mut open: impl FnMut() -> C,
    settled: impl Fn(&Snapshot, u64) -> bool,
) -> (i64, Vec<C>) {
    let mut clients = Vec::with_capacity(FIRST + MEASURED);
    for _ in 1..FIRST {
        clients.push(open());
    }
    proxy.wait_for("first batch idle", |s| settled(s, FIRST as u64));
    let before = live_bytes();
    for _ in 0..MEASURED {
        clients.push(open());
    }
    proxy.wait_for("every connection idle", |s| settled(s, (FIRST + MEASURED) as u64));
    let per_conn = (live_bytes() - before) / MEASURED as i64;
    if std::env::var_os("IDLE_MEMORY_HOLD").is_some() {
        eprintln!(
            "heap bytes per connection: {per_conn}; exiting with {} connections open",
            clients.len()
        );
        std::process::exit(0);
    }
    (per_conn, clients)
}

/// A TLS frontend offering `alpn` (certificate for `idle.test`) and a rustls client config
/// trusting it, without resumption (so the client holds no ticket per connection).
fn tls_setup(origin: SocketAddr, alpn: &[&str]) -> (String, Arc<rustls::ClientConfig>, TempDir) {
    let dir = TempDir::new();
    let ca = Ca::new("idle-ca");
    let leaf = ca.leaf(&["idle.test"], "idle", false).write(&dir, "idle");
    let offered = alpn.iter().map(|p| format!("\"{p}\"")).collect::<Vec<_>>().join(", ");
    let config = format!(
        "[global]\nworkers = 1\nmaxconn = 4096\npark_idle_after = \"20ms\"\n[timeouts]\nhttp_keep_alive = \"60s\"\nhttp_request = \"60s\"\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         [frontend.tls]\nalpn = [{offered}]\n{}\n[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n",
        cert_entry(&leaf, true),
    );
    let mut client = Arc::unwrap_or_clone(common::tls::client_config(&ca));
    client.resumption = rustls::client::Resumption::disabled();
    client.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    (config, Arc::new(client), dir)
}

/// A TLS connection to the proxy, handshake done (blocking socket).
fn tls_connect(proxy: SocketAddr, config: &Arc<rustls::ClientConfig>) -> (rustls::ClientConnection, TcpStream) {
    let name = ServerName::try_from("idle.test").unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::clone(config), name).unwrap();
    let mut sock = TcpStream::connect(proxy).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).unwrap();
    }
    (conn, sock)
}

/// Reads through `r` until `done` holds for what was read (into a fixed buffer).
fn read_until(r: &mut impl Read, done: impl Fn(&[u8]) -> bool) -> ([u8; 4096], usize) {
    let mut got = [0u8; 4096];
    let mut n = 0;
    while !done(&got[..n]) {
        let read = r.read(&mut got[n..]).unwrap();
        assert!(read > 0, "proxy closed: {:?}", String::from_utf8_lossy(&got[..n]));
        n += read;
    }
    (got, n)
}

/// One keep-alive HTTP/1.1 request over `s`, its response read.
fn h1_exchange(s: &mut (impl Read + Write)) {
    s.write_all(b"GET / HTTP/1.1\r\nHost: idle.test\r\n\r\n").unwrap();
    let (got, n) = read_until(s, |b| b.ends_with(b"ok"));
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got[..n])
    );
}

/// One request over TLS on a new connection; the client's TLS state is then dropped and the
/// socket kept (idle, as far as the proxy can tell).
fn tls_request(proxy: SocketAddr, config: &Arc<rustls::ClientConfig>) -> (rustls::ClientConnection, TcpStream) {
    let (mut conn, mut sock) = tls_connect(proxy, config);
    h1_exchange(&mut rustls::Stream::new(&mut conn, &mut sock));
    (conn, sock)
}

/// The client's opening of an HTTP/2 connection and a GET on stream `stream`.
fn h2_hello(scheme: &str, stream: u32) -> Vec<u8> {
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(raw::frame(raw::SETTINGS, 0, 0, &[]));
    hello.extend(raw::frame(raw::SETTINGS, raw::ACK, 0, &[]));
    hello.extend(h2_get(scheme, stream));
    hello
}

fn h2_get(scheme: &str, stream: u32) -> Vec<u8> {
    let mut fields = raw::get("idle.test", "/");
    fields[1].1 = scheme.as_bytes().to_vec();
    raw::headers_frame(stream, &fields, true)
}

/// Whether `b` (frames from the proxy) holds the end of `stream` (a frame on it with
/// END_STREAM).
fn h2_stream_ended(mut b: &[u8], stream: u32) -> bool {
    while b.len() >= 9 {
        let len = u32::from_be_bytes([0, b[0], b[1], b[2]]) as usize;
        if b.len() < 9 + len {
            return false;
        }
        let id = u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff;
        if id == stream && b[4] & raw::END_STREAM != 0 && (b[3] == raw::DATA || b[3] == raw::HEADERS) {
            return true;
        }
        b = &b[9 + len..];
    }
    false
}

/// An h2c connection (prior knowledge) after one stream.
fn h2c_request(proxy: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.write_all(&h2_hello("http", 1)).unwrap();
    read_until(&mut s, |b| h2_stream_ended(b, 1));
    s
}

/// An HTTP/2 connection over TLS (ALPN h2) after one stream.
fn h2_tls_request(proxy: SocketAddr, config: &Arc<rustls::ClientConfig>) -> (rustls::ClientConnection, TcpStream) {
    let (mut conn, mut sock) = tls_connect(proxy, config);
    assert_eq!(conn.alpn_protocol(), Some(&b"h2"[..]));
    let mut s = rustls::Stream::new(&mut conn, &mut sock);
    s.write_all(&h2_hello("https", 1)).unwrap();
    read_until(&mut s, |b| h2_stream_ended(b, 1));
    (conn, sock)
}

/// `n` HTTP/1 requests answered and every buffer back.
fn answered(s: &Snapshot, n: u64) -> bool {
    s.http_requests >= n && s.buffers_in_use == 0
}

/// `n` HTTP/2 streams answered, every buffer back, and `n` connections quiet long enough
/// (`park_idle_after`) to have given back what they kept for a burst.
fn answered_h2(s: &Snapshot, n: u64) -> bool {
    s.h2_streams >= n && s.buffers_in_use == 0 && s.h2_quiet_released >= n
}

#[test]
fn an_idle_tls_connection_holds_its_tls_state_and_little_else() {
    let (config, client, _dir) = tls_setup(origin(), &["http/1.1"]);
    let proxy = Proxy::start(&config);
    // One connection keeps its client state, to be used again after the measurement.
    let mut kept = Some(tls_request(proxy.addr, &client));
    // Counted once every connection is parked (and its session task gone).
    let (per_conn, _clients) = per_connection(
        &proxy,
        || tls_request(proxy.addr, &client).1,
        |s, n| answered(s, n) && s.sessions_parked == n,
    );
    eprintln!("heap bytes per idle HTTP/1.1 connection over TLS: {per_conn}");
    assert!(
        per_conn <= TLS_HTTP_BUDGET,
        "an idle TLS connection holds {per_conn} heap bytes (budget {TLS_HTTP_BUDGET})"
    );
    let (mut conn, mut sock) = kept.take().unwrap();
    h1_exchange(&mut rustls::Stream::new(&mut conn, &mut sock));
}

#[test]
fn an_idle_h2c_connection_holds_its_codec_state_and_little_else() {
    let proxy = Proxy::start(&config(origin()).replace(
        "mode = \"http\"\ndefault_backend",
        "mode = \"http\"\nh2c = true\ndefault_backend",
    ));
    let mut kept = h2c_request(proxy.addr);
    let (per_conn, _clients) = per_connection(&proxy, || h2c_request(proxy.addr), answered_h2);
    eprintln!("heap bytes per idle h2c connection: {per_conn}");
    assert!(
        per_conn <= H2C_BUDGET,
        "an idle h2c connection holds {per_conn} heap bytes (budget {H2C_BUDGET})"
    );
    kept.write_all(&h2_get("http", 3)).unwrap();
    read_until(&mut kept, |b| h2_stream_ended(b, 3));
}

#[test]
fn an_idle_h2_connection_over_tls_holds_its_codec_and_tls_state_and_little_else() {
    let (config, client, _dir) = tls_setup(origin(), &["h2"]);
    let proxy = Proxy::start(&config);
    let mut kept = Some(h2_tls_request(proxy.addr, &client));
    let (per_conn, _clients) = per_connection(&proxy, || h2_tls_request(proxy.addr, &client).1, answered_h2);
    eprintln!("heap bytes per idle HTTP/2 connection over TLS: {per_conn}");
    assert!(
        per_conn <= H2_TLS_BUDGET,
        "an idle h2 connection over TLS holds {per_conn} heap bytes (budget {H2_TLS_BUDGET})"
    );
    let (mut conn, mut sock) = kept.take().unwrap();
    let mut s = rustls::Stream::new(&mut conn, &mut sock);
    s.write_all(&h2_get("https", 3)).unwrap();
    read_until(&mut s, |b| h2_stream_ended(b, 3));
}
