//! Access rules (issue 15, item 3) over real loopback sockets: a frontend's `allow` / `deny`
//! lists close connections at accept with no byte sent, on TCP and HTTP frontends, over IPv4
//! and IPv6; route `source` + `deny` answers 403 in HTTP mode and closes in TCP mode; TCP
//! `sni` + `source` routes; the `conn_denied` counters (`Running::stats()`, the metrics
//! snapshot and its Prometheus text, `ctl show stat` / `show info`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::http::{http_origin, ok, raw_exchange};
use common::tls::{Ca, client_config};
use common::{Origin, Proxy, echo, origin};

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

/// A TCP frontend `fe` on `bind` with `extra` frontend keys and routes, default backend
/// `a` (server `a_addr`) and a second backend `b`.
fn tcp(bind: &str, extra: &str, a: SocketAddr, b: SocketAddr) -> String {
    format!(
        "[[frontend]]\nname = \"fe\"\nbind = [\"{bind}\"]\ndefault_backend = \"a\"\n{extra}\n\
         [[backend]]\nname = \"a\"\n[[backend.server]]\nname = \"a\"\naddress = \"{a}\"\n\
         [[backend]]\nname = \"b\"\n[[backend.server]]\nname = \"b\"\naddress = \"{b}\"\n"
    )
}

fn http(bind: &str, extra: &str, origin: SocketAddr) -> String {
    format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"{bind}\"]\nmode = \"http\"\ndefault_backend = \"app\"\n{extra}\n\
         [[backend]]\nname = \"app\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n"
    )
}

/// Echo round trip through the proxy.
fn echoes(addr: SocketAddr) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"ping").unwrap();
    let mut back = [0u8; 4];
    c.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"ping");
}

/// The proxy closes the connection without sending a byte (EOF or reset), even after the
/// client wrote something.
fn closed_without_a_byte(addr: SocketAddr, first: &[u8]) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = c.write_all(first);
    let mut buf = [0u8; 64];
    match c.read(&mut buf) {
        Ok(0) => {}
        Ok(n) => panic!("got {n} bytes: {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ),
            "expected a close, got {e}"
        ),
    }
}

fn has_v6_loopback() -> bool {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipped: no IPv6 loopback");
        return false;
    }
    true
}

fn total(o: &Origin) -> usize {
    o.total.load(Ordering::SeqCst)
}

#[test]
fn tcp_frontend_deny_list_closes_at_accept_and_counts() {
    let (a, b) = (origin(echo), origin(echo));
    let proxy = Proxy::start(&tcp(
        "127.0.0.1:0",
        "deny = [\"10.0.0.0/8\", \"127.0.0.1\"]",
        a.addr,
        b.addr,
    ));
    for _ in 0..3 {
        closed_without_a_byte(proxy.addr, b"ping");
    }
    assert_eq!(total(&a), 0, "no server connection for a denied client");
    let s = proxy.running().stats();
    assert_eq!((s.conn_denied, s.sessions_total), (3, 0), "{s:?}");
    let m = proxy.running().metrics();
    assert_eq!(m.frontends[0].conn_denied, 3);
    let report = tollgate::command::MetricsReport {
        generations: vec![tollgate::command::GenerationMetrics {
            generation: 1,
            metrics: m,
        }],
        ..Default::default()
    };
    let text = tollgate::admin::prometheus::render(&report);
    assert!(
        text.lines()
            .any(|l| l.starts_with("tollgate_frontend_connections_denied_total{")
                && l.contains("frontend=\"fe\"")
                && l.ends_with(" 3")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("tollgate_conn_denied_total") && l.ends_with(" 3")),
        "{text}"
    );
}

#[test]
fn tcp_frontend_allow_list_admits_only_its_blocks_and_deny_wins() {
    let (a, b) = (origin(echo), origin(echo));
    let allowed = Proxy::start(&tcp(
        "127.0.0.1:0",
        "allow = [\"127.0.0.0/8\", \"::1\"]",
        a.addr,
        b.addr,
    ));
    echoes(allowed.addr);
    assert_eq!(allowed.running().stats().conn_denied, 0);

    let elsewhere = Proxy::start(&tcp("127.0.0.1:0", "allow = \"192.0.2.0/24\"", a.addr, b.addr));
    closed_without_a_byte(elsewhere.addr, b"ping");
    assert_eq!(elsewhere.running().stats().conn_denied, 1);

    let both = Proxy::start(&tcp(
        "127.0.0.1:0",
        "allow = \"127.0.0.0/8\"\ndeny = \"127.0.0.1/32\"",
        a.addr,
        b.addr,
    ));
    closed_without_a_byte(both.addr, b"ping");
    assert_eq!(both.running().stats().conn_denied, 1, "deny wins over allow");
    assert_eq!(total(&a), 1, "only the admitted connection reached a server");
}

