//! The TLS policy (`ciphersuites`, `ciphers`, `curves`, `min_version`, `max_version`):
//! unknown names refused by `tollgate check` with their position; only the configured
//! suites, groups and versions negotiated (openssl s_client offering an excluded one fails,
//! an included one is the one reported); the post-quantum hybrid negotiated with a client
//! that asks for it; the negotiated-group counters in `ctl show info` and `/metrics`; the
//! policy towards a TLS server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::tls::*;
use common::*;

/// A TCP-mode TLS frontend with `tls_extra` in `[frontend.tls]`, one ECDSA certificate for
/// `a.example`, relaying to an echo origin.
fn config(dir: &TempDir, ca: &Ca, origin: SocketAddr, tls_extra: &str, global: &str) -> String {
    let leaf = ca.leaf(&["a.example"], "cert-a", false).write(dir, "a");
    format!(
        "{global}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
         [frontend.tls]\n{tls_extra}\n{}\n[[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n",
        cert_entry(&leaf, false),
    )
}

fn check(dir: &TempDir, text: &str) -> (i32, String) {
    let path = dir.path("policy.toml");
    std::fs::write(&path, text).unwrap();
    let (code, out, err) = master_support::check(&path);
    (code.unwrap_or(-1), out + &err)
}

#[test]
fn unknown_names_are_refused_at_load_with_their_position() {
    let dir = TempDir::new();
    let ca = Ca::new("policy-ca");
    let origin = origin(echo);
    let extra = "ciphersuites = [\"TLS13_AES_128_GCM_SHA256\", \"TLS13_AES_512_OCB\"]\n\
                 ciphers = [\"ECDHE-RSA-AES128-SHA\"]\n\
                 curves = [\"x25519\", \"X448\"]";
    let (code, out) = check(&dir, &config(&dir, &ca, origin.addr, extra, ""));
    assert_ne!(code, 0, "{out}");
    let file = path_str(&dir.path("policy.toml"));
    // The frontend starts at line 2, `[frontend.tls]` at 6: its keys are on 7, 8, 9.
    for (line_col, key, text) in [
        (
            "7:45",
            "frontend[0].tls.ciphersuites[1]",
            "unknown TLS 1.3 cipher suite `TLS13_AES_512_OCB`; valid: TLS13_AES_256_GCM_SHA384, TLS13_AES_128_GCM_SHA256, TLS13_CHACHA20_POLY1305_SHA256",
        ),
        (
            "8:12",
            "frontend[0].tls.ciphers[0]",
            "unknown TLS 1.2 cipher suite `ECDHE-RSA-AES128-SHA`; valid: TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        ),
        (
            "9:21",
            "frontend[0].tls.curves[1]",
            "unknown key-exchange group `X448`; valid: X25519, secp256r1, secp384r1, X25519MLKEM768",
        ),
    ] {
        let want = format!("{file}:{line_col}: {text}");
        assert!(out.contains(&want), "want {want:?} in:\n{out}");
        assert!(out.contains(&format!("(key `{key}`)")), "{key} in:\n{out}");
    }

    // A suite of the other version, an empty list, and TLS 1.2 left without a classic group.
    let extra = "ciphers = [\"TLS13_AES_128_GCM_SHA256\"]\nciphersuites = []\ncurves = [\"X25519MLKEM768\"]";
    let (code, out) = check(&dir, &config(&dir, &ca, origin.addr, extra, ""));
    assert_ne!(code, 0, "{out}");
    for text in [
        "`TLS13_AES_128_GCM_SHA256` is a TLS 1.3 suite: list it in `ciphersuites`",
        "must list at least one TLS 1.3 suite",
        "TLS 1.2 needs one of X25519, secp256r1, secp384r1",
    ] {
        assert!(out.contains(text), "{text:?} in:\n{out}");
    }
    // Versions: a bad one, an inverted range, suites of a version turned off.
    let extra = "min_version = \"1.3\"\nmax_version = \"1.2\"\nciphers = [\"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\"]";
    let (code, out) = check(&dir, &config(&dir, &ca, origin.addr, extra, ""));
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("`max_version` is older than `min_version`"), "{out}");
    assert!(out.contains("TLS 1.2 is off"), "{out}");
    // ... and only that: no TLS 1.2 client exists to fail for want of a suite.
    let extra = "min_version = \"1.3\"\nciphers = [\"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\"]";
    let (code, out) = check(&dir, &config(&dir, &ca, origin.addr, extra, ""));
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("TLS 1.2 is off"), "{out}");
    assert!(!out.contains("no suite here works"), "a false error: {out}");
    // Our certificate is ECDSA: RSA suites alone would fail every TLS 1.2 client.
    let extra = "ciphers = [\"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\"]";
    let (code, out) = check(&dir, &config(&dir, &ca, origin.addr, extra, ""));
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("no suite here works with the ECDSA key of cert[0]"),
        "{out}"
    );
    // Ordered certificates have ECDSA keys too.
    let acme =
        format!("{extra}\n[[frontend.tls.acme]]\ndomains = [\"a.example\"]\ndirectory = \"https://127.0.0.1:1/dir\"");
    let global = format!("[global]\nstate_dir = \"{}\"", path_str(&dir.path("state")));
    let (code, out) = check(&dir, &config(&dir, &ca, origin.addr, &acme, &global));
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("no suite here works with the ECDSA key of the ACME certificates"),
        "{out}"
    );
    let (code, out) = check(&dir, &config(&dir, &ca, origin.addr, "max_version = \"1.4\"", ""));
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("`1.4` is not \"1.2\" or \"1.3\""), "{out}");

    // On a TLS server too, and only with `tls = true`.
    let server = |extra: &str| {
        format!(
            "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
             [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n{extra}\n",
            origin.addr
        )
    };
    let (code, out) = check(&dir, &server("tls = true\nverify = false\ncurves = [\"P-521\"]"));
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("unknown key-exchange group `P-521`"), "{out}");
    assert!(out.contains("(key `backend[0].server[0].curves[0]`)"), "{out}");
    let (code, out) = check(&dir, &server("curves = [\"X25519\"]"));
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("`curves` needs `tls = true`"), "{out}");
    // And a good policy passes, with any case and the OpenSSL spellings.
    let good = "min_version = \"1.2\"\nmax_version = \"1.3\"\nciphersuites = [\"tls_aes_128_gcm_sha256\"]\n\
                ciphers = [\"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\"]\ncurves = [\"P-256\", \"x25519mlkem768\"]";
    let (code, out) = check(&dir, &config(&dir, &ca, origin.addr, good, ""));
    assert_eq!(code, 0, "{out}");
}

