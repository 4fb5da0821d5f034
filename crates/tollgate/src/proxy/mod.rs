//! A client connection's life (a *session*): choose a server, connect, relay until both
//! sides are done or the connection goes idle. `tcp` relays bytes; HTTP mode plugs in here.

pub mod connect;
pub mod http;
pub mod idle;
pub mod pipes;
pub mod tcp;

use std::net::SocketAddr;
use std::rc::Rc;

use tokio::net::TcpStream;

use crate::config::Mode;
use crate::error::Error;
use crate::runtime::worker::WorkerCtx;

pub async fn serve(ctx: &Rc<WorkerCtx>, frontend: usize, stream: TcpStream, peer: SocketAddr) {
    let Some(fe) = ctx.shared.config.frontends.get(frontend) else {
        return;
    };
    let result = match fe.mode {
        Mode::Tcp => tcp::serve(ctx, frontend, stream).await,
        // Boxed: an HTTP session's state is much larger than a TCP relay's; TCP sessions
        // should not carry (and copy into their task) that size.
        Mode::Http => Box::pin(http::serve(ctx, frontend, stream, peer)).await,
    };
    if let Err(e) = result {
        log_end(&fe.name, peer, &e);
    }
}

/// Routine endings at debug; anything the operator should see at warn.
fn log_end(frontend: &str, peer: SocketAddr, e: &Error) {
    if e.is_routine() {
        tracing::debug!(frontend, %peer, error = %e, "session ended");
    } else {
        tracing::warn!(frontend, %peer, error = %e, "session failed");
    }
}
