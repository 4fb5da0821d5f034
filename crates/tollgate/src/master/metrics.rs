//! The master's side of the admin endpoint: it binds `[admin] bind` once, at start (the
//! socket outlives every reload and is never bound twice), and turns each scrape into a
//! `metrics` command on the master's own request queue — the same path a control-socket
//! client takes — answered with a snapshot of every live generation (serving and stopping;
//! see `admin::prometheus` for how generations are labelled).
//!
//! A scrape that arrives while the master is busy with a reload waits for it (the master
//! handles one request at a time), at most the endpoint's scrape timeout.

use std::net::SocketAddr;

use tokio::sync::{mpsc, oneshot};

use super::control::Request;
use crate::command::{Answer, Command, Outcome};
use crate::error::Error;

/// Binds the admin endpoint (before the master's runtime starts, so a port in use is a
/// plain start-up failure).
pub(crate) fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, Error> {
    crate::admin::http::bind(addr)
}

/// Serves the admin endpoint on the master's runtime; scrapes go through `requests`.
pub(crate) fn spawn(listener: std::net::TcpListener, requests: mpsc::UnboundedSender<Request>) {
    let Some(listener) = crate::admin::http::register(listener) else {
        return;
    };
    let scrape = move || {
        let requests = requests.clone();
        async move {
            let (reply, answer) = oneshot::channel();
            let request = Request {
                id: 0,
                command: Command::Metrics,
                reply,
            };
            requests
                .send(request)
                .map_err(|_| "the master is stopping".to_string())?;
            let reply = answer.await.map_err(|_| "the master dropped the scrape".to_string())?;
            match reply.outcome {
                Outcome::Ok {
                    answer: Answer::Metrics(report),
                } => Ok(crate::admin::prometheus::render(&report)),
                Outcome::Ok { .. } => Err("unexpected answer".to_string()),
                Outcome::Error { message } => Err(message),
            }
        }
    };
    tokio::task::spawn_local(crate::admin::http::serve(listener, scrape));
}
