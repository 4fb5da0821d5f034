//! TLS termination waits for a whole ClientHello before it takes a `max_handshakes` slot:
//! idle connections and ones that send half a record header starve no one's handshake,
//! one source is bounded before its handshake (`global.max_handshakes_per_source`, refusals
//! counted), and a plain frontend in the same process is never touched.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::Proxy;
use common::http::{HttpOrigin, http_origin, ok};
use common::tls::{Ca, TempDir, cert_entry, client_config};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n";

struct Setup {
    _dir: TempDir,
    _origin: HttpOrigin,
    ca: Ca,
    proxy: Proxy,
    /// TLS, TCP mode.
    tls_tcp: SocketAddr,
    /// TLS, HTTP mode.
    https: SocketAddr,
    /// No TLS, TCP mode.
    plain: SocketAddr,
}

/// Three frontends in one process onto one HTTP origin, `max_handshakes = 2` by default.
fn setup(extra_global: &str, timeouts: &str) -> Setup {
    let origin = http_origin(|_| ok("served"));
    let dir = TempDir::new();
    let ca = Ca::new("hello-ca");
    let leaf = ca.leaf(&["a.example"], "a", false).write(&dir, "a");
    let cert = cert_entry(&leaf, true);
    // `max_handshakes = 2` unless the test sets its own.
    let slots = if extra_global.lines().any(|l| l.starts_with("max_handshakes =")) {
        ""
    } else {
        "max_handshakes = 2\n"
    };
    let config = format!(
        "[global]\nworkers = 2\n{slots}{extra_global}\n[timeouts]\ntls_handshake = \"2s\"\n{timeouts}\n\
         [[frontend]]\nname = \"tls_tcp\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"tcp\"\n[frontend.tls]\n{cert}\n\
         [[frontend]]\nname = \"https\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"http\"\n\
         [frontend.tls]\nalpn = [\"http/1.1\"]\n{cert}\n\
         [[frontend]]\nname = \"plain\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"tcp\"\n\
         [[backend]]\nname = \"tcp\"\n[[backend.server]]\nname = \"o\"\naddress = \"{o}\"\n\
         [[backend]]\nname = \"http\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{o}\"\n",
        o = origin.addr
    );
    let proxy = Proxy::start(&config);
    let addr = |name: &str| proxy.running().local_addr(name).unwrap();
    let (tls_tcp, https, plain) = (addr("tls_tcp"), addr("https"), addr("plain"));
    Setup {
        _dir: dir,
        _origin: origin,
        ca,
        proxy,
        tls_tcp,
        https,
        plain,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A connection to `to` from the loopback address `from` (every 127/8 address is local).
async fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from.parse::<IpAddr>().unwrap(), 0))?;
    socket.connect(to).await
}

/// A real client from `from`: handshake (rustls), the request, the whole reply.
async fn tls_get(ca: &Ca, from: &str, to: SocketAddr) -> Result<String, String> {
    let tcp = connect_from(from, to).await.map_err(|e| format!("connect: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(client_config(ca));
    let name = ServerName::try_from("a.example").unwrap();
    let mut tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
        .await
        .map_err(|_| "handshake: no answer in 10s".to_string())?
        .map_err(|e| format!("handshake: {e}"))?;
    tls.write_all(REQUEST).await.map_err(|e| format!("write: {e}"))?;
    let mut reply = Vec::new();
    // A reply cut short by a close without close_notify still shows what was served.
    let read = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut reply)).await;
    let reply = String::from_utf8_lossy(&reply).into_owned();
    match read {
        Err(_) => Err(format!("reply: none in 10s ({reply:?})")),
        Ok(_) if reply.ends_with("served") => Ok(reply),
        Ok(r) => Err(format!("reply {reply:?} ({r:?})")),
    }
}

/// A plain client: the request, the whole reply.
async fn plain_get(to: SocketAddr) -> String {
    let mut tcp = connect_from("127.0.0.1", to).await.unwrap();
    tcp.write_all(REQUEST).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut reply))
        .await
        .expect("plain reply in 10s")
        .unwrap();
    String::from_utf8_lossy(&reply).into_owned()
}

/// A counter by name (`show info`'s list), so the test reads new counters by name.
fn counter(proxy: &Proxy, name: &str) -> u64 {
    let stats = proxy.running().stats();
    let fields = stats.fields();
    fields
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no counter {name} in {fields:?}"))
}

/// Waits (bounded) until `check` holds.
fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `count` connections from `from` to each of `to`, each having sent `first` (maybe nothing).
async fn hold(from: &str, to: &[SocketAddr], count: usize, first: &[u8]) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..count {
        for &addr in to {
            let mut c = connect_from(from, addr).await.unwrap();
            c.write_all(first).await.unwrap();
            held.push(c);
        }
    }
    held
}

