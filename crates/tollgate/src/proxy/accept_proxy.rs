//! A session's start on a frontend with `accept_proxy`: the PROXY protocol header, read
//! before anything else (before the SNI peek, the TLS handshake, the first request byte),
//! and the session's origin (`ctx::origin`) made from it.
//!
//! The header is peeked (MSG_PEEK), parsed (`proxyproto`), and exactly its bytes are then
//! consumed, so whatever the client sent after it stays in the socket for TLS, HTTP or
//! the relay; nothing is carried over. Bounded in bytes (a pooled buffer, at most
//! `proxyproto::V2_MAX_LEN`) and in time (`timeouts.proxy_header`). A peer outside
//! `trusted_proxies` is closed before anything is read. Every outcome is counted
//! (`proxy_header_*` in `stats`). Peeking never spins: as in `tls::passthrough`, a peek
//! that finds nothing new is WouldBlock to tokio, which waits for the next segment.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;

use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::config::model::Frontend;
use crate::config::proxy::AcceptProxy;
use crate::ctx::WorkerCtx;
use crate::ctx::origin::Origin;
use crate::error::{Error, ErrorKind, Side};
use crate::proxyproto::{self, Command, ParseError, Parsed, Tlvs};
use crate::relay::lazy::LazySocket;

/// The session's origin: `None` when neither this frontend (`accept_proxy`) nor any server
/// (`send_proxy`) needs one. Fails (the connection is to be closed) on an untrusted peer,
/// a missing, malformed or oversized header, a client that closed, or the timeout.
pub(crate) async fn start(
    ctx: &WorkerCtx,
    fe: &Frontend,
    socket: &mut LazySocket,
    peer: SocketAddr,
) -> Result<Option<Rc<Origin>>, Error> {
    let Some(accept) = &fe.accept_proxy else {
        if !fe.keep_origin {
            return Ok(None);
        }
        return Ok(Some(Origin::new(peer, local_addr(socket)?, Tlvs::default())));
    };
    let stats = &ctx.stats;
    if !accept.trusted.contains(peer.ip()) {
        stats.proxy_header_untrusted.add(1);
        return Err(refused(format!("PROXY protocol from {peer}, not in trusted_proxies")));
    }
    let deadline = Instant::now() + ctx.shared.config.timeouts.proxy_header;
    // The wait for a buffer (under a full buffer budget) counts against the same deadline.
    let parsed = match tokio::time::timeout_at(deadline, ctx.buffers.get(false)).await {
        Ok(mut buf) => read(socket, accept, &mut buf, deadline).await,
        Err(_) => Err(ReadError::TimedOut),
    };
    let header = match parsed {
        Ok(p) => p.header,
        Err(e) => {
            let (counter, err) = match e {
                ReadError::Parse(ParseError::NotProxy) => (&stats.proxy_header_missing, refused(e.to_string())),
                ReadError::Parse(_) => (&stats.proxy_header_malformed, refused(e.to_string())),
                ReadError::TimedOut => (
                    &stats.proxy_header_timeout,
                    Error::new(ErrorKind::IdleTimeout, Side::Front, e.to_string()),
                ),
                ReadError::Closed => (
                    &stats.proxy_header_closed,
                    Error::new(ErrorKind::PeerClosed, Side::Front, e.to_string()),
                ),
                ReadError::Io(io) => {
                    let kind = if crate::error::is_peer_reset(&io) {
                        ErrorKind::PeerClosed
                    } else {
                        ErrorKind::Io
                    };
                    (
                        &stats.proxy_header_closed,
                        Error::new(kind, Side::Front, "PROXY protocol header").with_source(io),
                    )
                }
            };
            counter.add(1);
            return Err(err);
        }
    };
    let (client, local) = match (header.command, header.addrs) {
        (Command::Proxy, Some((src, dst))) => {
            stats.proxy_header_accepted.add(1);
            (src, dst)
        }
        // LOCAL (the balancer's own check) or an address the sender did not know: the
        // connection's own addresses stand.
        (Command::Local, _) | (Command::Proxy, None) => {
            stats.proxy_header_local.add(1);
            (peer, local_addr(socket)?)
        }
    };
    tracing::debug!(%peer, %client, version = header.version.as_str(), "PROXY protocol header");
    Ok(Some(Origin::new(client, local, header.tlvs)))
}

