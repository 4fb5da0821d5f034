//! TLS to servers: verified with `ca_file` and the configured SNI, or `verify = false`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use common::tls::*;
use common::*;

fn echo_sni(req: Vec<u8>, sni: Option<String>) -> Vec<u8> {
    let mut out = format!("sni={} ", sni.unwrap_or_default()).into_bytes();
    out.extend_from_slice(&req);
    out
}

fn proxy_to(origin: SocketAddr, server_extra: &str) -> Proxy {
    Proxy::start(&format!(
        "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
         [[backend]]\nname = \"be\"\nretries = 0\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\ntls = true\n{server_extra}\n"
    ))
}

fn plain_request(addr: SocketAddr, body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut c = TcpStream::connect(addr)?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    c.write_all(body)?;
    c.shutdown(Shutdown::Write)?;
    let mut got = Vec::new();
    c.read_to_end(&mut got)?;
    Ok(got)
}

#[test]
fn verified_with_ca_file_and_sni_sent() {
    let dir = TempDir::new();
    let ca = Ca::new("backend-ca");
    let leaf = ca.leaf(&["origin.test"], "origin", false);
    let origin = tls_origin(leaf.server_config(), echo_sni);
    let ca_path = ca.write(&dir, "ca.pem");
    let proxy = proxy_to(
        origin,
        &format!("ca_file = \"{}\"\nsni = \"origin.test\"", ca_path.display()),
    );
    let big = payload_block(3, 1 << 20);
    let got = plain_request(proxy.addr, &big).unwrap();
    assert_eq!(&got[..16], b"sni=origin.test ");
    assert!(got[16..] == big[..]);
}

#[test]
fn wrong_ca_fails_and_verify_false_accepts() {
    let dir = TempDir::new();
    let ca = Ca::new("backend-ca");
    let other = Ca::new("other-ca");
    let origin = tls_origin(ca.leaf(&["origin.test"], "origin", false).server_config(), echo_sni);
    let other_path = other.write(&dir, "other.pem");
    let proxy = proxy_to(
        origin,
        &format!("ca_file = \"{}\"\nsni = \"origin.test\"", other_path.display()),
    );
    let got = plain_request(proxy.addr, b"x").unwrap_or_default();
    assert!(got.is_empty(), "{got:?}");
    proxy.wait_idle(Duration::from_secs(5));
    assert_eq!(proxy.running().stats().tls_backend_errors, 1);

    let proxy = proxy_to(origin, "verify = false\nsni = \"origin.test\"");
    assert_eq!(plain_request(proxy.addr, b"x").unwrap(), b"sni=origin.test x");
}

#[test]
fn tls_without_ca_or_verify_false_is_refused() {
    let text = "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
                [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"127.0.0.1:1\"\ntls = true\n";
    let err = tollgate::config::parse(text, "t.toml").unwrap_err();
    assert_eq!(err.0[0].key, "backend[0].server[0].ca_file", "{err}");
}
