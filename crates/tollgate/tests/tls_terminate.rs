//! TLS termination in TCP mode: certificate by SNI (exact, wildcard, default), ALPN,
//! resumption on TLS 1.2 and 1.3, half-close, handshake failures counted by reason.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::tls::*;
use common::*;

/// An origin that reads the client's request line (up to a blank line or EOF) and answers
/// a tiny HTTP response, then closes.
fn http_origin() -> Origin {
    origin(|s: &mut TcpStream| {
        let mut req = Vec::new();
        let mut b = [0u8; 4096];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut b) {
                Ok(0) | Err(_) => break,
                Ok(n) => req.extend_from_slice(&b[..n]),
            }
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n");
    })
}

struct Setup {
    _dir: TempDir,
    ca: Ca,
    proxy: Proxy,
}

/// Three certificates: `a.example` (RSA, CN cert-a), `*.w.example` (ECDSA, CN cert-wild),
/// and the default (ECDSA, CN cert-default, listed last with `default = true`).
fn setup(origin: SocketAddr, tls_extra: &str, global: &str) -> Setup {
    let dir = TempDir::new();
    let ca = Ca::new("test-ca");
    let a = ca.leaf(&["a.example"], "cert-a", true).write(&dir, "a");
    let w = ca.leaf(&["*.w.example"], "cert-wild", false).write(&dir, "w");
    let d = ca.leaf(&["default.example"], "cert-default", false).write(&dir, "d");
    let config = format!(
        "{global}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
         [frontend.tls]\n{tls_extra}\n{}{}{}\n[[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n",
        cert_entry(&a, false),
        cert_entry(&w, false),
        cert_entry(&d, true),
    );
    let proxy = Proxy::start(&config);
    Setup { _dir: dir, ca, proxy }
}

#[test]
fn sni_picks_exact_then_wildcard_then_default() {
    let origin = http_origin();
    let s = setup(origin.addr, "", "");
    for (sni, cn) in [
        ("a.example", "cert-a"),
        ("x.w.example", "cert-wild"),
        ("nothing.example", "cert-default"),
        ("a.b.w.example", "cert-default"),
    ] {
        let out = s_client(s.proxy.addr, &["-servername", sni], b"GET / HTTP/1.0\r\n\r\n");
        assert!(subject(&out).contains(cn), "{sni}: {}", subject(&out));
        assert!(out.contains("ok\n"), "{sni}: relayed reply missing:\n{out}");
    }
    // And with a client that verifies the chain and the name.
    let (reply, _) = tls_request(
        s.proxy.addr,
        client_config(&s.ca),
        "y.w.example",
        b"GET / HTTP/1.0\r\n\r\n",
    )
    .unwrap();
    assert!(reply.ends_with(b"ok\n"));
    let stats = s.proxy.running().stats();
    assert_eq!(stats.tls_handshakes_full, 5, "{stats:?}");
    assert_eq!(stats.tls_handshakes_active, 0);
}

#[test]
fn curl_gets_the_origin_reply() {
    let origin = http_origin();
    let s = setup(origin.addr, "alpn = [\"http/1.1\"]", "");
    let dir = TempDir::new();
    let ca = s.ca.write(&dir, "ca.pem");
    let port = s.proxy.addr.port();
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert", &path_str(&ca), "--resolve"])
        .arg(format!("a.example:{port}:127.0.0.1"))
        .arg(format!("https://a.example:{port}/"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn alpn_is_negotiated() {
    let origin = http_origin();
    let s = setup(origin.addr, "alpn = [\"h2\", \"http/1.1\"]", "");
    let req = b"GET / HTTP/1.0\r\n\r\n";
    let out = s_client(s.proxy.addr, &["-servername", "a.example", "-alpn", "h2"], req);
    assert!(out.contains("ALPN protocol: h2"), "{out}");
    let out = s_client(s.proxy.addr, &["-servername", "a.example", "-alpn", "http/1.1"], req);
    assert!(out.contains("ALPN protocol: http/1.1"), "{out}");
}

#[test]
fn sessions_resume_on_tls12_and_tls13() {
    let origin = http_origin();
    // Two workers: a session from one resumes on the other (one shared ServerConfig).
    let s = setup(origin.addr, "", "[global]\nworkers = 2");
    let dir = TempDir::new();
    for (i, version) in [&["-tls1_3"][..], &["-tls1_2"], &["-tls1_2", "-no_ticket"]]
        .iter()
        .enumerate()
    {
        let sess = path_str(&dir.path(&format!("sess{i}")));
        let mut first = vec!["-servername", "a.example", "-sess_out", &sess];
        first.extend_from_slice(version);
        let out = s_client(s.proxy.addr, &first, b"GET / HTTP/1.0\r\n\r\n");
        assert!(out.contains("New, TLSv1."), "{version:?} first:\n{out}");
        let mut second = vec!["-servername", "a.example", "-sess_in", &sess];
        second.extend_from_slice(version);
        let out = s_client(s.proxy.addr, &second, b"GET / HTTP/1.0\r\n\r\n");
        assert!(out.contains("Reused, TLSv1."), "{version:?} second:\n{out}");
    }
    let stats = s.proxy.running().stats();
    assert_eq!(
        (stats.tls_handshakes_full, stats.tls_handshakes_resumed),
        (3, 3),
        "{stats:?}"
    );
}

#[test]
fn resumption_can_be_turned_off() {
    let origin = http_origin();
    let s = setup(origin.addr, "session_tickets = false\nsession_cache = false", "");
    let dir = TempDir::new();
    let sess = path_str(&dir.path("sess"));
    for version in ["-tls1_3", "-tls1_2"] {
        let out = s_client(
            s.proxy.addr,
            &["-servername", "a.example", "-sess_out", &sess, version],
            b"GET / HTTP/1.0\r\n\r\n",
        );
        assert!(out.contains("New, TLSv1."), "{out}");
        if !dir.path("sess").exists() {
            continue; // no ticket and no session id: nothing to resume with
        }
        let out = s_client(
            s.proxy.addr,
            &["-servername", "a.example", "-sess_in", &sess, version],
            b"GET / HTTP/1.0\r\n\r\n",
        );
        assert!(
            out.contains("New, TLSv1."),
            "{version}: resumed although disabled:\n{out}"
        );
    }
    assert_eq!(s.proxy.running().stats().tls_handshakes_resumed, 0);
}

#[test]
fn client_half_close_still_receives_whole_response() {
    // The origin answers only after the client's EOF, with 3 MiB.
    let origin = origin(|s: &mut TcpStream| {
        let mut req = Vec::new();
        s.read_to_end(&mut req).expect("origin read");
        let reply = payload_block(req.len() as u64, 3 << 20);
        let _ = s.write_all(&reply);
    });
    let s = setup(origin.addr, "", "");
    let (reply, _) = tls_request(
        s.proxy.addr,
        client_config(&s.ca),
        "a.example",
        b"request of 21 bytes!!",
    )
    .unwrap();
    assert_eq!(reply.len(), 3 << 20);
    assert!(reply == payload_block(21, 3 << 20));
}

#[test]
fn failed_handshakes_are_counted_by_reason() {
    let origin = http_origin();
    let s = setup(
        origin.addr,
        "",
        "[timeouts]\ntls_handshake = \"300ms\"\nclient_hello = \"300ms\"",
    );
    // Garbage instead of a ClientHello: a protocol failure, the connection closed.
    let mut c = TcpStream::connect(s.proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut sink = Vec::new();
    let _ = c.read_to_end(&mut sink);
    // Silence: the ClientHello deadline closes it (a handshake timeout).
    let mut idle = TcpStream::connect(s.proxy.addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let n = idle.read(&mut [0u8; 16]);
    assert!(matches!(n, Ok(0)) || n.is_err(), "{n:?}");
    s.proxy.wait_idle(Duration::from_secs(5));
    let stats = s.proxy.running().stats();
    assert_eq!((stats.tls_fail_protocol, stats.tls_fail_timeout), (1, 1), "{stats:?}");
}

#[test]
fn unknown_sni_is_refused_when_asked() {
    let origin = http_origin();
    let dir = TempDir::new();
    let ca = Ca::new("ca");
    let a = ca.leaf(&["a.example"], "cert-a", false).write(&dir, "a");
    let proxy = Proxy::start(&format!(
        "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\nreject_unknown_sni = true\n\
         [frontend.tls]\n{}\n[[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        cert_entry(&a, false),
        origin.addr
    ));
    let out = s_client(proxy.addr, &["-servername", "other.example"], b"");
    assert!(!out.contains("subject="), "{out}");
    let out = s_client(proxy.addr, &["-servername", "a.example"], b"GET / HTTP/1.0\r\n\r\n");
    assert!(subject(&out).contains("cert-a"));
    proxy.wait_idle(Duration::from_secs(5));
    assert_eq!(proxy.running().stats().tls_fail_no_cert, 1);
}

#[test]
fn bad_certificate_path_is_a_config_error_with_its_position() {
    let text = "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
                [frontend.tls]\n[[frontend.tls.cert]]\ncert = \"/nonexistent/x.crt\"\nkey = \"/nonexistent/x.key\"\n\
                [[backend]]\nname = \"be\"\n";
    let err = tollgate::config::parse(text, "t.toml").unwrap_err();
    let e = &err.0[0];
    assert_eq!((e.line, e.key.as_str()), (7, "frontend[0].tls.cert[0].cert"), "{err}");
    assert!(e.message.contains("cannot read"), "{err}");
}
