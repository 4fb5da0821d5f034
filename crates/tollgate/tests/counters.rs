//! The counters are exact: each test counts the traffic it sent and received itself (the
//! origin counts every byte it read, the client every byte it read) and compares with the
//! proxy's `Snapshot` once every connection is closed. Also: the periodic counters line is
//! logged in master mode (by the worker process).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use common::http::{Req, Response, http_config, read_request, read_response};
use common::*;
use tollgate::stats::Snapshot;

/// A reader that adds every byte it returns to a shared tally.
struct Tally<R> {
    inner: R,
    bytes: Arc<AtomicU64>,
}

impl<R: Read> Read for Tally<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::SeqCst);
        Ok(n)
    }
}

/// An HTTP origin that counts every byte it receives. `reply` gives the response bytes, or
/// `None` to close without answering.
struct CountingOrigin {
    addr: SocketAddr,
    received: Arc<AtomicU64>,
    conns: Arc<AtomicUsize>,
}

fn counting_origin(reply: fn(&Req) -> Option<Vec<u8>>) -> CountingOrigin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Arc::new(AtomicU64::new(0));
    let conns = Arc::new(AtomicUsize::new(0));
    let (rx, c) = (Arc::clone(&received), Arc::clone(&conns));
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let id = c.fetch_add(1, Ordering::SeqCst) + 1;
            let rx = Arc::clone(&rx);
            thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(Tally {
                    inner: stream,
                    bytes: rx,
                });
                for nth in 1.. {
                    let Some(req) = read_request(&mut reader, id, nth, Some(&mut writer)) else {
                        return;
                    };
                    match reply(&req) {
                        Some(bytes) if writer.write_all(&bytes).is_ok() => {}
                        _ => return,
                    }
                }
            });
        }
    });
    CountingOrigin { addr, received, conns }
}

/// 200 with a body as long as the request's plus 7 bytes, so each response differs.
fn sized_reply(req: &Req) -> Option<Vec<u8>> {
    let body = vec![b'r'; req.body.len() + 7];
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nX-Target: {}\r\nContent-Length: {}\r\n\r\n",
        req.target,
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    Some(out)
}

/// A client connection whose reads are tallied.
struct Client {
    conn: TcpStream,
    reader: BufReader<Tally<TcpStream>>,
    received: Arc<AtomicU64>,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let conn = TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let received = Arc::new(AtomicU64::new(0));
        let reader = BufReader::new(Tally {
            inner: conn.try_clone().unwrap(),
            bytes: Arc::clone(&received),
        });
        Client { conn, reader, received }
    }

    /// The final response (interim 1xx responses are read and skipped).
    fn response(&mut self) -> Response {
        loop {
            let r = read_response(&mut self.reader).expect("a response");
            if !(100..200).contains(&r.0) {
                return r;
            }
        }
    }

    /// Reads to EOF; returns everything this connection received.
    fn finish(mut self) -> u64 {
        let mut rest = Vec::new();
        let _ = self.reader.read_to_end(&mut rest);
        self.received.load(Ordering::SeqCst)
    }
}

fn wait_settled(proxy: &Proxy) -> Snapshot {
    proxy.wait_idle(Duration::from_secs(10));
    proxy.running().stats()
}

/// Six requests on one keep-alive connection — no body, Content-Length bodies (one larger
/// than a buffer), a chunked body, an `Expect: 100-continue` upload — then `Connection: close`.
#[test]
fn http_requests_and_bytes_both_ways_are_exact() {
    let origin = counting_origin(sized_reply);
    let proxy = Proxy::start(&http_config("[global]\nworkers = 1", origin.addr));
    let mut c = Client::connect(proxy.addr);
    let requests: Vec<Vec<u8>> = vec![
        b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n".to_vec(),
        [
            b"POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n".to_vec(),
            vec![b'b'; 1000],
        ]
        .concat(),
        [
            b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n".to_vec(),
            vec![b'c'; 100],
            b"\r\n1388\r\n".to_vec(),
            vec![b'c'; 5000],
            b"\r\n1\r\nc\r\n0\r\n\r\n".to_vec(),
        ]
        .concat(),
        [
            b"POST /d HTTP/1.1\r\nHost: t\r\nContent-Length: 70000\r\n\r\n".to_vec(),
            vec![b'd'; 70000],
        ]
        .concat(),
        [
            b"PUT /e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n".to_vec(),
            vec![b'e'; 10],
        ]
        .concat(),
        b"GET /f HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".to_vec(),
    ];
    let body_lens = [0usize, 1000, 5101, 70000, 10, 0];
    for (req, len) in requests.iter().zip(body_lens) {
        c.conn.write_all(req).unwrap();
        let (status, _, body) = c.response();
        assert_eq!((status, body.len()), (200, len + 7));
    }
    let client_received = c.finish();
    let s = wait_settled(&proxy);
    assert_eq!(s.http_requests, 6);
    assert_eq!((s.sessions_total, s.sessions_active), (1, 0));
    assert_eq!(
        s.bytes_to_server,
        origin.received.load(Ordering::SeqCst),
        "bytes the origin received"
    );
    assert_eq!(s.bytes_to_client, client_received, "bytes the client received");
    assert_eq!(origin.conns.load(Ordering::SeqCst), 1);
    assert_eq!((s.connect_attempts, s.http_pool_reused), (1, 5), "{s:?}");
    assert_eq!((s.http_proxy_4xx, s.http_proxy_5xx, s.connect_errors), (0, 0, 0));
    assert_eq!((s.buffers_in_use, s.buffer_waiters), (0, 0));
}

