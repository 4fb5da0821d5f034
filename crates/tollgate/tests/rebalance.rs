//! Rebalancing across cores (`connection_rebalance`): with two workers, each with its own
//! SO_REUSEPORT socket, four long-lived connections that the kernel's hash sends to worker
//! 0 end up served by both workers when rebalancing is on, and stay where they landed when
//! it is off. Handed-over connections work in every frontend kind (TCP, TLS termination,
//! HTTP), since the session starts from scratch on the worker it was handed to.
//!
//! Forcing the hash deterministically: Linux picks a socket in a SO_REUSEPORT group by
//! hashing the 4-tuple (with a per-boot secret) and indexing the group in join order, and
//! tollgate binds the group in worker order, so the same client address and port towards
//! the same listening address and port always reaches the same worker's socket. The test
//! binds client sockets to chosen source ports, keeps the first four whose connections a
//! rebalance-off proxy serves on worker 0, then starts the proxy under test on the same
//! listening port and connects from those four ports again. Clients close with a reset
//! (SO_LINGER 0) so no TIME_WAIT keeps a 4-tuple from being used twice.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::http::{http_config, http_origin, ok, read_response};
use common::tls::{Ca, TempDir, cert_entry, client_config};
use common::{Proxy, echo, origin, tcp_config};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

const HELD: usize = 4;
/// Source ports tried (at most) to find `HELD` that hash to worker 0.
const CANDIDATES: u16 = 400;

/// A connection to `to` from 127.0.0.1:`port`, closed with a reset when dropped; `None` if
/// the port is taken on this host.
fn connect_from(port: u16, to: SocketAddr) -> Option<TcpStream> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).unwrap();
    s.set_reuse_address(true).unwrap();
    s.set_linger(Some(Duration::ZERO)).unwrap();
    s.bind(&SockAddr::from(SocketAddr::from(([127, 0, 0, 1], port)))).ok()?;
    s.connect(&SockAddr::from(to)).ok()?;
    let c: TcpStream = s.into();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    Some(c)
}

fn echo_once(c: &mut TcpStream) {
    c.write_all(b"abc").unwrap();
    let mut b = [0u8; 3];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"abc");
}

/// Per worker: (sessions open, sessions ever, connections handed away by rebalancing).
fn per_worker(proxy: &Proxy) -> Vec<(u64, u64, u64)> {
    proxy
        .running()
        .shared()
        .stats
        .iter()
        .map(|w| {
            (
                w.sessions_active.get(),
                w.sessions_total.get(),
                w.connections_rebalanced.get(),
            )
        })
        .collect()
}

