//! Recording origins: real TCP servers on 127.0.0.1 ports of their own.
//!
//! An HTTP origin answers every request `200` with `X-Origin: NAME`, `X-Powered-By: origin`
//! and a body naming itself, the method and the target (HTTP/1.1 keep-alive), and records
//! each request it reads (method, target, header fields in order, decoded body) in its set's
//! shared list, in arrival order — except its health checks (`/healthz`), which it answers
//! `200 ok` until the test kills it. A killed origin closes its port (new connections are
//! refused) and every connection it has open, as a stopped server would.
//!
//! An echo origin (TCP mode) sends back every byte it reads.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// One request as an origin read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub origin: String,
    pub method: String,
    pub target: String,
    pub version: String,
    /// Field lines in the order received, names as sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

struct HttpOrigin {
    name: String,
    addr: SocketAddr,
    killed: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

struct EchoOrigin {
    name: String,
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    /// The bytes of each connection.
    received: Arc<Mutex<Vec<Vec<u8>>>>,
}

/// The origins one proxy forwards to.
pub struct OriginSet {
    http: Vec<HttpOrigin>,
    echo: Vec<EchoOrigin>,
    records: Arc<Mutex<Vec<Record>>>,
}

impl OriginSet {
    pub fn start(http: &[String], echo: &[String]) -> OriginSet {
        let records = Arc::new(Mutex::new(Vec::new()));
        OriginSet {
            http: http.iter().map(|n| HttpOrigin::start(n, records.clone())).collect(),
            echo: echo.iter().map(|n| EchoOrigin::start(n)).collect(),
            records,
        }
    }

    /// `NAME=127.0.0.1:PORT` for each origin, the name uppercased (`s1` is `${S1}`).
    pub fn env(&self) -> Vec<(String, String)> {
        let http = self.http.iter().map(|o| (o.name.to_uppercase(), o.addr.to_string()));
        let echo = self.echo.iter().map(|o| (o.name.to_uppercase(), o.addr.to_string()));
        http.chain(echo).collect()
    }

    pub fn records_len(&self) -> usize {
        self.records.lock().unwrap().len()
    }

    /// The requests recorded from index `from` on.
    pub fn records_since(&self, from: usize) -> Vec<Record> {
        self.records.lock().unwrap()[from..].to_vec()
    }

    /// Connections the echo origins accepted.
    pub fn echo_connections(&self) -> usize {
        self.echo.iter().map(|e| e.connections.load(Ordering::SeqCst)).sum()
    }

    /// The echo origins that received `data` on one connection (a readiness probe's
    /// connection, which sends nothing, is no one's).
    pub fn echoed_by(&self, data: &[u8]) -> Vec<String> {
        self.echo
            .iter()
            .filter(|e| e.received.lock().unwrap().iter().any(|r| find(r, data).is_some()))
            .map(|e| e.name.clone())
            .collect()
    }

