//! splice(2) in HTTP mode (`[frontend.splice]`): Content-Length bodies above `after_bytes`
//! move socket → pipe → socket in both directions, byte for byte and never past their end
//! (pipelined requests, the next response and a server's excess bytes stay for the parser);
//! bodies at or under the threshold, chunked bodies and bodiless responses stay in user
//! space; a pipe left with bytes in it (a client gone mid-body, an idle timeout) is closed,
//! never pooled; counters and access-log byte counts stay exact; tunnels after a 101 splice.
//!
//! Origins are blocking threads on loopback sockets written here, so each test controls
//! every byte the server sends.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use common::http::{read_request, read_response};
use common::tls::TempDir;
use common::*;
use sha2::{Digest, Sha256};
use tollgate::stats::Snapshot;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// One http frontend with splice on after `after` bytes, one backend with `origin`.
fn config(after: u64, extra_global: &str, extra_top: &str, origin: SocketAddr) -> String {
    format!(
        "[global]\nworkers = 1\n{extra_global}\n{extra_top}\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         [frontend.splice]\nenabled = true\nafter_bytes = {after}\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n"
    )
}

/// Writes `len` body bytes made of seed `seed`'s 1 MiB block, each block stamped with its
/// index (never periodic at the pipe's size); returns their sha256.
fn write_body(w: &mut impl Write, seed: u64, len: u64) -> std::io::Result<[u8; 32]> {
    let mut block = payload_block(seed, MIB as usize);
    let mut h = Sha256::new();
    let (mut at, mut i) = (0u64, 0u64);
    while at < len {
        block[..8].copy_from_slice(&i.to_le_bytes());
        let n = (len - at).min(MIB) as usize;
        h.update(&block[..n]);
        w.write_all(&block[..n])?;
        at += n as u64;
        i += 1;
    }
    Ok(h.finalize().into())
}

fn body_sha(seed: u64, len: u64) -> [u8; 32] {
    write_body(&mut std::io::sink(), seed, len).unwrap()
}

/// Reads exactly `len` bytes; their sha256.
fn read_hashed(r: &mut impl Read, len: u64) -> std::io::Result<[u8; 32]> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut left = len;
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        r.read_exact(&mut buf[..want])?;
        h.update(&buf[..want]);
        left -= want as u64;
    }
    Ok(h.finalize().into())
}

fn hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// A response head read byte by byte (so nothing of the body is taken): status, fields.
fn read_head(r: &mut impl BufRead) -> (u16, Vec<(String, String)>, usize) {
    let mut head_len = 0;
    let mut line = String::new();
    head_len += r.read_line(&mut line).unwrap();
    let status = line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut fields = Vec::new();
    loop {
        let mut l = String::new();
        head_len += r.read_line(&mut l).unwrap();
        let l = l.trim_end();
        if l.is_empty() {
            return (status, fields, head_len);
        }
        let (n, v) = l.split_once(':').unwrap();
        fields.push((n.to_ascii_lowercase(), v.trim().to_string()));
    }
}

fn content_length(fields: &[(String, String)]) -> Option<u64> {
    fields
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| v.parse().unwrap())
}

