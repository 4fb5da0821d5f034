//! HTTP/2 clients through tollgate to HTTP/2 servers (issue 13, h2 → h2) and gRPC-shaped
//! calls: curl `--http2-prior-knowledge` to an h2c origin and curl `--http2` over TLS to a TLS
//! h2 origin with bodies of 0 B, 1 MiB and 100 MiB both ways (sha256 checked); with the h2
//! crate as client: trailers both ways, 100 concurrent streams on one connection, resets
//! both ways, and gRPC framing by hand (unary, bidirectional streaming message by message,
//! a server killed mid-stream, no server at all, streams kept busy past the idle timeouts
//! both ways and client-streaming with a silent server, an HTTP/1.1 server stalling mid-call),
//! access-log records, and server GOAWAYs met without a failed stream.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
#[path = "h2_support/origin.rs"]
mod h1_origin;

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use common::Proxy;
use common::h2_origin::{H2Options, h2_origin, pattern_byte, with_alpn};
use common::tls::{Ca, TempDir, cert_entry, path_str};
use h2::client::SendRequest;
use sha2::{Digest, Sha256};

fn have_curl() -> bool {
    if Command::new("curl").arg("--version").output().is_err() {
        println!("skipped: curl is not installed");
        return false;
    }
    true
}

/// An h2c frontend (`frontend_extra` added) to one `proto = "h2"` server.
fn config(origin: SocketAddr, frontend_extra: &str, server_extra: &str, top: &str) -> String {
    format!(
        "[global]\nworkers = 1\n{top}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\n\
         default_backend = \"be\"\n{frontend_extra}\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\nproto = \"h2\"\n\
         [[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n{server_extra}\n"
    )
}

fn h2c_proxy(origin: SocketAddr) -> Proxy {
    Proxy::start(&config(origin, "h2c = true", "", ""))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An h2 client connection to `addr` (its driver spawned on the current runtime).
async fn client(addr: SocketAddr) -> SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client.ready().await.unwrap()
}

/// curl with `args`, stdout hashed as it streams, `len` seeded bytes on stdin when given;
/// returns (bytes, sha256, stderr).
fn curl_hashed(args: &[String], upload: Option<u64>) -> (u64, [u8; 32], String) {
    let mut child = Command::new("curl")
        .args(["-sS", "--max-time", "180"])
        .args(args)
        .stdin(if upload.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let feeder = upload.map(|len| {
        let mut input = child.stdin.take().unwrap();
        thread::spawn(move || {
            let block = common::payload_block(11, 1 << 20);
            let mut left = len;
            while left > 0 {
                let k = left.min(block.len() as u64) as usize;
                if input.write_all(&block[..k]).is_err() {
                    return;
                }
                left -= k as u64;
            }
        })
    });
    let mut out = child.stdout.take().unwrap();
    let (n, sha) = common::read_all_hashed(&mut out).unwrap();
    let output = child.wait_with_output().unwrap();
    if let Some(f) = feeder {
        f.join().unwrap();
    }
    (n, sha, String::from_utf8_lossy(&output.stderr).into_owned())
}

fn upload_sha(len: u64) -> [u8; 32] {
    let block = common::payload_block(11, 1 << 20);
    let mut h = Sha256::new();
    let mut left = len;
    while left > 0 {
        let k = left.min(block.len() as u64) as usize;
        h.update(&block[..k]);
        left -= k as u64;
    }
    h.finalize().into()
}

/// Pattern bytes `0..len` hashed, as the origin's `/size/N` sends them.
fn pattern_sha(len: u64) -> [u8; 32] {
    let block: Vec<u8> = (0..(251 * 1024) as u64).map(pattern_byte).collect();
    let mut h = Sha256::new();
    let mut left = len;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        h.update(&block[..n]);
        left -= n as u64;
    }
    h.finalize().into()
}

