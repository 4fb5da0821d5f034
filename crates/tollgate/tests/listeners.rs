//! Listener models: SO_REUSEPORT per worker, the shared accept loop (configured or as a
//! fallback when SO_REUSEPORT cannot bind), IPv6, and an address in use refused (a second
//! instance must not share the first one's port through SO_REUSEPORT).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use common::*;

fn exchange(addr: SocketAddr) {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.write_all(b"abc").unwrap();
    let mut b = [0u8; 3];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"abc");
}

#[test]
fn reuseport_gives_each_worker_its_socket() {
    let origin = origin(echo);
    let config = tollgate::config::parse(&tcp_config("[global]\nworkers = 3", &[("o", origin.addr, 1)]), "t").unwrap();
    let sockets = tollgate::listener::bind_all(&config).unwrap();
    let workers: Vec<Option<usize>> = sockets.iter().map(|s| s.worker).collect();
    assert_eq!(workers, [Some(0), Some(1), Some(2)]);
    assert!(
        sockets.windows(2).all(|w| w[0].local == w[1].local),
        "one port for the group"
    );
}

#[test]
fn shared_accept_loop_feeds_all_workers() {
    let origin = origin(echo);
    let proxy = Proxy::start(&tcp_config(
        "[global]\nworkers = 2\nthread_per_core = false",
        &[("o", origin.addr, 1)],
    ));
    // Hold connections open so the dispatcher sees load and spreads them.
    let held: Vec<TcpStream> = (0..10)
        .map(|_| {
            let mut c = TcpStream::connect(proxy.addr).unwrap();
            c.write_all(b"x").unwrap();
            let mut b = [0u8; 1];
            c.read_exact(&mut b).unwrap();
            c
        })
        .collect();
    let shared = proxy.running().shared();
    let per_worker: Vec<u64> = shared.stats.iter().map(|s| s.sessions_active.get()).collect();
    assert_eq!(per_worker.iter().sum::<u64>(), 10);
    assert!(
        per_worker.iter().all(|&n| n == 5),
        "handoff spreads connections: {per_worker:?}"
    );
    drop(held);
}

#[test]
fn falls_back_to_a_shared_socket_when_reuseport_bind_fails() {
    // Linux lets a SO_REUSEPORT group form whenever a plain bind would work, so the failure
    // is injected at the SO_REUSEPORT step; everything after it is the real path.
    let origin = origin(echo);
    let cfg = tcp_config("[global]\nworkers = 2", &[("o", origin.addr, 1)]);
    let config = tollgate::config::parse(&cfg, "t").unwrap();
    let refuse: tollgate::listener::ReusePortBinder = |_, _, _| {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "SO_REUSEPORT refused",
        ))
    };
    let sockets = tollgate::listener::bind_all_with(&config, refuse).unwrap();
    let port = sockets[0].local.port();
    assert_eq!(sockets.len(), 1);
    assert_eq!(sockets[0].worker, None, "fell back to one shared socket");
    let running = tollgate::runtime::start(Arc::new(config), sockets).unwrap();
    for _ in 0..20 {
        exchange(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    assert_eq!(running.stats().sessions_total, 20);
    running.hard_stop();
    running.join().unwrap();
}

#[test]
fn ipv6_loopback_is_served() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipped: no IPv6 loopback on this machine");
        return;
    }
    let origin = origin(echo);
    let proxy = Proxy::start(&tcp_config("", &[("o", origin.addr, 1)]).replace("127.0.0.1:0", "[::1]:0"));
    assert!(proxy.addr.is_ipv6());
    exchange(proxy.addr);
}

/// A second tollgate on the port of a running one exits non-zero with one line, master mode
/// and single-process alike, and the first keeps serving every connection.
#[test]
fn a_second_instance_on_a_port_in_use_is_refused_and_the_first_keeps_serving() {
    use master_support::{Master, TempDir, global};
    let origin = origin(echo);
    let dir = TempDir::new("port-in-use");
    let text = tcp_config(&global(&dir.0, ""), &[("o", origin.addr, 1)]);
    let first = Master::start(dir, &text, &[]);
    let taken = first.addr;
    let second_dir = TempDir::new("port-in-use-2");
    let text =
        tcp_config(&global(&second_dir.0, ""), &[("o", origin.addr, 1)]).replace("127.0.0.1:0", &taken.to_string());
    let config = second_dir.0.join("second.toml");
    std::fs::write(&config, text).unwrap();
    let want = format!("cannot listen on {taken} (frontend \"fe\"): address already in use");
    for extra in [&[][..], &["--no-master"][..]] {
        let mut second = std::process::Command::new(master_support::BIN)
            .args(["run", "--config"])
            .arg(&config)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let status = loop {
            if let Some(status) = second.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = second.kill();
                let _ = second.wait();
                panic!("{extra:?}: the second instance started on {taken} (it shares the port)");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let mut stderr = String::new();
        second.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        assert_eq!(status.code(), Some(1), "{extra:?}: {stderr}");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{extra:?}: one line, got {stderr}"
        );
        assert!(stderr.contains(&want), "{extra:?}: {want:?} not in {stderr}");
    }
    // Every connection still reaches the first instance (none went to a second group).
    for _ in 0..20 {
        exchange(taken);
    }
    assert_eq!(first.generations().len(), 1);
}
