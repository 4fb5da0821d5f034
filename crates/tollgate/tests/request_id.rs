//! Request IDs (`[frontend] request_id`) over real sockets: generated per request (a UUIDv7)
//! and sent to the server, back to the client with `response = true` (also on responses
//! tollgate makes itself), and written to the access log; a client's own ID kept only from
//! `trust_from` and only when it is acceptable, else replaced; HTTP/1.1 and HTTP/2 clients.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::collections::HashSet;
use std::io::BufReader;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use common::http::*;
use common::tls::TempDir;
use common::*;

/// An HTTP frontend `fe` with `request_id = { request_id }` in front of `origin`, JSON access
/// log to `log`.
fn config(request_id: &str, origin: SocketAddr, log: &Path) -> String {
    let global = format!("[log]\naccess = \"{}\"\nformat = \"json\"\n", log.display());
    http_config(&global, origin).replace(
        "default_backend = \"be\"\n",
        &format!("default_backend = \"be\"\nh2c = true\nrequest_id = {{ {request_id} }}\n"),
    )
}

/// One request on its own connection; (status, response headers).
fn get(addr: SocketAddr, extra: &str) -> (u16, Vec<(String, String)>) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(
        &mut c,
        format!("GET /x HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let (status, headers, _) = read_response(&mut BufReader::new(c)).expect("a response");
    (status, headers)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

fn is_uuid_v7(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 36
        && [8, 13, 18, 23].iter().all(|&i| b[i] == b'-')
        && b[14] == b'7'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b')
        && id.bytes().all(|c| c == b'-' || c.is_ascii_hexdigit())
}

/// The access log's lines once it holds `n` (bounded wait).
fn log_lines(path: &Path, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().count() >= n {
            return text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_request_gets_a_new_id_sent_to_the_server_back_to_the_client_and_logged() {
    let origin = http_origin(|_| ok("hi"));
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let proxy = Proxy::start(&config("response = true", origin.addr, &log));
    let mut answered = Vec::new();
    for _ in 0..3 {
        let (status, headers) = get(proxy.addr, "");
        assert_eq!(status, 200);
        let ids = header(&headers, "x-request-id");
        assert_eq!(ids.len(), 1, "{headers:?}");
        answered.push(ids[0].to_string());
    }
    // Not trusted (no trust_from): the client's own ID is replaced, never forwarded.
    let (_, headers) = get(proxy.addr, "X-Request-Id: mine-123\r\n");
    answered.push(header(&headers, "x-request-id")[0].to_string());
    assert!(answered.iter().all(|id| is_uuid_v7(id)), "{answered:?}");
    assert_eq!(answered.iter().collect::<HashSet<_>>().len(), 4, "{answered:?}");
    let sent: Vec<String> = origin
        .requests()
        .iter()
        .map(|r| {
            let all: Vec<_> = r
                .headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("x-request-id"))
                .collect();
            assert_eq!(all.len(), 1, "one ID field to the server: {:?}", r.headers);
            all[0].1.clone()
        })
        .collect();
    assert_eq!(sent, answered, "the server got the ID the client got back");
    // Each worker thread writes its own lines: the log's order is not the requests' order.
    let mut logged: Vec<String> = log_lines(&log, 4)
        .iter()
        .map(|v| v["request_id"].as_str().unwrap().to_string())
        .collect();
    logged.sort();
    answered.sort();
    assert_eq!(logged, answered, "the log names the same IDs");
}

#[test]
fn a_trusted_client_keeps_an_acceptable_id_and_anything_else_is_replaced() {
    let origin = http_origin(|_| ok("hi"));
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let proxy = Proxy::start(&config(
        "header = \"X-Trace-Id\", response = true, trust_from = [\"127.0.0.0/8\"]",
        origin.addr,
        &log,
    ));
    let (_, headers) = get(proxy.addr, "x-trace-id: abc-123_X.y:z\r\n");
    assert_eq!(
        header(&headers, "x-trace-id"),
        ["abc-123_X.y:z"],
        "kept from a trusted address"
    );
    let long = "a".repeat(129);
    for hostile in [
        "x-trace-id: has space\r\n".to_string(),
        "x-trace-id: quote\"d\r\n".to_string(),
        "x-trace-id: semi;colon\r\n".to_string(),
        format!("x-trace-id: {long}\r\n"),
        "x-trace-id: one\r\nx-trace-id: two\r\n".to_string(),
        "x-trace-id: caf\u{e9}\r\n".to_string(),
    ] {
        let (status, headers) = get(proxy.addr, &hostile);
        assert_eq!(status, 200, "{hostile:?}");
        let got = header(&headers, "x-trace-id");
        assert_eq!(got.len(), 1, "{hostile:?}: {headers:?}");
        assert!(is_uuid_v7(got[0]), "{hostile:?} replaced: {got:?}");
    }
    // What the server and the log saw: never the refused values.
    for r in origin.requests() {
        let v = r.header("x-trace-id").unwrap();
        assert!(v == "abc-123_X.y:z" || is_uuid_v7(v), "{v:?}");
    }
    for v in log_lines(&log, 7) {
        let id = v["request_id"].as_str().unwrap();
        assert!(id == "abc-123_X.y:z" || is_uuid_v7(id), "{v}");
    }

    // From an address outside trust_from, even a good ID is replaced.
    let proxy = Proxy::start(&config(
        "response = true, trust_from = \"10.0.0.0/8\"",
        origin.addr,
        &dir.path("other.log"),
    ));
    let (_, headers) = get(proxy.addr, "x-request-id: abc-123\r\n");
    assert!(is_uuid_v7(header(&headers, "x-request-id")[0]), "{headers:?}");
}

#[test]
fn responses_tollgate_makes_carry_the_id_and_none_without_response() {
    let dir = TempDir::new();
    // A server that refuses connections: tollgate answers 503 itself.
    let dead: SocketAddr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let log = dir.path("a.log");
    let proxy = Proxy::start(&config("response = true", dead, &log));
    let (status, headers) = get(proxy.addr, "");
    assert_eq!(status, 503);
    let ids = header(&headers, "x-request-id");
    assert!(ids.len() == 1 && is_uuid_v7(ids[0]), "{headers:?}");
    assert_eq!(
        log_lines(&log, 1)[0]["request_id"],
        ids[0],
        "the 503's ID is the logged one"
    );

    // Without `response`, the client gets no ID; the server still does.
    let origin = http_origin(|_| ok("hi"));
    let proxy = Proxy::start(&config("header = \"x-req\"", origin.addr, &dir.path("b.log")));
    let (status, headers) = get(proxy.addr, "");
    assert_eq!(status, 200);
    assert!(header(&headers, "x-req").is_empty(), "{headers:?}");
    assert!(is_uuid_v7(origin.requests()[0].header("x-req").unwrap()));
}

#[test]
fn http2_streams_get_ids_too_nghttp() {
    if std::process::Command::new("nghttp").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "nghttp is missing under CI");
        println!("skipped: nghttp is not installed");
        return;
    }
    let origin = http_origin(|_| ok("hi"));
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let proxy = Proxy::start(&config(
        "response = true, trust_from = [\"127.0.0.1\", \"::1\"]",
        origin.addr,
        &log,
    ));
    // The IDs in a response's headers as nghttp -v prints them (`recv (stream_id=N) name: value`).
    let answered = |client_id: &str, path: &str| -> Vec<String> {
        let out = std::process::Command::new("nghttp")
            .args(["-nv", "-H", &format!("x-request-id: {client_id}")])
            .arg(format!("http://{}{path}", proxy.addr))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{text}");
        text.lines()
            .filter(|l| l.contains("recv (stream_id="))
            .filter_map(|l| l.split_once("x-request-id: ").map(|(_, v)| v.trim().to_string()))
            .collect()
    };
    // A trusted, acceptable ID is kept; a refused one is replaced by a new one.
    assert_eq!(answered("kept-1", "/a"), ["kept-1"]);
    let replaced = answered("no good", "/b");
    assert!(replaced.len() == 1 && is_uuid_v7(&replaced[0]), "{replaced:?}");
    let answered = [replaced[0].as_str()];
    let sent: Vec<String> = origin
        .requests()
        .iter()
        .map(|r| r.header("x-request-id").unwrap().to_string())
        .collect();
    assert_eq!(sent, ["kept-1", answered[0]]);
    let mut logged: Vec<String> = log_lines(&log, 2)
        .iter()
        .map(|v| v["request_id"].as_str().unwrap().to_string())
        .collect();
    logged.sort();
    let mut sent = sent;
    sent.sort();
    assert_eq!(logged, sent);
}

#[test]
fn check_refuses_request_ids_where_they_cannot_work() {
    let tcp = "[[frontend]]\nname = \"t\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\nrequest_id = {}\n\
               [[backend]]\nname = \"b\"\n[[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:1\"\n";
    let Err(e) = tollgate::config::parse(tcp, "t.toml") else {
        panic!("accepted")
    };
    let e = e.to_string();
    assert!(e.contains("frontend[0].request_id") && e.contains("http-mode"), "{e}");
    let origin: SocketAddr = "127.0.0.1:1".parse().unwrap();
    for (bad, why) in [
        ("header = \"host\"", "tollgate writes or judges itself"),
        ("header = \"Content-Length\"", "tollgate writes or judges itself"),
        ("header = \"x id\"", "not a header field name"),
        ("trust_from = \"10.0.0.0/33\"", "trust_from"),
        ("sample = 1", "unknown field `sample`"),
    ] {
        let text = config(bad, origin, Path::new("/tmp/tollgate-request-id-check.log"));
        let Err(e) = tollgate::config::parse(&text, "t.toml") else {
            panic!("accepted")
        };
        let e = e.to_string();
        assert!(e.contains(why), "{bad}: {e}");
    }
}
