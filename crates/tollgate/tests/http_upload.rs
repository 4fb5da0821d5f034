//! Request bodies on their way to the server: a server that answers before the body is
//! complete (the client must get that response, the upload stops, both connections close),
//! interim responses in the middle of an upload, and `max_body_size` on chunked bodies.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::http::*;
use common::*;

/// Reads a request head from a raw origin connection; returns what came after it.
fn read_head(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(got.split_off(end + 4));
        }
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
    }
}

/// Reads and drops everything until EOF (or a reset); the bytes read. Bounded by the read
/// timeout set on `s`.
fn drain(s: &mut TcpStream) -> Result<usize, std::io::Error> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(total),
            Err(e) => return Err(e),
        }
    }
}

/// Starts an upload of `body_len` bytes (Content-Length, or chunked in 64 KiB chunks) on a
/// thread that writes until done or until the proxy stops taking bytes; returns the reader side.
fn upload(proxy: &Proxy, body_len: usize, chunked: bool) -> (BufReader<TcpStream>, thread::JoinHandle<()>) {
    let c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = c.try_clone().unwrap();
    let writer = thread::spawn(move || {
        let framing = if chunked {
            "Transfer-Encoding: chunked".to_string()
        } else {
            format!("Content-Length: {body_len}")
        };
        let head = format!("PUT /big HTTP/1.1\r\nHost: t\r\n{framing}\r\n\r\n");
        if w.write_all(head.as_bytes()).is_err() {
            return;
        }
        let block = payload_block(7, 64 * 1024);
        let mut sent = 0;
        while sent < body_len {
            let n = block.len().min(body_len - sent);
            let res = if chunked {
                w.write_all(format!("{n:x}\r\n").as_bytes())
                    .and_then(|()| w.write_all(&block[..n]))
                    .and_then(|()| w.write_all(b"\r\n"))
            } else {
                w.write_all(&block[..n])
            };
            if res.is_err() {
                return;
            }
            sent += n;
        }
        if chunked {
            let _ = w.write_all(b"0\r\n\r\n");
        }
    });
    (BufReader::new(c), writer)
}

/// The proxy's config with a long client timeout: an answer that only came from a timeout
/// would miss the test's own (much shorter) bounds.
fn config(origin: std::net::SocketAddr) -> String {
    http_config("[timeouts]\nclient = \"60s\"\nserver = \"60s\"", origin)
}

#[test]
fn early_413_and_close_during_a_large_upload_reaches_the_client() {
    for chunked in [false, true] {
        let origin = origin(|s| {
            if read_head(s).is_some() {
                // Answer and close with the body unread (the kernel resets the connection).
                let _ = s.write_all(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 4\r\n\r\nbig!");
            }
        });
        let proxy = Proxy::start(&config(origin.addr));
        let started = Instant::now();
        let (mut r, writer) = upload(&proxy, 256 << 20, chunked);
        let (status, headers, body) = read_response(&mut r).expect("the early response");
        assert_eq!((status, &body[..]), (413, &b"big!"[..]), "chunked: {chunked}");
        let close = headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("connection"));
        assert_eq!(close.map(|(_, v)| v.as_str()), Some("close"));
        // Then the connection ends (the writer sees it too), long before any timeout.
        let mut rest = Vec::new();
        let _ = r.read_to_end(&mut rest);
        writer.join().unwrap();
        assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
        assert_eq!(origin.total.load(Ordering::SeqCst), 1);
    }
}

