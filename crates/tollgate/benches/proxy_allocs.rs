//! Heap allocations per keep-alive HTTP request through the whole proxy, in steady state,
//! per keep-alive chunked upload (non-canonical chunk framing, so the body is re-framed), and
//! per short connection (one request with `Connection: close`, origin connection pooled),
//! per keep-alive request to a sticky backend carrying its cookie (`[backend.sticky]`), and
//! per keep-alive request through a route with rewrites (header edits both ways with a
//! template, a prefix path rewrite, `set_host`).
//!
//! A counting global allocator wraps the system one. The origin and the client are written
//! to allocate nothing per request (fixed buffers, blocking std sockets), so whatever the
//! counter shows during the measured window is the proxy's. Measured twice: access logs off,
//! then JSON access logs to a file (the writer thread's allocations count too). Run:
//!   cargo bench -p tollgate --bench proxy_allocs
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // a benchmark may panic

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

#[global_allocator]
static GLOBAL: tollgate_sys::alloc_count::CountingAlloc = tollgate_sys::alloc_count::CountingAlloc;

const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: bench\r\nUser-Agent: proxy_allocs\r\nAccept: */*\r\n\r\n";
const CLOSE_REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";
const CHUNKED_REQUEST: &[u8] =
    b"POST /up HTTP/1.1\r\nHost: bench\r\nTransfer-Encoding: chunked\r\n\r\n05;x=1 \r\nhello\r\n000\r\n\r\n";

fn origin() -> std::net::SocketAddr {
    origin_answering_after(b"\r\n\r\n")
}

/// An origin that answers once per `end` seen (the end of a head, or of a chunked body).
fn origin_answering_after(end: &'static [u8]) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut pending = 0usize;
                loop {
                    let Ok(n) = s.read(&mut buf[pending..]) else { return };
                    if n == 0 {
                        return;
                    }
                    pending += n;
                    while let Some(at) = buf[..pending].windows(end.len()).position(|w| w == end) {
                        if s.write_all(RESPONSE).is_err() {
                            return;
                        }
                        buf.copy_within(at + end.len()..pending, 0);
                        pending -= at + end.len();
                    }
                }
            });
        }
    });
    addr
}

fn main() {
    let origin = origin();
    // The re-framed body ends in the only `0\r\n\r\n` of a request.
    let chunked_origin = origin_answering_after(b"0\r\n\r\n");
    println!("-- access logs off");
    measure(origin, chunked_origin, "");
    let log = std::env::temp_dir().join(format!("tollgate-proxy-allocs-{}.log", std::process::id()));
    println!("-- JSON access logs to a file");
    measure(
        origin,
        chunked_origin,
        &format!("[log]\naccess = \"{}\"\n", log.display()),
    );
    let lines = std::fs::read_to_string(&log).map_or(0, |t| t.lines().count());
    println!("({lines} access log lines written)");
    let _ = std::fs::remove_file(&log);
}

fn measure(origin: std::net::SocketAddr, chunked_origin: std::net::SocketAddr, log: &str) {
    let toml = format!(
        "{log}[global]\nworkers = 1\nbuffer_size = \"16KiB\"\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nforwarded = \"none\"\ndefault_backend = \"be\"\n[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n\
         [[frontend]]\nname = \"fe2\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nforwarded = \"none\"\ndefault_backend = \"be2\"\n[[backend]]\nname = \"be2\"\nmode = \"http\"\n[[backend.server]]\nname = \"o2\"\naddress = \"{chunked_origin}\"\n\
         [[frontend]]\nname = \"fe3\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nforwarded = \"none\"\ndefault_backend = \"be3\"\n[[backend]]\nname = \"be3\"\nmode = \"http\"\n[backend.sticky]\ncookie = \"SRV\"\n[[backend.server]]\nname = \"s1\"\naddress = \"{origin}\"\n[[backend.server]]\nname = \"s2\"\naddress = \"{origin}\"\n\
         [[frontend]]\nname = \"fe4\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nforwarded = \"none\"\n\
         [[frontend.route]]\npath_prefix = \"/re/\"\nbackend = \"be\"\nrewrite_path = {{ regex = \"^/re/([a-z]+)/(.*)$\", replace = \"/$2/$1\" }}\n\
         response_headers = {{ set = {{ \"Strict-Transport-Security\" = \"max-age=1\" }} }}\n\
         [[frontend.route]]\npath_prefix = \"/\"\nbackend = \"be\"\nrewrite_path = {{ prefix = \"/\", to = \"/v2/\" }}\nset_host = \"internal\"\n\
         request_headers = {{ set = {{ \"X-Orig\" = \"{{scheme}}://{{host}}{{path_and_query}}\" }}, remove = [\"User-Agent\"] }}\n\
         response_headers = {{ set = {{ \"Strict-Transport-Security\" = \"max-age=63072000\" }}, remove = [\"Server\"] }}\n"
    );
    let config = tollgate::config::parse(&toml, "bench").expect("config");
    let sockets = tollgate::listener::bind_all(&config).expect("bind");
    let running = tollgate::runtime::start(Arc::new(config), sockets).expect("start");
    let addr = running.local_addr("fe").expect("addr");
    let mut c = TcpStream::connect(addr).expect("connect");
    let mut buf = [0u8; 1024];
    let mut request = |c: &mut TcpStream| {
        c.write_all(REQUEST).expect("write");
        let mut got = 0;
        while got < RESPONSE.len() {
            got += c.read(&mut buf[got..]).expect("read");
        }
    };
    report("heap allocations per keep-alive request (proxy, steady state)", || {
        request(&mut c)
    });

    let mut c2 = TcpStream::connect(running.local_addr("fe2").expect("addr")).expect("connect");
    let mut upload = |c: &mut TcpStream| {
        c.write_all(CHUNKED_REQUEST).expect("write");
        let mut got = 0;
        while got < RESPONSE.len() {
            got += c.read(&mut buf[got..]).expect("read");
        }
    };
    report("heap allocations per keep-alive chunked upload (re-framed)", || {
        upload(&mut c2)
    });
    drop(c2);

    let mut one_connection = || {
        let mut c = TcpStream::connect(addr).expect("connect");
        c.write_all(CLOSE_REQUEST).expect("write");
        while c.read(&mut buf).expect("read") > 0 {}
    };
    for _ in 0..500 {
        one_connection();
    }
    const CONNS: u64 = 5_000;
    let before = tollgate_sys::alloc_count::allocations();
    for _ in 0..CONNS {
        one_connection();
    }
    let allocs = tollgate_sys::alloc_count::allocations() - before;
    println!(
        "heap allocations per connection (one request, Connection: close): {:.3} ({allocs} in {CONNS} connections)",
        allocs as f64 / CONNS as f64
    );
    sticky(&running, &mut buf);
    rewritten(&running, &mut buf);
    running.hard_stop();
    let _ = running.join();
}

/// Keep-alive requests to a sticky backend that carry the cookie its first response set.
fn sticky(running: &tollgate::runtime::Running, buf: &mut [u8; 1024]) {
    let mut c = TcpStream::connect(running.local_addr("fe3").expect("addr")).expect("connect");
    c.write_all(REQUEST).expect("write");
    let mut got = 0;
    while !buf[..got].ends_with(b"\r\n\r\nok\n") {
        got += c.read(&mut buf[got..]).expect("read");
    }
    let head = std::str::from_utf8(&buf[..got]).expect("utf8");
    let value = head
        .split("Set-Cookie: SRV=")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .expect("a sticky cookie");
    let text = format!("GET / HTTP/1.1\r\nHost: bench\r\nCookie: a=1; SRV={value}; b=2\r\nAccept: */*\r\n\r\n");
    let mut request = |c: &mut TcpStream| {
        c.write_all(text.as_bytes()).expect("write");
        let mut got = 0;
        while got < RESPONSE.len() {
            got += c.read(&mut buf[got..]).expect("read");
        }
        assert_eq!(got, RESPONSE.len(), "no Set-Cookie once the client has it");
    };
    report(
        "heap allocations per keep-alive request to a sticky backend, with its cookie",
        || request(&mut c),
    );
}

