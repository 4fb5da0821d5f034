//! The client side of an HTTP session: a plain socket or a TLS stream. The session code is
//! generic over it; this trait holds the few things that differ.

use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::config::model::Offload;
use crate::proxy::record::TlsFacts;

use super::inbound::Inbound;
use crate::buffer::BufferPool;
use crate::ctx::WorkerCtx;
use crate::error::Error;
use crate::http::h1::Proto;
use crate::relay::counted::Counted;
use crate::relay::lazy::LazySocket;
use crate::relay::splice::SpliceEnd;
use crate::relay::{Endpoint, Layered, Moved, relay_endpoints};
use crate::tls::terminate::ServerTlsStream;

/// A TLS client: its bytes on the socket are records, never a body to splice.
impl SpliceEnd for ServerTlsStream {}

/// `SpliceEnd`: a plain socket says so, and its bodies may be spliced (`spliced`).
pub(super) trait ClientStream: AsyncRead + AsyncWrite + SpliceEnd + Unpin {
    /// The scheme the client used, for `X-Forwarded-Proto` / `Forwarded: proto=`.
    const PROTO: Proto;

    /// An idle connection on it can wait in the park (`ctx::park`): a plain socket, whose
    /// state is all in the kernel, and a TLS stream, whose rustls state goes with it.
    const PARKS: bool = false;

    /// Whether the connection can leave its task now: nothing buffered above the socket
    /// that the park's epoll would not see (a TLS layer's plaintext or close_notify to
    /// read, a record still to write). A plain socket always can.
    fn can_park(&mut self) -> bool {
        true
    }

    /// The socket, out of the reactor, and any TLS state, for the park (`None` if the
    /// socket cannot leave the reactor).
    fn into_parked(self) -> Option<ParkedClient>
    where
        Self: Sized,
    {
        None
    }

    /// Reads what the client already sent, without waiting: `Some(closed)` when bytes (or
    /// EOF) were there, `None` when the caller must wait. Only a socket not yet registered
    /// with the reactor tries; the others say `None`.
    fn read_now(&mut self, _front: &mut Inbound, _pool: &Rc<BufferPool>) -> io::Result<Option<bool>> {
        Ok(None)
    }

    /// Waits until the client sent something (or closed). A plain socket only waits for
    /// readiness, so an idle keep-alive connection holds no buffer; a TLS stream must read
    /// (its readiness is not the plaintext's). `Ok(true)` = the client closed.
    async fn wait_for_data(&mut self, front: &mut Inbound, pool: &Rc<BufferPool>) -> io::Result<bool>;

    /// Waits until a read would find something (bytes, a close, an error) without reading
    /// it, so the wait holds no buffer. A TLS stream: the socket, unless its TLS layer
    /// already holds plaintext or a close.
    async fn wait_readable(&mut self) -> io::Result<()>;

    /// The TLS version, cipher and SNI the client's handshake settled on (plain sockets:
    /// none).
    fn tls_seen(&self) -> TlsFacts<'_> {
        TlsFacts::default()
    }

    /// The address the client connected to (used only when a request names no host).
    fn local_addr(&self) -> Option<std::net::SocketAddr>;

    /// The DER of the certificate the client's handshake presented and the frontend's
    /// verifier accepted (plain sockets, and TLS without one: none).
    fn peer_leaf(&self) -> Option<&[u8]> {
        None
    }

    /// After a 101: relays both ways until both sides are done (`splice`: the frontend's,
    /// in effect when both sides are plain sockets, as in TCP mode).
    async fn tunnel<S: Endpoint>(
        &mut self,
        ctx: &WorkerCtx,
        server: &mut S,
        idle: std::time::Duration,
        splice: Offload,
        moved: &Moved,
    ) -> Result<(), Error>;

    /// One write of the last bytes before the connection is closed: a plain socket holds
    /// back a partial segment (`MSG_MORE`) for the FIN that `end_last` sends (`relay::lazy`).
    fn poll_write_last(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(self).poll_write(cx, buf)
    }

    /// After the last bytes: the half-close that sends what `poll_write_last` held back (a
    /// TLS stream: close_notify first, so the client sees a clean end).
    async fn end_last(&mut self) {}

    /// Writes the last bytes before the connection is closed (a plain socket sends them
    /// with the FIN).
    async fn write_last(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = std::future::poll_fn(|cx| self.poll_write_last(cx, buf)).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            buf = buf.get(n..).unwrap_or_default();
        }
        self.end_last().await;
        Ok(())
    }
}

