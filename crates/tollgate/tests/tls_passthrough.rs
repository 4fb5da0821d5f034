//! SNI passthrough in TCP mode: the ClientHello is peeked, never consumed or decrypted;
//! the route picks the backend; the client sees each origin's own certificate.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use common::tls::*;
use common::*;
use rustls::pki_types::ServerName;

fn reply_with_name(req: Vec<u8>, sni: Option<String>) -> Vec<u8> {
    format!("{} bytes for {}", req.len(), sni.unwrap_or_default()).into_bytes()
}

fn big_reply(req: Vec<u8>, _sni: Option<String>) -> Vec<u8> {
    payload_block(req.len() as u64, 3 << 20)
}

struct Setup {
    ca: Ca,
    a: Leaf,
    b: Leaf,
    proxy: Proxy,
}

/// Origins A (`a.example`, also the default) and B (`b.example`, `*.b.example`).
fn setup(frontend_extra: &str, handler: TlsHandler) -> Setup {
    let ca = Ca::new("ca");
    let a = ca.leaf(&["a.example", "unknown.example"], "origin-a", false);
    let b = ca.leaf(&["b.example", "x.b.example"], "origin-b", true);
    let oa = tls_origin(a.server_config(), handler);
    let ob = tls_origin(b.server_config(), handler);
    let config = format!(
        "[timeouts]\ntls_inspect = \"1s\"\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be_a\"\n{frontend_extra}\n\
         [[frontend.route]]\nsni = \"a.example\"\nbackend = \"be_a\"\n\
         [[frontend.route]]\nsni = \"b.example\"\nbackend = \"be_b\"\n\
         [[frontend.route]]\nsni = \"*.b.example\"\nbackend = \"be_b\"\n\
         [[backend]]\nname = \"be_a\"\n[[backend.server]]\nname = \"a\"\naddress = \"{oa}\"\n\
         [[backend]]\nname = \"be_b\"\n[[backend.server]]\nname = \"b\"\naddress = \"{ob}\"\n"
    );
    Setup {
        ca,
        a,
        b,
        proxy: Proxy::start(&config),
    }
}

#[test]
fn sni_reaches_each_origin_which_terminates_itself() {
    let s = setup("", reply_with_name);
    let client = client_config(&s.ca);
    for (sni, leaf) in [
        ("a.example", &s.a),
        ("b.example", &s.b),
        ("x.b.example", &s.b),
        ("unknown.example", &s.a),
    ] {
        let (reply, cert) = tls_request(s.proxy.addr, Arc::clone(&client), sni, b"hello").unwrap();
        assert_eq!(cert, leaf.der, "{sni}: wrong origin");
        assert_eq!(String::from_utf8(reply).unwrap(), format!("5 bytes for {sni}"));
    }
    let out = s_client(s.proxy.addr, &["-servername", "b.example"], b"");
    assert!(subject(&out).contains("origin-b"), "{out}");
    // Nothing was terminated here.
    assert_eq!(s.proxy.running().stats().tls_handshakes_full, 0);
}

#[test]
fn unknown_sni_is_rejected_when_asked() {
    let s = setup("reject_unknown_sni = true", reply_with_name);
    let client = client_config(&s.ca);
    assert!(tls_request(s.proxy.addr, Arc::clone(&client), "unknown.example", b"x").is_err());
    let (reply, _) = tls_request(s.proxy.addr, client, "a.example", b"x").unwrap();
    assert_eq!(reply, b"1 bytes for a.example");
    assert_eq!(s.proxy.running().stats().sni_rejected, 1);
}

#[test]
fn client_half_close_still_receives_whole_response() {
    let s = setup("", big_reply);
    let (reply, _) = tls_request(
        s.proxy.addr,
        client_config(&s.ca),
        "b.example",
        b"request of 21 bytes!!",
    )
    .unwrap();
    assert!(reply == payload_block(21, 3 << 20));
}