/// The test origin, one thread per connection, requests read with `common::http`:
/// - `GET /len/N/SEED` → 200 with an N-byte `write_body` body (HEAD: the head only);
/// - `POST /hash` → 200, body: the byte count and sha256 (hex) of the request body;
/// - `GET /chunked/N` → 200, the same bytes chunked in 100,000-byte chunks;
/// - `GET /204`, `GET /304/N` (a 304 announcing `Content-Length: N`, no body);
/// - `GET /short/N/M` → `Content-Length: N`, M < N bytes, close;
/// - `GET /long/N` → `Content-Length: N`, N bytes, then a whole smuggled response in the same
///   write, then the connection stays open (it answers later requests as usual);
/// - `GET /stall/N/M` → `Content-Length: N`, M bytes, then silence until the peer closes;
/// - anything else → 200 "fine".
fn test_origin() -> Origin {
    origin(|s: &mut TcpStream| {
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        for nth in 1.. {
            let Some(req) = read_request(&mut r, 0, nth, None) else {
                return;
            };
            let parts: Vec<&str> = req.target.split('/').collect();
            let num = |i: usize| parts.get(i).and_then(|p| p.parse::<u64>().ok()).unwrap_or(0);
            let head = |len: u64| format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
            let written = match parts.get(1).copied() {
                Some("len") => {
                    let len = num(2);
                    w.write_all(head(len).as_bytes()).and_then(|()| {
                        if req.method == "HEAD" {
                            Ok(())
                        } else {
                            write_body(&mut w, num(3), len).map(drop)
                        }
                    })
                }
                Some("hash") => {
                    let digest: [u8; 32] = Sha256::digest(&req.body).into();
                    let body = format!("{} {}", req.body.len(), hex(&digest));
                    w.write_all(format!("{}{body}", head(body.len() as u64)).as_bytes())
                }
                Some("chunked") => {
                    let mut body = Vec::new();
                    write_body(&mut body, 5, num(2)).unwrap();
                    let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                    for chunk in body.chunks(100_000) {
                        out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                        out.extend_from_slice(chunk);
                        out.extend_from_slice(b"\r\n");
                    }
                    out.extend_from_slice(b"0\r\n\r\n");
                    w.write_all(&out)
                }
                Some("204") => w.write_all(b"HTTP/1.1 204 No Content\r\n\r\n"),
                Some("304") => {
                    w.write_all(format!("HTTP/1.1 304 Not Modified\r\nContent-Length: {}\r\n\r\n", num(2)).as_bytes())
                }
                Some("short") => {
                    let _ = w
                        .write_all(head(num(2)).as_bytes())
                        .and_then(|()| write_body(&mut w, 3, num(3)));
                    return;
                }
                Some("long") => {
                    let mut out = head(num(2)).into_bytes();
                    write_body(&mut out, 4, num(2)).unwrap();
                    out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nEVIL");
                    w.write_all(&out)
                }
                Some("stall") => {
                    let _ = w
                        .write_all(head(num(2)).as_bytes())
                        .and_then(|()| write_body(&mut w, 6, num(3)));
                    let mut sink = [0u8; 1024];
                    while matches!(r.read(&mut sink), Ok(n) if n > 0) {}
                    return;
                }
                _ => w.write_all(format!("{}fine", head(4)).as_bytes()),
            };
            if written.is_err() {
                return;
            }
        }
    })
}

fn connect(proxy: &Proxy) -> (TcpStream, BufReader<TcpStream>) {
    let c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let r = BufReader::with_capacity(256 * 1024, c.try_clone().unwrap());
    (c, r)
}

