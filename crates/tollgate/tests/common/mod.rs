//! Shared test support: an in-process proxy on port 0 and small blocking origins.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tollgate::runtime::{self, Running};

/// A proxy running in this process; hard-stopped and joined on drop.
pub struct Proxy {
    pub running: Option<Running>,
    pub addr: SocketAddr,
}

impl Proxy {
    /// Starts the proxy on config text; the first frontend's bound address is `addr`.
    pub fn start(toml: &str) -> Proxy {
        let config = tollgate::config::parse(toml, "test.toml").unwrap_or_else(|e| panic!("config: {e}\n{toml}"));
        let sockets = tollgate::listener::bind_all(&config).expect("bind");
        // `runtime::start` binds no UDP: a `[frontend.quic]` config's sockets come along.
        let options = runtime::StartOptions {
            udp: tollgate::listener::udp::bind_quic(&config).expect("bind quic"),
            ..Default::default()
        };
        let first = config.frontends[0].name.clone();
        let running = runtime::start_with(Arc::new(config), sockets, options).expect("start");
        let addr = running.local_addr(&first).expect("bound address");
        Proxy {
            running: Some(running),
            addr,
        }
    }

    pub fn running(&self) -> &Running {
        self.running.as_ref().expect("running")
    }

    /// Waits (bounded, 20 s) until `done` holds for the proxy's counters; fails saying `what`.
    pub fn wait_for(&self, what: &str, done: impl Fn(&tollgate::stats::Snapshot) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let stats = self.running().stats();
            if done(&stats) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {stats:?}");
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits (bounded) until no client connection is open in the proxy.
    pub fn wait_idle(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.running().stats().sessions_active != 0 {
            assert!(
                Instant::now() < deadline,
                "sessions still active: {:?}",
                self.running().stats()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.hard_stop();
            let _ = r.join();
        }
    }
}

/// A loopback port held for a port number another process is told before it listens there
/// (a CA, a responder), or for a server that must refuse connections. The socket is bound
/// (with SO_REUSEADDR) but never listens: connecting to it is refused, no IPv4 bind to
/// port 0 by any process is handed this port while it is held, and a program that sets
/// SO_REUSEADDR itself (std's, Go's, OpenSSL's and Redis's listeners do) can still bind and
/// listen on it. Binding port 0 and closing at once would leave the number free for any
/// other test's listener to take meanwhile, whose clients would then reach the wrong server.
pub struct ReservedPort {
    pub addr: SocketAddr,
    _socket: socket2::Socket,
}

impl ReservedPort {
    pub fn new() -> ReservedPort {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        socket.set_reuse_address(true).expect("SO_REUSEADDR");
        socket
            .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .expect("bind a port to reserve");
        let addr = socket.local_addr().expect("addr").as_socket().expect("an IP address");
        ReservedPort { addr, _socket: socket }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

/// A blocking origin: one thread per connection running `handler`. Counts connections
/// open at once (`current`, `peak`) and in total.
pub struct Origin {
    pub addr: SocketAddr,
    pub current: Arc<AtomicUsize>,
    pub peak: Arc<AtomicUsize>,
    pub total: Arc<AtomicUsize>,
}

pub fn origin<F>(handler: F) -> Origin
where
    F: Fn(&mut TcpStream) + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind origin");
    let addr = listener.local_addr().expect("addr");
    let handler = Arc::new(handler);
    let current = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let total = Arc::new(AtomicUsize::new(0));
    let (c, p, t) = (current.clone(), peak.clone(), total.clone());
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let now = c.fetch_add(1, Ordering::SeqCst) + 1;
            p.fetch_max(now, Ordering::SeqCst);
            t.fetch_add(1, Ordering::SeqCst);
            let (handler, c) = (handler.clone(), c.clone());
            thread::spawn(move || {
                handler(&mut stream);
                // Counted out before the close the proxy will see, so `peak` never
                // overlaps a connection the proxy already considers finished.
                c.fetch_sub(1, Ordering::SeqCst);
                drop(stream);
            });
        }
    });
    Origin {
        addr,
        current,
        peak,
        total,
    }
}

/// Echoes everything until EOF, then closes.
pub fn echo(s: &mut TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

/// A minimal config with one tcp frontend on port 0 and one backend with `servers`
/// (`(name, addr, weight)`), plus extra TOML for `[global]`/`[timeouts]`.
pub fn tcp_config(global: &str, servers: &[(&str, SocketAddr, u32)]) -> String {
    let mut s = format!(
        "{global}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\n[[backend]]\nname = \"be\"\n"
    );
    for (name, addr, weight) in servers {
        s.push_str(&format!(
            "[[backend.server]]\nname = \"{name}\"\naddress = \"{addr}\"\nweight = {weight}\n"
        ));
    }
    s
}

/// Deterministic pseudo-random bytes (xorshift), so payloads are not periodic.
pub fn payload_block(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Writes `blocks` MiB: the 1 MiB block with its first 8 bytes replaced by the block index.
/// Returns the sha256 of what was written.
pub fn write_mib(w: &mut impl Write, blocks: u64, block: &mut [u8]) -> std::io::Result<[u8; 32]> {
    let mut h = Sha256::new();
    for i in 0..blocks {
        block[..8].copy_from_slice(&i.to_le_bytes());
        h.update(&*block);
        w.write_all(block)?;
    }
    Ok(h.finalize().into())
}

/// Reads to EOF; returns the byte count and sha256.
pub fn read_all_hashed(r: &mut impl Read) -> std::io::Result<(u64, [u8; 32])> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok((total, h.finalize().into()));
        }
        total += n as u64;
        h.update(&buf[..n]);
    }
}

pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}
pub mod h2_origin;
pub mod http;
pub mod tls;

/// Whether `tool` runs (`tool --version`); without it a test prints `skipped:` and returns,
/// except under CI, where `.ci/run` installs it and its absence fails the test.
pub fn have(tool: &str) -> bool {
    let there = std::process::Command::new(tool).arg("--version").output().is_ok();
    if !there {
        assert!(std::env::var_os("CI").is_none(), "{tool} is missing under CI");
        println!("skipped: {tool} is not installed");
    }
    there
}

/// Waits (bounded) until `path` holds at least `n` lines; returns them.
pub fn wait_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "{} lines of {n} in {}:\n{text}",
            lines.len(),
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `haproxy` binary for the differential tests: `TOLLGATE_DIFF_HAPROXY` if set (another
/// build to compare with), else on PATH, or where Debian puts it (not on a non-root PATH).
/// When there is none: `None` after printing `skipped:`, and a failure under `CI=true`
/// (`.ci/run` installs it).
pub fn haproxy_or_skip() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let found = match std::env::var_os("TOLLGATE_DIFF_HAPROXY") {
        Some(p) => Some(PathBuf::from(p)).filter(|p| p.is_file()),
        None => {
            let path = std::env::var_os("PATH").unwrap_or_default();
            std::env::split_paths(&path)
                .chain(["/usr/sbin", "/usr/local/sbin"].map(PathBuf::from))
                .map(|d| d.join("haproxy"))
                .find(|p| p.is_file())
        }
    };
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "haproxy not installed (.ci/run installs it); CI may not skip this test"
        );
        println!("skipped: haproxy not installed");
    }
    found
}
