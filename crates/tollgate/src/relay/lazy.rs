//! A client socket that joins the reactor only when it first has to wait.
//!
//! A short connection need not wait on the client at all when its request is already in the
//! socket at accept() (a busy accept loop, a client that writes right after connecting) and
//! the response fits in the send buffer. Registering such a socket with epoll and removing
//! it again costs two syscalls and a reactor slot for nothing; HAProxy skips them the same
//! way (it subscribes to a file descriptor only after EAGAIN). So reads and writes go
//! straight to the socket until one returns WouldBlock; only then is it registered, and from
//! then on everything goes through tokio's readiness. (Under peerbench's wrk the request
//! usually comes a moment after accept(), so most sessions there do register.)
//!
//! A response after which the connection closes is written with `MSG_MORE` (`poll_send_more`):
//! the kernel holds its last partial segment, and the shutdown(Write) that follows sends it
//! with the FIN, one packet (and one ACK from the client) instead of two.
//!
//! Invariants: the socket is non-blocking from accept on (accept4 with `SOCK_NONBLOCK`), so a
//! direct read or write never blocks the worker. Registering after a WouldBlock loses no
//! wakeup: epoll reports a socket that became ready in the meantime at its first wait.

use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use rustix::net::SendFlags;

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

pub(crate) struct LazySocket {
    state: State,
}

enum State {
    /// Not registered: every operation is a direct syscall.
    Direct(std::net::TcpStream),
    Registered(TcpStream),
    /// Registration failed (the error was returned once); every later call fails.
    Broken,
}

impl LazySocket {
    /// `stream` must be non-blocking.
    pub(crate) fn new(stream: std::net::TcpStream) -> Self {
        LazySocket {
            state: State::Direct(stream),
        }
    }

    /// The socket while it is not registered (reads and writes on it must not block).
    pub(crate) fn direct(&self) -> Option<&std::net::TcpStream> {
        match &self.state {
            State::Direct(s) => Some(s),
            _ => None,
        }
    }

    /// Registration failed once: every operation fails from then on.
    pub(crate) fn is_broken(&self) -> bool {
        matches!(self.state, State::Broken)
    }

    /// The registered stream, registering it now if it is not yet.
    pub(crate) fn registered(&mut self) -> io::Result<&mut TcpStream> {
        if matches!(self.state, State::Direct(_))
            && let State::Direct(s) = std::mem::replace(&mut self.state, State::Broken)
        {
            self.state = State::Registered(TcpStream::from_std(s)?);
        }
        match &mut self.state {
            State::Registered(s) => Ok(s),
            _ => Err(io::Error::other("client socket could not be registered")),
        }
    }

    /// The socket out of the reactor (if it joined it), non-blocking as it came.
    pub(crate) fn into_std(self) -> Option<std::net::TcpStream> {
        match self.state {
            State::Direct(s) => Some(s),
            State::Registered(s) => s.into_std().ok(),
            State::Broken => None,
        }
    }

    pub(crate) fn into_registered(mut self) -> io::Result<TcpStream> {
        self.registered()?;
        match self.state {
            State::Registered(s) => Ok(s),
            _ => Err(io::Error::other("client socket could not be registered")),
        }
    }

