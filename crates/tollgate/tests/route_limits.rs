//! Per-route and per-backend limits over real sockets, for HTTP/1.1 and HTTP/2 clients:
//! `timeouts.server` on a route or a backend cuts a slow response short while other traffic
//! keeps the global limit; `timeouts.connect` on a backend; `max_body_size` on a route
//! refuses a larger body (announced or streamed) with 413; `retries = 0` sends a request
//! once, never replayed nor sent to another server; `timeouts.http_request` on a route
//! bounds a slow upload with 408.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::http::*;
use common::*;

/// An origin that answers `/slow…` after 1.5 s and everything else at once, echoing the
/// body length.
fn slow_origin() -> HttpOrigin {
    http_origin(|r| {
        if r.target.starts_with("/slow") || r.target.starts_with("/q/slow") {
            std::thread::sleep(Duration::from_millis(1500));
        }
        ok(&format!("{} bytes", r.body.len()))
    })
}

fn backend(name: &str, extra: &str, origin: SocketAddr) -> String {
    format!(
        "[[backend]]\nname = \"{name}\"\nmode = \"http\"\n{extra}\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n"
    )
}

/// An h2c-capable frontend (prior knowledge) with these routes, default backend `be`.
fn config(global: &str, routes: &str, backends: &str) -> String {
    format!(
        "{global}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\ndefault_backend = \"be\"\n{routes}\n{backends}"
    )
}

fn h1(proxy: &Proxy, request: &str) -> (u16, String, Duration) {
    let t = Instant::now();
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    c.write_all(request.as_bytes()).unwrap();
    let (status, _, body) = read_response(&mut r).expect("a response");
    (status, String::from_utf8_lossy(&body).into_owned(), t.elapsed())
}

fn have_curl() -> bool {
    Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// curl over h2c (prior knowledge): status and time taken.
fn h2(proxy: &Proxy, path: &str) -> (u16, Duration) {
    let t = Instant::now();
    let url = format!("http://{}{path}", proxy.addr);
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--http2-prior-knowledge", "-o", "/dev/null"])
        .args(["-w", "%{http_code} %{http_version}", &url])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (code, version) = text.split_once(' ').unwrap_or((&text, ""));
    assert_eq!(
        version,
        "2",
        "not HTTP/2: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (code.parse().unwrap_or(0), t.elapsed())
}

/// An h2c POST whose body is streamed in 1,000-byte DATA frames with no content-length
/// (the h2 crate as client: a response that comes before the body is complete is still
/// read, which curl 7.88 reports as an empty reply). The response status.
fn h2_upload(proxy: &Proxy, path: &str, len: usize) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(conn);
        let mut client = client.ready().await.unwrap();
        let req = ::http::Request::post(format!("http://{}{path}", proxy.addr))
            .body(())
            .unwrap();
        let (response, mut body) = client.send_request(req, false).unwrap();
        let upload = async {
            let mut left = len;
            while left > 0 {
                let n = left.min(1000);
                left -= n;
                // A stream the proxy already answered refuses more data: not a failure here.
                if body.send_data(bytes::Bytes::from(vec![b'x'; n]), left == 0).is_err() {
                    return;
                }
                tokio::task::yield_now().await;
            }
        };
        let (response, ()) = tokio::join!(response, upload);
        response.unwrap().status().as_u16()
    })
}

