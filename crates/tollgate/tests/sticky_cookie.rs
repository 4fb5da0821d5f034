//! Cookie stickiness (`[backend.sticky]`) over real sockets, in master mode: curl with a
//! cookie jar stays on one server across requests, connections and a reload, and moves (with
//! a new cookie) once that server is drained; the origin never sees the proxy's cookie but
//! gets the client's other cookies byte for byte; forged, unknown and malformed cookies are
//! balanced like no cookie at all.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::http::{HttpOrigin, Reply, Response, http_origin, ok, read_response};
use master_support::{Master, TempDir, global};

/// Three origins answering with their name; C's responses are `Cache-Control: no-store`.
fn origins() -> BTreeMap<&'static str, HttpOrigin> {
    let no_store = || {
        http_origin(|_| {
            Reply::Bytes(b"HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 1\r\n\r\nC".to_vec())
        })
    };
    BTreeMap::from([
        ("A", http_origin(|_| ok("A"))),
        ("B", http_origin(|_| ok("B"))),
        ("C", no_store()),
    ])
}

fn config(global: &str, origins: &BTreeMap<&'static str, HttpOrigin>) -> String {
    let mut text = format!(
        "{global}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[backend.sticky]\ncookie = \"SRV\"\n"
    );
    for (name, o) in origins {
        text.push_str(&format!(
            "[[backend.server]]\nname = \"{name}\"\naddress = \"{}\"\n",
            o.addr
        ));
    }
    text
}

/// `n` requests in one curl run (one keep-alive connection), with `jar` as its cookie jar
/// when given: each body (a server's name) in order.
fn curl(addr: SocketAddr, n: usize, jar: Option<&std::path::Path>) -> Vec<String> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "20", "-w", "\\n"]);
    if let Some(jar) = jar {
        cmd.arg("-b").arg(jar).arg("-c").arg(jar);
    }
    for _ in 0..n {
        cmd.arg(format!("http://{addr}/"));
    }
    let out = cmd.output().expect("curl runs");
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The SRV value in a curl cookie jar (Netscape format: the value is the last column).
fn jar_value(jar: &std::path::Path) -> String {
    let text = std::fs::read_to_string(jar).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') || l.starts_with("#HttpOnly_"))
        .find_map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            (cols.len() == 7 && cols[5] == "SRV").then(|| cols[6].to_string())
        })
        .unwrap_or_else(|| panic!("no SRV cookie in the jar:\n{text}"))
}

/// One request with `cookie` lines on a fresh connection: the response.
fn get_with(addr: SocketAddr, cookies: &[&str]) -> Response {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s);
    let mut req = String::from("GET / HTTP/1.1\r\nHost: t\r\n");
    for c in cookies {
        req.push_str(&format!("Cookie: {c}\r\n"));
    }
    req.push_str("\r\n");
    r.get_mut().write_all(req.as_bytes()).unwrap();
    read_response(&mut r).expect("a response")
}

fn header<'a>(resp: &'a Response, name: &str) -> Vec<&'a str> {
    resp.1
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

fn set_cookie_value(resp: &Response) -> Option<String> {
    let values = header(resp, "set-cookie");
    assert!(values.len() <= 1, "one Set-Cookie at most: {values:?}");
    let v = values.first()?;
    Some(v.strip_prefix("SRV=")?.split(';').next()?.to_string())
}

#[test]
fn a_cookie_keeps_a_client_on_one_server_until_it_is_drained() {
    let origins = origins();
    let dir = TempDir::new("sticky");
    let jar = dir.0.join("jar");
    let text = config(&global(&dir.0, ""), &origins);
    let master = Master::start(dir, &text, &[]);

    // Without cookies, requests spread over every server.
    let spread = curl(master.addr, 30, None);
    for name in ["A", "B", "C"] {
        assert!(spread.iter().any(|s| s == name), "{name} never answered: {spread:?}");
    }

    // With a jar: the first response sets the cookie, the 99 after it follow it.
    let stuck = curl(master.addr, 100, Some(&jar));
    assert_eq!(stuck.len(), 100);
    let first = stuck[0].clone();
    assert!(stuck.iter().all(|s| *s == first), "not sticky: {stuck:?}");
    let value = jar_value(&jar);
    assert_eq!(value.len(), 16, "an opaque 16-hex-digit id: {value}");
    assert!(value.bytes().all(|b| b.is_ascii_hexdigit()), "{value}");
    // A new connection (maybe another worker thread) and a reload keep it.
    assert!(curl(master.addr, 5, Some(&jar)).iter().all(|s| *s == first));
    master.reload_ok();
    assert!(
        curl(master.addr, 5, Some(&jar)).iter().all(|s| *s == first),
        "lost over a reload"
    );
    assert_eq!(jar_value(&jar), value, "the cookie is not re-set to the same server");
    // The proxy's cookie never reaches the server.
    let on_first = origins[first.as_str()].requests();
    assert!(on_first.len() >= 110, "{}", on_first.len());
    assert!(
        on_first.iter().all(|r| r.header("cookie").is_none()),
        "our cookie was forwarded: {:?}",
        on_first.iter().find_map(|r| r.header("cookie"))
    );

    // Drained: the next request goes elsewhere, gets that server's cookie, and sticks there.
    master.ctl_ok(&["set", "server", &format!("be/{first}"), "state", "drain"]);
    let moved = curl(master.addr, 20, Some(&jar));
    let second = moved[0].clone();
    assert_ne!(second, first, "a drained server still got sticky requests");
    assert!(moved.iter().all(|s| *s == second), "not re-stuck: {moved:?}");
    let new_value = jar_value(&jar);
    assert_ne!(new_value, value, "a new cookie for the new server");

    // Other cookies reach the server untouched; a client that has the right cookie gets
    // no Set-Cookie (HAProxy's `indirect`).
    let before = origins[second.as_str()].requests().len();
    let resp = get_with(master.addr, &[&format!("theme=dark;  SRV={new_value}; lang=\"en\"")]);
    assert_eq!(String::from_utf8_lossy(&resp.2), second);
    assert!(header(&resp, "set-cookie").is_empty(), "{:?}", resp.1);
    let got = origins[second.as_str()].requests();
    assert_eq!(got.len(), before + 1);
    assert_eq!(got.last().unwrap().header("cookie"), Some("theme=dark; lang=\"en\""));

    // Back to ready: the old cookie leads to the old server again.
    master.ctl_ok(&["set", "server", &format!("be/{first}"), "state", "ready"]);
    let resp = get_with(master.addr, &[&format!("SRV={value}")]);
    assert_eq!(String::from_utf8_lossy(&resp.2), first);
}

