//! Retry rules on pooled server connections: a GET whose reused connection was closed by
//! the origin before any response byte is replayed on a fresh connection; a POST is not
//! (it may have been processed) and gets a 502.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::http::*;
use common::*;

fn request(proxy: &Proxy, req: &str) -> (u16, Vec<u8>) {
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    c.write_all(req.as_bytes()).unwrap();
    let (status, _, body) = read_response(&mut r).expect("a response");
    (status, body)
}

#[test]
fn get_is_retried_on_a_fresh_connection_post_is_not() {
    // Every origin connection answers its first request and silently drops its second.
    let origin = http_origin(|r| {
        if r.nth == 1 {
            ok(&format!("conn {}", r.conn))
        } else {
            Reply::Close
        }
    });
    let proxy = Proxy::start(&http_config("[global]\nworkers = 1", origin.addr));
    assert_eq!(
        request(&proxy, "GET / HTTP/1.1\r\nHost: t\r\n\r\n"),
        (200, b"conn 1".to_vec())
    );
    // Reuses connection 1, which drops the request: replayed on connection 2.
    assert_eq!(
        request(&proxy, "GET / HTTP/1.1\r\nHost: t\r\n\r\n"),
        (200, b"conn 2".to_vec())
    );
    let stats = proxy.running().stats();
    assert_eq!((stats.http_pool_reused, stats.http_retries), (1, 1));
    // Reuses connection 2, which drops the POST: never replayed.
    let (status, _) = request(&proxy, "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!(status, 502);
    let stats = proxy.running().stats();
    assert_eq!(stats.http_retries, 1, "the POST was replayed");
    let posts = origin.requests().iter().filter(|r| r.method == "POST").count();
    assert_eq!(posts, 1, "the origin saw the POST exactly once");
}
