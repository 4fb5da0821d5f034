//! HTTP/2 to servers (`proto = "h2"`): curl speaking HTTP/1.1 to tollgate, tollgate speaking
//! HTTP/2 to an `h2` origin (h2c with prior knowledge, and TLS with ALPN h2). Bodies both
//! ways sha256-checked, many clients multiplexed on few server connections, `maxconn`
//! counting streams, trailers for a client that asked for them, a server that sends
//! GOAWAY, a server that dies mid-request, and a TLS server that does not speak h2.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use common::h2_origin::{H2Options, H2Origin, h2_origin, pattern_byte, with_alpn};
use common::tls::{Ca, TempDir};
use common::*;
use sha2::{Digest, Sha256};

fn have_curl() -> bool {
    if Command::new("curl").arg("--version").output().is_err() {
        println!("skipped: curl is not installed");
        return false;
    }
    true
}

/// One backend of `proto = "h2"` servers (`server_extra` added to the server table).
fn h2_config(workers: usize, origin: SocketAddr, server_extra: &str) -> String {
    format!(
        "[global]\nworkers = {workers}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\n\
         default_backend = \"be\"\n\n[[backend]]\nname = \"be\"\nmode = \"http\"\nproto = \"h2\"\n\
         [[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n{server_extra}\n"
    )
}

/// A TLS h2 origin (ALPN `alpn`) and the server keys that trust it.
fn tls_origin(dir: &TempDir, alpn: &[&[u8]], opts: H2Options) -> (H2Origin, String) {
    let ca = Ca::new("h2 test ca");
    let leaf = ca.leaf(&["localhost"], "localhost", false);
    let ca_file = ca.write(dir, "ca");
    let origin = h2_origin(H2Options {
        tls: Some(with_alpn(leaf.server_config(), alpn)),
        ..opts
    });
    let extra = format!("tls = true\nca_file = \"{}\"\nsni = \"localhost\"", ca_file.display());
    (origin, extra)
}

fn curl(args: &[&str]) -> std::process::Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "120"])
        .args(args)
        .output()
        .expect("curl")
}

fn sha_file(path: &std::path::Path) -> [u8; 32] {
    let mut f = std::fs::File::open(path).unwrap();
    read_all_hashed(&mut f).unwrap().1
}

/// Pattern bytes `0..len` hashed, as the origin's `/size/N` sends them.
fn pattern_sha(len: u64) -> [u8; 32] {
    let mut h = Sha256::new();
    let block: Vec<u8> = (0..(251 * 1024) as u64).map(pattern_byte).collect();
    let mut left = len;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        h.update(&block[..n]);
        left -= n as u64;
    }
    h.finalize().into()
}

/// Writes `len` bytes of seeded pseudo-random data; returns its sha256.
fn write_payload(path: &std::path::Path, len: u64) -> [u8; 32] {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut h = Sha256::new();
    let block = payload_block(7, 1 << 20);
    let mut left = len;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n]).unwrap();
        h.update(&block[..n]);
        left -= n as u64;
    }
    f.flush().unwrap();
    h.finalize().into()
}

