//! SNI passthrough: read the ClientHello *without consuming it* and route on its server
//! name; the TLS session itself stays between the client and the server.
//!
//! The same peek is how TLS termination waits for a whole ClientHello before it takes a
//! handshake slot (`tls::terminate::client_hello`): [`wait_client_hello`].
//!
//! The peek is bounded in bytes (the buffer grows as bytes arrive, to at most
//! [`client_hello::DEFAULT_MAX_LEN`]) and in time (`timeouts.tls_inspect`, or
//! `timeouts.client_hello` for termination). It never spins: MSG_PEEK leaves the bytes queued, so the
//! socket stays "readable"; a peek that finds nothing new is reported to tokio as
//! WouldBlock, which clears readiness until the next segment raises a new edge.

use std::io;

use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::client_hello::{self, ClientHelloInfo, HelloError};

/// Why no ClientHello could be read.
#[derive(Debug)]
pub(crate) enum InspectError {
    /// Not a ClientHello, malformed, or larger than the limit.
    Hello(HelloError),
    /// The client closed before a whole ClientHello arrived.
    Truncated,
    TimedOut,
    Io(io::Error),
}

impl std::fmt::Display for InspectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InspectError::Hello(e) => write!(f, "{e}"),
            InspectError::Truncated => f.write_str("client closed before its ClientHello was complete"),
            InspectError::TimedOut => f.write_str("no complete ClientHello in time"),
            InspectError::Io(e) => write!(f, "peek: {e}"),
        }
    }
}

/// The first peek's buffer: a whole ClientHello of most clients in one peek. OpenSSL,
/// BoringSSL and browsers pad the handshake message to 512 bytes, which with the record
/// header is a 517-byte record: a 512-byte first buffer cost every such client a second
/// peek (issue 28). A post-quantum key share makes ~1.8 KB, one doubling away.
const FIRST_PEEK: usize = 1024;

/// Peeks until the bytes queued on `stream` hold a whole ClientHello (or they cannot), by
/// `deadline`, and routes on its SNI (passthrough).
pub(crate) async fn peek_client_hello(stream: &TcpStream, deadline: Instant) -> Result<ClientHelloInfo, InspectError> {
    let mut buf = Vec::new();
    peek_until(stream, &mut buf, deadline, client_hello::peek_client_hello).await
}

/// Waits until the bytes queued on `stream` hold every record of a ClientHello, by
/// `deadline`, without looking into it (TLS termination: rustls parses it, from the socket).
pub(crate) async fn wait_client_hello(stream: &TcpStream, deadline: Instant) -> Result<usize, InspectError> {
    let mut buf = Vec::new();
    peek_until(stream, &mut buf, deadline, client_hello::client_hello_len).await
}

/// Peeks into `buf` until `done` finds what it looks for in the queued bytes.
///
/// `buf` grows only as bytes arrive: from [`FIRST_PEEK`], doubled each time a peek fills
/// it, never past [`client_hello::DEFAULT_MAX_LEN`]. So a connection that sends nothing, or
/// half a record header, holds no buffer worth the name while it waits (the kernel holds
/// what it did send).
async fn peek_until<T>(
    stream: &TcpStream,
    buf: &mut Vec<u8>,
    deadline: Instant,
    done: impl Fn(&[u8], usize) -> Result<Option<T>, HelloError>,
) -> Result<T, InspectError> {
    let limit = client_hello::DEFAULT_MAX_LEN;
    let mut seen = 0usize;
    loop {
        let ready = match tokio::time::timeout_at(deadline, stream.ready(Interest::READABLE)).await {
            Err(_) => return Err(InspectError::TimedOut),
            Ok(Err(e)) => return Err(InspectError::Io(e)),
            Ok(Ok(ready)) => ready,
        };
        if seen == buf.len() && buf.len() < limit {
            // The last peek filled the buffer (or there was none yet): room for what follows.
            // Made once bytes are there, so a connection that sends nothing holds none.
            let grown = (buf.len() * 2).clamp(FIRST_PEEK, limit);
            buf.resize(grown, 0);
        }
        let mut stalled = false;
        let peeked = stream.try_io(Interest::READABLE, || {
            let (n, _) = rustix::net::recv(stream, buf.as_mut_slice(), rustix::net::RecvFlags::PEEK)?;
            if n == seen && n != 0 {
                // Nothing new since the last peek: wait for the next segment.
                stalled = true;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        let n = match peeked {
            Ok(0) => return Err(InspectError::Truncated),
            Ok(n) => n,
            // tokio never clears "read closed": after the client's FIN nothing new can come.
            Err(_) if stalled && ready.is_read_closed() => return Err(InspectError::Truncated),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(InspectError::Io(e)),
        };
        seen = n;
        match done(buf.get(..n).unwrap_or_default(), limit) {
            Ok(Some(found)) => return Ok(found),
            Ok(None) if n >= limit => return Err(InspectError::Hello(HelloError::TooLarge)),
            Ok(None) => {}
            Err(e) => return Err(InspectError::Hello(e)),
        }
    }
}
