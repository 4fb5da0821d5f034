//! The guide's first site (docs/guide/02-first-site.md) works as the page says: its config,
//! taken from the page, serves HTTPS with HTTP/2 offered, redirects plain HTTP to HTTPS with
//! the path and query kept, balances over both servers, and stops sending to a server its
//! health checks find down.
//!
//! Only what cannot be the reader's on this machine is changed: the listen addresses (port
//! 0 on loopback), the servers' addresses (two origins the test starts), the certificate
//! files (a test CA's leaf for the page's names), and the `user` and `[admin]` a process
//! started by a test does not take. The checks' timing, the routes and the TLS settings are
//! the page's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;
mod health_support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::tls::{Ca, TempDir, client_config, tls_request};
use health_support::{Origin, wait_for};
use toml::{Table, Value};

/// The first whole config (a ```` ```toml ```` block) on the page.
fn page_config() -> Table {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/guide/02-first-site.md");
    let text = std::fs::read_to_string(page).unwrap();
    let start = text.find("\n```toml\n").expect("a ```toml block on the page") + "\n```toml\n".len();
    let len = text[start..].find("\n```").unwrap();
    text[start..start + len].parse().unwrap()
}

fn array_of_tables<'a>(t: &'a mut Table, key: &str) -> impl Iterator<Item = &'a mut Table> {
    t.get_mut(key)
        .and_then(Value::as_array_mut)
        .unwrap_or_else(|| panic!("no [[{key}]] on the page"))
        .iter_mut()
        .map(|v| v.as_table_mut().unwrap())
}

/// One request over TLS (ALPN `http/1.1`), the server's answer body.
fn https_get(addr: std::net::SocketAddr, ca: &Ca, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
    let (reply, _) = tls_request(addr, client_config(ca), "example.com", request.as_bytes()).unwrap();
    let reply = String::from_utf8_lossy(&reply).into_owned();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    reply.split("\r\n\r\n").nth(1).unwrap_or("").to_string()
}

/// The protocol the proxy picks when a client offers `h2` and `http/1.1`.
fn negotiated_alpn(addr: std::net::SocketAddr, ca: &Ca) -> Option<Vec<u8>> {
    let mut config = (*client_config(ca)).clone();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("example.com").unwrap();
        let tls = tokio::time::timeout(
            Duration::from_secs(10),
            tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
        )
        .await
        .unwrap()
        .unwrap();
        tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
    })
}

#[test]
fn the_first_site_serves_https_redirects_http_and_routes_around_a_dead_server() {
    let dir = TempDir::new();
    let ca = Ca::new("guide CA");
    let leaf = ca.leaf(&["example.com", "www.example.com"], "example.com", false);
    let (cert, key) = leaf.write(&dir, "example.com");
    let mut app1 = Origin::start("app1");
    let app2 = Origin::start("app2");

    let mut config = page_config();
    if let Some(Value::Table(global)) = config.get_mut("global") {
        global.remove("user");
    }
    config.remove("admin");
    for fe in array_of_tables(&mut config, "frontend") {
        fe.insert("bind".into(), Value::Array(vec![Value::String("127.0.0.1:0".into())]));
        if let Some(Value::Table(tls)) = fe.get_mut("tls") {
            for c in tls.get_mut("cert").and_then(Value::as_array_mut).unwrap() {
                let c = c.as_table_mut().unwrap();
                c.insert("cert".into(), Value::String(cert.display().to_string()));
                c.insert("key".into(), Value::String(key.display().to_string()));
            }
        }
    }
    let mut servers = Vec::new();
    for be in array_of_tables(&mut config, "backend") {
        assert!(be.contains_key("health"), "the page's backend has health checks");
        for (server, origin) in array_of_tables(be, "server").zip([&app1, &app2]) {
            server.insert("address".into(), Value::String(origin.addr.to_string()));
            servers.push(server["name"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(servers, ["app1", "app2"], "the page balances over two servers");

    let proxy = common::Proxy::start(&toml::to_string(&config).unwrap());
    let http = proxy.running().local_addr("http").expect("the page's port-80 frontend");
    let https = proxy
        .running()
        .local_addr("https")
        .expect("the page's port-443 frontend");

    // Plain HTTP: a 301 to the same host, path and query over https.
    let reply = common::http::raw_exchange(
        http,
        b"GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n",
    );
    assert!(reply.starts_with("HTTP/1.1 301"), "{reply}");
    assert!(
        reply
            .to_ascii_lowercase()
            .contains("\r\nlocation: https://example.com/a?b=1\r\n"),
        "{reply}"
    );

    // HTTPS: HTTP/2 chosen when offered; HTTP/1.1 requests reach both servers.
    assert_eq!(negotiated_alpn(https, &ca).as_deref(), Some(&b"h2"[..]));
    let answered: BTreeSet<String> = (0..10).map(|_| https_get(https, &ca, "/")).collect();
    assert_eq!(answered, BTreeSet::from(["app1".to_string(), "app2".to_string()]));

    // A server that stops answering is marked down by the page's checks (fall 3 × 2 s), and
    // every request goes to the other one.
    app1.stop();
    wait_for(Duration::from_secs(30), "app1 marked down", || {
        proxy
            .running()
            .show_servers(None)
            .into_iter()
            .find(|v| v.name == "app1")
            .filter(|v| v.oper.as_str() == "down")
    });
    for _ in 0..6 {
        assert_eq!(https_get(https, &ca, "/"), "app2");
    }
}