/// Echo uploads (stdin, no length: DATA until END_STREAM) and downloads of 0 B, 1 MiB and
/// 100 MiB, each sha256-checked; `base(path)` gives curl's arguments for a path.
fn bodies_both_ways(base: &dyn Fn(&str) -> Vec<String>) {
    for len in [0u64, 1 << 20, 100 << 20] {
        let mut up = base("/echo");
        up.extend(["--data-binary".into(), "@-".into()]);
        let (n, sha, err) = curl_hashed(&up, Some(len));
        assert_eq!(n, len, "echo of {len} bytes: {err}");
        assert_eq!(sha, upload_sha(len), "echo of {len} bytes");
        let (n, sha, err) = curl_hashed(&base(&format!("/size/{len}")), None);
        assert_eq!(n, len, "download of {len} bytes: {err}");
        assert_eq!(sha, pattern_sha(len), "download of {len} bytes");
    }
}

#[test]
fn curl_h2c_prior_knowledge_to_h2c_origin_bodies_both_ways() {
    if !have_curl() {
        return;
    }
    let origin = h2_origin(H2Options::default());
    let proxy = h2c_proxy(origin.addr);
    let addr = proxy.addr;
    // The protocol curl spoke: h2 to the proxy, and a stream (not a 502) from the h2 origin.
    let base = |p: &str| vec!["--http2-prior-knowledge".to_string(), format!("http://{addr}{p}")];
    let mut probe = base("/size/5");
    probe.extend([
        "-o".into(),
        "/dev/null".into(),
        "-w".into(),
        "%{http_version} %{http_code}".into(),
    ]);
    let out = Command::new("curl").arg("-sS").args(&probe).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2 200");
    bodies_both_ways(&base);
    assert_eq!(origin.connections(), 1, "every stream on one pooled h2c connection");
    assert_eq!(origin.streams(), 7);
}

#[test]
fn curl_h2_over_tls_to_tls_h2_origin_bodies_both_ways() {
    if !have_curl() {
        return;
    }
    let dir = TempDir::new();
    let ca = Ca::new("h2-join-ca");
    let origin_leaf = ca.leaf(&["localhost"], "localhost", false);
    let origin = h2_origin(H2Options {
        tls: Some(with_alpn(origin_leaf.server_config(), &[b"h2"])),
        ..H2Options::default()
    });
    let ca_file = path_str(&ca.write(&dir, "ca.pem"));
    let leaf = ca.leaf(&["web.example"], "web", false).write(&dir, "web");
    let fe = format!(
        "[frontend.tls]\nalpn = [\"h2\", \"http/1.1\"]\n{}",
        cert_entry(&leaf, true)
    );
    let server = format!("tls = true\nca_file = \"{ca_file}\"\nsni = \"localhost\"");
    let proxy = Proxy::start(&config(origin.addr, &fe, &server, ""));
    let port = proxy.addr.port();
    let base = |p: &str| {
        vec![
            "--http2".to_string(),
            "--cacert".into(),
            ca_file.clone(),
            "--resolve".into(),
            format!("web.example:{port}:127.0.0.1"),
            format!("https://web.example:{port}{p}"),
        ]
    };
    let mut probe = base("/size/5");
    probe.extend([
        "-o".into(),
        "/dev/null".into(),
        "-w".into(),
        "%{http_version} %{http_code}".into(),
    ]);
    let out = Command::new("curl").arg("-sS").args(&probe).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "2 200",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    bodies_both_ways(&base);
    assert_eq!(origin.connections(), 1, "every stream on one pooled TLS h2 connection");
}