    /// Stops origin `name`: its port refuses connections from now on, its open connections
    /// are shut down, its health checks fail.
    pub fn kill(&self, name: &str) {
        let o = self
            .http
            .iter()
            .find(|o| o.name == name)
            .unwrap_or_else(|| panic!("no origin {name}"));
        o.killed.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which sees the flag and drops the listener.
        let _ = TcpStream::connect_timeout(&o.addr, Duration::from_secs(1));
        for c in o.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl HttpOrigin {
    fn start(name: &str, records: Arc<Mutex<Vec<Record>>>) -> HttpOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind origin");
        let addr = listener.local_addr().unwrap();
        let killed = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::new(Mutex::new(Vec::new()));
        let (k, c, n) = (killed.clone(), conns.clone(), name.to_string());
        thread::spawn(move || {
            for stream in listener.incoming() {
                if k.load(Ordering::SeqCst) {
                    break; // drops the listener: the port refuses connections
                }
                let Ok(stream) = stream else { continue };
                if let Ok(clone) = stream.try_clone() {
                    c.lock().unwrap().push(clone);
                }
                let (k, n, r) = (k.clone(), n.clone(), records.clone());
                thread::spawn(move || serve(stream, &n, &k, &r));
            }
        });
        HttpOrigin {
            name: name.to_string(),
            addr,
            killed,
            conns,
        }
    }
}

fn serve(mut s: TcpStream, name: &str, killed: &AtomicBool, records: &Mutex<Vec<Record>>) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    loop {
        let Some(req) = read_request(&mut s, &mut buf) else {
            return;
        };
        if killed.load(Ordering::SeqCst) {
            return;
        }
        let close = req.version == "HTTP/1.0"
            || req
                .headers
                .iter()
                .any(|(k, v)| k.eq_ignore_ascii_case("connection") && v.to_ascii_lowercase().contains("close"));
        let path = req.target.split('?').next().unwrap_or("");
        let (status, body, extra) = if path == "/healthz" {
            if killed.load(Ordering::SeqCst) {
                ("503 Service Unavailable", b"down\n".to_vec(), String::new())
            } else {
                ("200 OK", b"ok\n".to_vec(), String::new())
            }
        } else {
            let body = format!("{name} {} {}\n", req.method, req.target).into_bytes();
            let extra = format!("X-Origin: {name}\r\nX-Powered-By: origin\r\n");
            records.lock().unwrap().push(Record {
                origin: name.to_string(),
                ..req.clone()
            });
            ("200 OK", body, extra)
        };
        let mut head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\n{extra}Content-Length: {}\r\n",
            body.len()
        );
        if close {
            head.push_str("Connection: close\r\n");
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        if req.method != "HEAD" {
            out.extend_from_slice(&body);
        }
        if s.write_all(&out).is_err() || close {
            return;
        }
    }
}

/// Reads one request (head and body: Content-Length or chunked) from `s`; `buf` carries the
/// bytes read past it. None at EOF, on a read error or on bytes that frame no request.
fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Record> {
    let end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > 64 * 1024 || !fill(s, buf) {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    buf.drain(..end + 4);
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.splitn(3, ' ');
    let (method, target, version) = (first.next()?, first.next()?, first.next()?);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect();
    let field = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if field("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
        loop {
            let line_end = loop {
                if let Some(i) = find(buf, b"\r\n") {
                    break i;
                }
                if !fill(s, buf) {
                    return None;
                }
            };
            let size_text = String::from_utf8_lossy(&buf[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            buf.drain(..line_end + 2);
            if size == 0 {
                // Trailers (none expected) end with an empty line.
                loop {
                    if let Some(i) = find(buf, b"\r\n") {
                        let empty = i == 0;
                        buf.drain(..i + 2);
                        if empty {
                            break;
                        }
                    } else if !fill(s, buf) {
                        return None;
                    }
                }
                break;
            }
            while buf.len() < size + 2 {
                if !fill(s, buf) {
                    return None;
                }
            }
            body.extend_from_slice(&buf[..size]);
            buf.drain(..size + 2);
        }
    } else if let Some(len) = field("content-length") {
        let len: usize = len.parse().ok()?;
        while buf.len() < len {
            if !fill(s, buf) {
                return None;
            }
        }
        body = buf.drain(..len).collect();
    }
    Some(Record {
        origin: String::new(),
        method: method.to_string(),
        target: target.to_string(),
        version: version.to_string(),
        headers,
        body,
    })
}

fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 16 * 1024];
    match s.read(&mut chunk) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl EchoOrigin {
    fn start(name: &str) -> EchoOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind echo origin");
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let received: Arc<Mutex<Vec<Vec<u8>>>> = Arc::new(Mutex::new(Vec::new()));
        let (count, rec) = (connections.clone(), received.clone());
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let rec = rec.clone();
                thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                    let idx = {
                        let mut r = rec.lock().unwrap();
                        r.push(Vec::new());
                        r.len() - 1
                    };
                    let mut b = [0u8; 16 * 1024];
                    loop {
                        match s.read(&mut b) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                // Recorded before it is echoed: once the client has its
                                // bytes back, the origin that sent them has them recorded.
                                rec.lock().unwrap()[idx].extend_from_slice(&b[..n]);
                                if s.write_all(&b[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        EchoOrigin {
            name: name.to_string(),
            addr,
            connections,
            received,
        }
    }
}
