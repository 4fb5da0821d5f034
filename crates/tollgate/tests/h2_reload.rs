//! A reload with 50 HTTP/2 connections streaming (issue 13, item 1): the old generation
//! sends GOAWAY and lets every open stream finish; every stream's body arrives whole.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;
#[path = "h2_support/origin.rs"]
mod origin;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use master_support::{Master, TempDir, global};
use sha2::{Digest, Sha256};

const CONNS: usize = 50;
const STREAMS: usize = 2;
const SIZE: u64 = 256 * 1024;

#[test]
fn reload_with_fifty_streaming_h2_connections_completes_every_stream() {
    let o = origin::start();
    let dir = TempDir::new("h2-reload");
    let config = format!(
        "{}[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\ndefault_backend = \"be\"\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        global(&dir.0, ""),
        o.addr
    );
    let master = Master::start(dir, &config, &[]);
    let addr = master.addr;
    let want = origin::body_sha(SIZE);
    let clients = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut tasks = Vec::new();
            for c in 0..CONNS {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                let (client, conn) = h2::client::handshake(tcp).await.unwrap();
                tokio::spawn(async move {
                    let _ = conn.await;
                });
                for s in 0..STREAMS {
                    let mut client = client.clone().ready().await.unwrap();
                    let uri = format!("http://{addr}/gate/{SIZE}?c{c}s{s}");
                    let req = http::Request::get(uri).body(()).unwrap();
                    let (resp, _) = client.send_request(req, true).unwrap();
                    tasks.push(tokio::spawn(async move {
                        let resp = resp.await.map_err(|e| e.to_string())?;
                        let status = resp.status();
                        let mut body = resp.into_body();
                        let mut h = Sha256::new();
                        while let Some(chunk) = body.data().await {
                            let chunk = chunk.map_err(|e| e.to_string())?;
                            let _ = body.flow_control().release_capacity(chunk.len());
                            h.update(&chunk);
                        }
                        Ok::<_, String>((status.as_u16(), origin::hex(&h.finalize())))
                    }));
                }
            }
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap());
            }
            out
        })
    });
    // Every stream is open and half answered before the reload.
    let deadline = Instant::now() + Duration::from_secs(30);
    while o.seen().len() < CONNS * STREAMS {
        assert!(
            Instant::now() < deadline,
            "only {} streams reached the origin",
            o.seen().len()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    master.reload_ok();
    // The new generation serves new connections meanwhile (the old one still streams).
    let fresh = std::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "--http2-prior-knowledge",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg(format!("http://{addr}/size/10"))
        .output();
    if let Ok(out) = fresh {
        assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    }
    o.gate.store(true, Ordering::SeqCst);
    let results = clients.join().unwrap();
    assert_eq!(results.len(), CONNS * STREAMS);
    for r in &results {
        assert_eq!(r, &Ok((200, want.clone())));
    }
    // The old generation drained and left.
    master.wait_single_generation(Duration::from_secs(30));
    // The [http2] limits are budgets in `show info`, with their limits.
    let info = master.ctl_ok(&["show", "info"]);
    for budget in [
        "h2_streams",
        "h2_pings",
        "h2_client_resets",
        "h2_server_resets",
        "h2_header_block",
    ] {
        assert!(info.contains(budget), "{budget} missing from show info:\n{info}");
    }
}
