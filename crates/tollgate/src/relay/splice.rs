//! splice(2) between two plain sockets through a pooled pipe: the one step every splicing
//! path takes (`pump`'s unbounded relay, and `Exact`), and `Exact`, the mover of a byte
//! count known ahead (an HTTP body with a Content-Length).
//!
//! Owns: `splice_step` (fill the empty pipe from the source, or drain it into the
//! destination), `Exact` (exactly `len` bytes, never one more from the source) and
//! `SpliceEnd`, what an HTTP body's two ends say about themselves (is there a plain socket
//! under them, and count what was spliced into them).
//!
//! Invariants: the pipe is drained fully before the next splice from the source, so
//! `WouldBlock` on the source always means "socket empty", never "pipe full". `Exact` asks
//! the source for at most what is left of its length, so the bytes after a body (the next
//! response, a pipelined request) stay in the socket for the userspace parser. A pipe goes
//! back to the pool only empty (`pipes::PooledPipe`'s drop): whatever interrupts a move —
//! an error, a timeout, a kill dropping the future — closes a pipe that still holds bytes.

use std::io;
use std::os::fd::AsFd;
use std::task::{Context, Poll, ready};

use tokio::io::Interest;
use tokio::net::TcpStream;

use super::counted::Counted;
use super::lazy::LazySocket;
use super::pipes::PooledPipe;
use super::server_conn::ServerConn;

/// What one splice step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spliced {
    /// This many source bytes now sit in the pipe.
    In(usize),
    /// This many bytes left the pipe for the destination.
    Out(usize),
    /// The source reached EOF with the pipe empty.
    Eof,
}

/// A splice step that failed, and on which side.
#[derive(Debug)]
pub(crate) enum SpliceFailed {
    /// Reading the source failed (the pipe is empty then: a source is read only into an
    /// empty pipe).
    Source(io::Error),
    /// Writing the destination failed; the pipe may hold bytes.
    Destination(io::Error),
}

/// One splice step: fill the empty pipe from `src` (at most `max_in` bytes, at least 1), or
/// drain it into `dst`.
pub(crate) fn splice_step(
    cx: &mut Context<'_>,
    src: &TcpStream,
    dst: &TcpStream,
    pipe: &mut PooledPipe,
    max_in: usize,
) -> Poll<Result<Spliced, SpliceFailed>> {
    let (Some(r), Some(w)) = (pipe.read_end(), pipe.write_end()) else {
        return Poll::Ready(Err(SpliceFailed::Source(io::ErrorKind::BrokenPipe.into())));
    };
    if pipe.pending == 0 {
        let want = max_in.clamp(1, pipe.capacity.max(1));
        loop {
            let moved = src.try_io(Interest::READABLE, || {
                tollgate_sys::splice::splice_move(src.as_fd(), w, want)
            });
            match moved {
                Ok(0) => return Poll::Ready(Ok(Spliced::Eof)),
                Ok(n) => {
                    pipe.pending = n;
                    return Poll::Ready(Ok(Spliced::In(n)));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Err(e) = ready!(src.poll_read_ready(cx)) {
                        return Poll::Ready(Err(SpliceFailed::Source(e)));
                    }
                }
                Err(e) => return Poll::Ready(Err(SpliceFailed::Source(e))),
            }
        }
    }
    loop {
        let moved = dst.try_io(Interest::WRITABLE, || {
            tollgate_sys::splice::splice_move(r, dst.as_fd(), pipe.pending)
        });
        match moved {
            Ok(n) => {
                pipe.pending = pipe.pending.saturating_sub(n);
                return Poll::Ready(Ok(Spliced::Out(n)));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if let Err(e) = ready!(dst.poll_write_ready(cx)) {
                    return Poll::Ready(Err(SpliceFailed::Destination(e)));
                }
            }
            Err(e) => return Poll::Ready(Err(SpliceFailed::Destination(e))),
        }
    }
}

/// Exactly `len` bytes from one socket to another through a pipe on loan.
pub(crate) struct Exact {
    pipe: PooledPipe,
    /// Bytes not yet taken from the source.
    left: u64,
}

impl Exact {
    pub(crate) fn new(pipe: PooledPipe, len: u64) -> Self {
        Exact { pipe, left: len }
    }

    /// Every byte reached the destination (the pipe is empty: it goes back to the pool).
    pub(crate) fn is_done(&self) -> bool {
        self.left == 0 && self.pipe.pending == 0
    }

