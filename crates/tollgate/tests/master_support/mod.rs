//! Test support for the master-worker tests: the real binary as a master process, its log
//! collected line by line, its control socket in a temp dir, its listening address taken from
//! the `listening ... addr=` log line (the config binds port 0).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// What `tollgate check --config PATH` said: its exit code, stdout and stderr.
pub fn check(path: &Path) -> (Option<i32>, String, String) {
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(path)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A temp directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        TempDir::under(&std::env::temp_dir(), tag)
    }

    pub fn under(base: &Path, tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let d = base.join(format!("tg-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

type Log = Arc<(Mutex<Vec<String>>, Condvar)>;

pub struct Master {
    pub child: Child,
    pub dir: TempDir,
    pub config: PathBuf,
    pub socket: PathBuf,
    /// The first frontend's address.
    pub addr: SocketAddr,
    log: Log,
    exited: Option<ExitStatus>,
}

/// `[global]` with the control socket in `dir`, two workers and `extra` lines.
/// The address in a `listening ... addr=HOST:PORT` log line.
pub fn logged_addr(line: &str) -> SocketAddr {
    let addr = line
        .split("addr=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next());
    addr.and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no addr= in {line:?}"))
}

pub fn global(dir: &Path, extra: &str) -> String {
    format!(
        "[global]\nworkers = 2\ncontrol_socket = \"{}\"\n{extra}\n",
        dir.join("ctl.sock").display()
    )
}

impl Master {
    /// Starts `tollgate run` on `config_text` (use `global()` for its `[global]` table).
    pub fn start(dir: TempDir, config_text: &str, env: &[(&str, &str)]) -> Master {
        Master::start_bin(Path::new(BIN), dir, config_text, env)
    }

    /// `start` running the master from `bin`.
    pub fn start_bin(bin: &Path, dir: TempDir, config_text: &str, env: &[(&str, &str)]) -> Master {
        let cwd = dir.0.clone();
        Master::start_in(bin, &cwd, dir, config_text, env)
    }

    /// `start_bin` with the master's working directory `cwd` (the config is still in `dir`).
    pub fn start_in(bin: &Path, cwd: &Path, dir: TempDir, config_text: &str, env: &[(&str, &str)]) -> Master {
        let config = dir.0.join("tollgate.toml");
        std::fs::write(&config, config_text).unwrap();
        let mut cmd = Command::new(bin);
        cmd.args(["run", "--config"])
            .arg(&config)
            .current_dir(cwd)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn tollgate");
        let log: Log = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("[tollgate] {line}");
                sink.0.lock().unwrap().push(line);
                sink.1.notify_all();
            }
        });
        let mut m = Master {
            child,
            socket: dir.0.join("ctl.sock"),
            dir,
            config,
            addr: "0.0.0.0:0".parse().unwrap(),
            log,
            exited: None,
        };
        let line = m
            .wait_log(
                |l| l.contains("listening") && l.contains("addr="),
                Duration::from_secs(20),
            )
            .expect("a `listening ... addr=` line");
        m.addr = logged_addr(&line);
        m.wait_log(|l| l.contains("worker serving"), Duration::from_secs(20))
            .expect("first worker serving");
        m
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Waits (bounded) for a log line matching `pred`, counting lines already seen.
    pub fn wait_log(&self, pred: impl Fn(&str) -> bool, limit: Duration) -> Option<String> {
        self.wait_log_from(0, pred, limit).map(|(_, l)| l)
    }

    /// Like `wait_log`, looking only at lines from index `from`; returns (index, line).
    pub fn wait_log_from(&self, from: usize, pred: impl Fn(&str) -> bool, limit: Duration) -> Option<(usize, String)> {
        let deadline = Instant::now() + limit;
        let (lock, cond) = &*self.log;
        let mut lines = lock.lock().unwrap();
        loop {
            if let Some((i, l)) = lines.iter().enumerate().skip(from).find(|(_, l)| pred(l)) {
                return Some((i, l.clone()));
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            lines = cond.wait_timeout(lines, deadline - now).unwrap().0;
        }
    }

    pub fn log_len(&self) -> usize {
        self.log.0.lock().unwrap().len()
    }

    pub fn log_count(&self, pred: impl Fn(&str) -> bool) -> usize {
        self.log.0.lock().unwrap().iter().filter(|l| pred(l)).count()
    }

    pub fn write_config(&self, text: &str) {
        // Write then rename, as an operator's tooling would: the master never reads half a file.
        let tmp = self.dir.0.join("tollgate.toml.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.config).unwrap();
    }

    /// `tollgate reload`: (exit code, stdout, stderr).
    pub fn reload(&self) -> (i32, String, String) {
        self.control("reload")
    }

    pub fn control(&self, command: &str) -> (i32, String, String) {
        let out = Command::new(BIN)
            .args([command, "--socket"])
            .arg(&self.socket)
            .output()
            .expect("run tollgate reload");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `tollgate ctl --socket SOCKET ARGS…`: (exit code, stdout, stderr).
    pub fn ctl(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(BIN)
            .args(["ctl", "--socket"])
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tollgate ctl");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `ctl` that must succeed; its stdout.
    pub fn ctl_ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.ctl(args);
        assert_eq!(code, 0, "ctl {args:?} failed: {out} {err}");
        out
    }

    /// Reloads and asserts it succeeded.
    pub fn reload_ok(&self) -> String {
        let (code, out, err) = self.reload();
        assert_eq!(code, 0, "reload failed: {out} {err}");
        out
    }

    /// Live generations: (generation, pid, state).
    pub fn generations(&self) -> Vec<(u64, i32, String)> {
        let (code, out, err) = self.control("status");
        assert_eq!(code, 0, "status: {err}");
        out.lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w.first() == Some(&"generation")).then(|| (w[1].parse().unwrap(), w[3].parse().unwrap(), w[4].into()))
            })
            .collect()
    }

    /// Waits (bounded) until exactly one generation is alive; returns it.
    pub fn wait_single_generation(&self, limit: Duration) -> (u64, i32, String) {
        let deadline = Instant::now() + limit;
        loop {
            let gens = self.generations();
            if gens.len() == 1 && gens[0].2 == "serving" {
                return gens[0].clone();
            }
            assert!(Instant::now() < deadline, "generations did not settle: {gens:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, pid: i32, sig: rustix::process::Signal) {
        rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), sig).unwrap();
    }

    /// Waits (bounded) for the master to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(s) = self.child.try_wait().unwrap() {
                self.exited = Some(s);
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// The master's open descriptors and resident memory (KiB).
    pub fn fds_and_rss(&self) -> (usize, u64) {
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.pid())).unwrap().count();
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let rss = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        (fds, rss)
    }
}

impl Drop for Master {
    fn drop(&mut self) {
        if self.exited.is_none() && self.child.try_wait().ok().flatten().is_none() {
            // SIGINT: the master kills its workers and exits at once.
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(self.pid()).unwrap(),
                rustix::process::Signal::INT,
            );
            if self.wait_exit(Duration::from_secs(5)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// One echo exchange on a new connection: write `msg`, read it back.
pub fn exchange(addr: SocketAddr, msg: &[u8]) -> std::io::Result<()> {
    let mut c = TcpStream::connect(addr)?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    c.write_all(msg)?;
    let mut back = vec![0u8; msg.len()];
    c.read_exact(&mut back)?;
    if back != msg {
        return Err(std::io::Error::other("echo mismatch"));
    }
    Ok(())
}

/// Connects and reads until EOF (for origins that answer on connect).
pub fn read_greeting(addr: SocketAddr) -> std::io::Result<String> {
    let mut c = TcpStream::connect(addr)?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut s = String::new();
    c.read_to_string(&mut s)?;
    Ok(s)
}
