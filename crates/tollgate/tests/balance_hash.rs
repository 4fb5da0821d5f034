//! `balance = "hash"` over real sockets: a request key (header, cookie) or the client
//! address keeps reaching the same server, different keys spread over all of them, and
//! the bounded load spills a hot key's connections to other servers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::http::*;
use common::*;

const NAMES: [&str; 3] = ["a", "b", "c"];

/// Three HTTP origins answering their own name, and an HTTP proxy hashing over them.
fn http_hashing(options: &str) -> (Vec<HttpOrigin>, Proxy) {
    let origins: Vec<HttpOrigin> = NAMES.iter().map(|&name| http_origin(move |_| ok(name))).collect();
    let mut config = format!(
        "[global]\nworkers = 2\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\n\
         default_backend = \"be\"\n\n[[backend]]\nname = \"be\"\nmode = \"http\"\nbalance = \"hash\"\n{options}\n"
    );
    for (name, o) in NAMES.iter().zip(&origins) {
        config.push_str(&format!(
            "[[backend.server]]\nname = \"{name}\"\naddress = \"{}\"\n",
            o.addr
        ));
    }
    let proxy = Proxy::start(&config);
    (origins, proxy)
}

/// One request on a fresh connection; the name of the origin that answered. Waits until
/// the proxy has closed the session, so its server slot is back (the next pick sees no
/// load left over from this one).
fn served_by(proxy: &Proxy, extra_headers: &str) -> String {
    served_for(proxy, "/x", extra_headers)
}

fn served_for(proxy: &Proxy, target: &str, extra_headers: &str) -> String {
    let request = format!("GET {target} HTTP/1.1\r\nHost: t\r\n{extra_headers}Connection: close\r\n\r\n");
    let response = raw_exchange(proxy.addr, request.as_bytes());
    proxy.wait_idle(Duration::from_secs(5));
    let (head, body) = response.split_once("\r\n\r\n").expect("a response");
    assert!(head.starts_with("HTTP/1.1 200"), "{response}");
    body.to_string()
}

fn tally(names: impl IntoIterator<Item = String>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for name in names {
        *counts.entry(name).or_insert(0) += 1;
    }
    counts
}

#[test]
fn a_header_key_sticks_to_one_server_and_different_keys_spread() {
    let (_origins, proxy) = http_hashing("hash_key = \"header:X-User\"");
    for user in ["alice", "bob", "carol"] {
        let seen = tally((0..30).map(|_| served_by(&proxy, &format!("X-User: {user}\r\n"))));
        assert_eq!(seen.len(), 1, "user {user} reached {seen:?}");
    }
    // The header name is matched case-insensitively.
    let upper = served_by(&proxy, "X-USER: alice\r\n");
    assert_eq!(upper, served_by(&proxy, "x-user: alice\r\n"));
    let seen = tally((0..300).map(|u| served_by(&proxy, &format!("X-User: user-{u}\r\n"))));
    assert_eq!(seen.len(), 3, "300 users over three servers: {seen:?}");
    assert!(
        seen.values().all(|&n| n >= 30),
        "300 users over three servers: {seen:?}"
    );
    // Without the header, the client address is the key: one server for all of them.
    let seen = tally((0..20).map(|_| served_by(&proxy, "")));
    assert_eq!(seen.len(), 1, "no header, all from 127.0.0.1: {seen:?}");
}

#[test]
fn a_cookie_key_sticks_and_spreads() {
    let (_origins, proxy) = http_hashing("hash_key = \"cookie:SID\"");
    let seen = tally((0..20).map(|_| served_by(&proxy, "Cookie: theme=dark; SID=s-1\r\n")));
    assert_eq!(seen.len(), 1, "{seen:?}");
    // The same cookie in a second Cookie field is still found.
    let split = served_by(&proxy, "Cookie: theme=dark\r\nCookie: SID=s-1\r\n");
    assert!(seen.contains_key(&split), "{split} not in {seen:?}");
    let seen = tally((0..150).map(|i| served_by(&proxy, &format!("Cookie: SID=s-{i}\r\n"))));
    assert_eq!(seen.len(), 3, "{seen:?}");
}

