//! The io_uring engine: one ring, one thread, every per-connection operation a ring entry.
//!
//! Per connection: multishot accept hands the socket over; `Socket` then `SetSockOpt`
//! (TCP_NODELAY) linked to `Connect` open the origin side; one multishot `Recv` per side
//! takes buffers from the provided-buffer ring; each buffer becomes one `Send`
//! (MSG_WAITALL: the kernel retries until all of it is written, so a short result is an
//! error) and goes back to the ring once sent; a direction's last send is linked to its
//! destination's `Close` when the other direction had ended already, else followed by
//! shutdown(SHUT_WR) of the destination: a plain syscall by default, because the kernel has
//! no non-blocking path for `IORING_OP_SHUTDOWN` and hands every one to an io-wq worker
//! thread (`--shutdown ring` links it to the last send instead, to measure that). Nothing
//! else is a syscall but `io_uring_enter`, once per loop turn.
//!
//! Invariants:
//! - At most one send in flight per direction (sends on one socket stay in order).
//! - `ops[side]` counts the in-flight operations that use `fd[side]` (the server side's
//!   socket/connect setup included); a side's fd is closed only when its count is zero or
//!   by an entry linked behind its last operation, so no operation can resolve a closed
//!   (or reused) descriptor number.
//! - A connection's slot is reused only once both fds are closed and nothing is in flight.
//! - A buffer id is either in the ring, in one direction's queue, or in one send in flight.

use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::{BufRingEntry, Fd, SubmitArgs, Timespec};
use io_uring::{IoUring, cqueue, opcode, squeue};

use crate::{Args, BUF, STOP, Stats, listener, sockaddr};

const OP_ACCEPT: u64 = 0;
const OP_RECV: u64 = 1;
const OP_SEND: u64 = 2;
const OP_SOCKET: u64 = 3;
const OP_SOCKOPT: u64 = 4;
const OP_CONNECT: u64 = 5;
const OP_SHUT: u64 = 6;
const OP_CLOSE: u64 = 7;
const BGID: u16 = 0;
const CLIENT: usize = 0;
const SERVER: usize = 1;

/// user_data: slot << 8 | op << 1 | side-or-direction.
fn ud(slot: u32, op: u64, d: usize) -> u64 {
    (u64::from(slot) << 8) | (op << 1) | d as u64
}

#[derive(Default, PartialEq, Clone, Copy)]
enum Shut {
    #[default]
    None,
    Pending,
    /// Done, or not needed (both sides close).
    Done,
}

/// Direction d reads side d and writes side 1 - d.
#[derive(Default)]
struct Dir {
    recv: bool,
    eof: bool,
    nobufs: bool,
    queue: VecDeque<(u16, u32)>,
    sending: Option<(u16, u32)>,
    shut: Shut,
    /// `--shutdown syscall`: shutdown(2) once the last send completes.
    shut_after_send: bool,
}

impl Dir {
    fn drained(&self) -> bool {
        self.eof && self.queue.is_empty() && self.sending.is_none()
    }
}

#[derive(Default)]
struct Conn {
    live: bool,
    fd: [RawFd; 2],
    connected: bool,
    failed: bool,
    dirs: [Dir; 2],
    ops: [u32; 2],
    closing: [bool; 2],
    closed: [bool; 2],
}

impl Conn {
    /// A fresh connection in a reused slot (the queues keep their capacity).
    fn reset(&mut self, client: RawFd) {
        debug_assert!(!self.live && self.ops == [0, 0]);
        let queues = [std::mem::take(&mut self.dirs[0].queue), std::mem::take(&mut self.dirs[1].queue)];
        *self = Conn { live: true, fd: [client, -1], ..Conn::default() };
        for (d, q) in queues.into_iter().enumerate() {
            debug_assert!(q.is_empty());
            self.dirs[d].queue = q;
        }
    }
}

