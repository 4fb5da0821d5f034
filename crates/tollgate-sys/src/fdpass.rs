//! File-descriptor passing (`SCM_RIGHTS`) over Unix stream sockets, and the small framing the
//! master process uses to hand its listening sockets to a worker.
//!
//! Owns: building and parsing the `SCM_RIGHTS` control messages, making every received fd an
//! [`OwnedFd`] at once (so an error path closes it instead of leaking it), and the listener
//! batch format below. It does not own the Unix socket: callers pass it in, blocking, during
//! startup or reload.
//!
//! Received fds are always close-on-exec (`MSG_CMSG_CLOEXEC`). If the kernel had to drop fds
//! because the control buffer was too small (`MSG_CTRUNC`), the call fails and the fds that
//! did arrive are closed.
//!
//! # Listener batch format
//!
//! [`send_listeners`] writes one frame per batch of at most [`MAX_FDS_PER_BATCH`] sockets; the
//! fds ride on the frame's first byte, so a reader that never reads past the end of the
//! current frame never sees the next frame's fds:
//!
//! ```text
//! frame := body_len: u32 LE | body
//! body  := version: u8 (=1) | flags: u8 (bit 0 = last frame) | count: u16 LE
//!          | count × (key_len: u16 LE | key: UTF-8, at most MAX_KEY_LEN bytes)
//! ```
//!
//! The i-th key names the i-th fd of the frame. An empty list is one frame with count 0 and the
//! last flag set.
//!
//! Everything here goes through rustix's safe API: no `unsafe`.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::io::{Errno, IoSlice, IoSliceMut};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer, SendAncillaryMessage,
    SendFlags,
};

/// The kernel's per-message limit (`SCM_MAX_FD`).
pub const MAX_FDS_PER_MSG: usize = 253;
/// At most this many listeners travel in one frame of [`send_listeners`].
pub const MAX_FDS_PER_BATCH: usize = 64;
/// Longest key [`send_listeners`] accepts (bytes).
pub const MAX_KEY_LEN: usize = 1024;

const FRAME_VERSION: u8 = 1;
const FLAG_LAST: u8 = 1;
const HEADER_LEN: usize = 4;
/// Largest frame body a reader accepts: a full batch of maximal keys, plus the body header.
const MAX_BODY_LEN: usize = 4 + MAX_FDS_PER_BATCH * (2 + MAX_KEY_LEN);

