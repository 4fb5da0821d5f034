//! TLS to servers in HTTP mode (`tls = true` on a server of an http backend): the origin
//! sees a ClientHello first (SNI and ALPN `http/1.1` in it) and the request only inside TLS;
//! responses, request bodies and upgraded tunnels pass through; the TLS connection is pooled
//! and reused; a certificate from the wrong CA is a 502 counted in `tls_backend_errors`;
//! `verify = false` works; a plain TCP listener never sees a plaintext request.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::http::{Req, read_request, read_response};
use common::tls::*;
use common::*;

/// What one origin connection saw.
#[derive(Default, Clone)]
struct Seen {
    /// Every byte read from the socket, handshake included.
    raw: Vec<u8>,
    /// Bytes read from the socket by the time the handshake was complete.
    before_handshake_done: usize,
    sni: Option<String>,
    alpn: Option<Vec<u8>>,
    requests: Vec<Req>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// The origin's socket, recording what it reads.
struct Tap {
    stream: TcpStream,
    log: Log,
    id: usize,
}

impl Read for Tap {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.stream.read(buf)?;
        self.log.lock().unwrap()[self.id].raw.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}

impl Write for Tap {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

/// A TLS HTTP/1.1 origin (rustls, one thread per connection, keep-alive). `GET` answers
/// which connection and request it was; `POST` answers the body's length and byte sum; a
/// request with `Upgrade` gets a 101 and then an echo of whatever follows.
fn tls_http_origin(config: Arc<rustls::ServerConfig>) -> (SocketAddr, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Log = Arc::default();
    let conns = log.clone();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let id = {
                let mut l = conns.lock().unwrap();
                l.push(Seen::default());
                l.len() - 1
            };
            let (config, log) = (config.clone(), conns.clone());
            thread::spawn(move || serve_tls_conn(config, Tap { stream, log, id }));
        }
    });
    (addr, log)
}

fn serve_tls_conn(config: Arc<rustls::ServerConfig>, mut tap: Tap) {
    tap.stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (log, id) = (tap.log.clone(), tap.id);
    let mut conn = rustls::ServerConnection::new(config).unwrap();
    while conn.is_handshaking() {
        if conn.complete_io(&mut tap).is_err() {
            return;
        }
    }
    {
        let mut l = log.lock().unwrap();
        let seen = &mut l[id];
        seen.before_handshake_done = seen.raw.len();
        seen.sni = conn.server_name().map(str::to_string);
        seen.alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
    }
    let mut reader = BufReader::new(rustls::StreamOwned::new(conn, tap));
    for nth in 1.. {
        let Some(req) = read_request(&mut reader, id + 1, nth, None) else {
            return;
        };
        log.lock().unwrap()[id].requests.push(req.clone());
        let reply = if req.header("upgrade").is_some() {
            "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n".to_string()
        } else {
            let body = match req.method.as_str() {
                "POST" => format!(
                    "len={} sum={}",
                    req.body.len(),
                    req.body.iter().map(|&b| u64::from(b)).sum::<u64>()
                ),
                _ => format!("conn={} nth={nth} path={}", id + 1, req.target),
            };
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len())
        };
        let out = reader.get_mut();
        if out.write_all(reply.as_bytes()).and_then(|()| out.flush()).is_err() {
            return;
        }
        if req.header("upgrade").is_some() {
            echo_tls(&mut reader);
            return;
        }
    }
}

fn echo_tls<S: Read + Write>(reader: &mut BufReader<S>) {
    let mut buf = [0u8; 4096];
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let out = reader.get_mut();
                if out.write_all(&buf[..n]).and_then(|()| out.flush()).is_err() {
                    return;
                }
            }
        }
    }
}

struct Setup {
    _dir: TempDir,
    ca: Ca,
    origin: SocketAddr,
    log: Log,
}

/// A CA, an origin with a leaf for `origin.test` signed by it (offering ALPN http/1.1).
fn setup() -> Setup {
    let dir = TempDir::new();
    let ca = Ca::new("backend-ca");
    let leaf = ca.leaf(&["origin.test"], "origin", false);
    let mut config = (*leaf.server_config()).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let (origin, log) = tls_http_origin(Arc::new(config));
    Setup {
        _dir: dir,
        ca,
        origin,
        log,
    }
}

fn http_proxy(origin: SocketAddr, server_extra: &str) -> Proxy {
    Proxy::start(&format!(
        "[global]\nworkers = 1\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\nretries = 0\n\
         [[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\ntls = true\n{server_extra}\n"
    ))
}

/// One request on a new client connection; the response as (status, body).
fn request(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(body).unwrap();
    let (status, _, body) = read_response(&mut BufReader::new(c)).expect("a response");
    (status, body)
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let (status, body) = request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
        b"",
    );
    (status, String::from_utf8(body).unwrap())
}

fn verified(s: &Setup) -> Proxy {
    let ca_path = s.ca.write(&s._dir, "ca.pem");
    http_proxy(
        s.origin,
        &format!("ca_file = \"{}\"\nsni = \"origin.test\"", ca_path.display()),
    )
}