/// What the park keeps of a client stream: the socket (out of the reactor) and, over TLS,
/// the rustls connection that was around it.
pub(super) struct ParkedClient {
    pub socket: std::net::TcpStream,
    pub tls: Option<Box<rustls::ServerConnection>>,
}

/// The session's client: every byte written to it, by any path, is in `bytes_to_client`.
impl<C: ClientStream> ClientStream for Counted<'_, C> {
    const PROTO: Proto = C::PROTO;
    const PARKS: bool = C::PARKS;

    fn can_park(&mut self) -> bool {
        self.get_mut().can_park()
    }

    fn into_parked(self) -> Option<ParkedClient> {
        self.into_inner().into_parked()
    }

    fn read_now(&mut self, front: &mut Inbound, pool: &Rc<BufferPool>) -> io::Result<Option<bool>> {
        self.get_mut().read_now(front, pool)
    }

    fn tls_seen(&self) -> TlsFacts<'_> {
        self.get_ref().tls_seen()
    }

    fn peer_leaf(&self) -> Option<&[u8]> {
        self.get_ref().peer_leaf()
    }

    fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.get_ref().local_addr()
    }

    async fn wait_for_data(&mut self, front: &mut Inbound, pool: &Rc<BufferPool>) -> io::Result<bool> {
        self.get_mut().wait_for_data(front, pool).await
    }

    async fn wait_readable(&mut self) -> io::Result<()> {
        self.get_mut().wait_readable().await
    }

    /// The relay counts the tunnelled bytes itself.
    async fn tunnel<S: Endpoint>(
        &mut self,
        ctx: &WorkerCtx,
        server: &mut S,
        idle: std::time::Duration,
        splice: Offload,
        moved: &Moved,
    ) -> Result<(), Error> {
        self.get_mut().tunnel(ctx, server, idle, splice, moved).await
    }

    fn poll_write_last(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let written = self.get_mut().poll_write_last(cx, buf);
        self.count(&written);
        written
    }

    async fn end_last(&mut self) {
        self.get_mut().end_last().await;
    }
}

impl ClientStream for TcpStream {
    const PROTO: Proto = Proto::Http;
    const PARKS: bool = true;

    fn into_parked(self) -> Option<ParkedClient> {
        // Deregistered from the reactor; stays non-blocking.
        let socket = self.into_std().ok()?;
        Some(ParkedClient { socket, tls: None })
    }

    fn local_addr(&self) -> Option<std::net::SocketAddr> {
        TcpStream::local_addr(self).ok()
    }

    async fn wait_for_data(&mut self, _front: &mut Inbound, _pool: &Rc<BufferPool>) -> io::Result<bool> {
        self.readable().await.map(|()| false)
    }

    async fn wait_readable(&mut self) -> io::Result<()> {
        self.readable().await
    }

    async fn tunnel<S: Endpoint>(
        &mut self,
        ctx: &WorkerCtx,
        server: &mut S,
        idle: std::time::Duration,
        splice: Offload,
        moved: &Moved,
    ) -> Result<(), Error> {
        relay_endpoints(ctx.relay(), &mut &*self, server, idle, splice, moved).await
    }
}

impl ClientStream for LazySocket {
    const PROTO: Proto = Proto::Http;
    const PARKS: bool = true;

    fn into_parked(self) -> Option<ParkedClient> {
        let socket = self.into_std()?;
        Some(ParkedClient { socket, tls: None })
    }

    fn local_addr(&self) -> Option<std::net::SocketAddr> {
        LazySocket::local_addr(self)
    }

    fn read_now(&mut self, front: &mut Inbound, pool: &Rc<BufferPool>) -> io::Result<Option<bool>> {
        match self.direct() {
            Some(socket) => Ok(front.try_read_now(socket, pool)?.map(|n| n == 0)),
            None => Ok(None),
        }
    }

