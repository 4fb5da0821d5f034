//! A real redis-server (the distribution's package) as a child process on a loopback port,
//! without persistence; killed and reaped on drop. Shared by tests/shared_limits.rs and the
//! sync loop's unit tests (`sharing::tests`, through `#[path]`).
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `redis-server` on PATH or where Debian puts it; `None` prints why the caller skips, and
/// panics under `CI=true` (.ci/run installs it).
pub fn find_or_skip() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/local/bin"].map(PathBuf::from))
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "redis-server not installed (.ci/run installs it); CI may not skip this test"
        );
        println!("skipped: redis-server not installed");
    }
    found
}

pub struct RedisServer {
    bin: PathBuf,
    child: Option<Child>,
    pub port: u16,
    /// The port, bound (SO_REUSEADDR) but never listening, for as long as this lives:
    /// redis-server (which sets SO_REUSEADDR too) binds beside it, and while it is down
    /// (`kill`, `restart`) connects are refused and no bind to port 0 elsewhere (another
    /// test's listener, which tollgate's client would then reach) is handed the port.
    _reserved: socket2::Socket,
}

impl RedisServer {
    /// Starts one on a reserved loopback port; returns once it answers PING.
    pub fn start(bin: &std::path::Path) -> RedisServer {
        let mut last = String::new();
        for _ in 0..5 {
            let (reserved, port) = reserve_port();
            let mut r = RedisServer {
                bin: bin.to_path_buf(),
                child: None,
                port,
                _reserved: reserved,
            };
            match r.spawn() {
                Ok(()) => return r,
                Err(e) => last = e,
            }
        }
        panic!("redis-server did not start: {last}");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let child = Command::new(&self.bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--dir", &std::env::temp_dir().display().to_string()])
            .args(["--loglevel", "warning"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        self.child = Some(child);
        // Ready when it answers on its port (it announces nothing else we could wait on).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if ping(self.port) {
                return Ok(());
            }
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                self.child = None;
                return Err(format!("redis-server exited: {status}"));
            }
            if Instant::now() > deadline {
                return Err("redis-server did not answer within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, reaped: the port refuses connections when this returns.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP (`true`) or SIGCONT: a Redis that accepts connections and answers nothing.
    pub fn pause(&self, paused: bool) {
        let Some(c) = &self.child else { return };
        let pid = rustix::process::Pid::from_raw(c.id() as i32).unwrap();
        let signal = if paused {
            rustix::process::Signal::STOP
        } else {
            rustix::process::Signal::CONT
        };
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// A new server on the same port (empty: nothing persisted).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Err(e) = self.spawn() {
            assert!(Instant::now() < deadline, "redis-server did not come back: {e}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// One command's raw reply (inline protocol), for checks from the test.
    pub fn command(&self, line: &str) -> String {
        let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(format!("{line}\r\n").as_bytes()).unwrap();
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

fn reserve_port() -> (socket2::Socket, u16) {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.set_reuse_address(true).unwrap();
    socket
        .bind(&std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
        .unwrap();
    let port = socket.local_addr().unwrap().as_socket().unwrap().port();
    (socket, port)
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG"))
}
