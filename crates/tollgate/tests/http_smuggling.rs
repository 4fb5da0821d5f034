//! The smuggling matrix: malformed requests sent on raw sockets, each followed by a second
//! request in the same bytes. Each must get its status, the connection must close after it,
//! and the origin must never see the second (smuggled) request; since every fault is in bytes
//! that came with the head, no server connection is even opened. Then what the server does
//! receive: chunked bodies re-framed canonically, and no upgrade on a request with a body.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
        // RFC 9112 6.3: a final coding other than chunked is a 400 (HAProxy too), known or not.
        (
            "te xchunked",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"),
            400,
        ),
        (
            "te identity",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: identity\r\n\r\n0\r\n\r\n"),
            400,
        ),
        (
            "te gzip only",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: gzip\r\n\r\n0\r\n\r\n"),
            400,
        ),
        (
            "te unknown coding before chunked",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: foo, chunked\r\n\r\n0\r\n\r\n"),
            501,
        ),
        // Empty list elements (HAProxy: 400): refused, never forwarded as sent.
        (
            "te empty element first",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: , chunked\r\n\r\n0\r\n\r\n"),
            400,
        ),
        (
            "te two empty elements first",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: ,,chunked\r\n\r\n0\r\n\r\n"),
            400,
        ),
        (
            "te empty elements last",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked, ,\r\n\r\n0\r\n\r\n"),
            400,
        ),
        (
            "te chunked with a parameter",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked; q=1\r\n\r\n0\r\n\r\n"),
            400,
        ),
        (
            "te chunked with a parameter, no space",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked;foo=bar\r\n\r\n0\r\n\r\n"),
            400,
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
            "chunk size of 16 hex digits",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nx\r\n0\r\n\r\n"),
            400,
        ),
        (
            "chunk size of 2^52",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked\r\n\r\n10000000000000\r\nx\r\n0\r\n\r\n"),
            400,
        ),
        (
            "bad chunk after a good one",
            format!("POST / HTTP/1.1\r\n{h}Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n1\r\nyz\r\n0\r\n\r\n"),
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
    assert!(cases.len() >= 35);
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
    // Every fault above is in bytes that came with the head: none reached a server, not even
    // as a connection carrying the head.
    assert_eq!(
        origin.conns.load(Ordering::SeqCst),
        0,
        "a refused request opened a server connection"
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

/// One request as the raw origin received it: the head and the body bytes exactly as sent.
#[derive(Debug, Clone)]
struct RawReq {
    head: String,
    body: Vec<u8>,
}

/// An origin that records each request's body bytes as they arrived, answers 200, and says on
/// `heads` when a head has arrived. Chunked bodies are delimited leniently (size = the leading
/// hex digits of the line), so a non-canonical framing shows up in the recording instead of
/// hanging the origin.
fn raw_origin() -> (Origin, Arc<Mutex<Vec<RawReq>>>, Receiver<()>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (tx, heads) = mpsc::channel();
    let tx = Mutex::new(tx);
    let log = seen.clone();
    let origin = origin(move |s| {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        while let Some(req) = read_raw(&mut r, &tx) {
            log.lock().unwrap().push(req);
            if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
                return;
            }
        }
    });
    (origin, seen, heads)
}

fn read_raw(r: &mut impl BufRead, heads: &Mutex<mpsc::Sender<()>>) -> Option<RawReq> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let _ = heads.lock().unwrap().send(());
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if lower.contains("transfer-encoding: chunked") {
        loop {
            let mut line = Vec::new();
            r.read_until(b'\n', &mut line).ok()?;
            body.extend_from_slice(&line);
            let hex: String = line
                .iter()
                .map(|&b| b as char)
                .take_while(char::is_ascii_hexdigit)
                .collect();
            let size = usize::from_str_radix(&hex, 16).ok()?;
            if size == 0 {
                loop {
                    let mut t = Vec::new();
                    r.read_until(b'\n', &mut t).ok()?;
                    body.extend_from_slice(&t);
                    if t == b"\r\n" || t.is_empty() {
                        return Some(RawReq { head, body });
                    }
                }
            }
            let mut data = vec![0u8; size + 2];
            r.read_exact(&mut data).ok()?;
            body.extend_from_slice(&data);
        }
    }
    if let Some(n) = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        body = vec![0u8; n];
        r.read_exact(&mut body).ok()?;
    }
    Some(RawReq { head, body })
}

