//! The PROXY protocol: headers in (`accept_proxy`, `trusted_proxies`, `timeouts.proxy_header`)
//! in TCP mode, HTTP/1, h2c, TLS termination and SNI passthrough, refused when untrusted,
//! missing, truncated, oversized, malformed or slow; headers out (`send_proxy`,
//! `check_send_proxy`) read by the test's origins with a parser of their own; and a
//! `send_proxy` server's HTTP connection never reused for another client.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod proxy_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::http::*;
use common::tls::*;
use common::*;
use proxy_support::*;
use tollgate::proxyproto::{Command, Tlvs, write_v1, write_v2};

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn v1(src: &str, dst: &str) -> Vec<u8> {
    let mut out = Vec::new();
    write_v1(&mut out, Some((addr(src), addr(dst))));
    out
}

fn v2(src: &str, dst: &str) -> Vec<u8> {
    let mut out = Vec::new();
    write_v2(&mut out, Command::Proxy, Some((addr(src), addr(dst))), &Tlvs::default());
    out
}

fn frontend(mode: &str, extra: &str) -> String {
    format!(
        "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"{mode}\"\ndefault_backend = \"be\"\n{extra}\n"
    )
}

fn backend(mode: &str, server: SocketAddr, extra: &str) -> String {
    format!(
        "[[backend]]\nname = \"be\"\nmode = \"{mode}\"\n[[backend.server]]\nname = \"s\"\naddress = \"{server}\"\n{extra}\n"
    )
}

const TRUST_LOOPBACK: &str = "trusted_proxies = [\"10.0.0.0/8\", \"127.0.0.1/32\", \"::1/128\"]";

fn connect(proxy: &Proxy) -> TcpStream {
    let s = TcpStream::connect(proxy.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// The proxy closed `s` without a byte of answer (EOF or reset), and did so within `limit`.
fn closed_unanswered(s: &mut TcpStream, limit: Duration) -> Duration {
    let start = Instant::now();
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("answered: {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("not closed within {limit:?}: {e}"),
    }
    start.elapsed()
}

/// Polls the proxy's counters until `done` holds (bounded).
fn wait_stats(proxy: &Proxy, done: impl Fn(&tollgate::stats::Snapshot) -> bool) -> tollgate::stats::Snapshot {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = proxy.running().stats();
        if done(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "counters never got there: {s:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn tcp_v1_in_and_v2_out_carry_the_client_and_the_bytes_after_the_header() {
    let origin = header_origin(say_source_then_echo);
    let proxy = Proxy::start(&format!(
        "{}{}",
        frontend("tcp", &format!("accept_proxy = \"v1\"\n{TRUST_LOOPBACK}")),
        backend("tcp", origin.addr, "send_proxy = \"v2\"")
    ));
    let mut c = connect(&proxy);
    // The header and the first payload bytes in one segment: nothing past the header is lost.
    let mut first = v1("192.0.2.7:4711", "198.51.100.1:443");
    first.extend_from_slice(b"hello");
    c.write_all(&first).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "seen 192.0.2.7:4711\n");
    let mut echoed = [0u8; 5];
    r.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"hello");
    c.shutdown(Shutdown::Write).unwrap();
    let seen = origin.seen.lock().unwrap()[0].clone();
    assert_eq!((seen.version, seen.dst), (2, Some(addr("198.51.100.1:443"))));
    let stats = proxy.running().stats();
    assert_eq!((stats.proxy_header_accepted, stats.proxy_headers_sent), (1, 1));
}

#[test]
fn tcp_access_log_names_the_proxied_client() {
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let origin = origin(echo);
    let proxy = Proxy::start(&format!(
        "[log]\naccess = \"{}\"\nformat = \"json\"\n{}{}",
        log.display(),
        frontend("tcp", &format!("accept_proxy = \"any\"\n{TRUST_LOOPBACK}")),
        backend("tcp", origin.addr, "")
    ));
    let mut c = connect(&proxy);
    let mut first = v2("[2001:db8::9]:5000", "[2001:db8::1]:80");
    first.extend_from_slice(b"ping");
    c.write_all(&first).unwrap();
    let mut back = [0u8; 4];
    c.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"ping");
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if !text.is_empty() {
            break text;
        }
        assert!(Instant::now() < deadline, "no access log line");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(text.contains("\"client\":\"[2001:db8::9]:5000\""), "{text}");
}