/// `s_client` output: whether the handshake completed, and the cipher it reports.
fn handshake(addr: SocketAddr, args: &[&str]) -> (bool, String) {
    let mut all = vec!["-servername", "a.example"];
    all.extend_from_slice(args);
    let out = s_client(addr, &all, b"");
    let cipher = out
        .lines()
        .find_map(|l| l.split_once("Cipher is ").map(|(_, c)| c.trim().to_string()))
        .unwrap_or_default();
    // "Cipher is (NONE)" when the handshake failed.
    (!cipher.is_empty() && cipher != "(NONE)", out)
}

#[test]
fn only_the_configured_suites_and_groups_are_negotiated() {
    let dir = TempDir::new();
    let ca = Ca::new("policy-ca");
    let origin = origin(echo);
    let extra = "ciphersuites = [\"TLS13_AES_256_GCM_SHA384\"]\n\
                 ciphers = [\"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\"]\n\
                 curves = [\"secp384r1\"]";
    let proxy = Proxy::start(&config(&dir, &ca, origin.addr, extra, ""));
    let addr = proxy.addr;

    let (ok, out) = handshake(addr, &["-tls1_3", "-ciphersuites", "TLS_AES_128_GCM_SHA256"]);
    assert!(!ok, "an excluded TLS 1.3 suite:\n{out}");
    let (ok, out) = handshake(
        addr,
        &[
            "-tls1_3",
            "-ciphersuites",
            "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384",
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains("Cipher is TLS_AES_256_GCM_SHA384"), "{out}");

    let (ok, out) = handshake(addr, &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384"]);
    assert!(!ok, "an excluded TLS 1.2 suite:\n{out}");
    let (ok, out) = handshake(addr, &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"]);
    assert!(ok, "{out}");
    assert!(out.contains("Cipher is ECDHE-ECDSA-AES128-GCM-SHA256"), "{out}");

    for version in ["-tls1_3", "-tls1_2"] {
        let (ok, out) = handshake(addr, &[version, "-groups", "X25519:P-256"]);
        assert!(!ok, "{version} with excluded groups only:\n{out}");
        // P-256 listed too: in TLS 1.2 the list also says which curves the client takes an
        // ECDSA certificate on (ours is P-256).
        let (ok, out) = handshake(addr, &[version, "-groups", "X25519:P-384:P-256"]);
        assert!(ok, "{version}: {out}");
        assert!(out.contains("Server Temp Key: ECDH, secp384r1"), "{version}: {out}");
    }
    proxy.wait_idle(Duration::from_secs(10));
    let stats = proxy.running().stats();
    assert_eq!(stats.tls_handshakes_full, 4, "{stats:?}");
    assert_eq!(
        (
            stats.tls_group_secp384r1,
            stats.tls_group_x25519,
            stats.tls_group_secp256r1
        ),
        (4, 0, 0),
        "{stats:?}"
    );
    assert_eq!((stats.tls_version_13, stats.tls_version_12), (2, 2), "{stats:?}");
    assert_eq!(
        (
            stats.tls_suite_aes_256_gcm_sha384,
            stats.tls_suite_ecdhe_ecdsa_aes_128_gcm
        ),
        (2, 2),
        "{stats:?}"
    );
    assert_eq!(stats.tls_fail_protocol, 4, "the refused handshakes: {stats:?}");
}

#[test]
fn versions_follow_min_and_max() {
    let dir = TempDir::new();
    let ca = Ca::new("policy-ca");
    let origin = origin(echo);
    let proxy = Proxy::start(&config(&dir, &ca, origin.addr, "max_version = \"1.2\"", ""));
    assert!(!handshake(proxy.addr, &["-tls1_3"]).0);
    let (ok, out) = handshake(proxy.addr, &[]);
    assert!(ok && out.contains("Protocol  : TLSv1.2"), "{out}");
    drop(proxy);
    let proxy = Proxy::start(&config(&dir, &ca, origin.addr, "min_version = \"1.3\"", ""));
    assert!(!handshake(proxy.addr, &["-tls1_2"]).0);
    assert!(handshake(proxy.addr, &["-tls1_3"]).0);
}

/// A rustls client offering only `groups`, trusting `ca`; returns the group it got.
fn rustls_group(
    addr: SocketAddr,
    ca: &Ca,
    groups: Vec<&'static dyn rustls::crypto::SupportedKxGroup>,
) -> Option<String> {
    let provider = rustls::crypto::CryptoProvider {
        kx_groups: groups,
        ..rustls::crypto::aws_lc_rs::default_provider()
    };
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), "a.example".try_into().unwrap()).unwrap();
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    while conn.is_handshaking() {
        if conn.complete_io(&mut sock).is_err() {
            return None;
        }
    }
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    tls.write_all(b"ping").unwrap();
    let mut back = [0u8; 4];
    tls.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"ping");
    conn.negotiated_key_exchange_group().map(|g| format!("{:?}", g.name()))
}

