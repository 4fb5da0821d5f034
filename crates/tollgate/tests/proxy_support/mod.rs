//! Test support for the PROXY protocol: origins that read each connection's PROXY header
//! with a parser of the test's own (the spec read again, not tollgate's code), record it,
//! then answer.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::common::echo;
use super::common::http::read_request;

/// What an origin read at the start of a connection: the test's own reading of the spec,
/// independent of tollgate's parser.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub version: u8,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// v2 TLVs as (type, value), SSL sub-TLVs flattened after their parent.
    pub tlvs: Vec<(u8, Vec<u8>)>,
    /// The connection's own peer (to compare with a check's header).
    pub peer: Option<SocketAddr>,
}

impl Seen {
    pub fn tlv(&self, kind: u8) -> Option<&[u8]> {
        self.tlvs.iter().find(|(k, _)| *k == kind).map(|(_, v)| v.as_slice())
    }
}

pub fn read_header(s: &mut TcpStream) -> std::io::Result<Seen> {
    let mut first = [0u8; 1];
    s.read_exact(&mut first)?;
    if first[0] == b'P' {
        let mut line = vec![b'P'];
        while !line.ends_with(b"\r\n") {
            assert!(line.len() <= 107, "v1 line too long");
            s.read_exact(&mut first)?;
            line.push(first[0]);
        }
        let text = String::from_utf8(line).unwrap();
        let f: Vec<&str> = text.trim_end().split(' ').collect();
        assert_eq!(f[0], "PROXY");
        let ip = |t: &str| -> IpAddr { t.parse().unwrap() };
        return Ok(Seen {
            version: 1,
            src: Some(SocketAddr::new(ip(f[2]), f[4].parse().unwrap())),
            dst: Some(SocketAddr::new(ip(f[3]), f[5].parse().unwrap())),
            ..Seen::default()
        });
    }
    let mut fixed = [0u8; 16];
    fixed[0] = first[0];
    s.read_exact(&mut fixed[1..])?;
    assert_eq!(&fixed[..12], b"\r\n\r\n\0\r\nQUIT\n", "not a PROXY header");
    assert_eq!(fixed[12], 0x21, "v2 PROXY command");
    let len = u16::from_be_bytes([fixed[14], fixed[15]]) as usize;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    let (src, dst, rest) = match fixed[13] {
        0x11 => {
            let ip = |o: usize| IpAddr::V4(Ipv4Addr::new(body[o], body[o + 1], body[o + 2], body[o + 3]));
            let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
            (
                SocketAddr::new(ip(0), port(8)),
                SocketAddr::new(ip(4), port(10)),
                &body[12..],
            )
        }
        0x21 => {
            let ip = |o: usize| IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&body[o..o + 16]).unwrap()));
            let port = |o: usize| u16::from_be_bytes([body[o], body[o + 1]]);
            (
                SocketAddr::new(ip(0), port(32)),
                SocketAddr::new(ip(16), port(34)),
                &body[36..],
            )
        }
        other => panic!("family {other:#x}"),
    };
    let mut tlvs = Vec::new();
    let walk = |mut b: &[u8], tlvs: &mut Vec<(u8, Vec<u8>)>| {
        while !b.is_empty() {
            let (kind, n) = (b[0], u16::from_be_bytes([b[1], b[2]]) as usize);
            tlvs.push((kind, b[3..3 + n].to_vec()));
            b = &b[3 + n..];
        }
    };
    walk(rest, &mut tlvs);
    if let Some(ssl) = tlvs.iter().find(|(k, _)| *k == 0x20).map(|(_, v)| v.clone()) {
        walk(&ssl[5..], &mut tlvs);
    }
    Ok(Seen {
        version: 2,
        src: Some(src),
        dst: Some(dst),
        tlvs,
        peer: None,
    })
}

/// A TCP origin that reads the PROXY header of every connection, records it, then answers
/// `seen SRC` + everything else the connection sends, echoed until EOF.
pub struct HeaderOrigin {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub conns: Arc<AtomicUsize>,
}

pub fn header_origin(answer: fn(&mut TcpStream, &Seen)) -> HeaderOrigin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let conns = Arc::new(AtomicUsize::new(0));
    let (log, count) = (seen.clone(), conns.clone());
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            count.fetch_add(1, Ordering::SeqCst);
            let log = log.clone();
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let Ok(mut h) = read_header(&mut s) else { return };
                h.peer = s.peer_addr().ok();
                log.lock().unwrap().push(h.clone());
                answer(&mut s, &h);
            });
        }
    });
    HeaderOrigin { addr, seen, conns }
}

/// `seen SRC\n`, then an echo.
pub fn say_source_then_echo(s: &mut TcpStream, h: &Seen) {
    let _ = s.write_all(format!("seen {}\n", h.src.unwrap()).as_bytes());
    echo(s);
}

/// Keep-alive HTTP: every request answered with the header's source as the body.
pub fn http_naming_source(s: &mut TcpStream, h: &Seen) {
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let body = h.src.unwrap().to_string();
    for nth in 1.. {
        if read_request(&mut reader, 0, nth, None).is_none() {
            return;
        }
        let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        if s.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}