#[test]
fn ipv6_lists_on_tcp_and_http_frontends() {
    if !has_v6_loopback() {
        return;
    }
    let (a, b) = (origin(echo), origin(echo));
    let denied = Proxy::start(&tcp("[::1]:0", "deny = \"::1/128\"", a.addr, b.addr));
    closed_without_a_byte(denied.addr, b"ping");
    let v4_only = Proxy::start(&tcp("[::1]:0", "allow = \"127.0.0.0/8\"", a.addr, b.addr));
    closed_without_a_byte(v4_only.addr, b"ping");
    let admitted = Proxy::start(&tcp(
        "[::1]:0",
        "allow = \"::/0\"\ndeny = \"2001:db8::/32\"",
        a.addr,
        b.addr,
    ));
    echoes(admitted.addr);
    assert_eq!(
        denied.running().stats().conn_denied + v4_only.running().stats().conn_denied,
        2
    );

    let web = http_origin(|_| ok("hello"));
    let http_denied = Proxy::start(&http("[::1]:0", "deny = [\"::1\"]", web.addr));
    assert_eq!(raw_exchange(http_denied.addr, GET), "", "closed before any response");
    let http_allowed = Proxy::start(&http("[::1]:0", "allow = [\"::1\"]", web.addr));
    assert!(raw_exchange(http_allowed.addr, GET).starts_with("HTTP/1.1 200"));
    assert_eq!(web.requests().len(), 1);
}

#[test]
fn http_frontend_lists_close_before_parsing() {
    let web = http_origin(|_| ok("hello"));
    let denied = Proxy::start(&http("127.0.0.1:0", "deny = \"127.0.0.0/8\"", web.addr));
    assert_eq!(raw_exchange(denied.addr, GET), "", "no 403, no byte: closed at accept");
    let s = denied.running().stats();
    assert_eq!((s.conn_denied, s.http_requests), (1, 0), "{s:?}");
    let allowed = Proxy::start(&http("127.0.0.1:0", "allow = \"127.0.0.1\"", web.addr));
    assert!(raw_exchange(allowed.addr, GET).starts_with("HTTP/1.1 200"));
    assert_eq!(web.requests().len(), 1);
}

#[test]
fn http_route_source_deny_answers_403_and_others_pass() {
    let web = http_origin(|_| ok("hello"));
    let routes = "[[frontend.route]]\nsource = [\"127.0.0.1\", \"::1\"]\npath_prefix = \"/admin\"\ndeny = true\n\
                  [[frontend.route]]\nsource = \"10.0.0.0/8\"\ndeny = 451\n";
    let proxy = Proxy::start(&http("127.0.0.1:0", routes, web.addr));
    let admin = raw_exchange(
        proxy.addr,
        b"GET /admin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(admin.starts_with("HTTP/1.1 403"), "{admin}");
    assert!(
        raw_exchange(proxy.addr, GET).starts_with("HTTP/1.1 200"),
        "another source block, another path"
    );
    assert_eq!(web.requests().len(), 1);
    if has_v6_loopback() {
        let v6 = Proxy::start(&http("[::1]:0", routes, web.addr));
        let admin = raw_exchange(v6.addr, b"GET /admin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        assert!(admin.starts_with("HTTP/1.1 403"), "{admin}");
    }
}

#[test]
fn tcp_route_source_deny_closes_and_source_routes_pick_backends() {
    let (a, b) = (origin(echo), origin(echo));
    let deny = "[[frontend.route]]\nsource = [\"127.0.0.1\", \"::1\"]\ndeny = true\n";
    let proxy = Proxy::start(&tcp("127.0.0.1:0", deny, a.addr, b.addr));
    closed_without_a_byte(proxy.addr, b"ping");
    let s = proxy.running().stats();
    assert_eq!(s.conn_denied, 1, "{s:?}");
    assert_eq!(proxy.running().metrics().frontends[0].conn_denied, 1);

    let to_b = "[[frontend.route]]\nsource = \"192.0.2.0/24\"\ndeny = true\n\
                [[frontend.route]]\nsource = \"127.0.0.0/8\"\nbackend = \"b\"\n";
    let proxy = Proxy::start(&tcp("127.0.0.1:0", to_b, a.addr, b.addr));
    echoes(proxy.addr);
    assert_eq!((total(&a), total(&b)), (0, 1));
    if has_v6_loopback() {
        let v6 = Proxy::start(&tcp("[::1]:0", deny, a.addr, b.addr));
        closed_without_a_byte(v6.addr, b"ping");
        assert_eq!(v6.running().stats().conn_denied, 1);
    }
}

/// The first flight of a rustls client for `sni`.
fn client_hello(sni: &str) -> Vec<u8> {
    let ca = Ca::new("access test ca");
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(client_config(&ca), name).unwrap();
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello).unwrap();
    }
    hello
}