#[test]
fn http_v2_in_sets_x_forwarded_for_even_when_the_header_trickles_in() {
    let origin = http_origin(|_| ok("hi"));
    let proxy = Proxy::start(&format!(
        "{}{}",
        frontend("http", &format!("accept_proxy = \"v2\"\n{TRUST_LOOPBACK}")),
        backend("http", origin.addr, "")
    ));
    let mut c = connect(&proxy);
    let header = v2("[2001:db8::5]:1234", "[2001:db8::1]:80");
    // In three pieces, each after a pause: the proxy waits for the rest, never spins.
    for piece in [&header[..5], &header[5..20], &header[20..]] {
        c.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(30));
    }
    c.write_all(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let resp = read_response(&mut r).unwrap();
    assert_eq!(resp.0, 200);
    // Keep-alive: the second request is the same client.
    c.write_all(b"GET /b HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut r).unwrap().0, 200);
    let reqs = origin.requests();
    assert_eq!(reqs[0].header("x-forwarded-for"), Some("2001:db8::5"));
    assert_eq!(reqs[1].header("x-forwarded-for"), Some("6.6.6.6, 2001:db8::5"));
    assert_eq!(proxy.running().stats().proxy_header_accepted, 1);
}

#[test]
fn http_v2_local_keeps_the_connection_address() {
    let origin = http_origin(|_| ok("hi"));
    let proxy = Proxy::start(&format!(
        "{}{}",
        frontend("http", &format!("accept_proxy = \"any\"\n{TRUST_LOOPBACK}")),
        backend("http", origin.addr, "")
    ));
    let mut c = connect(&proxy);
    let mut local = Vec::new();
    write_v2(&mut local, Command::Local, None, &Tlvs::default());
    local.extend_from_slice(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    c.write_all(&local).unwrap();
    let resp = read_response(&mut BufReader::new(c)).unwrap();
    assert_eq!(resp.0, 200);
    assert_eq!(origin.requests()[0].header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(proxy.running().stats().proxy_header_local, 1);
}

#[test]
fn h2c_after_a_v1_header() {
    let origin = http_origin(|_| ok("hi"));
    let proxy = Proxy::start(&format!(
        "{}{}",
        frontend("http", &format!("h2c = true\naccept_proxy = \"v1\"\n{TRUST_LOOPBACK}")),
        backend("http", origin.addr, "")
    ));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = proxy.addr;
    rt.block_on(async move {
        use tokio::io::AsyncWriteExt;
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(&v1("203.0.113.8:999", "127.0.0.1:80")).await.unwrap();
        let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(conn);
        let req = ::http::Request::get("http://t/h2").body(()).unwrap();
        let (resp, _) = client.send_request(req, true).unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(10), resp)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(resp.status(), 200);
    });
    assert_eq!(origin.requests()[0].header("x-forwarded-for"), Some("203.0.113.8"));
}

struct Tls {
    ca: Ca,
    dir: TempDir,
    leaf: (std::path::PathBuf, std::path::PathBuf),
}

fn tls_setup() -> Tls {
    let dir = TempDir::new();
    let ca = Ca::new("pp-ca");
    let leaf = ca.leaf(&["a.example"], "a", false).write(&dir, "a");
    Tls { ca, dir, leaf }
}

/// Connects, writes `header`, then speaks TLS (SNI `a.example`): sends `request`,
/// half-closes and reads the reply to EOF.
fn tls_after_header(addr: SocketAddr, ca: &Ca, header: &[u8], request: &[u8]) -> Vec<u8> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = client_config(ca);
    rt.block_on(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(header).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("a.example").unwrap();
        let connector = tokio_rustls::TlsConnector::from(config);
        let mut tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
            .await
            .unwrap()
            .unwrap();
        tls.write_all(request).await.unwrap();
        tls.shutdown().await.unwrap();
        let mut reply = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut reply)).await;
        reply
    })
}

