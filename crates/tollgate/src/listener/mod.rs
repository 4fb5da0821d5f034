//! Listening sockets: binding them, accepting from them (`accept`, under the budgets of
//! `crate::budget`), and starting a session for each connection (`spawn_session`).
//! A frontend's `allow` / `deny` lists are checked right after accept (`admit`), before a
//! connection is handed to another worker or read from: a refused one is closed unread.
//!
//! With `thread_per_core`, every bind address gets one SO_REUSEPORT socket per worker, all
//! bound up front (so group order is ours) and handed to worker `i` as socket `i`; the kernel
//! spreads new connections across them and a connection is served where it was accepted.
//! If SO_REUSEPORT binding fails, the address falls back to one plain socket whose single
//! accept loop feeds the workers (one warning, and it keeps serving).
//!
//! An address another socket already listens on is refused, never shared: SO_REUSEPORT would
//! let a second tollgate (same user) silently split the traffic with the first. Before a
//! group is bound, a probe binds the address without SO_REUSEPORT, which the kernel refuses
//! while any socket listens there. Our own reloads never probe an address they already hold
//! (`master::sockets` reuses its sockets). A bind error reads
//! `cannot listen on ADDR (frontend "NAME"): REASON`.
//!
//! Sockets are plain `std` listeners keyed by address and index, so a master process can
//! bind them and pass them to a worker generation unchanged.

pub(crate) mod accept;
pub mod udp;

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::rc::Rc;
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};

use crate::budget::ConnPermits;
use crate::config::{Config, Mode};
use crate::ctx::WorkerCtx;
use crate::ctx::park::{Parked, SessionGuards};
use crate::ctx::sessions::{self, Opened, SessionState};
use crate::proxy::{H2Conn, Handoff};
use crate::proxy::{HttpMode, SessionMode, TcpMode};
use crate::relay::lazy::LazySocket;

/// One bound listening socket.
#[derive(Debug)]
pub struct BoundSocket {
    pub frontend: usize,
    /// The address as configured (port may be 0 in tests).
    pub configured: SocketAddr,
    /// The address actually bound.
    pub local: SocketAddr,
    /// `Some(i)`: worker `i`'s own SO_REUSEPORT socket. `None`: shared, one accept loop.
    pub worker: Option<usize>,
    pub socket: TcpListener,
}

impl BoundSocket {
    /// A stable name for handing sockets between processes: `tcp:ADDR#WORKER` or `tcp:ADDR#shared`.
    pub fn key(&self) -> String {
        match self.worker {
            Some(w) => format!("tcp:{}#{w}", self.configured),
            None => format!("tcp:{}#shared", self.configured),
        }
    }
}

/// Binds every frontend address of `config`.
pub fn bind_all(config: &Config) -> io::Result<Vec<BoundSocket>> {
    bind_all_with(config, bind_reuseport_group)
}

/// Binds `n` SO_REUSEPORT sockets on one address (see `bind_reuseport_group`).
pub type ReusePortBinder = fn(SocketAddr, usize, u32) -> io::Result<Vec<TcpListener>>;

/// `bind_all` with the SO_REUSEPORT step supplied, so the fallback path can be exercised
/// on kernels where SO_REUSEPORT always works.
pub fn bind_all_with(config: &Config, reuseport: ReusePortBinder) -> io::Result<Vec<BoundSocket>> {
    let mut out = Vec::new();
    for (fe, frontend) in config.frontends.iter().enumerate() {
        for &addr in &frontend.binds {
            let cannot = |e: io::Error| cannot_listen(addr, &frontend.name, &e);
            let per_worker = if config.global.thread_per_core {
                probe_free(addr).map_err(cannot)?;
                match reuseport(addr, config.global.workers, config.global.backlog) {
                    Ok(group) => Some(group),
                    // Taken between the probe and the bind: the same refusal, no fallback.
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err(cannot(e)),
                    Err(e) => {
                        tracing::warn!(
                            frontend = %frontend.name, %addr, error = %e,
                            "SO_REUSEPORT bind failed; falling back to one shared accept loop for this address"
                        );
                        None
                    }
                }
            } else {
                None
            };
            match per_worker {
                Some(group) => {
                    for (w, socket) in group.into_iter().enumerate() {
                        out.push(bound(fe, addr, Some(w), socket)?);
                    }
                }
                None => {
                    let socket = bind_one(addr, false, config.global.backlog).map_err(cannot)?;
                    out.push(bound(fe, addr, None, socket)?);
                }
            }
        }
    }
    Ok(out)
}

