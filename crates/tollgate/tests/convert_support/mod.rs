//! Support for the `tollgate convert` differential test: the `#@` script each corpus config
//! carries, a raw HTTP/1.1 and TCP client, and the two proxies as child processes (each in a
//! process group of its own, killed as a group on drop).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

pub mod origin;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use origin::find;

/// One request of a script.
#[derive(Clone, Debug)]
pub struct Req {
    /// The environment variable naming the frontend's address (`FE_HTTP`).
    pub fe: String,
    pub method: String,
    pub target: String,
    /// Field lines as sent; `Host: test.example` unless the script gives a Host.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The client's source address (127.0.0.1 unless `from=`).
    pub from: Option<IpAddr>,
}

impl Req {
    pub fn bytes(&self) -> Vec<u8> {
        let mut s = format!("{} {} HTTP/1.1\r\n", self.method, self.target);
        if !self.headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            s.push_str("Host: test.example\r\n");
        }
        for (k, v) in &self.headers {
            s.push_str(&format!("{k}: {v}\r\n"));
        }
        if !self.body.is_empty() {
            s.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        s.push_str("\r\n");
        let mut b = s.into_bytes();
        b.extend_from_slice(&self.body);
        b
    }

    /// One line for reports: `GET /x [Host: a] from 127.0.0.2`.
    pub fn describe(&self) -> String {
        let mut s = format!("{} {} {}", self.fe, self.method, self.target);
        for (k, v) in &self.headers {
            s.push_str(&format!(" [{k}: {v}]"));
        }
        if !self.body.is_empty() {
            s.push_str(&format!(" body={:?}", String::from_utf8_lossy(&self.body)));
        }
        if let Some(f) = self.from {
            s.push_str(&format!(" from {f}"));
        }
        s
    }
}

#[derive(Clone, Debug)]
pub enum Step {
    /// One request; the answers and what the origins received are compared.
    Req(Req),
    /// `n` requests; the share of them each origin took is compared, within `tol`
    /// percentage points (0: the counts must be equal).
    Spread { req: Req, n: usize, tol: f64 },
    /// `n` requests that must all go to one origin on each side (not necessarily the same).
    Single { req: Req, n: usize },
    /// Kills `origin` in both sets, then sends `req` until each proxy answers 10 times in a
    /// row from another origin (bounded).
    Kill { req: Req, origin: String },
    /// `n` requests at once (one after the other, as fast as they are answered); the
    /// statuses are compared. With `window` (the rate's period, ms), the burst starts where
    /// it ends within the same period of tollgate's wall-clock-cut window: a burst across a
    /// period boundary may admit one more (the previous period is weighted, rounded down).
    Burst { req: Req, n: usize, window: Option<u64> },
    /// Lets `ms` milliseconds pass (a rate window: time itself is what is waited for).
    Wait { ms: u64 },
    /// TCP: connect (from `from`), send `data`, read it back.
    Echo {
        fe: String,
        data: Vec<u8>,
        from: Option<IpAddr>,
    },
}

/// What a corpus config's `#@` lines declare.
#[derive(Debug, Default)]
pub struct Script {
    pub origins: Vec<String>,
    pub echo: Vec<String>,
    pub frontends: Vec<String>,
    pub steps: Vec<Step>,
}