#[test]
fn tls_termination_tcp_mode_v2_in_and_v2_out_with_authority_and_ssl_tlvs() {
    let t = tls_setup();
    let origin = header_origin(say_source_then_echo);
    let proxy = Proxy::start(&format!(
        "{}[frontend.tls]\n{}\n{}",
        frontend("tcp", &format!("accept_proxy = \"v2\"\n{TRUST_LOOPBACK}")),
        cert_entry(&t.leaf, true),
        backend("tcp", origin.addr, "send_proxy = \"v2\"")
    ));
    let reply = tls_after_header(
        proxy.addr,
        &t.ca,
        &v2("198.51.100.77:6000", "192.0.2.1:443"),
        b"over tls",
    );
    assert_eq!(String::from_utf8_lossy(&reply), "seen 198.51.100.77:6000\nover tls");
    let seen = origin.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.dst, Some(addr("192.0.2.1:443")));
    assert_eq!(seen.tlv(0x02), Some(&b"a.example"[..]), "authority: {seen:?}");
    let ssl = seen.tlv(0x20).expect("SSL TLV");
    assert_eq!(ssl[0] & 0x01, 0x01, "PP2_CLIENT_SSL");
    assert_eq!(seen.tlv(0x21), Some(&b"TLSv1.3"[..]), "SSL version: {seen:?}");
    drop(t.dir);
}

