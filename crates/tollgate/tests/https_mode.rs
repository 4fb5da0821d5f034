//! HTTP mode behind TLS termination: curl over https with keep-alive (several requests on one
//! TLS connection, one pooled origin connection) and `X-Forwarded-Proto: https`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::process::Command;

use common::Proxy;
use common::http::{http_origin, ok};
use common::tls::{Ca, TempDir, cert_entry, path_str};

#[test]
fn curl_keepalive_over_https_with_forwarded_proto() {
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let origin = http_origin(|r| {
        ok(&format!(
            "{} {}",
            r.target,
            r.header("x-forwarded-proto").unwrap_or("-")
        ))
    });
    let dir = TempDir::new();
    let ca = Ca::new("https-ca");
    let leaf = ca.leaf(&["web.example"], "web", false).write(&dir, "web");
    let config = format!(
        "[global]\nworkers = 1\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         [frontend.tls]\nalpn = [\"http/1.1\"]\n{}\n[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        cert_entry(&leaf, true),
        origin.addr
    );
    let proxy = Proxy::start(&config);
    let ca_path = ca.write(&dir, "ca.pem");
    let port = proxy.addr.port();
    let url = |p: &str| format!("https://web.example:{port}{p}");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert", &path_str(&ca_path), "--resolve"])
        .arg(format!("web.example:{port}:127.0.0.1"))
        .args([url("/one"), "--next".into()])
        .args(["--cacert", &path_str(&ca_path), "--resolve"])
        .arg(format!("web.example:{port}:127.0.0.1"))
        .arg(url("/two"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout == "/one https/two https",
        "{stdout} / {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats = proxy.running().stats();
    assert_eq!(
        stats.tls_handshakes_full, 1,
        "curl reused its TLS connection: {stats:?}"
    );
    assert_eq!(stats.http_requests, 2);
    assert_eq!(origin.conns.load(std::sync::atomic::Ordering::SeqCst), 1);
}