#[test]
fn idle_and_half_header_connections_take_no_handshake_slot() {
    let s = setup("", "");
    let rt = runtime();
    // 40 silent connections and 40 that sent half a record header (content type and version
    // major), on both TLS frontends, from two other sources; 2 handshake slots in all.
    let fronts = [s.tls_tcp, s.https];
    let _idle = rt.block_on(hold("127.0.0.2", &fronts, 20, b""));
    let _half = rt.block_on(hold("127.0.0.3", &fronts, 20, &[0x16, 0x03]));
    wait_for("the 80 connections to be accepted", || {
        s.proxy.running().stats().sessions_active >= 80
    });
    // While they are held (well within timeouts.client_hello's default 5 s), real clients
    // complete their handshakes and are served, every time, on both TLS frontends.
    for round in 0..5 {
        for (name, addr) in [("tls_tcp", s.tls_tcp), ("https", s.https)] {
            let started = Instant::now();
            let reply = rt.block_on(tls_get(&s.ca, "127.0.0.1", addr));
            assert!(reply.is_ok(), "{name} round {round}: {reply:?}");
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{name} round {round}: took {:?}",
                started.elapsed()
            );
        }
        // And the plain frontend of the same process.
        assert!(rt.block_on(plain_get(s.plain)).ends_with("served"));
    }
    // The held connections are all still open, waiting for their ClientHello.
    wait_for("the served sessions to end", || {
        s.proxy.running().stats().sessions_active == 80
    });
    assert_eq!(counter(&s.proxy, "tls_hello_waiting"), 80);
    assert_eq!(counter(&s.proxy, "tls_handshakes_full"), 10);
    assert_eq!(counter(&s.proxy, "tls_fail_timeout"), 0);
}

#[test]
fn the_client_hello_wait_has_its_own_deadline() {
    let s = setup("", "client_hello = \"300ms\"");
    let rt = runtime();
    let mut held = rt.block_on(hold("127.0.0.2", &[s.tls_tcp], 2, &[0x16, 0x03, 0x01]));
    // Closed by the proxy after client_hello's 300 ms, long before tls_handshake's 2 s.
    let started = Instant::now();
    for c in &mut held {
        let mut b = [0u8; 16];
        let n = rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), c.read(&mut b)).await });
        assert!(matches!(n, Ok(Ok(0) | Err(_))), "{n:?}");
    }
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    s.proxy.wait_idle(Duration::from_secs(5));
    assert_eq!(counter(&s.proxy, "tls_fail_timeout"), 2);
    assert_eq!(counter(&s.proxy, "tls_hello_waiting"), 0);
}

/// The per-source bound is a share under pressure: while the process is not short (fewer
/// connections before their handshake than `max_handshakes`), one source past its bound is
/// served like any other (a load generator, a NAT).
#[test]
fn one_busy_source_is_served_while_nothing_is_short() {
    let s = setup(
        "max_handshakes_per_source = 2\nmax_handshakes = 50",
        "client_hello = \"30s\"",
    );
    let rt = runtime();
    let _held = rt.block_on(hold("127.0.0.6", &[s.tls_tcp, s.https], 2, b""));
    wait_for("4 connections waiting for their ClientHello", || {
        counter(&s.proxy, "tls_hello_waiting") == 4
    });
    for _ in 0..3 {
        assert!(rt.block_on(tls_get(&s.ca, "127.0.0.6", s.tls_tcp)).is_ok());
    }
    assert_eq!(counter(&s.proxy, "tls_source_refused"), 0);
}

#[test]
fn one_source_is_bounded_before_its_handshake() {
    let s = setup("max_handshakes_per_source = 5", "client_hello = \"30s\"");
    let rt = runtime();
    let mut held = rt.block_on(hold("127.0.0.4", &[s.tls_tcp, s.https], 2, b""));
    held.extend(rt.block_on(hold("127.0.0.4", &[s.tls_tcp], 1, &[0x16])));
    wait_for("5 connections waiting for their ClientHello", || {
        counter(&s.proxy, "tls_hello_waiting") == 5
    });
    // The 6th from that source is closed at once, and counted.
    let mut sixth = rt.block_on(connect_from("127.0.0.4", s.https)).unwrap();
    let mut b = [0u8; 16];
    let n = rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), sixth.read(&mut b)).await });
    assert!(matches!(n, Ok(Ok(0) | Err(_))), "{n:?}");
    assert_eq!(counter(&s.proxy, "tls_source_refused"), 1);
    // So is a real client from there...
    assert!(rt.block_on(tls_get(&s.ca, "127.0.0.4", s.tls_tcp)).is_err());
    assert_eq!(counter(&s.proxy, "tls_source_refused"), 2);
    // ...while other sources are served, and the plain frontend (no bound) from that one.
    assert!(rt.block_on(tls_get(&s.ca, "127.0.0.1", s.tls_tcp)).is_ok());
    assert!(rt.block_on(tls_get(&s.ca, "127.0.0.5", s.https)).is_ok());
    let mut plain = rt.block_on(connect_from("127.0.0.4", s.plain)).unwrap();
    rt.block_on(plain.write_all(REQUEST)).unwrap();
    let mut reply = Vec::new();
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut reply)).await })
        .unwrap()
        .unwrap();
    assert!(reply.ends_with(b"served"));
    // One of the five hangs up: its place is the source's again.
    drop(held.pop());
    wait_for("the closed connection's place back", || {
        counter(&s.proxy, "tls_hello_waiting") == 4
    });
    assert!(rt.block_on(tls_get(&s.ca, "127.0.0.4", s.tls_tcp)).is_ok());
    assert_eq!(counter(&s.proxy, "tls_source_refused"), 2);
    assert_eq!(counter(&s.proxy, "tls_handshakes_full"), 3);
    // /metrics shows the refusals and the wait.
    let report = tollgate::command::MetricsReport {
        generations: vec![tollgate::command::GenerationMetrics {
            generation: 1,
            metrics: s.proxy.running().metrics(),
        }],
        generation_label: true,
        ..Default::default()
    };
    let text = tollgate::admin::prometheus::render(&report);
    for line in [
        "tollgate_tls_source_refused_total{generation=\"1\"} 2",
        "tollgate_tls_hello_waiting{generation=\"1\"} 4",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
    }
}