/// Keep-alive requests through a route that rewrites both heads, then through one whose
/// path regex has capture groups.
fn rewritten(running: &tollgate::runtime::Running, buf: &mut [u8; 1024]) {
    measure_rewrites(running, buf, REQUEST, "a rewriting route");
    let regex_request = b"GET /re/abc/d/e HTTP/1.1\r\nHost: bench\r\nAccept: */*\r\n\r\n";
    measure_rewrites(running, buf, regex_request, "a regex path rewrite with groups");
}

fn measure_rewrites(running: &tollgate::runtime::Running, buf: &mut [u8; 1024], req: &[u8], what: &str) {
    let mut c = TcpStream::connect(running.local_addr("fe4").expect("addr")).expect("connect");
    let mut request = |c: &mut TcpStream| {
        c.write_all(req).expect("write");
        let mut got = 0;
        while !buf[..got].ends_with(b"\r\n\r\nok\n") {
            got += c.read(&mut buf[got..]).expect("read");
        }
        debug_assert!(std::str::from_utf8(&buf[..got]).is_ok_and(|t| t.contains("Strict-Transport-Security")));
    };
    report(
        &format!("heap allocations per keep-alive request through {what}"),
        || request(&mut c),
    );
}

/// Warms up with 2,000 keep-alive requests, then prints `label` and the heap allocations
/// per request over the next 20,000.
fn report(label: &str, mut request: impl FnMut()) {
    for _ in 0..2_000 {
        request();
    }
    const N: u64 = 20_000;
    let before = tollgate_sys::alloc_count::allocations();
    for _ in 0..N {
        request();
    }
    let allocs = tollgate_sys::alloc_count::allocations() - before;
    println!("{label}: {:.3} ({allocs} in {N} requests)", allocs as f64 / N as f64);
}
