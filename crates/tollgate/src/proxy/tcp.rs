//! TCP mode: a session that connects to a server and relays bytes both ways
//! (`relay::relay_endpoints`).
//!
//! Either side may be TLS (`relay::Endpoint`: a plain socket, or a rustls stream whose
//! plaintext is relayed); `[frontend.splice]` applies when both sides are plain sockets.
//!
//! Session start: a TLS frontend waits for the ClientHello (`tls::terminate::client_hello`),
//! terminates (`tls::terminate::accept`) and routes on the SNI the handshake saw; a plain
//! frontend with `sni` routes peeks the ClientHello (`tls::passthrough`) and routes without
//! decrypting; otherwise `default_backend`.
//! `[[frontend.limit]]`: limits keyed by source count the connection at accept, before any
//! byte is read; limits keyed by SNI once it is known (peeked or from the handshake). A
//! connection a source-only route sends on at accept reads no SNI: `sni` limits skip it.

use std::rc::Rc;

use tokio::net::TcpStream;
use tokio::time::Instant;

use super::connect::Retries;
use super::record::{StreamRecord, TlsSeen};
use crate::config::limit::{LimitAction, LimitKey};
use crate::config::model::Frontend;
use crate::config::route::tcp::{self as tcp_route, TcpTarget};
use crate::ctx::WorkerCtx;
use crate::error::{Error, ErrorKind, Side};
use crate::limit::Held;
use crate::relay::{Endpoint, Layered, Moved, relay_endpoints};
use crate::tls::{ktls, passthrough};

/// A backend, and the index of the route that chose it (`None`: the default backend).
type Routed = (usize, Option<u16>);

pub(crate) async fn serve(
    ctx: &Rc<WorkerCtx>,
    frontend: usize,
    client: TcpStream,
    rec: &mut StreamRecord,
    seen: &mut TlsSeen,
) -> Result<(), Error> {
    let fe = ctx
        .shared
        .config
        .frontends
        .get(frontend)
        .ok_or_else(|| Error::new(ErrorKind::NoServer, Side::Internal, "no such frontend"))?;
    // `[[frontend.limit]]` keyed by source: before any byte is read. Held (connections in
    // flight) until the session ends.
    let mut held = Held::default();
    over_limit(ctx, frontend, rec, None, |_, k| *k == LimitKey::Source, &mut held).await?;
    // Source-only routes decide before any byte is read (`config::route::tcp`).
    let early = match tcp_route::at_accept(fe, rec.client.ip()) {
        Some((_, TcpTarget::Close)) => return Err(denied(ctx, frontend)),
        Some((i, TcpTarget::Backend(b))) => Some((b, u16::try_from(i).ok())),
        None => None,
    };
    if let Some(tls) = &fe.tls {
        // Boxed: the TLS states are large, and a plain TCP session should not carry (and copy
        // into its task) their size.
        return Box::pin(serve_tls(ctx, fe, tls, early, client, rec, seen, &mut held)).await;
    }
    let (backend, route) = match (early, &fe.sni_routes) {
        (Some(routed), _) => routed,
        // Boxed: the ClientHello peek's state (1.1 KB) is needed only until the route is known.
        (None, Some(_)) => Box::pin(inspect(ctx, fe, &client, rec, seen, &mut held)).await?,
        (None, None) => route_sni(ctx, fe, rec, None)?,
    };
    rec.route = route;
    to_server(ctx, fe, backend, &client, rec).await
}

/// Counts the connection against the frontend's limits whose key `only` accepts (its
/// source at accept, its SNI once read); one it is over closes it, after the tarpit if the
/// limit says so.
async fn over_limit<'a>(
    ctx: &'a WorkerCtx,
    frontend: usize,
    rec: &StreamRecord,
    sni: Option<&str>,
    only: impl Fn(usize, &LimitKey) -> bool,
    held: &mut Held<'a>,
) -> Result<(), Error> {
    let set = ctx.shared.limits(frontend);
    if set.is_empty() {
        return Ok(());
    }
    let facts = TcpFacts {
        source: rec.client.ip(),
        sni,
    };
    let Err(over) = set.check(&facts, only, held) else {
        return Ok(());
    };
    let why = crate::limit::OVER_LIMIT;
    tracing::debug!(client = %rec.client, limit = over.table.name(), "connection over a limit");
    match over.action {
        LimitAction::Tarpit(hold) => {
            tokio::time::sleep(hold).await;
            Err(Error::new(ErrorKind::Tarpitted, Side::Front, why))
        }
        // `429` is refused on TCP frontends at load.
        LimitAction::Close | LimitAction::TooMany => Err(Error::new(ErrorKind::Limited, Side::Front, why)),
    }
}

/// What a connection offers a limit's key: no request, so no header and no path.
struct TcpFacts<'r> {
    source: std::net::IpAddr,
    sni: Option<&'r str>,
}