#[test]
fn chunked_bodies_reach_the_server_in_canonical_framing() {
    let (origin, seen, _heads) = raw_origin();
    let proxy = Proxy::start(&http_config("", origin.addr));
    let cases: &[(&str, &str)] = &[
        // Leading zeros, extensions, whitespace before CRLF (BWS), uppercase hex, trailers.
        (
            "0005;ext=1 \r\nhello\r\n00A\t\r\n0123456789\r\n0;last=\"x\"\r\nX-T: v\r\n\r\n",
            "5\r\nhello\r\na\r\n0123456789\r\n0\r\nX-T: v\r\n\r\n",
        ),
        (
            "12 \r\nabcdefghijklmnopqr\r\n0 \r\n\r\n",
            "12\r\nabcdefghijklmnopqr\r\n0\r\n\r\n",
        ),
        (
            "3 ; a = b ; c\r\nxyz\r\n000000000000000000000\r\n\r\n",
            "3\r\nxyz\r\n0\r\n\r\n",
        ),
        // Already canonical: unchanged.
        ("5\r\nhello\r\n0\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n"),
    ];
    for (sent, _) in cases {
        let out = raw_exchange(
            proxy.addr,
            format!("POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{sent}")
                .as_bytes(),
        );
        assert!(out.starts_with("HTTP/1.1 200 "), "{sent:?}: {out}");
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), cases.len());
    for (req, (sent, want)) in seen.iter().zip(cases) {
        assert!(
            req.head.to_ascii_lowercase().contains("transfer-encoding: chunked\r\n"),
            "{}",
            req.head
        );
        assert_eq!(String::from_utf8_lossy(&req.body), *want, "sent {sent:?}");
    }
}

/// A chunk-size line cut between two reads: the proxy has already forwarded the head (and
/// anything before the line) when the rest of the line arrives.
#[test]
fn a_size_line_split_across_reads_is_still_canonical() {
    let (origin, seen, heads) = raw_origin();
    let proxy = Proxy::start(&http_config("", origin.addr));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_nodelay(true).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"POST /split HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n1")
        .unwrap();
    heads
        .recv_timeout(Duration::from_secs(10))
        .expect("the head reached the origin");
    let data = "z".repeat(0x1a);
    c.write_all(format!("a;name=value\r\n{data}\r\n0\r\n\r\n").as_bytes())
        .unwrap();
    let mut r = BufReader::new(c);
    let (status, _, body) = read_response(&mut r).expect("response");
    assert_eq!((status, body), (200, b"ok".to_vec()));
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        String::from_utf8_lossy(&seen[0].body),
        format!("2\r\nab\r\n1a\r\n{data}\r\n0\r\n\r\n")
    );
}