fn invalid_input(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn invalid_data(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Sends `payload` with `fds` attached as one `SCM_RIGHTS` message (`MSG_NOSIGNAL`).
///
/// Returns how many payload bytes were written; on a blocking socket that is all of them
/// unless a signal interrupted the write midway, and the caller then writes the rest without
/// fds (the fds travel with the first byte). `payload` must not be empty when `fds` is not: a
/// stream socket cannot carry ancillary data without data. At most [`MAX_FDS_PER_MSG`] fds.
pub fn send_fds(sock: BorrowedFd<'_>, payload: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<usize> {
    if fds.len() > MAX_FDS_PER_MSG {
        return Err(invalid_input("send_fds: more fds than SCM_MAX_FD"));
    }
    if payload.is_empty() && !fds.is_empty() {
        return Err(invalid_input("send_fds: fds need at least one payload byte"));
    }
    let mut space = Vec::new();
    let mut control = SendAncillaryBuffer::default();
    if !fds.is_empty() {
        let msg = SendAncillaryMessage::ScmRights(fds);
        space.resize(msg.size(), MaybeUninit::<u8>::uninit());
        control = SendAncillaryBuffer::new(&mut space);
        if !control.push(msg) {
            return Err(io::Error::other("send_fds: control buffer too small"));
        }
    }
    let iov = [IoSlice::new(payload)];
    loop {
        match rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(n) => return Ok(n),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receives into `buf`, accepting at most `max_fds` fds (`MSG_CMSG_CLOEXEC`).
///
/// Returns the number of bytes read (0 at end of stream) and the fds that came with them. If
/// the sender attached more than `max_fds` fds (or the kernel reports `MSG_CTRUNC`), fails
/// with [`io::ErrorKind::InvalidData`]; the fds that did arrive are closed, the kernel closes
/// any it could not deliver, and the bytes read are lost with them. `max_fds` is capped at
/// [`MAX_FDS_PER_MSG`]. `EINTR` is retried.
pub fn recv_fds(sock: BorrowedFd<'_>, buf: &mut [u8], max_fds: usize) -> io::Result<(usize, Vec<OwnedFd>)> {
    let max_fds = max_fds.min(MAX_FDS_PER_MSG);
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(max_fds))];
    let mut control = if max_fds == 0 {
        RecvAncillaryBuffer::default()
    } else {
        RecvAncillaryBuffer::new(&mut space)
    };
    let mut iov = [IoSliceMut::new(buf)];
    let msg = loop {
        match rustix::net::recvmsg(sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(msg) => break msg,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    // Take ownership of every fd first, so that any early return below closes them.
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    // The control buffer is rounded up for alignment and may hold a few more fds than
    // asked for; the limit is `max_fds` all the same.
    if msg.flags.contains(ReturnFlags::CTRUNC) || fds.len() > max_fds {
        drop(fds);
        return Err(invalid_data("recv_fds: control data truncated (too many fds sent)"));
    }
    Ok((msg.bytes, fds))
}

/// Sends `listeners` as keyed batches of at most [`MAX_FDS_PER_BATCH`] fds (format in the
/// module doc). Blocking socket expected.
pub fn send_listeners<K: AsRef<str>>(sock: BorrowedFd<'_>, listeners: &[(K, BorrowedFd<'_>)]) -> io::Result<()> {
    if listeners.iter().any(|(key, _)| key.as_ref().len() > MAX_KEY_LEN) {
        return Err(invalid_input("send_listeners: key longer than MAX_KEY_LEN"));
    }
    let mut batches = listeners.chunks(MAX_FDS_PER_BATCH).peekable();
    if batches.peek().is_none() {
        return send_frame::<K>(sock, &[], true);
    }
    while let Some(batch) = batches.next() {
        send_frame(sock, batch, batches.peek().is_none())?;
    }
    Ok(())
}

fn send_frame<K: AsRef<str>>(sock: BorrowedFd<'_>, batch: &[(K, BorrowedFd<'_>)], last: bool) -> io::Result<()> {
    let count = u16::try_from(batch.len()).map_err(|_| invalid_input("batch too large"))?;
    let mut frame = vec![0u8; HEADER_LEN];
    frame.push(FRAME_VERSION);
    frame.push(if last { FLAG_LAST } else { 0 });
    frame.extend_from_slice(&count.to_le_bytes());
    for (key, _) in batch {
        let key = key.as_ref().as_bytes();
        let len = u16::try_from(key.len()).map_err(|_| invalid_input("key too long"))?;
        frame.extend_from_slice(&len.to_le_bytes());
        frame.extend_from_slice(key);
    }
    let body_len = u32::try_from(frame.len() - HEADER_LEN).map_err(|_| invalid_input("frame too large"))?;
    frame.splice(..HEADER_LEN, body_len.to_le_bytes());

    let fds: Vec<BorrowedFd<'_>> = batch.iter().map(|(_, fd)| *fd).collect();
    let mut sent = send_fds(sock, &frame, &fds)?;
    while let Some(rest) = frame.get(sent..).filter(|rest| !rest.is_empty()) {
        match send_fds(sock, rest, &[])? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => sent += n,
        }
    }
    Ok(())
}

