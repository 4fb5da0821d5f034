//! Authentication on routes over real sockets.
//!
//! Basic: an htpasswd file made by Apache's `htpasswd` (bcrypt, SHA-256 and SHA-512 crypt),
//! 401 with the realm's challenge without or with wrong credentials, the server never sees
//! `Authorization` (unless `pass_authorization`), HTTP/1.1 and HTTP/2 clients (curl), a
//! keep-alive client verified once (the thread's cache), `check` refusing MD5 entries,
//! hostile `Authorization` values, and a client with good credentials served while a
//! flood of wrong passwords holds the password-check budget.
//!
//! Forward: an auth server the test starts: its 2xx lets the request through with the
//! copied headers (a client's forged copy dropped), its refusal reaches the client as it
//! made it, it sees the original method and URI; unreachable → 502, too slow → 504,
//! `fail = "open"` lets the request through. Refusals are counted per route.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::Proxy;
use common::http::{Reply, http_origin, read_response};
use common::tls::TempDir;

/// Base64 of `text` (standard, padded), as a client writes Basic credentials.
fn b64(text: &str) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in text.as_bytes().chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// An htpasswd file made by `htpasswd`: alice (bcrypt), bob (SHA-256), carol (SHA-512),
/// all with password `secret`.
fn users_file(dir: &TempDir) -> Option<std::path::PathBuf> {
    if !common::have("htpasswd") {
        return None;
    }
    let path = dir.path("users");
    for (flag, user) in [("-cbB", "alice"), ("-b2", "bob"), ("-b5", "carol")] {
        let out = Command::new("htpasswd")
            .arg(flag)
            .arg(&path)
            .args([user, "secret"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "htpasswd: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some(path)
}

fn echo_origin() -> common::http::HttpOrigin {
    http_origin(|req| {
        let seen = req.header("authorization").unwrap_or("-");
        let user = req.header("x-user").unwrap_or("-");
        let body = format!("auth={seen} user={user}");
        Reply::Bytes(format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes())
    })
}

fn config(origin: SocketAddr, route: &str, global: &str) -> String {
    format!(
        "[global]\nworkers = 1\n{global}\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\n\
         default_backend = \"be\"\n\
         [[frontend.route]]\nname = \"private\"\npath_prefix = \"/private/\"\nbackend = \"be\"\n{route}\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n"
    )
}

fn get(addr: SocketAddr, path: &str, extra: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (&c).write_all(format!("GET {path} HTTP/1.1\r\nHost: app.test\r\n{extra}Connection: close\r\n\r\n").as_bytes())
        .unwrap();
    read_response(&mut BufReader::new(c)).expect("a response")
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// curl over HTTP/2 (prior knowledge) to `/private/h2` with a bearer token and a forged
/// `X-User`: the body, a newline and the status.
fn curl_h2_bearer(addr: SocketAddr, token: &str) -> String {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "--http2-prior-knowledge",
            "-w",
            "\n%{http_code}",
        ])
        .args(["-H", &format!("Authorization: Bearer {token}"), "-H", "X-User: root"])
        .arg(format!("http://{addr}/private/h2"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn basic(user: &str, password: &str) -> String {
    format!("Authorization: Basic {}\r\n", b64(&format!("{user}:{password}")))
}

#[test]
fn basic_auth_with_an_htpasswd_file() {
    let dir = TempDir::new();
    let Some(users) = users_file(&dir) else { return };
    let o = echo_origin();
    let route = format!(
        "auth = {{ basic = {{ realm = \"staff only\", users_file = \"{}\" }} }}",
        users.display()
    );
    let proxy = Proxy::start(&config(o.addr, &route, ""));
    // Unprotected paths are not asked.
    assert_eq!(get(proxy.addr, "/open", "").0, 200);
    for extra in [
        String::new(),
        basic("alice", "wrong"),
        basic("mallory", "secret"),
        basic("alice", ""),
    ] {
        let (status, fields, body) = get(proxy.addr, "/private/x", &extra);
        assert_eq!(status, 401, "{extra}");
        assert_eq!(
            field(&fields, "www-authenticate"),
            Some("Basic realm=\"staff only\", charset=\"UTF-8\"")
        );
        assert_eq!(body, b"401 Unauthorized\n");
    }
    for user in ["alice", "bob", "carol"] {
        let (status, _, body) = get(proxy.addr, "/private/x", &basic(user, "secret"));
        assert_eq!(status, 200, "{user}");
        assert_eq!(body, b"auth=- user=-", "{user}: the server never sees the credentials");
    }
    let stats = proxy.running().stats();
    assert_eq!(stats.auth_refused, 4, "{stats:?}");
    let metrics = proxy.running().metrics();
    let route = &metrics.frontends[0].routes[0];
    assert_eq!((route.name.as_str(), route.auth_refused), ("private", 4));
    assert_eq!(o.requests().len(), 4, "no refused request reached the server");

    // Keep-alive: verified once, then remembered.
    let before = proxy.running().stats();
    let c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    for _ in 0..5 {
        (&c).write_all(format!("GET /private/k HTTP/1.1\r\nHost: t\r\n{}\r\n", basic("alice", "secret")).as_bytes())
            .unwrap();
        assert_eq!(read_response(&mut r).unwrap().0, 200);
    }
    let after = proxy.running().stats();
    assert_eq!(
        after.auth_verifications - before.auth_verifications,
        0,
        "alice was remembered already"
    );
    assert_eq!(after.auth_cache_hits - before.auth_cache_hits, 5);
    assert_eq!(after.auth_verifying, 0);
}

#[test]
fn basic_auth_for_http2_clients_and_passing_the_credentials_on() {
    let dir = TempDir::new();
    let Some(users) = users_file(&dir) else { return };
    if !common::have("curl") {
        return;
    }
    let o = echo_origin();
    let route = format!(
        "auth = {{ basic = {{ users_file = \"{}\", pass_authorization = true }} }}",
        users.display()
    );
    let proxy = Proxy::start(&config(o.addr, &route, ""));
    let curl = |user: Option<&str>| {
        let mut cmd = Command::new("curl");
        cmd.args([
            "-sS",
            "--max-time",
            "10",
            "--http2-prior-knowledge",
            "-w",
            "\n%{http_code} %{http_version}",
        ]);
        if let Some(u) = user {
            cmd.args(["-u", u]);
        }
        let out = cmd.arg(format!("http://{}/private/h2", proxy.addr)).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let refused = curl(None);
    assert!(refused.ends_with("401 2"), "{refused}");
    assert!(curl(Some("bob:nope")).ends_with("401 2"));
    let ok = curl(Some("bob:secret"));
    assert!(ok.ends_with("200 2"), "{ok}");
    assert!(
        ok.starts_with(&format!("auth=Basic {} ", b64("bob:secret"))),
        "passed on: {ok}"
    );
}

#[test]
fn check_refuses_weak_or_broken_users_files() {
    let dir = TempDir::new();
    let md5 = dir.path("md5");
    std::fs::write(&md5, "dave:$apr1$CqB7/UG7$WQsKV7N/WqD.BMu2aZ519.\n").unwrap();
    let o = SocketAddr::from(([127, 0, 0, 1], 9));
    let parse = |route: String| {
        tollgate::config::parse(&config(o, &route, ""), "t.toml")
            .unwrap_err()
            .to_string()
    };
    let e = parse(format!("auth = {{ basic = {{ users_file = \"{}\" }} }}", md5.display()));
    assert!(
        e.contains("line 1: user `dave`: MD5 hashes are refused") && e.contains("htpasswd -B"),
        "{e}"
    );
    let e = parse("auth = { basic = { users_file = \"/nonexistent/users\" } }".into());
    assert!(e.contains("/nonexistent/users"), "{e}");
    let e = parse("auth = {}".into());
    assert!(e.contains("needs one method"), "{e}");
    let e = parse("auth = { forward = { url = \"https://127.0.0.1/x\" } }".into());
    assert!(e.contains("must be an `http://` URL"), "{e}");
    let e =
        parse("auth = { forward = { url = \"http://127.0.0.1:9/x\", copy_headers = [\"content-length\"] } }".into());
    assert!(e.contains("not a header an auth server may set"), "{e}");
    let e = parse("auth = { forward = { url = \"http://127.0.0.1:9/x\", timeout = \"0s\" } }".into());
    assert!(e.contains("from 1ms to 60s"), "{e}");
}

/// Hostile `Authorization` values are refused (401) without harm, and a client with good
/// credentials is served while a flood of wrong passwords holds the only check slot.
#[test]
fn hostile_credentials_and_a_guessing_flood_leave_good_clients_served() {
    let dir = TempDir::new();
    let Some(users) = users_file(&dir) else { return };
    let o = echo_origin();
    let route = format!("auth = {{ basic = {{ users_file = \"{}\" }} }}", users.display());
    let proxy = Proxy::start(&config(o.addr, &route, "max_auth_checks = 1"));
    let long = format!("Authorization: Basic {}\r\n", "QUFB".repeat(2000));
    let hostile = [
        "Authorization: Basic\r\n".to_string(),
        "Authorization: Basic !!!!\r\n".to_string(),
        "Authorization: Bearer abc\r\n".to_string(),
        format!("Authorization: Basic {}\r\n", b64("alice")),
        long,
        // Two fields: neither is trusted.
        format!("{}{}", basic("alice", "secret"), basic("alice", "secret")),
        format!("Authorization: Basic {}\r\n", b64("alice:secret\u{0}")),
    ];
    for h in &hostile {
        let (status, _, _) = get(proxy.addr, "/private/x", h);
        assert_eq!(status, 401, "{h}");
    }
    // The flood: wrong passwords on 8 connections at once, each a password check.
    let addr = proxy.addr;
    let flood: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                for j in 0..5 {
                    let (status, _, _) = get(addr, "/private/f", &basic("alice", &format!("guess{i}-{j}")));
                    assert_eq!(status, 401);
                }
            })
        })
        .collect();
    for _ in 0..3 {
        let (status, _, body) = get(proxy.addr, "/private/good", &basic("carol", "secret"));
        assert_eq!(status, 200);
        assert_eq!(body, b"auth=- user=-");
    }
    for t in flood {
        t.join().unwrap();
    }
    let stats = proxy.running().stats();
    assert!(
        stats.auth_verify_waits > 0,
        "the flood waited for the one slot: {stats:?}"
    );
    assert_eq!(stats.auth_verifying, 0);
}

/// An auth server for forward auth: `Bearer good` is alice (200 with X-User), anything
/// else a 401 with its own challenge and body; `/slow` answers after 3 s.
fn auth_server() -> common::http::HttpOrigin {
    http_origin(|req| {
        if req.target == "/slow" {
            std::thread::sleep(Duration::from_secs(3));
        }
        if req.header("authorization") == Some("Bearer good") {
            Reply::Bytes(b"HTTP/1.1 200 OK\r\nX-User: alice\r\nX-Other: no\r\nContent-Length: 0\r\n\r\n".to_vec())
        } else {
            let body = "go away\n";
            Reply::Bytes(
                format!(
                    "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"api\"\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes(),
            )
        }
    })
}

#[test]
fn forward_auth_lets_through_copies_refuses_and_fails_closed_or_open() {
    let auth = auth_server();
    let o = echo_origin();
    let route = format!(
        "auth = {{ forward = {{ url = \"http://{}/check\", copy_headers = [\"X-User\"], timeout = \"1s\" }} }}",
        auth.addr
    );
    let proxy = Proxy::start(&config(o.addr, &route, ""));
    // Through, as alice; the client's own X-User is dropped.
    let (status, _, body) = get(
        proxy.addr,
        "/private/doc?id=7",
        "Authorization: Bearer good\r\nX-User: root\r\n",
    );
    assert_eq!(status, 200);
    assert_eq!(body, b"auth=- user=alice");
    let asked = auth.requests();
    let last = asked.last().unwrap();
    assert_eq!((last.method.as_str(), last.target.as_str()), ("GET", "/check"));
    assert_eq!(last.header("x-forwarded-uri"), Some("/private/doc?id=7"));
    assert_eq!(last.header("x-forwarded-method"), Some("GET"));
    assert_eq!(last.header("x-forwarded-host"), Some("app.test"));
    assert_eq!(last.header("x-forwarded-for"), Some("127.0.0.1"));
    // Refused: the auth server's answer, as it made it.
    let (status, fields, body) = get(proxy.addr, "/private/doc", "Authorization: Bearer bad\r\n");
    assert_eq!(status, 401);
    assert_eq!(field(&fields, "www-authenticate"), Some("Bearer realm=\"api\""));
    assert_eq!(body, b"go away\n");
    assert_eq!(o.requests().len(), 1, "the refused request never reached the server");
    assert_eq!(proxy.running().metrics().frontends[0].routes[0].auth_refused, 1);
    assert_eq!(
        auth.conns.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "both checks on one kept connection"
    );
    drop(proxy);

    // Unreachable: 502; too slow: 504; `fail = "open"`: through.
    // A port held bound but not listening: connections to it are refused.
    let reserved = common::ReservedPort::new();
    let closed = reserved.addr;
    let proxy = Proxy::start(&config(
        o.addr,
        &format!("auth = {{ forward = {{ url = \"http://{closed}/check\" }} }}"),
        "",
    ));
    assert_eq!(get(proxy.addr, "/private/x", "").0, 502);
    assert_eq!(proxy.running().stats().auth_forward_failures, 1);
    drop(proxy);
    let proxy = Proxy::start(&config(
        o.addr,
        &format!(
            "auth = {{ forward = {{ url = \"http://{}/slow\", timeout = \"200ms\" }} }}",
            auth.addr
        ),
        "",
    ));
    assert_eq!(get(proxy.addr, "/private/x", "Authorization: Bearer good\r\n").0, 504);
    drop(proxy);
    let proxy = Proxy::start(&config(
        o.addr,
        &format!("auth = {{ forward = {{ url = \"http://{closed}/check\", fail = \"open\" }} }}"),
        "",
    ));
    assert_eq!(get(proxy.addr, "/private/x", "").0, 200);
}

#[test]
fn forward_auth_for_http2_clients() {
    if !common::have("curl") {
        return;
    }
    let auth = auth_server();
    let o = echo_origin();
    let route = format!(
        "auth = {{ forward = {{ url = \"http://{}/check\", copy_headers = [\"x-user\"] }} }}",
        auth.addr
    );
    let proxy = Proxy::start(&config(o.addr, &route, ""));
    let curl = |bearer: &str| curl_h2_bearer(proxy.addr, bearer);
    assert_eq!(curl("good"), "auth=- user=alice\n200");
    assert_eq!(curl("bad"), "go away\n\n401");
}

/// Master mode: a reload re-reads the users file (a user added works at once); a file that
/// became invalid makes the reload fail, naming the line, while the old generation serves.
#[test]
fn a_reload_re_reads_the_users_file() {
    if !common::have("htpasswd") {
        return;
    }
    let dir = master_support::TempDir::new("auth-reload");
    let users = dir.0.join("users");
    let htpasswd = |args: &[&str]| {
        let out = Command::new("htpasswd").args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    htpasswd(&["-cbB", users.to_str().unwrap(), "alice", "secret"]);
    let o = echo_origin();
    let text = format!(
        "{}[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         [[frontend.route]]\npath_prefix = \"/\"\nbackend = \"be\"\nauth = {{ basic = {{ users_file = \"users\" }} }}\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        master_support::global(&dir.0, ""),
        o.addr
    );
    let master = master_support::Master::start(dir, &text, &[]);
    assert_eq!(get(master.addr, "/", &basic("alice", "secret")).0, 200);
    assert_eq!(get(master.addr, "/", &basic("dave", "hunter2")).0, 401);
    htpasswd(&["-bB", users.to_str().unwrap(), "dave", "hunter2"]);
    master.reload_ok();
    assert_eq!(
        get(master.addr, "/", &basic("dave", "hunter2")).0,
        200,
        "the new user, after a reload"
    );
    // An MD5 entry: the reload is refused, the running generation keeps the old file.
    std::fs::write(&users, "eve:$apr1$CqB7/UG7$WQsKV7N/WqD.BMu2aZ519.\n").unwrap();
    let (code, out, err) = master.reload();
    assert_ne!(code, 0);
    assert!(format!("{out}{err}").contains("MD5 hashes are refused"), "{out}{err}");
    assert_eq!(get(master.addr, "/", &basic("dave", "hunter2")).0, 200);
}

// --- JWT -------------------------------------------------------------------------------

mod jwt_keys {
    use aws_lc_rs::rand::SystemRandom;
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    use serde_json::{Value, json};

    pub fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    pub struct Key {
        pub kid: &'static str,
        pub alg: Algorithm,
        encoding: EncodingKey,
        pub jwk: Value,
    }

    impl Key {
        pub fn sign(&self, claims: &Value) -> String {
            let mut header = Header::new(self.alg);
            header.kid = Some(self.kid.into());
            jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
        }
    }

    pub fn es256(kid: &'static str) -> Key {
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new()).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref()).unwrap();
        let point = pair.public_key().as_ref();
        Key {
            kid,
            alg: Algorithm::ES256,
            encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk: json!({"kty": "EC", "kid": kid, "crv": "P-256", "alg": "ES256",
                        "x": b64(&point[1..33]), "y": b64(&point[33..65])}),
        }
    }

    pub fn ed25519(kid: &'static str) -> Key {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        Key {
            kid,
            alg: Algorithm::EdDSA,
            encoding: EncodingKey::from_ed_der(pkcs8.as_ref()),
            jwk: json!({"kty": "OKP", "kid": kid, "crv": "Ed25519", "x": b64(pair.public_key().as_ref())}),
        }
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn claims(aud: &str, exp_in: i64) -> serde_json::Value {
    serde_json::json!({"iss": "https://issuer.test", "aud": aud, "sub": "alice", "exp": unix_now() + exp_in, "iat": unix_now()})
}

fn jwt_route(source: &str) -> String {
    format!(
        "auth = {{ jwt = {{ {source}, issuer = \"https://issuer.test\", audience = \"api\", \
         algorithms = [\"ES256\", \"EdDSA\"], claims_to_headers = {{ sub = \"x-user\" }} }} }}"
    )
}

/// Tokens the test signs with keys it generates: good ones pass with the claim header (a
/// client's forged one dropped); expired, wrong audience, wrong key type, `none`, tampered
/// and missing ones get RFC 6750's 401. HTTP/1.1 and HTTP/2 (curl) clients.
#[test]
fn jwt_bearer_tokens_from_a_jwks_file() {
    let dir = TempDir::new();
    let (es, ed, stranger) = (jwt_keys::es256("k1"), jwt_keys::ed25519("k2"), jwt_keys::es256("k1"));
    let jwks = dir.path("jwks.json");
    std::fs::write(&jwks, serde_json::json!({"keys": [es.jwk, ed.jwk]}).to_string()).unwrap();
    let o = echo_origin();
    let route = jwt_route(&format!("jwks_file = \"{}\"", jwks.display()));
    let proxy = Proxy::start(&config(o.addr, &route, ""));
    let bearer = |t: &str| format!("Authorization: Bearer {t}\r\nX-User: root\r\n");
    for key in [&es, &ed] {
        let (status, _, body) = get(proxy.addr, "/private/x", &bearer(&key.sign(&claims("api", 300))));
        assert_eq!(status, 200, "{:?}", key.alg);
        let body = String::from_utf8(body).unwrap();
        assert!(
            body.ends_with(" user=alice"),
            "the claim, not the client's X-User: {body}"
        );
        assert!(
            body.starts_with("auth=Bearer "),
            "the token goes on to the server: {body}"
        );
    }
    let good = es.sign(&claims("api", 300));
    let (head, rest) = good.rsplit_once('.').unwrap();
    let tampered = format!(
        "{head}.{}",
        if rest.starts_with('A') {
            rest.replacen('A', "B", 1)
        } else {
            rest.replacen(&rest[..1], "A", 1)
        }
    );
    let none = format!(
        "{}.{}.",
        jwt_keys::b64(br#"{"alg":"none","typ":"JWT"}"#),
        jwt_keys::b64(claims("api", 300).to_string().as_bytes())
    );
    for (what, token) in [
        ("expired", es.sign(&claims("api", -3600))),
        ("wrong audience", es.sign(&claims("other", 300))),
        ("a key the JWKS does not have", stranger.sign(&claims("api", 300))),
        ("alg none", none),
        ("tampered", tampered),
        ("garbage", "a.b.c".to_string()),
    ] {
        let (status, fields, _) = get(proxy.addr, "/private/x", &bearer(&token));
        assert_eq!(status, 401, "{what}");
        assert_eq!(
            field(&fields, "www-authenticate"),
            Some("Bearer realm=\"tollgate\", error=\"invalid_token\""),
            "{what}"
        );
    }
    let (status, fields, _) = get(proxy.addr, "/private/x", "");
    assert_eq!(
        (status, field(&fields, "www-authenticate")),
        (401, Some("Bearer realm=\"tollgate\""))
    );
    assert_eq!(proxy.running().metrics().frontends[0].routes[0].auth_refused, 7);
    if common::have("curl") {
        let text = curl_h2_bearer(proxy.addr, &good);
        assert!(text.ends_with(" user=alice\n200"), "{text}");
    }
}

/// `jwks_url`: the key set is fetched before the proxy serves (a token is accepted at once).
#[test]
fn jwt_keys_from_a_jwks_url() {
    let es = jwt_keys::es256("url-key");
    let document = serde_json::json!({"keys": [es.jwk]}).to_string();
    let keys = http_origin(move |_| {
        Reply::Bytes(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{document}",
                document.len()
            )
            .into_bytes(),
        )
    });
    let o = echo_origin();
    let route = jwt_route(&format!("jwks_url = \"http://{}/jwks.json\"", keys.addr));
    let proxy = Proxy::start(&config(o.addr, &route, ""));
    let token = es.sign(&claims("api", 300));
    let (status, _, body) = get(proxy.addr, "/private/x", &format!("Authorization: Bearer {token}\r\n"));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(keys.requests().len(), 1, "one fetch at start");
    let jwks = proxy.running().metrics().frontends[0].routes[0]
        .jwks
        .clone()
        .expect("jwks figures");
    assert_eq!((jwks.fetches_ok, jwks.fetches_failed, jwks.keys), (1, 0, 1), "{jwks:?}");
    assert!(jwks.last_ok_unix > 0);
}

/// An auth server that closes each connection after answering, without saying so: the
/// connection the worker kept is found closed at the next check, which then goes on a new
/// one and succeeds.
#[test]
fn forward_auth_survives_a_kept_connection_the_server_closed() {
    let auth =
        http_origin(|_| Reply::BytesThenClose(b"HTTP/1.1 200 OK\r\nX-User: bob\r\nContent-Length: 0\r\n\r\n".to_vec()));
    let o = echo_origin();
    let route = format!(
        "auth = {{ forward = {{ url = \"http://{}/check\", copy_headers = [\"x-user\"] }} }}",
        auth.addr
    );
    let proxy = Proxy::start(&config(o.addr, &route, ""));
    for _ in 0..5 {
        let (status, _, body) = get(proxy.addr, "/private/x", "");
        assert_eq!((status, body), (200, b"auth=- user=bob".to_vec()));
    }
    assert_eq!(
        auth.conns.load(std::sync::atomic::Ordering::SeqCst),
        5,
        "a new connection for each check"
    );
    assert_eq!(proxy.running().stats().auth_forward_failures, 0);
}
