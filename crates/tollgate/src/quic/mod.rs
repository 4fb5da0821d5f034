//! HTTP/3 over QUIC (`[frontend.quic]`, RFC 9114 over RFC 9000).
//!
//! Owns, per worker thread and quic bind: a quinn `Endpoint` on the worker's own
//! SO_REUSEPORT UDP socket (`listener::udp`), the connections it accepts, and their request
//! streams, which are served by the HTTP/2 stream path (`proxy::h2front`) through handles of
//! the same shape. Process-wide: the `Mesh` of channels that carries a datagram read on the
//! wrong thread's socket to the thread that owns its connection.
//!
//! Invariants: a datagram is only ever given to the endpoint of the thread its destination
//! connection ID names (any other endpoint would answer a stateless reset and kill the
//! connection); connection IDs are `cid::LEN` bytes and carry their owner's generation and
//! thread (`cid.rs`).

use std::sync::{Arc, Mutex};

/// Datagrams read on one worker thread's socket that belong to another's connection.
pub(crate) struct Mesh {
    /// Per group (`BoundUdp::group`), per worker: the channel into that worker's socket.
    lanes: Vec<Vec<Lane>>,
}

struct Lane {
    tx: tokio::sync::mpsc::Sender<Forwarded>,
    rx: Mutex<Option<tokio::sync::mpsc::Receiver<Forwarded>>>,
}

/// One forwarded datagram (or GRO batch) with what the socket read with it.
pub(crate) struct Forwarded {
    pub data: bytes::Bytes,
    pub meta: quinn::udp::RecvMeta,
}

/// Forwarded datagrams a worker may have waiting; past it they are dropped (counted), as a
/// full socket buffer drops them.
const LANE_DEPTH: usize = 1024;

impl Mesh {
    pub(crate) fn new(groups: usize, workers: usize) -> Arc<Mesh> {
        let lanes = (0..groups)
            .map(|_| {
                (0..workers)
                    .map(|_| {
                        let (tx, rx) = tokio::sync::mpsc::channel(LANE_DEPTH);
                        Lane {
                            tx,
                            rx: Mutex::new(Some(rx)),
                        }
                    })
                    .collect()
            })
            .collect();
        Arc::new(Mesh { lanes })
    }
}

/// What a worker thread needs to serve its quic sockets: the process-wide mesh and this
/// process's generation (carried in every connection ID it issues, modulo 8).
#[derive(Clone)]
pub(crate) struct Plan {
    pub mesh: Arc<Mesh>,
    pub generation: u64,
}

/// Serves one bound quic socket on the calling worker thread (tasks spawned on its local
/// set): accepts connections until the worker stops, then lets them finish within the
/// drain, as the TCP accept loops do.
pub(crate) fn serve_socket(
    ctx: &std::rc::Rc<crate::ctx::WorkerCtx>,
    sock: crate::listener::udp::BoundUdp,
    plan: &Plan,
) -> std::io::Result<()> {
    let _ = (ctx, sock, plan);
    tracing::warn!("HTTP/3 is not served yet");
    Ok(())
}