/// A server that answers early and then stops reading without closing: the proxy's writes
/// block, it must notice the response anyway, forward it, and close the server connection.
#[test]
fn early_401_from_a_server_that_stops_reading() {
    let (answered_tx, answered_rx) = mpsc::channel::<()>();
    let answered_rx = Arc::new(Mutex::new(answered_rx));
    let (closed_tx, closed_rx) = mpsc::channel();
    let closed_tx = Mutex::new(closed_tx);
    let origin = origin(move |s| {
        if read_head(s).is_none() {
            return;
        }
        let _ = s.write_all(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n");
        // Not reading until the client has its answer.
        let _ = answered_rx.lock().unwrap().recv_timeout(Duration::from_secs(20));
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = closed_tx.lock().unwrap().send(drain(s).is_ok());
    });
    let proxy = Proxy::start(&config(origin.addr));
    let (mut r, writer) = upload(&proxy, 256 << 20, false);
    let (status, _, _) = read_response(&mut r).expect("the early response");
    assert_eq!(status, 401);
    answered_tx.send(()).unwrap();
    let closed = closed_rx.recv_timeout(Duration::from_secs(15)).expect("origin drained");
    assert!(closed, "the proxy kept the server connection open");
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    writer.join().unwrap();
}

/// An interim response in the middle of an upload (here 103, unsolicited) is passed on and
/// the upload goes on; the connection stays usable.
#[test]
fn interim_response_during_an_upload_is_passed_on() {
    let origin = origin(|s| {
        let Some(mut body) = read_head(s) else { return };
        let _ = s.write_all(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n");
        let mut buf = [0u8; 64];
        while body.len() < 5 {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => body.extend_from_slice(&buf[..n]),
            }
        }
        let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\ngot {}", body.len());
        let _ = s.write_all(reply.as_bytes());
        let _ = read_head(s).map(|_| s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nagain"));
    });
    let proxy = Proxy::start(&config(origin.addr));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    c.write_all(b"POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\n")
        .unwrap();
    // The body is sent only once the interim response came through.
    let (status, headers, _) = read_response(&mut r).expect("interim");
    assert_eq!(status, 103);
    assert!(headers.iter().any(|(n, v)| n == "Link" && v == "</a.css>"));
    c.write_all(b"hello").unwrap();
    let (status, _, body) = read_response(&mut r).expect("final");
    assert_eq!((status, &body[..]), (200, &b"got 5"[..]));
    c.write_all(b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let (status, _, body) = read_response(&mut r).expect("next");
    assert_eq!((status, &body[..]), (200, &b"again"[..]));
    assert_eq!(origin.total.load(Ordering::SeqCst), 1);
}

#[test]
fn chunked_body_over_max_body_size_gets_413_before_any_connection() {
    let origin = http_origin(|r| ok(&format!("got {}", r.body.len())));
    let proxy = Proxy::start(&http_config("[http]\nmax_body_size = \"1KiB\"", origin.addr));
    let head = "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
    let one = "a".repeat(600);
    for body in [
        format!("800\r\n{}", "a".repeat(100)),
        format!("258\r\n{one}\r\n258\r\n{one}\r\n0\r\n\r\n"),
    ] {
        let out = raw_exchange(proxy.addr, format!("{head}{body}").as_bytes());
        assert!(out.starts_with("HTTP/1.1 413 "), "{out}");
        assert!(out.to_ascii_lowercase().contains("connection: close"), "{out}");
    }
    assert_eq!(origin.conns.load(Ordering::SeqCst), 0);
    // At the limit exactly: forwarded.
    let body = format!("200\r\n{}\r\n200\r\n{}\r\n0\r\n\r\n", "b".repeat(512), "c".repeat(512));
    let out = raw_exchange(
        proxy.addr,
        format!("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{body}")
            .as_bytes(),
    );
    assert!(out.ends_with("got 1024"), "{out}");
}

/// The chunk that goes past the limit arrives after the head was forwarded: the client gets
/// 413, the server connection is closed without the body's end, and not reused.
#[test]
fn chunked_body_going_over_max_body_size_after_the_head_was_sent() {
    let (head_tx, head_rx) = mpsc::channel();
    let head_tx = Mutex::new(head_tx);
    let (seen_tx, seen_rx) = mpsc::channel();
    let seen_tx = Mutex::new(seen_tx);
    let origin = origin(move |s| {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let Some(mut got) = read_head(s) else { return };
        let _ = head_tx.lock().unwrap().send(());
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let _ = seen_tx.lock().unwrap().send(got);
    });
    let proxy = Proxy::start(&http_config("[http]\nmax_body_size = \"1KiB\"", origin.addr));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let first = "x".repeat(0x300);
    c.write_all(
        format!("POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n300\r\n{first}\r\n").as_bytes(),
    )
    .unwrap();
    head_rx.recv_timeout(Duration::from_secs(10)).expect("head forwarded");
    c.write_all(format!("300\r\n{first}\r\n0\r\n\r\n").as_bytes()).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 413 "), "{out}");
    let seen = seen_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("server connection closed");
    let seen = String::from_utf8_lossy(&seen);
    assert!(seen.starts_with("300\r\n") && !seen.contains("0\r\n\r\n"), "{seen}");
    assert_eq!(proxy.running().stats().http_pool_reused, 0);
}
