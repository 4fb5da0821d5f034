//! A relay endpoint: one side of a byte relay, as the pumps see it.
//!
//! `Endpoint` is the one interface the relay (`relay::pump`), HTTP tunnels and kTLS speak:
//! a plain socket (`&TcpStream`), a stream with a layer whose plaintext is relayed
//! (`Layered`: a rustls client or server stream), a pooled HTTP server connection
//! (`ServerConn`) or a kTLS-eligible client (`tls::ktls::KtlsClient`).
//!
//! Invariant: `Pending` always means a waker was registered.

use std::io::{self, Read};
use std::net::Shutdown;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// One side of a relay: a plain socket, or a stream with a layer (TLS) whose plaintext is
/// relayed. `Pending` always means a waker was registered.
pub(crate) trait Endpoint {
    /// Cheap readiness check before a buffer is taken (a layered stream says "ready" and
    /// lets the read decide).
    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// `Ok(0)` = end of stream.
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;
    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>>;
    /// Pushes out anything the layer buffered (a plain socket buffers nothing).
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// Half-close: no more data from us (TLS: close_notify, then shutdown(Write)).
    fn poll_shutdown_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// The relay's very last half-close: both directions are done and the socket is closed
    /// as soon as the relay returns. A plain socket needs no shutdown(2) (close(2) sends the
    /// FIN); a layer still sends what it owes (TLS: close_notify), so by default this is
    /// `poll_shutdown_write`.
    fn poll_shutdown_before_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_shutdown_write(cx)
    }
    /// The socket, when the bytes on it are the payload itself (splice is possible).
    fn raw(&self) -> Option<&TcpStream>;
    /// Asked right after a read that drained the socket. `Ready(true)`: the peer's FIN has
    /// been seen (the reactor's read-closed bit, which stays set), so what was read is the
    /// last data. `Pending`: nothing is waiting and a wakeup is registered. `Ready(false)`:
    /// data is waiting, or this endpoint cannot tell (only a plain socket can).
    fn poll_peer_closed(&mut self, _cx: &mut Context<'_>) -> Poll<bool> {
        Poll::Ready(false)
    }
    /// Writes the last data before this side is half-closed: a plain socket holds back a
    /// partial segment (`MSG_MORE`) so that the shutdown sends it with the FIN.
    fn poll_write_last(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write(cx, buf)
    }
    /// A read (or a splice from `raw()`) failed with `e`: `Ok(())` makes it end of stream
    /// (a kTLS socket meeting the peer's close_notify), `Err` ends the session.
    fn read_failed(&mut self, e: io::Error) -> io::Result<()> {
        Err(e)
    }
}

impl Endpoint for &TcpStream {
    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        TcpStream::poll_read_ready(self, cx)
    }

    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        loop {
            match read_draining(self, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready!(TcpStream::poll_read_ready(self, cx))?,
                other => return Poll::Ready(other),
            }
        }
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let stream: &TcpStream = self;
        loop {
            match stream.try_io(Interest::WRITABLE, || SockRef::from(stream).send(buf)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready!(stream.poll_write_ready(cx))?,
                other => return Poll::Ready(other),
            }
        }
    }

    fn poll_flush(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown_write(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(SockRef::from(*self).shutdown(Shutdown::Write))
    }

    fn poll_shutdown_before_close(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_peer_closed(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        // The cheap check first: usually nothing is waiting, and the wakeup it registers is
        // the one the next read needs anyway.
        ready!(TcpStream::poll_read_ready(self, cx)).ok();
        let ready = self.ready(Interest::READABLE);
        Poll::Ready(matches!(std::pin::pin!(ready).poll(cx), Poll::Ready(Ok(r)) if r.is_read_closed()))
    }

    fn poll_write_last(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        super::lazy::poll_send_more(self, cx, buf)
    }

    fn raw(&self) -> Option<&TcpStream> {
        Some(self)
    }
}

/// A stream with a layer (a rustls client or server stream).
pub(crate) struct Layered<T>(pub T);

impl<T: AsyncRead + AsyncWrite + Unpin> Endpoint for Layered<T> {
    fn poll_read_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut rb = ReadBuf::new(buf);
        match ready!(Pin::new(&mut self.0).poll_read(cx, &mut rb)) {
            Ok(()) => Poll::Ready(Ok(rb.filled().len())),
            // A TLS peer that closed without close_notify: treat as end of stream, like
            // most clients expect (the relay half-closes the other side as for a FIN).
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(0)),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn raw(&self) -> Option<&TcpStream> {
        None
    }
}

/// One recv(). A read shorter than the buffer drained the socket, so it is reported to
/// tokio as WouldBlock (clearing readiness, with the bytes kept): the next wait then costs
/// no extra recv() returning EAGAIN. Data arriving later raises a new edge-triggered event.
fn read_draining(src: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    let capacity = buf.len();
    let mut got = 0;
    let result = src.try_io(Interest::READABLE, || {
        let n = (&*SockRef::from(src)).read(buf)?;
        got = n;
        if n > 0 && n < capacity {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(n)
        }
    });
    match result {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(got),
        other => other,
    }
}
