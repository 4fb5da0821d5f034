//! Pipes and `splice(2)`: moving bytes socket → pipe → socket without copying them through
//! user space.
//!
//! Owns: creating the pipe pair (non-blocking, close-on-exec), sizing it, and one `splice`
//! step. It does not own the relay loop: the caller (the TCP proxy) keeps track of how many
//! bytes sit in the pipe and must drain the pipe fully before splicing more from the source
//! socket, so that `WouldBlock` on the source always means "socket empty", never "pipe full".
//!
//! Everything here goes through rustix's safe API: no `unsafe`.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::pipe::{PipeFlags, SpliceFlags};

/// Creates a pipe with `O_NONBLOCK | O_CLOEXEC`; returns `(read_end, write_end)`.
pub fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?)
}

/// Asks the kernel to resize the pipe to `bytes` (`F_SETPIPE_SZ`), best effort.
///
/// Returns the capacity the pipe actually has afterwards. The kernel rounds up to a power of
/// two pages and refuses sizes above `/proc/sys/fs/pipe-max-size` for unprivileged users; on
/// refusal the pipe keeps its old size and that size is returned (or the error if even
/// reading it back fails).
pub fn set_pipe_size(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<usize> {
    match rustix::pipe::fcntl_setpipe_size(fd, bytes) {
        Ok(size) => Ok(size),
        Err(_) => Ok(rustix::pipe::fcntl_getpipe_size(fd)?),
    }
}

/// One `splice(from, to, len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK)` step.
///
/// One of `from`/`to` must be a pipe. Returns the number of bytes moved, `Ok(0)` when `from`
/// is at end of file, and an error of kind [`io::ErrorKind::WouldBlock`] when nothing can be
/// moved right now (source empty or destination full). `SPLICE_F_NONBLOCK` only makes the
/// *pipe* side non-blocking; the socket side blocks unless the socket is `O_NONBLOCK`.
/// `EINTR` is retried here.
pub fn splice_move(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    loop {
        match rustix::pipe::splice(from, None, to, None, len, SpliceFlags::MOVE | SpliceFlags::NONBLOCK) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;
    use std::time::Duration;

    fn tcp_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    #[test]
    fn pipe_is_nonblocking_and_resizable() {
        let (r, w) = pipe_pair().unwrap();
        let size = set_pipe_size(w.as_fd(), 1 << 20).unwrap();
        assert!(size >= 4096, "pipe size {size}");
        // Nothing written yet: splicing out of the pipe must not block.
        let (_a, b) = tcp_pair();
        let err = splice_move(r.as_fd(), b.as_fd(), 4096).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    /// 1 MiB: writer → [src socket] → pipe → [dst socket] → reader, both relay sockets
    /// non-blocking, the pipe drained fully before the next splice from the source.
    #[test]
    fn relay_one_mib_through_a_pipe() {
        const TOTAL: usize = 1 << 20;
        let data: Vec<u8> = (0..TOTAL).map(|i| (i * 7 + i / 251) as u8).collect();

        let (mut writer, src) = tcp_pair();
        let (dst, mut reader) = tcp_pair();
        src.set_nonblocking(true).unwrap();
        dst.set_nonblocking(true).unwrap();

        let to_send = data.clone();
        let writer_thread = std::thread::spawn(move || {
            writer.write_all(&to_send).unwrap();
            // Dropping `writer` closes it: the relay sees EOF.
        });
        let reader_thread = std::thread::spawn(move || {
            let mut got = Vec::with_capacity(TOTAL);
            reader.read_to_end(&mut got).unwrap();
            got
        });

        let (pipe_r, pipe_w) = pipe_pair().unwrap();
        set_pipe_size(pipe_w.as_fd(), 256 * 1024).unwrap();
        let mut in_pipe = 0usize;
        let mut moved = 0usize;
        let mut eof = false;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !(eof && in_pipe == 0) {
            assert!(std::time::Instant::now() < deadline, "relay stalled");
            let mut progress = false;
            if in_pipe == 0 && !eof {
                match splice_move(src.as_fd(), pipe_w.as_fd(), 64 * 1024) {
                    Ok(0) => eof = true,
                    Ok(n) => {
                        in_pipe += n;
                        progress = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("splice in: {e}"),
                }
            }
            if in_pipe > 0 {
                match splice_move(pipe_r.as_fd(), dst.as_fd(), in_pipe) {
                    Ok(n) => {
                        in_pipe -= n;
                        moved += n;
                        progress = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("splice out: {e}"),
                }
            }
            if !progress {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        drop(dst);
        writer_thread.join().unwrap();
        let got = reader_thread.join().unwrap();
        assert_eq!(moved, TOTAL);
        assert_eq!(got.len(), TOTAL);
        assert!(got == data, "relayed bytes differ");
    }
}
