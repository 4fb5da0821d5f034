//! HTTP/2 clients through tollgate to an HTTP/1.1 origin (issue 13, client side): curl over
//! TLS with ALPN h2 and with h2c prior knowledge, nghttp; bodies of 0 B, 1 MiB and 100 MiB
//! both ways with sha256 checked, 100 concurrent streams on one connection, trailers both
//! ways (h2 → h1 chunked trailers, h1 chunked trailers → h2 trailers), forwarding headers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
#[path = "h2_support/origin.rs"]
mod origin;

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::thread;

use common::Proxy;
use common::tls::{Ca, TempDir, cert_entry, path_str};
use sha2::{Digest, Sha256};

fn have(tool: &str, arg: &str) -> bool {
    Command::new(tool).arg(arg).output().is_ok()
}

fn config(origin: SocketAddr, frontend_extra: &str) -> String {
    format!(
        "[global]\nworkers = 1\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n{frontend_extra}\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n"
    )
}

fn h2c_proxy(origin: SocketAddr) -> Proxy {
    Proxy::start(&config(origin, "h2c = true"))
}

/// curl with `args`, stdout hashed as it streams; returns (bytes, sha256 hex, stderr).
fn curl_hashed(args: &[String], stdin: Option<(u64, u64)>) -> (u64, String, String) {
    let mut child = Command::new("curl")
        .args(["-sS", "--max-time", "120"])
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let feeder = stdin.map(|(seed, len)| {
        let mut input = child.stdin.take().unwrap();
        thread::spawn(move || upload_bytes(&mut input, seed, len))
    });
    let mut out = child.stdout.take().unwrap();
    let (n, sha) = common::read_all_hashed(&mut out).unwrap();
    let output = child.wait_with_output().unwrap();
    if let Some(f) = feeder {
        f.join().unwrap();
    }
    (
        n,
        origin::hex(&sha),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Writes `len` deterministic bytes derived from `seed`; the test computes the same sum.
fn upload_bytes(w: &mut impl Write, seed: u64, len: u64) {
    let block = common::payload_block(seed, 1 << 20);
    let mut left = len;
    while left > 0 {
        let k = left.min(block.len() as u64) as usize;
        if w.write_all(&block[..k]).is_err() {
            return;
        }
        left -= k as u64;
    }
}

fn upload_sha(seed: u64, len: u64) -> String {
    let block = common::payload_block(seed, 1 << 20);
    let mut h = Sha256::new();
    let mut left = len;
    while left > 0 {
        let k = left.min(block.len() as u64) as usize;
        h.update(&block[..k]);
        left -= k as u64;
    }
    origin::hex(&h.finalize())
}

#[test]
fn curl_h2_over_tls_alpn_bodies_and_forwarding() {
    if !have("curl", "--version") {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let o = origin::start();
    let dir = TempDir::new();
    let ca = Ca::new("h2-ca");
    let leaf = ca.leaf(&["web.example"], "web", false).write(&dir, "web");
    let tls = format!(
        "[frontend.tls]\nalpn = [\"h2\", \"http/1.1\"]\n{}",
        cert_entry(&leaf, true)
    );
    let proxy = Proxy::start(&config(o.addr, &tls));
    let ca_path = path_str(&ca.write(&dir, "ca.pem"));
    let port = proxy.addr.port();
    let base = |p: &str| {
        vec![
            "--http2".to_string(),
            "--cacert".into(),
            ca_path.clone(),
            "--resolve".into(),
            format!("web.example:{port}:127.0.0.1"),
            format!("https://web.example:{port}{p}"),
        ]
    };
    // The protocol curl spoke, and an empty body.
    let mut args = base("/size/0");
    args.extend(["-w".into(), "%{http_version} %{http_code}".into()]);
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30"])
        .args(&args)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "2 200",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A client that offers only http/1.1 on the same frontend gets HTTP/1.1.
    let mut h1 = base("/size/5");
    h1[0] = "--http1.1".into();
    h1.extend(["-o".into(), "/dev/null".into(), "-w".into(), "%{http_version}".into()]);
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30"])
        .args(&h1)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1.1",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 1 MiB down.
    let (n, sha, err) = curl_hashed(&base("/size/1048576"), None);
    assert_eq!((n, sha), (1 << 20, origin::body_sha(1 << 20)), "{err}");
    // 1 MiB up (no length known: chunked to the origin), and 0 B up.
    let mut up = base("/up");
    up.extend(["-T".into(), "-".into()]);
    let (_, _, err) = curl_hashed(&up, Some((7, 1 << 20)));
    assert!(err.is_empty(), "{err}");
    let seen = o.seen();
    let last = seen.last().unwrap();
    assert_eq!(
        (last.body_len, last.body_sha.clone()),
        (1 << 20, upload_sha(7, 1 << 20))
    );
    assert_eq!(last.header("transfer-encoding"), Some("chunked"));
    // Forwarding as the h1 path does it; Host from :authority.
    let first = &seen[0];
    assert_eq!(first.header("host"), Some(format!("web.example:{port}").as_str()));
    assert_eq!(first.header("x-forwarded-proto"), Some("https"));
    assert_eq!(first.header("x-forwarded-for"), Some("127.0.0.1"));
    let stats = proxy.running().stats();
    assert_eq!(stats.h2_connections, 3, "{stats:?}");
    assert_eq!((stats.h2_streams, stats.http_requests), (3, 4), "{stats:?}");
}

#[test]
fn curl_h2c_prior_knowledge_and_http1_on_the_same_frontend() {
    if !have("curl", "--version") {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let o = origin::start();
    let proxy = h2c_proxy(o.addr);
    let url = |p: &str| format!("http://127.0.0.1:{}{p}", proxy.addr.port());
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "30",
            "--http2-prior-knowledge",
            "-w",
            " %{http_version}",
        ])
        .arg(url("/hello"))
        .output()
        .unwrap();
    let empty_sha = origin::hex(&Sha256::digest(b""));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("0 {empty_sha} 2"));
    // HEAD: the length of what a GET would get, and no body.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30", "--http2-prior-knowledge", "-I"])
        .arg(url("/size/100"))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(
        head.starts_with("http/2 200") && head.contains("content-length: 100"),
        "{head}"
    );
    // Not the preface: HTTP/1.1 as on any frontend.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30", "--http1.1", "-w", " %{http_version}"])
        .arg(url("/plain"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("0 {empty_sha} 1.1"));
    // 1 MiB up with a known length (content-length to the origin).
    let body = common::payload_block(3, 1 << 20);
    let file = TempDir::new();
    let path = file.path("up.bin");
    std::fs::write(&path, &body).unwrap();
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30", "--http2-prior-knowledge", "--data-binary"])
        .arg(format!("@{}", path_str(&path)))
        .arg(url("/post"))
        .output()
        .unwrap();
    let want = format!("{} {}", 1 << 20, origin::hex(&Sha256::digest(&body)));
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    // Expect: 100-continue is answered by the proxy at once (curl would otherwise wait its
    // 10 s expect timeout, set here), never forwarded.
    let t = std::time::Instant::now();
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "30",
            "--http2-prior-knowledge",
            "--expect100-timeout",
            "10",
        ])
        .args(["-H", "expect: 100-continue", "--data-binary"])
        .arg(format!("@{}", path_str(&path)))
        .arg(url("/post"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(o.seen().last().unwrap().header("expect"), None);
    let seen = o.seen();
    assert_eq!(seen.last().unwrap().header("content-length"), Some("1048576"));
    assert_eq!(seen[0].header("x-forwarded-proto"), Some("http"));
    let stats = proxy.running().stats();
    assert_eq!((stats.h2_connections, stats.h2_streams), (4, 4), "{stats:?}");
}

#[test]
fn curl_h2c_100_mib_both_ways() {
    if !have("curl", "--version") {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let o = origin::start();
    let proxy = h2c_proxy(o.addr);
    let url = |p: &str| format!("http://127.0.0.1:{}{p}", proxy.addr.port());
    const N: u64 = 100 << 20;
    let (n, sha, err) = curl_hashed(&["--http2-prior-knowledge".into(), url(&format!("/size/{N}"))], None);
    assert_eq!((n, sha), (N, origin::body_sha(N)), "{err}");
    let (_, _, err) = curl_hashed(
        &["--http2-prior-knowledge".into(), "-T".into(), "-".into(), url("/up")],
        Some((11, N)),
    );
    assert!(err.is_empty(), "{err}");
    let last = o.seen().pop().unwrap();
    assert_eq!((last.body_len, last.body_sha), (N, upload_sha(11, N)));
    // Nothing held once done.
    proxy.wait_idle(std::time::Duration::from_secs(10));
    let stats = proxy.running().stats();
    assert_eq!(stats.buffers_in_use, 0);
    // Counted as written: the body both ways plus the frames' own bytes.
    assert!(stats.bytes_to_client > N && stats.bytes_to_server > N, "{stats:?}");
}

#[test]
fn nghttp_100_concurrent_streams_on_one_connection() {
    if !have("nghttp", "--version") {
        eprintln!("skipped: nghttp is not installed (package nghttp2-client)");
        return;
    }
    let o = origin::start();
    let proxy = h2c_proxy(o.addr);
    let url = format!("http://127.0.0.1:{}/size/4096", proxy.addr.port());
    // -m 100: the same URI 100 times, all at once (-M 100 allows 100 in flight).
    let out = Command::new("nghttp")
        .args(["-n", "-s", "-m", "100", "--max-concurrent-streams=100", "-t", "30"])
        .arg(&url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    let ok = text.lines().filter(|l| l.contains("/size/4096")).count();
    assert!(ok >= 100, "{text}");
    assert_eq!(o.seen().len(), 100);
    let stats = proxy.running().stats();
    assert_eq!((stats.h2_connections, stats.h2_streams), (1, 100), "{stats:?}");
}

/// A runtime for one test's async client.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An HTTP/2 client (prior knowledge) connected to `addr`, its connection driven by a task.
async fn h2c_client(addr: SocketAddr) -> h2::client::SendRequest<bytes::Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A response body read to its end, its flow-control credit given back: its sha256 in hex.
async fn read_hashed(body: &mut h2::RecvStream) -> String {
    let mut h = Sha256::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        h.update(&chunk);
    }
    origin::hex(&h.finalize())
}

/// A connection quiet for `park_idle_after` gives back what its streams left for the next
/// ones (the stream table's slots, the response head scratch, spare heads and header maps,
/// the codec's buffers): its next burst, several streams at once, is served in full, and so
/// is the one after a second quiet spell. The connection, handed to a task of its own after
/// its preface, stays one open session until it closes.
#[test]
fn a_quiet_connection_serves_its_next_bursts() {
    let o = origin::start();
    let toml = config(o.addr, "h2c = true").replacen("[global]\n", "[global]\npark_idle_after = \"50ms\"\n", 1);
    let proxy = Proxy::start(&toml);
    let addr = proxy.addr;
    let running = proxy.running();
    let rt = runtime();
    rt.block_on(async move {
        let client = h2c_client(addr).await;
        let get = |len: u64| {
            let client = client.clone();
            async move {
                let req = http::Request::get(format!("http://{addr}/chunked/{len}"))
                    .body(())
                    .unwrap();
                let (resp, _) = client.ready().await.unwrap().send_request(req, true).unwrap();
                let resp = resp.await.unwrap();
                assert_eq!(resp.status(), 200);
                let sha = read_hashed(&mut resp.into_body()).await;
                assert_eq!(sha, origin::body_sha(len), "/chunked/{len}");
            }
        };
        // The proxy's counter says when the connection gave its spares back (bounded).
        let quiet = |n: u64| async move {
            let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while running.stats().h2_quiet_released < n {
                assert!(std::time::Instant::now() < until, "the connection never went quiet");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        };
        get(1_000).await;
        quiet(1).await;
        // Served in a task of its own since its preface, it is still one open session.
        assert_eq!(running.stats().sessions_active, 1);
        futures_util::future::join_all([3_000, 70_000, 1, 250_000].map(get)).await;
        quiet(2).await;
        futures_util::future::join_all([5, 100_000].map(get)).await;
    });
    assert_eq!(proxy.running().stats().h2_streams, 7);
    // The client's runtime ends, its connection closes: the session is counted out.
    drop(rt);
    proxy.wait_for("the session counted out", |s| s.sessions_active == 0);
}

#[test]
fn trailers_both_ways_with_the_h2_crate() {
    let o = origin::start();
    let proxy = h2c_proxy(o.addr);
    let addr = proxy.addr;
    let rt = runtime();
    rt.block_on(async move {
        let client = h2c_client(addr).await;
        let mut client = client.ready().await.unwrap();
        // Up: DATA then trailers → chunked with a trailer section at the origin.
        let req = http::Request::post(format!("http://{addr}/up"))
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (resp, mut send) = client.send_request(req, false).unwrap();
        send.send_data(bytes::Bytes::from_static(b"hello"), false).unwrap();
        let mut t = http::HeaderMap::new();
        t.insert("x-up", "yes".parse().unwrap());
        send.send_trailers(t).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        // Down: a chunked response's trailers arrive as h2 trailers.
        let req = http::Request::get(format!("http://{addr}/chunked/100000"))
            .body(())
            .unwrap();
        let (resp, _) = client.send_request(req, true).unwrap();
        let mut body = resp.await.unwrap().into_body();
        assert_eq!(read_hashed(&mut body).await, origin::body_sha(100_000));
        let trailers = body.trailers().await.unwrap().expect("trailers");
        assert_eq!(trailers.get("x-sum").unwrap(), &origin::body_sha(100_000));
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    });
    let up = o.seen().into_iter().find(|s| s.target == "/up").unwrap();
    assert_eq!(up.body_len, 5);
    assert_eq!(up.trailers, vec![("x-up".to_string(), "yes".to_string())]);
    assert_eq!(up.header("te"), None, "te is hop-by-hop");
}

#[test]
fn access_log_has_one_record_per_stream() {
    let o = origin::start();
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let text = config(o.addr, "h2c = true").replacen(
        "[[frontend]]",
        &format!("[log]\naccess = \"{}\"\nformat = \"json\"\n[[frontend]]", log.display()),
        1,
    );
    let proxy = Proxy::start(&text);
    let addr = proxy.addr;
    let rt = runtime();
    rt.block_on(async move {
        let client = h2c_client(addr).await;
        let mut pending = Vec::new();
        for i in 0..3 {
            let mut c = client.clone().ready().await.unwrap();
            let req = http::Request::get(format!("http://{addr}/size/1{i}")).body(()).unwrap();
            pending.push(c.send_request(req, true).unwrap().0);
        }
        for p in pending {
            let mut body = p.await.unwrap().into_body();
            while let Some(d) = body.data().await {
                d.unwrap();
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= 3 {
            break lines;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(lines.len(), 3, "{lines:#?}");
    let mut paths = Vec::new();
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!((&v["method"], &v["status"]), (&"GET".into(), &200.into()), "{v}");
        assert_eq!((&v["backend"], &v["server"]), (&"be".into(), &"o".into()), "{v}");
        assert_eq!(v["termination"], "normal", "{v}");
        let path = v["path"].as_str().unwrap().to_string();
        // The body and the response head (a HEADERS frame: 9 bytes and its HPACK block),
        // as for an HTTP/1 client (issue 27, item 18).
        let body: u64 = path.rsplit('/').next().unwrap().parse().unwrap();
        assert!(v["bytes_to_client"].as_u64().unwrap() > body + 9, "{v}");
        paths.push(path);
    }
    paths.sort();
    assert_eq!(paths, ["/size/10", "/size/11", "/size/12"]);
}

#[test]
fn an_idle_h2_connection_gets_goaway_after_http_keep_alive() {
    let o = origin::start();
    let text = config(o.addr, "h2c = true").replacen(
        "[[frontend]]",
        "[timeouts]\nhttp_keep_alive = \"300ms\"\n[[frontend]]",
        1,
    );
    let proxy = Proxy::start(&text);
    let addr = proxy.addr;
    let rt = runtime();
    let lived = rt.block_on(async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        let driver = tokio::spawn(conn);
        let mut c = client.ready().await.unwrap();
        let req = http::Request::get(format!("http://{addr}/size/3")).body(()).unwrap();
        let mut body = c.send_request(req, true).unwrap().0.await.unwrap().into_body();
        while let Some(d) = body.data().await {
            d.unwrap();
        }
        let t = std::time::Instant::now();
        // The proxy ends the idle connection (GOAWAY, then close): the driver returns.
        let ended = tokio::time::timeout(std::time::Duration::from_secs(5), driver).await;
        assert!(ended.is_ok(), "idle h2 connection still open after 5 s");
        t.elapsed()
    });
    assert!(lived >= std::time::Duration::from_millis(250), "{lived:?}");
    proxy.wait_idle(std::time::Duration::from_secs(5));
}

#[test]
fn sticky_cookie_over_h2_as_over_http1() {
    use common::http::{http_origin, ok};
    let a = http_origin(|_| ok("A"));
    let b = http_origin(|_| ok("B"));
    let text = format!(
        "[global]\nworkers = 1\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\ndefault_backend = \"be\"\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[backend.sticky]\ncookie = \"SRV\"\n\
         [[backend.server]]\nname = \"a\"\naddress = \"{}\"\n[[backend.server]]\nname = \"b\"\naddress = \"{}\"\n",
        a.addr, b.addr
    );
    let proxy = Proxy::start(&text);
    let addr = proxy.addr;
    let rt = runtime();
    let (first, set_cookie, rest) = rt.block_on(async move {
        let client = h2c_client(addr).await;
        let get = |cookie: Option<String>| {
            let client = client.clone();
            async move {
                let mut c = client.ready().await.unwrap();
                let mut req = http::Request::get(format!("http://{addr}/")).header("cookie", "app=1");
                if let Some(v) = cookie {
                    req = req.header("cookie", v);
                }
                let resp = c.send_request(req.body(()).unwrap(), true).unwrap().0.await.unwrap();
                let set = resp
                    .headers()
                    .get("set-cookie")
                    .map(|v| v.to_str().unwrap().to_string());
                let mut body = resp.into_body();
                let mut text = Vec::new();
                while let Some(d) = body.data().await {
                    text.extend_from_slice(&d.unwrap());
                }
                (String::from_utf8(text).unwrap(), set)
            }
        };
        let (first, set) = get(None).await;
        let set = set.expect("a sticky cookie on the first response");
        let cookie = set.split(';').next().unwrap().to_string();
        let mut rest = Vec::new();
        for _ in 0..6 {
            let (body, again) = get(Some(cookie.clone())).await;
            assert_eq!(again, None, "a client with the server's cookie keeps it");
            rest.push(body);
        }
        (first, set, rest)
    });
    assert!(set_cookie.starts_with("SRV="), "{set_cookie}");
    assert!(rest.iter().all(|b| *b == first), "{first} then {rest:?}");
    // The proxy's cookie never reaches a server; the application's does.
    for r in a.requests().iter().chain(b.requests().iter()) {
        assert_eq!(r.header("cookie"), Some("app=1"), "{r:?}");
    }
}

#[test]
fn a_server_that_answers_before_the_body_is_heard() {
    use std::io::{BufRead, BufReader, Read};
    // Reads the head only, answers 413 at once, then reads nothing for 8 s.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr_o = listener.local_addr().unwrap();
    thread::spawn(move || {
        for s in listener.incoming().take(4) {
            let Ok(mut s) = s else { continue };
            thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let _ = s.write_all(
                    b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbig\n",
                );
                // Reads nothing more for a while: a proxy that insists on sending the whole
                // body first stalls once the socket buffers are full.
                thread::sleep(std::time::Duration::from_secs(8));
                let _ = s.shutdown(std::net::Shutdown::Write);
                s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
                let mut sink = vec![0u8; 65536];
                while r.read(&mut sink).is_ok_and(|n| n > 0) {}
            });
        }
    });
    let proxy = h2c_proxy(addr_o);
    let addr = proxy.addr;
    let rt = runtime();
    let (status, body) = rt.block_on(async move {
        let client = h2c_client(addr).await;
        let mut c = client.ready().await.unwrap();
        let req = http::Request::post(format!("http://{addr}/big")).body(()).unwrap();
        let (resp, mut send) = c.send_request(req, false).unwrap();
        // 32 MiB queued behind the flow-control windows: more than the socket buffers hold.
        for _ in 0..512 {
            if send.send_data(bytes::Bytes::from(vec![7u8; 64 * 1024]), false).is_err() {
                break;
            }
        }
        let resp = tokio::time::timeout(std::time::Duration::from_secs(5), resp)
            .await
            .expect("a response while the body is still being sent")
            .unwrap();
        let status = resp.status().as_u16();
        let mut body = resp.into_body();
        let mut text = Vec::new();
        while let Some(Ok(d)) = body.data().await {
            text.extend_from_slice(&d);
        }
        (status, text)
    });
    assert_eq!((status, &body[..]), (413, &b"big\n"[..]));
}
