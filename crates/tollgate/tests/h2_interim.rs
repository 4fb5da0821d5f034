//! Interim (1xx) responses through tollgate (issue 13): 103 Early Hints from an HTTP/1.1
//! server and from an HTTP/2 server reach an HTTP/2 client as informational HEADERS before
//! the final response (the h2 crate's client and `nghttp -v` see them, `link` field intact),
//! 100 Continue stays the proxy's own answer to `expect: 100-continue` (sent once, the
//! server's not repeated), a server flooding 1xx gets at most 16 through, and an HTTP/1.1
//! client gets the 103 before the 200 from both kinds of server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use bytes::Bytes;
use common::Proxy;
use common::http::raw_exchange;
use common::tls::wait_bounded;
use h2::client::{ResponseFuture, SendRequest};

const EARLY_HINTS: &[u8] = b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>; rel=preload\r\n\r\n";
const LINK: &str = "</a.css>; rel=preload";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An h2c frontend to one server (`proto` line or empty for HTTP/1.1).
fn config(server: SocketAddr, proto: &str) -> String {
    format!(
        "[global]\nworkers = 1\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\n\
         default_backend = \"be\"\nh2c = true\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n{proto}\n\
         [[backend.server]]\nname = \"o\"\naddress = \"{server}\"\n"
    )
}

/// Reads a request head (and a `content-length` body) off an HTTP/1.1 connection; `None`
/// at EOF.
fn read_request(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let len = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse::<usize>().unwrap());
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    Some(head)
}

/// An HTTP/1.1 server that answers each request with `interim` first, then `200 hello`.
fn h1_server(interim: &'static [u8]) -> common::Origin {
    common::origin(move |s| {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        while read_request(s).is_some() {
            let mut reply = interim.to_vec();
            reply.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello");
            if s.write_all(&reply).is_err() {
                return;
            }
        }
    })
}

/// An h2c server that answers each stream with a 103 (with `link`), then `200 hello`.
fn h2_server() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        runtime().block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(tcp).await else {
                        return;
                    };
                    while let Some(Ok((_, mut respond))) = conn.accept().await {
                        let hint = http::Response::builder()
                            .status(103)
                            .header("link", LINK)
                            .body(())
                            .unwrap();
                        respond.send_informational(hint).unwrap();
                        let ok = http::Response::builder()
                            .header("content-length", "5")
                            .body(())
                            .unwrap();
                        let mut send = respond.send_response(ok, false).unwrap();
                        send.send_data(Bytes::from_static(b"hello"), true).unwrap();
                    }
                });
            }
        });
    });
    addr
}

async fn client(addr: SocketAddr) -> SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client.ready().await.unwrap()
}

fn get(addr: SocketAddr) -> http::Request<()> {
    http::Request::get(format!("http://{addr}/page")).body(()).unwrap()
}

/// The interim responses of a stream, then its final status and body (bounded waits).
async fn interims_then_final(mut response: ResponseFuture) -> (Vec<http::Response<()>>, u16, Vec<u8>) {
    let limit = Duration::from_secs(10);
    let mut interims = Vec::new();
    while let Some(r) = tokio::time::timeout(limit, std::future::poll_fn(|cx| response.poll_informational(cx)))
        .await
        .expect("an interim or final head within 10 s")
    {
        interims.push(r.unwrap());
    }
    let (head, mut body) = tokio::time::timeout(limit, response)
        .await
        .unwrap()
        .unwrap()
        .into_parts();
    let mut data = Vec::new();
    while let Some(chunk) = tokio::time::timeout(limit, body.data()).await.unwrap() {
        let chunk = chunk.unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        data.extend_from_slice(&chunk);
    }
    (interims, head.status.as_u16(), data)
}

fn assert_early_hints(interims: &[http::Response<()>], status: u16, body: &[u8]) {
    assert_eq!(interims.len(), 1, "{interims:?}");
    assert_eq!(interims[0].status(), 103);
    assert_eq!(interims[0].headers().get("link").unwrap(), LINK);
    assert_eq!((status, body), (200, &b"hello"[..]));
}

