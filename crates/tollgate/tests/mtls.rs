//! Client certificates (`[frontend.tls.client_auth]`) with curl and openssl as clients:
//! required (no certificate: handshake refused; a valid one: through), optional (both
//! through, the identity fields say which), a certificate revoked by a CRL refused, forged
//! identity fields from the client stripped on HTTP/1 and HTTP/2 clients (to HTTP/1 and
//! HTTP/2 servers), the `client_cert` route condition, TCP mode, and a server that requires
//! a client certificate reached with `cert`/`key`. Certificates and the CRL are made here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::http::{http_origin, ok};
use common::tls::{TempDir, path_str, s_client};
use common::*;
use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose, RevocationReason, RevokedCertParams, SerialNumber,
};
use sha2::{Digest, Sha256};

/// A CA that can sign CRLs.
struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    der: Vec<u8>,
}

fn ca(cn: &str) -> TestCa {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, cn);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    TestCa {
        pem: cert.pem(),
        der: cert.der().to_vec(),
        issuer: Issuer::new(params, key),
    }
}

/// A certificate's files and DER.
struct Issued {
    cert: PathBuf,
    key: PathBuf,
    der: Vec<u8>,
    key_der: Vec<u8>,
}

fn issue(ca: &TestCa, dir: &TempDir, name: &str, serial: u64, dns: &[&str], client: bool) -> Issued {
    let mut params = CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(DnType::OrganizationName, "Example");
    params.distinguished_name.push(DnType::CommonName, name);
    params.serial_number = Some(SerialNumber::from(serial));
    params.extended_key_usages = vec![if client {
        ExtendedKeyUsagePurpose::ClientAuth
    } else {
        ExtendedKeyUsagePurpose::ServerAuth
    }];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    let (c, k) = (dir.path(&format!("{name}.crt")), dir.path(&format!("{name}.key")));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    Issued {
        cert: c,
        key: k,
        der: cert.der().to_vec(),
        key_der: key.serialize_der(),
    }
}

/// The clients' CA, its CRL (revoking `mallory`), the proxy's server certificate, and
/// clients: `alice` (valid), `mallory` (revoked), `eve` (another CA's).
struct Pki {
    dir: TempDir,
    ca: TestCa,
    ca_file: PathBuf,
    crl_file: PathBuf,
    server: Issued,
    alice: Issued,
    mallory: Issued,
    eve: Issued,
}

fn pki() -> Pki {
    let dir = TempDir::new();
    let ca = ca("clients-ca");
    let ca_file = dir.path("ca.pem");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let server = issue(&ca, &dir, "a.example", 1, &["a.example"], false);
    let alice = issue(&ca, &dir, "alice", 10, &[], true);
    let mallory = issue(&ca, &dir, "mallory", 11, &[], true);
    let eve = issue(&self::ca("other-ca"), &dir, "eve", 12, &[], true);
    let crl = CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2024, 1, 1),
        next_update: rcgen::date_time_ymd(2099, 1, 1),
        crl_number: SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: vec![RevokedCertParams {
            serial_number: SerialNumber::from(11u64),
            revocation_time: rcgen::date_time_ymd(2024, 1, 1),
            reason_code: Some(RevocationReason::KeyCompromise),
            invalidity_date: None,
        }],
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(&ca.issuer)
    .unwrap();
    let crl_file = dir.path("revoked.crl");
    std::fs::write(&crl_file, crl.pem().unwrap()).unwrap();
    Pki {
        dir,
        ca,
        ca_file,
        crl_file,
        server,
        alice,
        mallory,
        eve,
    }
}

/// An http-mode TLS frontend (ALPN h2 and http/1.1) with `client_auth` (TOML lines under
/// `[frontend.tls.client_auth]`) and `routes` before it, to backend `be` at `origin`.
fn http_config(p: &Pki, client_auth: &str, routes: &str, origin: SocketAddr, backend: &str) -> String {
    format!(
        "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         {routes}\n\
         [frontend.tls]\nalpn = [\"h2\", \"http/1.1\"]\n\
         [frontend.tls.client_auth]\nca_file = \"{}\"\n{client_auth}\n\
         [[frontend.tls.cert]]\ncert = \"{}\"\nkey = \"{}\"\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n{backend}\n\
         [[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n",
        path_str(&p.ca_file),
        path_str(&p.server.cert),
        path_str(&p.server.key),
    )
}

