//! Opening a connection to a server in HTTP mode (`relay::ServerConn`): an idle one from
//! this worker's pool, or a new one, TLS handshake included for a TLS server.

use tokio::net::TcpStream;

use crate::config::model::ServerTls;
use crate::ctx::WorkerCtx;
use crate::error::Error;
use crate::live::server::ServerLive;
use crate::proxy::connect::{self, Connected};
use crate::relay::ServerConn;

/// A connection to a server of `backend` for one request: an idle one from the pool
/// (unless `fresh_only`), or a new one, TLS handshake included for a TLS server. A failed
/// handshake is a `Tls` error on the back side (502), counted in `tls_backend_errors`.
pub(crate) async fn open<'a>(
    ctx: &'a WorkerCtx,
    backend: usize,
    fresh_only: bool,
    hash_key: Option<u64>,
    prefer: Option<crate::live::ServerId>,
    retries: &mut u32,
) -> Result<Connected<'a, ServerConn>, Error> {
    let pool = &ctx.http_pool;
    let reuse = |server: &ServerLive, now| if fresh_only { None } else { pool.take(server, now) };
    let conn = connect::connect_or_reuse(ctx, backend, hash_key, prefer, reuse, retries).await?;
    let Connected {
        stream,
        slot,
        reused,
        chosen,
        connected,
    } = conn;
    let tls = slot.server().tls.as_ref().map(|tls| (tls, &*slot.server().name));
    let (stream, connected) = match (stream, tls) {
        // Boxed: a handshake's state is large, and a plain exchange's future should not
        // carry its size.
        (ServerConn::Plain(tcp), Some((tls, name))) => (
            Box::pin(handshake(ctx, tls, tcp, name)).await?,
            tokio::time::Instant::now(),
        ),
        (stream, _) => (stream, connected),
    };
    Ok(Connected {
        stream,
        slot,
        reused,
        chosen,
        connected,
    })
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