#[test]
fn trailers_both_ways_and_forwarding_fields() {
    let origin = h2_origin(H2Options::default());
    let proxy = h2c_proxy(origin.addr);
    let addr = proxy.addr;
    runtime().block_on(async move {
        let mut c = client(addr).await;
        // Up: DATA then trailers; the origin echoes them as `x-echo-<name>` trailers.
        let req = http::Request::post(format!("http://{addr}/grpc-echo"))
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (resp, mut send) = c.send_request(req, false).unwrap();
        send.send_data(Bytes::from_static(b"hello"), false).unwrap();
        let mut t = http::HeaderMap::new();
        t.insert("x-up", "yes".parse().unwrap());
        send.send_trailers(t).unwrap();
        let mut body = resp.await.unwrap().into_body();
        assert_eq!(read_body(&mut body).await, b"hello");
        let trailers = body.trailers().await.unwrap().expect("trailers");
        assert_eq!(
            trailers.get("x-echo-x-up").unwrap(),
            "yes",
            "request trailers reach the server"
        );
        assert_eq!(trailers.get("grpc-status").unwrap(), "0");
        // Down: the server's trailers as trailers.
        let (resp, _) = c.send_request(get(addr, "/trailers"), true).unwrap();
        let mut body = resp.await.unwrap().into_body();
        assert_eq!(read_body(&mut body).await, b"hello");
        let trailers = body.trailers().await.unwrap().expect("trailers");
        assert_eq!(trailers.get("x-checksum").unwrap(), "5");
        // The head the server saw: forwarding fields as for h1, `te: trailers` kept.
        let req = http::Request::get(format!("http://{addr}/headers"))
            .header("te", "trailers")
            .header("x-a", "b")
            .body(())
            .unwrap();
        let (resp, _) = c.send_request(req, true).unwrap();
        let mut body = resp.await.unwrap().into_body();
        let seen = String::from_utf8(read_body(&mut body).await).unwrap();
        assert!(seen.starts_with(&format!("GET http://{addr}/headers\n")), "{seen}");
        for line in [
            "te: trailers\n",
            "x-a: b\n",
            "x-forwarded-for: 127.0.0.1\n",
            "x-forwarded-proto: http\n",
        ] {
            assert!(seen.contains(line), "{line:?} missing: {seen}");
        }
        assert!(!seen.contains("host:"), "{seen}");
    });
}

#[test]
fn hundred_concurrent_streams_on_one_client_connection() {
    let origin = h2_origin(H2Options::default());
    let proxy = h2c_proxy(origin.addr);
    let addr = proxy.addr;
    runtime().block_on(async move {
        let c = client(addr).await;
        let mut calls = Vec::new();
        for _ in 0..100 {
            let mut c = c.clone();
            calls.push(tokio::spawn(async move {
                c = c.ready().await.unwrap();
                let (resp, _) = c.send_request(get(addr, "/slow/300"), true).unwrap();
                let resp = resp.await.unwrap();
                let status = resp.status();
                let mut body = resp.into_body();
                (status, read_body(&mut body).await)
            }));
        }
        for call in calls {
            let (status, body) = call.await.unwrap();
            assert_eq!((status.as_u16(), body.as_slice()), (200, &b"slow"[..]));
        }
    });
    assert_eq!(origin.streams(), 100);
    assert!(
        origin.peak() > 1,
        "streams were served at once (peak {})",
        origin.peak()
    );
}

