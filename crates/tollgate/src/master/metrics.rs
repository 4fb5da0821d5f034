//! The master's side of the admin endpoint: it binds `[admin] bind` once, at start (the
//! socket outlives every reload and is never bound twice), and hands the endpoint a
//! [`Commands`] that puts each command — a scrape becomes `metrics`, a stats-page button
//! `set server state` — on the master's own request queue, the same path a control-socket
//! client takes. A scrape is answered with a snapshot of every live generation (serving and
//! stopping; see `admin::prometheus` for how generations are labelled).
//!
//! A command that arrives while the master is busy with a reload waits for it (the master
//! handles one request at a time), at most the endpoint's command timeout.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::control::Request;
use crate::admin::http::{Commands, Endpoint, Failed, Ran};
use crate::command::{Command, Outcome};
use crate::config::model::StatsAuth;
use crate::error::Error;

/// Binds the admin endpoint (before the master's runtime starts, so a port in use is a
/// plain start-up failure).
pub(crate) fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, Error> {
    crate::admin::http::bind(addr)
}

/// Serves the admin endpoint on the master's runtime; its commands go through `requests`.
pub(crate) fn spawn(
    listener: std::net::TcpListener,
    auth: Option<StatsAuth>,
    requests: mpsc::UnboundedSender<Request>,
) {
    let Some(listener) = crate::admin::http::register(listener) else {
        return;
    };
    let endpoint = Endpoint::new(Arc::new(Queue(requests)), auth.as_ref());
    tokio::task::spawn_local(crate::admin::http::serve(listener, Arc::new(endpoint)));
}

/// The master's request queue, as the endpoint's way to run commands.
struct Queue(mpsc::UnboundedSender<Request>);

impl Commands for Queue {
    fn run(&self, command: Command) -> Ran {
        let requests = self.0.clone();
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            let request = Request { id: 0, command, reply };
            requests
                .send(request)
                .map_err(|_| Failed::Unavailable("the master is stopping".into()))?;
            let reply = answer
                .await
                .map_err(|_| Failed::Unavailable("the master dropped the command".into()))?;
            match reply.outcome {
                Outcome::Ok { answer } => Ok(answer),
                Outcome::Error { message } => Err(Failed::Refused(message)),
            }
        })
    }
}
