//! A client connection's life (a *session*): choose a server, connect, relay until both
//! sides are done or the connection goes idle. `tcp` relays bytes; HTTP mode plugs in here.
//! A frontend with `accept_proxy` first reads the PROXY protocol header (`accept_proxy`):
//! from then on its address is the client's everywhere (routes, hashing, forwarding
//! headers, logs, `show sessions`). A TLS frontend asking for client certificates hands
//! the verified identity to servers in HTTP mode (`client_cert`).

pub(crate) mod accept_proxy;
pub(crate) mod auth;
pub(crate) mod client_cert;
pub(crate) mod connect;
pub(crate) mod h2back;
pub(crate) mod h2front;
pub(crate) mod http;
pub(crate) mod record;
pub(crate) mod send_proxy;
pub(crate) mod tcp;

use std::net::SocketAddr;
use std::rc::Rc;

use crate::config::Config;
use crate::ctx::WorkerCtx;
use crate::ctx::park::{IdleConn, Opening};
use crate::error::{Error, Side};
use crate::relay::lazy::LazySocket;
use crate::tls::terminate::ServerTlsStream;

/// What a session's task leaves when it ends with its connection still open, to be held in
/// something smaller than that task: the park's slot for an idle HTTP/1 connection, or a task
/// of its own for an HTTP/2 connection. The task that read an HTTP/2 connection's preface
/// or handshake is an HTTP session's, as large as an HTTP/1 session's longest wait (about
/// 1.9 KB), which an HTTP/2 connection never is in.
pub(crate) enum Handoff {
    Park(IdleConn),
    /// Prior knowledge (`h2c`).
    H2c(H2Conn<tokio::net::TcpStream>),
    /// ALPN `h2` (boxed: a TLS stream is about 1.1 KB).
    H2(Box<H2Conn<ServerTlsStream>>),
}

impl Handoff {
    /// The session counted itself in its frontend's current sessions (`accept_proxy`) and
    /// left that count standing for whoever holds the connection next.
    fn set_open_counted(&mut self, counted: bool) {
        match self {
            Handoff::Park(idle) => idle.open_counted = counted,
            Handoff::H2c(h2) => h2.open_counted = counted,
            Handoff::H2(h2) => h2.open_counted = counted,
        }
    }
}

/// An HTTP/2 client connection between the task that opened it and its own (`serve_h2`).
pub(crate) struct H2Conn<T> {
    pub info: h2front::ConnInfo,
    pub io: T,
    /// The session's PROXY protocol facts, when it had a header.
    pub origin: Option<Rc<crate::ctx::origin::Origin>>,
    /// See `Handoff::set_open_counted`.
    pub open_counted: bool,
}

impl<T> H2Conn<T> {
    pub(crate) fn new(info: h2front::ConnInfo, io: T) -> Self {
        H2Conn {
            info,
            io,
            origin: crate::ctx::origin::current(),
            open_counted: false,
        }
    }
}

/// Serves an HTTP/2 connection handed off by its session (`Handoff`) to its end.
///
/// Combinators, not an `async fn`: the connection comes in a box and goes straight into the
/// connection's future, which then holds its socket once (an `async fn` or block would keep
/// its argument beside what it is moved into, rust-lang/rust#62958).
#[expect(
    clippy::boxed_local,
    reason = "the task holds the box, not a second copy of the socket (above)"
)]
pub(crate) fn serve_h2<'a, T>(ctx: &'a Rc<WorkerCtx>, conn: Box<H2Conn<T>>) -> impl Future<Output = ()> + 'a
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static,
{
    use futures_util::FutureExt as _;
    use futures_util::future::Either;
    let H2Conn { info, io, origin, .. } = *conn;
    let (frontend, peer) = (info.frontend, info.peer);
    let serve = h2front::serve(ctx, info, io);
    let served = match origin {
        Some(origin) => Either::Left(crate::ctx::origin::scope(origin, serve)),
        None => Either::Right(serve),
    };
    served.map(move |served| {
        if let (Err(e), Some(fe)) = (served, ctx.shared.config.frontends.get(frontend)) {
            log_end(ctx, &fe.name, peer, &e);
        }
    })
}

/// A frontend's mode, as the type of its session: each mode's session task then holds only
/// that mode's states (a TCP relay's task does not carry the size of an HTTP session's
/// future, nor the reverse), and none needs a box to keep the other out.
pub(crate) trait SessionMode {
    /// Serves `stream` for `peer` (the client, after any PROXY protocol header). A connection
    /// handed back (`Some`) goes on outside this task (`Handoff`).
    fn serve<'a>(
        ctx: &'a Rc<WorkerCtx>,
        frontend: usize,
        stream: LazySocket,
        peer: SocketAddr,
    ) -> impl Future<Output = Result<Option<Handoff>, Error>> + 'a;
}

/// `mode = "http"`: `http::serve`.
pub(crate) struct HttpMode;

/// `mode = "tcp"`: a relay (`tcp`).
pub(crate) struct TcpMode;

impl SessionMode for HttpMode {
    fn serve<'a>(
        ctx: &'a Rc<WorkerCtx>,
        frontend: usize,
        stream: LazySocket,
        peer: SocketAddr,
    ) -> impl Future<Output = Result<Option<Handoff>, Error>> + 'a {
        http::serve(ctx, frontend, stream, peer)
    }
}