/// GET `/len/N/SEED` on `c`: checks the status, the length and the sha256 of the body.
fn get_len(c: &mut TcpStream, r: &mut BufReader<TcpStream>, len: u64, seed: u64) {
    c.write_all(format!("GET /len/{len}/{seed} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .unwrap();
    let (status, fields, _) = read_head(r);
    assert_eq!((status, content_length(&fields)), (200, Some(len)));
    assert!(
        read_hashed(r, len).unwrap() == body_sha(seed, len),
        "body of {len} bytes differs"
    );
}

/// POST `len` bytes of `write_body(seed)` to `/hash`: checks the origin saw exactly them.
fn post_hash(c: &mut TcpStream, r: &mut BufReader<TcpStream>, len: u64, seed: u64) {
    c.write_all(format!("POST /hash HTTP/1.1\r\nHost: t\r\nContent-Length: {len}\r\n\r\n").as_bytes())
        .unwrap();
    let sent = write_body(c, seed, len).unwrap();
    let (status, _, body) = read_response(r).expect("response");
    assert_eq!(status, 200);
    assert_eq!(String::from_utf8(body).unwrap(), format!("{len} {}", hex(&sent)));
}

fn stats(proxy: &Proxy) -> Snapshot {
    proxy.running().stats()
}

#[test]
fn bodies_just_under_and_over_after_bytes_are_exact_and_only_those_over_spliced() {
    const AFTER: u64 = 256 * KIB;
    let origin = test_origin();
    // 16 KiB buffers: at most 16 KiB of a body comes in with its head.
    let proxy = Proxy::start(&config(AFTER, "buffer_size = \"16KiB\"", "", origin.addr));
    let (mut c, mut r) = connect(&proxy);
    for (len, spliced) in [
        (AFTER - 1, false),
        (AFTER, false),
        (AFTER + 1, true),
        (3 * MIB + 7, true),
    ] {
        for upload in [false, true] {
            let before = stats(&proxy);
            if upload {
                post_hash(&mut c, &mut r, len, len);
            } else {
                get_len(&mut c, &mut r, len, len);
            }
            let after = stats(&proxy);
            let bodies = after.http_bodies_spliced - before.http_bodies_spliced;
            let bytes = after.http_bytes_spliced - before.http_bytes_spliced;
            let what = format!("{len}-byte {}", if upload { "upload" } else { "download" });
            if spliced {
                assert_eq!(bodies, 1, "{what}: {after:?}");
                assert!(bytes >= len - 16 * KIB && bytes <= len, "{what}: {bytes} spliced");
            } else {
                assert_eq!((bodies, bytes), (0, 0), "{what} is copied");
            }
        }
    }
    // Every exchange on one client and one server connection: nothing was left behind.
    assert_eq!(origin.total.load(std::sync::atomic::Ordering::SeqCst), 1);
    let s = stats(&proxy);
    assert_eq!(s.bytes_spliced, s.http_bytes_spliced, "only HTTP bodies here");
    assert_eq!((s.pipes_in_use, s.pipes_pooled), (0, 1), "the pipe went back clean");
}

#[test]
fn sixty_four_mib_both_ways_checksummed() {
    let origin = test_origin();
    let proxy = Proxy::start(&config(0, "", "", origin.addr));
    let (mut c, mut r) = connect(&proxy);
    get_len(&mut c, &mut r, 64 * MIB, 21);
    post_hash(&mut c, &mut r, 64 * MIB, 22);
    let s = stats(&proxy);
    assert_eq!(s.http_bodies_spliced, 2, "{s:?}");
    assert!(s.http_bytes_spliced >= 2 * (64 * MIB - 64 * KIB), "{s:?}");
    assert_eq!(s.pipes_in_use, 0);
}

/// A client that goes away mid-body leaves the pipe with bytes in it: it is closed. With one
/// pipe per worker the next body gets a new one, and a pooled dirty pipe would have put the
/// old bytes in front of it.
#[test]
fn a_client_killed_mid_splice_closes_the_pipe_and_the_next_body_is_clean() {
    let origin = test_origin();
    let proxy = Proxy::start(&config(0, "max_pipes = 1", "", origin.addr));
    {
        let (mut c, mut r) = connect(&proxy);
        c.write_all(b"GET /len/67108864/31 HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let (status, _, _) = read_head(&mut r);
        assert_eq!(status, 200);
        let mut some = vec![0u8; MIB as usize];
        r.read_exact(&mut some).unwrap();
        // Closed with megabytes unread: the kernel resets the connection.
    }
    proxy.wait_idle(Duration::from_secs(10));
    let killed = stats(&proxy);
    // The body check first: a pooled dirty pipe would put the old bytes into this body.
    let (mut c, mut r) = connect(&proxy);
    get_len(&mut c, &mut r, 8 * MIB, 32);
    assert_eq!(killed.http_bodies_spliced, 1, "{killed:?}");
    assert_eq!(
        (killed.pipes_in_use, killed.pipes_pooled),
        (0, 0),
        "the dirty pipe was closed: {killed:?}"
    );
    let s = stats(&proxy);
    assert_eq!(s.http_bodies_spliced, 2, "the next body was spliced too: {s:?}");
    assert_eq!((s.pipes_in_use, s.pipes_pooled), (0, 1), "{s:?}");
}

/// A client that stops reading: the response body's idle timeout (`timeouts.server`) ends
/// the exchange with bytes in the pipe, which is closed.
#[test]
fn an_idle_timeout_mid_splice_closes_the_pipe() {
    let origin = test_origin();
    let proxy = Proxy::start(&config(0, "", "[timeouts]\nserver = \"1s\"", origin.addr));
    let (mut c, mut r) = connect(&proxy);
    c.write_all(b"GET /len/67108864/41 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    assert_eq!(read_head(&mut r).0, 200);
    // Not read further: the proxy fills the socket, then nothing moves.
    let began = Instant::now();
    proxy.wait_idle(Duration::from_secs(10));
    assert!(began.elapsed() >= Duration::from_millis(900), "{:?}", began.elapsed());
    let s = stats(&proxy);
    assert_eq!((s.idle_timeouts, s.http_bodies_spliced), (1, 1), "{s:?}");
    assert_eq!((s.pipes_in_use, s.pipes_pooled), (0, 0), "{s:?}");
    drop(c);
}

/// Pipelined requests after spliced bodies, both directions: an upload then a download then a
/// small request, in one write. The splices stop at each body's end, so the next request and
/// the next response are intact.
#[test]
fn pipelined_requests_after_spliced_bodies_are_intact() {
    let origin = test_origin();
    let proxy = Proxy::start(&config(64 * KIB, "", "", origin.addr));
    let (mut c, mut r) = connect(&proxy);
    let mut out = format!("POST /hash HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n", 2 * MIB).into_bytes();
    let sent = write_body(&mut out, 51, 2 * MIB).unwrap();
    out.extend_from_slice(b"GET /len/1048576/52 HTTP/1.1\r\nHost: t\r\n\r\nGET /small HTTP/1.1\r\nHost: t\r\n\r\n");
    let writer = {
        let mut c = c.try_clone().unwrap();
        std::thread::spawn(move || c.write_all(&out).unwrap())
    };
    let (status, _, body) = read_response(&mut r).unwrap();
    assert_eq!(
        (status, String::from_utf8(body).unwrap()),
        (200, format!("{} {}", 2 * MIB, hex(&sent)))
    );
    let (status, fields, _) = read_head(&mut r);
    assert_eq!((status, content_length(&fields)), (200, Some(MIB)));
    assert!(read_hashed(&mut r, MIB).unwrap() == body_sha(52, MIB));
    let (status, _, body) = read_response(&mut r).unwrap();
    assert_eq!((status, body), (200, b"fine".to_vec()));
    writer.join().unwrap();
    let s = stats(&proxy);
    assert_eq!(s.http_bodies_spliced, 2, "{s:?}");
    // And the connection carries on.
    c.write_all(b"GET /again HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut r).unwrap().2, b"fine");
}

/// Nothing to splice: HEAD, 204, a 304 announcing a length, a chunked body (re-framed, so in
/// user space) — all correct on one connection, and not one byte spliced.
#[test]
fn bodiless_and_chunked_responses_are_not_spliced() {
    let origin = test_origin();
    let proxy = Proxy::start(&config(0, "", "", origin.addr));
    let (mut c, mut r) = connect(&proxy);
    c.write_all(b"HEAD /len/4194304/1 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let (status, fields, _) = read_head(&mut r);
    assert_eq!(
        (status, content_length(&fields)),
        (200, Some(4 * MIB)),
        "HEAD keeps the length"
    );
    c.write_all(b"GET /204 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert_eq!(read_head(&mut r).0, 204);
    c.write_all(b"GET /304/4194304 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert_eq!(read_head(&mut r).0, 304);
    c.write_all(b"GET /chunked/3000000 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let (status, _, body) = read_response(&mut r).unwrap();
    assert_eq!(status, 200);
    assert!(
        Sha256::digest(&body)[..] == body_sha(5, 3_000_000)[..],
        "chunked body differs"
    );
    // Still in step: the bodiless responses left nothing behind.
    c.write_all(b"GET /after HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut r).unwrap().2, b"fine");
    let s = stats(&proxy);
    assert_eq!((s.http_bodies_spliced, s.bytes_spliced), (0, 0), "{s:?}");
}

/// A server that sends fewer bytes than its Content-Length and closes: the client gets what
/// there was and a close (as when copying); the pipe was empty at the EOF and is pooled.
#[test]
fn a_short_body_from_the_server_is_cut_off_cleanly() {
    let origin = test_origin();
    let proxy = Proxy::start(&config(0, "", "", origin.addr));
    let (mut c, mut r) = connect(&proxy);
    c.write_all(b"GET /short/4194304/1500000 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let (status, fields, _) = read_head(&mut r);
    assert_eq!((status, content_length(&fields)), (200, Some(4 * MIB)));
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), 1_500_000, "what the server sent, then the close");
    let mut want = Vec::new();
    write_body(&mut want, 3, 1_500_000).unwrap();
    assert!(got == want);
    proxy.wait_idle(Duration::from_secs(10));
    let s = stats(&proxy);
    assert_eq!(
        (s.http_bodies_spliced, s.pipes_in_use, s.pipes_pooled),
        (1, 0, 1),
        "{s:?}"
    );
    // The next client is served as usual.
    let (mut c, mut r) = connect(&proxy);
    get_len(&mut c, &mut r, 2 * MIB, 9);
}

/// A server that sends more than its Content-Length (here a whole smuggled response after
/// the body): the client gets exactly the body, and its next request a real answer — the
/// excess stayed in the server's socket and that connection was not reused.
#[test]
fn bytes_past_the_content_length_never_reach_the_client() {
    let origin = test_origin();
    let proxy = Proxy::start(&config(0, "", "", origin.addr));
    let (mut c, mut r) = connect(&proxy);
    c.write_all(b"GET /long/2097152 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let (status, fields, _) = read_head(&mut r);
    assert_eq!((status, content_length(&fields)), (200, Some(2 * MIB)));
    assert!(read_hashed(&mut r, 2 * MIB).unwrap() == body_sha(4, 2 * MIB));
    c.write_all(b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let (status, _, body) = read_response(&mut r).unwrap();
    assert_eq!((status, body), (200, b"fine".to_vec()), "not the smuggled response");
    assert_eq!(
        origin.total.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "a fresh server connection"
    );
    assert_eq!(stats(&proxy).http_bodies_spliced, 1);
}

fn wait_json_lines(path: &Path, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<_> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(Instant::now() < deadline, "{} of {n} lines: {text}", lines.len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The access log and the worker counters count spliced bytes as copied ones: exactly what
/// each peer was sent (the client: rewritten head + body; the server: rewritten head + body).
#[test]
fn byte_counts_include_spliced_bytes_exactly() {
    let origin = test_origin();
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let table = format!("[log]\naccess = \"{}\"\nformat = \"json\"\n", log.display());
    let proxy = Proxy::start(&config(0, "", &table, origin.addr));
    let (mut c, mut r) = connect(&proxy);
    const LEN: u64 = 5 * MIB + 3;
    c.write_all(format!("GET /len/{LEN}/61 HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .unwrap();
    let (_, _, head_len) = read_head(&mut r);
    read_hashed(&mut r, LEN).unwrap();
    post_hash(&mut c, &mut r, LEN, 62);
    drop((c, r));
    proxy.wait_idle(Duration::from_secs(10));
    let lines = wait_json_lines(&log, 2);
    let (get, post) = (&lines[0], &lines[1]);
    assert_eq!(get["bytes_to_client"].as_u64(), Some(head_len as u64 + LEN), "{get}");
    let post_up = post["bytes_to_server"].as_u64().unwrap();
    assert!(
        post_up > LEN && post_up < LEN + 512,
        "the rewritten head + the body: {post}"
    );
    let s = stats(&proxy);
    assert_eq!(s.http_bodies_spliced, 2);
    let total_client = get["bytes_to_client"].as_u64().unwrap() + post["bytes_to_client"].as_u64().unwrap();
    let total_server = get["bytes_to_server"].as_u64().unwrap() + post_up;
    assert_eq!((s.bytes_to_client, s.bytes_to_server), (total_client, total_server));
}

/// After a 101 the tunnel is a TCP relay: with splice on, its bytes are spliced too.
#[test]
fn an_upgraded_tunnel_splices() {
    let origin = common::http::http_origin(|_| {
        common::http::Reply::Tunnel(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n".to_vec(),
        )
    });
    let proxy = Proxy::start(&config(0, "", "", origin.addr));
    let (mut c, mut r) = connect(&proxy);
    c.write_all(b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n")
        .unwrap();
    assert_eq!(read_head(&mut r).0, 101);
    let data = payload_block(71, 3 * MIB as usize);
    let writer = {
        let (mut c, data) = (c.try_clone().unwrap(), data.clone());
        std::thread::spawn(move || c.write_all(&data).unwrap())
    };
    let mut got = vec![0u8; data.len()];
    r.read_exact(&mut got).unwrap();
    writer.join().unwrap();
    assert!(got == data);
    let s = stats(&proxy);
    assert!(s.bytes_spliced > 0, "{s:?}");
    assert_eq!(s.http_bodies_spliced, 0, "a tunnel is not a body");
}

/// An origin that reads one connection to its end and reports every byte it received (the
/// request head as the proxy rewrote it, then the body), answering nothing. With `hold`, it
/// reads the head, then stops reading until the test sends on the returned channel.
fn recording_origin(hold: bool) -> (Origin, std::sync::mpsc::Receiver<Vec<u8>>, std::sync::mpsc::Sender<()>) {
    use std::sync::{Mutex, mpsc};
    let (got_tx, got_rx) = mpsc::channel::<Vec<u8>>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (got_tx, go_rx) = (Mutex::new(got_tx), Mutex::new(go_rx));
    let origin = origin(move |s: &mut TcpStream| {
        let mut seen = Vec::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut held = !hold;
        loop {
            if !held && seen.windows(4).any(|w| w == b"\r\n\r\n") {
                go_rx.lock().unwrap().recv().unwrap();
                held = true;
            }
            // Byte by byte until the head is in (so a held origin takes none of the body).
            let want = if held { buf.len() } else { 1 };
            match s.read(&mut buf[..want]) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        got_tx.lock().unwrap().send(seen).unwrap();
    });
    (origin, got_rx, go_tx)
}

/// The body bytes of what `recording_origin` received (after the head's blank line).
fn body_of(seen: &[u8]) -> &[u8] {
    let end = seen.windows(4).position(|w| w == b"\r\n\r\n").expect("a whole head") + 4;
    &seen[end..]
}

/// A client that announces 8 MiB, sends 3 MiB and half-closes: spliced or copied, the proxy
/// forwards exactly the 3 MiB, answers 400, closes the server connection (never pooled with
/// a body half sent) and counts every byte the server got. The pipe was empty at the EOF: it
/// is pooled, and clean.
#[test]
fn a_client_that_lies_about_its_content_length_is_cut_off_exactly() {
    const ANNOUNCED: u64 = 8 * MIB;
    const SENT: u64 = 3 * MIB + 5;
    for after in [16 * MIB, 0] {
        let spliced = after == 0;
        let (origin, got, _go) = recording_origin(false);
        let proxy = Proxy::start(&config(after, "", "", origin.addr));
        let (mut c, mut r) = connect(&proxy);
        c.write_all(format!("POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {ANNOUNCED}\r\n\r\n").as_bytes())
            .unwrap();
        let sent = write_body(&mut c, 81, SENT).unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let (status, _, _) = read_response(&mut r).expect("an answer");
        assert_eq!(status, 400, "spliced: {spliced}");
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "then the close");
        let seen = got
            .recv_timeout(Duration::from_secs(10))
            .expect("the server connection closed");
        let body = body_of(&seen);
        assert_eq!(body.len() as u64, SENT, "spliced: {spliced}");
        assert!(<[u8; 32]>::from(Sha256::digest(body)) == sent);
        proxy.wait_idle(Duration::from_secs(10));
        let s = stats(&proxy);
        assert_eq!(s.bytes_to_server, seen.len() as u64, "every byte the server got: {s:?}");
        assert_eq!(s.http_proxy_4xx, 1, "{s:?}");
        if spliced {
            assert_eq!(s.http_bodies_spliced, 1, "{s:?}");
            assert!(
                s.http_bytes_spliced > SENT - 64 * KIB && s.http_bytes_spliced <= SENT,
                "{s:?}"
            );
            assert_eq!((s.pipes_in_use, s.pipes_pooled), (0, 1), "{s:?}");
        } else {
            assert_eq!((s.http_bodies_spliced, s.bytes_spliced), (0, 0), "{s:?}");
        }
    }
}

/// A server that stops reading mid-upload: the request body's idle limit (`timeouts.client`)
/// ends the exchange with bytes in the pipe, which is closed, not pooled; `bytes_to_server`
/// is exactly what the server's socket took (the pipe's bytes never left).
#[test]
fn a_server_that_stops_reading_mid_splice_times_out_and_the_pipe_is_closed() {
    let (origin, got, go) = recording_origin(true);
    let proxy = Proxy::start(&config(0, "", "[timeouts]\nclient = \"1s\"", origin.addr));
    let (c, _r) = connect(&proxy);
    let writer = {
        let mut c = c.try_clone().unwrap();
        std::thread::spawn(move || {
            let head = format!("POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n", 256 * MIB);
            // Ends with an error once the proxy gives up and closes.
            let _ = c
                .write_all(head.as_bytes())
                .and_then(|()| write_body(&mut c, 91, 256 * MIB));
        })
    };
    let began = Instant::now();
    proxy.wait_for("the upload spliced", |s| s.http_bodies_spliced == 1);
    proxy.wait_idle(Duration::from_secs(20));
    assert!(began.elapsed() >= Duration::from_millis(900), "{:?}", began.elapsed());
    let s = stats(&proxy);
    assert_eq!((s.idle_timeouts, s.http_bodies_spliced), (1, 1), "{s:?}");
    assert_eq!(
        (s.pipes_in_use, s.pipes_pooled),
        (0, 0),
        "the dirty pipe was closed: {s:?}"
    );
    drop(c);
    writer.join().unwrap();
    go.send(()).unwrap();
    let seen = got
        .recv_timeout(Duration::from_secs(10))
        .expect("the server connection closed");
    assert_eq!(
        s.bytes_to_server,
        seen.len() as u64,
        "exactly what reached the server: {s:?}"
    );
    let body = body_of(&seen);
    let mut want = Vec::new();
    write_body(&mut want, 91, body.len() as u64).unwrap();
    assert!(body == want.as_slice(), "a prefix of the body, in order");
}

/// A server that stops sending mid-body (the connection open): the response body's idle
/// limit (`timeouts.server`) ends the exchange; the client got exactly what the server sent,
/// then a close. The pipe was empty (the splice waited on the server): it is pooled, and the
/// next body, spliced through that same pipe (`max_pipes = 1`), is intact.
#[test]
fn a_server_that_stalls_mid_splice_times_out_and_the_clean_pipe_is_reused() {
    let origin = test_origin();
    let proxy = Proxy::start(&config(0, "max_pipes = 1", "[timeouts]\nserver = \"1s\"", origin.addr));
    let (mut c, mut r) = connect(&proxy);
    c.write_all(b"GET /stall/4194304/1500000 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let (status, fields, head_len) = read_head(&mut r);
    assert_eq!((status, content_length(&fields)), (200, Some(4 * MIB)));
    let mut got = Vec::new();
    r.read_to_end(&mut got).unwrap();
    let mut want = Vec::new();
    write_body(&mut want, 6, 1_500_000).unwrap();
    assert!(
        got == want,
        "what the server sent ({} bytes), then the close",
        got.len()
    );
    proxy.wait_idle(Duration::from_secs(10));
    let s = stats(&proxy);
    assert_eq!((s.idle_timeouts, s.http_bodies_spliced), (1, 1), "{s:?}");
    assert_eq!((s.pipes_in_use, s.pipes_pooled), (0, 1), "{s:?}");
    assert_eq!(s.bytes_to_client, (head_len + 1_500_000) as u64, "{s:?}");
    let (mut c, mut r) = connect(&proxy);
    get_len(&mut c, &mut r, 8 * MIB, 7);
    let s = stats(&proxy);
    assert_eq!(s.http_bodies_spliced, 2, "{s:?}");
    assert_eq!((s.pipes_in_use, s.pipes_pooled), (0, 1), "{s:?}");
}
