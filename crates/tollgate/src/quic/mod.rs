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

mod cid;
mod conn;
mod guard;
pub mod handover;
mod socket;
mod stream;

use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::model::{Frontend, Http3};
use crate::ctx::WorkerCtx;
use crate::listener::udp::BoundUdp;

/// Datagrams read on one worker thread's socket that belong to another's connection, and
/// the keys every thread of the process shares: the CID tag (any thread tells whose a CID
/// is), the address-validation token key (a Retry's token is checked by whichever thread
/// the retried Initial lands on) and the stateless-reset key.
pub(crate) struct Mesh {
    /// Per group (`BoundUdp::group`), per worker: the channel into that worker's socket.
    lanes: Vec<Vec<Lane>>,
    workers: usize,
    pub(crate) key: cid::TagKey,
    /// Toward older generations' threads (master mode, after a reload).
    outbound: handover::Outbound,
    /// Per worker thread: the receiving end of its pair from newer generations (taken once).
    inbound: Mutex<Vec<Option<std::os::fd::OwnedFd>>>,
    /// A newer generation reads the sockets now (`hand_over`): this one only sends.
    handed_over: std::sync::atomic::AtomicBool,
    token_key: Arc<dyn quinn::crypto::HandshakeTokenKey>,
    reset_key: Arc<dyn quinn::crypto::HmacKey>,
    /// `zero_rtt` listeners' sessions (see `server_config`).
    sessions: Arc<rustls::server::ServerSessionMemoryCache>,
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
    /// At startup: the CID tag key and the pairs across generations from `handover` (the
    /// master's), the other keys from the system's random source.
    pub(crate) fn new(groups: usize, workers: usize, handover: handover::Handover) -> std::io::Result<Arc<Mesh>> {
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
        let mut secret = [0u8; 32];
        aws_lc_rs::rand::fill(&mut secret).map_err(|_| std::io::Error::other("no random source"))?;
        let token_key = aws_lc_rs::hkdf::Salt::new(aws_lc_rs::hkdf::HKDF_SHA256, &[]).extract(&secret);
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let reset_key = aws_lc_rs::hmac::Key::generate(aws_lc_rs::hmac::HMAC_SHA256, &rng)
            .map_err(|_| std::io::Error::other("no random source"))?;
        let key = match handover.key {
            Some(k) => cid::TagKey::from_bytes(k),
            None => cid::TagKey::random()?,
        };
        Ok(Arc::new(Mesh {
            lanes,
            workers,
            key,
            outbound: handover::Outbound::new(handover.outbound)?,
            inbound: Mutex::new(handover.inbound.into_iter().map(Some).collect()),
            handed_over: std::sync::atomic::AtomicBool::new(false),
            token_key: Arc::new(token_key),
            reset_key: Arc::new(reset_key),
            sessions: rustls::server::ServerSessionMemoryCache::new(ZERO_RTT_SESSIONS),
        }))
    }

    pub(crate) fn workers(&self) -> usize {
        self.workers
    }

    /// A newer generation took over the sockets (a reload): this generation's threads stop
    /// reading them and get their connections' datagrams from it, through their pairs.
    pub(crate) fn hand_over(&self) {
        self.handed_over.store(true, std::sync::atomic::Ordering::Release);
    }