#[test]
fn tls_termination_http_mode_after_curl_haproxy_protocol() {
    let t = tls_setup();
    let origin = http_origin(|_| ok("hi"));
    let proxy = Proxy::start(&format!(
        "{}[frontend.tls]\nalpn = [\"http/1.1\"]\n{}\n{}",
        frontend("http", &format!("accept_proxy = \"v1\"\n{TRUST_LOOPBACK}")),
        cert_entry(&t.leaf, true),
        backend("http", origin.addr, "")
    ));
    let ca_path = t.ca.write(&t.dir, "ca.pem");
    let port = proxy.addr.port();
    // curl's own v1 header names its real connection (127.0.0.1 and its port).
    let out = std::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "--haproxy-protocol",
            "--cacert",
            &path_str(&ca_path),
        ])
        .args(["--resolve", &format!("a.example:{port}:127.0.0.1")])
        .arg(format!("https://a.example:{port}/tls"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hi",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(origin.requests()[0].header("x-forwarded-for"), Some("127.0.0.1"));
    // And a header naming someone else, then TLS: that one is the client.
    let reply = tls_after_header(
        proxy.addr,
        &t.ca,
        &v1("192.0.2.44:1", "192.0.2.1:443"),
        b"GET /tls2 HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
    );
    assert!(String::from_utf8_lossy(&reply).starts_with("HTTP/1.1 200"));
    assert_eq!(origin.requests()[1].header("x-forwarded-for"), Some("192.0.2.44"));
    assert_eq!(proxy.running().stats().proxy_header_accepted, 2);
}

#[test]
fn sni_passthrough_after_a_v1_header() {
    let t = tls_setup();
    let leaf = t.ca.leaf(&["a.example"], "origin-a", false);
    let origin = tls_origin(leaf.server_config(), |req, sni| {
        format!("{} bytes for {}", req.len(), sni.unwrap_or_default()).into_bytes()
    });
    let proxy = Proxy::start(&format!(
        "{}[[frontend.route]]\nsni = \"a.example\"\nbackend = \"be\"\n{}",
        frontend(
            "tcp",
            &format!("accept_proxy = \"v1\"\nreject_unknown_sni = true\n{TRUST_LOOPBACK}")
        ),
        backend("tcp", origin, "")
    ));
    let reply = tls_after_header(proxy.addr, &t.ca, &v1("192.0.2.3:3", "192.0.2.1:443"), b"12345");
    assert_eq!(String::from_utf8_lossy(&reply), "5 bytes for a.example");
    let stats = proxy.running().stats();
    assert_eq!((stats.proxy_header_accepted, stats.sni_rejected), (1, 0));
}

#[test]
fn an_untrusted_source_is_closed_unread() {
    let origin = http_origin(|_| ok("hi"));
    let proxy = Proxy::start(&format!(
        "{}{}",
        frontend(
            "http",
            "accept_proxy = \"any\"\ntrusted_proxies = [\"10.0.0.0/8\", \"::1/128\"]"
        ),
        backend("http", origin.addr, "")
    ));
    let mut c = connect(&proxy);
    let mut first = v1("192.0.2.7:4711", "198.51.100.1:80");
    first.extend_from_slice(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    c.write_all(&first).unwrap();
    closed_unanswered(&mut c, Duration::from_secs(5));
    let stats = wait_stats(&proxy, |s| s.proxy_header_untrusted == 1);
    assert_eq!(stats.proxy_header_accepted, 0);
    assert_eq!(origin.conns.load(Ordering::SeqCst), 0);
}

#[test]
fn missing_truncated_oversized_and_malformed_headers_are_closed_and_counted() {
    let origin = http_origin(|_| ok("hi"));
    let proxy = Proxy::start(&format!(
        "{}{}",
        frontend("http", &format!("accept_proxy = \"v1\"\n{TRUST_LOOPBACK}")),
        backend("http", origin.addr, "")
    ));
    let send = |bytes: &[u8], half_close: bool| {
        let mut c = connect(&proxy);
        c.write_all(bytes).unwrap();
        if half_close {
            c.shutdown(Shutdown::Write).unwrap();
        }
        closed_unanswered(&mut c, Duration::from_secs(5));
    };
    // No header: a request straight away, and a v2 header where v1 is expected.
    send(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n", false);
    send(&v2("192.0.2.1:1", "192.0.2.2:2"), false);
    wait_stats(&proxy, |s| s.proxy_header_missing == 2);
    // Truncated: the client stops (and closes) mid-line.
    send(b"PROXY TCP4 192.0.2.1 ", true);
    wait_stats(&proxy, |s| s.proxy_header_closed == 1);
    // Oversized: 200 bytes with no end of line.
    let mut long = b"PROXY TCP4 ".to_vec();
    long.resize(200, b'1');
    send(&long, false);
    // Malformed: a port out of range, a v4 address in a TCP6 line.
    send(
        b"PROXY TCP4 192.0.2.1 192.0.2.2 99999 80\r\nGET / HTTP/1.1\r\n\r\n",
        false,
    );
    send(b"PROXY TCP6 192.0.2.1 ::1 1 80\r\n", false);
    let stats = wait_stats(&proxy, |s| s.proxy_header_malformed == 3);
    assert_eq!(stats.proxy_header_accepted, 0);
    assert_eq!(origin.conns.load(Ordering::SeqCst), 0);
}

#[test]
fn an_oversized_v2_length_is_refused_from_the_fixed_part() {
    let proxy = Proxy::start(&format!(
        "{}{}",
        frontend("tcp", &format!("accept_proxy = \"v2\"\n{TRUST_LOOPBACK}")),
        backend("tcp", addr("127.0.0.1:9"), "")
    ));
    let mut header = v2("192.0.2.1:1", "192.0.2.2:2");
    header[14..16].copy_from_slice(&0xfff0u16.to_be_bytes());
    let mut c = connect(&proxy);
    c.write_all(&header[..16]).unwrap();
    closed_unanswered(&mut c, Duration::from_secs(5));
    wait_stats(&proxy, |s| s.proxy_header_malformed == 1);
}

#[test]
fn a_slow_header_is_closed_at_the_timeout() {
    let origin = http_origin(|_| ok("hi"));
    let proxy = Proxy::start(&format!(
        "[timeouts]\nproxy_header = \"300ms\"\n{}{}",
        frontend("http", &format!("accept_proxy = \"any\"\n{TRUST_LOOPBACK}")),
        backend("http", origin.addr, "")
    ));
    let mut c = connect(&proxy);
    c.write_all(b"PROXY TCP4 192.0.2.1").unwrap();
    let took = closed_unanswered(&mut c, Duration::from_secs(5));
    assert!(took >= Duration::from_millis(250), "closed after {took:?}");
    assert!(took < Duration::from_secs(3), "closed after {took:?}");
    wait_stats(&proxy, |s| s.proxy_header_timeout == 1);
}

#[test]
fn checks_send_v2_with_their_own_addresses() {
    let origin = header_origin(|s, _| {
        let mut buf = [0u8; 1];
        let _ = s.read(&mut buf);
    });
    let proxy = Proxy::start(&format!(
        "{}{}[backend.health]\ntype = \"tcp\"\ninterval = \"100ms\"\n",
        frontend("tcp", ""),
        backend("tcp", origin.addr, "send_proxy = \"v2\"\ncheck_send_proxy = true")
    ));
    let deadline = Instant::now() + Duration::from_secs(10);
    while origin.seen.lock().unwrap().len() < 2 {
        assert!(Instant::now() < deadline, "no checks arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
    for seen in origin.seen.lock().unwrap().iter() {
        assert_eq!(seen.version, 2);
        assert_eq!(seen.src, seen.peer, "a check names its own connection");
        assert_eq!(seen.dst, Some(origin.addr));
    }
    drop(proxy);
}

#[test]
fn checks_without_check_send_proxy_send_none() {
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut head = vec![0u8; 5];
            if s.read_exact(&mut head).is_ok() {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                let _ = tx.send(head);
            }
        }
    });
    let _proxy = Proxy::start(&format!(
        "{}{}[backend.health]\ntype = \"http\"\npath = \"/h\"\ninterval = \"100ms\"\n",
        frontend("http", ""),
        backend("http", server, "send_proxy = \"v1\"")
    ));
    let first = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(first, b"GET /");
}

#[test]
fn a_send_proxy_server_connection_is_reused_by_its_client_only() {
    let origin = header_origin(http_naming_source);
    let proxy = Proxy::start(&format!(
        "[global]\nworkers = 1\n{}{}",
        frontend("http", &format!("accept_proxy = \"v1\"\n{TRUST_LOOPBACK}")),
        backend("http", origin.addr, "send_proxy = \"v1\"")
    ));
    let client = |src: &str| {
        let mut c = connect(&proxy);
        c.write_all(&v1(src, "192.0.2.1:80")).unwrap();
        let r = BufReader::new(c.try_clone().unwrap());
        (c, r)
    };
    let get = |c: &mut TcpStream, r: &mut BufReader<TcpStream>| {
        c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let resp = read_response(r).unwrap();
        assert_eq!(resp.0, 200);
        String::from_utf8(resp.2).unwrap()
    };
    let (mut a, mut ra) = client("192.0.2.10:1000");
    assert_eq!(get(&mut a, &mut ra), "192.0.2.10:1000");
    assert_eq!(get(&mut a, &mut ra), "192.0.2.10:1000");
    // The first client's connection sits idle in the pool now; the second must not get it.
    let (mut b, mut rb) = client("192.0.2.20:2000");
    assert_eq!(get(&mut b, &mut rb), "192.0.2.20:2000");
    assert_eq!(get(&mut a, &mut ra), "192.0.2.10:1000");
    assert_eq!(get(&mut b, &mut rb), "192.0.2.20:2000");
    assert_eq!(
        origin.conns.load(Ordering::SeqCst),
        2,
        "one server connection per client"
    );
    let stats = proxy.running().stats();
    assert_eq!(stats.http_pool_reused, 3, "each client reused its own connection");
    assert_eq!(stats.proxy_headers_sent, 2);
}

#[test]
fn config_refusals_name_the_key_and_position() {
    let refused = |text: &str| tollgate::config::parse(text, "pp.toml").unwrap_err().to_string();
    let be = backend("tcp", addr("127.0.0.1:9"), "");
    let e = refused(&format!("{}{be}", frontend("tcp", "accept_proxy = \"v1\"")));
    assert!(
        e.contains("pp.toml:6:16") && e.contains("frontend[0].accept_proxy") && e.contains("trusted_proxies"),
        "{e}"
    );
    let e = refused(&format!(
        "{}{be}",
        frontend("tcp", "trusted_proxies = [\"10.0.0.0/8\"]")
    ));
    assert!(e.contains("frontend[0].trusted_proxies"), "{e}");
    let e = refused(&format!(
        "{}{be}",
        frontend("tcp", "accept_proxy = \"any\"\ntrusted_proxies = [\"10.0.0.1/8\"]")
    ));
    assert!(
        e.contains("frontend[0].trusted_proxies[0]") && e.contains("past its /8"),
        "{e}"
    );
    let e = refused(&format!(
        "{}{be}",
        frontend("tcp", "accept_proxy = \"v3\"\ntrusted_proxies = []")
    ));
    assert!(e.contains("accept_proxy"), "{e}");
    let e = refused(&format!(
        "{}{}",
        frontend("http", ""),
        backend("http", addr("127.0.0.1:9"), "proto = \"h2\"\nsend_proxy = \"v2\"")
    ));
    assert!(e.contains("backend[0].server[0].send_proxy") && e.contains("h2"), "{e}");
    let e = refused(&format!(
        "{}{}",
        frontend("tcp", ""),
        backend("tcp", addr("127.0.0.1:9"), "check_send_proxy = true")
    ));
    assert!(
        e.contains("backend[0].server[0].check_send_proxy") && e.contains("[backend.health]"),
        "{e}"
    );
}

#[test]
fn v2_tlvs_received_are_kept_and_passed_on_when_tollgate_did_not_terminate_tls() {
    let origin = header_origin(say_source_then_echo);
    let proxy = Proxy::start(&format!(
        "{}{}",
        frontend("tcp", &format!("accept_proxy = \"v2\"\n{TRUST_LOOPBACK}")),
        backend("tcp", origin.addr, "send_proxy = \"v2\"")
    ));
    let tlvs = Tlvs {
        authority: Some("app.example".into()),
        unique_id: Some(b"req-42".to_vec()),
        ..Tlvs::default()
    };
    let mut header = Vec::new();
    write_v2(
        &mut header,
        Command::Proxy,
        Some((addr("192.0.2.50:5050"), addr("192.0.2.1:443"))),
        &tlvs,
    );
    let mut c = connect(&proxy);
    c.write_all(&header).unwrap();
    let mut line = String::new();
    BufReader::new(c.try_clone().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "seen 192.0.2.50:5050\n");
    let seen = origin.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.tlv(0x02), Some(&b"app.example"[..]), "{seen:?}");
    assert_eq!(seen.tlv(0x05), Some(&b"req-42"[..]), "{seen:?}");
}

#[test]
fn hashing_by_source_uses_the_proxied_address() {
    let named = |name: &'static str| {
        origin(move |s: &mut TcpStream| {
            let _ = s.write_all(name.as_bytes());
        })
    };
    let (a, b) = (named("a"), named("b"));
    let proxy = Proxy::start(&format!(
        "{}[[backend]]\nname = \"be\"\nbalance = \"hash\"\nhash_key = \"source\"\n\
         [[backend.server]]\nname = \"a\"\naddress = \"{}\"\n[[backend.server]]\nname = \"b\"\naddress = \"{}\"\n",
        frontend("tcp", &format!("accept_proxy = \"v1\"\n{TRUST_LOOPBACK}")),
        a.addr,
        b.addr
    ));
    let server_for = |src: &str| {
        let mut c = connect(&proxy);
        c.write_all(&v1(src, "192.0.2.1:80")).unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        got
    };
    let mut picks = Vec::new();
    for i in 1..=20 {
        let src = format!("198.51.100.{i}:1000");
        let first = server_for(&src);
        // The same client, another connection (another real port): the same server.
        assert_eq!(server_for(&format!("198.51.100.{i}:2000")), first, "{src}");
        picks.push(first);
    }
    // Every real connection comes from 127.0.0.1: only the proxied addresses spread them.
    assert!(
        picks.iter().any(|p| p == "a") && picks.iter().any(|p| p == "b"),
        "{picks:?}"
    );
}