fn bound(
    frontend: usize,
    configured: SocketAddr,
    worker: Option<usize>,
    socket: TcpListener,
) -> io::Result<BoundSocket> {
    Ok(BoundSocket {
        frontend,
        configured,
        local: socket.local_addr()?,
        worker,
        socket,
    })
}

/// Fails with `AddrInUse` if a socket listens on `addr` (any process, any user): the probe
/// binds without SO_REUSEPORT (with SO_REUSEADDR, so TIME_WAIT leftovers do not count) and
/// is closed at once. Port 0 needs no probe: the kernel picks a port nobody uses.
pub(crate) fn probe_free(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    probe.set_reuse_address(true)?;
    if addr.is_ipv6() {
        probe.set_only_v6(true)?;
    }
    probe.bind(&addr.into())
}

/// The one-line bind error: `cannot listen on ADDR (frontend "NAME"): address already in use`.
pub(crate) fn cannot_listen(addr: SocketAddr, frontend: &str, e: &io::Error) -> io::Error {
    let reason = match e.kind() {
        io::ErrorKind::AddrInUse => "address already in use".to_string(),
        io::ErrorKind::AddrNotAvailable => "address not available on this host".to_string(),
        io::ErrorKind::PermissionDenied => {
            "permission denied (a port below 1024 needs root or CAP_NET_BIND_SERVICE)".to_string()
        }
        _ => crate::error::os_message(e),
    };
    io::Error::new(
        e.kind(),
        format!("cannot listen on {addr} (frontend \"{frontend}\"): {reason}"),
    )
}

/// `n` SO_REUSEPORT sockets on one address. With port 0 the first socket picks the port
/// and the others join it.
pub(crate) fn bind_reuseport_group(addr: SocketAddr, n: usize, backlog: u32) -> io::Result<Vec<TcpListener>> {
    let first = bind_one(addr, true, backlog)?;
    let actual = first.local_addr()?;
    let mut group = vec![first];
    for _ in 1..n {
        group.push(bind_one(actual, true, backlog)?);
    }
    Ok(group)
}

/// One listening socket: nonblocking, SO_REUSEADDR (restart without TIME_WAIT trouble),
/// optionally SO_REUSEPORT, IPV6_V6ONLY for v6 addresses so v4 and v6 binds can coexist.
pub(crate) fn bind_one(addr: SocketAddr, reuse_port: bool, backlog: u32) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok(socket.into())
}

/// Starts a session on this worker for `stream`: an accepted, non-blocking socket, not
/// registered with the reactor. `permits` are held until the session ends.
pub(crate) fn spawn_session(
    ctx: &Rc<WorkerCtx>,
    frontend: usize,
    stream: std::net::TcpStream,
    peer: SocketAddr,
    permits: ConnPermits,
) {
    // With `accept_proxy` the connection becomes a session (counted, STOT) only once its
    // header is read and its client admitted (`proxy::serve`), as on a frontend without it
    // a refused client never is one.
    let counted_now = ctx
        .shared
        .config
        .frontends
        .get(frontend)
        .is_none_or(|f| f.accept_proxy.is_none());
    if counted_now {
        ctx.stats.sessions_total.add(1);
    }
    ctx.stats.sessions_active.add(1);
    let tcp = ctx
        .shared
        .config
        .frontends
        .get(frontend)
        .is_some_and(|f| f.mode == Mode::Tcp);
    let accepted = Accepted {
        frontend,
        stream,
        peer,
        permits,
        counted_now,
    };
    // One task type per mode (`proxy::SessionMode`): each task's cell is its mode's size.
    if tcp {
        spawn_counted(ctx, session::<TcpMode>(Rc::clone(ctx), accepted));
    } else {
        spawn_counted(ctx, session::<HttpMode>(Rc::clone(ctx), accepted));
    }
}

/// A connection an accept loop took, for its session task.
struct Accepted {
    frontend: usize,
    stream: std::net::TcpStream,
    peer: SocketAddr,
    permits: ConnPermits,
    /// Counted as a session already (not with `accept_proxy`: see `spawn_session`).
    counted_now: bool,
}

/// A session's task: its guards for its whole life, then the park or the close.
async fn session<M: SessionMode>(ctx: Rc<WorkerCtx>, a: Accepted) {
    // Counted out on drop, so a session whose task is dropped (a hard stop) is too.
    let guards = SessionGuards::open(&ctx, opened(&ctx, a.frontend, a.peer), a.counted_now, a.permits);
    let serve = crate::proxy::serve::<M>(&ctx, a.frontend, LazySocket::new(a.stream), a.peer);
    // In the thread's registry (`show sessions`) for the session's whole life.
    let idle = sessions::scope(guards.entry(), serve).await;
    park_or_close(&ctx, idle, guards);
}