/// The first flight of a rustls client for `sni`, and the connection to finish with.
fn client_hello(ca: &Ca, sni: &str) -> (rustls::ClientConnection, Vec<u8>) {
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(client_config(ca), name).unwrap();
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello).unwrap();
    }
    (conn, hello)
}

/// Sends `first_flight` in `pieces`, then completes the handshake; returns the server's leaf.
fn handshake_in_pieces(
    addr: SocketAddr,
    mut conn: rustls::ClientConnection,
    pieces: &[&[u8]],
) -> rustls::pki_types::CertificateDer<'static> {
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_nodelay(true).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for (i, piece) in pieces.iter().enumerate() {
        sock.write_all(piece).unwrap();
        if i + 1 < pieces.len() {
            // Separate TCP segments (not a synchronisation: the test holds either way).
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).unwrap();
    }
    conn.peer_certificates().unwrap()[0].clone().into_owned()
}

#[test]
fn hello_split_over_three_segments_routes() {
    let s = setup("", reply_with_name);
    let (conn, hello) = client_hello(&s.ca, "b.example");
    let third = hello.len() / 3;
    let leaf = handshake_in_pieces(s.proxy.addr, conn, &[&hello[..5], &hello[5..third], &hello[third..]]);
    assert_eq!(leaf, s.b.der);
}

#[test]
fn hello_spanning_two_records_routes() {
    let s = setup("", reply_with_name);
    let (conn, hello) = client_hello(&s.ca, "b.example");
    // Re-frame the one handshake record as two records.
    let body = &hello[5..];
    assert_eq!(
        body.len(),
        u16::from_be_bytes([hello[3], hello[4]]) as usize,
        "one record expected"
    );
    let cut = 40; // inside the ClientHello, before the extensions
    let mut framed = Vec::new();
    for part in [&body[..cut], &body[cut..]] {
        framed.extend_from_slice(&[0x16, 0x03, 0x01]);
        framed.extend_from_slice(&(part.len() as u16).to_be_bytes());
        framed.extend_from_slice(part);
    }
    let leaf = handshake_in_pieces(s.proxy.addr, conn, &[&framed]);
    assert_eq!(leaf, s.b.der);
}

/// Sends `bytes` (then optionally half-closes); the proxy must close without answering.
fn expect_closed(addr: SocketAddr, bytes: &[u8], half_close: bool) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = c.write_all(bytes);
    if half_close {
        c.shutdown(Shutdown::Write).unwrap();
    }
    let mut got = Vec::new();
    match c.read_to_end(&mut got) {
        Ok(_) => assert!(got.is_empty(), "unexpected reply {got:?}"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
}

#[test]
fn bad_client_hellos_are_closed_cleanly() {
    let s = setup("", reply_with_name);
    let (_, hello) = client_hello(&s.ca, "a.example");
    // Truncated then EOF; truncated and silent (inspect timeout); garbage; oversized.
    expect_closed(s.proxy.addr, &hello[..hello.len() / 2], true);
    expect_closed(s.proxy.addr, &hello[..hello.len() / 2], false);
    expect_closed(s.proxy.addr, b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n", false);
    let mut oversized = vec![0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0xff, 0xff];
    oversized.resize(0x4005, 0);
    expect_closed(s.proxy.addr, &oversized, false);
    let mut too_long_record = vec![0x16, 0x03, 0x01, 0xff, 0xff];
    too_long_record.resize(70_000, 7);
    expect_closed(s.proxy.addr, &too_long_record, false);
    s.proxy.wait_idle(Duration::from_secs(5));
    assert_eq!(s.proxy.running().stats().sni_inspect_failures, 5);
    // Still serving.
    let (reply, _) = tls_request(s.proxy.addr, client_config(&s.ca), "a.example", b"ok").unwrap();
    assert_eq!(reply, b"2 bytes for a.example");
}