    /// One step (see `splice_step`); never asks the source for more than is left. Call only
    /// while not `is_done`.
    pub(crate) fn poll_step(
        &mut self,
        cx: &mut Context<'_>,
        src: &TcpStream,
        dst: &TcpStream,
    ) -> Poll<Result<Spliced, SpliceFailed>> {
        let max_in = usize::try_from(self.left).unwrap_or(usize::MAX);
        if self.pipe.pending == 0 && max_in == 0 {
            return Poll::Ready(Ok(Spliced::Out(0)));
        }
        let step = ready!(splice_step(cx, src, dst, &mut self.pipe, max_in));
        if let Ok(Spliced::In(n)) = step {
            self.left = self.left.saturating_sub(n as u64);
        }
        Poll::Ready(step)
    }
}

/// One end of an HTTP body, as a splice sees it: is there a plain socket under it, and
/// what was spliced into it (a counting writer counts it, as it counts its writes).
pub(crate) trait SpliceEnd {
    /// The bytes on this end travel on a plain TCP socket as they are (no TLS, not HTTP/2):
    /// a body may be spliced. Asks nothing of the kernel and changes nothing.
    fn is_plain(&self) -> bool {
        false
    }
    /// That socket, registered with the reactor (a lazy client socket registers now);
    /// `None` when `is_plain` is false.
    fn splice_socket(&mut self) -> Option<&TcpStream> {
        None
    }
    /// `n` bytes were spliced into this end.
    fn spliced_into(&self, _n: usize) {}
}

impl SpliceEnd for TcpStream {
    fn is_plain(&self) -> bool {
        true
    }

    fn splice_socket(&mut self) -> Option<&TcpStream> {
        Some(self)
    }
}

impl SpliceEnd for LazySocket {
    fn is_plain(&self) -> bool {
        !self.is_broken()
    }

    fn splice_socket(&mut self) -> Option<&TcpStream> {
        self.registered().ok().map(|s| &*s)
    }
}

impl SpliceEnd for ServerConn {
    fn is_plain(&self) -> bool {
        !self.is_tls()
    }

    fn splice_socket(&mut self) -> Option<&TcpStream> {
        match self {
            ServerConn::Plain(stream) => Some(stream),
            ServerConn::Tls(_) => None,
        }
    }
}

/// A body dropped unread (a `return` route's request body): never spliced.
impl SpliceEnd for tokio::io::Sink {}

impl<W: SpliceEnd> SpliceEnd for Counted<'_, W> {
    fn is_plain(&self) -> bool {
        self.get_ref().is_plain()
    }

    fn splice_socket(&mut self) -> Option<&TcpStream> {
        self.get_mut().splice_socket()
    }

    fn spliced_into(&self, n: usize) {
        self.add(n as u64);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::relay::pipes::PipePool;
    use crate::stats::WorkerStats;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (b, _) = listener.accept().await.unwrap();
        (a, b)
    }

    /// 300,000 bytes of a stream followed by a tail: exactly the 300,000 cross, the tail
    /// stays in the source socket, and the pipe goes back to the pool empty.
    #[tokio::test(flavor = "current_thread")]
    async fn exact_moves_its_length_and_not_one_byte_more() {
        const LEN: usize = 300_000;
        let (mut writer, src) = pair().await;
        let (dst, mut reader) = pair().await;
        let stats = Arc::new(WorkerStats::default());
        let pool = PipePool::new(1, 65536, Arc::clone(&stats));
        let mut exact = Exact::new(pool.try_get().unwrap(), LEN as u64);
        let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        let feed = async {
            writer.write_all(&data).await.unwrap();
            writer.write_all(b"NEXT").await.unwrap();
        };
        let mut delivered = 0usize;
        let relay = std::future::poll_fn(|cx| {
            while !exact.is_done() {
                match ready!(exact.poll_step(cx, &src, &dst)) {
                    Ok(Spliced::Out(n)) => delivered += n,
                    Ok(Spliced::In(_)) => {}
                    other => panic!("{other:?}"),
                }
            }
            Poll::Ready(())
        });
        let read = async {
            let mut got = vec![0u8; LEN];
            reader.read_exact(&mut got).await.unwrap();
            got
        };
        let ((), (), got) = tokio::join!(feed, relay, read);
        assert_eq!(delivered, LEN);
        assert!(got == data);
        drop(exact);
        assert_eq!(stats.pipes_pooled.get(), 1, "an empty pipe is pooled");
        let mut tail = [0u8; 4];
        let mut src = src;
        src.read_exact(&mut tail).await.unwrap();
        assert_eq!(&tail, b"NEXT", "the bytes after the length stay in the socket");
    }
}