struct Driver {
    ring: IoUring,
    conns: Vec<Conn>,
    free: Vec<u32>,
    bufs: Vec<u8>,
    br: *mut BufRingEntry,
    br_mask: u16,
    br_tail: u16,
    returned: bool,
    listen: RawFd,
    origin: Box<libc::sockaddr_in>,
    one: Box<libc::c_int>,
    stats: Stats,
    cq: Vec<(u64, i32, u32)>,
    /// Recvs that ended for lack of buffers, re-armed once buffers came back.
    starved: Vec<(u32, usize)>,
    /// Shutdown as a ring entry (linked to the last send) or as a plain syscall: the
    /// kernel has no non-blocking path for IORING_OP_SHUTDOWN and hands every one to an
    /// io-wq worker thread.
    ring_shutdown: bool,
}

pub(crate) fn run(a: &Args) -> io::Result<()> {
    let ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_submit_all()
        .setup_cqsize(8192)
        .build(2048)?;
    let n = a.ring_bufs;
    let ring_bytes = usize::from(n) * std::mem::size_of::<BufRingEntry>();
    // SAFETY: an anonymous private mapping (page aligned, as the kernel wants a buffer
    // ring); checked for MAP_FAILED; never unmapped while the ring is alive (process exit).
    let br = unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            ring_bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        p as *mut BufRingEntry
    };
    // SAFETY: br is a page-aligned mapping of n entries that lives until exit.
    unsafe { ring.submitter().register_buf_ring_with_flags(br as u64, n, BGID, 0)? };
    let mut d = Driver {
        ring,
        conns: Vec::new(),
        free: Vec::new(),
        bufs: vec![0u8; usize::from(n) * BUF],
        br,
        br_mask: n - 1,
        br_tail: 0,
        returned: false,
        listen: listener(a.listen, false)?,
        origin: Box::new(sockaddr(a.origin)),
        one: Box::new(1),
        stats: Stats::default(),
        cq: Vec::with_capacity(8192),
        starved: Vec::new(),
        ring_shutdown: a.ring_shutdown,
    };
    for bid in 0..n {
        d.give_back(bid);
    }
    d.publish();
    d.push(opcode::AcceptMulti::new(Fd(d.listen)).flags(libc::SOCK_CLOEXEC).build().user_data(ud(0, OP_ACCEPT, 0)))?;
    d.run()?;
    d.stats.print("uring");
    Ok(())
}

