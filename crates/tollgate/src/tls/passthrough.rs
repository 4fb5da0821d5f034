//! SNI passthrough: read the ClientHello *without consuming it* and route on its server
//! name; the TLS session itself stays between the client and the server.
//!
//! The peek is bounded in bytes (the buffer, at most [`client_hello::DEFAULT_MAX_LEN`]) and
//! in time (`timeouts.tls_inspect`). It never spins: MSG_PEEK leaves the bytes queued, so the
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
            InspectError::TimedOut => f.write_str("no complete ClientHello before timeouts.tls_inspect"),
            InspectError::Io(e) => write!(f, "peek: {e}"),
        }
    }
}

/// Peeks until `buf` holds a whole ClientHello (or it cannot), by `deadline`.
pub(crate) async fn peek_client_hello(
    stream: &TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<ClientHelloInfo, InspectError> {
    let limit = buf.len().min(client_hello::DEFAULT_MAX_LEN);
    let Some(buf) = buf.get_mut(..limit) else {
        return Err(InspectError::Hello(HelloError::TooLarge));
    };
    let mut seen = 0usize;
    loop {
        let ready = match tokio::time::timeout_at(deadline, stream.ready(Interest::READABLE)).await {
            Err(_) => return Err(InspectError::TimedOut),
            Ok(Err(e)) => return Err(InspectError::Io(e)),
            Ok(Ok(ready)) => ready,
        };
        let mut stalled = false;
        let peeked = stream.try_io(Interest::READABLE, || {
            let (n, _) = rustix::net::recv(stream, &mut *buf, rustix::net::RecvFlags::PEEK)?;
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
        match client_hello::peek_client_hello(buf.get(..n).unwrap_or_default(), limit) {
            Ok(Some(info)) => return Ok(info),
            Ok(None) if n >= limit => return Err(InspectError::Hello(HelloError::TooLarge)),
            Ok(None) => {}
            Err(e) => return Err(InspectError::Hello(e)),
        }
    }
}
