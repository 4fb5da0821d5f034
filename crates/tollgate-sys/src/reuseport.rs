//! The kernel's steering of QUIC datagrams among one address's SO_REUSEPORT UDP sockets
//! (`SO_ATTACH_REUSEPORT_CBPF`), so a datagram reaches the worker thread that owns its
//! connection without being read by another thread first.
//!
//! Owns: the classic BPF program and its attachment. The program relies on the layout of
//! the connection IDs tollgate issues (12 bytes, `quic::cid` in the product crate): byte 0 is
//! `[generation mod 8: 3 bits][worker thread: 5 bits]`. A short-header packet (first byte's
//! top bit clear) carries the destination connection ID right after the first byte, so the
//! program returns `DCID[0] & 0x1f`, the owning thread, as the index of the socket in the
//! group. Long-header packets (Initial, 0-RTT, Handshake: the connection's first datagrams,
//! whose DCID the client chose) get an out-of-range index, which makes the kernel fall back
//! to its 4-tuple hash, as without a program.
//!
//! Invariants the caller keeps: socket `i` of the group (the kernel numbers them in bind
//! order) is worker thread `i`'s, and no socket of the group is closed while the group
//! serves (closing one moves the last socket into its slot). Threads beyond 32, and IDs of
//! another generation whose thread number is now out of range, fall back to the hash; the
//! product crate forwards such misrouted datagrams between threads.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// `SO_ATTACH_REUSEPORT_CBPF` from `asm-generic/socket.h` (Linux 4.5).
const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;

/// The bits of a connection ID's first byte that name the owning worker thread: the kernel
/// steers by them for at most this many + 1 threads.
pub const CID_THREAD_MASK: u8 = 0x1f;

// Classic BPF opcodes (`linux/filter.h`).
/// `BPF_LD | BPF_B | BPF_ABS`: A = the byte at offset k of the UDP payload.
const LDB_ABS: u16 = 0x30;
/// `BPF_JMP | BPF_JSET | BPF_K`: if A & k jump jt forward, else jf.
const JSET_K: u16 = 0x45;
/// `BPF_ALU | BPF_AND | BPF_K`: A &= k.
const AND_K: u16 = 0x54;
/// `BPF_RET | BPF_A`: return A.
const RET_A: u16 = 0x16;
/// `BPF_RET | BPF_K`: return k.
const RET_K: u16 = 0x06;

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The steering program (module doc). A datagram too short for a load makes the program
/// return 0 (socket 0): such a datagram is no QUIC packet anyone will accept anyway.
const PROGRAM: [libc::sock_filter; 6] = [
    // A = first byte of the UDP payload.
    insn(LDB_ABS, 0, 0, 0),
    // Long header (top bit set): to the last instruction (1 + 3 ahead), the kernel's hash.
    insn(JSET_K, 3, 0, 0x80),
    // A = DCID[0]; its low 5 bits name the thread.
    insn(LDB_ABS, 0, 0, 1),
    insn(AND_K, 0, 0, CID_THREAD_MASK as u32),
    insn(RET_A, 0, 0, 0),
    // Out of range: the kernel's 4-tuple hash.
    insn(RET_K, 0, 0, 0xffff_ffff),
];

/// Attaches the steering program to the SO_REUSEPORT group `sock` belongs to (any socket of
/// the group will do: the program is the group's). Errors are the kernel's: EPERM or
/// ENOPROTOOPT where classic reuseport programs are not allowed, EINVAL if `sock` is not
/// bound with SO_REUSEPORT.
pub fn attach_quic_steering(sock: &impl AsFd) -> io::Result<()> {
    // The kernel copies the program in; it only reads through `filter`.
    let mut program = PROGRAM;
    let prog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_mut_ptr(),
    };
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::sock_fprog>())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "option value too long"))?;
    let fd = sock.as_fd();
    // SAFETY: `fd` is a live descriptor for the duration of the borrow; `prog` is a valid
    // `sock_fprog` whose `filter` points to `len` initialised `sock_filter`s in `program`,
    // and both outlive the call; the kernel only reads them (it copies the program).
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            std::ptr::from_ref(&prog).cast(),
            len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes the steering program off `sock`'s SO_REUSEPORT group: the kernel hashes every
/// datagram to a socket again. For tests of what happens without it (a kernel that refused
/// the program): tollgate itself never detaches it.
pub fn detach_steering(sock: &impl AsFd) -> io::Result<()> {
    let fd = sock.as_fd();
    let unused: libc::c_int = 0;
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "option value too long"))?;
    // SAFETY: `fd` is a live descriptor for the duration of the borrow; the option value
    // (ignored by the kernel for this option) is a valid `c_int` that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DETACH_REUSEPORT_BPF,
            std::ptr::from_ref(&unused).cast(),
            len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `e` from [`attach_quic_steering`] means the kernel does not allow the program
/// here (rather than a mistake of ours).
pub fn is_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn the_jump_lands_on_the_fallback() {
        let jset = PROGRAM[1];
        let target = 1 + 1 + usize::from(jset.jt);
        assert_eq!(target, PROGRAM.len() - 1);
        assert_eq!((PROGRAM[target].code, PROGRAM[target].k), (RET_K, 0xffff_ffff));
    }

    #[test]
    fn attaches_to_a_reuseport_group() {
        let group = group(2);
        match attach_quic_steering(&group[0]) {
            Ok(()) => {}
            Err(e) if is_unsupported(&e) => eprintln!("skipped: the kernel refuses reuseport programs: {e}"),
            Err(e) => panic!("attach failed: {e}"),
        }
    }

    #[test]
    fn refused_on_a_socket_without_reuseport() {
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(attach_quic_steering(&plain).is_err());
    }

    /// `n` SO_REUSEPORT UDP sockets on one 127.0.0.1 port, in bind order.
    fn group(n: usize) -> Vec<UdpSocket> {
        let first = reuseport_udp("127.0.0.1:0".parse().unwrap());
        let addr = first.local_addr().unwrap();
        let mut out = vec![first];
        out.extend((1..n).map(|_| reuseport_udp(addr)));
        out
    }

    fn reuseport_udp(addr: std::net::SocketAddr) -> UdpSocket {
        use rustix::net::{AddressFamily, SocketType, sockopt};
        let fd = rustix::net::socket(AddressFamily::INET, SocketType::DGRAM, None).unwrap();
        sockopt::set_socket_reuseport(&fd, true).unwrap();
        rustix::net::bind(&fd, &addr).unwrap();
        UdpSocket::from(fd)
    }
}
