//! uring-proto: a measured prototype (issue 28 item 6), not part of tollgate.
//!
//! One single-threaded L4 relay, as tollgate's TCP mode does it per connection — accept,
//! connect to the origin (TCP_NODELAY on both sides), relay both ways through 16 KiB
//! buffers, EOF in one direction becomes shutdown(SHUT_WR) on the other, close both once
//! both directions ended — on two engines with the same rules, so that a comparison
//! separates "io_uring against epoll" from "tollgate's own overhead":
//!
//! - [`uring`]: multishot accept, multishot recv from one provided buffer ring, sends with
//!   MSG_WAITALL, the connection's last send linked to its shutdown or close, socket +
//!   setsockopt + connect submitted as ring operations: no syscall per connection beyond
//!   `io_uring_enter`, one per loop turn (DEFER_TASKRUN, SINGLE_ISSUER).
//! - [`epoll`]: edge-triggered epoll with readiness cached per socket (as tokio's reactor),
//!   accept4 until EAGAIN, a read shorter than the buffer counts as "drained" (tollgate's
//!   trick), a pooled buffer held only while data is in flight.
//!
//! Invariants: loopback-only use is the caller's (bench/compare binds 127.0.0.1); it runs
//! until SIGINT or SIGTERM and then prints its counters (connections, bytes, io_uring_enter
//! or epoll_wait calls) on stderr. `unsafe` is allowed here because this crate is outside
//! the tollgate workspace; every block says why it holds.

mod epoll;
mod uring;

use std::net::SocketAddrV4;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGINT/SIGTERM; both loops check it when their wait returns EINTR.
pub(crate) static STOP: AtomicBool = AtomicBool::new(false);

/// The relay's per-direction buffer: tollgate's bench config (`buffer_size = "16KiB"`).
pub(crate) const BUF: usize = 16 * 1024;

pub(crate) struct Args {
    pub listen: SocketAddrV4,
    pub origin: SocketAddrV4,
    /// Buffers in the io_uring provided-buffer ring (a power of two).
    pub ring_bufs: u16,
    /// uring: shutdown(SHUT_WR) as a ring entry linked to the last send (`--shutdown
    /// ring`), or as a plain syscall after it (`--shutdown syscall`, the default).
    pub ring_shutdown: bool,
}

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn usage() -> ! {
    eprintln!("usage: uring-proto uring|epoll --listen 127.0.0.1:PORT --origin 127.0.0.1:PORT [--ring-bufs N] [--shutdown syscall|ring]");
    std::process::exit(2)
}

fn main() {
    let mut it = std::env::args().skip(1);
    let engine = it.next().unwrap_or_else(|| usage());
    let (mut listen, mut origin, mut ring_bufs, mut ring_shutdown) = (None, None, 1024u16, false);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| usage());
        match k.as_str() {
            "--listen" => listen = v.parse().ok(),
            "--origin" => origin = v.parse().ok(),
            "--ring-bufs" => ring_bufs = v.parse().unwrap_or_else(|_| usage()),
            "--shutdown" => {
                ring_shutdown = match v.as_str() {
                    "ring" => true,
                    "syscall" => false,
                    _ => usage(),
                }
            }
            _ => usage(),
        }
    }
    let (Some(listen), Some(origin)) = (listen, origin) else { usage() };
    if !ring_bufs.is_power_of_two() {
        usage()
    }
    // No SA_RESTART: the loop's wait returns EINTR and sees STOP.
    // SAFETY: on_signal only stores to an atomic (async-signal-safe); the sigaction struct
    // is zeroed (an empty mask) and lives across the call.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let args = Args { listen, origin, ring_bufs, ring_shutdown };
    let r = match engine.as_str() {
        "uring" => uring::run(&args),
        "epoll" => epoll::run(&args),
        _ => usage(),
    };
    if let Err(e) = r {
        eprintln!("uring-proto {engine}: {e}");
        std::process::exit(1);
    }
}

/// A sockaddr_in for 127.0.0.1:port style addresses.
pub(crate) fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
        sin_zero: [0; 8],
    }
}

pub(crate) fn cvt(r: libc::c_int) -> std::io::Result<libc::c_int> {
    if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(r) }
}

/// The listening socket, as tollgate's: SO_REUSEADDR, TCP_NODELAY (accepted sockets inherit
/// it, so no setsockopt per accepted connection), backlog 1024; non-blocking for epoll.
pub(crate) fn listener(addr: SocketAddrV4, nonblocking: bool) -> std::io::Result<RawFd> {
    let ty = libc::SOCK_STREAM | libc::SOCK_CLOEXEC | if nonblocking { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: plain socket syscalls on a descriptor this function owns; the option values
    // and the address are locals that outlive each call, with their exact sizes passed.
    unsafe {
        let fd = cvt(libc::socket(libc::AF_INET, ty, 0))?;
        let one: libc::c_int = 1;
        let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let p = &one as *const libc::c_int as *const libc::c_void;
        cvt(libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, p, len))?;
        cvt(libc::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, p, len))?;
        let sa = sockaddr(addr);
        let salen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        cvt(libc::bind(fd, &sa as *const libc::sockaddr_in as *const libc::sockaddr, salen))?;
        cvt(libc::listen(fd, 1024))?;
        Ok(fd)
    }
}

/// Counters printed at exit (stderr), for the syscall and per-connection figures.
#[derive(Default, Debug)]
pub(crate) struct Stats {
    pub accepted: u64,
    pub closed: u64,
    pub failed: u64,
    pub bytes: u64,
    /// io_uring_enter calls (uring) or epoll_wait calls (epoll).
    pub waits: u64,
    pub sqes: u64,
    pub cqes: u64,
    pub nobufs: u64,
}

impl Stats {
    pub fn print(&self, engine: &str) {
        eprintln!(
            "uring-proto {engine}: accepted {} closed {} failed {} bytes {} waits {} sqes {} cqes {} nobufs {}",
            self.accepted, self.closed, self.failed, self.bytes, self.waits, self.sqes, self.cqes, self.nobufs
        );
    }
}
