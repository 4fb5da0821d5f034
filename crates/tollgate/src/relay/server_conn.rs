//! A connection to a server in HTTP mode: a plain socket, or a TLS client stream for a
//! server with `tls = true`; the liveness check of an idle one. Opening one (pooled, or
//! connected and, for a TLS server, handshaken) is `proxy::http::server_conn::open`.
//!
//! Invariants: a connection to a TLS server is `Tls` before its first request byte is
//! written, one to a plain server is always `Plain`, and the pool refuses a connection of
//! the other kind (`ctx::pool::ServerPool::put`), so the two never mix. `Plain` adds nothing
//! to the socket's I/O (each call goes straight to it; no allocation, no buffering); the TLS
//! stream is boxed once per connection so the enum stays the size of a socket. A TLS write
//! may leave records buffered in rustls when the socket is full: every read pushes them out
//! first, and an HTTP/1 exchange always reads the response after writing its request, so
//! none stay behind.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::endpoint::{Endpoint, Layered};

/// A TLS connection to a server.
pub(crate) type ClientTlsStream = tokio_rustls::client::TlsStream<TcpStream>;

pub(crate) enum ServerConn {
    Plain(TcpStream),
    Tls(Box<ClientTlsStream>),
}

impl From<TcpStream> for ServerConn {
    fn from(stream: TcpStream) -> Self {
        ServerConn::Plain(stream)
    }
}

impl ServerConn {
    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, ServerConn::Tls(_))
    }

    /// Whether an idle connection can carry a new request. No readiness event since its
    /// last response was drained: alive, and no syscall spent finding out. With one, look:
    /// EOF or stray bytes make it unusable. Through TLS the look is a read by rustls: a
    /// close_notify, EOF or application data end it; records without data (a session
    /// ticket, a key update) are taken in and leave it usable.
    pub(crate) fn is_usable_idle(&mut self) -> bool {
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

    fn poll_shutdown_before_close(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            ServerConn::Plain(stream) => Endpoint::poll_shutdown_before_close(&mut &*stream, cx),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use socket2::SockRef;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::sync::oneshot;

    use super::*;
    use crate::config::tls as certs;

    /// Plaintext rustls takes in one write (below its 64 KiB buffer limit) but, with small
    /// socket buffers and a peer not reading yet, cannot send at once.
    const REQUEST: usize = 60 * 1024;

    fn server_config() -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["origin.test".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(certs::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        Arc::new(config)
    }

    async fn tls_conn(addr: SocketAddr) -> ServerConn {
        let tcp = TcpStream::connect(addr).await.unwrap();
        SockRef::from(&tcp).set_send_buffer_size(4096).unwrap();
        let settings = certs::ClientSettings {
            ca_file: None,
            alpn: vec![b"http/1.1".to_vec()],
            versions: rustls::DEFAULT_VERSIONS,
            client_cert: None,
        };
        let client_config = certs::client_config(settings, certs::provider()).unwrap();
        let name = rustls::pki_types::ServerName::try_from("origin.test").unwrap();
        let connect = tokio_rustls::TlsConnector::from(client_config).connect(name, tcp);
        let stream = tokio::time::timeout(Duration::from_secs(5), connect)
            .await
            .unwrap()
            .unwrap();
        ServerConn::Tls(Box::new(stream))
    }

    #[tokio::test(flavor = "current_thread")]
    async fn records_kept_back_by_a_write_go_out_before_the_response_is_read() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        SockRef::from(&listener).set_recv_buffer_size(4096).unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(server_config());
        let (go, go_rx) = oneshot::channel::<()>();
        let (closed, closed_rx) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let mut tls = acceptor.accept(s).await.unwrap();
            go_rx.await.unwrap();
            let mut request = vec![0u8; REQUEST];
            tls.read_exact(&mut request).await.unwrap();
            tls.write_all(b"done").await.unwrap();
            tls.flush().await.unwrap();
            closed_rx.await.unwrap();
            tls.shutdown().await.unwrap();
        });
        let mut conn = tls_conn(addr).await;
        conn.write_all(&vec![7u8; REQUEST]).await.unwrap();
        let ServerConn::Tls(tls) = &conn else { unreachable!() };
        assert!(
            tls.get_ref().1.wants_write(),
            "precondition: the socket was full and rustls kept records back"
        );
        go.send(()).unwrap();
        let mut reply = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(10), conn.read_exact(&mut reply))
            .await
            .expect("the request's tail was sent")
            .unwrap();
        assert_eq!(&reply, b"done");

        // Idle and open (session tickets taken in by the read): usable.
        assert!(conn.is_usable_idle());
        closed.send(()).unwrap();
        server.await.unwrap();
        let ServerConn::Tls(tls) = &conn else { unreachable!() };
        tls.get_ref().0.readable().await.unwrap();
        assert!(!conn.is_usable_idle(), "close_notify makes it unusable");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_plain_idle_connection_is_probed_only_after_an_event() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut conn = ServerConn::from(TcpStream::connect(addr).await.unwrap());
        let (mut peer, _) = listener.accept().await.unwrap();
        assert!(conn.is_usable_idle());
        peer.write_all(b"x").await.unwrap();
        let ServerConn::Plain(s) = &conn else { unreachable!() };
        s.readable().await.unwrap();
        assert!(!conn.is_usable_idle(), "stray bytes");
    }
}
