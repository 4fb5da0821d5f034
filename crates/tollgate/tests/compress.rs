//! Response compression (`compress`) over real sockets: curl's `--compressed` decoding each
//! coding, every "never compress" case, the head edits (Content-Length gone, chunked,
//! `Vary`, weak `ETag`), a server-sent-events stream that arrives event by event through
//! the compressor, a 100 MiB compressed transfer whose decoded sha256 matches, the
//! per-worker compressor budget (over it: sent as is, counted), hostile `Accept-Encoding`
//! values, HTTP/2 clients (h2c) and servers, a route that turns compression off, and a page
//! whose HTML, script and JSON reach headless Chromium compressed and decode right.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod browser_support;
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use common::Proxy;
use common::http::{Reply, http_origin, read_response};
use sha2::{Digest, Sha256};

/// Compressible text: JSON-ish records, `len` bytes.
fn json_body(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    let mut i = 0u64;
    out.push(b'[');
    while out.len() < len {
        i += 1;
        let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        out.extend_from_slice(
            format!(
                "{{\"id\":{i},\"user\":\"u{}\",\"score\":{},\"ok\":{}}},",
                h % 10_000,
                h % 1000,
                h.is_multiple_of(2)
            )
            .as_bytes(),
        );
    }
    out.truncate(len);
    out
}

