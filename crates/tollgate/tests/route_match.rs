//! Route conditions over real sockets (issue 14, matching): every condition, negation and
//! named matchers, asked by HTTP/1 clients and HTTP/2 clients (h2c prior knowledge, and
//! ALPN h2 over TLS), with `sni` and `scheme` on a TLS frontend; a backtracking-shaped path
//! regex answered fast. Each route answers `return` with its own name, so the body says
//! which route matched (no route: 503).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Proxy;
use common::tls::{Ca, TempDir, cert_entry, client_config};
use tokio::io::{AsyncRead, AsyncWrite};

/// The routes of the plain frontend (`ROUTE n` answers "rn").
const PLAIN_ROUTES: &str = r#"
[[frontend.matcher]]
name = "api"
host = ["api.example", "*.api.example"]
path_prefix = "/api/"

[[frontend.matcher]]
name = "beta"
header = { name = "x-beta", value = "1" }

[[frontend.route]]
matchers = ["api", "beta"]
return = { status = 200, body = "r0" }

[[frontend.route]]
matcher = "api"
not = { method = "DELETE" }
return = { status = 200, body = "r1" }

[[frontend.route]]
path = "/exact"
query = { name = "v", value = "2" }
return = { status = 200, body = "r2" }

[[frontend.route]]
path_regex = "^/users/[0-9]+$"
method = ["GET", "POST"]
return = { status = 200, body = "r3" }

[[frontend.route]]
header = { name = "X-Pre", prefix = "abc" }
return = { status = 200, body = "r4" }

[[frontend.route]]
header = { name = "user-agent", regex = "^probe/[0-9]" }
return = { status = 200, body = "r5" }

[[frontend.route]]
header = { name = "x-present" }
return = { status = 200, body = "r6" }

[[frontend.route]]
cookie = { name = "sid", value = "7" }
return = { status = 200, body = "r7" }

[[frontend.route]]
cookie = { name = "flag" }
return = { status = 200, body = "r8" }

[[frontend.route]]
query = { name = "debug" }
return = { status = 200, body = "r9" }

[[frontend.route]]
source = "10.0.0.0/8"
return = { status = 200, body = "r10" }

[[frontend.route]]
path_prefix = "/src"
source = ["127.0.0.0/8", "::1/128"]
return = { status = 200, body = "r11" }

[[frontend.route]]
scheme = "https"
return = { status = 200, body = "r12" }

[[frontend.route]]
path_prefix = "/plain"
scheme = "http"
return = { status = 200, body = "r13" }

[[frontend.route]]
host = "neg.example"
not = { path_prefix = "/admin", header = { name = "x-admin" } }
return = { status = 200, body = "r14" }

[[frontend.route]]
path_regex = "^/(a+)+$"
return = { status = 200, body = "r15" }

[[frontend.route]]
path_prefix = "/not-beta"
not = { matcher = "beta" }
return = { status = 200, body = "r16" }
"#;

/// One request: method, host, path and query, extra header fields; what must answer.
type Case = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
);