#[test]
fn requests_go_inside_tls_and_the_connection_is_reused() {
    let s = setup();
    let proxy = verified(&s);
    assert_eq!(get(proxy.addr, "/one"), (200, "conn=1 nth=1 path=/one".into()));
    // Another client connection: the pooled TLS connection carries it.
    assert_eq!(get(proxy.addr, "/two"), (200, "conn=1 nth=2 path=/two".into()));
    let seen = s.log.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one TLS connection to the origin");
    let conn = &seen[0];
    // A TLS handshake record carrying a ClientHello, before anything else.
    assert_eq!(
        conn.raw[0],
        0x16,
        "first byte: {:?}",
        &conn.raw[..conn.raw.len().min(16)]
    );
    assert_eq!(conn.raw[5], 0x01, "handshake type ClientHello");
    assert!(conn.before_handshake_done > 0);
    assert!(
        !conn.raw.windows(4).any(|w| w == b"GET ") && !conn.raw.windows(8).any(|w| w == b"HTTP/1.1"),
        "plaintext HTTP on the wire"
    );
    assert_eq!(conn.sni.as_deref(), Some("origin.test"));
    assert_eq!(conn.alpn.as_deref(), Some(&b"http/1.1"[..]), "ALPN http/1.1 offered");
    assert_eq!(conn.requests.len(), 2);
    assert_eq!(conn.requests[0].target, "/one");
    let stats = proxy.running().stats();
    assert_eq!(stats.http_pool_reused, 1, "{stats:?}");
    assert_eq!(stats.tls_backend_errors, 0, "{stats:?}");
}

#[test]
fn request_body_larger_than_socket_buffers_goes_through_tls() {
    let s = setup();
    let proxy = verified(&s);
    let body = payload_block(7, 4 << 20);
    let sum: u64 = body.iter().map(|&b| u64::from(b)).sum();
    let head = format!(
        "POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let (status, reply) = request(proxy.addr, &head, &body);
    assert_eq!(status, 200);
    assert_eq!(
        String::from_utf8(reply).unwrap(),
        format!("len={} sum={sum}", body.len())
    );
    // Then a GET reuses that connection: the body left nothing behind on it.
    assert_eq!(get(proxy.addr, "/after"), (200, "conn=1 nth=2 path=/after".into()));
}

#[test]
fn upgrade_tunnels_through_tls() {
    let s = setup();
    let proxy = verified(&s);
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n")
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert!(head.len() < 4096, "no end of head: {head:?}");
        c.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    c.write_all(b"ping through tls").unwrap();
    let mut echoed = [0u8; 16];
    c.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"ping through tls");
}

#[test]
fn wrong_ca_is_a_502_and_verify_false_works() {
    let s = setup();
    let dir = TempDir::new();
    let other = Ca::new("other-ca").write(&dir, "other.pem");
    let proxy = http_proxy(
        s.origin,
        &format!("ca_file = \"{}\"\nsni = \"origin.test\"", other.display()),
    );
    let (status, _) = get(proxy.addr, "/");
    assert_eq!(status, 502);
    let stats = proxy.running().stats();
    assert_eq!(stats.tls_backend_errors, 1, "{stats:?}");
    assert!(s.log.lock().unwrap().iter().all(|c| c.requests.is_empty()));

    let proxy = http_proxy(s.origin, "verify = false\nsni = \"origin.test\"");
    assert_eq!(get(proxy.addr, "/v").0, 200);
    assert_eq!(proxy.running().stats().tls_backend_errors, 0);
}

/// Reads one TLS record's worth (header + length, bounded), then closes.
fn first_record(mut s: TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let want = match got.get(3..5) {
            Some(len) => 5 + usize::from(u16::from_be_bytes([len[0], len[1]])),
            None => 5,
        };
        if got.len() >= want.min(1 << 16) {
            return got;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[test]
fn a_plain_listener_sees_a_tls_record_never_a_request() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        if let Ok((s, _)) = listener.accept() {
            let _ = tx.send(first_record(s));
        }
    });
    let proxy = http_proxy(addr, "verify = false\nsni = \"raw.test\"");
    let (status, _) = get(proxy.addr, "/secret");
    assert_eq!(status, 502);
    let got = rx.recv_timeout(Duration::from_secs(10)).expect("the proxy connected");
    assert!(
        !got.starts_with(b"GET "),
        "plaintext request: {:?}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(got[0], 0x16, "a TLS handshake record");
    assert_eq!(got[5], 0x01, "a ClientHello");
    assert!(got.windows(8).any(|w| w == b"raw.test"), "SNI in the ClientHello");
    assert!(
        got.windows(8).any(|w| w == b"http/1.1"),
        "ALPN http/1.1 in the ClientHello"
    );
    assert!(!got.windows(7).any(|w| w == b"/secret"));
    assert_eq!(proxy.running().stats().tls_backend_errors, 1);
}