/// curl to `https://a.example:PORT{path}` trusting the CA, as `who` (none: no certificate),
/// HTTP/2 if `h2`. (exit code, body, stderr).
fn curl(
    p: &Pki,
    addr: SocketAddr,
    who: Option<&Issued>,
    h2: bool,
    path: &str,
    headers: &[&str],
) -> (i32, String, String) {
    let port = addr.port();
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "10",
        "--cacert",
        &path_str(&p.ca_file),
        "--resolve",
    ])
    .arg(format!("a.example:{port}:127.0.0.1"))
    .arg(if h2 { "--http2" } else { "--http1.1" });
    if let Some(c) = who {
        cmd.arg("--cert").arg(&c.cert).arg("--key").arg(&c.key);
    }
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.arg(format!("https://a.example:{port}{path}")).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn hex_sha256(der: &[u8]) -> String {
    Sha256::digest(der).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn required_refuses_clients_without_a_valid_certificate() {
    let p = pki();
    let origin = http_origin(|_| ok("hello"));
    let crl = format!("crl_file = \"{}\"", path_str(&p.crl_file));
    let proxy = Proxy::start(&http_config(&p, &crl, "", origin.addr, ""));
    for h2 in [false, true] {
        let (code, body, err) = curl(&p, proxy.addr, None, h2, "/", &[]);
        assert!(
            code != 0 && body.is_empty(),
            "no certificate (h2 {h2}): {code} {body} {err}"
        );
        let (code, body, err) = curl(&p, proxy.addr, Some(&p.eve), h2, "/", &[]);
        assert!(
            code != 0 && body.is_empty(),
            "another CA's (h2 {h2}): {code} {body} {err}"
        );
        let (code, body, err) = curl(&p, proxy.addr, Some(&p.mallory), h2, "/", &[]);
        assert!(code != 0 && body.is_empty(), "revoked (h2 {h2}): {code} {body} {err}");
        let (code, body, err) = curl(&p, proxy.addr, Some(&p.alice), h2, "/", &[]);
        assert_eq!((code, body.as_str()), (0, "hello"), "alice (h2 {h2}): {err}");
    }
    let reqs = origin.requests();
    assert_eq!(reqs.len(), 2, "only alice's requests got through");
    for r in &reqs {
        assert_eq!(r.header("x-client-cert-subject"), Some("CN=alice,O=Example"), "{r:?}");
        assert_eq!(
            r.header("x-client-cert-fingerprint"),
            Some(hex_sha256(&p.alice.der).as_str())
        );
        assert_eq!(r.header("x-client-cert-verified"), Some("SUCCESS"));
    }
    proxy.wait_idle(Duration::from_secs(10));
    let stats = proxy.running().stats();
    assert_eq!(stats.tls_fail_client_cert, 6, "{stats:?}");
    assert_eq!(stats.tls_handshakes_full + stats.tls_handshakes_resumed, 2, "{stats:?}");
}

#[test]
fn without_the_crl_the_revoked_certificate_passes() {
    // The same certificate the CRL refuses above: it is the CRL that refuses it.
    let p = pki();
    let origin = http_origin(|_| ok("hello"));
    let proxy = Proxy::start(&http_config(&p, "", "", origin.addr, ""));
    let (code, body, err) = curl(&p, proxy.addr, Some(&p.mallory), false, "/", &[]);
    assert_eq!((code, body.as_str()), (0, "hello"), "{err}");
    drop(proxy);
    // A DER CRL works as well as a PEM one.
    let der = p.dir.path("revoked.der");
    let pem = std::fs::read(&p.crl_file).unwrap();
    let crl = rustls::pki_types::pem::PemObject::from_pem_slice(&pem)
        .map(|c: rustls::pki_types::CertificateRevocationListDer<'static>| c.to_vec())
        .unwrap();
    std::fs::write(&der, crl).unwrap();
    let extra = format!("crl_file = [\"{}\"]", path_str(&der));
    let proxy = Proxy::start(&http_config(&p, &extra, "", origin.addr, ""));
    let (code, _, _) = curl(&p, proxy.addr, Some(&p.mallory), false, "/", &[]);
    assert_ne!(code, 0);
    let (code, body, err) = curl(&p, proxy.addr, Some(&p.alice), false, "/", &[]);
    assert_eq!((code, body.as_str()), (0, "hello"), "{err}");
}

/// Forged identity fields every client request carries.
const FORGED: [&str; 3] = [
    "X-Client-Cert-Subject: CN=admin",
    "X-Client-Cert-Fingerprint: 00",
    "X-Client-Cert-Verified: SUCCESS",
];

#[test]
fn optional_lets_both_through_and_forged_fields_never_reach_the_server() {
    let p = pki();
    let origin = http_origin(|_| ok("hello"));
    let proxy = Proxy::start(&http_config(&p, "mode = \"optional\"", "", origin.addr, ""));
    for h2 in [false, true] {
        let (code, body, err) = curl(&p, proxy.addr, None, h2, "/", &FORGED);
        assert_eq!((code, body.as_str()), (0, "hello"), "anonymous (h2 {h2}): {err}");
        let (code, body, err) = curl(&p, proxy.addr, Some(&p.alice), h2, "/", &FORGED);
        assert_eq!((code, body.as_str()), (0, "hello"), "alice (h2 {h2}): {err}");
        // A certificate that does not verify still fails the handshake.
        let (code, _, _) = curl(&p, proxy.addr, Some(&p.eve), h2, "/", &[]);
        assert_ne!(code, 0, "eve (h2 {h2})");
    }
    let reqs = origin.requests();
    assert_eq!(reqs.len(), 4);
    for (i, r) in reqs.iter().enumerate() {
        let count = |name: &str| r.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).count();
        if i % 2 == 0 {
            assert_eq!(r.header("x-client-cert-verified"), Some("NONE"), "{r:?}");
            assert_eq!(
                count("x-client-cert-subject") + count("x-client-cert-fingerprint"),
                0,
                "{r:?}"
            );
        } else {
            assert_eq!(r.header("x-client-cert-verified"), Some("SUCCESS"), "{r:?}");
            assert_eq!(r.header("x-client-cert-subject"), Some("CN=alice,O=Example"), "{r:?}");
            assert_eq!(
                r.header("x-client-cert-fingerprint"),
                Some(hex_sha256(&p.alice.der).as_str())
            );
            assert_eq!(count("x-client-cert-subject"), 1, "{r:?}");
        }
        assert_eq!(count("x-client-cert-verified"), 1, "{r:?}");
    }
}

#[test]
fn forged_fields_are_stripped_towards_http2_servers_and_names_are_configurable() {
    let p = pki();
    let origin = common::h2_origin::h2_origin(Default::default());
    let headers = "mode = \"optional\"\nheaders = { subject = \"X-Subject\", verified = \"X-Verified\" }";
    let proxy = Proxy::start(&http_config(&p, headers, "", origin.addr, "proto = \"h2\""));
    let forged = [
        "X-Subject: CN=admin",
        "X-Verified: SUCCESS",
        "X-Client-Cert-Fingerprint: kept",
    ];
    for h2 in [false, true] {
        let (code, body, err) = curl(&p, proxy.addr, None, h2, "/headers", &forged);
        assert_eq!(code, 0, "{err}");
        assert!(body.contains("x-verified: NONE\n"), "(h2 {h2}) {body}");
        assert!(!body.contains("x-subject"), "(h2 {h2}) {body}");
        assert!(!body.contains("SUCCESS"), "(h2 {h2}) {body}");
        // Not configured: not the proxy's, passed on as the client sent it.
        assert!(body.contains("x-client-cert-fingerprint: kept\n"), "(h2 {h2}) {body}");
        let (code, body, err) = curl(&p, proxy.addr, Some(&p.alice), h2, "/headers", &forged);
        assert_eq!(code, 0, "{err}");
        assert!(body.contains("x-verified: SUCCESS\n"), "(h2 {h2}) {body}");
        assert!(body.contains("x-subject: CN=alice,O=Example\n"), "(h2 {h2}) {body}");
        assert!(!body.contains("CN=admin"), "(h2 {h2}) {body}");
    }
}

#[test]
fn the_client_cert_route_condition() {
    let p = pki();
    let origin = http_origin(|_| ok("backend"));
    let routes = "[[frontend.route]]\nclient_cert = \"absent\"\npath_prefix = \"/private\"\n\
                  return = { status = 403, body = \"certificate needed\\n\" }\n\
                  [[frontend.route]]\nclient_cert = \"verified\"\npath = \"/who\"\n\
                  return = { status = 200, body = \"verified\\n\" }\n";
    let config = http_config(&p, "mode = \"optional\"", routes, origin.addr, "");
    let proxy = Proxy::start(&config);
    for h2 in [false, true] {
        let (_, body, _) = curl(&p, proxy.addr, None, h2, "/private/x", &[]);
        assert_eq!(body, "certificate needed\n", "(h2 {h2})");
        let (_, body, _) = curl(&p, proxy.addr, Some(&p.alice), h2, "/private/x", &[]);
        assert_eq!(body, "backend", "(h2 {h2})");
        let (_, body, _) = curl(&p, proxy.addr, Some(&p.alice), h2, "/who", &[]);
        assert_eq!(body, "verified\n", "(h2 {h2})");
        let (_, body, _) = curl(&p, proxy.addr, None, h2, "/who", &[]);
        assert_eq!(body, "backend", "(h2 {h2})");
    }
    // `tollgate explain` reads the condition, with and without --client-cert.
    let file = p.dir.path("explain.toml");
    std::fs::write(&file, &config).unwrap();
    let explain = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["explain", "-c"])
            .arg(&file)
            .args(extra)
            .arg("https://a.example/private/x")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let anonymous = explain(&[]);
    assert!(anonymous.contains("403"), "{anonymous}");
    let verified = explain(&["--client-cert"]);
    assert!(
        verified.contains("a verified client certificate was presented") && verified.contains("backend be"),
        "{verified}"
    );
    // Without `[frontend.tls.client_auth]` the condition is refused.
    let section = format!(
        "[frontend.tls.client_auth]\nca_file = \"{}\"\nmode = \"optional\"\n",
        path_str(&p.ca_file)
    );
    assert!(config.contains(&section));
    let plain = config.replace(&section, "");
    let err = tollgate::config::parse(&plain, "t.toml").unwrap_err().to_string();
    assert!(
        err.contains("`client_cert` needs `[frontend.tls.client_auth]`"),
        "{err}"
    );
}

