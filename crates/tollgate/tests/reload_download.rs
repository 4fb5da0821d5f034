//! A 100 MiB download in flight during a reload completes intact, served by the old
//! generation, which exits only once the download is over.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::Read;
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{origin, payload_block, tcp_config, write_mib};
use master_support::{Master, TempDir, global};
use sha2::{Digest, Sha256};

const MIB: usize = 1 << 20;

#[test]
fn download_in_flight_survives_a_reload() {
    let (sent_tx, sent_rx) = mpsc::channel();
    let sent_tx = std::sync::Mutex::new(sent_tx);
    let origin = origin(move |s| {
        let mut block = payload_block(42, MIB);
        if let Ok(hash) = write_mib(s, 100, &mut block) {
            let _ = sent_tx.lock().unwrap().send(hash);
        }
    });
    let dir = TempDir::new("reload-dl");
    let config = tcp_config(&global(&dir.0, ""), &[("o", origin.addr, 1)]);
    let master = Master::start(dir, &config, &[]);

    let mut client = TcpStream::connect(master.addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut first = vec![0u8; MIB];
    client.read_exact(&mut first).unwrap();

    let out = master.reload_ok();
    assert!(out.contains("generation 2"), "{out}");
    let gens = master.generations();
    assert!(
        gens.iter().any(|(g, _, state)| *g == 1 && state == "stopping"),
        "the old generation still serves the download: {gens:?}"
    );
    // New connections go to generation 2 meanwhile; generation 1 keeps the download.
    let (rest_len, _) = {
        let mut h = Sha256::new();
        h.update(&first);
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = first.len() as u64;
        loop {
            let n = client.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            total += n as u64;
            h.update(&buf[..n]);
        }
        let got: [u8; 32] = h.finalize().into();
        let sent = sent_rx.recv_timeout(Duration::from_secs(10)).expect("origin finished");
        assert_eq!(got, sent, "sha256 of the download");
        (total, got)
    };
    assert_eq!(rest_len, 100 * MIB as u64);
    // The old generation exits once its last connection is done.
    drop(client);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let gens = master.generations();
        if gens.iter().all(|(g, _, _)| *g != 1) {
            break;
        }
        assert!(Instant::now() < deadline, "generation 1 did not exit: {gens:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