#[test]
fn a_uri_key_sticks_per_target_query_included() {
    let (_origins, proxy) = http_hashing("hash_key = \"uri\"");
    let seen = tally((0..20).map(|_| served_for(&proxy, "/cart?id=7", "")));
    assert_eq!(seen.len(), 1, "{seen:?}");
    // The absolute form keys by its path and query, like the origin form.
    let absolute = served_for(&proxy, "http://t/cart?id=7", "");
    assert!(seen.contains_key(&absolute), "{absolute} not in {seen:?}");
    let seen = tally((0..150).map(|i| served_for(&proxy, &format!("/cart?id={i}"), "")));
    assert_eq!(seen.len(), 3, "the query is part of the key: {seen:?}");
}

/// A TCP origin that writes its name and then holds the connection until the client closes.
fn naming_origin(name: &'static str) -> Origin {
    origin(move |s: &mut TcpStream| {
        if s.write_all(name.as_bytes()).is_ok() {
            let _ = s.read(&mut [0u8; 1]);
        }
    })
}

fn tcp_hashing(options: &str) -> (Vec<Origin>, Proxy) {
    let origins: Vec<Origin> = NAMES.iter().map(|&n| naming_origin(n)).collect();
    let servers: Vec<(&str, SocketAddr, u32)> = NAMES.iter().zip(&origins).map(|(&n, o)| (n, o.addr, 1)).collect();
    let config = tcp_config("[global]\nworkers = 2", &servers).replace(
        "name = \"be\"\n",
        &format!("name = \"be\"\nbalance = \"hash\"\n{options}\n"),
    );
    let proxy = Proxy::start(&config);
    (origins, proxy)
}

/// Opens a connection and reads the name of the server it reached (the connection stays open).
fn open_named(proxy: &Proxy) -> (TcpStream, String) {
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut name = [0u8; 1];
    c.read_exact(&mut name).unwrap();
    (c, String::from_utf8_lossy(&name).into_owned())
}

#[test]
fn tcp_source_hashing_sends_one_client_address_to_one_server() {
    let (_origins, proxy) = tcp_hashing("");
    let seen = tally((0..30).map(|_| {
        let (c, name) = open_named(&proxy);
        drop(c);
        proxy.wait_idle(Duration::from_secs(5));
        name
    }));
    assert_eq!(seen.len(), 1, "every connection from 127.0.0.1: {seen:?}");
}

#[test]
fn tcp_bounded_load_spills_a_hot_source_within_the_factor() {
    // Nine connections held open from one address: plain hashing would put all nine on
    // one server; at 125 % no server goes above ceil(1.25 × 9 / 3) = 4.
    let (origins, proxy) = tcp_hashing("hash_balance_factor = 125");
    let held: Vec<(TcpStream, String)> = (0..9).map(|_| open_named(&proxy)).collect();
    let seen = tally(held.iter().map(|(_, n)| n.clone()));
    assert!(seen.len() >= 3, "the hot key spilled: {seen:?}");
    assert!(seen.values().all(|&n| n <= 4), "{seen:?}");
    assert!(
        origins
            .iter()
            .all(|o| o.peak.load(std::sync::atomic::Ordering::SeqCst) <= 4)
    );
    // With the bound off, the same address goes to one server however loaded.
    drop(held);
    proxy.wait_idle(Duration::from_secs(5));
    let (_origins, unbounded) = tcp_hashing("hash_balance_factor = 0");
    let held: Vec<(TcpStream, String)> = (0..9).map(|_| open_named(&unbounded)).collect();
    assert_eq!(tally(held.iter().map(|(_, n)| n.clone())).len(), 1);
}
