//! A client connection's life (a *session*): choose a server, connect, relay until both
//! sides are done or the connection goes idle. `tcp` relays bytes; HTTP mode plugs in here.
//! A frontend with `accept_proxy` first reads the PROXY protocol header (`accept_proxy`):
//! from then on its address is the client's everywhere (routes, hashing, forwarding
//! headers, logs, `show sessions`). A TLS frontend asking for client certificates hands
//! the verified identity to servers in HTTP mode (`client_cert`).

pub(crate) mod accept_proxy;
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

use crate::config::{Config, Mode};
use crate::ctx::WorkerCtx;
use crate::error::{Error, Side};
use crate::relay::lazy::LazySocket;

/// `stream`: the accepted socket, not yet registered with the reactor (see `lazy`).
pub(crate) async fn serve(ctx: &Rc<WorkerCtx>, frontend: usize, mut stream: LazySocket, peer: SocketAddr) {
    let Some(fe) = ctx.shared.config.frontends.get(frontend) else {
        return;
    };
    let origin = match accept_proxy::start(ctx, fe, &mut stream, peer).await {
        Ok(origin) => origin,
        Err(e) => return log_end(ctx, &fe.name, peer, &e),
    };
    let (peer, result) = match origin {
        Some(origin) => {
            let client = origin.client;
            // `allow` / `deny` on the address the header carried (the accept loop let the
            // balancer's connection in unchecked).
            if fe.accept_proxy.is_some() && !(fe.access.is_open() || fe.access.admits(client.ip())) {
                ctx.count_denied(frontend);
                tracing::debug!(frontend = %fe.name, %client, "connection refused by the frontend's allow/deny lists");
                return;
            }
            crate::ctx::sessions::note(|e| e.set_client(client));
            // Admitted: from here it is a session (`spawn_session` left the counting of an
            // `accept_proxy` connection to us).
            let _open = fe.accept_proxy.is_some().then(|| {
                ctx.stats.sessions_total.add(1);
                ctx.open_session(frontend, std::time::Instant::now())
            });
            let served = crate::ctx::origin::scope(origin, serve_mode(ctx, fe, frontend, stream, client));
            (client, served.await)
        }
        None => (peer, serve_mode(ctx, fe, frontend, stream, peer).await),
    };
    if let Err(e) = result {
        log_end(ctx, &fe.name, peer, &e);
    }
}

/// The session in the frontend's mode, `peer` being the client.
async fn serve_mode(
    ctx: &Rc<WorkerCtx>,
    fe: &crate::config::Frontend,
    frontend: usize,
    stream: LazySocket,
    peer: SocketAddr,
) -> Result<(), Error> {
    match fe.mode {
        // A relay waits on both sides at once from the start: register right away.
        Mode::Tcp => {
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
            result
        }
        Mode::Http => http::serve(ctx, frontend, stream, peer).await,
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
