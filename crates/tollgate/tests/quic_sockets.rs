//! The UDP sockets of `[frontend.quic]` binds: bound once by the master, one per worker
//! thread; every generation gets the *same* sockets (same inodes); a reload that removes
//! the bind closes them once the old generation has exited. Sockets only: no HTTP/3 here.
//!
//! Sockets are identified by inode: `/proc/net/udp` lists the bound ones (with their local
//! port), `/proc/PID/fd` links name the ones a process holds (`socket:[INODE]`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod master_support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use master_support::{Master, TempDir, global, logged_addr};

/// A self-signed certificate for `a.example` in `dir`: `(cert, key)` paths.
fn cert_files(dir: &Path) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["a.example".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (c, k) = (dir.join("a.crt"), dir.join("a.key"));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c.display().to_string(), k.display().to_string())
}

/// An HTTP frontend terminating TLS on TCP port 0, with `quic` (a `[frontend.quic]` table or
/// nothing) after its TLS tables. The server is never contacted.
fn https_config(global: &str, (cert, key): &(String, String), quic: &str) -> String {
    format!(
        "{global}\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"app\"\n\
         [frontend.tls]\n[[frontend.tls.cert]]\ncert = \"{cert}\"\nkey = \"{key}\"\n{quic}\n\
         [[backend]]\nname = \"app\"\nmode = \"http\"\n[[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:9\"\n"
    )
}

/// Inodes of the IPv4 UDP sockets bound on `port` (`/proc/net/udp`).
fn udp_inodes(port: u16) -> BTreeSet<u64> {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let local_port = u16::from_str_radix(cols.get(1)?.rsplit(':').next()?, 16).ok()?;
            (local_port == port).then(|| cols.get(9)?.parse().ok())?
        })
        .collect()
}

/// Inodes of the sockets process `pid` holds.
fn held_sockets(pid: i32) -> BTreeSet<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| {
            let target = std::fs::read_link(e.ok()?.path()).ok()?;
            let t = target.to_str()?;
            t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// Waits (bounded) until `cond` holds; fails saying `what`.
fn wait(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_master_hands_every_generation_the_same_udp_sockets() {
    let dir = TempDir::new("quic-sockets");
    let cert = cert_files(&dir.0);
    let global = global(&dir.0, "");
    let with_quic = https_config(&global, &cert, "[frontend.quic]\nbind = [\"127.0.0.1:0\"]");
    let master = Master::start(dir, &with_quic, &[]);
    let line = master
        .wait_log(|l| l.contains("listening (quic, UDP)"), Duration::from_secs(5))
        .expect("the quic bind is logged");
    let udp: SocketAddr = logged_addr(&line);
    assert_ne!(udp.port(), 0);

    // One socket per worker thread (`global` says 2), held by the master and the worker.
    let sockets = udp_inodes(udp.port());
    assert_eq!(sockets.len(), 2, "{sockets:?}");
    assert!(sockets.is_subset(&held_sockets(master.pid())));
    let (_, first_worker, _) = master.wait_single_generation(Duration::from_secs(10));
    assert!(
        sockets.is_subset(&held_sockets(first_worker)),
        "worker {first_worker} holds {:?}, not all of {sockets:?}",
        held_sockets(first_worker)
    );

    // A reload: the next generation gets the same sockets; nothing new is bound.
    master.write_config(&with_quic.replace("name = \"a\"", "name = \"a2\""));
    master.reload_ok();
    let (_, second_worker, _) = master.wait_single_generation(Duration::from_secs(10));
    assert_ne!(second_worker, first_worker);
    assert_eq!(udp_inodes(udp.port()), sockets);
    assert!(sockets.is_subset(&held_sockets(second_worker)));

    // A reload without the quic bind: closed once the generation that used it has exited.
    master.write_config(&https_config(&global, &cert, ""));
    master.reload_ok();
    let (_, third_worker, _) = master.wait_single_generation(Duration::from_secs(10));
    wait("the removed quic bind's sockets close", Duration::from_secs(5), || {
        udp_inodes(udp.port()).is_empty()
    });
    assert!(held_sockets(third_worker).is_disjoint(&sockets));
    assert!(held_sockets(master.pid()).is_disjoint(&sockets));
    // Free again: anyone may bind the port.
    std::net::UdpSocket::bind(udp).expect("the port is free");
}

/// Without a master: `bind_quic` binds, `StartOptions::udp` hands the sockets to the
/// workers, `Running::quic_addrs` reports where.
#[test]
fn in_process_runtime_serves_the_sockets_it_is_given() {
    let dir = TempDir::new("quic-inproc");
    let cert = cert_files(&dir.0);
    let text = https_config(
        "[global]\nworkers = 2\n",
        &cert,
        "[frontend.quic]\nbind = [\"127.0.0.1:0\"]",
    );
    let config = tollgate::config::parse(&text, "t.toml").unwrap();
    let sockets = tollgate::listener::bind_all(&config).unwrap();
    let udp = tollgate::listener::udp::bind_quic(&config).unwrap();
    assert_eq!(udp.len(), 2);
    let port = udp[0].local.port();
    let options = tollgate::runtime::StartOptions {
        udp,
        ..Default::default()
    };
    let running = tollgate::runtime::start_with(Arc::new(config), sockets, options).unwrap();
    let addrs = running.quic_addrs("web");
    assert_eq!(addrs.len(), 1, "{addrs:?}");
    assert_eq!(addrs[0].port(), port);
    assert!(running.quic_addrs("nope").is_empty());
    assert_eq!(udp_inodes(port).len(), 2);
    running.hard_stop();
    running.join().unwrap();
    wait("the sockets close with the runtime", Duration::from_secs(5), || {
        udp_inodes(port).is_empty()
    });
}