fn reply(status: &str, fields: &str, body: &[u8]) -> Reply {
    let mut r = format!("HTTP/1.1 {status}\r\n{fields}Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    r.extend_from_slice(body);
    Reply::Bytes(r)
}

/// An origin answering by path: see the match arms.
fn origin() -> common::http::HttpOrigin {
    http_origin(|req| {
        let body = json_body(20_000);
        let json = "Content-Type: application/json\r\n";
        match req.target.as_str() {
            "/json" => reply(
                "200 OK",
                &format!("{json}ETag: \"v1\"\r\nAccept-Ranges: bytes\r\n"),
                &body,
            ),
            "/chunked" => {
                let mut r = format!("HTTP/1.1 200 OK\r\n{json}Transfer-Encoding: chunked\r\n\r\n").into_bytes();
                for piece in body.chunks(3000) {
                    r.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                    r.extend_from_slice(piece);
                    r.extend_from_slice(b"\r\n");
                }
                r.extend_from_slice(b"0\r\n\r\n");
                Reply::Bytes(r)
            }
            "/close-delimited" => {
                let mut r = format!("HTTP/1.1 200 OK\r\n{json}Connection: close\r\n\r\n").into_bytes();
                r.extend_from_slice(&body);
                Reply::BytesThenClose(r)
            }
            "/encoded" => reply("200 OK", &format!("{json}Content-Encoding: br\r\n"), &body),
            "/no-transform" => reply(
                "200 OK",
                &format!("{json}Cache-Control: public, no-transform\r\n"),
                &body,
            ),
            "/partial" => reply(
                "206 Partial Content",
                &format!("{json}Content-Range: bytes 0-19999/40000\r\n"),
                &body,
            ),
            "/small" => reply("200 OK", json, &body[..500]),
            "/png" => reply("200 OK", "Content-Type: image/png\r\n", &body),
            "/untyped" => reply("200 OK", "", &body),
            "/nocontent" => Reply::Bytes(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec()),
            "/notmodified" => Reply::Bytes(b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n".to_vec()),
            "/vary" => reply("200 OK", &format!("{json}Vary: Origin\r\n"), &body),
            "/missing" => reply("404 Not Found", "Content-Type: text/html\r\n", &body),
            "/plain/json" => reply("200 OK", json, &body),
            _ => reply("200 OK", "Content-Type: text/plain\r\n", b"?"),
        }
    })
}

fn config(origin: SocketAddr, frontend_extra: &str, global: &str) -> String {
    format!(
        "[global]\nworkers = 1\n{global}\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\n\
         default_backend = \"be\"\n{frontend_extra}\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n"
    )
}

const COMPRESS: &str = "compress = { min_size = \"1KiB\" }\n\
    [[frontend.route]]\npath_prefix = \"/plain/\"\nbackend = \"be\"\ncompress = { algorithms = [] }\n";

/// One request on a fresh connection: status, fields, body (chunked de-framed).
fn fetch(addr: SocketAddr, request: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (&c).write_all(request.as_bytes()).unwrap();
    read_response(&mut BufReader::new(c)).expect("a response")
}

fn get(addr: SocketAddr, path: &str, accept: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
    fetch(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: t\r\nAccept-Encoding: {accept}\r\nConnection: close\r\n\r\n"),
    )
}

/// The response head, read line by line up to its empty line.
fn read_head(r: &mut impl BufRead) -> String {
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") {
        r.read_line(&mut head).unwrap();
    }
    head
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn decode(coding: &str, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "gzip" => {
            flate2::read::GzDecoder::new(bytes).read_to_end(&mut out).unwrap();
        }
        "br" => {
            brotli::Decompressor::new(bytes, 4096).read_to_end(&mut out).unwrap();
        }
        "zstd" => out = zstd::stream::decode_all(bytes).unwrap(),
        other => panic!("coding {other}"),
    }
    out
}

#[test]
fn each_coding_is_negotiated_and_decodes_with_the_head_edited() {
    let o = origin();
    let proxy = Proxy::start(&config(o.addr, COMPRESS, ""));
    let plain = json_body(20_000);
    for (accept, want) in [
        ("gzip, deflate, br, zstd", "zstd"),
        ("gzip, br", "gzip"),
        ("deflate, br", "br"),
        ("gzip", "gzip"),
        ("br;q=0.5, gzip;q=0.8", "gzip"),
        ("*", "zstd"),
    ] {
        for path in ["/json", "/chunked", "/close-delimited"] {
            let (status, fields, body) = get(proxy.addr, path, accept);
            assert_eq!(status, 200);
            assert_eq!(
                field(&fields, "content-encoding"),
                Some(want),
                "{accept} {path}: {fields:?}"
            );
            assert_eq!(field(&fields, "transfer-encoding"), Some("chunked"), "{path}");
            assert_eq!(field(&fields, "content-length"), None);
            assert_eq!(field(&fields, "vary"), Some("Accept-Encoding"));
            assert!(body.len() * 3 < plain.len(), "{want}: {} bytes", body.len());
            assert_eq!(decode(want, &body), plain, "{accept} {path}");
            if path == "/json" {
                assert_eq!(field(&fields, "etag"), Some("W/\"v1\""), "a strong ETag turns weak");
                assert_eq!(field(&fields, "accept-ranges"), None);
            }
        }
    }
    // A 404 page compresses too; an existing Vary keeps its value and gains ours.
    let (status, fields, body) = get(proxy.addr, "/missing", "gzip");
    assert_eq!((status, field(&fields, "content-encoding")), (404, Some("gzip")));
    assert_eq!(decode("gzip", &body), plain);
    let (_, fields, _) = get(proxy.addr, "/vary", "gzip");
    assert_eq!(field(&fields, "vary"), Some("Origin, Accept-Encoding"));
    let stats = proxy.running().stats();
    assert!(stats.compressed_responses >= 17, "{stats:?}");
    assert!(stats.compress_bytes_out * 3 < stats.compress_bytes_in, "{stats:?}");
    assert_eq!(stats.compressors_in_use, 0, "every compressor counted out");
}

#[test]
fn curl_decodes_what_it_asked_for() {
    if !common::have("curl") {
        return;
    }
    let o = origin();
    let proxy = Proxy::start(&config(o.addr, COMPRESS, ""));
    let plain = json_body(20_000);
    for (h2, flag) in [(false, "--http1.1"), (true, "--http2-prior-knowledge")] {
        for accept in ["gzip", "br", "zstd"] {
            let out = Command::new("curl")
                .args(["-sS", "--max-time", "10", "--compressed", "-D", "-", flag])
                .args(["-H", &format!("Accept-Encoding: {accept}")])
                .arg(format!("http://{}/json", proxy.addr))
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let text = String::from_utf8_lossy(&out.stdout);
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            assert!(
                head.to_ascii_lowercase()
                    .contains(&format!("content-encoding: {accept}")),
                "h2={h2}: {head}"
            );
            assert_eq!(body.as_bytes(), plain, "h2={h2} {accept}: curl decoded it");
        }
    }
}

#[test]
fn what_is_never_compressed_goes_untouched() {
    let o = origin();
    let proxy = Proxy::start(&config(o.addr, COMPRESS, ""));
    let plain = json_body(20_000);
    let untouched = |path: &str, fields: &[(String, String)], body: &[u8]| {
        assert_eq!(
            field(fields, "content-encoding").filter(|e| *e != "br"),
            None,
            "{path}: {fields:?}"
        );
        assert_eq!(field(fields, "transfer-encoding"), None, "{path}");
        if !body.is_empty() {
            assert_eq!(
                field(fields, "content-length"),
                Some(body.len().to_string().as_str()),
                "{path}"
            );
        }
    };
    for path in [
        "/encoded",
        "/no-transform",
        "/partial",
        "/small",
        "/png",
        "/untyped",
        "/plain/json",
    ] {
        let (_, fields, body) = get(proxy.addr, path, "gzip, br, zstd");
        untouched(path, &fields, &body);
        if path == "/encoded" {
            assert_eq!(
                field(&fields, "content-encoding"),
                Some("br"),
                "the server's coding stays"
            );
        }
        if ["/png", "/untyped", "/plain/json"].contains(&path) {
            assert_eq!(body, plain, "{path}");
        }
    }
    for path in ["/nocontent", "/notmodified"] {
        let (status, fields, body) = get(proxy.addr, path, "gzip");
        assert!(status == 204 || status == 304);
        assert!(body.is_empty());
        assert_eq!(field(&fields, "content-encoding"), None, "{path}");
        assert_eq!(field(&fields, "etag").filter(|t| t.starts_with("W/")), None, "{path}");
    }
    // HEAD: the head a GET would get without a body, not a compressed one.
    let c = TcpStream::connect(proxy.addr).unwrap();
    (&c).write_all(b"HEAD /json HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c);
    let head = read_head(&mut r);
    assert!(!head.to_ascii_lowercase().contains("content-encoding"), "{head}");
    // An HTTP/1.0 client (as nginx's default, gzip_http_version 1.1).
    let (_, fields, body) = fetch(proxy.addr, "GET /json HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n");
    assert_eq!(field(&fields, "content-encoding"), None);
    assert_eq!(body, plain);
    // No Accept-Encoding, identity only, or q=0 everywhere: as the server sent it, with Vary
    // for caches.
    for accept in [
        None,
        Some("identity"),
        Some("gzip;q=0, br;q=0, zstd;q=0"),
        Some("*;q=0"),
    ] {
        let extra = accept.map(|a| format!("Accept-Encoding: {a}\r\n")).unwrap_or_default();
        let (_, fields, body) = fetch(
            proxy.addr,
            &format!("GET /json HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n"),
        );
        assert_eq!(field(&fields, "content-encoding"), None, "{accept:?}");
        assert_eq!(field(&fields, "vary"), Some("Accept-Encoding"), "{accept:?}");
        assert_eq!(
            field(&fields, "etag"),
            Some("\"v1\""),
            "{accept:?}: strong when not compressed"
        );
        assert_eq!(body, plain);
    }
}

/// Hostile `Accept-Encoding` values get a well-formed response (compressed or not), and a
/// normal client is served meanwhile.
#[test]
fn hostile_accept_encoding_values_are_harmless() {
    let o = origin();
    let proxy = Proxy::start(&config(o.addr, COMPRESS, ""));
    let plain = json_body(20_000);
    let long = "x-unknown;q=0.5, ".repeat(400);
    let hostile = [
        ";;;;,,,,q=1",
        "gzip;q=",
        "gzip;q=1.0000",
        "gzip;q=-1",
        "gzip;q=0.5;q=0",
        "GZIP ; Q=0.9",
        "\t gzip \t",
        "zstd;level=99",
        &long,
    ];
    for accept in hostile {
        let (status, fields, body) = get(proxy.addr, "/json", accept);
        assert_eq!(status, 200, "{accept}");
        let got = match field(&fields, "content-encoding") {
            Some(c) => decode(c, &body),
            None => body,
        };
        assert_eq!(got, plain, "{accept}");
        let (_, fields, body) = get(proxy.addr, "/json", "gzip");
        assert_eq!(field(&fields, "content-encoding"), Some("gzip"));
        assert_eq!(decode("gzip", &body), plain);
    }
}

/// Server-sent events through the compressor: the origin sends the next event only once
/// the client has decoded the previous one, so a compressor that waited for more input (or
/// for the end) would stall this test instead of passing it.
#[test]
fn a_server_sent_event_stream_arrives_event_by_event() {
    let (seen_tx, seen_rx) = mpsc::channel::<usize>();
    let seen_rx = std::sync::Mutex::new(seen_rx);
    let o = common::origin(move |s| {
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut line = String::new();
        while r.read_line(&mut line).unwrap() > 2 {
            line.clear();
        }
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            .unwrap();
        let rx = seen_rx.lock().unwrap();
        for i in 0..5 {
            let event = format!("data: event {i}\n\n");
            s.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
                .unwrap();
            // Waits (bounded) for the client to have decoded it.
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(10)),
                Ok(i),
                "event {i} never reached the client"
            );
        }
        let _ = s.write_all(b"0\r\n\r\n");
    });
    let proxy = Proxy::start(&config(o.addr, "compress = { types = [\"text/event-stream\"] }\n", ""));
    let c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    (&c).write_all(b"GET /events HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c);
    let head = read_head(&mut r);
    assert!(head.contains("Content-Encoding: gzip"), "{head}");
    let mut wire = Vec::new();
    let mut decoded_upto = 0;
    for i in 0..5 {
        let want = format!("data: event {i}\n\n");
        loop {
            let mut size = String::new();
            r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            wire.extend_from_slice(&chunk[..n]);
            // What the client can decode so far (a gzip stream without its end).
            let mut got = Vec::new();
            let _ = flate2::read::GzDecoder::new(&wire[..]).read_to_end(&mut got);
            if got.len() >= decoded_upto + want.len() {
                assert_eq!(&got[decoded_upto..], want.as_bytes());
                decoded_upto = got.len();
                break;
            }
        }
        seen_tx.send(i).unwrap();
    }
    let mut rest = Vec::new();
    loop {
        let mut size = String::new();
        r.read_line(&mut size).unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        let mut chunk = vec![0; n + 2];
        r.read_exact(&mut chunk).unwrap();
        rest.extend_from_slice(&chunk[..n]);
    }
    wire.extend_from_slice(&rest);
    let all: String = (0..5).map(|i| format!("data: event {i}\n\n")).collect();
    assert_eq!(
        decode("gzip", &wire),
        all.as_bytes(),
        "the finished stream decodes whole"
    );
}

/// 100 MiB through gzip: the decoded sha256 is the origin's.
#[test]
fn a_100_mib_compressed_transfer_decodes_to_the_same_bytes() {
    const TOTAL: usize = 100 << 20;
    let block = json_body(1 << 20);
    let expected = {
        let mut h = Sha256::new();
        for _ in 0..TOTAL / block.len() {
            h.update(&block);
        }
        h.finalize()
    };
    let b = block.clone();
    let o = common::origin(move |s| {
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut line = String::new();
        while r.read_line(&mut line).unwrap() > 2 {
            line.clear();
        }
        let head = format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {TOTAL}\r\n\r\n");
        s.write_all(head.as_bytes()).unwrap();
        for _ in 0..TOTAL / b.len() {
            if s.write_all(&b).is_err() {
                return;
            }
        }
    });
    let proxy = Proxy::start(&config(o.addr, "compress = { algorithms = [\"gzip\"] }\n", ""));
    let c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    (&c).write_all(b"GET /big HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c);
    let head = read_head(&mut r);
    assert!(head.contains("Content-Encoding: gzip"), "{head}");
    // De-chunk and decode as it streams.
    struct Dechunk<R> {
        r: R,
        left: usize,
        done: bool,
        wire: u64,
    }
    impl<R: BufRead> Read for Dechunk<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.done {
                return Ok(0);
            }
            if self.left == 0 {
                let mut size = String::new();
                self.r.read_line(&mut size)?;
                self.left = usize::from_str_radix(size.trim(), 16).map_err(std::io::Error::other)?;
                if self.left == 0 {
                    self.done = true;
                    return Ok(0);
                }
            }
            let want = buf.len().min(self.left);
            let n = self.r.read(&mut buf[..want])?;
            self.left -= n;
            self.wire += n as u64;
            if self.left == 0 {
                let mut crlf = [0; 2];
                self.r.read_exact(&mut crlf)?;
            }
            Ok(n)
        }
    }
    let mut d = flate2::read::GzDecoder::new(Dechunk {
        r,
        left: 0,
        done: false,
        wire: 0,
    });
    let (n, hash) = common::read_all_hashed(&mut d).unwrap();
    assert_eq!(n, TOTAL as u64);
    assert_eq!(hash.as_slice(), expected.as_slice(), "decoded sha256");
    let wire = d.get_ref().wire;
    println!(
        "100 MiB of JSON went as {wire} bytes of gzip ({:.1}x)",
        TOTAL as f64 / wire as f64
    );
    assert!(wire * 3 < TOTAL as u64);
}