#[test]
fn early_hints_from_an_http1_server_reach_an_h2_client() {
    let origin = h1_server(EARLY_HINTS);
    let proxy = Proxy::start(&config(origin.addr, ""));
    let addr = proxy.addr;
    runtime().block_on(async move {
        let mut c = client(addr).await;
        // Twice on one connection: the server connection is reused after a 1xx exchange.
        for _ in 0..2 {
            let (response, _) = c.send_request(get(addr), true).unwrap();
            let (interims, status, body) = interims_then_final(response).await;
            assert_early_hints(&interims, status, &body);
        }
    });
    assert_eq!(origin.total.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn early_hints_from_an_h2_server_reach_an_h2_client() {
    let proxy = Proxy::start(&config(h2_server(), "proto = \"h2\""));
    let addr = proxy.addr;
    runtime().block_on(async move {
        let mut c = client(addr).await;
        let (response, _) = c.send_request(get(addr), true).unwrap();
        let (interims, status, body) = interims_then_final(response).await;
        assert_early_hints(&interims, status, &body);
    });
}

#[test]
fn nghttp_prints_the_103_before_the_200() {
    if Command::new("nghttp").arg("--version").output().is_err() {
        println!("skipped: nghttp is not installed (package nghttp2-client)");
        return;
    }
    let origin = h1_server(EARLY_HINTS);
    let proxy = Proxy::start(&config(origin.addr, ""));
    let child = Command::new("nghttp")
        .args(["-v", "-t", "10"])
        .arg(format!("http://127.0.0.1:{}/page", proxy.addr.port()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_bounded(child, Duration::from_secs(20));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("no {needle:?} in:\n{text}"));
    let (hint, link, ok) = (at(":status: 103"), at(&format!("link: {LINK}")), at(":status: 200"));
    assert!(hint < link && link < ok, "{text}");
    assert!(text.trim_end().ends_with("hello") || text.contains("\nhello"), "{text}");
}

#[test]
fn continue_is_answered_once_by_the_proxy_and_a_1xx_flood_is_capped() {
    // The server sends its own 100 (and 20 hints) to every request.
    let interim: &'static [u8] = Box::leak(
        [&b"HTTP/1.1 100 Continue\r\n\r\n"[..], &EARLY_HINTS.repeat(20)]
            .concat()
            .into_boxed_slice(),
    );
    let origin = h1_server(interim);
    let proxy = Proxy::start(&config(origin.addr, ""));
    let addr = proxy.addr;
    runtime().block_on(async move {
        let mut c = client(addr).await;
        let req = http::Request::post(format!("http://{addr}/up"))
            .header("expect", "100-continue")
            .header("content-length", "5")
            .body(())
            .unwrap();
        let (response, mut send) = c.send_request(req, false).unwrap();
        send.send_data(Bytes::from_static(b"12345"), true).unwrap();
        let (interims, status, body) = interims_then_final(response).await;
        assert_eq!((status, &body[..]), (200, &b"hello"[..]));
        let statuses: Vec<u16> = interims.iter().map(|r| r.status().as_u16()).collect();
        assert_eq!(statuses[0], 100, "the proxy's own 100 first: {statuses:?}");
        assert_eq!(statuses.iter().filter(|&&s| s == 100).count(), 1, "{statuses:?}");
        assert_eq!(
            statuses.iter().filter(|&&s| s == 103).count(),
            16,
            "capped: {statuses:?}"
        );
    });
}

#[test]
fn an_http1_client_gets_the_103_before_the_200_from_http1_and_h2_servers() {
    let origin = h1_server(EARLY_HINTS);
    for (server, proto) in [(origin.addr, ""), (h2_server(), "proto = \"h2\"")] {
        let proxy = Proxy::start(&config(server, proto));
        let get = b"GET /page HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
        let post = b"POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nConnection: close\r\n\r\n12345";
        for request in [&get[..], &post[..]] {
            let out = raw_exchange(proxy.addr, request);
            let hint = out.find("HTTP/1.1 103 ").unwrap_or_else(|| panic!("{proto}: {out}"));
            let ok = out.find("HTTP/1.1 200 ").unwrap_or_else(|| panic!("{proto}: {out}"));
            assert!(hint < ok, "{proto}: {out}");
            let interim = out[hint..ok].to_ascii_lowercase();
            assert!(interim.contains(&format!("\r\nlink: {LINK}\r\n")), "{proto}: {out}");
            assert_eq!(interim.matches("\r\n\r\n").count(), 1, "one head, no framing: {out}");
            assert!(out.ends_with("hello"), "{proto}: {out}");
        }
    }
}
