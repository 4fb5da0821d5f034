//! A blocking HTTP/1.1 test origin: parses requests (Content-Length and chunked bodies),
//! records them, and answers with whatever the test's handler returns.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

#[derive(Debug, Clone)]
pub struct Req {
    pub method: String,
    pub target: String,
    pub version: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
    /// Which origin connection carried it (1-based, in accept order).
    pub conn: usize,
    /// Its position on that connection (1-based).
    pub nth: usize,
}

impl Req {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the handler wants done with a request.
pub enum Reply {
    /// Write these bytes, keep the connection unless the request said close.
    Bytes(Vec<u8>),
    /// Write these bytes, then close.
    BytesThenClose(Vec<u8>),
    /// Close without answering.
    Close,
    /// Switch to echoing raw bytes (after writing these, e.g. a 101).
    Tunnel(Vec<u8>),
}

pub struct HttpOrigin {
    pub addr: SocketAddr,
    pub conns: Arc<AtomicUsize>,
    pub requests: Arc<Mutex<Vec<Req>>>,
}

impl HttpOrigin {
    pub fn requests(&self) -> Vec<Req> {
        self.requests.lock().unwrap().clone()
    }
}

pub fn ok(body: &str) -> Reply {
    Reply::Bytes(format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes())
}

pub fn http_origin<F>(handler: F) -> HttpOrigin
where
    F: Fn(&Req) -> Reply + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let handler = Arc::new(handler);
    let (c, r) = (conns.clone(), requests.clone());
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let id = c.fetch_add(1, Ordering::SeqCst) + 1;
            let (h, r) = (handler.clone(), r.clone());
            thread::spawn(move || serve_conn(stream, id, &*h, &r));
        }
    });
    HttpOrigin { addr, conns, requests }
}

fn serve_conn(stream: TcpStream, id: usize, handler: &(dyn Fn(&Req) -> Reply + Send + Sync), log: &Mutex<Vec<Req>>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    for nth in 1.. {
        let Some(req) = read_request(&mut reader, id, nth, Some(&mut writer)) else {
            return;
        };
        log.lock().unwrap().push(req.clone());
        let close = req
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        match handler(&req) {
            Reply::Bytes(b) => {
                if writer.write_all(&b).is_err() || close {
                    return;
                }
            }
            Reply::BytesThenClose(b) => {
                let _ = writer.write_all(&b);
                return;
            }
            Reply::Close => return,
            Reply::Tunnel(b) => {
                let _ = writer.write_all(&b);
                let mut buf = [0u8; 4096];
                loop {
                    match reader.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if writer.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Reads one request; with `continue_to`, answers `Expect: 100-continue` before the body.
pub fn read_request(r: &mut impl BufRead, conn: usize, nth: usize, continue_to: Option<&mut TcpStream>) -> Option<Req> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.trim_end().splitn(3, ' ');
    let (method, target, version) = (
        parts.next()?.to_string(),
        parts.next()?.to_string(),
        parts.next()?.to_string(),
    );
    let headers = read_fields(r)?;
    let mut req = Req {
        method,
        target,
        version,
        headers,
        body: Vec::new(),
        trailers: Vec::new(),
        conn,
        nth,
    };
    if req
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            if n == 0 {
                req.trailers = read_fields(r)?;
                break;
            }
            let mut chunk = vec![0u8; n + 2];
            r.read_exact(&mut chunk).ok()?;
            req.body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = req.header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        if let (Some(w), Some(_)) = (continue_to, req.header("expect")) {
            w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").ok()?;
        }
        req.body = vec![0u8; n];
        r.read_exact(&mut req.body).ok()?;
    }
    Some(req)
}

fn read_fields(r: &mut impl BufRead) -> Option<Vec<(String, String)>> {
    let mut fields = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            return Some(fields);
        }
        let (n, v) = line.split_once(':')?;
        fields.push((n.to_string(), v.trim().to_string()));
    }
}

/// Sends raw bytes, then reads until the connection closes (or `limit` bytes).
pub fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    c.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Status, header fields, body.
pub type Response = (u16, Vec<(String, String)>, Vec<u8>);

/// Reads one response (head + Content-Length or chunked body) from a buffered reader.
pub fn read_response(r: &mut impl BufRead) -> Option<Response> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status: u16 = line.split(' ').nth(1)?.parse().ok()?;
    let headers = read_fields(r)?;
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if (100..200).contains(&status) || status == 204 || status == 304 {
        return Some((status, headers, body));
    }
    if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            if n == 0 {
                read_fields(r)?;
                break;
            }
            let mut chunk = vec![0u8; n + 2];
            r.read_exact(&mut chunk).ok()?;
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body = vec![0u8; n];
        r.read_exact(&mut body).ok()?;
    } else {
        r.read_to_end(&mut body).ok()?;
    }
    Some((status, headers, body))
}

pub fn http_config(extra_global: &str, origin: SocketAddr) -> String {
    format!(
        "{extra_global}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\n[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n"
    )
}
