//! This worker thread's HTTP/2 connections to `proto = "h2"` servers: a request takes a
//! stream ([`Lease`]) on a connection with room, else one request opens a new connection
//! while the others for that server wait for it ([`pick`]).
//!
//! Invariants: the pool is thread-local (no lock, no other core ever sees it); a
//! connection is handed out only while it has fewer leases than the streams its server
//! allows (its SETTINGS_MAX_CONCURRENT_STREAMS, read before the first lease, capped at
//! [`MAX_STREAMS`]) and only to the address it was made to; a retired connection (GOAWAY
//! received, closed, idle past `timeouts.pool_idle`) is never handed out again, and the
//! task driving it ends once its last stream does. At most one connection per server is
//! being opened by this thread at a time; a stale mark (its opener gone) expires.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::pin::pin;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::ctx::WorkerCtx;
use crate::error::{Error, ErrorKind, Side};
use crate::live::server::ServerLive;
use crate::live::{IdMap, ServerId};
use crate::relay::ServerConn;

/// Streams on one connection when the server announces no limit (RFC 9113 recommends
/// allowing at least 100).
pub(crate) const MAX_STREAMS: usize = 100;

/// Flow-control windows offered to servers: per stream, and for the connection. A stream
/// buffers at most this much of a response the client has not taken yet.
const STREAM_WINDOW: u32 = 256 * 1024;
const CONNECTION_WINDOW: u32 = 2 * 1024 * 1024;

/// One HTTP/2 connection to a server.
pub(crate) struct Conn {
    pub(super) send: h2::client::SendRequest<Bytes>,
    address: SocketAddr,
    /// Streams this thread may open on it at once.
    limit: Cell<usize>,
    active: Cell<usize>,
    last_used: Cell<Instant>,
    retired: Cell<bool>,
}

impl Conn {
    fn has_room(&self, address: SocketAddr) -> bool {
        !self.retired.get() && self.address == address && self.active.get() < self.limit.get()
    }

    /// No new stream goes here any more (its open streams finish).
    pub(super) fn retire(&self) {
        self.retired.set(true);
    }
}

/// One stream's hold on a connection: counted against the connection's stream limit
/// until dropped.
pub(crate) struct Lease {
    pub(super) conn: Rc<Conn>,
}

impl Lease {
    fn new(conn: &Rc<Conn>) -> Self {
        conn.active.set(conn.active.get() + 1);
        Lease { conn: Rc::clone(conn) }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.conn.active.set(self.conn.active.get().saturating_sub(1));
        self.conn.last_used.set(Instant::now());
    }
}

#[derive(Default)]
struct ServerConns {
    conns: Vec<Rc<Conn>>,
    /// A connection being opened, and until when waiting for it makes sense.
    opening: Option<(Rc<Notify>, Instant)>,
}

thread_local! {
    static POOL: RefCell<IdMap<ServerId, ServerConns>> = RefCell::new(IdMap::default());
}

/// What [`pick`] found for a request to a server.
pub(crate) enum Pick {
    /// A stream on an open connection.
    Lease(Lease),
    /// Another request is opening a connection: wait for it (until the instant), then pick
    /// again.
    Wait(Rc<Notify>, Instant),
    /// This request opens the connection; the mark tells waiters when it is done.
    Open(OpenMark),
}

/// Held while this request opens a connection to its server: dropping it wakes the
/// requests waiting for that connection (ready or failed).
pub(crate) struct OpenMark(ServerId);

impl OpenMark {
    /// The server this mark opens a connection to.
    pub(crate) fn server(&self) -> ServerId {
        self.0
    }
}

impl Drop for OpenMark {
    fn drop(&mut self) {
        let opening = POOL.with(|p| p.borrow_mut().get_mut(&self.0).and_then(|s| s.opening.take()));
        if let Some((notify, _)) = opening {
            notify.notify_waiters();
        }
    }
}