/// An `Upgrade` on a request with a body is dropped (as HAProxy does): the request goes to the
/// server as a plain one, and the connection goes on as HTTP.
#[test]
fn upgrade_on_a_request_with_a_body_is_dropped() {
    let origin = http_origin(|r| ok(&format!("{} {}", r.target, r.body.len())));
    let proxy = Proxy::start(&http_config("", origin.addr));
    for body in [
        "Content-Length: 5\r\n\r\nhello",
        "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    ] {
        let out = raw_exchange(
            proxy.addr,
            format!(
                "POST /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n{body}\
                 GET /after HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        assert_eq!(out.matches("HTTP/1.1 200 ").count(), 2, "{body:?}: {out}");
        assert!(out.contains("/ws 5") && out.ends_with("/after 0"), "{out}");
    }
    let reqs = origin.requests();
    let ws: Vec<_> = reqs.iter().filter(|r| r.target == "/ws").collect();
    assert_eq!(ws.len(), 2);
    for r in ws {
        assert_eq!(r.header("upgrade"), None, "{:?}", r.headers);
        assert!(
            !r.header("connection")
                .unwrap_or("")
                .to_ascii_lowercase()
                .contains("upgrade"),
            "{:?}",
            r.headers
        );
        assert_eq!(r.body, b"hello");
    }
}

/// RFC 9112 §3.2: an invalid Host is a 400. None of these reaches a server (which might
/// trust it) or a redirect (which would echo it into `Location`); a valid one is forwarded
/// as sent.
#[test]
fn an_invalid_host_is_refused_before_any_server_or_redirect() {
    let origin = http_origin(|r| ok(r.header("host").unwrap_or("-")));
    let proxy = Proxy::start(&format!(
        "{}\n[[frontend.route]]\npath_prefix = \"/r\"\nredirect = {{ to = \"https://{{host}}:27443{{path}}\" }}\n",
        http_config("", origin.addr)
    ));
    for host in ["a b", "evil.example/x?", "a@b.example", "x:notaport", "x:65536", ":80"] {
        for target in ["/x", "/r/y"] {
            for version in ["1.1", "1.0"] {
                let out = raw_exchange(
                    proxy.addr,
                    format!("GET {target} HTTP/{version}\r\nHost: {host}\r\n\r\n{SMUGGLED}").as_bytes(),
                );
                assert!(out.starts_with("HTTP/1.1 400 "), "{host:?} {target}: {out}");
                assert!(!out.to_ascii_lowercase().contains("location:"), "{host:?}: {out}");
                assert_eq!(out.matches("HTTP/1.1 ").count(), 1, "{host:?}: {out}");
            }
        }
    }
    assert_eq!(
        origin.conns.load(Ordering::SeqCst),
        0,
        "a refused Host reached a server"
    );
    // A normal client: served, its Host forwarded as sent, and redirected with it.
    for host in ["t.example:8080", "[::1]:8443", "127.0.0.1"] {
        let out = raw_exchange(
            proxy.addr,
            format!("GET /x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert!(out.starts_with("HTTP/1.1 200 ") && out.ends_with(host), "{host}: {out}");
    }
    let out = raw_exchange(
        proxy.addr,
        b"GET /r/y HTTP/1.1\r\nHost: T.example:8080\r\nConnection: close\r\n\r\n",
    );
    assert!(out.contains("\r\nLocation: https://T.example:27443/r/y\r\n"), "{out}");
}

/// RFC 9112 §3.2.2: the absolute-form target's authority names the host. A Host that names
/// another one is refused (as HAProxy does): routes see the target's host, a server might
/// trust Host, so forwarding both would let `host = "admin.example"` + `deny` be bypassed.
#[test]
fn an_absolute_target_and_a_different_host_are_refused() {
    let origin = http_origin(|r| ok(&format!("{} {}", r.target, r.header("host").unwrap_or("-"))));
    let proxy = Proxy::start(&format!(
        "{}\n[[frontend.route]]\nhost = \"admin.example\"\ndeny = {{}}\n",
        http_config("", origin.addr)
    ));
    for (target, host) in [
        ("http://public.example/x", "admin.example"),
        ("http://public.example/x", "public.example:8080"),
        ("https://public.example/x", "public.example:80"),
        ("http://admin.example/x", "public.example"),
        ("http://u@public.example/x", "public.example"),
    ] {
        let out = raw_exchange(
            proxy.addr,
            format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n{SMUGGLED}").as_bytes(),
        );
        assert!(out.starts_with("HTTP/1.1 400 "), "{target} / {host}: {out}");
        assert_eq!(out.matches("HTTP/1.1 ").count(), 1, "{out}");
    }
    assert_eq!(
        origin.conns.load(Ordering::SeqCst),
        0,
        "a conflicting request reached a server"
    );
    // Agreeing: served (case and a default port do not matter), the route still applies.
    let out = raw_exchange(
        proxy.addr,
        b"GET http://Public.Example/x HTTP/1.1\r\nHost: public.example:80\r\nConnection: close\r\n\r\n",
    );
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
    assert!(out.ends_with("http://Public.Example/x public.example:80"), "{out}");
    let out = raw_exchange(
        proxy.addr,
        b"GET http://admin.example/x HTTP/1.1\r\nHost: admin.example\r\nConnection: close\r\n\r\n",
    );
    assert!(out.starts_with("HTTP/1.1 403 "), "{out}");
    // HTTP/1.0 without Host: the target names the host.
    let out = raw_exchange(proxy.addr, b"GET http://public.example/y HTTP/1.0\r\n\r\n");
    assert!(
        out.starts_with("HTTP/1.1 200 ") && out.ends_with("http://public.example/y -"),
        "{out}"
    );
}

/// An HTTP/1.0 request may name no host: a redirect then names the address the client
/// reached (RFC 7230 §5.5), never `https://:27443/x`.
#[test]
fn a_redirect_for_a_request_without_host_names_the_address_reached() {
    let origin = http_origin(|_| ok("served"));
    let proxy = Proxy::start(&format!(
        "{}\n[[frontend.route]]\npath_prefix = \"/r\"\nredirect = {{ to = \"https://{{host}}:27443{{path}}\" }}\n\
         [[frontend.route]]\npath_prefix = \"/a\"\nredirect = {{ to = \"http://{{authority}}/b\" }}\n",
        http_config("", origin.addr)
    ));
    let port = proxy.addr.port();
    for request in ["GET /r/x HTTP/1.0\r\n\r\n", "GET /r/x HTTP/1.0\r\nHost:\r\n\r\n"] {
        let out = raw_exchange(proxy.addr, request.as_bytes());
        assert!(out.starts_with("HTTP/1.1 302 "), "{request:?}: {out}");
        assert!(
            out.contains("\r\nLocation: https://127.0.0.1:27443/r/x\r\n"),
            "{request:?}: {out}"
        );
    }
    let out = raw_exchange(proxy.addr, b"GET /a HTTP/1.0\r\n\r\n");
    assert!(
        out.contains(&format!("\r\nLocation: http://127.0.0.1:{port}/b\r\n")),
        "{out}"
    );
    // With a Host, the Host.
    let out = raw_exchange(proxy.addr, b"GET /r/x HTTP/1.0\r\nHost: www.example\r\n\r\n");
    assert!(out.contains("\r\nLocation: https://www.example:27443/r/x\r\n"), "{out}");
}
