//! The epoll engine: the same relay as `uring`, with readiness and one syscall per step.
//!
//! Per connection: accept4 (until EAGAIN, the listener edge-triggered), socket +
//! setsockopt(TCP_NODELAY) + connect (EINPROGRESS), both sides registered once
//! (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, as tokio registers them), the origin side
//! connected once it is writable and SO_ERROR is 0 (tokio's `TcpStream::connect`). A
//! direction reads into a pooled 16 KiB buffer only while it has nothing pending, writes it
//! all before the next read, and clears its readiness on EAGAIN or on a read shorter than
//! the buffer (tollgate's pump). EOF becomes shutdown(SHUT_WR) on the other side, unless
//! that side had ended already; then both are closed (close() also leaves the epoll set).
//!
//! Invariants: events carry the slot's generation, so a stale event of a closed
//! connection never touches the one that reuses its slot; a buffer is held only while
//! data is pending in its direction.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use crate::{Args, BUF, STOP, Stats, cvt, listener, sockaddr};

const CLIENT: usize = 0;
const SERVER: usize = 1;
const LISTENER: u64 = u64::MAX;

#[derive(Default)]
struct Dir {
    buf: Option<Box<[u8]>>,
    off: usize,
    len: usize,
    eof: bool,
    shut: bool,
}

#[derive(Default)]
struct Conn {
    live: bool,
    gen_: u32,
    fd: [RawFd; 2],
    rd: [bool; 2],
    wr: [bool; 2],
    connected: bool,
    dirs: [Dir; 2],
}

struct Driver {
    ep: RawFd,
    listen: RawFd,
    origin: libc::sockaddr_in,
    conns: Vec<Conn>,
    free: Vec<u32>,
    pool: Vec<Box<[u8]>>,
    stats: Stats,
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(crate) fn run(a: &Args) -> io::Result<()> {
    // SAFETY: epoll_create1 has no pointer arguments.
    let ep = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    let mut d = Driver {
        ep,
        listen: listener(a.listen, true)?,
        origin: sockaddr(a.origin),
        conns: Vec::new(),
        free: Vec::new(),
        pool: Vec::new(),
        stats: Stats::default(),
    };
    d.ctl_add(d.listen, (libc::EPOLLIN | libc::EPOLLET) as u32, LISTENER)?;
    d.run()?;
    d.stats.print("epoll");
    Ok(())
}

impl Driver {
    fn ctl_add(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: data };
        // SAFETY: ev is a local that outlives the call; fd is ours.
        cvt(unsafe { libc::epoll_ctl(self.ep, libc::EPOLL_CTL_ADD, fd, &mut ev) }).map(drop)
    }

    fn run(&mut self) -> io::Result<()> {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
        loop {
            // SAFETY: events has room for the 1024 entries the kernel may write.
            // Bounded (200 ms) as uring's wait: a stop signal is seen under valgrind too.
            let n = unsafe { libc::epoll_wait(self.ep, events.as_mut_ptr(), events.len() as i32, 200) };
            self.stats.waits += 1;
            if STOP.load(Ordering::Relaxed) {
                return Ok(());
            }
            if n < 0 {
                if errno() == libc::EINTR {
                    continue;
                }
                return Err(io::Error::last_os_error());
            }
            for ev in &events[..n as usize] {
                let (flags, data) = (ev.events, ev.u64);
                if data == LISTENER {
                    self.accept_all()?;
                    continue;
                }
                let (gen_, slot, side) = ((data >> 32) as u32, ((data >> 1) & 0x7fff_ffff) as u32, (data & 1) as usize);
                let c = &mut self.conns[slot as usize];
                if !c.live || c.gen_ != gen_ {
                    continue;
                }
                let err = flags & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0;
                if err || flags & (libc::EPOLLIN | libc::EPOLLRDHUP) as u32 != 0 {
                    c.rd[side] = true;
                }
                if err || flags & libc::EPOLLOUT as u32 != 0 {
                    c.wr[side] = true;
                }
                if side == SERVER && !c.connected && c.wr[SERVER] {
                    let mut e: libc::c_int = 0;
                    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
                    // SAFETY: e and len are locals of the sizes passed.
                    let r = unsafe {
                        libc::getsockopt(
                            c.fd[SERVER],
                            libc::SOL_SOCKET,
                            libc::SO_ERROR,
                            &mut e as *mut libc::c_int as *mut libc::c_void,
                            &mut len,
                        )
                    };
                    if r < 0 || e != 0 {
                        self.close(slot, true);
                        continue;
                    }
                    c.connected = true;
                }
                self.process(slot);
            }
        }
    }