const CASES: &[Case] = &[
    ("GET", "api.example", "/api/x", &[("x-beta", "1")], "200 r0"),
    ("GET", "eu.api.example", "/api/x", &[("x-beta", "2")], "200 r1"),
    ("DELETE", "api.example", "/api/x", &[], "503"),
    ("GET", "api.example", "/apix", &[], "503"),
    ("GET", "x.eu.api.example", "/api/x", &[], "503"),
    ("GET", "t.example", "/exact?a=1&v=2", &[], "200 r2"),
    ("GET", "t.example", "/exact?v=22", &[], "503"),
    ("GET", "t.example", "/exact/?v=2", &[], "503"),
    ("GET", "t.example", "/users/42", &[], "200 r3"),
    ("POST", "t.example", "/users/42", &[], "200 r3"),
    ("PUT", "t.example", "/users/42", &[], "503"),
    ("GET", "t.example", "/users/42/x", &[], "503"),
    ("GET", "t.example", "/", &[("x-pre", "abcdef")], "200 r4"),
    ("GET", "t.example", "/", &[("x-pre", "xabc")], "503"),
    ("GET", "t.example", "/", &[("user-agent", "probe/2.1")], "200 r5"),
    ("GET", "t.example", "/", &[("user-agent", "probe/x")], "503"),
    ("GET", "t.example", "/", &[("x-present", "")], "200 r6"),
    ("GET", "t.example", "/", &[("cookie", "a=1; sid=7")], "200 r7"),
    ("GET", "t.example", "/", &[("cookie", "sid=8; flag=")], "200 r8"),
    ("GET", "t.example", "/", &[("cookie", "sid=8")], "503"),
    ("GET", "t.example", "/?x=1&debug", &[], "200 r9"),
    ("GET", "t.example", "/src/a", &[], "200 r11"),
    ("GET", "t.example", "/plain", &[], "200 r13"),
    ("GET", "neg.example", "/", &[], "200 r14"),
    ("GET", "neg.example", "/admin/x", &[], "503"),
    ("GET", "neg.example", "/", &[("x-admin", "1")], "503"),
    ("GET", "t.example", "/aaaa", &[], "200 r15"),
    ("GET", "t.example", "/not-beta/x", &[], "200 r16"),
    ("GET", "t.example", "/not-beta/x", &[("x-beta", "1")], "503"),
];

fn plain_config() -> String {
    format!(
        "[global]\nworkers = 1\n[[frontend]]\nname = \"plain\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\n{PLAIN_ROUTES}\n\
         [[frontend]]\nname = \"v6\"\nbind = [\"[::1]:0\"]\nmode = \"http\"\nh2c = true\n{PLAIN_ROUTES}\n"
    )
}

/// "status body" of an HTTP/1 response read to its end.
fn h1_answer(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let status = text.split(' ').nth(1).unwrap_or("?").to_string();
    match status.as_str() {
        "200" => format!("200 {}", text.split_once("\r\n\r\n").map_or("", |(_, b)| b)),
        _ => status,
    }
}

fn h1_request(method: &str, host: &str, target: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("Connection: close\r\n\r\n");
    req.into_bytes()
}

fn ask_h1(addr: SocketAddr, (method, host, target, headers, _): &Case) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(&h1_request(method, host, target, headers)).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    h1_answer(&out)
}

/// One HTTP/2 request on a fresh connection over `io`; "status body".
async fn h2_exchange<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: T,
    scheme: &str,
    (method, host, target, headers, _): &Case,
) -> String {
    let (client, conn) = h2::client::handshake(io).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut client = client.ready().await.unwrap();
    let mut req = http::Request::builder()
        .method(*method)
        .uri(format!("{scheme}://{host}{target}"));
    for (n, v) in *headers {
        req = req.header(*n, *v);
    }
    let (resp, _) = client.send_request(req.body(()).unwrap(), true).unwrap();
    let resp = resp.await.unwrap();
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        bytes.extend_from_slice(&chunk);
    }
    match status {
        200 => format!("200 {}", String::from_utf8_lossy(&bytes)),
        s => s.to_string(),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn ask_h2c(addr: SocketAddr, case: &Case) -> String {
    runtime().block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), h2_exchange(tcp, "http", case))
            .await
            .unwrap()
    })
}

#[test]
fn every_condition_for_http1_and_http2_clients() {
    let proxy = Proxy::start(&plain_config());
    let v6 = proxy.running().local_addr("v6").unwrap();
    for case in CASES {
        assert_eq!(ask_h1(proxy.addr, case), case.4, "HTTP/1 {case:?}");
        assert_eq!(ask_h2c(proxy.addr, case), case.4, "HTTP/2 {case:?}");
        assert_eq!(ask_h1(v6, case), case.4, "HTTP/1 over IPv6 {case:?}");
        assert_eq!(ask_h2c(v6, case), case.4, "HTTP/2 over IPv6 {case:?}");
    }
    // A route on a block the client is not in never answers.
    assert_ne!(ask_h1(proxy.addr, &("GET", "t.example", "/", &[], "")), "200 r10");
}