/// Receives what [`send_listeners`] sent, in order. Blocking socket expected.
///
/// Fails with [`io::ErrorKind::InvalidData`] on a malformed frame (every fd received so far
/// is closed) and [`io::ErrorKind::UnexpectedEof`] if the peer closes mid-stream.
pub fn recv_listeners(sock: BorrowedFd<'_>) -> io::Result<Vec<(String, OwnedFd)>> {
    let mut out = Vec::new();
    loop {
        let mut fds = Vec::new();
        let mut header = [0u8; HEADER_LEN];
        read_exact_with_fds(sock, &mut header, &mut fds)?;
        let body_len = usize::try_from(u32::from_le_bytes(header)).map_err(|_| invalid_data("frame too large"))?;
        if body_len > MAX_BODY_LEN {
            return Err(invalid_data("recv_listeners: frame too large"));
        }
        let mut body = vec![0u8; body_len];
        read_exact_with_fds(sock, &mut body, &mut fds)?;
        let (last, keys) = parse_body(&body)?;
        if keys.len() != fds.len() {
            return Err(invalid_data("recv_listeners: key count differs from fd count"));
        }
        out.extend(keys.into_iter().zip(fds));
        if last {
            return Ok(out);
        }
    }
}

/// Fills `buf` completely, collecting any fds that arrive on the way.
fn read_exact_with_fds(sock: BorrowedFd<'_>, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<()> {
    let mut filled = 0;
    while let Some(rest) = buf.get_mut(filled..).filter(|rest| !rest.is_empty()) {
        let (n, got) = recv_fds(sock, rest, MAX_FDS_PER_BATCH)?;
        fds.extend(got);
        if fds.len() > MAX_FDS_PER_BATCH {
            return Err(invalid_data("recv_listeners: too many fds in one frame"));
        }
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        filled += n;
    }
    Ok(())
}