#[test]
fn a_source_route_matches_the_proxied_address() {
    let inside = http_origin(|_| ok("inside"));
    let outside = http_origin(|_| ok("outside"));
    let proxy = Proxy::start(&format!(
        "{}[[frontend.route]]\nsource = [\"192.0.2.0/24\"]\nbackend = \"in\"\n\
         [[backend]]\nname = \"in\"\nmode = \"http\"\n[[backend.server]]\nname = \"i\"\naddress = \"{}\"\n{}",
        frontend("http", &format!("accept_proxy = \"v1\"\n{TRUST_LOOPBACK}")),
        inside.addr,
        backend("http", outside.addr, "")
    ));
    let body_for = |src: &str| {
        let mut c = connect(&proxy);
        c.write_all(&v1(src, "192.0.2.1:80")).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        String::from_utf8(read_response(&mut BufReader::new(c)).unwrap().2).unwrap()
    };
    assert_eq!(body_for("192.0.2.77:1"), "inside");
    assert_eq!(body_for("203.0.113.77:1"), "outside");
}

#[test]
fn h2c_streams_send_their_connection_client_to_a_send_proxy_server() {
    let origin = header_origin(http_naming_source);
    let proxy = Proxy::start(&format!(
        "[global]\nworkers = 1\n{}{}",
        frontend("http", &format!("h2c = true\naccept_proxy = \"v2\"\n{TRUST_LOOPBACK}")),
        backend("http", origin.addr, "send_proxy = \"v1\"")
    ));
    let addr = proxy.addr;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bodies = rt.block_on(async move {
        use tokio::io::AsyncWriteExt;
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(&v2("[2001:db8::77]:7000", "[2001:db8::1]:80"))
            .await
            .unwrap();
        let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(conn);
        let mut bodies = Vec::new();
        // One after the other: the second stream finds the first one's server connection idle.
        for path in ["/1", "/2"] {
            let req = ::http::Request::get(format!("http://t{path}")).body(()).unwrap();
            let (resp, _) = client.send_request(req, true).unwrap();
            let resp = tokio::time::timeout(Duration::from_secs(10), resp)
                .await
                .unwrap()
                .unwrap();
            let mut body = resp.into_body();
            let mut got = Vec::new();
            while let Some(chunk) = body.data().await {
                got.extend_from_slice(&chunk.unwrap());
            }
            bodies.push(String::from_utf8(got).unwrap());
        }
        bodies
    });
    assert_eq!(bodies, ["[2001:db8::77]:7000", "[2001:db8::77]:7000"]);
    assert_eq!(
        origin.conns.load(Ordering::SeqCst),
        1,
        "the connection's streams share its server connection"
    );
}

