//! Test support for health checks: an HTTP origin that can be stopped and restarted on the
//! same port and whose health answer the test changes at run time; an agent that answers a
//! line the test sets; a keep-alive client.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::ReservedPort;

/// How the origin answers `GET /health` (traffic to any other path gets `200 <name>`).
pub struct Behaviour {
    pub status: AtomicU16,
    pub body: Mutex<String>,
    /// Delay before answering a health request.
    pub delay_ms: AtomicU64,
    /// When each health request arrived.
    pub check_times: Mutex<Vec<Instant>>,
    /// Answer traffic (not health) with bytes that are not HTTP.
    pub garbage: AtomicBool,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            status: AtomicU16::new(200),
            body: Mutex::new("alive".into()),
            delay_ms: AtomicU64::new(0),
            check_times: Mutex::new(Vec::new()),
            garbage: AtomicBool::new(false),
        }
    }
}

/// An HTTP/1.1 origin named `name`, stoppable.
pub struct Origin {
    pub name: String,
    pub addr: SocketAddr,
    pub behaviour: Arc<Behaviour>,
    /// Health requests and traffic requests served.
    pub checks: Arc<AtomicUsize>,
    pub traffic: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<thread::JoinHandle<()>>,
    /// The port of an origin started on port 0, held while this lives, stopped too: no
    /// other test's listener takes it while it is down, so what the proxy's checks and
    /// connects meet there is a refusal or a restart of this origin.
    _port: Option<ReservedPort>,
}

impl Origin {
    pub fn start(name: &str) -> Origin {
        Origin::start_on(name, "127.0.0.1:0".parse().unwrap(), Arc::default())
    }

    /// On `addr` (a port 0 or the port of an origin stopped before, which still holds it).
    pub fn start_on(name: &str, addr: SocketAddr, behaviour: Arc<Behaviour>) -> Origin {
        let reserved = (addr.port() == 0).then(ReservedPort::new);
        let listener = bind_retrying(reserved.as_ref().map_or(addr, |r| r.addr));
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let (checks, traffic) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let accept = {
            let (stop, conns, name) = (stop.clone(), conns.clone(), name.to_string());
            let (b, c, t) = (behaviour.clone(), checks.clone(), traffic.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((s, _)) => {
                            s.set_nonblocking(false).unwrap();
                            conns.lock().unwrap().push(s.try_clone().unwrap());
                            let (b, c, t, name) = (b.clone(), c.clone(), t.clone(), name.clone());
                            thread::spawn(move || serve(s, &name, &b, &c, &t));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(2)),
                    }
                }
            })
        };
        Origin {
            name: name.to_string(),
            addr,
            behaviour,
            checks,
            traffic,
            stop,
            conns,
            accept: Some(accept),
            _port: reserved,
        }
    }

    /// Closes the listener and every connection: the server is gone (connects are refused).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            t.join().unwrap();
        }
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop();
    }
}

fn bind_retrying(addr: SocketAddr) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpListener::bind(addr) {
            Ok(l) => return l,
            Err(e) if Instant::now() > deadline => panic!("bind {addr}: {e}"),
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn serve(s: TcpStream, name: &str, b: &Behaviour, checks: &AtomicUsize, traffic: &AtomicUsize) {
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let mut close = false;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h.to_ascii_lowercase().starts_with("connection: close") {
                close = true;
            }
            if h == "\r\n" {
                break;
            }
        }
        let reply = if path == "/health" {
            checks.fetch_add(1, Ordering::SeqCst);
            b.check_times.lock().unwrap().push(Instant::now());
            thread::sleep(Duration::from_millis(b.delay_ms.load(Ordering::SeqCst)));
            let body = b.body.lock().unwrap().clone();
            let status = b.status.load(Ordering::SeqCst);
            format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n{body}", body.len())
        } else {
            traffic.fetch_add(1, Ordering::SeqCst);
            if b.garbage.load(Ordering::SeqCst) {
                "NOT HTTP AT ALL\r\n\r\n".to_string()
            } else {
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{name}", name.len())
            }
        };
        if w.write_all(reply.as_bytes()).is_err() || close {
            return;
        }
    }
}

/// An agent on its own port: each connection gets the current line, then a close.
pub struct Agent {
    pub addr: SocketAddr,
    pub line: Arc<Mutex<String>>,
}

pub fn agent(line: &str) -> Agent {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let line = Arc::new(Mutex::new(line.to_string()));
    let l = line.clone();
    thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            let text = format!("{}\n", l.lock().unwrap());
            let _ = s.write_all(text.as_bytes());
        }
    });
    Agent { addr, line }
}

/// A keep-alive HTTP client to the proxy: reconnects after a failed exchange.
pub struct Client {
    addr: SocketAddr,
    conn: Option<BufReader<TcpStream>>,
}

impl Client {
    pub fn new(addr: SocketAddr) -> Client {
        Client { addr, conn: None }
    }

    /// One GET /: `Ok(body)` for a 200, `Err(what)` otherwise.
    pub fn get(&mut self) -> Result<String, String> {
        if self.conn.is_none() {
            let s = TcpStream::connect(self.addr).map_err(|e| e.to_string())?;
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            self.conn = Some(BufReader::new(s));
        }
        let result = self.exchange();
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    fn exchange(&mut self) -> Result<String, String> {
        let r = self.conn.as_mut().unwrap();
        r.get_mut()
            .write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            .map_err(|e| e.to_string())?;
        let mut status = String::new();
        if r.read_line(&mut status).map_err(|e| e.to_string())? == 0 {
            return Err("closed".into());
        }
        let mut len = 0;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).map_err(|e| e.to_string())? == 0 {
                return Err("closed in head".into());
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if h == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).map_err(|e| e.to_string())?;
        let body = String::from_utf8_lossy(&body).into_owned();
        if status.contains(" 200 ") {
            Ok(body)
        } else {
            self.conn = None;
            Err(format!("{} {body}", status.trim()))
        }
    }
}

/// Polls `probe` until it returns `Some`, at most `limit`; panics with `what` otherwise.
pub fn wait_for<T>(limit: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}