/// Sends a ClientHello for `sni`; the echo origin behind sends it back.
fn hello_echoed(addr: SocketAddr, sni: &str) {
    let hello = client_hello(sni);
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(&hello).unwrap();
    let mut back = vec![0u8; hello.len()];
    c.read_exact(&mut back).unwrap();
    assert!(back == hello);
}

#[test]
fn tcp_sni_routes_with_source() {
    let (a, b) = (origin(echo), origin(echo));
    let routes = "[[frontend.route]]\nsni = \"in.example\"\nsource = \"127.0.0.0/8\"\nbackend = \"b\"\n\
                  [[frontend.route]]\nsni = \"out.example\"\nsource = \"192.0.2.0/24\"\nbackend = \"b\"\n\
                  [[frontend.route]]\nsni = \"shut.example\"\nsource = \"127.0.0.1\"\ndeny = true\n";
    let proxy = Proxy::start(&tcp("127.0.0.1:0", routes, a.addr, b.addr));
    hello_echoed(proxy.addr, "in.example");
    assert_eq!((total(&a), total(&b)), (0, 1), "sni and source both hold: b");
    hello_echoed(proxy.addr, "out.example");
    assert_eq!(
        (total(&a), total(&b)),
        (1, 1),
        "source does not hold: the default backend"
    );
    closed_without_a_byte(proxy.addr, &client_hello("shut.example"));
    assert_eq!(proxy.running().stats().conn_denied, 1);
    assert_eq!((total(&a), total(&b)), (1, 1));
}

#[test]
fn config_refusals_name_file_line_column_and_key() {
    let (a, b) = ("127.0.0.1:1".parse().unwrap(), "127.0.0.1:2".parse().unwrap());
    let cases = [
        (
            tcp("127.0.0.1:0", "allow = [\"10.0.0.0/33\"]", a, b),
            "test.toml:5:9",
            "frontend[0].allow",
        ),
        (
            tcp("127.0.0.1:0", "deny = \"nope\"", a, b),
            "test.toml:5:8",
            "frontend[0].deny",
        ),
        (
            tcp(
                "127.0.0.1:0",
                "[[frontend.route]]\nsource = \"10.0.0.0/8\"\ndeny = 403",
                a,
                b,
            ),
            "test.toml:7:8",
            "frontend[0].route[0].deny",
        ),
        (
            tcp(
                "127.0.0.1:0",
                "[[frontend.route]]\nsource = \"10.0.0.0/8\"\npath = \"/x\"\nbackend = \"b\"",
                a,
                b,
            ),
            "test.toml:7:8",
            "frontend[0].route[0].path",
        ),
    ];
    for (text, at, key) in cases {
        let e = tollgate::config::parse(&text, "test.toml").unwrap_err().to_string();
        assert!(e.contains(at) && e.contains(key), "want {at} {key}, got: {e}\n{text}");
    }
}

