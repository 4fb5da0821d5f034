//! A client connection's life (a *session*): choose a server, connect, relay until both
//! sides are done or the connection goes idle. `tcp` relays bytes; HTTP mode plugs in here.

pub mod connect;
pub mod http;
pub mod idle;
pub mod lazy;
pub mod pipes;
pub mod tcp;

use std::net::SocketAddr;
use std::rc::Rc;

use crate::config::Mode;
use crate::error::{Error, Side};
use crate::runtime::worker::WorkerCtx;
use lazy::LazySocket;

/// `stream`: the accepted socket, not yet registered with the reactor (see `lazy`).
pub async fn serve(ctx: &Rc<WorkerCtx>, frontend: usize, stream: LazySocket, peer: SocketAddr) {
    let Some(fe) = ctx.shared.config.frontends.get(frontend) else {
        return;
    };
    let result = match fe.mode {
        // A relay waits on both sides at once from the start: register right away.
        Mode::Tcp => match stream.into_registered() {
            Ok(stream) => tcp::serve(ctx, frontend, stream).await,
            Err(e) => Err(Error::io(Side::Front, "register", e)),
        },
        Mode::Http => http::serve(ctx, frontend, stream, peer).await,
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