    fn is_handed_over(&self) -> bool {
        self.handed_over.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The receiving end of `thread`'s lane in `group` (once).
    fn take_inbox(&self, group: usize, thread: usize) -> Option<tokio::sync::mpsc::Receiver<Forwarded>> {
        self.lanes.get(group)?.get(thread)?.rx.lock().ok()?.take()
    }

    /// Queues a datagram for `thread`; `false` if its queue is full (or gone).
    fn forward(&self, group: usize, thread: usize, datagram: Forwarded) -> bool {
        self.lanes
            .get(group)
            .and_then(|g| g.get(thread))
            .is_some_and(|lane| lane.tx.try_send(datagram).is_ok())
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
/// set): accepts connections until the worker stops; they finish within the drain, as TCP
/// sessions do (each is a session: `sessions_active`, `show sessions`, `maxconn`).
pub(crate) fn serve_socket(ctx: &Rc<WorkerCtx>, sock: BoundUdp, plan: &Plan) -> std::io::Result<()> {
    let config = &ctx.shared.config;
    let fe = config
        .frontends
        .get(sock.frontend)
        .ok_or_else(|| std::io::Error::other("quic socket for an unknown frontend"))?;
    let server = server_config(fe, &config.http3, &plan.mesh)?;
    let mut endpoint_config = quinn::EndpointConfig::new(Arc::clone(&plan.mesh.reset_key));
    let (generation, thread, key) = (plan.generation, ctx.id, plan.mesh.key.clone());
    endpoint_config.cid_generator(move || Box::new(cid::Generator::new(generation, thread, key.clone())));
    let socket = socket::SteeringSocket::new(socket::Parts {
        socket: sock.socket,
        thread: ctx.id,
        generation: plan.generation,
        group: sock.group,
        mesh: Arc::clone(&plan.mesh),
        stats: Arc::clone(&ctx.stats),
        shared: Arc::clone(&ctx.shared),
        frontend: sock.frontend,
    })?;
    tracing::debug!(
        worker = ctx.id,
        frontend = %fe.name,
        addr = %sock.local,
        gso = quinn::AsyncUdpSocket::max_transmit_segments(&socket),
        gro = quinn::AsyncUdpSocket::max_receive_segments(&socket),
        "serving HTTP/3"
    );
    let endpoint = quinn::Endpoint::new_with_abstract_socket(
        endpoint_config,
        Some(server),
        Arc::new(socket),
        Arc::new(quinn::TokioRuntime),
    )?;
    tokio::task::spawn_local(accept_loop(Rc::clone(ctx), sock.frontend, endpoint));
    Ok(())
}

/// Starts the calling worker thread's reader of datagrams newer generations forward (master
/// mode): each goes into this thread's lane of its group, as a datagram another thread of
/// this generation forwarded would. Once per thread; nothing without a pair.
pub(crate) fn serve_inbound(ctx: &Rc<WorkerCtx>, plan: &Plan) -> std::io::Result<()> {
    let fd = plan
        .mesh
        .inbound
        .lock()
        .ok()
        .and_then(|mut v| v.get_mut(ctx.id).and_then(Option::take));
    let Some(fd) = fd else { return Ok(()) };
    let std = std::os::unix::net::UnixDatagram::from(fd);
    std.set_nonblocking(true)?;
    let sock = tokio::net::UnixDatagram::from_std(std)?;
    let (mesh, thread, stats) = (Arc::clone(&plan.mesh), ctx.id, Arc::clone(&ctx.stats));
    tokio::task::spawn_local(async move {
        let mut buf = vec![0u8; handover::MAX_MESSAGE];
        // Each round takes one message; the task lives as long as the worker.
        loop {
            let n = match sock.recv(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let Some((group, meta, data)) = buf.get(..n).and_then(handover::decode) else {
                continue;
            };
            let datagram = Forwarded {
                data: bytes::Bytes::copy_from_slice(data),
                meta,
            };
            if !mesh.forward(group, thread, datagram) {
                stats.quic_forward_dropped.add(1);
            }
        }
    });
    Ok(())
}

/// quinn's server side from the frontend's TLS config (same certificates, resolver, client
/// authentication and session tickets; ALPN `h3`; early data only with `zero_rtt`) and
/// `[http3]`.
fn server_config(fe: &Frontend, h3: &Http3, mesh: &Mesh) -> std::io::Result<quinn::ServerConfig> {
    let (Some(tls), Some(quic)) = (&fe.tls, &fe.quic) else {
        return Err(std::io::Error::other("quic bind on a frontend without TLS"));
    };
    let mut rustls = (*tls.server_config).clone();
    rustls.alpn_protocols = vec![b"h3".to_vec()];
    // QUIC allows 0 or all (RFC 9001 §4.6.1).
    rustls.max_early_data_size = if quic.zero_rtt { u32::MAX } else { 0 };
    if quic.zero_rtt {
        // Early data only ever resumes a session kept here, and each once (rustls takes it
        // from the cache): a replayed ClientHello finds nothing (RFC 8446 §8.1). Stateless
        // tickets could be replayed, so this listener issues none.
        rustls.ticketer = Arc::new(NoTickets);
        rustls.session_storage = Arc::clone(&mesh.sessions) as Arc<dyn rustls::server::StoresServerSessions>;
    }
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(rustls))
        .map_err(|e| std::io::Error::other(format!("frontend {}: TLS config unusable for QUIC: {e}", fe.name)))?;
    let mut server = quinn::ServerConfig::new(Arc::new(crypto), Arc::clone(&mesh.token_key));
    server.transport_config(Arc::new(transport(h3)));
    Ok(server)
}

/// No stateless tickets (0-RTT resumes stateful sessions only).
#[derive(Debug)]
struct NoTickets;

impl rustls::server::ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }

    fn lifetime(&self) -> u32 {
        0
    }

    fn encrypt(&self, _plain: &[u8]) -> Option<Vec<u8>> {
        None
    }

    fn decrypt(&self, _cipher: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// Sessions kept for 0-RTT resumption, process-wide (any thread may see the resumption).
const ZERO_RTT_SESSIONS: usize = 4096;

fn transport(h3: &Http3) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(h3.max_concurrent_streams.into());
    // The client's control stream and its two QPACK streams (RFC 9114 §6.2, RFC 9204 §4.2).
    t.max_concurrent_uni_streams(3u32.into());
    t.stream_receive_window(h3.stream_window.into());
    t.receive_window(h3.connection_window.into());
    t.send_window(u64::from(h3.connection_window).saturating_mul(4));
    let idle = quinn::IdleTimeout::try_from(h3.idle_timeout).unwrap_or_else(|_| quinn::VarInt::from_u32(30_000).into());
    t.max_idle_timeout(Some(idle));
    t.datagram_receive_buffer_size(None);
    t
}

/// New connections per second on one thread, for `http3.retry_above`.
struct HandshakeRate {
    second: Instant,
    count: u32,
}

impl HandshakeRate {
    /// Counts one; whether the second's count is over `limit`.
    fn over(&mut self, limit: u32, now: Instant) -> bool {
        if now.duration_since(self.second) >= Duration::from_secs(1) {
            self.second = now;
            self.count = 0;
        }
        self.count = self.count.saturating_add(1);
        self.count > limit
    }
}

/// Takes connections until the worker stops; then refuses new ones while the open ones
/// finish (their tasks send GOAWAY).
async fn accept_loop(ctx: Rc<WorkerCtx>, frontend: usize, endpoint: quinn::Endpoint) {
    let stop = ctx.stopping();
    tokio::pin!(stop);
    let mut rate = HandshakeRate {
        second: Instant::now(),
        count: 0,
    };
    let stopping = loop {
        let incoming = tokio::select! {
            biased;
            () = &mut stop => break true,
            i = endpoint.accept() => i,
        };
        let Some(incoming) = incoming else { break false };
        admit(&ctx, frontend, incoming, &mut rate);
    };
    if stopping {
        // New handshakes are refused from now on; packets of open connections still flow.
        endpoint.set_server_config(None);
        // The endpoint lives while connections do: its driver is what moves their packets.
        endpoint.wait_idle().await;
    }
}

/// This thread's counters of `frontend`.
fn frontend_cell(ctx: &WorkerCtx, frontend: usize) -> Option<&crate::metrics::FrontendCell> {
    ctx.shared.metrics.get(ctx.id).and_then(|t| t.frontend(frontend))
}

/// Decides what becomes of a new connection attempt, before any connection state exists.
fn admit(ctx: &Rc<WorkerCtx>, frontend: usize, incoming: quinn::Incoming, rate: &mut HandshakeRate) {
    let shared = &ctx.shared;
    let peer = incoming.remote_address();
    if shared.paused.is_disabled(frontend) || !crate::listener::admit(ctx, frontend, peer.ip()) {
        incoming.refuse();
        return;
    }
    let h3 = &shared.config.http3;
    let busy = rate.over(h3.retry_above, Instant::now())
        || shared.handshakes.available_permits() < (shared.config.global.max_handshakes as usize).div_ceil(2);
    if busy && !incoming.remote_address_validated() && incoming.may_retry() {
        ctx.stats.quic_retries.add(1);
        if let Some(f) = frontend_cell(ctx, frontend) {
            f.quic_retries.add(1);
        }
        let _ = incoming.retry();
        return;
    }
    let Some(permits) = shared.budgets.try_acquire(frontend) else {
        ctx.stats.quic_refused.add(1);
        if let Some(f) = frontend_cell(ctx, frontend) {
            f.quic_refused.add(1);
        }
        incoming.refuse();
        return;
    };
    let Ok(handshake) = Arc::clone(&shared.handshakes).try_acquire_owned() else {
        ctx.stats.quic_refused.add(1);
        if let Some(f) = frontend_cell(ctx, frontend) {
            f.quic_refused.add(1);
        }
        incoming.refuse();
        return;
    };
    ctx.stats.sessions_total.add(1);
    ctx.stats.sessions_active.add(1);
    tokio::task::spawn_local(conn::serve(Rc::clone(ctx), frontend, incoming, permits, handshake));
}

/// For the fuzz target `quic_datagram` (what tollgate itself parses): HTTP/3 frame headers
/// against their bounds (the same verdict however the bytes are split), the destination CID
/// and its owner, and a handover message, which must come back the same when encoded again.
/// Panics on a violation.
#[doc(hidden)]
pub fn fuzz_datagram(data: &[u8]) {
    // The frame bound, split where the first byte says: the verdict does not depend on it.
    if let Some((&split, rest)) = data.split_first() {
        let mut whole = guard::Frames::request(1024);
        let mut pieces = guard::Frames::request(1024);
        let (a, b) = rest.split_at(usize::from(split).min(rest.len()));
        let split_verdict = pieces.pass(a).and_then(|()| pieces.pass(b));
        assert_eq!(whole.pass(rest), split_verdict);
    }
    let key = cid::TagKey::from_bytes([7; 16]);
    if let Some(dcid) = cid::destination(data) {
        assert!(dcid.len() <= data.len());
        if let Some((generation, thread)) = key.owner(dcid) {
            assert!(generation < 8 && thread < cid::MAX_THREADS);
            assert_eq!(dcid.len(), cid::LEN);
        }
    }
    if let Some((group, meta, datagram)) = handover::decode(data) {
        let mut again = Vec::new();
        assert!(handover::encode(group, &meta, datagram, &mut again).is_some());
        let back = handover::decode(&again).map(|(g, m, d)| (g, m.addr, m.dst_ip, m.ecn, d));
        assert_eq!(back, Some((group, meta.addr, meta.dst_ip, meta.ecn, datagram)));
    }
}
