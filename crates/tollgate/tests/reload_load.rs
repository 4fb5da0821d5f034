//! Reloads under load lose nothing: keep-alive clients exchanging through five reloads, and
//! a connection per request through five reloads, with every failure counted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{echo, origin, tcp_config};
use master_support::{Master, TempDir, global};

#[derive(Default)]
struct Counts {
    exchanges: AtomicU64,
    connections: AtomicU64,
    connect_errors: AtomicU64,
    io_errors: AtomicU64,
    mismatches: AtomicU64,
}

impl Counts {
    fn failures(&self) -> u64 {
        self.connect_errors.load(Ordering::SeqCst)
            + self.io_errors.load(Ordering::SeqCst)
            + self.mismatches.load(Ordering::SeqCst)
    }
    fn show(&self) -> String {
        format!(
            "exchanges={} connections={} connect_errors={} io_errors={} mismatches={}",
            self.exchanges.load(Ordering::SeqCst),
            self.connections.load(Ordering::SeqCst),
            self.connect_errors.load(Ordering::SeqCst),
            self.io_errors.load(Ordering::SeqCst),
            self.mismatches.load(Ordering::SeqCst)
        )
    }
}

/// Runs `reloads` reloads spread over `duration` while the load runs; returns the reload outputs.
fn reload_during(master: &Master, duration: Duration, reloads: u32) -> Vec<String> {
    let start = Instant::now();
    let mut outputs = Vec::new();
    for i in 1..=reloads {
        let at = start + duration * i / (reloads + 1);
        thread::sleep(at.saturating_duration_since(Instant::now()));
        outputs.push(master.reload_ok());
    }
    thread::sleep((start + duration).saturating_duration_since(Instant::now()));
    outputs
}

/// One keep-alive client: connections of 20..220 request/response exchanges each, until `stop`.
fn keepalive_client(id: u64, addr: SocketAddr, stop: &AtomicBool, counts: &Counts) {
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let mut c = match TcpStream::connect(addr) {
            Ok(c) => c,
            Err(_) => {
                counts.connect_errors.fetch_add(1, Ordering::SeqCst);
                continue;
            }
        };
        counts.connections.fetch_add(1, Ordering::SeqCst);
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let per_conn = 20 + (id * 37 + n * 11) % 200;
        for _ in 0..per_conn {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            n += 1;
            let msg = format!("client {id:03} request {n:08} ........................\n");
            let mut back = vec![0u8; msg.len()];
            if c.write_all(msg.as_bytes())
                .and_then(|()| c.read_exact(&mut back))
                .is_err()
            {
                counts.io_errors.fetch_add(1, Ordering::SeqCst);
                break;
            }
            if back != msg.as_bytes() {
                counts.mismatches.fetch_add(1, Ordering::SeqCst);
                break;
            }
            counts.exchanges.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[test]
fn fifty_keepalive_clients_through_five_reloads() {
    let origin = origin(echo);
    let dir = TempDir::new("reload-ka");
    let config = tcp_config(&global(&dir.0, ""), &[("o", origin.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let clients: Vec<_> = (0..50)
        .map(|id| {
            let (stop, counts, addr) = (Arc::clone(&stop), Arc::clone(&counts), master.addr);
            thread::spawn(move || keepalive_client(id, addr, &stop, &counts))
        })
        .collect();
    let outputs = reload_during(&master, Duration::from_secs(10), 5);
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    eprintln!("{}", counts.show());
    assert_eq!(outputs.len(), 5);
    assert_eq!(counts.failures(), 0, "{}", counts.show());
    assert!(counts.exchanges.load(Ordering::SeqCst) >= 5_000, "{}", counts.show());
    assert!(
        counts.connections.load(Ordering::SeqCst) >= 100,
        "clients reconnected: {}",
        counts.show()
    );
    // Generation 6 serves; the old ones drained once their clients hung up.
    let (generation, _, _) = master.wait_single_generation(Duration::from_secs(15));
    assert_eq!(generation, 6);
}

#[test]
fn connection_per_request_through_five_reloads() {
    let origin = origin(echo);
    let dir = TempDir::new("reload-cps");
    let config = tcp_config(&global(&dir.0, ""), &[("o", origin.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let clients: Vec<_> = (0..8u64)
        .map(|id| {
            let (stop, counts, addr) = (Arc::clone(&stop), Arc::clone(&counts), master.addr);
            thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let msg = format!("c{id} n{n:08}");
                    match master_support::exchange(addr, msg.as_bytes()) {
                        Ok(()) => {
                            counts.exchanges.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                            counts.connect_errors.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => {
                            eprintln!("client {id}: {e}");
                            counts.io_errors.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    let outputs = reload_during(&master, Duration::from_secs(6), 5);
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    eprintln!("{}", counts.show());
    assert_eq!(outputs.len(), 5);
    assert_eq!(counts.failures(), 0, "refused or reset: {}", counts.show());
    assert!(counts.exchanges.load(Ordering::SeqCst) >= 1_000, "{}", counts.show());
    assert_eq!(master.wait_single_generation(Duration::from_secs(15)).0, 6);
}