impl Driver {
    fn push(&mut self, e: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every pointer an entry carries (buffers of `self.bufs`, `self.origin`,
            // `self.one`) lives as long as the driver, which outlives every operation
            // (the process exits after the loop).
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                self.stats.sqes += 1;
                return Ok(());
            }
            self.ring.submit()?;
            self.stats.waits += 1;
        }
    }

    fn buf(&self, bid: u16) -> *const u8 {
        self.bufs[usize::from(bid) * BUF..].as_ptr()
    }

    fn give_back(&mut self, bid: u16) {
        let addr = self.buf(bid) as u64;
        // SAFETY: the index is masked into the mapping's n entries; the kernel reads only
        // entries between its head and the published tail, and this one is past the tail.
        let e = unsafe { &mut *self.br.add(usize::from(self.br_tail & self.br_mask)) };
        e.set_addr(addr);
        e.set_len(BUF as u32);
        e.set_bid(bid);
        self.br_tail = self.br_tail.wrapping_add(1);
        self.returned = true;
    }

    fn publish(&self) {
        // SAFETY: the tail lives in the first entry's reserved field of the mapping, a
        // u16 the kernel reads with acquire semantics; the mapping outlives the ring.
        let tail = unsafe { &*(BufRingEntry::tail(self.br) as *const AtomicU16) };
        tail.store(self.br_tail, Ordering::Release);
    }

    fn run(&mut self) -> io::Result<()> {
        // A bounded wait, so that a stop signal is seen even where the wait is restarted
        // (under valgrind); it never fires while connections are served.
        let ts = Timespec::new().sec(0).nsec(200_000_000);
        let args = SubmitArgs::new().timespec(&ts);
        loop {
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::ETIME)) => {}
                Err(e) => return Err(e),
            }
            self.stats.waits += 1;
            if STOP.load(Ordering::Relaxed) {
                return self.stop_accepting();
            }
            let mut cq = std::mem::take(&mut self.cq);
            cq.extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            self.stats.cqes += cq.len() as u64;
            for &(u, res, flags) in &cq {
                self.complete(u, res, flags)?;
            }
            cq.clear();
            self.cq = cq;
            if self.returned {
                self.publish();
                self.returned = false;
                let starved = std::mem::take(&mut self.starved);
                for &(slot, d) in &starved {
                    let c = &mut self.conns[slot as usize];
                    if c.live && c.dirs[d].nobufs {
                        c.dirs[d].nobufs = false;
                        self.arm_recv(slot, d)?;
                    }
                }
            }
        }
    }

    /// Cancels the multishot accept and closes the listener before exit: a ring's pending
    /// requests hold their files until the ring's (asynchronous) teardown, so the port would
    /// stay in LISTEN for a moment after the process is gone.
    fn stop_accepting(&mut self) -> io::Result<()> {
        self.push(opcode::AsyncCancel::new(ud(0, OP_ACCEPT, 0)).build().user_data(u64::MAX))?;
        for _ in 0..100 {
            match self.ring.submitter().submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => {}
                Err(e) => return Err(e),
            }
            let accept_over = self
                .ring
                .completion()
                .any(|c| c.user_data() == ud(0, OP_ACCEPT, 0) && !cqueue::more(c.flags()));
            if accept_over {
                break;
            }
        }
        // SAFETY: our listener, no request uses it any more.
        unsafe { libc::close(self.listen) };
        Ok(())
    }

    fn complete(&mut self, u: u64, res: i32, flags: u32) -> io::Result<()> {
        let (slot, op, d) = ((u >> 8) as u32, (u >> 1) & 0x7f, (u & 1) as usize);
        if op == OP_ACCEPT {
            if res >= 0 {
                self.accepted(res)?;
            }
            if !cqueue::more(flags) {
                self.push(
                    opcode::AcceptMulti::new(Fd(self.listen))
                        .flags(libc::SOCK_CLOEXEC)
                        .build()
                        .user_data(ud(0, OP_ACCEPT, 0)),
                )?;
            }
            return Ok(());
        }
        let s = slot as usize;
        match op {
            OP_SOCKET => {
                self.conns[s].ops[SERVER] -= 1;
                if res < 0 {
                    self.conns[s].fd[SERVER] = -1;
                    self.fail(slot)?;
                } else {
                    self.conns[s].fd[SERVER] = res;
                    if self.conns[s].failed {
                        // nothing else in flight uses it: closed by settle()
                    } else {
                        let one = &*self.one as *const libc::c_int as *const libc::c_void;
                        let opt = opcode::SetSockOpt::new(
                            Fd(res),
                            libc::IPPROTO_TCP as u32,
                            libc::TCP_NODELAY as u32,
                            one,
                            4,
                        )
                        .build()
                        .flags(squeue::Flags::IO_LINK)
                        .user_data(ud(slot, OP_SOCKOPT, 0));
                        let sa = &*self.origin as *const libc::sockaddr_in as *const libc::sockaddr;
                        let conn = opcode::Connect::new(Fd(res), sa, std::mem::size_of::<libc::sockaddr_in>() as u32)
                            .build()
                            .user_data(ud(slot, OP_CONNECT, 0));
                        self.conns[s].ops[SERVER] += 2;
                        self.push(opt)?;
                        self.push(conn)?;
                    }
                }
            }
            OP_SOCKOPT => {
                self.conns[s].ops[SERVER] -= 1;
                if res < 0 {
                    self.fail(slot)?; // the linked connect is cancelled
                }
            }
            OP_CONNECT => {
                self.conns[s].ops[SERVER] -= 1;
                if res < 0 {
                    self.fail(slot)?;
                } else if !self.conns[s].failed {
                    self.conns[s].connected = true;
                    self.arm_recv(slot, SERVER)?;
                    self.kick(slot, 0)?;
                }
            }
            OP_RECV => {
                let more = cqueue::more(flags);
                if !more {
                    self.conns[s].ops[d] -= 1;
                    self.conns[s].dirs[d].recv = false;
                }
                if res > 0 {
                    let Some(bid) = cqueue::buffer_select(flags) else {
                        return Err(io::Error::other("recv without a buffer"));
                    };
                    self.stats.bytes += res as u64;
                    if self.conns[s].failed {
                        self.give_back(bid);
                    } else {
                        self.conns[s].dirs[d].queue.push_back((bid, res as u32));
                        if !more {
                            self.arm_recv(slot, d)?; // the multishot ended early (CQ full)
                        }
                        self.kick(slot, d)?;
                    }
                } else if res == 0 {
                    self.conns[s].dirs[d].eof = true;
                    self.kick(slot, d)?;
                } else if res == -libc::ENOBUFS {
                    self.stats.nobufs += 1;
                    self.conns[s].dirs[d].nobufs = true;
                    self.starved.push((slot, d));
                } else {
                    self.conns[s].dirs[d].eof = true;
                    self.fail(slot)?;
                }
            }
            OP_SEND => {
                let dst = 1 - d;
                self.conns[s].ops[dst] -= 1;
                let sent = self.conns[s].dirs[d].sending.take();
                if let Some((bid, len)) = sent {
                    self.give_back(bid);
                    if res < 0 || res as u32 != len {
                        self.fail(slot)?;
                    } else if std::mem::take(&mut self.conns[s].dirs[d].shut_after_send) {
                        self.shutdown_now(slot, d);
                    } else {
                        self.kick(slot, d)?;
                    }
                }
            }
            OP_SHUT => {
                let dst = 1 - d;
                self.conns[s].ops[dst] -= 1;
                if self.conns[s].dirs[d].shut == Shut::Pending {
                    self.conns[s].dirs[d].shut = Shut::Done;
                }
                if res < 0 && res != -libc::ECANCELED && res != -libc::ENOTCONN {
                    self.fail(slot)?;
                }
            }
            OP_CLOSE => {
                // d is the side here
                self.conns[s].closed[d] = res >= 0;
                if res < 0 {
                    self.conns[s].closing[d] = false; // cancelled link: settle() closes it
                }
            }
            _ => return Err(io::Error::other("unknown operation")),
        }
        self.settle(slot)
    }

    fn accepted(&mut self, fd: RawFd) -> io::Result<()> {
        self.stats.accepted += 1;
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.conns.push(Conn::default());
                (self.conns.len() - 1) as u32
            }
        };
        let c = &mut self.conns[slot as usize];
        c.reset(fd);
        c.ops[SERVER] += 1;
        self.push(
            opcode::Socket::new(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0)
                .build()
                .user_data(ud(slot, OP_SOCKET, 0)),
        )?;
        self.arm_recv(slot, CLIENT)
    }

    fn arm_recv(&mut self, slot: u32, side: usize) -> io::Result<()> {
        let c = &mut self.conns[slot as usize];
        if c.dirs[side].recv || c.dirs[side].eof || c.failed {
            return Ok(());
        }
        c.dirs[side].recv = true;
        c.ops[side] += 1;
        let fd = c.fd[side];
        self.push(opcode::RecvMulti::new(Fd(fd), BGID).build().user_data(ud(slot, OP_RECV, side)))
    }

    /// Moves direction d on: its next send, or its end (shutdown of the destination, or
    /// nothing when the other direction ended already and both sides are to be closed).
    fn kick(&mut self, slot: u32, d: usize) -> io::Result<()> {
        let s = slot as usize;
        let dst = 1 - d;
        let c = &mut self.conns[s];
        if c.failed || !c.connected || c.dirs[d].sending.is_some() || c.dirs[d].shut != Shut::None {
            return Ok(());
        }
        let other_eof = c.dirs[dst].eof;
        if let Some((bid, len)) = c.dirs[d].queue.pop_front() {
            let last = c.dirs[d].eof && c.dirs[d].queue.is_empty();
            c.dirs[d].sending = Some((bid, len));
            c.ops[dst] += 1;
            let fd = c.fd[dst];
            let mut send = opcode::Send::new(Fd(fd), self.buf(bid), len)
                .flags(libc::MSG_WAITALL | libc::MSG_NOSIGNAL)
                .build()
                .user_data(ud(slot, OP_SEND, d));
            let link = last && (other_eof || self.ring_shutdown);
            if link {
                send = send.flags(squeue::Flags::IO_LINK);
            }
            self.push(send)?;
            if link {
                self.finish(slot, d, other_eof)?;
            } else if last {
                let c = &mut self.conns[s];
                c.dirs[d].shut = Shut::Pending;
                c.dirs[d].shut_after_send = true;
            }
        } else if c.dirs[d].eof {
            if other_eof || self.ring_shutdown {
                self.finish(slot, d, other_eof)?;
            } else {
                self.shutdown_now(slot, d);
            }
        }
        Ok(())
    }

    /// `--shutdown syscall`: shutdown(2) of direction d's destination, inline (it only
    /// queues a FIN).
    fn shutdown_now(&mut self, slot: u32, d: usize) {
        let c = &mut self.conns[slot as usize];
        c.dirs[d].shut = Shut::Done;
        // SAFETY: a plain syscall on a descriptor of this connection that is not closed
        // (closing starts only once both directions are drained and shut).
        unsafe { libc::shutdown(c.fd[1 - d], libc::SHUT_WR) };
    }

    /// Direction d has nothing more to send: shut its destination's write side (linked to
    /// the last send, if one was just queued), or close it when the other direction ended
    /// too (its recv is over, and only this direction's operations use that side).
    fn finish(&mut self, slot: u32, d: usize, other_eof: bool) -> io::Result<()> {
        let s = slot as usize;
        let dst = 1 - d;
        let c = &mut self.conns[s];
        let fd = c.fd[dst];
        if other_eof {
            c.dirs[d].shut = Shut::Done;
            c.closing[dst] = true;
            self.push(opcode::Close::new(Fd(fd)).build().user_data(ud(slot, OP_CLOSE, dst)))
        } else {
            c.dirs[d].shut = Shut::Pending;
            c.ops[dst] += 1;
            self.push(
                opcode::Shutdown::new(Fd(fd), libc::SHUT_WR)
                    .build()
                    .user_data(ud(slot, OP_SHUT, d)),
            )
        }
    }

    /// A failed connection: shut both sides down (pending recvs end, sends fail), return
    /// queued buffers; settle() closes once nothing is in flight.
    fn fail(&mut self, slot: u32) -> io::Result<()> {
        let s = slot as usize;
        if self.conns[s].failed {
            return Ok(());
        }
        self.conns[s].failed = true;
        self.stats.failed += 1;
        for d in 0..2 {
            let q = std::mem::take(&mut self.conns[s].dirs[d].queue);
            for (bid, _) in q {
                self.give_back(bid);
            }
        }
        for side in 0..2 {
            let c = &mut self.conns[s];
            if c.fd[side] >= 0 && !c.closing[side] && c.ops[side] > 0 {
                c.ops[side] += 1;
                let fd = c.fd[side];
                self.push(
                    opcode::Shutdown::new(Fd(fd), libc::SHUT_RDWR)
                        .build()
                        .user_data(ud(slot, OP_SHUT, 1 - side)),
                )?;
            }
        }
        Ok(())
    }

    /// Closes what can be closed, frees the slot once everything is.
    fn settle(&mut self, slot: u32) -> io::Result<()> {
        let s = slot as usize;
        let c = &mut self.conns[s];
        if !c.live {
            return Ok(());
        }
        let ended = c.failed || (c.dirs[0].drained() && c.dirs[1].drained() && c.connected);
        if ended {
            for side in 0..2 {
                if c.fd[side] >= 0 && !c.closing[side] && c.ops[side] == 0 {
                    c.closing[side] = true;
                    let fd = c.fd[side];
                    self.push(opcode::Close::new(Fd(fd)).build().user_data(ud(slot, OP_CLOSE, side)))?;
                    return self.settle(slot);
                }
            }
        }
        let c = &mut self.conns[s];
        let gone = |side: usize| c.fd[side] < 0 || c.closed[side];
        if gone(CLIENT) && gone(SERVER) && c.ops == [0, 0] {
            c.live = false;
            self.stats.closed += 1;
            self.free.push(slot);
        }
        Ok(())
    }
}
