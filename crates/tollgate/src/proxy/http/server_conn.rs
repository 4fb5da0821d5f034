//! A connection to a server in HTTP mode: a plain socket, or a TLS client stream for a
//! server with `tls = true`. Owns the step that opens one (pooled, or connected and, for a
//! TLS server, handshaken) and the liveness check of an idle one.
//!
//! Invariants: a connection to a TLS server is `Tls` before its first request byte is
//! written, one to a plain server is always `Plain`, and the pool refuses a connection of
//! the other kind (`pool::put`), so the two never mix. `Plain` adds nothing to the socket's
//! I/O (each call goes straight to it; no allocation, no buffering); the TLS stream is boxed
//! once per connection so the enum stays the size of a socket. A TLS write may leave records
//! buffered in rustls when the socket is full: every read pushes them out first, and an
//! HTTP/1 exchange always reads the response after writing its request, so none stay behind.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::config::model::ServerTls;
use crate::error::Error;
use crate::proxy::connect::{self, Connected};
use crate::proxy::tcp::{Endpoint, Layered};
use crate::runtime::worker::WorkerCtx;
use crate::tls::backend::ClientTlsStream;

pub enum ServerConn {
    Plain(TcpStream),
    Tls(Box<ClientTlsStream>),
}

impl From<TcpStream> for ServerConn {
    fn from(stream: TcpStream) -> Self {
        ServerConn::Plain(stream)
    }
}

/// A connection to a server of `backend` for one request: an idle one from the pool
/// (unless `fresh_only`), or a new one, TLS handshake included for a TLS server. A failed
/// handshake is a `Tls` error on the back side (502), counted in `tls_backend_errors`.
pub async fn open(ctx: &WorkerCtx, backend: usize, fresh_only: bool) -> Result<Connected<ServerConn>, Error> {
    let pool = &ctx.http_pool;
    let conn = connect::connect_or_reuse(
        ctx,
        backend,
        |server| {
            if fresh_only { None } else { pool.take(backend, server) }
        },
    )
    .await?;
    let tls = ctx
        .shared
        .config
        .backends
        .get(backend)
        .and_then(|b| b.servers.get(conn.server))
        .and_then(|s| s.tls.as_ref().map(|tls| (tls, s.name.as_str())));
    let Connected {
        stream,
        slot,
        server,
        reused,
    } = conn;
    let stream = match (stream, tls) {
        // Boxed: a handshake's state is large, and a plain exchange's future should not
        // carry its size.
        (ServerConn::Plain(tcp), Some((tls, name))) => Box::pin(handshake(ctx, tls, tcp, name)).await?,
        (stream, _) => stream,
    };
    Ok(Connected {
        stream,
        slot,
        server,
        reused,
    })
}

/// The client handshake on a fresh connection to a TLS server, under `timeouts.tls_handshake`.
async fn handshake(ctx: &WorkerCtx, tls: &ServerTls, tcp: TcpStream, name: &str) -> Result<ServerConn, Error> {
    let limit = ctx.shared.config.timeouts.tls_handshake;
    match crate::tls::backend::connect(tls, tcp, limit, name).await {
        Ok(stream) => Ok(ServerConn::Tls(Box::new(stream))),
        Err(e) => {
            ctx.stats.tls_backend_errors.add(1);
            Err(e)
        }
    }
}

impl ServerConn {
    pub fn is_tls(&self) -> bool {
        matches!(self, ServerConn::Tls(_))
    }

    /// Whether an idle connection can carry a new request. No readiness event since its
    /// last response was drained: alive, and no syscall spent finding out. With one, look:
    /// EOF or stray bytes make it unusable. Through TLS the look is a read by rustls: a
    /// close_notify, EOF or application data end it; records without data (a session
    /// ticket, a key update) are taken in and leave it usable.
    pub fn is_usable_idle(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let mut probe = [0u8; 1];
        match self {
            ServerConn::Plain(stream) => {
                if stream.poll_read_ready(&mut cx).is_pending() {
                    return true;
                }
                matches!(stream.try_read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
            ServerConn::Tls(tls) => {
                if tls.get_ref().0.poll_read_ready(&mut cx).is_pending() {
                    return true;
                }
                let mut buf = ReadBuf::new(&mut probe);
                Pin::new(&mut **tls).poll_read(&mut cx, &mut buf).is_pending()
            }
        }
    }
}

impl AsyncRead for ServerConn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerConn::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            ServerConn::Tls(tls) => {
                // What a write left in rustls goes out first (see the module docs). Pending
                // registers for writability too: either event wakes this read.
                if let Poll::Ready(Err(e)) = Pin::new(&mut **tls).poll_flush(cx) {
                    return Poll::Ready(Err(e));
                }
                match Pin::new(&mut **tls).poll_read(cx, buf) {
                    // A server that closed without close_notify: end of stream, as for a
                    // plain socket (a body it cut short is caught by its framing).
                    Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Poll::Ready(Ok(())),
                    other => other,
                }
            }
        }
    }
}

impl AsyncWrite for ServerConn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerConn::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            ServerConn::Tls(tls) => Pin::new(&mut **tls).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ServerConn::Plain(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            ServerConn::Tls(tls) => Pin::new(&mut **tls).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ServerConn::Plain(stream) => stream.is_write_vectored(),
            ServerConn::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerConn::Plain(stream) => Pin::new(stream).poll_flush(cx),
            ServerConn::Tls(tls) => Pin::new(&mut **tls).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ServerConn::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            ServerConn::Tls(tls) => Pin::new(&mut **tls).poll_shutdown(cx),
        }
    }
}

/// The server side of a tunnel after a 101: the socket itself, or the TLS stream's plaintext.
impl Endpoint for ServerConn {
    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            ServerConn::Plain(stream) => Endpoint::poll_read_ready(&mut &*stream, cx),
            ServerConn::Tls(tls) => Layered(&mut **tls).poll_read_ready(cx),
        }
    }

    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match self {
            ServerConn::Plain(stream) => Endpoint::poll_read(&mut &*stream, cx, buf),
            ServerConn::Tls(tls) => Layered(&mut **tls).poll_read(cx, buf),
        }
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self {
            ServerConn::Plain(stream) => Endpoint::poll_write(&mut &*stream, cx, buf),
            ServerConn::Tls(tls) => Layered(&mut **tls).poll_write(cx, buf),
        }
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            ServerConn::Plain(stream) => Endpoint::poll_flush(&mut &*stream, cx),
            ServerConn::Tls(tls) => Layered(&mut **tls).poll_flush(cx),
        }
    }

    fn poll_shutdown_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            ServerConn::Plain(stream) => Endpoint::poll_shutdown_write(&mut &*stream, cx),
            ServerConn::Tls(tls) => Layered(&mut **tls).poll_shutdown_write(cx),
        }
    }

    fn raw(&self) -> Option<&TcpStream> {
        match self {
            ServerConn::Plain(stream) => Some(stream),
            ServerConn::Tls(_) => None,
        }
    }

    fn poll_peer_closed(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        match self {
            ServerConn::Plain(stream) => Endpoint::poll_peer_closed(&mut &*stream, cx),
            ServerConn::Tls(_) => Poll::Ready(false),
        }
    }

    fn poll_write_last(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self {
            ServerConn::Plain(stream) => Endpoint::poll_write_last(&mut &*stream, cx, buf),
            ServerConn::Tls(tls) => Layered(&mut **tls).poll_write(cx, buf),
        }
    }
}
