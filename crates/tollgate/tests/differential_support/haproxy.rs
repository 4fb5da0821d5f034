//! HAProxy as a child process: one `mode http` frontend per lane, each on its own unix socket
//! (no port to guess or race for), each with a backend of one server, the lane's origin.
//! Killed and reaped on drop.

use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use crate::master_support::TempDir;

/// `haproxy -v`'s first line, for the summary.
pub fn version(bin: &Path) -> String {
    Command::new(bin)
        .arg("-v")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(str::to_string))
        .unwrap_or_default()
}

pub struct Haproxy {
    child: Child,
    pub sockets: Vec<PathBuf>,
    pub dir: TempDir,
}

impl Haproxy {
    /// Starts HAProxy with frontend `i` forwarding to `origins[i]`; returns once every
    /// frontend socket accepts a connection.
    pub fn start(bin: &Path, origins: &[SocketAddr]) -> Haproxy {
        let dir = TempDir::new("haproxy");
        let sockets: Vec<PathBuf> = (0..origins.len()).map(|i| dir.0.join(format!("fe{i}.sock"))).collect();
        let cfg = dir.0.join("haproxy.cfg");
        std::fs::write(&cfg, config(&sockets, origins)).unwrap();
        let log = std::fs::File::create(dir.0.join("stderr")).unwrap();
        let child = Command::new(bin)
            .arg("-f")
            .arg(&cfg)
            .arg("-db")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut h = Haproxy { child, sockets, dir };
        h.wait_ready();
        h
    }

    fn wait_ready(&mut self) {
        // HAProxy announces nothing when it is ready; a connectable socket is the signal.
        let deadline = Instant::now() + Duration::from_secs(20);
        for s in self.sockets.clone() {
            while UnixStream::connect(&s).is_err() {
                if let Ok(Some(status)) = self.child.try_wait() {
                    panic!("haproxy exited ({status}): {}", self.stderr());
                }
                assert!(Instant::now() < deadline, "haproxy not ready: {}", self.stderr());
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("stderr")).unwrap_or_default()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Stock parsing (no `accept-invalid-*`, no `option http-buffer-request`) but for one policy
/// that is not about framing: `h1-accept-payload-with-any-method` (HAProxy otherwise answers
/// 413 to an HTTP/1.0 GET, HEAD or DELETE with a body; tollgate forwards it, framed as any
/// other; see docs/http-conformance.md). Short backstop timeouts (the test closes its
/// clients itself); no server connection reuse across clients.
fn config(sockets: &[PathBuf], origins: &[SocketAddr]) -> String {
    let mut s = String::from(
        "global\n    nbthread 1\n    maxconn 2000\n    h1-accept-payload-with-any-method\n\ndefaults\n    mode http\n    timeout connect 2s\n    timeout client 10s\n    timeout server 10s\n    timeout http-request 5s\n    timeout http-keep-alive 5s\n    http-reuse never\n\n",
    );
    for (i, (sock, origin)) in sockets.iter().zip(origins).enumerate() {
        s.push_str(&format!(
            "frontend fe{i}\n    bind unix@{}\n    default_backend be{i}\n\nbackend be{i}\n    server o {origin}\n\n",
            sock.display()
        ));
    }
    s
}