#[test]
fn allow_and_deny_lists_judge_the_proxied_address_not_the_balancer() {
    let origin = http_origin(|_| ok("hi"));
    // The balancer (127.0.0.1) is in neither list: only the addresses its headers carry count.
    let proxy = Proxy::start(&format!(
        "{}{}",
        frontend(
            "http",
            &format!(
                "accept_proxy = \"v1\"\n{TRUST_LOOPBACK}\nallow = [\"203.0.113.0/24\"]\ndeny = [\"203.0.113.66\"]"
            )
        ),
        backend("http", origin.addr, "")
    ));
    let status_for = |src: &str| {
        let mut c = connect(&proxy);
        c.write_all(&v1(src, "192.0.2.1:80")).unwrap();
        let _ = c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        read_response(&mut BufReader::new(c)).map(|r| r.0)
    };
    assert_eq!(status_for("203.0.113.5:1"), Some(200));
    assert_eq!(status_for("203.0.113.66:1"), None, "denied");
    assert_eq!(status_for("198.51.100.5:1"), None, "not allowed");
    let stats = wait_stats(&proxy, |s| s.conn_denied == 2);
    assert_eq!(stats.proxy_header_accepted, 3);
    assert_eq!(origin.requests().len(), 1);
    // A refused connection never became a session, as on a frontend without accept_proxy.
    assert_eq!(stats.sessions_total, 1, "refused connections counted as sessions");
    let fe = proxy.running().show_stat().frontends;
    assert_eq!(fe[0].sessions_total, 1, "refused connections in STOT: {:?}", fe[0]);
}