/// Many short connections, each its own session: totals add up, nothing stays active.
#[test]
fn http_sessions_are_counted_in_and_out() {
    let origin = counting_origin(sized_reply);
    let proxy = Proxy::start(&http_config("[global]\nworkers = 2", origin.addr));
    let mut client_received = 0;
    for i in 0..20 {
        let mut c = Client::connect(proxy.addr);
        let req = format!("POST /{i} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {i}\r\n\r\n");
        c.conn.write_all(&[req.into_bytes(), vec![b'x'; i]].concat()).unwrap();
        assert_eq!(c.response().0, 200);
        client_received += c.finish();
    }
    let s = wait_settled(&proxy);
    assert_eq!((s.sessions_total, s.sessions_active, s.http_requests), (20, 0, 20));
    assert_eq!(s.bytes_to_server, origin.received.load(Ordering::SeqCst));
    assert_eq!(s.bytes_to_client, client_received);
}

/// Responses tollgate makes itself are counted (4xx and 5xx), and so are their bytes.
#[test]
fn proxy_made_errors_are_counted_with_their_bytes() {
    let dead_port = ReservedPort::new(); // refuses connections while held
    let dead = dead_port.addr;
    let proxy = Proxy::start(&http_config(
        "[global]\nworkers = 1\n[timeouts]\nhttp_request = \"300ms\"",
        dead,
    ));
    let mut received = 0;
    // 503: no server answers.
    let mut c = Client::connect(proxy.addr);
    c.conn.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert_eq!(c.response().0, 503);
    received += c.finish();
    // 400: not HTTP.
    let mut c = Client::connect(proxy.addr);
    c.conn.write_all(b"HELLO THERE\r\n\r\n").unwrap();
    assert_eq!(c.response().0, 400);
    received += c.finish();
    // 408: the head never ends.
    let mut c = Client::connect(proxy.addr);
    c.conn.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n").unwrap();
    assert_eq!(c.response().0, 408);
    received += c.finish();
    // 431: a head larger than the limit.
    let mut c = Client::connect(proxy.addr);
    let big = format!("GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n", "y".repeat(40 * 1024));
    let _ = c.conn.write_all(big.as_bytes());
    assert_eq!(c.response().0, 431);
    received += c.finish();

    let s = wait_settled(&proxy);
    assert_eq!((s.http_proxy_4xx, s.http_proxy_5xx), (3, 1), "{s:?}");
    assert_eq!(s.http_requests, 1, "only the 503's head was complete");
    assert_eq!(s.bytes_to_client, received);
    assert_eq!(s.bytes_to_server, 0);
    assert_eq!((s.sessions_total, s.sessions_active), (4, 0));
    assert!(s.connect_errors >= 1 && s.connect_attempts == s.connect_errors, "{s:?}");
}

