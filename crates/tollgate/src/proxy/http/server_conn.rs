//! Opening a connection to a server in HTTP mode: an idle one from this worker's pool, or
//! a new one, TLS handshake included for a TLS server (`relay::ServerConn`); for a
//! `proto = "h2"` server, a stream on one of this worker's HTTP/2 connections to it
//! (`proxy::h2back`).

use std::rc::Rc;

use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::model::{ServerProto, ServerTls};
use crate::ctx::WorkerCtx;
use crate::error::{Error, ErrorKind, Side};
use crate::live::server::ServerLive;
use crate::proxy::connect::{self, Connected, Retries};
use crate::proxy::h2back::{self, Lease, Pick};
use crate::relay::ServerConn;

/// How many times a request waits for another request's new HTTP/2 connection before it
/// gives up (each wait ends when that connection is ready or failed).
const MAX_H2_WAITS: u32 = 64;

/// What a request got to talk to its server.
pub(crate) enum Back {
    /// An HTTP/1.1 connection of its own.
    H1(ServerConn),
    /// A stream on a shared HTTP/2 connection.
    H2(Lease),
    /// (Internal) another request is opening the HTTP/2 connection to wait for.
    Wait(Rc<Notify>, Instant),
}

impl From<TcpStream> for Back {
    fn from(stream: TcpStream) -> Self {
        Back::H1(ServerConn::Plain(stream))
    }
}

/// A connection to a server of `backend` for one request: an idle one from the pool
/// (unless `fresh_only`), or a new one, TLS handshake included for a TLS server. A failed
/// handshake is a `Tls` error on the back side (502), counted in `tls_backend_errors`.
/// Any front may call it: `Back::H2` is a stream lease for `h2back::start`.
pub(crate) async fn open<'a>(
    ctx: &'a WorkerCtx,
    backend: usize,
    fresh_only: bool,
    hash_key: Option<u64>,
    prefer: Option<crate::live::ServerId>,
    mut retries: Retries<'_>,
) -> Result<Connected<'a, Back>, Error> {
    let mut waits = 0;
    loop {
        // Marks of HTTP/2 connections this request is to open, held until it is done.
        let mut marks = Vec::new();
        let conn = pick(
            ctx,
            backend,
            fresh_only,
            hash_key,
            prefer,
            retries.reborrow(),
            &mut marks,
        )
        .await?;
        match conn.stream {
            Back::Wait(notify, until) if waits < MAX_H2_WAITS => {
                waits += 1;
                // The slot is given back while waiting: the pick is made again after.
                drop(conn.slot);
                let _ = tokio::time::timeout_at(until, notify.notified()).await;
            }
            Back::Wait(..) => {
                let why = format!("{}: no HTTP/2 connection became ready", conn.slot.server().name);
                return Err(Error::new(ErrorKind::ConnectTimeout, Side::Back, why));
            }
            _ => return finish(ctx, conn).await,
        }
    }
}

/// The balancer's pick and what the pool has for it (`connect::connect_or_reuse`).
async fn pick<'a>(
    ctx: &'a WorkerCtx,
    backend: usize,
    fresh_only: bool,
    hash_key: Option<u64>,
    prefer: Option<crate::live::ServerId>,
    retries: Retries<'_>,
    marks: &mut Vec<h2back::pool::OpenMark>,
) -> Result<Connected<'a, Back>, Error> {
    let pool = &ctx.http_pool;
    let timeouts = &ctx.shared.config.timeouts;
    let connect = ctx.shared.config.connect_timeout(backend);
    let opening_for = connect + timeouts.tls_handshake + connect;
    let reuse = |server: &ServerLive, now| match server.proto {
        ServerProto::H1 if fresh_only => None,
        ServerProto::H1 => pool.take(server, now).map(Back::H1),
        // This request is the opener (its connect failed and is being retried): it connects
        // again itself rather than wait for its own mark, which nobody else would release.
        ServerProto::H2 if marks.iter().any(|m| m.server() == server.id) => None,
        ServerProto::H2 => match h2back::pool::pick(server, now, opening_for) {
            Pick::Lease(lease) => Some(Back::H2(lease)),
            Pick::Wait(notify, until) => Some(Back::Wait(notify, until)),
            Pick::Open(mark) => {
                marks.push(mark);
                None
            }
        },
    };
    connect::connect_or_reuse(ctx, backend, hash_key, prefer, reuse, retries).await
}

/// A fresh connection made ready: TLS, and for an HTTP/2 server its handshake.
async fn finish<'a>(ctx: &'a WorkerCtx, conn: Connected<'a, Back>) -> Result<Connected<'a, Back>, Error> {
    let Connected {
        stream,
        slot,
        reused,
        chosen,
        connected,
    } = conn;
    // Borrowed, not cloned: no shared-counter traffic on the HTTP/1 path.
    let server = slot.server();
    let tls = server.tls.as_ref().map(|tls| (tls, &*server.name));
    let (stream, connected) = match (stream, tls) {
        // Boxed: a handshake's state is large, and a plain exchange's future should not
        // carry its size.
        (Back::H1(ServerConn::Plain(tcp)), Some((tls, name))) => (
            Back::H1(Box::pin(handshake(ctx, tls, tcp, name)).await?),
            tokio::time::Instant::now(),
        ),
        (stream, _) => (stream, connected),
    };
    let stream = match stream {
        Back::H1(io) if server.proto == ServerProto::H2 => Back::H2(Box::pin(h2_establish(ctx, server, io)).await?),
        other => other,
    };
    Ok(Connected {
        stream,
        slot,
        reused,
        chosen,
        connected,
    })
}

/// The HTTP/2 handshake on a fresh connection; a failure counts as a connect failure.
async fn h2_establish(ctx: &WorkerCtx, server: &ServerLive, io: ServerConn) -> Result<Lease, Error> {
    let established = h2back::pool::establish(ctx, server, io).await;
    if established.is_err() {
        connect::server_error(server);
        ctx.stats.connect_errors.add(1);
        server.counters(ctx.id).connect_failures.add(1);
    }
    established
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