fn refused(why: String) -> Error {
    Error::new(ErrorKind::BadRequest(400), Side::Front, why)
}

fn local_addr(socket: &mut LazySocket) -> Result<SocketAddr, Error> {
    let local = match socket.direct() {
        Some(s) => s.local_addr(),
        None => socket.registered().and_then(|s| s.local_addr()),
    };
    local.map_err(|e| Error::io(Side::Front, "getsockname", e))
}

#[derive(Debug)]
enum ReadError {
    Parse(ParseError),
    TimedOut,
    Closed,
    Io(io::Error),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Parse(e) => write!(f, "{e}"),
            ReadError::TimedOut => f.write_str("no complete PROXY protocol header within timeouts.proxy_header"),
            ReadError::Closed => f.write_str("client closed before its PROXY protocol header was complete"),
            ReadError::Io(e) => write!(f, "PROXY protocol header: {e}"),
        }
    }
}

/// Peeks until `buf` holds a whole header, then consumes exactly its bytes.
async fn read(
    socket: &mut LazySocket,
    accept: &AcceptProxy,
    buf: &mut [u8],
    deadline: Instant,
) -> Result<Parsed, ReadError> {
    let limit = buf.len().min(proxyproto::V2_MAX_LEN);
    let buf = buf.get_mut(..limit).unwrap_or_default();
    // Already there at accept (the common case): no registration with the reactor.
    if let Some(direct) = socket.direct() {
        match peek(direct, buf) {
            Ok(0) => return Err(ReadError::Closed),
            Ok(n) => {
                if let Some(parsed) = judge(buf, n, limit, accept)? {
                    return consume(direct, buf, parsed);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    let stream: &TcpStream = socket.registered().map_err(ReadError::Io)?;
    let mut seen = 0usize;
    loop {
        let ready = match tokio::time::timeout_at(deadline, stream.ready(Interest::READABLE)).await {
            Err(_) => return Err(ReadError::TimedOut),
            Ok(Err(e)) => return Err(ReadError::Io(e)),
            Ok(Ok(ready)) => ready,
        };
        let mut stalled = false;
        let peeked = stream.try_io(Interest::READABLE, || {
            let n = peek(stream, &mut *buf)?;
            if n == seen && n != 0 {
                stalled = true;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        let n = match peeked {
            Ok(0) => return Err(ReadError::Closed),
            Ok(n) => n,
            Err(_) if stalled && ready.is_read_closed() => return Err(ReadError::Closed),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(ReadError::Io(e)),
        };
        seen = n;
        if let Some(parsed) = judge(buf, n, limit, accept)? {
            return consume(stream, buf, parsed);
        }
    }
}

/// A whole header in the first `n` bytes, or `None` to wait for more.
fn judge(buf: &[u8], n: usize, limit: usize, accept: &AcceptProxy) -> Result<Option<Parsed>, ReadError> {
    match proxyproto::parse(buf.get(..n).unwrap_or_default(), accept.accept) {
        Ok(Some(parsed)) => Ok(Some(parsed)),
        Ok(None) if n >= limit => Err(ReadError::Parse(ParseError::TooLong)),
        Ok(None) => Ok(None),
        Err(e) => Err(ReadError::Parse(e)),
    }
}

fn peek(fd: impl std::os::fd::AsFd, buf: &mut [u8]) -> io::Result<usize> {
    let (n, _) = rustix::net::recv(fd, buf, rustix::net::RecvFlags::PEEK)?;
    Ok(n)
}

/// Reads the header's bytes off the socket: they were peeked, so they are queued and a
/// non-blocking read of exactly that many returns them.
fn consume(fd: impl std::os::fd::AsFd, buf: &mut [u8], parsed: Parsed) -> Result<Parsed, ReadError> {
    let mut left = buf.get_mut(..parsed.len).unwrap_or_default();
    while !left.is_empty() {
        let (n, _) =
            rustix::net::recv(&fd, &mut *left, rustix::net::RecvFlags::empty()).map_err(|e| ReadError::Io(e.into()))?;
        if n == 0 {
            return Err(ReadError::Closed);
        }
        left = left.get_mut(n..).unwrap_or_default();
    }
    Ok(parsed)
}