#[test]
fn a_backtracking_shaped_path_regex_is_answered_fast() {
    let proxy = Proxy::start(&plain_config());
    // `^/(a+)+$` against "/aaaa…ab": exponential for a backtracking engine, linear here.
    let path: &'static str = Box::leak(format!("/{}b", "a".repeat(4000)).into_boxed_str());
    let matching: &'static str = Box::leak(format!("/{}", "a".repeat(4000)).into_boxed_str());
    let began = Instant::now();
    for _ in 0..20 {
        assert_eq!(ask_h1(proxy.addr, &("GET", "t.example", path, &[], "")), "503");
        assert_eq!(ask_h2c(proxy.addr, &("GET", "t.example", path, &[], "")), "503");
    }
    assert_eq!(ask_h1(proxy.addr, &("GET", "t.example", matching, &[], "")), "200 r15");
    let took = began.elapsed();
    assert!(took < Duration::from_secs(20), "41 requests took {took:?}");
}

/// The TLS frontend: `sni` and `scheme` (the handshake's name may differ from Host).
const TLS_ROUTES: &str = r#"
[[frontend.route]]
sni = "a.example"
host = "b.example"
return = { status = 200, body = "t0" }

[[frontend.route]]
sni = ["*.example"]
scheme = "https"
return = { status = 200, body = "t1" }

[[frontend.route]]
not = { sni = "*.example" }
return = { status = 200, body = "t2" }
"#;

fn tls_proxy(dir: &TempDir, ca: &Ca) -> Proxy {
    let leaf = ca
        .leaf(&["a.example", "c.example", "other.test"], "web", false)
        .write(dir, "web");
    Proxy::start(&format!(
        "[global]\nworkers = 1\n[[frontend]]\nname = \"tls\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\n\
         [frontend.tls]\nalpn = [\"h2\", \"http/1.1\"]\n{}\n{TLS_ROUTES}",
        cert_entry(&leaf, true)
    ))
}

fn ask_tls_h2(addr: SocketAddr, ca: &Ca, sni: &str, case: &Case) -> String {
    let mut config = (*client_config(ca)).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
    runtime().block_on(async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        tokio::time::timeout(Duration::from_secs(10), h2_exchange(tls, "https", case))
            .await
            .unwrap()
    })
}

fn ask_tls_h1(addr: SocketAddr, ca: &Ca, sni: &str, (method, host, target, headers, _): &Case) -> String {
    let (reply, _) =
        common::tls::tls_request(addr, client_config(ca), sni, &h1_request(method, host, target, headers)).unwrap();
    h1_answer(&reply)
}

#[test]
fn sni_and_scheme_on_a_tls_frontend_for_http1_and_http2_clients() {
    let dir = TempDir::new();
    let ca = Ca::new("route-ca");
    let proxy = tls_proxy(&dir, &ca);
    let cases: &[(&str, Case)] = &[
        ("a.example", ("GET", "b.example", "/", &[], "200 t0")),
        ("a.example", ("GET", "a.example", "/", &[], "200 t1")),
        ("c.example", ("GET", "b.example", "/", &[], "200 t1")),
        ("other.test", ("GET", "other.test", "/", &[], "200 t2")),
    ];
    for (sni, case) in cases {
        assert_eq!(
            ask_tls_h1(proxy.addr, &ca, sni, case),
            case.4,
            "HTTP/1 sni {sni} {case:?}"
        );
        assert_eq!(
            ask_tls_h2(proxy.addr, &ca, sni, case),
            case.4,
            "HTTP/2 sni {sni} {case:?}"
        );
    }
}
