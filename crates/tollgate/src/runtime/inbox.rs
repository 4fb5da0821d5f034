//! A worker thread's inbox loop: acts on each message (`ctx::inbox::Message`) on the thread
//! it was sent to — serves a handed-over connection, tells a balancer of a weight change,
//! closes the sessions and pooled connections of a killed server.

use std::rc::Rc;

use crate::ctx::WorkerCtx;
use crate::ctx::inbox::{Message, Receiver};

/// Runs the inbox until the worker stops.
pub(crate) async fn run(ctx: Rc<WorkerCtx>, mut inbox: Receiver) {
    while let Some(msg) = inbox.recv().await {
        match msg {
            Message::Connection(h) => {
                crate::listener::spawn_session(&ctx, h.frontend, h.stream, h.peer, h.permits);
                // Now in `sessions_active`: the worker's drain waits for it there.
                drop(h.in_flight);
            }
            Message::Weight {
                backend,
                server,
                weight,
                done,
            } => {
                if let Some(b) = ctx.backends.get(backend) {
                    b.set_weight(server, weight);
                }
                drop(done);
            }
            Message::Kill { server, done } => {
                ctx.http_pool.forget(server);
                ctx.kills.notify_waiters();
                drop(done);
            }
            Message::Show { query, reply } => {
                // The asker may have given up waiting: nothing to do then.
                let _ = reply.send(super::show::on_thread(&ctx, query));
            }
        }
    }
}