fn wait_active(proxy: &Proxy, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.running().stats().sessions_active != want {
        assert!(
            Instant::now() < deadline,
            "sessions never settled at {want}: {:?}",
            per_worker(proxy)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// First source port tried: spread by process id so parallel test processes rarely race
/// for the same ports (below the usual ephemeral range, so few are taken).
fn first_port() -> u16 {
    20_000 + (std::process::id() % 8_000) as u16
}

/// Starts a two-worker TCP proxy with rebalancing off and finds `HELD` source ports whose
/// connections it serves on worker 0; they are still open when it returns, with the
/// proxy, for the caller to check. The proxy's listening port comes back too.
fn ports_hashed_to_worker_0() -> (Proxy, Vec<TcpStream>, Vec<u16>, common::Origin) {
    let origin = origin(echo);
    let proxy = Proxy::start(&tcp_config(
        "[global]\nworkers = 2\nconnection_rebalance = false",
        &[("o", origin.addr, 1)],
    ));
    let (mut held, mut ports) = (Vec::new(), Vec::new());
    for port in (first_port()..).take(CANDIDATES as usize) {
        if held.len() == HELD {
            break;
        }
        let before = per_worker(&proxy)[0].1;
        let Some(mut c) = connect_from(port, proxy.addr) else {
            continue;
        };
        echo_once(&mut c);
        if per_worker(&proxy)[0].1 > before {
            held.push(c);
            ports.push(port);
        } else {
            drop(c);
            wait_active(&proxy, held.len() as u64);
        }
    }
    assert_eq!(
        held.len(),
        HELD,
        "found only {ports:?} hashing to worker 0 among {CANDIDATES} ports: {:?}",
        per_worker(&proxy)
    );
    (proxy, held, ports, origin)
}

/// Opens one connection per port (in order) with `open`, which must complete an exchange
/// so the session exists before the next connect. Returns them, still open.
fn open_all<C>(ports: &[u16], to: SocketAddr, open: impl Fn(TcpStream) -> C) -> Vec<C> {
    ports
        .iter()
        .map(|&p| open(connect_from(p, to).unwrap_or_else(|| panic!("source port {p} taken meanwhile"))))
        .collect()
}

/// What the accepting order makes of 4 connections hashed to worker 0 with rebalancing:
/// 1st and 2nd stay (2 > 0 + 1 is false for the 2nd's count of 1), the 3rd moves (2 > 1),
/// the 4th stays (2 > 1 + 1 is false).
fn assert_spread(proxy: &Proxy, kind: &str) {
    let w = per_worker(proxy);
    eprintln!("{kind}: per worker (active, total, rebalanced) = {w:?}");
    assert_eq!((w[0].0, w[1].0), (3, 1), "{kind}: both workers serve, 3 and 1: {w:?}");
    assert_eq!((w[0].2, w[1].2), (1, 0), "{kind}: worker 0 handed one over: {w:?}");
}

fn on_port(config: &str, port: u16) -> String {
    config.replace("127.0.0.1:0", &format!("127.0.0.1:{port}"))
}

#[test]
fn rebalancing_spreads_connections_the_hash_put_on_one_worker() {
    let (probe, held, ports, origin) = ports_hashed_to_worker_0();
    // Off: all four stay on worker 0 (with rebalancing, the 3rd would have moved and never
    // counted as worker 0's, and the search above would have failed).
    let w = per_worker(&probe);
    eprintln!("off: per worker (active, total, rebalanced) = {w:?}, source ports {ports:?}");
    assert_eq!(
        (w[0].0, w[1].0),
        (HELD as u64, 0),
        "rebalance off keeps them where they landed: {w:?}"
    );
    assert_eq!((w[0].2, w[1].2), (0, 0));
    let port = probe.addr.port();
    drop(held);
    drop(probe);

    // On (the default), TCP mode.
    let proxy = Proxy::start(&on_port(
        &tcp_config("[global]\nworkers = 2", &[("o", origin.addr, 1)]),
        port,
    ));
    let mut conns = open_all(&ports, proxy.addr, |mut c| {
        echo_once(&mut c);
        c
    });
    assert_spread(&proxy, "tcp");
    // Every connection, moved or not, keeps working.
    for c in &mut conns {
        echo_once(c);
    }
    drop(conns);
    drop(proxy);

    // HTTP mode: keep-alive connections, two requests each.
    let web = http_origin(|_| ok("hi"));
    let proxy = Proxy::start(&on_port(&http_config("[global]\nworkers = 2", web.addr), port));
    let get = |r: &mut BufReader<TcpStream>| {
        r.get_mut().write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let (status, _, body) = read_response(r).expect("a response");
        assert_eq!((status, body.as_slice()), (200, b"hi".as_slice()));
    };
    let mut conns = open_all(&ports, proxy.addr, |c| {
        let mut r = BufReader::new(c);
        get(&mut r);
        r
    });
    assert_spread(&proxy, "http");
    for r in &mut conns {
        get(r);
        assert!(r.buffer().is_empty());
    }
    drop(conns);
    drop(proxy);

    // TLS termination: the handshake happens on the worker the connection was handed to.
    let dir = TempDir::new();
    let ca = Ca::new("rebalance-ca");
    let leaf = ca.leaf(&["fe.example"], "fe", false).write(&dir, "fe");
    let config = format!(
        "[global]\nworkers = 2\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:{port}\"]\ndefault_backend = \"be\"\n\
         [frontend.tls]\n{}\n[[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        cert_entry(&leaf, true),
        origin.addr
    );
    let proxy = Proxy::start(&config);
    let tls = client_config(&ca);
    let mut conns = open_all(&ports, proxy.addr, |c| {
        let name = rustls::pki_types::ServerName::try_from("fe.example").unwrap();
        let conn = rustls::ClientConnection::new(Arc::clone(&tls), name).unwrap();
        let mut s = rustls::StreamOwned::new(conn, c);
        tls_echo(&mut s);
        s
    });
    assert_spread(&proxy, "tls");
    for s in &mut conns {
        tls_echo(s);
    }
}

fn tls_echo(s: &mut rustls::StreamOwned<rustls::ClientConnection, TcpStream>) {
    s.write_all(b"abc").unwrap();
    s.flush().unwrap();
    let mut b = [0u8; 3];
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"abc");
}
