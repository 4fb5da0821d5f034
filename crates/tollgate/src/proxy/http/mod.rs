//! HTTP mode: a client connection's requests, one at a time, each parsed, routed and
//! forwarded to a server connection (fresh or pooled), its response parsed and forwarded
//! back. Bodies stream through pooled buffers, or pooled pipes (`spliced.rs`: a long
//! Content-Length body between two plain sockets, `[frontend.splice]`); nothing is buffered
//! whole.
//!
//! The session is a loop of request *streams* (`stream.rs`): read a head (within
//! `timeouts.http_request`; an idle keep-alive wait is bounded by `http_keep_alive`), decide
//! (`route.rs`), count it against the frontend's limits (`limited.rs` answers one over
//! them), answer or forward (`exchange.rs`), then keep the connection only if both
//! the request and the response allow it and the worker is not stopping. A message whose
//! framing is not fully determined is never forwarded; every proxy-made error response
//! closes the connection, so a malformed request can never desync what follows.

mod client;
mod exchange;
pub(crate) mod inbound;
mod limited;
pub(crate) mod route;
pub(crate) mod server_conn;
mod spliced;
mod stream;
mod to_h2;
mod upload;

use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;

use futures_util::FutureExt as _;

use crate::config::model::FrontendTls;
use crate::ctx::WorkerCtx;
use crate::ctx::park::{IdleConn, Opening, ParkedAt};
use crate::error::{Error, Side};
use crate::proxy::{H2Conn, Handoff};
use crate::relay::lazy::LazySocket;

/// A connection handed back (`Some`) goes on outside this task: an idle one to the park
/// (`resume` serves it on), an HTTP/2 one to a task of its own (`proxy::serve_h2`).
pub(crate) async fn serve(
    ctx: &Rc<WorkerCtx>,
    frontend: usize,
    client: LazySocket,
    peer: SocketAddr,
) -> Result<Option<Handoff>, Error> {
    let tls = ctx.shared.config.frontends.get(frontend).and_then(|f| f.tls.as_ref());
    match tls {
        Some(tls) => serve_tls(ctx, frontend, tls, client, peer).await,
        None if ctx.shared.config.frontends.get(frontend).is_some_and(|f| f.h2c) => {
            serve_h2c(ctx, frontend, client, peer).await
        }
        None => run(stream::Session::new(ctx, frontend, client, peer)).await,
    }
}

/// Serves on a connection the park handed back, where its session left off.
pub(crate) async fn resume(ctx: &Rc<WorkerCtx>, opening: Opening, conn: IdleConn) -> Result<Option<Handoff>, Error> {
    let IdleConn {
        socket, tls, shelf, at, ..
    } = conn;
    match tls {
        Some(tls) => resume_tls(ctx, opening, at, shelf, socket, tls).await,
        None => {
            run(stream::Session::resumed(
                ctx,
                opening,
                at,
                shelf,
                LazySocket::new(socket),
            ))
            .await
        }
    }
}

/// A TLS connection back from the park: its socket in the reactor again (it is readable,
/// or its deadline passed) and its rustls state around it, no byte exchanged. Boxed, as
/// `serve_tls`.
fn resume_tls<'a>(
    ctx: &'a Rc<WorkerCtx>,
    opening: Opening,
    at: ParkedAt,
    shelf: Box<[u8]>,
    socket: std::net::TcpStream,
    tls: Box<rustls::ServerConnection>,
) -> Pin<Box<impl Future<Output = Result<Option<Handoff>, Error>> + 'a>> {
    Box::pin(async move {
        let Some(frontend_tls) = ctx
            .shared
            .config
            .frontends
            .get(opening.frontend)
            .and_then(|f| f.tls.as_ref())
        else {
            return Ok(None);
        };
        let socket = tokio::net::TcpStream::from_std(socket).map_err(|e| Error::io(Side::Front, "register", e))?;
        let client = crate::tls::terminate::resume(frontend_tls, socket, *tls)
            .await
            .map_err(|e| Error::io(Side::Front, "resume TLS", e))?;
        run(stream::Session::resumed(ctx, opening, at, shelf, client)).await
    })
}