#[test]
fn a_tcp_source_route_decides_on_the_proxied_address() {
    let named = |name: &'static str| {
        origin(move |s: &mut TcpStream| {
            let _ = s.write_all(name.as_bytes());
        })
    };
    let (inside, outside) = (named("inside"), named("outside"));
    let proxy = Proxy::start(&format!(
        "{}[[frontend.route]]\nsource = [\"192.0.2.0/24\"]\nbackend = \"in\"\n\
         [[frontend.route]]\nsource = [\"198.51.100.0/24\"]\ndeny = true\n\
         [[backend]]\nname = \"in\"\n[[backend.server]]\nname = \"i\"\naddress = \"{}\"\n{}",
        frontend("tcp", &format!("accept_proxy = \"v2\"\n{TRUST_LOOPBACK}")),
        inside.addr,
        backend("tcp", outside.addr, "")
    ));
    let reply_for = |src: &str| {
        let mut c = connect(&proxy);
        c.write_all(&v2(src, "192.0.2.1:80")).unwrap();
        let mut got = String::new();
        let _ = c.read_to_string(&mut got);
        got
    };
    assert_eq!(reply_for("192.0.2.9:9"), "inside");
    assert_eq!(reply_for("203.0.113.9:9"), "outside");
    assert_eq!(reply_for("198.51.100.9:9"), "", "a deny route closes");
}