/// Serves a connection the park handed back (a request came, the client closed, or a
/// first request's wait ran out) where its session left off, in a new task.
pub(crate) fn resume_session(ctx: &Rc<WorkerCtx>, parked: Parked) {
    let session_ctx = Rc::clone(ctx);
    spawn_counted(ctx, async move {
        let ctx = session_ctx;
        let opening = parked.guards.opening();
        let guards = parked.guards.resume(&ctx);
        let serve = crate::proxy::resume(&ctx, opening, parked.conn);
        let idle = sessions::scope(guards.entry(), serve).await;
        park_or_close(&ctx, idle, guards);
    });
}

/// A session's task ends: an idle connection goes to the park (or on in a new task if the
/// park cannot take it), an HTTP/2 connection on in a task of its own; else the guards
/// count it out.
fn park_or_close(ctx: &Rc<WorkerCtx>, handoff: Option<Handoff>, guards: SessionGuards<'_>) {
    let conn = match handoff {
        None => return,
        Some(Handoff::Park(conn)) => conn,
        Some(Handoff::H2c(conn)) => return spawn_h2(ctx, guards, Box::new(conn)),
        Some(Handoff::H2(conn)) => return spawn_h2(ctx, guards, conn),
    };
    let parked = Parked {
        guards: guards.park(conn.open_counted),
        conn,
    };
    if let Err(mut parked) = ctx.park.park(parked) {
        parked.conn.at.may_park = false;
        resume_session(ctx, parked);
    }
}

/// Serves an HTTP/2 connection in a task of its own, with the guards of the session that
/// opened it (it stays counted and registered all along: nothing is awaited in between).
/// The connection comes boxed: the task keeps the pointer, not a second copy of a socket
/// that its future holds too (`proxy::serve_h2`).
fn spawn_h2<T>(ctx: &Rc<WorkerCtx>, guards: SessionGuards<'_>, conn: Box<H2Conn<T>>)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + 'static,
{
    let handed = guards.park(conn.open_counted);
    let task_ctx = Rc::clone(ctx);
    spawn_counted(ctx, async move {
        let ctx = task_ctx;
        let guards = handed.resume(&ctx);
        sessions::scope(guards.entry(), crate::proxy::serve_h2(&ctx, conn)).await;
        drop(guards);
    });
}

/// Spawns a session's task on this thread. Each poll that returns is progress for the
/// watchdog: a thread busy with many sessions is not stuck, however long its run queue.
fn spawn_counted(ctx: &WorkerCtx, fut: impl Future<Output = ()> + 'static) {
    let fut = crate::stats::counting_polls(Arc::clone(&ctx.progress), fut);
    tokio::task::spawn_local(fut);
}

/// Watches this thread's parked connections until the worker stops (`ctx::park`).
pub(crate) async fn run_park(ctx: Rc<WorkerCtx>) {
    ctx.park
        .run(
            ctx.stopping(),
            |parked| resume_session(&ctx, parked),
            |parked| {
                drop(parked.conn);
                parked.guards.close(&ctx);
            },
        )
        .await;
}

/// Whether the frontend's `allow` / `deny` lists let a connection from `client` in; counts
/// a refusal. `client` is the socket's peer, or the address a PROXY protocol header carries
/// when the frontend accepts one (then this runs after the header, before anything else).
#[inline]
pub(crate) fn admit(ctx: &WorkerCtx, frontend: usize, client: std::net::IpAddr) -> bool {
    let Some(fe) = ctx.shared.config.frontends.get(frontend) else {
        return true;
    };
    // With `accept_proxy` the client is not known yet: `proxy::serve` checks after the header.
    if fe.accept_proxy.is_some() || fe.access.is_open() || fe.access.admits(client) {
        return true;
    }
    ctx.count_denied(frontend);
    tracing::debug!(frontend = %fe.name, %client, "connection refused by the frontend's allow/deny lists");
    false
}

/// A new connection's entry: a TLS frontend starts with its handshake, HTTP with reading
/// the request, TCP with picking a server.
fn opened(ctx: &WorkerCtx, frontend: usize, peer: SocketAddr) -> Opened {
    let fe = ctx.shared.config.frontends.get(frontend);
    let tls = fe.is_some_and(|f| f.tls.is_some());
    let state = match fe.map(|f| f.mode) {
        _ if tls => SessionState::Handshake,
        Some(crate::config::Mode::Http) => SessionState::ReadingRequest,
        _ => SessionState::Connecting,
    };
    Opened {
        at: std::time::Instant::now(),
        client: peer,
        frontend,
        tls,
        quic: false,
        state,
    }
}
