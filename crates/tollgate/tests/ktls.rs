//! kTLS: off by default, probed once at startup. Where the kernel has no `tls` ULP, the
//! kernel tests report `skipped: <reason>`; the frontend still serves with userspace rustls
//! (checked here everywhere). Where the ULP exists they run for real: a 100 MiB echo round
//! trip through a TLS-terminating TCP frontend handed to the kernel after 1 MiB (with copy
//! and with splice relaying), and a small exchange below the threshold that must not be.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::tls::*;
use common::*;

/// The kTLS switch never breaks serving: on this kernel it falls back to userspace.
#[test]
fn ktls_frontend_round_trip() {
    let origin = origin(|s: &mut TcpStream| {
        let mut req = Vec::new();
        s.read_to_end(&mut req).expect("origin read");
        let _ = s.write_all(&payload_block(req.len() as u64, 4 << 20));
    });
    let dir = TempDir::new();
    let ca = Ca::new("ca");
    let a = ca.leaf(&["a.example"], "cert-a", false).write(&dir, "a");
    let proxy = Proxy::start(&format!(
        "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
         [frontend.tls]\n{}\n[frontend.tls.ktls]\nenabled = true\nafter_bytes = \"1MiB\"\n\
         [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        cert_entry(&a, false),
        origin.addr
    ));
    // The config is served either way: with kTLS where the kernel has it, else in userspace.
    let (reply, _) = tls_request(proxy.addr, client_config(&ca), "a.example", b"0123456789").unwrap();
    assert!(reply == payload_block(10, 4 << 20));
    proxy.wait_idle(Duration::from_secs(10));
    let stats = proxy.running().stats();
    // The client half-closed before the reply: never handed over, on any kernel.
    assert_eq!((stats.ktls_offloaded, stats.ktls_install_failures), (0, 0), "{stats:?}");
}

/// A TLS-terminating TCP frontend with kTLS after `after_bytes`, in front of `origin`.
fn ktls_proxy(dir: &TempDir, ca: &Ca, origin: SocketAddr, after_bytes: &str, splice: bool) -> Proxy {
    let a = ca.leaf(&["a.example"], "cert-a", false).write(dir, "a");
    let splice = if splice {
        "[frontend.splice]\nenabled = true\n"
    } else {
        ""
    };
    Proxy::start(&format!(
        "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n{splice}\
         [frontend.tls]\n{}\n[frontend.tls.ktls]\nenabled = true\nafter_bytes = \"{after_bytes}\"\n\
         [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n",
        cert_entry(&a, false),
    ))
}

/// Sends `total` bytes (deterministic blocks) over TLS while reading the echo concurrently;
/// then close_notify + FIN, and reads to EOF. rustls' read_to_end fails with UnexpectedEof
/// if the proxy closed without close_notify, so `Ok` also proves the close. Returns the
/// sha256 sent, the sha256 and length received.
fn tls_echo(addr: SocketAddr, config: Arc<rustls::ClientConfig>, total: u64) -> ([u8; 32], [u8; 32], u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("a.example").unwrap();
        let tls = tokio_rustls::TlsConnector::from(config).connect(name, s).await.unwrap();
        let (mut rd, mut wr) = tokio::io::split(tls);
        let writer = async move {
            let mut h = Sha256::new();
            let mut sent = 0u64;
            let mut seed = 1u64;
            while sent < total {
                let block = payload_block(seed, (64 << 10).min((total - sent) as usize));
                h.update(&block);
                wr.write_all(&block).await.unwrap();
                sent += block.len() as u64;
                seed += 1;
            }
            wr.shutdown().await.unwrap(); // close_notify, then FIN
            <[u8; 32]>::from(h.finalize())
        };
        let reader = async move {
            let mut h = Sha256::new();
            let mut got = 0u64;
            let mut buf = vec![0u8; 64 << 10];
            loop {
                // Err(UnexpectedEof) here = truncation: the proxy closed without close_notify.
                let n = rd
                    .read(&mut buf)
                    .await
                    .expect("clean TLS close (close_notify) from the proxy");
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
                got += n as u64;
            }
            (<[u8; 32]>::from(h.finalize()), got)
        };
        let (sent, (received, len)) =
            tokio::time::timeout(Duration::from_secs(300), async { tokio::join!(writer, reader) })
                .await
                .expect("echo round trip timed out");
        (sent, received, len)
    })
}

fn ktls_round_trip(splice: bool) {
    if let Err(reason) = tollgate_sys::sockopt::probe_ktls() {
        println!("skipped: {reason}");
        return;
    }
    let origin = origin(echo);
    let dir = TempDir::new();
    let ca = Ca::new("ca");
    let proxy = ktls_proxy(&dir, &ca, origin.addr, "1MiB", splice);
    const TOTAL: u64 = 100 << 20;
    let (sent, received, len) = tls_echo(proxy.addr, client_config(&ca), TOTAL);
    assert_eq!(len, TOTAL);
    assert_eq!(sent, received, "sha256 of what came back");
    proxy.wait_idle(Duration::from_secs(10));
    let stats = proxy.running().stats();
    assert_eq!(stats.ktls_offloaded, 1, "{stats:?}");
    assert_eq!(stats.ktls_install_failures, 0, "{stats:?}");
    assert_eq!(stats.ktls_unsupported_record, 0, "{stats:?}");
    if splice {
        assert!(stats.bytes_spliced > TOTAL, "{stats:?}");
    }

    // Below the threshold: served in userspace, not handed over.
    let (sent, received, len) = tls_echo(proxy.addr, client_config(&ca), 64 << 10);
    assert_eq!((sent, len), (received, 64 << 10));
    proxy.wait_idle(Duration::from_secs(10));
    assert_eq!(
        proxy.running().stats().ktls_offloaded,
        1,
        "a small exchange must not offload"
    );
}

/// 100 MiB echoed through kTLS (copy relay after the handover), checksummed both ways.
#[test]
fn ktls_handover_100mib_copy() {
    ktls_round_trip(false);
}

/// The same with splice(2) relaying after the handover: the payload never enters userspace.
#[test]
fn ktls_handover_100mib_splice() {
    ktls_round_trip(true);
}

/// The kernel side itself: only where the `tls` ULP exists.
#[test]
fn ktls_probe() {
    if let Err(reason) = tollgate_sys::sockopt::probe_ktls() {
        println!("skipped: {reason}");
        return;
    }
    assert!(tollgate::tls::ktls::available().is_ok());
}

/// The round-trip harness above, over the userspace fallback (every kernel): proves the
/// harness itself (concurrent echo, checksums, close_notify expected at the end) and that a
/// kTLS-enabled frontend without the ULP never tries a handover.
#[test]
fn ktls_fallback_echo_8mib() {
    if tollgate_sys::sockopt::probe_ktls().is_ok() {
        println!("skipped: the kernel has the tls ULP; the 100 MiB kTLS tests cover this frontend");
        return;
    }
    let origin = origin(echo);
    let dir = TempDir::new();
    let ca = Ca::new("ca");
    let proxy = ktls_proxy(&dir, &ca, origin.addr, "1MiB", false);
    let (sent, received, len) = tls_echo(proxy.addr, client_config(&ca), 8 << 20);
    assert_eq!((sent, len), (received, 8 << 20));
    proxy.wait_idle(Duration::from_secs(10));
    let stats = proxy.running().stats();
    assert_eq!((stats.ktls_offloaded, stats.ktls_install_failures), (0, 0), "{stats:?}");
}