/// A stream on a connection to `server` with room, else a wait for the connection being
/// opened, else the job of opening one (`opening_for`: how long that may take).
pub(crate) fn pick(server: &ServerLive, now: Instant, opening_for: Duration) -> Pick {
    POOL.with(|p| {
        let mut pool = p.borrow_mut();
        let entry = pool.entry(server.id).or_default();
        entry.conns.retain(|c| !c.retired.get());
        if let Some(conn) = entry.conns.iter().find(|c| c.has_room(server.address)) {
            return Pick::Lease(Lease::new(conn));
        }
        match &entry.opening {
            Some((notify, until)) if *until > now => Pick::Wait(Rc::clone(notify), *until),
            _ => {
                entry.opening = Some((Rc::new(Notify::new()), now + opening_for));
                Pick::Open(OpenMark(server.id))
            }
        }
    })
}

/// Makes `io` (a fresh connection to `server`, TLS done) an HTTP/2 connection in the pool
/// and takes a stream on it. Refuses a TLS server that did not select `h2`. The server's
/// SETTINGS are in before this returns: its stream limit is known before any stream.
pub(crate) async fn establish(ctx: &WorkerCtx, server: &ServerLive, io: ServerConn) -> Result<Lease, Error> {
    if let ServerConn::Tls(tls) = &io
        && !crate::tls::backend::selected_h2(tls)
    {
        let why = format!("TLS to {}: the server did not select ALPN h2", server.name);
        return Err(Error::new(ErrorKind::Tls, Side::Back, why));
    }
    let limit = ctx.shared.config.timeouts.connect;
    let handshake = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .enable_push(false)
        .handshake::<_, Bytes>(io);
    let (send, mut conn) = match tokio::time::timeout(limit, handshake).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return Err(super::h2_error(e, "HTTP/2 handshake", true).during(crate::error::Phase::Connect)),
        Err(_) => {
            return Err(Error::new(
                ErrorKind::ConnectTimeout,
                Side::Back,
                "HTTP/2 handshake timed out",
            ));
        }
    };
    let ping = conn.ping_pong();
    let state = Rc::new(Conn {
        send,
        address: server.address,
        limit: Cell::new(1),
        active: Cell::new(0),
        last_used: Cell::new(Instant::now()),
        retired: Cell::new(false),
    });
    let idle = ctx.shared.config.timeouts.pool_idle.max(Duration::from_millis(1));
    tokio::task::spawn_local(drive(conn, Rc::clone(&state), idle));
    // The server's SETTINGS come before its answer to this PING.
    if let Some(mut ping) = ping {
        match tokio::time::timeout(limit, ping.ping(h2::Ping::opaque())).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                state.retire();
                return Err(super::h2_error(e, "HTTP/2 settings", true).during(crate::error::Phase::Connect));
            }
            Err(_) => {
                state.retire();
                return Err(Error::new(
                    ErrorKind::ConnectTimeout,
                    Side::Back,
                    "no HTTP/2 SETTINGS from the server",
                ));
            }
        }
    }
    state
        .limit
        .set(state.send.current_max_send_streams().clamp(1, MAX_STREAMS));
    let lease = Lease::new(&state);
    POOL.with(|p| p.borrow_mut().entry(server.id).or_default().conns.push(state));
    Ok(lease)
}

/// Drives one connection until it ends, or until it has carried no stream for `idle`
/// (dropping it closes the socket).
async fn drive(conn: h2::client::Connection<ServerConn, Bytes>, state: Rc<Conn>, idle: Duration) {
    let mut conn = pin!(conn);
    loop {
        tokio::select! {
            r = &mut conn => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "HTTP/2 server connection ended");
                }
                break;
            }
            () = tokio::time::sleep(idle) => {
                if state.active.get() == 0 && state.last_used.get().elapsed() >= idle {
                    tracing::debug!("idle HTTP/2 server connection closed");
                    break;
                }
            }
        }
    }
    state.retire();
}