#[test]
fn a_client_reset_cancels_the_server_stream_and_a_server_reset_resets_the_client_stream() {
    let origin = h2_origin(H2Options::default());
    let proxy = h2c_proxy(origin.addr);
    let addr = proxy.addr;
    let active = origin.counts.clone();
    runtime().block_on(async move {
        let mut c = client(addr).await;
        let req = http::Request::post(format!("http://{addr}/echo")).body(()).unwrap();
        let (resp, mut send) = c.send_request(req, false).unwrap();
        send.send_data(Bytes::from_static(b"ping"), false).unwrap();
        let mut body = resp.await.unwrap().into_body();
        let echoed = body.data().await.unwrap().unwrap();
        assert_eq!(&echoed[..], b"ping");
        assert_eq!(active.active.load(Ordering::SeqCst), 1, "the origin serves the stream");
        send.send_reset(h2::Reason::CANCEL);
        let deadline = Instant::now() + Duration::from_secs(5);
        while active.active.load(Ordering::SeqCst) != 0 {
            assert!(Instant::now() < deadline, "the server stream was not cancelled");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The server resets mid-body: the client's stream is reset, not ended cleanly.
        let (resp, _) = c.send_request(get(addr, "/reset-mid"), true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let mut failed = None;
        while let Some(piece) = body.data().await {
            if let Err(e) = piece {
                failed = Some(e);
                break;
            }
        }
        let e = failed.expect("the stream must end with a reset");
        assert!(e.is_reset(), "{e}");
    });
}

// ---- gRPC-shaped calls: hand-made framing over h2 ----

/// One gRPC message: flag 0 (uncompressed), 4-byte big-endian length, payload.
fn grpc_message(payload: &[u8]) -> Bytes {
    let mut m = BytesMut::with_capacity(5 + payload.len());
    m.extend_from_slice(&[0]);
    m.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    m.extend_from_slice(payload);
    m.freeze()
}

fn grpc_request(addr: SocketAddr, method: &str) -> http::Request<()> {
    http::Request::post(format!("http://{addr}{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", "10S")
        .body(())
        .unwrap()
}

/// Reads one whole gRPC message (payload) from `body`, `None` at its end.
async fn read_message(body: &mut h2::RecvStream, buf: &mut BytesMut) -> Option<Vec<u8>> {
    loop {
        if buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf.len() >= 5 + len {
                buf.advance(5);
                return Some(buf.split_to(len).to_vec());
            }
        }
        let data = body.data().await?.ok()?;
        let _ = body.flow_control().release_capacity(data.len());
        buf.extend_from_slice(&data);
    }
}

/// The call's `grpc-status` and `grpc-message`: from a trailers-only head, else the trailers.
async fn grpc_outcome(head: &http::HeaderMap, body: &mut h2::RecvStream) -> (String, String) {
    let field = |m: &http::HeaderMap, n: &str| m.get(n).map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    if head.contains_key("grpc-status") {
        return (field(head, "grpc-status"), field(head, "grpc-message"));
    }
    while let Some(Ok(data)) = body.data().await {
        let _ = body.flow_control().release_capacity(data.len());
    }
    let trailers = body.trailers().await.ok().flatten().unwrap_or_default();
    (field(&trailers, "grpc-status"), field(&trailers, "grpc-message"))
}

#[test]
fn grpc_unary_and_bidirectional_streaming() {
    let origin = h2_origin(H2Options::default());
    let proxy = h2c_proxy(origin.addr);
    let addr = proxy.addr;
    runtime().block_on(async move {
        let mut c = client(addr).await;
        // Unary: one message, the stream ended with it.
        let (resp, mut send) = c.send_request(grpc_request(addr, "/grpc-echo"), false).unwrap();
        send.send_data(grpc_message(b"unary"), true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers().get("content-type").unwrap(), "application/grpc");
        let (head, mut body) = resp.into_parts();
        let mut buf = BytesMut::new();
        assert_eq!(read_message(&mut body, &mut buf).await.as_deref(), Some(&b"unary"[..]));
        assert_eq!(grpc_outcome(&head.headers, &mut body).await.0, "0");
        // Bidirectional: each message waits for its echo before the next is sent, which
        // only works if the proxy moves both directions at once.
        let (resp, mut send) = c.send_request(grpc_request(addr, "/grpc-echo"), false).unwrap();
        send.send_data(grpc_message(b"message 0"), false).unwrap();
        let (head, mut body) = resp.await.unwrap().into_parts();
        let mut buf = BytesMut::new();
        for i in 0..5 {
            if i > 0 {
                send.send_data(grpc_message(format!("message {i}").as_bytes()), false)
                    .unwrap();
            }
            let echoed = tokio::time::timeout(Duration::from_secs(5), read_message(&mut body, &mut buf))
                .await
                .expect("echo before the next message (full duplex)");
            assert_eq!(echoed, Some(format!("message {i}").into_bytes()));
        }
        send.send_data(Bytes::new(), true).unwrap();
        assert_eq!(grpc_outcome(&head.headers, &mut body).await.0, "0");
    });
}

#[test]
fn grpc_server_killed_mid_stream_gets_unavailable() {
    let origin = h2_origin(H2Options::default());
    let proxy = h2c_proxy(origin.addr);
    let addr = proxy.addr;
    runtime().block_on(async move {
        let mut c = client(addr).await;
        let (resp, mut send) = c.send_request(grpc_request(addr, "/grpc-kill"), false).unwrap();
        send.send_data(grpc_message(b"first"), false).unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(10), resp)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(resp.status(), 200, "gRPC failures are HTTP 200");
        let (head, mut body) = resp.into_parts();
        let mut buf = BytesMut::new();
        assert_eq!(read_message(&mut body, &mut buf).await.as_deref(), Some(&b"first"[..]));
        assert!(!head.headers.contains_key("grpc-status"), "the call was under way");
        let (status, message) = tokio::time::timeout(Duration::from_secs(10), grpc_outcome(&head.headers, &mut body))
            .await
            .unwrap();
        assert_eq!(status, "14", "UNAVAILABLE ({message})");
        assert!(!message.is_empty());
    });
}

#[test]
fn grpc_calls_without_a_server_get_unavailable_for_h1_and_h2_backends() {
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for proto in ["h2", "h1"] {
        let text = config(closed, "h2c = true", "", "").replace("proto = \"h2\"", &format!("proto = \"{proto}\""));
        let proxy = Proxy::start(&text);
        let addr = proxy.addr;
        runtime().block_on(async move {
            let mut c = client(addr).await;
            let (resp, mut send) = c.send_request(grpc_request(addr, "/grpc-echo"), false).unwrap();
            send.send_data(grpc_message(b"x"), true).unwrap();
            let resp = resp.await.unwrap();
            assert_eq!(resp.status(), 200, "{proto}");
            assert!(resp.body().is_end_stream(), "{proto}: a trailers-only response");
            let h = resp.headers();
            assert_eq!(h.get("grpc-status").unwrap(), "14", "{proto}");
            assert_eq!(h.get("content-type").unwrap(), "application/grpc", "{proto}");
            assert!(h.contains_key("grpc-message"), "{proto}");
            // Not gRPC: the plain HTTP answer.
            let (resp, _) = c.send_request(get(addr, "/x"), true).unwrap();
            assert_eq!(resp.await.unwrap().status(), 503, "{proto}");
        });
    }
}

#[test]
fn a_busy_grpc_stream_outlives_idle_timeouts_and_a_silent_one_does_not() {
    let origin = h2_origin(H2Options::default());
    let top = "[timeouts]\nclient = \"400ms\"\nserver = \"400ms\"";
    let proxy = Proxy::start(&config(origin.addr, "h2c = true", "", top));
    let addr = proxy.addr;
    runtime().block_on(async move {
        let mut c = client(addr).await;
        // 15 messages 150 ms apart: 2.25 s, far past both 400 ms idle limits.
        let (resp, mut send) = c.send_request(grpc_request(addr, "/grpc-echo"), false).unwrap();
        send.send_data(grpc_message(b"m"), false).unwrap();
        let (head, mut body) = resp.await.unwrap().into_parts();
        let mut buf = BytesMut::new();
        let began = Instant::now();
        for i in 0..15 {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(150)).await;
                send.send_data(grpc_message(b"m"), false).unwrap();
            }
            assert_eq!(
                read_message(&mut body, &mut buf).await.as_deref(),
                Some(&b"m"[..]),
                "message {i}"
            );
        }
        assert!(began.elapsed() > Duration::from_secs(2));
        send.send_data(Bytes::new(), true).unwrap();
        assert_eq!(grpc_outcome(&head.headers, &mut body).await.0, "0");
        // Client streaming: the server is silent (no head) while the client sends 1.5 s.
        let (resp, mut send) = c.send_request(grpc_request(addr, "/grpc-count"), false).unwrap();
        for _ in 0..10 {
            send.send_data(grpc_message(b"abcde"), false).unwrap();
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        send.send_data(Bytes::new(), true).unwrap();
        let (head, mut body) = resp.await.unwrap().into_parts();
        assert_eq!(head.status, 200);
        let mut buf = BytesMut::new();
        assert_eq!(read_message(&mut body, &mut buf).await.as_deref(), Some(&b"100"[..]));
        assert_eq!(grpc_outcome(&head.headers, &mut body).await.0, "0");
        // Nothing moving either way: ended by the proxy as UNAVAILABLE.
        let (resp, mut send) = c.send_request(grpc_request(addr, "/grpc-echo"), false).unwrap();
        send.send_data(grpc_message(b"m"), false).unwrap();
        let (head, mut body) = resp.await.unwrap().into_parts();
        let mut buf = BytesMut::new();
        assert!(read_message(&mut body, &mut buf).await.is_some());
        let silent = Instant::now();
        let (status, _) = tokio::time::timeout(Duration::from_secs(5), grpc_outcome(&head.headers, &mut body))
            .await
            .expect("a silent stream is ended");
        assert_eq!(status, "14");
        assert!(silent.elapsed() >= Duration::from_millis(350), "{:?}", silent.elapsed());
    });
}

