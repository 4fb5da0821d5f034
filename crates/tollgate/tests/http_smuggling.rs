//! The smuggling matrix: malformed requests sent on raw sockets, each followed by a second
//! request in the same bytes. Each must get its status, the connection must close after it,
//! and the origin must never see the second (smuggled) request.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use common::http::*;
use common::*;

const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n";

fn cases() -> Vec<(&'static str, String, u16)> {
    let h = "Host: t\r\n";
    let big = "X-Big: ".to_string() + &"a".repeat(40 * 1024) + "\r\n";
    let long_target = "/".to_string() + &"a".repeat(9000);
    vec![
        (
            "cl+te",
            format!("POST / HTTP/1.1\r\n{h}Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nX"),
            400,
        ),
        (
            "te+cl",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked\r\nContent-Length: 6\r\n\r\n0\r\n\r\nX"),
            400,
        ),
        (
            "two different cl",
            format!("POST / HTTP/1.1\r\n{h}Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"),
            400,
        ),
        (
            "cl list differs",
            format!("POST / HTTP/1.1\r\n{h}Content-Length: 5, 6\r\n\r\nhello!"),
            400,
        ),
        (
            "cl negative",
            format!("POST / HTTP/1.1\r\n{h}Content-Length: -1\r\n\r\n"),
            400,
        ),
        (
            "cl plus sign",
            format!("POST / HTTP/1.1\r\n{h}Content-Length: +5\r\n\r\nhello"),
            400,
        ),
        (
            "cl not a number",
            format!("POST / HTTP/1.1\r\n{h}Content-Length: 5a\r\n\r\nhello"),
            400,
        ),
        (
            "cl overflow",
            format!("POST / HTTP/1.1\r\n{h}Content-Length: 99999999999999999999999\r\n\r\n"),
            400,
        ),
        (
            "te final not chunked",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n"),
            400,
        ),
        (
            "te chunked twice",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n"),
            400,
        ),
        (
            "te unknown coding",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"),
            501,
        ),
        (
            "space before colon",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n"),
            400,
        ),
        ("obs-fold", format!("GET / HTTP/1.1\r\n{h}X-A: b\r\n c\r\n\r\n"), 400),
        (
            "obs-fold te",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n"),
            400,
        ),
        ("nul in value", format!("GET / HTTP/1.1\r\n{h}X-A: a\0b\r\n\r\n"), 400),
        (
            "bare cr in value",
            format!("GET / HTTP/1.1\r\n{h}X-A: a\rb\r\n\r\n"),
            400,
        ),
        ("empty header name", format!("GET / HTTP/1.1\r\n{h}: x\r\n\r\n"), 400),
        (
            "double space in request line",
            format!("GET  / HTTP/1.1\r\n{h}\r\n"),
            400,
        ),
        ("http/0.9", "GET /\r\n\r\n".to_string(), 400),
        ("version 1.2", format!("GET / HTTP/1.2\r\n{h}\r\n"), 505),
        ("version 2.0", format!("GET / HTTP/2.0\r\n{h}\r\n"), 505),
        ("lowercase version", format!("GET / http/1.1\r\n{h}\r\n"), 400),
        ("fragment in target", format!("GET /a#b HTTP/1.1\r\n{h}\r\n"), 400),
        ("control byte in target", format!("GET /a\x01 HTTP/1.1\r\n{h}\r\n"), 400),
        ("missing host", "GET / HTTP/1.1\r\n\r\n".to_string(), 400),
        ("two hosts", format!("GET / HTTP/1.1\r\n{h}{h}\r\n"), 400),
        (
            "chunk size overflow",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked\r\n\r\n1FFFFFFFFFFFFFFFF\r\nx\r\n0\r\n\r\n"),
            400,
        ),
        (
            "chunk size not hex",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked\r\n\r\nzz\r\nx\r\n0\r\n\r\n"),
            400,
        ),
        (
            "chunk data without crlf",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked\r\n\r\n5\r\nhelloX0\r\n\r\n"),
            400,
        ),
        (
            "bare lf in chunked",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n"),
            400,
        ),
        (
            "ctl in chunk extension",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked\r\n\r\n5;a=\x01\r\nhello\r\n0\r\n\r\n"),
            400,
        ),
        ("header block too large", format!("GET / HTTP/1.1\r\n{h}{big}\r\n"), 431),
        (
            "request line too long",
            format!("GET {long_target} HTTP/1.1\r\n{h}\r\n"),
            414,
        ),
    ]
}

#[test]
fn malformed_requests_get_their_status_and_never_smuggle() {
    let origin = http_origin(|_| ok("served"));
    let proxy = Proxy::start(&http_config("", origin.addr));
    let cases = cases();
    assert!(cases.len() >= 25);
    for (name, request, status) in &cases {
        let out = raw_exchange(proxy.addr, format!("{request}{SMUGGLED}").as_bytes());
        let want = format!("HTTP/1.1 {status} ");
        assert!(
            out.starts_with(&want),
            "{name}: expected {status}, got {:?}",
            out.lines().next()
        );
        assert_eq!(
            out.matches("HTTP/1.1 ").count(),
            1,
            "{name}: more than one response: {out}"
        );
        assert!(out.to_ascii_lowercase().contains("connection: close"), "{name}: {out}");
    }
    let seen: Vec<String> = origin.requests().iter().map(|r| r.target.clone()).collect();
    assert!(
        !seen.iter().any(|t| t == "/smuggled"),
        "smuggled request reached the origin: {seen:?}"
    );
    let stats = proxy.running().stats();
    assert_eq!(stats.http_proxy_4xx + stats.http_proxy_5xx, cases.len() as u64);
}

#[test]
fn a_valid_request_after_a_valid_one_is_not_smuggling() {
    // Control: the same framing done right does deliver both requests.
    let origin = http_origin(|_| ok("served"));
    let proxy = Proxy::start(&http_config("", origin.addr));
    let out = raw_exchange(
        proxy.addr,
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /second HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(out.matches("HTTP/1.1 200").count(), 2, "{out}");
    assert!(origin.requests().iter().any(|r| r.target == "/second"));
}