    async fn wait_for_data(&mut self, _front: &mut Inbound, _pool: &Rc<BufferPool>) -> io::Result<bool> {
        self.registered()?.readable().await.map(|()| false)
    }

    async fn wait_readable(&mut self) -> io::Result<()> {
        self.registered()?.readable().await
    }

    async fn tunnel<S: Endpoint>(
        &mut self,
        ctx: &WorkerCtx,
        server: &mut S,
        idle: std::time::Duration,
        splice: Offload,
        moved: &Moved,
    ) -> Result<(), Error> {
        let client = self
            .registered()
            .map_err(|e| Error::io(crate::error::Side::Front, "register", e))?;
        relay_endpoints(ctx.relay(), &mut &*client, server, idle, splice, moved).await
    }

    fn poll_write_last(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_send_more(cx, buf)
    }

    async fn end_last(&mut self) {
        self.shutdown_write();
    }
}

/// Always rustls in user space: HTTP mode never hands a connection to kernel TLS (only a
/// TCP relay does, `tls::ktls`, and a relay never parks), so the rustls state is the whole
/// TLS state and may leave with the socket.
impl ClientStream for ServerTlsStream {
    const PROTO: Proto = Proto::Https;
    const PARKS: bool = true;

    /// Parked, the connection is woken by its socket only: so not with plaintext or a
    /// close_notify decrypted and unread, nor with a record queued to write (a KeyUpdate's
    /// answer, say). Half a record in the deframer is fine: the rest wakes it. (A socket
    /// error tokio-rustls held back for its next read is lost, but the socket keeps saying
    /// it: epoll wakes the parked connection at once.)
    fn can_park(&mut self) -> bool {
        let conn = self.get_mut().1;
        if conn.wants_write() {
            return false;
        }
        match conn.process_new_packets() {
            Ok(state) => state.plaintext_bytes_to_read() == 0 && !state.peer_has_closed(),
            // A read reports it, in the task.
            Err(_) => false,
        }
    }

    fn into_parked(self) -> Option<ParkedClient> {
        let (socket, conn) = self.into_inner();
        let socket = socket.into_std().ok()?;
        Some(ParkedClient {
            socket,
            tls: Some(Box::new(conn)),
        })
    }

    fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.get_ref().0.local_addr().ok()
    }

    fn peer_leaf(&self) -> Option<&[u8]> {
        let certs = self.get_ref().1.peer_certificates()?;
        certs.first().map(|c| c.as_ref())
    }

    fn tls_seen(&self) -> TlsFacts<'_> {
        let conn = self.get_ref().1;
        TlsFacts {
            version: crate::proxy::record::tls_version_name(conn.protocol_version()),
            cipher: crate::proxy::record::cipher_name(conn),
            sni: conn.server_name(),
            client_cert_subject: None,
        }
    }

    /// Waits for the socket first, holding no buffer (an idle TLS connection holds its
    /// TLS state only), then reads.
    async fn wait_for_data(&mut self, front: &mut Inbound, pool: &Rc<BufferPool>) -> io::Result<bool> {
        self.wait_readable().await?;
        front.read_from(self, pool, false).await.map(|n| n == 0)
    }

    async fn wait_readable(&mut self) -> io::Result<()> {
        let (socket, conn) = self.get_mut();
        let pending = match conn.process_new_packets() {
            Ok(state) => state.plaintext_bytes_to_read() > 0 || state.peer_has_closed(),
            // The read reports it.
            Err(_) => true,
        };
        if pending { Ok(()) } else { socket.readable().await }
    }

    async fn tunnel<S: Endpoint>(
        &mut self,
        ctx: &WorkerCtx,
        server: &mut S,
        idle: std::time::Duration,
        _splice: Offload,
        moved: &Moved,
    ) -> Result<(), Error> {
        // TLS in user space: nothing to splice.
        relay_endpoints(ctx.relay(), &mut Layered(self), server, idle, Offload::default(), moved).await
    }

    async fn end_last(&mut self) {
        // A client already gone makes this fail; nothing is left to tell it.
        let _ = tokio::io::AsyncWriteExt::shutdown(self).await;
    }
}