/// Uploads and downloads 0 B, 1 MiB and 100 MiB through the proxy, sha256 both ways
/// (uploads with a length and chunked, echoed back).
fn bodies_both_ways(proxy: &Proxy, dir: &TempDir) {
    for len in [0u64, 1 << 20, 100 << 20] {
        let input = dir.path(&format!("in-{len}"));
        let sent = write_payload(&input, len);
        for chunked in [false, true] {
            let output = dir.path(&format!("echo-{len}-{chunked}"));
            let mut args = vec!["-o", output.to_str().unwrap(), "--data-binary"];
            let at = format!("@{}", input.display());
            args.push(&at);
            if chunked {
                args.extend(["-H", "Transfer-Encoding: chunked"]);
            }
            let url = format!("http://{}/echo", proxy.addr);
            args.push(&url);
            let out = curl(&args);
            assert!(
                out.status.success(),
                "echo {len} chunked={chunked}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(sha_file(&output), sent, "echo of {len} bytes (chunked={chunked})");
        }
        let output = dir.path(&format!("size-{len}"));
        let url = format!("http://{}/size/{len}", proxy.addr);
        let out = curl(&["-o", output.to_str().unwrap(), "-w", "%{http_code}", &url]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "200",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(std::fs::metadata(&output).unwrap().len(), len);
        assert_eq!(sha_file(&output), pattern_sha(len), "download of {len} bytes");
    }
}

#[test]
fn h2c_bodies_of_0_1mib_100mib_both_ways_curl() {
    if !have_curl() {
        return;
    }
    let origin = h2_origin(H2Options::default());
    let proxy = Proxy::start(&h2_config(1, origin.addr, ""));
    let dir = TempDir::new();
    bodies_both_ways(&proxy, &dir);
    // Every request multiplexed on the one connection the worker opened.
    assert_eq!(origin.connections(), 1, "one pooled h2c connection");
    assert_eq!(origin.streams(), 9);
}

#[test]
fn tls_alpn_h2_bodies_of_0_1mib_100mib_both_ways_curl() {
    if !have_curl() {
        return;
    }
    let dir = TempDir::new();
    let (origin, extra) = tls_origin(&dir, &[b"h2"], H2Options::default());
    let proxy = Proxy::start(&h2_config(1, origin.addr, &extra));
    bodies_both_ways(&proxy, &dir);
    assert_eq!(origin.connections(), 1, "one pooled TLS h2 connection");
}

#[test]
fn request_heads_cross_without_connection_headers_curl() {
    if !have_curl() {
        return;
    }
    let origin = h2_origin(H2Options::default());
    let proxy = Proxy::start(&h2_config(1, origin.addr, ""));
    let url = format!("http://{}/headers?q=1", proxy.addr);
    let out = curl(&[
        "-H",
        "Host: example.test",
        "-H",
        "Keep-Alive: 5",
        "-H",
        "TE: gzip",
        "-H",
        "X-A: b",
        &url,
    ]);
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(seen.starts_with("GET http://example.test/headers?q=1\n"), "{seen}");
    assert!(seen.contains("x-a: b\n"), "{seen}");
    assert!(
        seen.contains("x-forwarded-for: 127.0.0.1\n"),
        "forwarding headers as for h1: {seen}"
    );
    for gone in ["host:", "keep-alive:", "te:", "connection:"] {
        assert!(!seen.contains(gone), "{gone} must not cross: {seen}");
    }
}

#[test]
fn hundred_clients_share_few_server_connections_curl() {
    if !have_curl() {
        return;
    }
    let workers = 2;
    let max_streams = 10;
    let origin = h2_origin(H2Options {
        max_concurrent_streams: Some(max_streams),
        ..H2Options::default()
    });
    let proxy = Proxy::start(&h2_config(workers, origin.addr, ""));
    let url = format!("http://{}/slow/300", proxy.addr);
    let mut args = vec![
        "--parallel",
        "--parallel-immediate",
        "--parallel-max",
        "100",
        "-w",
        "%{http_code}\n",
    ];
    let urls = vec![url.as_str(); 100];
    for u in &urls {
        args.extend(["-o", "/dev/null", *u]);
    }
    let out = curl(&args);
    let codes = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        codes.lines().filter(|l| *l == "200").count(),
        100,
        "{codes}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(origin.streams(), 100);
    let bound = workers * 100usize.div_ceil(max_streams as usize);
    assert!(
        origin.connections() <= bound,
        "{} server connections for 100 clients (bound {bound})",
        origin.connections()
    );
    assert!(
        origin.peak() > workers,
        "streams were multiplexed: peak {}",
        origin.peak()
    );
}

#[test]
fn maxconn_counts_streams_curl() {
    if !have_curl() {
        return;
    }
    let origin = h2_origin(H2Options::default());
    let proxy = Proxy::start(&h2_config(1, origin.addr, "maxconn = 3"));
    let url = format!("http://{}/slow/200", proxy.addr);
    let mut args = vec![
        "--parallel",
        "--parallel-immediate",
        "--parallel-max",
        "12",
        "-w",
        "%{http_code}\n",
    ];
    let urls = vec![url.as_str(); 12];
    for u in &urls {
        args.extend(["-o", "/dev/null", *u]);
    }
    let out = curl(&args);
    let codes = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        codes.lines().filter(|l| *l == "200").count(),
        12,
        "queued, then served: {codes}"
    );
    assert_eq!(origin.peak(), 3, "never more than maxconn streams at the server");
    assert_eq!(origin.connections(), 1, "the streams share one connection");
    // The last response can reach curl before its stream's slot is given back: wait for
    // the server's count (bounded), as `Proxy::wait_for` does for the counters.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let active = proxy.running().show_servers(Some("be"))[0].active;
        if active == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "every stream's slot released: {active} still held"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A raw HTTP/1.1 exchange, the connection closed by the proxy after it.
fn raw(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn trailers_reach_a_client_that_asked_for_them() {
    let origin = h2_origin(H2Options::default());
    let proxy = Proxy::start(&h2_config(1, origin.addr, ""));
    let asked = raw(
        proxy.addr,
        "GET /trailers HTTP/1.1\r\nHost: t\r\nTE: trailers\r\nConnection: close\r\n\r\n",
    );
    assert!(asked.starts_with("HTTP/1.1 200 OK\r\n"), "{asked}");
    assert!(asked.contains("transfer-encoding: chunked\r\n"), "{asked}");
    assert!(
        asked.ends_with("5\r\nhello\r\n0\r\nx-checksum: 5\r\ngrpc-status: 0\r\n\r\n"),
        "trailers as chunked trailers: {asked:?}"
    );
    let not_asked = raw(
        proxy.addr,
        "GET /trailers HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(not_asked.ends_with("5\r\nhello\r\n0\r\n\r\n"), "dropped: {not_asked:?}");
    let seen = raw(
        proxy.addr,
        "GET /headers HTTP/1.1\r\nHost: t\r\nTE: trailers\r\nConnection: close\r\n\r\n",
    );
    assert!(
        seen.contains("\nte: trailers\n"),
        "te: trailers kept end to end: {seen}"
    );
    let old = raw(proxy.addr, "GET /trailers HTTP/1.0\r\nHost: t\r\n\r\n");
    assert!(old.ends_with("\r\n\r\nhello"), "HTTP/1.0: close-delimited: {old:?}");
    assert!(old.contains("connection: close\r\n"), "{old:?}");
}

#[test]
fn a_server_that_sends_goaway_midway_loses_no_request_curl() {
    if !have_curl() {
        return;
    }
    let origin = h2_origin(H2Options {
        goaway_after: Some(10),
        ..H2Options::default()
    });
    let proxy = Proxy::start(&h2_config(1, origin.addr, ""));
    let url = format!("http://{}/slow/20", proxy.addr);
    // Sequential on one client connection (a GOAWAY every tenth stream), then twenty at once.
    let urls = vec![url.as_str(); 25];
    let mut args = vec!["-w", "%{http_code}\n"];
    for u in &urls {
        args.extend(["-o", "/dev/null", *u]);
    }
    let out = curl(&args);
    let codes = String::from_utf8_lossy(&out.stdout);
    assert_eq!(codes.lines().filter(|l| *l == "200").count(), 25, "{codes}");
    assert!(
        origin.connections() >= 3,
        "a new connection after each GOAWAY: {}",
        origin.connections()
    );
    let urls = vec![url.as_str(); 20];
    let mut args = vec![
        "--parallel",
        "--parallel-immediate",
        "--parallel-max",
        "20",
        "-w",
        "%{http_code}\n",
    ];
    for u in &urls {
        args.extend(["-o", "/dev/null", *u]);
    }
    let out = curl(&args);
    let codes = String::from_utf8_lossy(&out.stdout);
    assert_eq!(codes.lines().filter(|l| *l == "200").count(), 20, "{codes}");
}

#[test]
fn a_server_killed_mid_request_is_a_502_and_the_next_request_works_curl() {
    if !have_curl() {
        return;
    }
    let origin = h2_origin(H2Options::default());
    let proxy = Proxy::start(&h2_config(1, origin.addr, ""));
    let code = |path: &str| {
        let url = format!("http://{}{path}", proxy.addr);
        let out = curl(&["-o", "/dev/null", "-w", "%{http_code}", &url]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(code("/headers"), "200");
    assert_eq!(code("/kill"), "502", "in flight when the server died: never replayed");
    assert_eq!(code("/headers"), "200", "the next request opens a new connection");
    assert_eq!(origin.connections(), 2);
    // Killed after the response head: the client sees a truncated body, not a 502.
    let url = format!("http://{}/kill-mid", proxy.addr);
    let out = curl(&["-o", "/dev/null", &url]);
    assert!(!out.status.success(), "a truncated body is an error for curl");
    assert_eq!(code("/headers"), "200");
}

#[test]
fn a_tls_server_without_h2_in_alpn_is_refused_curl() {
    if !have_curl() {
        return;
    }
    let dir = TempDir::new();
    let (origin, extra) = tls_origin(&dir, &[], H2Options::default());
    let proxy = Proxy::start(&h2_config(1, origin.addr, &extra));
    let url = format!("http://{}/headers", proxy.addr);
    let out = curl(&["-o", "/dev/null", "-w", "%{http_code}", &url]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "502");
    assert_eq!(origin.streams(), 0, "nothing was sent to it");
    let view = proxy.running().show_servers(Some("be"));
    assert!(
        view[0].counters.connect_failures >= 1,
        "counted: {:?}",
        view[0].counters
    );
}

#[test]
fn access_log_records_and_counters_as_for_h1_servers() {
    let origin = h2_origin(H2Options::default());
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let table = format!(
        "[log]\naccess = \"{}\"\nformat = \"json\"\nfields = [\"backend\", \"server\", \"status\", \
         \"termination_code\", \"bytes_to_server\", \"bytes_to_client\", \"response_ms\", \"version\", \
         \"response_header.x-origin\"]\n[global]\n",
        log.display()
    );
    let proxy = Proxy::start(&h2_config(1, origin.addr, "").replacen("[global]\n", &table, 1));
    let ok = raw(
        proxy.addr,
        "GET /headers HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(ok.starts_with("HTTP/1.1 200 "), "{ok}");
    let failed = raw(proxy.addr, "GET /kill HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert!(failed.starts_with("HTTP/1.1 502 "), "{failed}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        if lines.len() >= 2 {
            break lines;
        }
        assert!(std::time::Instant::now() < deadline, "access log: {text}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let (first, second) = (&lines[0], &lines[1]);
    assert_eq!(
        (&first["backend"], &first["server"]),
        (&"be".into(), &"o".into()),
        "{first}"
    );
    assert_eq!(first["status"], 200, "{first}");
    assert_eq!(first["termination_code"], "--", "{first}");
    assert!(first["bytes_to_server"].as_u64().unwrap() > 0, "{first}");
    assert!(first["bytes_to_client"].as_u64().unwrap() > 0, "{first}");
    assert!(first["response_ms"].as_f64().is_some(), "{first}");
    // A response field kept from the HTTP/2 server's head, for an HTTP/1.1 client.
    assert_eq!(
        (&first["version"], &first["response_header.x-origin"]),
        (&"HTTP/1.1".into(), &"h2".into())
    );
    assert_eq!(
        second["response_header.x-origin"],
        serde_json::Value::Null,
        "no head came: {second}"
    );
    assert_eq!(second["status"], 502, "{second}");
    assert_eq!(second["server"], "o", "{second}");
    assert!(
        second["termination_code"].as_str().unwrap().starts_with('S'),
        "the server failed: {second}"
    );
    let view = proxy.running().show_servers(Some("be"));
    let c = &view[0].counters;
    assert_eq!((c.requests, c.responses_2xx), (2, 1), "{c:?}");
    assert!(c.bytes_to_server > 0 && c.bytes_to_client > 0, "{c:?}");
}

#[test]
fn sticky_cookies_work_with_h2_servers() {
    let origin = h2_origin(H2Options::default());
    let config = h2_config(1, origin.addr, "") + "[backend.sticky]\ncookie = \"SRV\"\n";
    let proxy = Proxy::start(&config);
    let first = raw(
        proxy.addr,
        "GET /headers HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    let line = first
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie: srv="))
        .unwrap_or_else(|| panic!("the proxy's cookie: {first}"));
    let value = line["set-cookie: ".len()..].split(';').next().unwrap().to_string();
    let again = raw(
        proxy.addr,
        &format!("GET /headers HTTP/1.1\r\nHost: t\r\nCookie: {value}; a=b\r\nConnection: close\r\n\r\n"),
    );
    assert!(
        !again.to_ascii_lowercase().contains("set-cookie: srv="),
        "kept, not set again: {again}"
    );
    assert!(again.contains("cookie: a=b\n"), "the other cookies pass: {again}");
    assert!(
        !again.contains("SRV="),
        "the server never sees the proxy's cookie: {again}"
    );
}

#[test]
fn idle_h2_connections_close_after_pool_idle() {
    let origin = h2_origin(H2Options::default());
    let config =
        h2_config(1, origin.addr, "").replacen("[global]\n", "[timeouts]\npool_idle = \"300ms\"\n[global]\n", 1);
    let proxy = Proxy::start(&config);
    let get = || {
        raw(
            proxy.addr,
            "GET /headers HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
    };
    assert!(get().starts_with("HTTP/1.1 200 "));
    assert!(get().starts_with("HTTP/1.1 200 "));
    assert_eq!((origin.connections(), origin.closed()), (1, 0), "reused while not idle");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while origin.closed() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle connection was never closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(get().starts_with("HTTP/1.1 200 "));
    assert_eq!(origin.connections(), 2, "a new connection after the idle one closed");
}

#[test]
fn a_backend_mixes_h1_and_h2_servers() {
    let h2 = h2_origin(H2Options::default());
    let h1 = common::http::http_origin(|_| common::http::ok("from h1"));
    let config = format!(
        "[global]\nworkers = 1\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\n\
         default_backend = \"be\"\n\n[[backend]]\nname = \"be\"\nmode = \"http\"\n\
         [[backend.server]]\nname = \"one\"\naddress = \"{}\"\n\
         [[backend.server]]\nname = \"two\"\naddress = \"{}\"\nproto = \"h2\"\n",
        h1.addr, h2.addr
    );
    let proxy = Proxy::start(&config);
    let mut bodies = Vec::new();
    for _ in 0..4 {
        let r = raw(
            proxy.addr,
            "GET /headers HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
        bodies.push(r);
    }
    assert_eq!(
        bodies.iter().filter(|b| b.ends_with("from h1")).count(),
        2,
        "{bodies:?}"
    );
    assert_eq!(
        bodies.iter().filter(|b| b.contains("GET http://t/headers\n")).count(),
        2,
        "{bodies:?}"
    );
    assert_eq!(h2.streams(), 2);
}