#[test]
fn forged_unknown_and_malformed_cookies_are_balanced_and_get_a_fresh_cookie() {
    let origins = origins();
    let dir = TempDir::new("sticky-forged");
    let text = config(&global(&dir.0, ""), &origins);
    let master = Master::start(dir, &text, &[]);
    // Every response that sets the cookie is kept from shared caches (`nocache`): marked
    // private, unless the server already said no-store (C).
    let cache_control = |resp: &Response| {
        let want: &[&str] = if resp.2 == b"C" { &["no-store"] } else { &["private"] };
        assert_eq!(header(resp, "cache-control"), want, "{resp:?}");
    };
    for _ in 0..3 {
        let fresh = get_with(master.addr, &[]);
        assert_eq!(fresh.0, 200);
        let valid = set_cookie_value(&fresh).expect("a first response sets the cookie");
        let line = header(&fresh, "set-cookie")[0];
        assert_eq!(line, format!("SRV={valid}; Path=/; HttpOnly"));
        cache_control(&fresh);
    }

    let cases: &[&[&str]] = &[
        &["SRV=0123456789abcdef"],
        &["SRV=../../etc/passwd"],
        &["SRV="],
        &["SRV"],
        &[";;=;SRV;=SRV"],
        &["a=1; SRV=ffffffffffffffff; SRV=nope"],
        &["SRV=0123456789ABCDEF"],
        &["", "SRV=zz"],
    ];
    let mut answered = BTreeMap::new();
    for cookies in cases.iter().cycle().take(cases.len() * 3) {
        let resp = get_with(master.addr, cookies);
        assert_eq!(resp.0, 200, "{cookies:?} broke the request: {resp:?}");
        let body = String::from_utf8(resp.2.clone()).unwrap();
        let set = set_cookie_value(&resp).unwrap_or_else(|| panic!("no fresh cookie for {cookies:?}"));
        cache_control(&resp);
        // The fresh cookie names the server that answered: following it sticks there.
        let follow = get_with(master.addr, &[&format!("SRV={set}")]);
        assert_eq!(String::from_utf8_lossy(&follow.2), body, "{cookies:?}");
        *answered.entry(body).or_insert(0) += 1;
    }
    assert_eq!(answered.len(), 3, "forged cookies are balanced normally: {answered:?}");
}

/// A server that answers one request (`D`, `Connection: close`), then closes its listening
/// socket: later connects to it are refused.
fn one_shot_origin() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        while std::io::BufRead::read_line(&mut r, &mut line).unwrap_or(0) > 0 && line != "\r\n" {
            line.clear();
        }
        let _ = r
            .get_mut()
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nD");
    });
    addr
}

/// A sticky request whose server refuses connections: with `redispatch = true` (the
/// default) its retry goes to another server, which answers and sets its own cookie; with
/// `redispatch = false` every retry stays on the cookie's server, and the client gets 503.
#[test]
fn redispatch_decides_where_a_sticky_requests_retries_go() {
    for redispatch in [true, false] {
        let a = http_origin(|_| ok("A"));
        let d = one_shot_origin();
        let cfg = format!(
            "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\n\
             [[backend]]\nname = \"be\"\nmode = \"http\"\nretries = 2\nredispatch = {redispatch}\n\
             [backend.sticky]\ncookie = \"SRV\"\n\
             [[backend.server]]\nname = \"A\"\naddress = \"{}\"\n\
             [[backend.server]]\nname = \"D\"\naddress = \"{d}\"\n",
            a.addr
        );
        let proxy = common::Proxy::start(&cfg);
        // Round robin over two servers: D answers one of the first two requests (once).
        let d_cookie = (0..2)
            .map(|_| get_with(proxy.addr, &[]))
            .find(|r| r.2 == b"D")
            .and_then(|r| set_cookie_value(&r))
            .expect("D answered one of the first two requests, with its cookie");
        let a_served = a.requests.lock().unwrap().len();
        let resp = get_with(proxy.addr, &[&format!("SRV={d_cookie}")]);
        if redispatch {
            assert_eq!((resp.0, resp.2.as_slice()), (200, b"A".as_slice()), "redispatched to A");
            let moved = set_cookie_value(&resp).expect("A's cookie");
            assert_ne!(moved, d_cookie);
        } else {
            assert_eq!(resp.0, 503, "every retry stayed on D: {resp:?}");
            assert_eq!(a.requests.lock().unwrap().len(), a_served, "A never saw it");
        }
    }
}