#[test]
fn tcp_mode_terminates_with_client_certificates() {
    let p = pki();
    // Answers the first line and closes (s_client waits for the close).
    let origin = origin(|s: &mut TcpStream| {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\n") && s.read(&mut b).is_ok_and(|n| n == 1) {
            line.push(b[0]);
        }
        let _ = s.write_all(&line);
    });
    let config = format!(
        "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
         [frontend.tls]\n[frontend.tls.client_auth]\nca_file = \"{}\"\ncrl_file = \"{}\"\n\
         [[frontend.tls.cert]]\ncert = \"{}\"\nkey = \"{}\"\n\
         [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        path_str(&p.ca_file),
        path_str(&p.crl_file),
        path_str(&p.server.cert),
        path_str(&p.server.key),
        origin.addr
    );
    let proxy = Proxy::start(&config);
    let as_who = |who: Option<&Issued>| {
        let mut args = vec!["-servername".to_string(), "a.example".into()];
        if let Some(c) = who {
            args.extend(["-cert".into(), path_str(&c.cert), "-key".into(), path_str(&c.key)]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        s_client(proxy.addr, &args, b"ping-through\n")
    };
    let out = as_who(Some(&p.alice));
    assert!(out.contains("ping-through"), "alice: echoed\n{out}");
    for (who, c) in [("nobody", None), ("mallory", Some(&p.mallory))] {
        let out = as_who(c);
        assert!(!out.lines().any(|l| l == "ping-through"), "{who}: refused\n{out}");
    }
    // Headers have no meaning in TCP mode.
    let bad = config.replace("crl_file =", "headers = { verified = \"X-V\" }\ncrl_file =");
    let err = tollgate::config::parse(&bad, "t.toml").unwrap_err().to_string();
    assert!(err.contains("`headers` needs an http-mode frontend"), "{err}");
}

#[test]
fn bad_client_auth_sections_are_refused() {
    let p = pki();
    let origin = http_origin(|_| ok("x"));
    for (extra, want) in [
        ("mode = \"sometimes\"", "unknown variant `sometimes`"),
        ("crl_file = \"/nonexistent.crl\"", "cannot read /nonexistent.crl"),
        (
            "headers = { subject = \"Bad Name\" }",
            "`Bad Name` is not a header name",
        ),
        (
            "headers = { subject = \"X-Forwarded-For\" }",
            "a field the proxy (or another key) writes",
        ),
        (
            "headers = { subject = \"X-A\", verified = \"x-a\" }",
            "`x-a` is named twice",
        ),
        ("headers = { issuer = \"X-A\" }", "unknown field `issuer`"),
    ] {
        let err = tollgate::config::parse(&http_config(&p, extra, "", origin.addr, ""), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{extra}: {err}");
    }
    let missing = http_config(&p, "", "", origin.addr, "").replace(&path_str(&p.ca_file), "/nonexistent-ca.pem");
    let err = tollgate::config::parse(&missing, "t.toml").unwrap_err().to_string();
    assert!(err.contains("frontend[0].tls.client_auth.ca_file"), "{err}");
}

/// A TLS origin requiring a client certificate from `ca`: answers (an HTTP response) who
/// the client's certificate says it is, then closes.
fn mtls_origin(server: &Issued, ca: &TestCa) -> SocketAddr {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca.der.clone())).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server.key_der.clone()));
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![CertificateDer::from(server.der.clone())], key)
        .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let config = Arc::new(config);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut sock) = stream else { continue };
            let config = Arc::clone(&config);
            std::thread::spawn(move || {
                let Ok(mut conn) = rustls::ServerConnection::new(config) else {
                    return;
                };
                let _ = sock.set_read_timeout(Some(Duration::from_secs(10)));
                while conn.is_handshaking() {
                    if conn.complete_io(&mut sock).is_err() {
                        return;
                    }
                }
                let who = conn
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| {
                        if c.windows(5).any(|w| w == b"alice") {
                            "alice"
                        } else {
                            "someone"
                        }
                    })
                    .unwrap_or("nobody");
                let mut tls = rustls::Stream::new(&mut conn, &mut sock);
                let body = format!("hello {who}\n");
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(reply.as_bytes());
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    addr
}

