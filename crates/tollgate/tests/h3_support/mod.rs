//! What the HTTP/3 tests share: the aioquic client (`h3client.py`) and how to run it, the
//! test PKI, an HTTP/1.1 origin with sized downloads and body digests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::common;
use super::common::tls::{Ca, TempDir};

pub const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h3_support/h3client.py");

/// Whether aioquic is importable; under CI (which installs it) its absence fails the test.
pub fn have_aioquic() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import aioquic"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").is_err(),
            "aioquic missing under CI (.ci/run installs it)"
        );
        eprintln!("skipped: aioquic is not installed (python3 -m pip install aioquic)");
    }
    ok
}

/// The test's CA, a leaf for `localhost`, and their files.
pub struct Pki {
    pub dir: TempDir,
    pub ca: PathBuf,
    pub leaf: (PathBuf, PathBuf),
}

pub fn pki() -> Pki {
    let dir = TempDir::new();
    let ca = Ca::new("h3 test CA");
    let leaf = ca
        .leaf(&["localhost", "127.0.0.1"], "localhost", false)
        .write(&dir, "leaf");
    let ca_path = ca.write(&dir, "ca.pem");
    Pki { dir, ca: ca_path, leaf }
}

/// `/bytes/N` answers the origins of this test binary have begun.
pub static DOWNLOADS_STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// An HTTP/1.1 origin: `/bytes/N` streams N pattern bytes (`common::write_mib` blocks),
/// `/sha` answers the sha256 of the request body, anything else `hello h3`; each answer
/// says which request line it saw in `x-seen`.
pub fn origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                for nth in 1.. {
                    let Some(req) = common::http::read_request(&mut reader, 1, nth, Some(&mut writer)) else {
                        return;
                    };
                    let seen = format!("{} {} {}", req.method, req.target, req.version);
                    let early = req.header("early-data").unwrap_or("-").to_owned();
                    let ok = if let Some(n) = req.target.strip_prefix("/bytes/") {
                        DOWNLOADS_STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let mib: u64 = n.parse().unwrap();
                        let head = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nx-seen: {seen}\r\n\r\n",
                            mib << 20
                        );
                        writer.write_all(head.as_bytes()).is_ok() && {
                            let mut block = vec![0u8; 1 << 20];
                            common::write_mib(&mut writer, mib, &mut block).is_ok()
                        }
                    } else {
                        let body = if req.target == "/sha" {
                            hex(&Sha256::digest(&req.body))
                        } else {
                            "hello h3".to_owned()
                        };
                        let head = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nx-seen: {seen}\r\nx-early: {early}\r\n\r\n",
                            body.len()
                        );
                        writer.write_all(head.as_bytes()).is_ok() && writer.write_all(body.as_bytes()).is_ok()
                    };
                    if !ok {
                        return;
                    }
                }
            });
        }
    });
    addr
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The sha256 of `mib` MiB of `common::write_mib`'s pattern.
pub fn pattern_sha(mib: u64) -> String {
    let mut sink = std::io::sink();
    let mut block = vec![0u8; 1 << 20];
    hex(&common::write_mib(&mut sink, mib, &mut block).unwrap())
}

/// The client for `https://localhost:PORT{path}` at `quic`, trusting `ca`, with `args`.
pub fn client_command(ca: &std::path::Path, quic: SocketAddr, path: &str, args: &[&str]) -> Command {
    let url = format!("https://localhost:{}{path}", quic.port());
    let mut cmd = Command::new("python3");
    cmd.arg(CLIENT)
        .args(["--url", &url, "--connect", &quic.to_string(), "--ca"])
        .arg(ca)
        .args(args)
        .stderr(Stdio::inherit());
    cmd
}

/// The client, in a thread of its own (a download that runs while the test acts).
pub fn client_in_background(
    pki: &Pki,
    quic: SocketAddr,
    path: &str,
    args: &[&str],
) -> std::thread::JoinHandle<std::process::Output> {
    let mut cmd = client_command(&pki.ca, quic, path, args);
    std::thread::spawn(move || cmd.output().unwrap())
}

/// Runs the client; its JSON answer and whether it exited 0.
pub fn client(pki: &Pki, quic: SocketAddr, path: &str, args: &[&str]) -> (Value, bool) {
    let out = client_command(&pki.ca, quic, path, args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let json: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("client output {text:?}: {e}"));
    (json, out.status.success())
}

pub fn header<'v>(resp: &'v Value, name: &str) -> Option<&'v str> {
    resp["headers"]
        .as_array()?
        .iter()
        .find(|h| h[0].as_str() == Some(name))
        .and_then(|h| h[1].as_str())
}

/// A UDP port nobody uses now (a quic bind's port must be known for `Alt-Svc`).
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