#[test]
fn server_timeout_of_a_route_or_backend_overrides_the_global_one() {
    let origin = slow_origin();
    let routes = "[[frontend.route]]\npath_prefix = \"/slow/short\"\nbackend = \"be\"\ntimeouts = { server = \"300ms\" }\n\
                  [[frontend.route]]\npath_prefix = \"/q\"\nbackend = \"quick\"\n";
    let backends = backend("be", "", origin.addr) + &backend("quick", "timeouts = { server = \"300ms\" }", origin.addr);
    let proxy = Proxy::start(&config("[timeouts]\nserver = \"10s\"", routes, &backends));

    let (status, _, took) = h1(&proxy, "GET /slow/short HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(status, 504, "the route's 300ms server timeout");
    assert!(took < Duration::from_millis(1200), "{took:?}");
    let (status, _, took) = h1(&proxy, "GET /q/slow HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(status, 504, "the backend's 300ms server timeout");
    assert!(took < Duration::from_millis(1200), "{took:?}");
    // Traffic of the other route and backend keeps the global 10s.
    let (status, body, took) = h1(&proxy, "GET /slow/long HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!((status, body.as_str()), (200, "0 bytes"));
    assert!(took >= Duration::from_millis(1400), "{took:?}");

    if !have_curl() {
        eprintln!("skipped: curl is not installed (the HTTP/2 half)");
        return;
    }
    let (status, took) = h2(&proxy, "/slow/short");
    assert_eq!(status, 504, "h2 client, the route's timeout");
    assert!(took < Duration::from_millis(1200), "{took:?}");
    let (status, _) = h2(&proxy, "/q/slow");
    assert_eq!(status, 504, "h2 client, the backend's timeout");
    let (status, took) = h2(&proxy, "/slow/long");
    assert_eq!(status, 200);
    assert!(took >= Duration::from_millis(1400), "{took:?}");
}

#[test]
fn connect_timeout_of_a_backend() {
    // A listener whose accept queue is full: the kernel drops further SYNs, so a connect
    // to it hangs until the connecting side gives up.
    let full = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    full.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into()).unwrap();
    full.listen(0).unwrap();
    let full_addr = full.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    let filled = (0..8).any(|_| {
        let c = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let r = c.connect_timeout(&full_addr.into(), Duration::from_millis(200));
        fillers.push(c);
        r.is_err()
    });
    assert!(filled, "the accept queue never filled");
    let origin = slow_origin();
    let backends = backend("be", "", origin.addr)
        + &backend(
            "blackhole",
            "retries = 0\ntimeouts = { connect = \"300ms\" }",
            full_addr,
        );
    let routes = "[[frontend.route]]\npath_prefix = \"/hole\"\nbackend = \"blackhole\"\n";
    let proxy = Proxy::start(&config("[timeouts]\nconnect = \"10s\"", routes, &backends));
    let (status, _, took) = h1(&proxy, "GET /hole HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(status, 504, "the connect timed out");
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(3),
        "the backend's 300ms, not the global 10s: {took:?}"
    );
    assert_eq!(h1(&proxy, "GET /x HTTP/1.1\r\nHost: t\r\n\r\n").0, 200);
}

#[test]
fn max_body_size_of_a_route() {
    let origin = slow_origin();
    let routes = "[[frontend.route]]\npath_prefix = \"/upload\"\nbackend = \"be\"\nmax_body_size = \"1KiB\"\n";
    let proxy = Proxy::start(&config("", routes, &backend("be", "", origin.addr)));
    let body = "x".repeat(2000);
    let announced = format!("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 2000\r\n\r\n{body}");
    assert_eq!(h1(&proxy, &announced).0, 413);
    let chunked =
        format!("POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n{body}\r\n0\r\n\r\n");
    assert_eq!(h1(&proxy, &chunked).0, 413);
    assert!(origin.requests().is_empty(), "a refused body reached the origin");
    let small = format!(
        "POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 500\r\n\r\n{}",
        &body[..500]
    );
    assert_eq!(h1(&proxy, &small).1, "500 bytes");
    // Elsewhere the global limit (none) holds.
    let other = announced.replace("/upload", "/other");
    assert_eq!(h1(&proxy, &other).1, "2000 bytes");

    if !have_curl() {
        eprintln!("skipped: curl is not installed (the HTTP/2 half)");
        return;
    }
    // Streamed without content-length: counted as it comes.
    assert_eq!(h2_upload(&proxy, "/upload", 4000), 413);
    assert_eq!(h2_upload(&proxy, "/upload", 800), 200);
    assert_eq!(h2_upload(&proxy, "/other", 4000), 200);
    let whole_uploads = origin
        .requests()
        .iter()
        .filter(|r| r.target == "/upload" && r.body.len() > 1024)
        .count();
    assert_eq!(
        whole_uploads, 0,
        "a body over the route's limit reached the origin whole"
    );
}

#[test]
fn retries_zero_sends_a_request_once() {
    // Every origin connection answers its first request and silently drops its second.
    let origin = http_origin(|r| {
        if r.nth == 1 {
            ok(&format!("conn {}", r.conn))
        } else {
            Reply::Close
        }
    });
    let routes = "[[frontend.route]]\npath_prefix = \"/once\"\nbackend = \"be\"\nretries = 0\n";
    let proxy = Proxy::start(&config(
        "[global]\nworkers = 1",
        routes,
        &backend("be", "", origin.addr),
    ));
    assert_eq!(h1(&proxy, "GET /a HTTP/1.1\r\nHost: t\r\n\r\n").1, "conn 1");
    // The default route replays a GET whose reused connection died.
    assert_eq!(h1(&proxy, "GET /b HTTP/1.1\r\nHost: t\r\n\r\n").1, "conn 2");
    assert_eq!(proxy.running().stats().http_retries, 1);
    // `/once` reuses connection 2, which drops it: never replayed.
    assert_eq!(h1(&proxy, "GET /once HTTP/1.1\r\nHost: t\r\n\r\n").0, 502);
    assert_eq!(proxy.running().stats().http_retries, 1, "the request was replayed");
    let once = origin.requests().iter().filter(|r| r.target == "/once").count();
    assert_eq!(once, 1, "the origin saw /once exactly once");
}

#[test]
fn retries_zero_does_not_try_another_server() {
    let dead_port = ReservedPort::new(); // refuses connections while held
    let dead = dead_port.addr;
    let origin = slow_origin();
    // `first`: always the dead server first; the live one only on a retry.
    let servers = format!(
        "[[backend]]\nname = \"be\"\nmode = \"http\"\nbalance = \"first\"\n\
         [[backend.server]]\nname = \"dead\"\naddress = \"{dead}\"\n[[backend.server]]\nname = \"live\"\naddress = \"{}\"\n",
        origin.addr
    );
    let routes = "[[frontend.route]]\npath_prefix = \"/strict\"\nbackend = \"be\"\nretries = 0\n";
    let proxy = Proxy::start(&config("", routes, &servers));
    assert_eq!(h1(&proxy, "GET /strict HTTP/1.1\r\nHost: t\r\n\r\n").0, 503);
    let before = proxy.running().stats();
    assert_eq!(h1(&proxy, "GET /any HTTP/1.1\r\nHost: t\r\n\r\n").1, "0 bytes");
    assert!(proxy.running().stats().connect_retries > before.connect_retries);
    if have_curl() {
        assert_eq!(h2(&proxy, "/strict").0, 503, "h2 client");
        assert_eq!(h2(&proxy, "/any").0, 200, "h2 client");
    }
}

#[test]
fn http_request_of_a_route_bounds_the_body() {
    let origin = slow_origin();
    let routes =
        "[[frontend.route]]\npath_prefix = \"/upload\"\nbackend = \"be\"\ntimeouts = { http_request = \"500ms\" }\n";
    let proxy = Proxy::start(&config(
        "[timeouts]\nclient = \"10s\"",
        routes,
        &backend("be", "", origin.addr),
    ));
    let stalled = |path: &str| {
        let t = Instant::now();
        let mut c = TcpStream::connect(proxy.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(2500))).unwrap();
        c.write_all(format!("POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nab").as_bytes())
            .unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        (String::from_utf8_lossy(&out).into_owned(), t.elapsed())
    };
    let (out, took) = stalled("/upload");
    assert!(out.starts_with("HTTP/1.1 408"), "{out:?}");
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(2),
        "{took:?}"
    );
    // Elsewhere a slow body is bounded by the idle timeout only (10s): nothing in 2.5s.
    let (out, took) = stalled("/other");
    assert!(out.is_empty(), "{out:?}");
    assert!(took >= Duration::from_millis(2400), "{took:?}");
    // A body in time goes through.
    let full = "POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n0123456789";
    assert_eq!(h1(&proxy, full).1, "10 bytes");
}