impl crate::limit::Facts for TcpFacts<'_> {
    fn source(&self) -> std::net::IpAddr {
        self.source
    }

    fn sni(&self) -> Option<&str> {
        self.sni
    }

    fn header(&self, _: &str) -> Option<&[u8]> {
        None
    }

    fn path(&self) -> Option<&[u8]> {
        None
    }
}

/// A `deny = true` route closed the connection (counted).
fn denied(ctx: &WorkerCtx, frontend: usize) -> Error {
    ctx.count_denied(frontend);
    Error::new(ErrorKind::Denied, Side::Front, "closed by a deny route")
}

#[allow(clippy::too_many_arguments)] // the session's parts, each borrowed separately
async fn serve_tls<'a>(
    ctx: &'a Rc<WorkerCtx>,
    fe: &Frontend,
    tls: &crate::config::model::FrontendTls,
    early: Option<Routed>,
    client: TcpStream,
    rec: &mut StreamRecord,
    seen: &mut TlsSeen,
    held: &mut Held<'a>,
) -> Result<(), Error> {
    // No handshake slot until a whole ClientHello is here (tls::terminate).
    let hello = crate::tls::terminate::client_hello(ctx, &client, rec.client.ip()).await?;
    if tls.ktls.enabled && tls.server_config.enable_secret_extraction && ktls::available().is_ok() {
        // Eligible for kTLS (enabled in the config, and the kernel has the ULP: probed once
        // per process at startup, cached): rustls over a CorkStream, handed to the kernel
        // after `after_bytes` (tls::ktls).
        let client = crate::tls::terminate::accept(ctx, tls, hello, ktls::CorkStream::new(client)).await?;
        let (backend, route) = after_handshake(ctx, fe, early, rec, client.get_ref().1, seen, held).await?;
        rec.route = route;
        let client = ktls::KtlsClient::new(client, tls.ktls.after_bytes, &ctx.stats);
        return to_server(ctx, fe, backend, client, rec).await;
    }
    let client = crate::tls::terminate::accept(ctx, tls, hello, client).await?;
    let (backend, route) = after_handshake(ctx, fe, early, rec, client.get_ref().1, seen, held).await?;
    rec.route = route;
    to_server(ctx, fe, backend, Layered(client), rec).await
}

/// The handshake's version and SNI, for the access log (copied only when it is on).
/// After a terminated handshake: the TLS facts noted, the SNI counted by the `sni` limits,
/// then the backend (the one chosen at accept, or by SNI).
async fn after_handshake<'a>(
    ctx: &'a WorkerCtx,
    fe: &Frontend,
    early: Option<Routed>,
    rec: &StreamRecord,
    conn: &rustls::ServerConnection,
    seen: &mut TlsSeen,
    held: &mut Held<'a>,
) -> Result<Routed, Error> {
    note_tls(ctx, fe, conn, seen);
    let sni_limits = |_: usize, k: &LimitKey| *k == LimitKey::Sni;
    over_limit(ctx, rec.frontend, rec, conn.server_name(), sni_limits, held).await?;
    match early {
        Some(routed) => Ok(routed),
        None => route_sni(ctx, fe, rec, conn.server_name()),
    }
}

fn note_tls(ctx: &WorkerCtx, fe: &Frontend, conn: &rustls::ServerConnection, seen: &mut TlsSeen) {
    ctx.handshake_done();
    crate::ctx::origin::note_tls(conn);
    if ctx.access_log.is_some() {
        let leaf = conn.peer_certificates().and_then(|c| c.first()).map(|c| c.as_ref());
        *seen = TlsSeen::of(conn, leaf, &fe.log);
    }
}

/// The backend the SNI (or its absence) leads to, and the route that decided (`None`: the
/// default backend).
fn route_sni(ctx: &WorkerCtx, fe: &Frontend, rec: &StreamRecord, sni: Option<&str>) -> Result<Routed, Error> {
    match tcp_route::routed_after_sni(fe, rec.client.ip(), sni) {
        Some((i, TcpTarget::Backend(b))) => Ok((b, i.and_then(|i| u16::try_from(i).ok()))),
        Some((_, TcpTarget::Close)) => Err(denied(ctx, rec.frontend)),
        None if fe.sni_routes.is_none() && fe.tls.is_none() => Err(Error::new(
            ErrorKind::NoServer,
            Side::Internal,
            "frontend has no backend",
        )),
        None => {
            ctx.stats.sni_rejected.add(1);
            Err(Error::new(
                ErrorKind::Tls,
                Side::Front,
                format!("no route for SNI {sni:?}"),
            ))
        }
    }
}