/// 502 (the server closed without answering) and 504 (it did not answer in time): the
/// server got exactly the heads the counter says.
#[test]
fn server_failures_are_counted_and_the_bytes_sent_still_are() {
    fn reply(req: &Req) -> Option<Vec<u8>> {
        if req.target == "/slow" {
            thread::sleep(Duration::from_secs(2));
        }
        None
    }
    let origin = counting_origin(reply);
    let proxy = Proxy::start(&http_config(
        "[global]\nworkers = 1\n[timeouts]\nserver = \"300ms\"",
        origin.addr,
    ));
    let mut received = 0;
    for (target, status) in [("/close", 502), ("/slow", 504)] {
        let mut c = Client::connect(proxy.addr);
        let req = format!("POST {target} HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
        c.conn.write_all(req.as_bytes()).unwrap();
        assert_eq!(c.response().0, status);
        received += c.finish();
    }
    let s = wait_settled(&proxy);
    // A connection this test did not open (another test's client sent to a port it took
    // for free) is named as such rather than as a miscount.
    assert_eq!(s.sessions_total, 2, "only the test's two connections: {s:?}");
    assert_eq!(
        (s.http_requests, s.http_proxy_5xx, s.http_proxy_4xx),
        (2, 2, 0),
        "{s:?}"
    );
    assert_eq!(s.bytes_to_server, origin.received.load(Ordering::SeqCst));
    assert_eq!(s.bytes_to_client, received);
    assert_eq!((s.connect_attempts, s.http_pool_reused), (2, 0));
}

/// Behind TLS termination the byte counters count plaintext: what the client's TLS layer
/// decrypted, what the origin received.
#[test]
fn https_bytes_are_the_plaintext_both_ways() {
    use common::tls::{Ca, TempDir, cert_entry, client_config, tls_request};
    let origin = counting_origin(sized_reply);
    let dir = TempDir::new();
    let ca = Ca::new("counters-ca");
    let leaf = ca.leaf(&["web.example"], "web", false).write(&dir, "web");
    let config = format!(
        "[global]\nworkers = 1\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         [frontend.tls]\n{}\n[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        cert_entry(&leaf, true),
        origin.addr
    );
    let proxy = Proxy::start(&config);
    let request = [
        b"POST /tls HTTP/1.1\r\nHost: web.example\r\nConnection: close\r\nContent-Length: 3000\r\n\r\n".to_vec(),
        vec![b't'; 3000],
    ]
    .concat();
    let (reply, _) = tls_request(proxy.addr, client_config(&ca), "web.example", &request).unwrap();
    assert!(
        reply.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let s = wait_settled(&proxy);
    assert_eq!(s.bytes_to_client, reply.len() as u64);
    assert_eq!(s.bytes_to_server, origin.received.load(Ordering::SeqCst));
    assert_eq!((s.http_requests, s.tls_handshakes_full, s.sessions_active), (1, 1, 0));
}

/// TCP mode: every byte both ways, sessions in and out.
#[test]
fn tcp_bytes_and_sessions_are_exact() {
    let origin = origin(echo);
    let proxy = Proxy::start(&tcp_config("[global]\nworkers = 2", &[("a", origin.addr, 1)]));
    let sizes = [1usize, 1000, 70_000, 300_000, 17];
    for (i, &n) in sizes.iter().enumerate() {
        let mut c = TcpStream::connect(proxy.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let data = payload_block(i as u64, n);
        let writer = {
            let mut w = c.try_clone().unwrap();
            thread::spawn(move || {
                w.write_all(&data).unwrap();
                w.shutdown(std::net::Shutdown::Write).unwrap();
            })
        };
        let mut back = Vec::new();
        c.read_to_end(&mut back).unwrap();
        writer.join().unwrap();
        assert_eq!(back.len(), n);
    }
    let total: u64 = sizes.iter().map(|&n| n as u64).sum();
    let s = wait_settled(&proxy);
    assert_eq!((s.bytes_to_server, s.bytes_to_client), (total, total));
    assert_eq!((s.sessions_total, s.sessions_active), (5, 0));
    assert_eq!((s.connect_attempts, s.connect_errors, s.connect_retries), (5, 0, 0));
    assert_eq!((s.buffers_in_use, s.buffer_waiters, s.idle_timeouts), (0, 0, 0));
}

/// A session whose task is dropped by a hard stop is counted out too.
#[test]
fn hard_stop_counts_open_sessions_out() {
    let origin = origin(echo);
    let mut proxy = Proxy::start(&tcp_config("[global]\nworkers = 2", &[("a", origin.addr, 1)]));
    let clients: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut c = TcpStream::connect(proxy.addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(b"ping").unwrap();
            let mut got = [0u8; 4];
            c.read_exact(&mut got).unwrap();
            c
        })
        .collect();
    let running = proxy.running.take().unwrap();
    assert_eq!(running.stats().sessions_active, 4);
    let shared = Arc::clone(running.shared());
    running.hard_stop();
    running.join().unwrap();
    let after = tollgate::stats::sum(shared.stats.iter().map(|s| s.as_ref()));
    assert_eq!((after.sessions_total, after.sessions_active), (4, 0));
    drop(clients);
}

/// Master mode: the worker process logs `counters:` every 10 s at debug, with the traffic
/// it served and no session left open.
#[test]
fn master_mode_logs_the_periodic_counters_line() {
    use master_support::{Master, TempDir, global};
    let origin = counting_origin(sized_reply);
    let dir = TempDir::new("counters-line");
    let config = http_config(&global(&dir.0, ""), origin.addr);
    let master = Master::start(dir, &config, &[("RUST_LOG", "tollgate=debug")]);
    let mut received = 0;
    for i in 0..5 {
        let mut c = Client::connect(master.addr);
        let req = format!("GET /{i} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        c.conn.write_all(req.as_bytes()).unwrap();
        assert_eq!(c.response().0, 200);
        received += c.finish();
    }
    let line = master
        .wait_log(
            |l| l.contains("counters:") && l.contains(" http_requests=5 "),
            Duration::from_secs(35),
        )
        .expect("a periodic counters line with the 5 requests, from the worker process");
    let field = |name: &str| -> u64 {
        let v = line
            .split(&format!(" {name}="))
            .nth(1)
            .and_then(|r| r.split_whitespace().next());
        v.and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name}= in {line}"))
    };
    assert_eq!(field("sessions_total"), 5, "{line}");
    assert_eq!(field("sessions_active"), 0, "{line}");
    assert_eq!(
        field("bytes_to_server"),
        origin.received.load(Ordering::SeqCst),
        "{line}"
    );
    assert_eq!(field("bytes_to_client"), received, "{line}");
    assert!(
        !line.contains("conns="),
        "no budget figure posing as open connections: {line}"
    );
}