#[test]
fn limits_hold_toward_an_http2_server_too() {
    use common::h2_origin::{H2Options, h2_origin};
    let origin = h2_origin(H2Options::default());
    let routes = "[[frontend.route]]\npath_prefix = \"/slow\"\nbackend = \"be\"\ntimeouts = { server = \"300ms\" }\n\
                  [[frontend.route]]\npath_prefix = [\"/echo\", \"/grpc-count\"]\nbackend = \"be\"\nmax_body_size = \"1KiB\"\n";
    let backends = backend("be", "proto = \"h2\"", origin.addr);
    let proxy = Proxy::start(&config("[timeouts]\nserver = \"10s\"", routes, &backends));
    let (status, _, took) = h1(&proxy, "GET /slow/1500 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(status, 504, "h1 client to an h2 server, the route's timeout");
    assert!(took < Duration::from_millis(1200), "{took:?}");
    let body = "x".repeat(2000);
    let chunked =
        format!("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n{body}\r\n0\r\n\r\n");
    assert_eq!(
        h1(&proxy, &chunked).0,
        413,
        "h1 client to an h2 server, the route's body limit"
    );
    let small = format!(
        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 500\r\n\r\n{}",
        &body[..500]
    );
    assert_eq!(h1(&proxy, &small).1.len(), 500);

    if !have_curl() {
        eprintln!("skipped: curl is not installed (the HTTP/2 half)");
        return;
    }
    let (status, took) = h2(&proxy, "/slow/1500");
    assert_eq!(status, 504, "h2 client to an h2 server, the route's timeout");
    assert!(took < Duration::from_millis(1200), "{took:?}");
    // `/grpc-count` answers once the whole body is in (`/echo` would answer at once, and
    // a response under way can only be reset).
    assert_eq!(
        h2_upload(&proxy, "/grpc-count", 4000),
        413,
        "h2 to h2, streamed body over the limit"
    );
    assert_eq!(h2_upload(&proxy, "/grpc-count", 800), 200);
}