fn get(addr: SocketAddr, path: &str) -> http::Request<()> {
    http::Request::get(format!("http://{addr}{path}")).body(()).unwrap()
}

async fn read_body(body: &mut h2::RecvStream) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(piece) = body.data().await {
        let piece = piece.unwrap();
        let _ = body.flow_control().release_capacity(piece.len());
        out.extend_from_slice(&piece);
    }
    out
}

#[test]
fn access_log_records_h2_to_h2_streams_and_grpc_failures() {
    let origin = h2_origin(H2Options::default());
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let text = config(origin.addr, "h2c = true", "", "").replacen(
        "[[frontend]]",
        &format!(
            "[log]\naccess = \"{}\"\nformat = \"json\"\nfields = [\"path\", \"status\", \"termination\", \
             \"backend\", \"server\", \"bytes_to_server\", \"bytes_to_client\", \"version\", \"host\", \
             \"response_header.x-origin\"]\n[[frontend]]",
            log.display()
        ),
        1,
    );
    let proxy = Proxy::start(&text);
    let addr = proxy.addr;
    runtime().block_on(async move {
        let mut c = client(addr).await;
        let (resp, _) = c.send_request(get(addr, "/size/1000"), true).unwrap();
        let mut body = resp.await.unwrap().into_body();
        assert_eq!(read_body(&mut body).await.len(), 1000);
        let (resp, mut send) = c.send_request(grpc_request(addr, "/grpc-kill"), false).unwrap();
        send.send_data(grpc_message(b"first"), false).unwrap();
        let (head, mut body) = resp.await.unwrap().into_parts();
        assert_eq!(grpc_outcome(&head.headers, &mut body).await.0, "14");
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if lines.len() >= 2 {
            break lines;
        }
        assert!(Instant::now() < deadline, "{text}");
        thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(lines.len(), 2, "{lines:#?}");
    let find = |path: &str| lines.iter().find(|v| v["path"] == path).cloned().unwrap();
    let ok = find("/size/1000");
    assert_eq!(
        (&ok["status"], &ok["termination"]),
        (&200.into(), &"normal".into()),
        "{ok}"
    );
    assert_eq!((&ok["backend"], &ok["server"]), (&"be".into(), &"o".into()), "{ok}");
    assert!(ok["bytes_to_client"].as_u64().unwrap() >= 1000, "{ok}");
    // The HTTP/2 request's version and `:authority`, and a field of the HTTP/2 server's head.
    assert_eq!(
        (&ok["version"], &ok["host"], &ok["response_header.x-origin"]),
        (&"HTTP/2.0".into(), &addr.to_string().into(), &"h2".into()),
        "{ok}"
    );
    let failed = find("/grpc-kill");
    assert_eq!(failed["server"], "o", "{failed}");
    assert_ne!(
        failed["termination"], "normal",
        "the server's death is recorded: {failed}"
    );
    assert!(failed["bytes_to_server"].as_u64().unwrap() >= 10, "{failed}");
}

#[test]
fn streams_survive_server_goaways_sequential_and_concurrent() {
    // GOAWAY every tenth stream: later streams go to a new connection, and a stream sent as
    // the GOAWAY crossed it (unprocessed) is sent again rather than answered 502.
    let origin = h2_origin(H2Options {
        goaway_after: Some(10),
        ..H2Options::default()
    });
    let proxy = h2c_proxy(origin.addr);
    let addr = proxy.addr;
    runtime().block_on(async move {
        let mut c = client(addr).await;
        for i in 0..25 {
            let (resp, _) = c.send_request(get(addr, "/slow/20"), true).unwrap();
            let resp = resp.await.unwrap();
            assert_eq!(resp.status(), 200, "stream {i}");
            read_body(&mut resp.into_body()).await;
        }
        let mut calls = Vec::new();
        for _ in 0..20 {
            let mut c = c.clone();
            calls.push(tokio::spawn(async move {
                c = c.ready().await.unwrap();
                let (resp, _) = c.send_request(get(addr, "/slow/20"), true).unwrap();
                let resp = resp.await.unwrap();
                let status = resp.status().as_u16();
                (status, read_body(&mut resp.into_body()).await)
            }));
        }
        for call in calls {
            assert_eq!(call.await.unwrap(), (200, b"slow".to_vec()));
        }
    });
    assert!(
        origin.connections() >= 3,
        "a new connection after each GOAWAY: {}",
        origin.connections()
    );
}

#[test]
fn grpc_call_to_an_h1_server_that_stalls_mid_response_ends_unavailable() {
    let origin = h1_origin::start();
    let text = config(origin.addr, "h2c = true", "", "[timeouts]\nserver = \"300ms\"").replace("proto = \"h2\"\n", "");
    let proxy = Proxy::start(&text);
    let addr = proxy.addr;
    runtime().block_on(async move {
        let mut c = client(addr).await;
        // gRPC: the head and half the body came, then nothing: trailers with status 14.
        let (resp, mut send) = c.send_request(grpc_request(addr, "/gate-chunked/1000"), false).unwrap();
        send.send_data(grpc_message(b"x"), true).unwrap();
        let (head, mut body) = resp.await.unwrap().into_parts();
        assert_eq!(head.status, 200);
        assert!(!head.headers.contains_key("grpc-status"), "the response had started");
        let (status, message) = tokio::time::timeout(Duration::from_secs(5), grpc_outcome(&head.headers, &mut body))
            .await
            .unwrap();
        assert_eq!(status, "14", "{message}");
        // Not gRPC, or a response that announced its length: the same failure resets the
        // stream (trailers would end it short of its content-length, itself an error).
        for (req, what) in [
            (get(addr, "/gate-chunked/1000"), "not gRPC"),
            (grpc_request(addr, "/gate/1000"), "gRPC with content-length"),
        ] {
            let (resp, _) = c.send_request(req, true).unwrap();
            let mut body = resp.await.unwrap().into_body();
            let mut failed = None;
            while let Some(piece) = body.data().await {
                if let Err(e) = piece {
                    failed = Some(e);
                    break;
                }
            }
            let e = failed.unwrap_or_else(|| panic!("{what}: a reset"));
            assert!(e.is_reset(), "{what}: {e}");
        }
    });
    origin.gate.store(true, Ordering::SeqCst);
}