/// Peeks the ClientHello (into a buffer that grows as it arrives) and routes on its SNI.
async fn inspect<'a>(
    ctx: &'a WorkerCtx,
    fe: &Frontend,
    client: &TcpStream,
    rec: &StreamRecord,
    seen: &mut TlsSeen,
    held: &mut Held<'a>,
) -> Result<Routed, Error> {
    let deadline = Instant::now() + ctx.shared.config.timeouts.tls_inspect;
    match passthrough::peek_client_hello(client, deadline).await {
        Ok(info) => {
            crate::ctx::origin::note_sni(info.sni());
            if ctx.access_log.is_some() {
                *seen = TlsSeen::peeked(info.sni());
            }
            over_limit(ctx, rec.frontend, rec, info.sni(), |_, k| *k == LimitKey::Sni, held).await?;
            route_sni(ctx, fe, rec, info.sni())
        }
        Err(e) => {
            ctx.stats.sni_inspect_failures.add(1);
            // A client that hung up is routine; anything else is a refusal worth a warn line.
            let kind = match &e {
                passthrough::InspectError::Truncated => ErrorKind::PeerClosed,
                passthrough::InspectError::Io(io) if crate::error::is_peer_reset(io) => ErrorKind::PeerClosed,
                _ => ErrorKind::Tls,
            };
            Err(Error::new(kind, Side::Front, format!("SNI inspection: {e}")))
        }
    }
}

/// Completes the TLS handshake with a server that asks for TLS, then relays.
async fn to_tls_server<C: Endpoint>(
    ctx: &WorkerCtx,
    fe: &Frontend,
    (backend, live): (usize, &crate::live::server::ServerLive),
    tls: &crate::config::model::ServerTls,
    server: TcpStream,
    client: &mut C,
    (idle, moved): (std::time::Duration, &Moved),
) -> Result<(), Error> {
    let server = crate::tls::backend::connect(tls, server, ctx.shared.config.timeouts.tls_handshake, &live.name)
        .await
        .inspect_err(|_| ctx.stats.tls_backend_errors.add(1))
        .map_err(|e| e.at(backend, Some(live.id)))?;
    relay_endpoints(ctx.relay(), client, &mut Layered(server), idle, fe.splice, moved).await
}

/// The client address's hash key, for a backend that hashes (TCP backends hash only the source).
fn source_key(config: &crate::config::Config, backend: usize, rec: &StreamRecord) -> Option<u64> {
    let hashes = config.backends.get(backend).is_some_and(|b| b.hash_key.is_some());
    hashes.then(|| crate::balance::hash::key_of_ip(rec.client.ip()))
}

/// Connects to a server of `backend` (TLS if that server asks for it) and relays.
async fn to_server<C: Endpoint>(
    ctx: &WorkerCtx,
    fe: &Frontend,
    backend: usize,
    mut client: C,
    rec: &mut StreamRecord,
) -> Result<(), Error> {
    let config = &ctx.shared.config;
    rec.backend = Some(backend);
    let super::connect::Connected {
        stream: server,
        slot,
        chosen,
        connected,
        ..
    } = super::connect::connect(
        ctx,
        backend,
        source_key(config, backend, rec),
        Retries::backend(&mut rec.retries),
    )
    .await?;
    let live = slot.server();
    (rec.server, rec.server_at) = (Some(live.id), Some(slot.position()));
    rec.timing.chosen = Some(rec.timing.since(chosen));
    rec.timing.connected = Some(rec.timing.since(connected));
    // The session's registry entry counts live (`show sessions`); a local one otherwise.
    let entry = crate::ctx::sessions::current();
    let own = Moved::default();
    let moved = entry.as_deref().map_or(&own, |e| &e.moved);
    // One expression: the limits (208 bytes) are not kept in the task while it relays.
    let idle = config
        .request_limits(Some(backend), &crate::config::model::Overrides::NONE)
        .timeouts
        .tunnel_idle();
    let epoch = live.kill_epoch();
    let relay = async {
        match &live.tls {
            // Boxed: a TLS server's handshake and stream (1.1–1.4 KB) would otherwise be part
            // of every relay's task, plain ones included, for their whole life.
            Some(tls) => {
                Box::pin(to_tls_server(
                    ctx,
                    fe,
                    (backend, live),
                    tls,
                    server,
                    &mut client,
                    (idle, moved),
                ))
                .await
            }
            None => relay_endpoints(ctx.relay(), &mut client, &mut &server, idle, fe.splice, moved).await,
        }
    };
    let kills = std::pin::pin!(ctx.kills.notified());
    let relayed = tokio::select! {
        biased;
        relayed = relay => relayed,
        () = ctx.killed(live, epoch, kills) => Err(Error::new(
            ErrorKind::Killed,
            Side::Internal,
            format!("server {}/{} put in maintenance with --kill", live.backend_name, live.name),
        )),
    };
    rec.bytes_to_server = moved.to_server.get();
    rec.bytes_to_client = moved.to_client.get();
    relayed.map_err(|e| e.at(backend, Some(live.id)))
}