#[test]
fn the_hybrid_is_in_the_default_and_can_be_turned_off() {
    use rustls::crypto::aws_lc_rs::kx_group::{X25519, X25519MLKEM768};
    let dir = TempDir::new();
    let ca = Ca::new("policy-ca");
    let origin = origin(echo);
    let proxy = Proxy::start(&config(&dir, &ca, origin.addr, "", ""));
    assert_eq!(
        rustls_group(proxy.addr, &ca, vec![X25519MLKEM768, X25519]).as_deref(),
        Some("X25519MLKEM768")
    );
    // The client's preference decides: one that puts X25519 first gets it.
    assert_eq!(
        rustls_group(proxy.addr, &ca, vec![X25519, X25519MLKEM768]).as_deref(),
        Some("X25519")
    );
    let stats = proxy.running().stats();
    assert_eq!(
        (stats.tls_group_x25519mlkem768, stats.tls_group_x25519),
        (1, 1),
        "{stats:?}"
    );
    drop(proxy);
    // Mozilla intermediate exactly: the hybrid is not offered, the client falls back.
    let classic = "curves = [\"X25519\", \"secp256r1\", \"secp384r1\"]";
    let proxy = Proxy::start(&config(&dir, &ca, origin.addr, classic, ""));
    assert_eq!(
        rustls_group(proxy.addr, &ca, vec![X25519MLKEM768, X25519]).as_deref(),
        Some("X25519")
    );
    assert_eq!(rustls_group(proxy.addr, &ca, vec![X25519MLKEM768]), None);
}