/// `max_compressors = 1`: while one response holds the compressor, the next eligible one
/// goes as it is (with Vary), counted; once the first ends, compression resumes.
#[test]
fn over_the_compressor_budget_responses_go_uncompressed_and_counted() {
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = std::sync::Mutex::new(release_rx);
    let plain = json_body(20_000);
    let p = plain.clone();
    let o = common::origin(move |s| {
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut first = String::new();
        r.read_line(&mut first).unwrap();
        let mut line = String::new();
        while r.read_line(&mut line).unwrap() > 2 {
            line.clear();
        }
        if first.starts_with("GET /hold") {
            s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
            )
            .unwrap();
            let _ = release_rx.lock().unwrap().recv_timeout(Duration::from_secs(20));
            let _ = s.write_all(b"0\r\n\r\n");
        } else {
            let mut reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                p.len()
            )
            .into_bytes();
            reply.extend_from_slice(&p);
            s.write_all(&reply).unwrap();
        }
    });
    let proxy = Proxy::start(&config(o.addr, "compress = {}\n", "max_compressors = 1"));
    let holder = TcpStream::connect(proxy.addr).unwrap();
    holder.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (&holder)
        .write_all(b"GET /hold HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n")
        .unwrap();
    proxy.wait_for("the first response holds the compressor", |s| s.compressors_in_use == 1);
    let (_, fields, body) = get(proxy.addr, "/json", "gzip");
    assert_eq!(field(&fields, "content-encoding"), None, "over budget: as it is");
    assert_eq!(field(&fields, "vary"), Some("Accept-Encoding"));
    assert_eq!(body, plain);
    assert_eq!(proxy.running().stats().compress_over_budget, 1);
    release_tx.send(()).unwrap();
    let (_, fields, _) = read_response(&mut BufReader::new(&holder)).unwrap();
    assert_eq!(field(&fields, "content-encoding"), Some("gzip"));
    proxy.wait_for("the compressor is free again", |s| s.compressors_in_use == 0);
    let (_, fields, body) = get(proxy.addr, "/json", "gzip");
    assert_eq!(field(&fields, "content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &body), plain);
}

#[test]
fn check_refuses_bad_compress_tables() {
    let o = SocketAddr::from(([127, 0, 0, 1], 9));
    for (extra, want) in [
        (
            "compress = { algorithms = [\"deflate\"] }",
            "unknown algorithm `deflate`",
        ),
        ("compress = { algorithms = [\"gzip\", \"gzip\"] }", "listed twice"),
        ("compress = { types = [\"*/*\"] }", "is not a media type"),
        ("compress = { level = { gzip = 10 } }", "gzip levels go from 1 to 9"),
        ("compress = { level = { zstd = 0 } }", "zstd levels go from 1 to 19"),
        ("compress = { min = 1 }", "unknown field `min`"),
    ] {
        let text = config(o, extra, "");
        let e = tollgate::config::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(e.contains(want), "{extra}: {e}");
    }
    let tcp = "[[frontend]]\nname = \"t\"\nbind = [\"127.0.0.1:0\"]\nmode = \"tcp\"\ndefault_backend = \"b\"\ncompress = {}\n\
               [[backend]]\nname = \"b\"\n[[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:9\"\n";
    let e = tollgate::config::parse(tcp, "t.toml").unwrap_err().to_string();
    assert!(e.contains("compression needs http mode"), "{e}");
}

fn h2_server_config(origin: SocketAddr) -> String {
    format!(
        "[global]\nworkers = 1\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\n\
         default_backend = \"be\"\ncompress = {{}}\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\nproto = \"h2\"\n"
    )
}

/// HTTP/2 servers: an HTTP/1.1 client and an HTTP/2 client (curl) get compressed bodies
/// that decode to the server's bytes.
#[test]
fn responses_of_http2_servers_compress_for_both_kinds_of_client() {
    let o = common::h2_origin::h2_origin(common::h2_origin::H2Options::default());
    let proxy = Proxy::start(&h2_server_config(o.addr));
    let plain = common::h2_origin::pattern(0, 200_000);
    for coding in ["gzip", "br", "zstd"] {
        let (status, fields, body) = get(proxy.addr, "/text/200000", coding);
        assert_eq!(status, 200);
        assert_eq!(field(&fields, "content-encoding"), Some(coding), "{fields:?}");
        assert_eq!(field(&fields, "transfer-encoding"), Some("chunked"));
        assert_eq!(field(&fields, "content-length"), None);
        assert_eq!(decode(coding, &body), plain, "h1 client, {coding}");
    }
    if common::have("curl") {
        for coding in ["gzip", "br", "zstd"] {
            let out = Command::new("curl")
                .args([
                    "-sS",
                    "--max-time",
                    "10",
                    "--compressed",
                    "-D",
                    "-",
                    "--http2-prior-knowledge",
                ])
                .args(["-H", &format!("Accept-Encoding: {coding}")])
                .arg(format!("http://{}/text/200000", proxy.addr))
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let split = out.stdout.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            let head = String::from_utf8_lossy(&out.stdout[..split]).to_ascii_lowercase();
            assert!(head.contains(&format!("content-encoding: {coding}")), "{head}");
            assert!(!head.contains("content-length"), "{head}");
            assert_eq!(&out.stdout[split + 4..], &plain[..], "h2 client, {coding}");
        }
    }
    assert_eq!(proxy.running().stats().compressors_in_use, 0);
}

/// An HTTP/2 server's event stream (an event every 20 ms) through the compressor: the
/// first event decodes while the stream is still going.
#[test]
fn an_http2_servers_event_stream_is_flushed_as_it_comes() {
    let o = common::h2_origin::h2_origin(common::h2_origin::H2Options::default());
    let proxy = Proxy::start(&h2_server_config(o.addr));
    let c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (&c).write_all(b"GET /text-stream/500 HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c);
    let head = read_head(&mut r);
    assert!(head.contains("content-encoding: gzip"), "{head}");
    let mut wire = Vec::new();
    loop {
        let mut size = String::new();
        r.read_line(&mut size).unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        assert_ne!(n, 0, "the stream ended before its first event could be decoded");
        let mut chunk = vec![0; n + 2];
        r.read_exact(&mut chunk).unwrap();
        wire.extend_from_slice(&chunk[..n]);
        let mut got = Vec::new();
        let _ = flate2::read::GzDecoder::new(&wire[..]).read_to_end(&mut got);
        if got.starts_with(b"data: event 0\n\n") {
            break;
        }
    }
    // The origin takes 10 s for its 500 events: the stream is still open.
    assert!(
        o.counts.active.load(std::sync::atomic::Ordering::SeqCst) == 1,
        "the server is still sending"
    );
}

/// A page, its script and its JSON, each compressed on the way to headless Chromium: the
/// script runs and reads the JSON right (Chromium offers gzip, br and zstd).
#[test]
fn a_browser_decodes_a_compressed_page_script_and_json() {
    let Some(binary) = browser_support::chromium_or_skip() else {
        return;
    };
    let items: Vec<String> = (0..2000)
        .map(|i| format!("{{\"n\":{i},\"name\":\"item {i}\"}}"))
        .collect();
    let json = format!("{{\"check\":\"ok-1234\",\"items\":[{}]}}", items.join(","));
    let script = format!(
        "// {}\nfetch('/data.json').then(r => r.json()).then(d => {{ window.result = d.items.length + ':' + d.check; }});\n",
        "padding so the script is over min_size ".repeat(100)
    );
    let page = format!(
        "<!doctype html><html><head><title>t</title></head><body><p>{}</p><script src=\"/app.js\"></script></body></html>",
        "a paragraph of text. ".repeat(200)
    );
    let o = http_origin(move |req| {
        let (ty, body) = match req.target.as_str() {
            "/app.js" => ("text/javascript", script.as_bytes()),
            "/data.json" => ("application/json", json.as_bytes()),
            "/" => ("text/html; charset=utf-8", page.as_bytes()),
            // The favicon, and anything else: under min_size, never compressed.
            _ => return reply("404 Not Found", "Content-Type: text/plain\r\n", b"none"),
        };
        reply(
            "200 OK",
            &format!("Content-Type: {ty}\r\nCache-Control: no-store\r\n"),
            body,
        )
    });
    let proxy = Proxy::start(&config(o.addr, "compress = {}\n", ""));
    let mut browser = browser_support::Browser::launch(&binary);
    browser.call("Page.enable", serde_json::json!({}));
    browser.call(
        "Page.navigate",
        serde_json::json!({"url": format!("http://{}/", proxy.addr)}),
    );
    browser.wait_value(
        "window.result || null",
        &serde_json::json!("2000:ok-1234"),
        Duration::from_secs(20),
    );
    let stats = proxy.running().stats();
    assert_eq!(
        stats.compressed_responses, 3,
        "page, script and JSON went compressed: {stats:?}"
    );
    let offered: Vec<String> = o
        .requests()
        .iter()
        .filter_map(|r| r.header("accept-encoding").map(str::to_string))
        .collect();
    assert!(offered.iter().all(|a| a.contains("gzip")), "{offered:?}");
}
