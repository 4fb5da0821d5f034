//! Routes match the normalised path and host (issue 27, item 13), over real sockets, for
//! HTTP/1 clients and HTTP/2 clients (h2c prior knowledge): each spelling of a denied path
//! or host that a server reads as the same resource (`//admin`, `/./admin`, `/x/../admin`,
//! `/%2e%2e/admin`, `/%61dmin`, `admin.example.`) is denied and never reaches the server;
//! requests no rule refuses are routed, the server getting the normalised target
//! (`forward_target = "normalized"`, the default) or the one the client sent (`"original"`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::Proxy;
use common::http::{HttpOrigin, http_origin, ok};

const RULES: &str = r#"
[[frontend.route]]
host = "admin.example"
deny = true

[[frontend.route]]
path_prefix = "/admin"
deny = true

[[frontend.route]]
path = "/secret"
deny = true
"#;

fn config(origin: SocketAddr) -> String {
    format!(
        "[global]\nworkers = 1\n\
         [[frontend]]\nname = \"norm\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\ndefault_backend = \"be\"\n{RULES}\n\
         [[frontend]]\nname = \"orig\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\ndefault_backend = \"be\"\n\
         forward_target = \"original\"\n{RULES}\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n"
    )
}

/// The status of an HTTP/1.1 request for `target` on `host`.
fn ask_h1(addr: SocketAddr, host: &str, target: &str) -> u16 {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(c, "GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The status of an HTTP/2 request (h2c) with `:authority` `host` and `:path` `target`.
fn ask_h2(addr: SocketAddr, host: &str, target: &str) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut client = client.ready().await.unwrap();
        let uri = format!("http://{host}{target}");
        let req = http::Request::get(&uri).body(()).unwrap();
        // The request goes with its `:path` exactly as written (no client-side clean-up).
        assert_eq!(req.uri().path_and_query().unwrap().as_str(), target, "{uri}");
        let (resp, _) = client.send_request(req, true).unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(10), resp)
            .await
            .unwrap()
            .unwrap();
        resp.status().as_u16()
    })
}

fn origin() -> HttpOrigin {
    http_origin(|_| ok("served"))
}

/// Each spelling of a denied path, and of the denied host.
const BYPASSES: &[(&str, &str)] = &[
    ("www.example", "/admin"),
    ("www.example", "//admin"),
    ("www.example", "///admin/x"),
    ("www.example", "/./admin"),
    ("www.example", "/x/../admin"),
    ("www.example", "/x/y/../../admin/panel"),
    ("www.example", "/%2e%2e/admin"),
    ("www.example", "/x/%2E%2E/admin"),
    ("www.example", "/.%2e/admin"),
    ("www.example", "/%61dmin"),
    ("www.example", "/%2fadmin/../secret"),
    ("www.example", "/public/..//secret"),
    ("admin.example", "/"),
    ("admin.example.", "/"),
    ("ADMIN.Example.", "/public"),
    ("admin.example.:80", "/public"),
];

#[test]
fn every_bypass_is_denied_for_http1_and_http2_clients() {
    let o = origin();
    let proxy = Proxy::start(&config(o.addr));
    let orig = proxy.running().local_addr("orig").unwrap();
    for addr in [proxy.addr, orig] {
        for (host, target) in BYPASSES {
            assert_eq!(ask_h1(addr, host, target), 403, "HTTP/1 {host} {target}");
            assert_eq!(ask_h2(addr, host, target), 403, "HTTP/2 {host} {target}");
        }
    }
    let reached: Vec<String> = o.requests().iter().map(|r| r.target.clone()).collect();
    assert!(reached.is_empty(), "reached the server: {reached:?}");
}

#[test]
fn requests_no_rule_refuses_are_routed_with_the_target_forward_target_says() {
    let o = origin();
    let proxy = Proxy::start(&config(o.addr));
    let orig = proxy.running().local_addr("orig").unwrap();
    // (sent, what the server gets from the normalising frontend)
    let cases = [
        ("/public/x?a=/../b", "/public/x?a=/../b"),
        ("/public//x/./y/../z?q", "/public/x/z?q"),
        ("/%7euser/%2fadmin", "/~user/%2Fadmin"),
        // An encoded slash is not a separator: this is no dot segment and no /admin.
        ("/x%2F..%2Fadmin", "/x%2F..%2Fadmin"),
        ("/secretary", "/secretary"),
    ];
    for (sent, normalised) in cases {
        for (addr, ask, proto) in [
            (proxy.addr, ask_h1 as fn(SocketAddr, &str, &str) -> u16, "HTTP/1"),
            (proxy.addr, ask_h2, "HTTP/2"),
            (orig, ask_h1, "HTTP/1"),
            (orig, ask_h2, "HTTP/2"),
        ] {
            let before = o.requests().len();
            assert_eq!(ask(addr, "www.example", sent), 200, "{proto} {sent}");
            let got = o.requests();
            assert_eq!(got.len(), before + 1, "{proto} {sent}");
            let want = if addr == orig { sent } else { normalised };
            assert_eq!(got[before].target, want, "{proto} {sent} via {addr}");
        }
    }
    // The host is forwarded as sent: only routes read it normalised.
    assert_eq!(ask_h1(proxy.addr, "WWW.example.", "/"), 200);
    assert_eq!(o.requests().last().unwrap().header("host"), Some("WWW.example."));
}

/// A `[[frontend.limit]]` keyed on the path counts every spelling of one path as one key.
#[test]
fn a_path_keyed_limit_counts_every_spelling_as_one() {
    let o = origin();
    let proxy = Proxy::start(&format!(
        "[global]\nworkers = 1\n\
         [[frontend]]\nname = \"lim\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\ndefault_backend = \"be\"\n\
         [[frontend.limit]]\nname = \"per-path\"\nkey = \"path\"\nrate = \"2/m\"\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        o.addr
    ));
    assert_eq!(ask_h1(proxy.addr, "www.example", "/login"), 200);
    assert_eq!(ask_h2(proxy.addr, "www.example", "//login"), 200);
    for spelling in ["/./login", "/x/../login", "/%6cogin", "//login"] {
        assert_eq!(ask_h1(proxy.addr, "www.example", spelling), 429, "HTTP/1 {spelling}");
        assert_eq!(ask_h2(proxy.addr, "www.example", spelling), 429, "HTTP/2 {spelling}");
    }
    // Another path has its own count.
    assert_eq!(ask_h1(proxy.addr, "www.example", "/other"), 200);
}
