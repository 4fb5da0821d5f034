//! HTTP/3 across a reload, in master mode: a 100 MiB download over QUIC in flight while the
//! master starts a new generation completes intact. The old generation hands the UDP sockets
//! over (it stops reading them); its connection's datagrams, now read by the new generation,
//! reach it through the master's pair; new connections are the new generation's; the old one
//! exits once the download is over.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod h3_support;
mod master_support;

use std::time::Duration;

use common::tls::cert_entry;
use h3_support::{client, free_udp_port, have_aioquic, origin, pattern_sha, pki};
use master_support::{Master, TempDir, global};
use serde_json::Value;

#[test]
fn a_download_over_http3_survives_a_reload() {
    if !have_aioquic() {
        return;
    }
    let pki = pki();
    let origin = origin();
    let dir = TempDir::new("h3-reload");
    let udp = free_udp_port();
    let config = format!(
        "{}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         [frontend.quic]\nbind = [\"127.0.0.1:{udp}\"]\n\
         [frontend.tls]\n{}\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n",
        global(&dir.0, ""),
        cert_entry(&pki.leaf, true)
    );
    let m = Master::start(dir, &config, &[]);
    let quic: std::net::SocketAddr = format!("127.0.0.1:{udp}").parse().unwrap();
    let (first_gen, _, _) = m.wait_single_generation(Duration::from_secs(20));

    // The download, in a client of its own; its progress on stderr says when it is under way.
    let download = h3_support::client_command(&pki.ca, quic, "/bytes/100", &["--timeout", "120"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Under way once the origin has begun the answer (100 MiB: several seconds through the
    // Python client).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while h3_support::DOWNLOADS_STARTED.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "the download did not start");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The connection in `show sessions`, as an HTTP/3 one.
    let sessions = m.ctl_ok(&["show", "sessions"]);
    assert!(sessions.contains("HTTP/3"), "{sessions}");

    m.reload_ok();
    assert!(
        m.wait_log(|l| l.contains("QUIC sockets handed over"), Duration::from_secs(10))
            .is_some(),
        "the old generation was not told to hand the sockets over"
    );
    // A new connection is the new generation's.
    let (json, ok) = client(&pki, quic, "/", &["--count", "5"]);
    assert!(ok, "a new connection after the reload: {json}");

    let out = download.wait_with_output().unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(out.status.success(), "{json}");
    assert_eq!(json["responses"][0]["bytes"], 100u64 << 20);
    assert_eq!(json["responses"][0]["sha256"], pattern_sha(100));
    // The new generation read the old one's datagrams and forwarded them (`show info`'s
    // counters are the serving generation's).
    let info = m.ctl_ok(&["show", "info"]);
    let forwarded: u64 = info
        .split_whitespace()
        .find_map(|w| w.strip_prefix("quic_misrouted="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        forwarded > 100,
        "the new generation forwarded {forwarded} datagrams:\n{info}"
    );
    // The old generation leaves once its connection is done.
    let (last_gen, _, _) = m.wait_single_generation(Duration::from_secs(30));
    assert!(last_gen > first_gen);
}