/// An `h2c` frontend: HTTP/2 when the connection opens with its preface, else HTTP/1 as
/// on any other frontend. Boxed, as `serve_tls`.
fn serve_h2c<'a>(
    ctx: &'a Rc<WorkerCtx>,
    frontend: usize,
    client: LazySocket,
    peer: SocketAddr,
) -> Pin<Box<impl Future<Output = Result<Option<Handoff>, Error>> + 'a>> {
    Box::pin(async move {
        let client = client
            .into_registered()
            .map_err(|e| Error::io(Side::Front, "register", e))?;
        if !crate::proxy::h2front::peek_preface(ctx, &client).await {
            return run(stream::Session::new(ctx, frontend, client, peer)).await;
        }
        let info = h2_info(
            ctx,
            frontend,
            peer,
            crate::http::h1::Proto::Http,
            crate::proxy::record::TlsSeen::default(),
            None,
        );
        Ok(Some(Handoff::H2c(H2Conn::new(info, client))))
    })
}

fn h2_info(
    ctx: &Rc<WorkerCtx>,
    frontend: usize,
    peer: SocketAddr,
    proto: crate::http::h1::Proto,
    tls: crate::proxy::record::TlsSeen,
    leaf: Option<&[u8]>,
) -> crate::proxy::h2front::ConnInfo {
    let auth = ctx
        .shared
        .config
        .frontends
        .get(frontend)
        .and_then(|f| f.tls.as_ref())
        .and_then(|t| t.client_auth.as_ref());
    crate::proxy::h2front::ConnInfo {
        client_cert: leaf.is_some(),
        cert_fields: auth.map_or_else(Vec::new, |a| crate::proxy::client_cert::h2_fields(&a.headers, leaf)),
        ctx: Rc::clone(ctx),
        frontend,
        peer,
        proto,
        version: "HTTP/2.0",
        tls,
        scratch: std::cell::RefCell::new(crate::http::h1::HeadScratch::empty()),
        heads: std::cell::RefCell::default(),
        header_maps: std::cell::RefCell::default(),
    }
}

/// Boxed, so that plain HTTP sessions do not carry a TLS session's state size (a handshake
/// and a TLS stream) in their own future. A plain function, as a box made inline in an
/// async fn still leaves the unboxed size in that fn's state.
fn serve_tls<'a>(
    ctx: &'a Rc<WorkerCtx>,
    frontend: usize,
    tls: &'a FrontendTls,
    client: LazySocket,
    peer: SocketAddr,
) -> Pin<Box<impl Future<Output = Result<Option<Handoff>, Error>> + 'a>> {
    Box::pin(async move {
        // A handshake is several round trips: register right away.
        let client = client
            .into_registered()
            .map_err(|e| Error::io(Side::Front, "register", e))?;
        // No handshake slot until a whole ClientHello is here (tls::terminate).
        let hello = crate::tls::terminate::client_hello(ctx, &client, peer.ip()).await?;
        let client = crate::tls::terminate::accept(ctx, tls, hello, client).await?;
        ctx.handshake_done();
        let conn = client.get_ref().1;
        crate::ctx::origin::note_tls(conn);
        if conn.alpn_protocol() == Some(b"h2") {
            let leaf = client::ClientStream::peer_leaf(&client);
            let seen = ctx
                .shared
                .config
                .frontends
                .get(frontend)
                .map(|f| crate::proxy::record::TlsSeen::of(conn, leaf, &f.log));
            let info = h2_info(
                ctx,
                frontend,
                peer,
                crate::http::h1::Proto::Https,
                seen.unwrap_or_default(),
                leaf,
            );
            return Ok(Some(Handoff::H2(Box::new(H2Conn::new(info, client)))));
        }
        run(stream::Session::new(ctx, frontend, client, peer)).await
    })
}

/// A session's loop, if it could be made. The session goes straight into its loop's future
/// (no `async fn` here, no `match` on it: either would keep another copy of the session in
/// the connection's state for its whole life, rust-lang/rust#62958).
fn run<'a, C: client::ClientStream>(
    session: Option<stream::Session<'a, C>>,
) -> impl Future<Output = Result<Option<Handoff>, Error>> + use<'a, C> {
    futures_util::future::OptionFuture::from(session.map(stream::Session::run))
        .map(|ran| ran.map_or(Ok(None), |idle| idle.map(|idle| idle.map(Handoff::Park))))
}