#[test]
fn a_server_requiring_a_client_certificate_is_reached_with_cert_and_key() {
    let p = pki();
    let origin = mtls_origin(&p.server, &p.ca);
    let config = |client: &str| {
        format!(
            "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
             [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n\
             tls = true\nca_file = \"{}\"\nsni = \"a.example\"\n{client}\n",
            path_str(&p.ca_file)
        )
    };
    let ask = |addr: SocketAddr| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out
    };
    let with = format!(
        "cert = \"{}\"\nkey = \"{}\"",
        path_str(&p.alice.cert),
        path_str(&p.alice.key)
    );
    let proxy = Proxy::start(&config(&with));
    assert!(ask(proxy.addr).ends_with("\r\n\r\nhello alice\n"));
    drop(proxy);
    let proxy = Proxy::start(&config(""));
    assert_eq!(ask(proxy.addr), "", "no certificate: the server refuses the handshake");
    drop(proxy);
    // HTTP health checks over TLS present the certificate too.
    let checked = |client: &str| {
        format!(
            "{}\n[backend.health]\ntype = \"http\"\ninterval = \"100ms\"\nrise = 1\nfall = 1\n",
            config(client)
                .replace("[[frontend]]", "[[frontend]]\nmode = \"http\"")
                .replace(
                    "[[backend]]\nname = \"be\"\n",
                    "[[backend]]\nname = \"be\"\nmode = \"http\"\n"
                )
        )
    };
    for (client, want) in [(with.as_str(), "up"), ("", "down")] {
        let proxy = Proxy::start(&checked(client));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let view = proxy
                .running()
                .show_servers(None)
                .into_iter()
                .find(|v| v.name == "o")
                .unwrap();
            if view.oper.as_str() == want {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{client:?}: {:?}", view.oper);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // `cert` needs its `key` (and `tls = true`).
    let half = config(&format!("cert = \"{}\"", path_str(&p.alice.cert)));
    let err = tollgate::config::parse(&half, "t.toml").unwrap_err().to_string();
    assert!(err.contains("needs both `cert` and `key`"), "{err}");
    let plain = config(&with).replace("tls = true\n", "").replace(
        &format!("ca_file = \"{}\"\nsni = \"a.example\"\n", path_str(&p.ca_file)),
        "",
    );
    let err = tollgate::config::parse(&plain, "t.toml").unwrap_err().to_string();
    assert!(err.contains("`cert` needs `tls = true`"), "{err}");
}

/// Every named log field, a header, a cookie, the host and a response field, against known
/// requests from curl over HTTP/1.1 and HTTP/2 with a client certificate: what each field
/// must say, checked one by one.
#[test]
fn every_log_field_is_what_the_request_was_over_http1_and_http2() {
    let p = pki();
    let origin = http_origin(|_| {
        common::http::Reply::Bytes(b"HTTP/1.1 200 OK\r\nX-Served-By: o1\r\nContent-Length: 5\r\n\r\nhello".to_vec())
    });
    let log = p.dir.path("access.log");
    let fields = [
        "time",
        "client",
        "client_ip",
        "client_port",
        "frontend",
        "backend",
        "server",
        "server_address",
        "route",
        "method",
        "path",
        "query",
        "scheme",
        "version",
        "status",
        "bytes_to_server",
        "bytes_to_client",
        "head_ms",
        "queued_ms",
        "connected_ms",
        "response_ms",
        "total_ms",
        "retries",
        "termination",
        "termination_code",
        "tls_version",
        "tls_cipher",
        "sni",
        "client_cert_subject",
        "request_id",
        "host",
        "user_agent",
        "referer",
        "header.x-note",
        "cookie.sid",
        "response_header.x-served-by",
    ];
    let list: Vec<String> = fields.iter().map(|f| format!("\"{f}\"")).collect();
    let config = format!(
        "[log]\naccess = \"{}\"\nfields = [{}]\n{}",
        path_str(&log),
        list.join(", "),
        http_config(
            &p,
            "",
            "request_id = {}\n[[frontend.route]]\nname = \"api\"\npath_prefix = \"/api/\"\nbackend = \"be\"",
            origin.addr,
            "",
        )
    );
    let proxy = Proxy::start(&config);
    let headers = [
        "User-Agent: t-agent/1",
        "Referer: https://r.example/",
        "X-Note: a \"quoted\" note",
        "Cookie: a=1; sid=s1",
    ];
    for h2 in [false, true] {
        let (code, body, err) = curl(&p, proxy.addr, Some(&p.alice), h2, "/api/x?k=v", &headers);
        assert_eq!((code, body.as_str()), (0, "hello"), "h2 {h2}: {err}");
    }
    proxy.wait_idle(Duration::from_secs(5));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 2 || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let raw: Vec<&str> = lines.lines().collect();
    let lines: Vec<serde_json::Value> = raw.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    for l in &raw {
        let at: Vec<usize> = fields.iter().map(|f| l.find(&format!("\"{f}\":")).unwrap()).collect();
        assert!(
            at.windows(2).all(|w| w[0] < w[1]),
            "the keys, in the order written: {l}"
        );
    }
    let port = proxy.addr.port();
    let sent_ids: Vec<String> = origin
        .requests()
        .iter()
        .map(|r| r.header("x-request-id").unwrap().to_string())
        .collect();
    // Two connections, maybe two worker threads: the lines may reach the file in either order.
    for (version, id) in [("HTTP/1.1", &sent_ids[0]), ("HTTP/2.0", &sent_ids[1])] {
        let line = lines.iter().find(|l| l["version"] == version).unwrap();
        assert_eq!(line.as_object().unwrap().len(), fields.len(), "{line}");
        let client = line["client"].as_str().unwrap();
        assert_eq!(client, format!("127.0.0.1:{}", line["client_port"]), "{line}");
        let want = serde_json::json!({
            "client_ip": "127.0.0.1", "frontend": "fe", "backend": "be", "server": "o",
            "server_address": origin.addr.to_string(), "route": "api", "method": "GET",
            "path": "/api/x?k=v", "query": "k=v", "scheme": "https", "version": version, "status": 200,
            "retries": 0, "termination": "normal", "termination_code": "--", "tls_version": "TLSv1.3",
            "sni": "a.example", "client_cert_subject": "CN=alice,O=Example", "request_id": id,
            "host": format!("a.example:{port}"), "user_agent": "t-agent/1", "referer": "https://r.example/",
            "header.x-note": "a \"quoted\" note", "cookie.sid": "s1", "response_header.x-served-by": "o1",
        });
        for (k, v) in want.as_object().unwrap() {
            assert_eq!(&line[k], v, "{k} ({version}): {line}");
        }
        let cipher = line["tls_cipher"].as_str().unwrap();
        assert!(
            cipher.starts_with("TLS_") && cipher.contains("_SHA"),
            "an IANA suite name: {cipher}"
        );
        assert!(line["time"].as_str().unwrap().ends_with('Z'));
        assert!(line["bytes_to_server"].as_u64().unwrap() > 0 && line["bytes_to_client"].as_u64().unwrap() > 5);
        let steps: Vec<f64> = ["head_ms", "queued_ms", "connected_ms", "response_ms", "total_ms"]
            .iter()
            .map(|k| line[k].as_f64().unwrap_or_else(|| panic!("{k}: {line}")))
            .collect();
        assert!(steps.windows(2).all(|w| w[0] <= w[1]), "timings move forward: {line}");
    }
}