impl Script {
    /// Reads the `#@` lines of a config (HAProxy and the converter see comments):
    ///
    /// ```text
    /// #@ origins a1 b1              HTTP origins, named by ${A1}, ${B1}
    /// #@ echo e1                    TCP echo origins, ${E1}
    /// #@ frontends FE_HTTP          the frontends' addresses, ${FE_HTTP}
    /// #@ req FE METHOD TARGET [body=X] [from=IP] ; Name: value ; ...
    /// #@ spread FE METHOD TARGET n=N tol=T ; ...
    /// #@ single FE METHOD TARGET n=N
    /// #@ kill FE METHOD TARGET origin=NAME
    /// #@ burst FE METHOD TARGET n=N [window=MS]
    /// #@ echo FE data=BYTES [from=IP]
    /// #@ wait ms=N
    /// ```
    pub fn parse(text: &str) -> Result<Script, String> {
        let mut s = Script::default();
        for (i, line) in text.lines().enumerate() {
            let Some(rest) = line.strip_prefix("#@") else { continue };
            let err = |m: &str| format!("line {}: {m}: {line}", i + 1);
            let mut segments = rest.split(" ; ");
            let first: Vec<&str> = segments.next().unwrap_or("").split_whitespace().collect();
            let headers: Vec<(String, String)> = segments
                .map(|h| {
                    h.split_once(':')
                        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                        .ok_or_else(|| err("a header segment needs `Name: value`"))
                })
                .collect::<Result<_, _>>()?;
            let Some((&kind, args)) = first.split_first() else {
                return Err(err("empty"));
            };
            let is_opt = |a: &&str| {
                a.split_once('=')
                    .is_some_and(|(k, _)| ["body", "from", "n", "tol", "origin", "data", "ms", "window"].contains(&k))
            };
            let (opts, words): (Vec<&str>, Vec<&str>) = args.iter().copied().partition(is_opt);
            let opt = |name: &str| {
                opts.iter()
                    .find_map(|o| o.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
            };
            let from = match opt("from") {
                Some(ip) => Some(ip.parse::<IpAddr>().map_err(|e| err(&e.to_string()))?),
                None => None,
            };
            let num = |name: &str| -> Result<usize, String> {
                opt(name)
                    .ok_or_else(|| err(&format!("{name}= is required")))?
                    .parse()
                    .map_err(|_| err(&format!("{name}= is not a number")))
            };
            let req = || -> Result<Req, String> {
                let [fe, method, target] = words[..] else {
                    return Err(err("expected FE METHOD TARGET"));
                };
                Ok(Req {
                    fe: fe.to_string(),
                    method: method.to_string(),
                    target: target.to_string(),
                    headers: headers.clone(),
                    body: opt("body").unwrap_or("").as_bytes().to_vec(),
                    from,
                })
            };
            let names = || words.iter().map(|w| w.to_string()).collect::<Vec<_>>();
            match kind {
                "origins" => s.origins.extend(names()),
                "frontends" => s.frontends.extend(names()),
                "echo" if opt("data").is_none() => s.echo.extend(names()),
                "echo" => s.steps.push(Step::Echo {
                    fe: words.first().ok_or_else(|| err("echo FE data=..."))?.to_string(),
                    data: opt("data").unwrap_or("").as_bytes().to_vec(),
                    from,
                }),
                "req" => s.steps.push(Step::Req(req()?)),
                "spread" => s.steps.push(Step::Spread {
                    req: req()?,
                    n: num("n")?,
                    tol: opt("tol").unwrap_or("0").parse().map_err(|_| err("tol="))?,
                }),
                "single" => s.steps.push(Step::Single {
                    req: req()?,
                    n: num("n")?,
                }),
                "kill" => s.steps.push(Step::Kill {
                    req: req()?,
                    origin: opt("origin").ok_or_else(|| err("origin= is required"))?.to_string(),
                }),
                "wait" => s.steps.push(Step::Wait { ms: num("ms")? as u64 }),
                "burst" => s.steps.push(Step::Burst {
                    req: req()?,
                    n: num("n")?,
                    window: opt("window").map(|_| num("window")).transpose()?.map(|w| w as u64),
                }),
                other => return Err(err(&format!("unknown directive {other:?}"))),
            }
        }
        if s.frontends.is_empty() {
            return Err("no `#@ frontends` line".into());
        }
        Ok(s)
    }
}

/// A response as the client read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// Field lines in order, names as sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

const IO_LIMIT: Duration = Duration::from_secs(5);

/// A new connection to `addr` from `from` (the kernel's choice of port).
pub fn connect(addr: SocketAddr, from: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let s = match from {
        None => TcpStream::connect_timeout(&addr, IO_LIMIT)?,
        Some(ip) => {
            use socket2::{Domain, Socket, Type};
            let sock = Socket::new(Domain::IPV4, Type::STREAM, None)?;
            sock.bind(&SocketAddr::new(ip, 0).into())?;
            sock.connect_timeout(&addr.into(), IO_LIMIT)?;
            sock.into()
        }
    };
    s.set_read_timeout(Some(IO_LIMIT))?;
    s.set_write_timeout(Some(IO_LIMIT))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Sends `req` on a new connection and reads one response (framed by Content-Length,
/// chunked coding, or the close).
pub fn send(addr: SocketAddr, req: &Req) -> Result<Answer, String> {
    let mut s = connect(addr, req.from).map_err(|e| format!("connect: {e}"))?;
    s.write_all(&req.bytes()).map_err(|e| format!("write: {e}"))?;
    let mut buf = Vec::new();
    let end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 64 * 1024 {
            return Err("response head over 64 KiB".into());
        }
        match read_some(&mut s, &mut buf) {
            Ok(true) => {}
            Ok(false) if buf.is_empty() => return Err("closed without a response".into()),
            Ok(false) => return Err(format!("closed in the head: {:?}", String::from_utf8_lossy(&buf))),
            Err(e) => return Err(format!("read: {e} after {:?}", String::from_utf8_lossy(&buf))),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.drain(..end + 4);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect();
    let mut answer = Answer {
        status,
        headers,
        body: Vec::new(),
    };
    if req.method == "HEAD" || status == 204 || status == 304 || status < 200 {
        return Ok(answer);
    }
    let chunked = answer
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    if chunked {
        loop {
            let line_end = loop {
                if let Some(i) = find(&buf, b"\r\n") {
                    break i;
                }
                if !read_some(&mut s, &mut buf).map_err(|e| e.to_string())? {
                    return Err("closed in a chunk size".into());
                }
            };
            let text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
            let size = usize::from_str_radix(text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| format!("bad chunk size {text:?}"))?;
            buf.drain(..line_end + 2);
            if size == 0 {
                return Ok(answer);
            }
            while buf.len() < size + 2 {
                if !read_some(&mut s, &mut buf).map_err(|e| e.to_string())? {
                    return Err("closed in a chunk".into());
                }
            }
            answer.body.extend_from_slice(&buf[..size]);
            buf.drain(..size + 2);
        }
    } else if let Some(len) = answer.header("content-length") {
        let len: usize = len.parse().map_err(|_| format!("bad content-length {len:?}"))?;
        while buf.len() < len {
            if !read_some(&mut s, &mut buf).map_err(|e| e.to_string())? {
                return Err(format!("closed after {} of {len} body bytes", buf.len()));
            }
        }
        buf.truncate(len);
        answer.body = buf;
    } else {
        while read_some(&mut s, &mut buf).map_err(|e| e.to_string())? {}
        answer.body = buf;
    }
    Ok(answer)
}

fn read_some(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut chunk = [0u8; 16 * 1024];
    let n = s.read(&mut chunk)?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n > 0)
}

/// What a TCP client got back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Echo {
    /// Every byte came back.
    Echoed(Vec<u8>),
    /// The connection was refused, reset or closed before any byte came back.
    Refused(String),
    /// Some bytes, then the close.
    Partial(Vec<u8>),
}

pub fn echo(addr: SocketAddr, from: Option<IpAddr>, data: &[u8]) -> Echo {
    let mut s = match connect(addr, from) {
        Ok(s) => s,
        Err(e) => return Echo::Refused(format!("connect: {e}")),
    };
    if let Err(e) = s.write_all(data) {
        return Echo::Refused(format!("write: {e}"));
    }
    let mut got = Vec::new();
    while got.len() < data.len() {
        match read_some(&mut s, &mut got) {
            Ok(true) => {}
            Ok(false) if got.is_empty() => return Echo::Refused("closed".into()),
            Err(e) if got.is_empty() => return Echo::Refused(format!("read: {e}")),
            _ => return Echo::Partial(got),
        }
    }
    Echo::Echoed(got)
}

/// A child process in a process group of its own, its stdout and stderr in `log`; the
/// whole group is killed (SIGKILL) and the child reaped on drop.
pub struct Proc {
    pub name: String,
    child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(name: &str, cmd: &mut Command, log: &Path) -> Result<Proc, String> {
        let out = std::fs::File::create(log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("spawn {name}: {e}"))?;
        Ok(Proc {
            name: name.to_string(),
            child,
            log: log.to_path_buf(),
        })
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until every address accepts a connection; fails with the log if the
    /// process exits first. A listening socket is the only signal HAProxy gives.
    pub fn wait_listening(&mut self, addrs: &[SocketAddr], limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        for a in addrs {
            loop {
                if TcpStream::connect_timeout(a, Duration::from_millis(200)).is_ok() {
                    break;
                }
                if let Ok(Some(status)) = self.child.try_wait() {
                    return Err(format!("{} exited ({status}):\n{}", self.name, self.log_text()));
                }
                if Instant::now() >= deadline {
                    return Err(format!("{} not listening on {a}:\n{}", self.name, self.log_text()));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