    fn accept_all(&mut self) -> io::Result<()> {
        loop {
            // SAFETY: null address pointers are allowed (no peer address wanted).
            let fd = unsafe {
                libc::accept4(
                    self.listen,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                return match errno() {
                    libc::EAGAIN | libc::EINTR | libc::ECONNABORTED | libc::EMFILE | libc::ENFILE => Ok(()),
                    _ => Err(io::Error::last_os_error()),
                };
            }
            self.stats.accepted += 1;
            self.open(fd)?;
        }
    }

    fn open(&mut self, client: RawFd) -> io::Result<()> {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.conns.push(Conn::default());
                (self.conns.len() - 1) as u32
            }
        };
        let s = slot as usize;
        let gen_ = self.conns[s].gen_.wrapping_add(1);
        // SAFETY: plain socket syscalls; the option value and the address are locals or
        // fields that outlive each call, with their exact sizes passed.
        let server = unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0);
            if fd >= 0 {
                let one: libc::c_int = 1;
                libc::setsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    &one as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
                let r = libc::connect(
                    fd,
                    &self.origin as *const libc::sockaddr_in as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                );
                if r < 0 && errno() != libc::EINPROGRESS {
                    libc::close(fd);
                    -1
                } else {
                    fd
                }
            } else {
                -1
            }
        };
        let c = &mut self.conns[s];
        let bufs = [c.dirs[0].buf.take(), c.dirs[1].buf.take()];
        *c = Conn { live: true, gen_, fd: [client, server], ..Conn::default() };
        self.pool.extend(bufs.into_iter().flatten());
        if server < 0 {
            self.close(slot, true);
            return Ok(());
        }
        let ev = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32;
        let tag = (u64::from(gen_) << 32) | (u64::from(slot) << 1);
        self.ctl_add(server, ev, tag | SERVER as u64)?;
        self.ctl_add(client, ev, tag | CLIENT as u64)
    }

    fn process(&mut self, slot: u32) {
        for d in 0..2 {
            if !self.pump(slot, d) {
                self.close(slot, true);
                return;
            }
        }
        let c = &self.conns[slot as usize];
        let done = |d: &Dir| d.eof && d.len == 0 && d.shut;
        if done(&c.dirs[0]) && done(&c.dirs[1]) {
            self.close(slot, false);
        }
    }

    /// Moves direction d (reads side d, writes side 1 - d) as far as readiness allows;
    /// false on an error.
    fn pump(&mut self, slot: u32, d: usize) -> bool {
        let (src, dst) = (d, 1 - d);
        loop {
            let c = &mut self.conns[slot as usize];
            if !c.connected {
                return true;
            }
            let other_eof = c.dirs[dst].eof;
            let dir = &mut c.dirs[d];
            if dir.len > dir.off {
                if !c.wr[dst] {
                    return true;
                }
                let Some(buf) = dir.buf.as_ref() else { return false };
                let rest = &buf[dir.off..dir.len];
                // SAFETY: rest is a live slice of the buffer; its length is passed.
                let n = unsafe { libc::send(c.fd[dst], rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
                if n < 0 {
                    if errno() == libc::EAGAIN {
                        c.wr[dst] = false;
                        return true;
                    }
                    return false;
                }
                dir.off += n as usize;
                if dir.off < dir.len {
                    c.wr[dst] = false; // the send buffer is full: EPOLLOUT comes back
                    return true;
                }
                dir.off = 0;
                dir.len = 0;
                if let Some(b) = dir.buf.take() {
                    self.pool.push(b);
                }
                continue;
            }
            if dir.eof {
                if !dir.shut {
                    dir.shut = true;
                    if !other_eof {
                        // SAFETY: a plain syscall on our descriptor.
                        unsafe { libc::shutdown(c.fd[dst], libc::SHUT_WR) };
                    }
                }
                return true;
            }
            if !c.rd[src] {
                return true;
            }
            let mut buf = dir.buf.take().or_else(|| self.pool.pop()).unwrap_or_else(|| vec![0u8; BUF].into_boxed_slice());
            // SAFETY: buf is a live, writable buffer of the length passed.
            let n = unsafe { libc::recv(c.fd[src], buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                self.pool.push(buf);
                if errno() == libc::EAGAIN {
                    c.rd[src] = false;
                    return true;
                }
                return false;
            }
            if n == 0 {
                self.pool.push(buf);
                dir.eof = true;
                continue;
            }
            self.stats.bytes += n as u64;
            if (n as usize) < buf.len() {
                c.rd[src] = false; // drained: no recv() spent on finding EAGAIN
            }
            dir.len = n as usize;
            dir.buf = Some(buf);
        }
    }

    fn close(&mut self, slot: u32, failed: bool) {
        let c = &mut self.conns[slot as usize];
        if !c.live {
            return;
        }
        c.live = false;
        for fd in c.fd {
            if fd >= 0 {
                // SAFETY: our descriptor, closed once (live is now false).
                unsafe { libc::close(fd) };
            }
        }
        for d in 0..2 {
            if let Some(b) = c.dirs[d].buf.take() {
                self.pool.push(b);
            }
        }
        if failed {
            self.stats.failed += 1;
        }
        self.stats.closed += 1;
        self.free.push(slot);
    }
}