    /// The address the client connected to (`None` if the socket cannot say).
    pub(crate) fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match &self.state {
            State::Direct(s) => s.local_addr().ok(),
            State::Registered(s) => s.local_addr().ok(),
            State::Broken => None,
        }
    }

    /// Half-closes after the last write, sending what `MSG_MORE` held back with the FIN.
    pub(crate) fn shutdown_write(&self) {
        // Everything is written; a failure here only means the client is already gone.
        let _ = match &self.state {
            State::Direct(s) => s.shutdown(Shutdown::Write),
            State::Registered(s) => socket2::SockRef::from(s).shutdown(Shutdown::Write),
            State::Broken => Ok(()),
        };
    }

    /// One `send` with `MSG_MORE`: the last writes before `shutdown_write`.
    pub(crate) fn poll_send_more(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_io(|s| send_more(s.as_fd(), buf), |s| poll_send_more(&s, cx, buf))
    }

    /// One I/O operation: straight on the socket while it is not registered, through the
    /// reactor once it is, or once `direct` would block.
    fn poll_io<T>(
        &mut self,
        direct: impl FnOnce(&std::net::TcpStream) -> io::Result<T>,
        registered: impl FnOnce(Pin<&mut TcpStream>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if let State::Direct(s) = &self.state {
            match direct(s) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return Poll::Ready(other),
            }
        }
        match self.registered() {
            Ok(s) => registered(Pin::new(s)),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

/// `send(2)` with `MSG_MORE`: a partial last segment is held until the next send or a
/// shutdown/close, which then carries it together with the FIN.
fn send_more(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    Ok(rustix::net::send(fd, buf, SendFlags::MORE | SendFlags::NOSIGNAL)?)
}

/// `send_more` on a registered socket, waiting for writability when it would block.
pub(crate) fn poll_send_more(stream: &TcpStream, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
    loop {
        match stream.try_io(Interest::WRITABLE, || send_more(stream.as_fd(), buf)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready!(stream.poll_write_ready(cx))?,
            other => return Poll::Ready(other),
        }
    }
}

impl AsyncRead for LazySocket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let State::Direct(s) = &this.state {
            // The callers read into initialized buffers, so this does not zero anything.
            match (&*s).read(buf.initialize_unfilled()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return Poll::Ready(other.map(|n| buf.advance(n))),
            }
        }
        match this.registered() {
            Ok(s) => Pin::new(s).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for LazySocket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().poll_io(|s| (&*s).write(buf), |s| s.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .poll_io(|s| (&*s).write_vectored(bufs), |s| s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match &mut this.state {
            State::Direct(s) => Poll::Ready(s.shutdown(Shutdown::Write)),
            State::Registered(s) => Pin::new(s).poll_shutdown(cx),
            State::Broken => Poll::Ready(Err(io::Error::other("client socket could not be registered"))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An accepted socket (still blocking) and its connected peer.
    async fn pair() -> (std::net::TcpStream, TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (accepted, _) = listener.accept().unwrap();
        (accepted, peer)
    }

    /// Data already there is read and answered without ever registering the socket.
    #[tokio::test]
    async fn ready_data_needs_no_registration() {
        let (accepted, mut peer) = pair().await;
        peer.write_all(b"ping").await.unwrap();
        let mut peeked = [0u8; 4];
        while accepted.peek(&mut peeked).unwrap() < 4 {} // blocking: returns once bytes are there
        accepted.set_nonblocking(true).unwrap();
        let mut lazy = LazySocket::new(accepted);
        let mut got = [0u8; 4];
        assert_eq!(lazy.read(&mut got).await.unwrap(), 4);
        assert_eq!(&got, b"ping");
        lazy.write_all(b"pong").await.unwrap();
        assert!(
            lazy.direct().is_some(),
            "a read and a write that need no wait register nothing"
        );
        let mut back = [0u8; 4];
        peer.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"pong");
    }

    /// A read that would block registers the socket and then waits for the data.
    #[tokio::test]
    async fn waiting_registers_and_wakes() {
        let (accepted, mut peer) = pair().await;
        accepted.set_nonblocking(true).unwrap();
        let mut lazy = LazySocket::new(accepted);
        let reader = async {
            let mut got = [0u8; 5];
            lazy.read_exact(&mut got).await.unwrap();
            got
        };
        let writer = async {
            tokio::task::yield_now().await;
            peer.write_all(b"hello").await.unwrap();
        };
        let (got, ()) = tokio::join!(reader, writer);
        assert_eq!(&got, b"hello");
        assert!(lazy.direct().is_none(), "waiting registered the socket");
        lazy.shutdown().await.unwrap();
        let mut rest = Vec::new();
        peer.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }

    /// Writes all of `buf` as the last bytes of this side, then half-closes (what an HTTP
    /// session does through `ClientStream::write_last`).
    async fn write_last(lazy: &mut LazySocket, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = std::future::poll_fn(|cx| lazy.poll_send_more(cx, buf)).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            buf = buf.get(n..).unwrap_or_default();
        }
        lazy.shutdown_write();
        Ok(())
    }

    /// The last write is held for the FIN, never lost: the peer reads all of it, then EOF,
    /// for a write far larger than one segment too.
    #[tokio::test]
    async fn last_write_arrives_whole_before_eof() {
        for size in [5usize, 300_000] {
            let (accepted, mut peer) = pair().await;
            accepted.set_nonblocking(true).unwrap();
            let mut lazy = LazySocket::new(accepted);
            let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let reader = async {
                let mut got = Vec::new();
                peer.read_to_end(&mut got).await.unwrap();
                got
            };
            let writer = async {
                write_last(&mut lazy, &data).await.unwrap();
                drop(lazy);
            };
            let (got, ()) = tokio::join!(reader, writer);
            assert!(got == data, "{size} bytes: got {} bytes", got.len());
        }
    }
}