#[test]
fn negotiated_groups_show_in_ctl_and_metrics() {
    use master_support::{Master, TempDir as MasterDir, global, logged_addr};
    let dir = TempDir::new();
    let ca = Ca::new("policy-ca");
    let origin = origin(echo);
    let mdir = MasterDir::new("tls-policy");
    let global = format!("{}\n[admin]\nbind = \"127.0.0.1:0\"\n", global(&mdir.0, ""));
    let master = Master::start(mdir, &config(&dir, &ca, origin.addr, "", &global), &[]);
    for groups in ["P-384", "P-384", "X25519"] {
        let (ok, out) = handshake(master.addr, &["-groups", groups]);
        assert!(ok, "{out}");
    }
    // The server counts when the client's Finished arrives, maybe after s_client left.
    let wanted = ["tls_group_secp384r1=2", "tls_group_x25519=1", "tls_version_13=3"];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = master.ctl_ok(&["show", "info"]);
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|w| !info.split_whitespace().any(|word| word == *w))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "{missing:?} in:\n{info}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let line = master
        .wait_log(|l| l.contains("admin endpoint ready"), Duration::from_secs(10))
        .unwrap();
    let admin = logged_addr(&line);
    let deadline = Instant::now() + Duration::from_secs(5);
    let body = loop {
        let mut c = TcpStream::connect(admin).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut body = String::new();
        c.read_to_string(&mut body).unwrap();
        if body.contains("tollgate_tls_key_exchange_total") || Instant::now() > deadline {
            break body;
        }
    };
    let sample = |labels: &str| {
        body.lines()
            .find(|l| l.starts_with("tollgate_tls_key_exchange_total{") && l.contains(labels))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_string)
    };
    assert_eq!(sample("group=\"secp384r1\"").as_deref(), Some("2"), "{body}");
    assert_eq!(sample("group=\"X25519\"").as_deref(), Some("1"), "{body}");
    assert_eq!(sample("group=\"X25519MLKEM768\"").as_deref(), Some("0"), "{body}");
    assert!(
        body.lines()
            .any(|l| l.starts_with("tollgate_tls_cipher_suite_total{") && l.ends_with(" 3")),
        "{body}"
    );
}

#[test]
fn the_policy_applies_to_tls_servers() {
    let ca = Ca::new("origin-ca");
    let leaf = ca.leaf(&["origin.example"], "origin", false);
    let tls_origin_addr = tls_origin(leaf.server_config(), |_, _| b"from-origin".to_vec());
    let start = |extra: &str| {
        let cfg = format!(
            "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
             [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{tls_origin_addr}\"\n\
             tls = true\nverify = false\n{extra}\n"
        );
        Proxy::start(&cfg)
    };
    let ask = |addr: SocketAddr| {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"hello").unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        out
    };
    // The origin (rustls defaults) speaks TLS 1.3 with X25519: a policy that leaves it
    // nothing in common fails the handshake, a matching one gets through.
    let proxy = start("min_version = \"1.3\"\ncurves = [\"secp384r1\"]");
    assert_eq!(ask(proxy.addr), b"from-origin");
    drop(proxy);
    let proxy = start("ciphersuites = [\"TLS13_CHACHA20_POLY1305_SHA256\"]\nmin_version = \"1.3\"");
    assert_eq!(ask(proxy.addr), b"from-origin");
    drop(proxy);
    let proxy = start("max_version = \"1.2\"\nciphers = [\"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\"]");
    assert_eq!(
        ask(proxy.addr),
        b"",
        "no ECDSA suite for the origin's ECDSA certificate"
    );
    assert_eq!(proxy.running().stats().tls_backend_errors, 1);
}