impl SessionMode for TcpMode {
    async fn serve(
        ctx: &Rc<WorkerCtx>,
        frontend: usize,
        stream: LazySocket,
        peer: SocketAddr,
    ) -> Result<Option<Handoff>, Error> {
        // A relay waits on both sides at once from the start: register right away.
        // A TCP session is one stream: one record. (HTTP mode records each request.)
        let mut rec = record::StreamRecord::new(frontend, peer, tokio::time::Instant::now());
        let mut tls = record::TlsSeen::default();
        let result = match stream.into_registered() {
            Ok(stream) => tcp::serve(ctx, frontend, stream, &mut rec, &mut tls).await,
            Err(e) => Err(Error::io(Side::Front, "register", e)),
        };
        if let Err(e) = &result {
            rec.fail(e);
        }
        rec.close();
        record::sink(ctx, &rec, tls.seen());
        result.map(|()| None)
    }
}

/// `stream`: the accepted socket, not yet registered with the reactor (see `lazy`), served
/// in the frontend's mode `M` once a PROXY protocol header, if the frontend takes one, was
/// read and its client admitted. A connection the session hands back (`Some`) goes on
/// outside its task: to the park (`ctx::park`), or an HTTP/2 connection to a task of its own.
pub(crate) async fn serve<M: SessionMode>(
    ctx: &Rc<WorkerCtx>,
    frontend: usize,
    mut stream: LazySocket,
    peer: SocketAddr,
) -> Option<Handoff> {
    let fe = ctx.shared.config.frontends.get(frontend)?;
    let origin = match accept_proxy::start(ctx, fe, &mut stream, peer).await {
        Ok(origin) => origin,
        Err(e) => {
            log_end(ctx, &fe.name, peer, &e);
            return None;
        }
    };
    let client = origin.as_ref().map_or(peer, |o| o.client);
    let result = match origin {
        Some(origin) => {
            // `allow` / `deny` on the address the header carried (the accept loop let the
            // balancer's connection in unchecked).
            if fe.accept_proxy.is_some() && !(fe.access.is_open() || fe.access.admits(client.ip())) {
                ctx.count_denied(frontend);
                tracing::debug!(frontend = %fe.name, %client, "connection refused by the frontend's allow/deny lists");
                return None;
            }
            crate::ctx::sessions::note(|e| e.set_client(client));
            // Admitted: from here it is a session (`spawn_session` left the counting of an
            // `accept_proxy` connection to us).
            let open = fe.accept_proxy.is_some().then(|| {
                ctx.stats.sessions_total.add(1);
                ctx.open_session(frontend, std::time::Instant::now())
            });
            let served = crate::ctx::origin::scope(origin, M::serve(ctx, frontend, stream, client)).await;
            // Parked, the connection stays counted: the park keeps that count.
            served.map(|handoff| {
                handoff.map(|mut handoff| {
                    handoff.set_open_counted(open.is_some_and(crate::ctx::stat::OpenSession::detach));
                    handoff
                })
            })
        }
        None => M::serve(ctx, frontend, stream, client).await,
    };
    match result {
        Ok(idle) => idle,
        Err(e) => {
            log_end(ctx, &fe.name, client, &e);
            None
        }
    }
}

/// Serves on a connection the park handed back, where its session left off.
pub(crate) async fn resume(ctx: &Rc<WorkerCtx>, opening: Opening, conn: IdleConn) -> Option<Handoff> {
    let fe = ctx.shared.config.frontends.get(opening.frontend)?;
    let peer = opening.peer;
    let result = match conn.origin.clone() {
        Some(origin) => crate::ctx::origin::scope(origin, http::resume(ctx, opening, conn)).await,
        None => http::resume(ctx, opening, conn).await,
    };
    match result {
        Ok(idle) => idle,
        Err(e) => {
            log_end(ctx, &fe.name, peer, &e);
            None
        }
    }
}

/// Routine endings (peer hang-ups, idle timeouts) at debug; failures tollgate met or made at
/// warn, with frontend, backend, server and cause, rate-limited per worker.
fn log_end(ctx: &WorkerCtx, frontend: &str, peer: SocketAddr, e: &Error) {
    if e.is_routine() {
        tracing::debug!(frontend = %frontend, %peer, error = %e, "session ended");
    } else if ctx.may_warn() {
        let (backend, server) = names(&ctx.shared.config, e.backend, e.server);
        tracing::warn!(frontend = %frontend, backend = %backend, server = %server, %peer, cause = %e, "session failed");
    }
}

/// The names of a backend and one of its servers, `-` for none.
pub(crate) fn names(config: &Config, backend: Option<usize>, server: Option<crate::ids::ServerId>) -> (&str, &str) {
    let spec = backend.and_then(|b| config.backends.get(b));
    let server = spec
        .zip(server)
        .and_then(|(b, id)| b.servers.iter().find(|s| s.id == id));
    (
        spec.map_or("-", |b| b.name.as_str()),
        server.map_or("-", |s| s.name.as_str()),
    )
}

/// Runs `work` to its end, or until `deadline` passes (`None`: no timer is made at all, the
/// common case costs nothing).
pub(crate) async fn by_deadline<F: std::future::Future>(
    deadline: Option<tokio::time::Instant>,
    work: F,
) -> Option<F::Output> {
    match deadline {
        None => Some(work.await),
        Some(at) => tokio::time::timeout_at(at, work).await.ok(),
    }
}

/// Completes when `deadline` passes; never when there is none (a `select!` arm that costs
/// no timer unless a deadline is set).
pub(crate) async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The request body did not arrive within its route's or backend's `timeouts.http_request`.
pub(crate) fn body_timeout() -> Error {
    let what = "request body not complete within timeouts.http_request";
    Error::new(crate::error::ErrorKind::IdleTimeout, Side::Front, what).during(crate::error::Phase::Request)
}
