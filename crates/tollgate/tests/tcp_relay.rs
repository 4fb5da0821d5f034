//! TCP mode moves bytes exactly, in both directions, with half-close done right.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use common::*;

const MIB: u64 = 100;

#[test]
fn hundred_mib_upload_arrives_intact() {
    // The origin hashes everything it receives until EOF and answers with the digest.
    let origin = origin(|s: &mut TcpStream| {
        let (n, digest) = read_all_hashed(s).expect("origin read");
        let _ = s.write_all(format!("{n} {}", hex(&digest)).as_bytes());
    });
    let proxy = Proxy::start(&tcp_config("", &[("o", origin.addr, 1)]));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    let mut block = payload_block(7, 1 << 20);
    let sent = write_mib(&mut c, MIB, &mut block).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, format!("{} {}", MIB << 20, hex(&sent)));
}

#[test]
fn hundred_mib_download_arrives_intact() {
    let origin = origin(|s: &mut TcpStream| {
        let mut block = payload_block(11, 1 << 20);
        // The client recomputes the digest from the same generator.
        write_mib(s, MIB, &mut block).expect("origin write");
    });
    let proxy = Proxy::start(&tcp_config("", &[("o", origin.addr, 1)]));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    let (n, got) = read_all_hashed(&mut c).unwrap();
    let mut block = payload_block(11, 1 << 20);
    let expected = write_mib(&mut std::io::sink(), MIB, &mut block).unwrap();
    assert_eq!(n, MIB << 20);
    assert_eq!(got, expected);
    let stats = proxy.running().stats();
    assert_eq!(stats.bytes_to_client, MIB << 20);
}

#[test]
fn client_half_close_still_receives_whole_response() {
    // The origin answers only after it saw the client's EOF, and slowly, in pieces.
    let origin = origin(|s: &mut TcpStream| {
        let mut req = Vec::new();
        s.read_to_end(&mut req).expect("origin read");
        let reply = payload_block(req.len() as u64, 3 << 20);
        for chunk in reply.chunks(64 * 1024) {
            if s.write_all(chunk).is_err() {
                return;
            }
        }
    });
    let proxy = Proxy::start(&tcp_config("", &[("o", origin.addr, 1)]));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.write_all(b"request of 21 bytes!!").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    assert_eq!(got, payload_block(21, 3 << 20));
}

#[test]
fn server_half_close_lets_the_client_keep_sending() {
    // The origin speaks first, closes its write side, then reads the client's data to EOF.
    let origin = origin(|s: &mut TcpStream| {
        let _ = s.write_all(b"hello");
        let _ = s.shutdown(Shutdown::Write);
        let (n, _) = read_all_hashed(s).expect("origin read");
        assert_eq!(n, 1 << 20);
    });
    let proxy = Proxy::start(&tcp_config("", &[("o", origin.addr, 1)]));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    let mut hello = Vec::new();
    c.read_to_end(&mut hello).unwrap();
    assert_eq!(hello, b"hello");
    c.write_all(&payload_block(3, 1 << 20)).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    proxy.wait_idle(Duration::from_secs(10));
    assert_eq!(proxy.running().stats().bytes_to_server, 1 << 20);
}

/// A server that answers and closes at once: its FIN usually reaches the proxy with the
/// data, and the proxy then sends the data held back for the FIN (`MSG_MORE`). Every
/// answer must still arrive whole, followed by EOF, without waiting for any timer.
#[test]
fn answer_then_close_arrives_whole_on_short_connections() {
    let origin = origin(|s: &mut TcpStream| {
        let mut req = [0u8; 8];
        s.read_exact(&mut req).expect("origin read");
        let size = u64::from_be_bytes(req);
        let _ = s.write_all(&payload_block(size, size as usize));
    });
    let proxy = Proxy::start(&tcp_config("", &[("o", origin.addr, 1)]));
    for i in 0..300u64 {
        let size: u64 = [1, 700, 1460, 20_000, 200_000][(i % 5) as usize];
        let mut c = TcpStream::connect(proxy.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(&size.to_be_bytes()).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).expect("whole answer, then EOF, within 5 s");
        assert!(
            got == payload_block(size, size as usize),
            "connection {i}: {} of {size} bytes",
            got.len()
        );
    }
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}