fn parse_body(body: &[u8]) -> io::Result<(bool, Vec<String>)> {
    let mut r = Reader(body);
    if r.u8()? != FRAME_VERSION {
        return Err(invalid_data("recv_listeners: unknown frame version"));
    }
    let last = r.u8()? & FLAG_LAST != 0;
    let count = usize::from(r.u16()?);
    if count > MAX_FDS_PER_BATCH {
        return Err(invalid_data("recv_listeners: batch too large"));
    }
    let mut keys = Vec::with_capacity(count);
    for _ in 0..count {
        let len = usize::from(r.u16()?);
        if len > MAX_KEY_LEN {
            return Err(invalid_data("recv_listeners: key too long"));
        }
        let key = std::str::from_utf8(r.take(len)?).map_err(|_| invalid_data("recv_listeners: key is not UTF-8"))?;
        keys.push(key.to_owned());
    }
    if !r.0.is_empty() {
        return Err(invalid_data("recv_listeners: trailing bytes in frame"));
    }
    Ok((last, keys))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if n > self.0.len() {
            return Err(invalid_data("recv_listeners: truncated frame"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u8(&mut self) -> io::Result<u8> {
        let b = self.take(1)?;
        Ok(b.first().copied().unwrap_or(0))
    }
    fn u16(&mut self) -> io::Result<u16> {
        let b = self.take(2)?;
        let mut le = [0u8; 2];
        le.copy_from_slice(b);
        Ok(u16::from_le_bytes(le))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn three_listeners_to_another_thread_and_accept() {
        let (tx, rx) = UnixStream::pair().unwrap();
        let listeners: Vec<TcpListener> = (0..3).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        let keys: Vec<String> = addrs.iter().map(|a| format!("tcp:{a}#0")).collect();

        let receiver = std::thread::spawn(move || recv_listeners(rx.as_fd()).unwrap());
        let batch: Vec<(String, BorrowedFd<'_>)> =
            keys.iter().cloned().zip(listeners.iter().map(|l| l.as_fd())).collect();
        send_listeners(tx.as_fd(), &batch).unwrap();
        drop(listeners); // the receiver now holds the only copies

        let got = receiver.join().unwrap();
        assert_eq!(got.len(), 3);
        for ((key, fd), (want_key, addr)) in got.into_iter().zip(keys.iter().zip(&addrs)) {
            assert_eq!(&key, want_key);
            let listener = TcpListener::from(fd);
            assert_eq!(listener.local_addr().unwrap(), *addr);
            let mut client = TcpStream::connect(addr).unwrap();
            let (mut server, _) = listener.accept().unwrap();
            client.write_all(b"ping").unwrap();
            let mut buf = [0u8; 4];
            server.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"ping");
        }
    }

    #[test]
    fn two_hundred_fds_in_batches() {
        let (tx, rx) = UnixStream::pair().unwrap();
        let listeners: Vec<TcpListener> = (0..200).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        let batch: Vec<(String, BorrowedFd<'_>)> = listeners
            .iter()
            .enumerate()
            .map(|(i, l)| (format!("tcp:{}#{i}", l.local_addr().unwrap()), l.as_fd()))
            .collect();
        let receiver = std::thread::spawn(move || recv_listeners(rx.as_fd()).unwrap());
        send_listeners(tx.as_fd(), &batch).unwrap();
        let got = receiver.join().unwrap();
        assert_eq!(got.len(), 200);
        for (i, ((key, fd), original)) in got.into_iter().zip(&listeners).enumerate() {
            let addr = original.local_addr().unwrap();
            assert_eq!(key, format!("tcp:{addr}#{i}"));
            assert_eq!(TcpListener::from(fd).local_addr().unwrap(), addr);
        }
    }

    #[test]
    fn empty_list_round_trips() {
        let (tx, rx) = UnixStream::pair().unwrap();
        send_listeners::<String>(tx.as_fd(), &[]).unwrap();
        assert!(recv_listeners(rx.as_fd()).unwrap().is_empty());
    }

    #[test]
    fn raw_send_recv_and_cloexec() {
        let (tx, rx) = UnixStream::pair().unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(send_fds(tx.as_fd(), b"x", &[l.as_fd()]).unwrap(), 1);
        let mut buf = [0u8; 8];
        let (n, fds) = recv_fds(rx.as_fd(), &mut buf, 4).unwrap();
        assert_eq!((n, fds.len()), (1, 1));
        let flags = rustix::io::fcntl_getfd(&fds[0]).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    }

    #[test]
    fn truncated_control_data_is_an_error_and_stream_continues() {
        let (tx, rx) = UnixStream::pair().unwrap();
        let ls: Vec<TcpListener> = (0..3).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        let fds: Vec<BorrowedFd<'_>> = ls.iter().map(|l| l.as_fd()).collect();
        send_fds(tx.as_fd(), b"a", &fds).unwrap();
        let mut buf = [0u8; 1];
        let err = recv_fds(rx.as_fd(), &mut buf, 1).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);

        send_fds(tx.as_fd(), b"b", &fds).unwrap();
        let err = recv_fds(rx.as_fd(), &mut buf, 0).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);

        send_fds(tx.as_fd(), b"c", &fds).unwrap();
        let (n, got) = recv_fds(rx.as_fd(), &mut buf, 3).unwrap();
        assert_eq!((n, got.len(), buf[0]), (1, 3, b'c'));
    }

    #[test]
    fn bad_input_is_rejected() {
        let (tx, rx) = UnixStream::pair().unwrap();
        assert_eq!(
            send_fds(tx.as_fd(), b"", &[rx.as_fd()]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let long = "k".repeat(MAX_KEY_LEN + 1);
        assert_eq!(
            send_listeners(tx.as_fd(), &[(long, rx.as_fd())]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        // A frame claiming one key but carrying no fd.
        let mut tx = tx;
        let body = [FRAME_VERSION, FLAG_LAST, 1, 0, 1, 0, b'k'];
        tx.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
        tx.write_all(&body).unwrap();
        assert_eq!(
            recv_listeners(rx.as_fd()).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        drop(tx);
        assert_eq!(
            recv_listeners(rx.as_fd()).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }
}
