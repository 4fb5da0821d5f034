//! The client side of an HTTP session: a plain socket or a TLS stream. The session code is
//! generic over it; this trait holds the few things that differ.

use std::io;
use std::rc::Rc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::config::model::Offload;

use super::inbound::Inbound;
use crate::buffer::BufferPool;
use crate::error::Error;
use crate::http::h1::Proto;
use crate::proxy::lazy::LazySocket;
use crate::proxy::tcp::{self, Endpoint, Layered};
use crate::runtime::worker::WorkerCtx;
use crate::tls::terminate::ServerTlsStream;

pub trait ClientStream: AsyncRead + AsyncWrite + Unpin {
    /// The scheme the client used, for `X-Forwarded-Proto` / `Forwarded: proto=`.
    const PROTO: Proto;

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

    /// After a 101: relays both ways until both sides are done.
    async fn tunnel<S: Endpoint>(
        &mut self,
        ctx: &WorkerCtx,
        server: &mut S,
        idle: std::time::Duration,
    ) -> Result<(), Error>;

    /// Writes the last bytes before the connection is closed (a plain socket sends them
    /// with the FIN, see `proxy::lazy`).
    async fn write_last(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_all(buf).await
    }
}

impl ClientStream for TcpStream {
    const PROTO: Proto = Proto::Http;

    async fn wait_for_data(&mut self, _front: &mut Inbound, _pool: &Rc<BufferPool>) -> io::Result<bool> {
        self.readable().await.map(|()| false)
    }

    async fn tunnel<S: Endpoint>(
        &mut self,
        ctx: &WorkerCtx,
        server: &mut S,
        idle: std::time::Duration,
    ) -> Result<(), Error> {
        tcp::relay_endpoints(ctx, &mut &*self, server, idle, Offload::default()).await
    }
}

impl ClientStream for LazySocket {
    const PROTO: Proto = Proto::Http;

    fn read_now(&mut self, front: &mut Inbound, pool: &Rc<BufferPool>) -> io::Result<Option<bool>> {
        match self.direct() {
            Some(socket) => Ok(front.try_read_now(socket, pool)?.map(|n| n == 0)),
            None => Ok(None),
        }
    }

    async fn wait_for_data(&mut self, _front: &mut Inbound, _pool: &Rc<BufferPool>) -> io::Result<bool> {
        self.registered()?.readable().await.map(|()| false)
    }

    async fn tunnel<S: Endpoint>(
        &mut self,
        ctx: &WorkerCtx,
        server: &mut S,
        idle: std::time::Duration,
    ) -> Result<(), Error> {
        let client = self
            .registered()
            .map_err(|e| Error::io(crate::error::Side::Front, "register", e))?;
        tcp::relay_endpoints(ctx, &mut &*client, server, idle, Offload::default()).await
    }

    async fn write_last(&mut self, buf: &[u8]) -> io::Result<()> {
        LazySocket::write_last(self, buf).await
    }
}

impl ClientStream for ServerTlsStream {
    const PROTO: Proto = Proto::Https;

    async fn wait_for_data(&mut self, front: &mut Inbound, pool: &Rc<BufferPool>) -> io::Result<bool> {
        front.read_from(self, pool, false).await.map(|n| n == 0)
    }

    async fn tunnel<S: Endpoint>(
        &mut self,
        ctx: &WorkerCtx,
        server: &mut S,
        idle: std::time::Duration,
    ) -> Result<(), Error> {
        tcp::relay_endpoints(ctx, &mut Layered(self), server, idle, Offload::default()).await
    }
}