#[test]
fn show_stat_and_show_info_count_denied_connections() {
    use master_support::{Master, TempDir, global};
    let (a, b) = (origin(echo), origin(echo));
    let dir = TempDir::new("access-rules");
    let text = format!(
        "{}\n{}",
        global(&dir.0, ""),
        tcp("127.0.0.1:0", "deny = \"127.0.0.1\"", a.addr, b.addr)
    );
    let master = Master::start(dir, &text, &[]);
    for _ in 0..2 {
        closed_without_a_byte(master.addr, b"ping");
    }
    let out = master.ctl_ok(&["--json", "show", "stat"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let gens = v["answer"]["generations"].as_array().unwrap();
    let fe = &gens[0]["stat"]["frontends"][0];
    assert_eq!(fe["conn_denied"], 2, "{out}");
    let table = master.ctl_ok(&["show", "stat"]);
    assert!(table.contains("DENIED"), "{table}");
    let info = master.ctl_ok(&["show", "info"]);
    assert!(
        info.lines().any(|l| l.contains("conn_denied") && l.contains('2')),
        "{info}"
    );
}

#[test]
fn explain_tells_lists_and_tcp_source_routes() {
    use tollgate::admin::explain::{Query, Target, explain};
    let (a, b) = ("127.0.0.1:1".parse().unwrap(), "127.0.0.1:2".parse().unwrap());
    let query = |source: &str| Query {
        method: "GET".into(),
        url: "http://t/".into(),
        headers: Vec::new(),
        sni: None,
        client_cert: false,
        frontend: Some("fe".into()),
        port: None,
        source: source.parse().unwrap(),
    };
    let routes = "deny = \"192.0.2.0/24\"\n[[frontend.route]]\nsource = \"10.0.0.0/8\"\ndeny = true\n\
                  [[frontend.route]]\nsource = \"172.16.0.0/12\"\nbackend = \"b\"\n";
    let config = tollgate::config::parse(&tcp("127.0.0.1:0", routes, a, b), "test.toml").unwrap();
    let listed = explain(&config, &query("192.0.2.7")).unwrap();
    assert!(
        matches!(&listed.target, Target::Refused { reason } if reason.contains("refused at accept")),
        "{listed:?}"
    );
    let denied = explain(&config, &query("10.1.1.1")).unwrap();
    assert_eq!(denied.route, Some(0), "{denied:?}");
    assert!(
        matches!(&denied.target, Target::Refused { reason } if reason.contains("denies")),
        "{denied:?}"
    );
    let to_b = explain(&config, &query("172.16.0.1")).unwrap();
    assert_eq!(
        (to_b.route, &to_b.target),
        (Some(1), &Target::Backend { name: "b".into() }),
        "{to_b:?}"
    );
    let default = explain(&config, &query("127.0.0.1")).unwrap();
    assert_eq!(default.target, Target::Backend { name: "a".into() }, "{default:?}");
}

#[test]
fn tls_terminating_tcp_frontend_decides_source_routes_before_the_handshake() {
    use common::tls::{TempDir, cert_entry};
    let (a, b) = (origin(echo), origin(echo));
    let dir = TempDir::new();
    let ca = Ca::new("access-ca");
    let leaf = ca.leaf(&["t.example"], "cert-t", false).write(&dir, "t");
    let tls = format!("[frontend.tls]\n{}", cert_entry(&leaf, true));
    let deny = format!("[[frontend.route]]\nsource = \"127.0.0.1\"\ndeny = true\n{tls}");
    let proxy = Proxy::start(&tcp("127.0.0.1:0", &deny, a.addr, b.addr));
    closed_without_a_byte(proxy.addr, &client_hello("t.example"));
    let s = proxy.running().stats();
    assert_eq!(
        (s.conn_denied, s.tls_handshakes_full),
        (1, 0),
        "closed before the handshake: {s:?}"
    );

    let to_b = format!("[[frontend.route]]\nsource = \"127.0.0.0/8\"\nbackend = \"b\"\n{tls}");
    let proxy = Proxy::start(&tcp("127.0.0.1:0", &to_b, a.addr, b.addr));
    let name = rustls::pki_types::ServerName::try_from("t.example").unwrap();
    let conn = rustls::ClientConnection::new(client_config(&ca), name).unwrap();
    let sock = TcpStream::connect(proxy.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut stream = rustls::StreamOwned::new(conn, sock);
    stream.write_all(b"ping").unwrap();
    let mut back = [0u8; 4];
    stream.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"ping");
    assert_eq!(
        (total(&a), total(&b)),
        (0, 1),
        "the source route picked b, the handshake still done"
    );
}
