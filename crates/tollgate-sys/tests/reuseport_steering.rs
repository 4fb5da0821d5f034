//! The steering program over real sockets: short-header datagrams reach the socket of the
//! group that their destination connection ID's thread bits name.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use tollgate_sys::reuseport::{attach_quic_steering, is_unsupported};

fn reuseport_udp(addr: SocketAddr) -> UdpSocket {
    use rustix::net::{AddressFamily, SocketType, sockopt};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::DGRAM, None).unwrap();
    sockopt::set_socket_reuseport(&fd, true).unwrap();
    rustix::net::bind(&fd, &addr).unwrap();
    let sock = UdpSocket::from(fd);
    sock.set_nonblocking(true).unwrap();
    sock
}

/// Which socket of `group` the datagram `payload` lands on (bounded wait).
fn landing(group: &[UdpSocket], payload: &[u8]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = [0u8; 64];
    loop {
        for (i, s) in group.iter().enumerate() {
            match s.recv(&mut buf) {
                Ok(n) => {
                    assert_eq!(&buf[..n], payload, "an unexpected datagram on socket {i}");
                    return i;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("recv on socket {i}: {e}"),
            }
        }
        assert!(Instant::now() < deadline, "datagram {payload:?} never arrived");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn short_headers_go_to_the_thread_their_cid_names() {
    let first = reuseport_udp("127.0.0.1:0".parse().unwrap());
    let addr = first.local_addr().unwrap();
    let group = vec![first, reuseport_udp(addr)];
    match attach_quic_steering(&group[0]) {
        Ok(()) => {}
        Err(e) if is_unsupported(&e) => {
            eprintln!("skipped: the kernel refuses reuseport programs: {e}");
            return;
        }
        Err(e) => panic!("attach failed: {e}"),
    }
    // Several clients (4-tuples): the kernel's hash alone would spread them, the program
    // must not.
    for port_try in 0..4u8 {
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        // (first byte, DCID[0], expected socket): the generation bits (top 3) are ignored.
        for (first, dcid0, want) in [(0x40, 0x01, 1), (0x40, 0x00, 0), (0x41, 0x21, 1), (0x7f, 0xe0, 0)] {
            let payload = [first, dcid0, 0xaa, port_try];
            client.send_to(&payload, addr).unwrap();
            assert_eq!(landing(&group, &payload), want, "payload {payload:02x?}");
        }
        // A thread number beyond the group, and a long header: the kernel's hash, so
        // somewhere in the group (never lost).
        for payload in [[0x40, 0x1f, 0xbb, port_try], [0xc0, 0x01, 0xcc, port_try]] {
            client.send_to(&payload, addr).unwrap();
            assert!(landing(&group, &payload) < group.len());
        }
    }
}
