//! The admin HTTP endpoint (`[admin] bind`): `GET /metrics` answers the Prometheus text of a
//! fresh scrape; `GET /` and `GET /stats` the stats page, `GET /stats.json` its data and
//! `POST /stats/server` its actions (see `admin::stats`); any other path is 404, another
//! method 405, a request our HTTP/1 codec refuses 400. One request per connection
//! (`Connection: close`).
//!
//! Where it runs: the master binds it (it lives across reloads and is never bound twice)
//! and hands it a [`Commands`] that puts each command on the master's own request queue —
//! the path a control-socket client takes (admin sits below master in the layers, so it
//! cannot name the master); without a master, the serving process answers `metrics` from
//! its own threads' cells and refuses changes. The endpoint never touches a worker thread.
//!
//! Bounds: a request head of at most 8 KiB that must arrive within `HEAD_TIMEOUT` (a body is
//! never read); a command answers within `COMMAND_TIMEOUT` or the client gets a 503; the
//! answer must be taken within `WRITE_TIMEOUT`.
//!
//! Connections (`Conns`): at most `MAX_CONNECTIONS` at once, and at most
//! `MAX_IDLE_PER_SOURCE` from one address that have not sent their head yet. A connection
//! that has sent nothing has proved nothing: when a new one would pass either bound, the
//! oldest such idle one (of that address, else of any) is closed to make room, so idle
//! sockets can never shut the endpoint during an incident — a real scraper, whose head
//! follows its connect, always gets in. The loop stops accepting only while every slot
//! holds a connection that sent its head (each done within the timeouts above). Each close
//! is counted (`tollgate_admin_idle_closed_total`, appended to the endpoint's own scrape).

use std::borrow::Cow;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use super::stats::{self, Credentials};
use crate::command::{Answer, Command, GenerationMetrics, MetricsReport};
use crate::config::model::StatsAuth;
use crate::error::{Error, Side};
use crate::http::h1::{HeadScratch, Limits, MessageHead, Method, parse_request_head};
use crate::runtime::Shared;

const MAX_HEAD: usize = 8 * 1024;
/// Longest a connection may take to send its head (a scraper sends it with its connect).
const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a command (a scrape, a state change) may take before the client gets a 503.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest the client may take to read the answer.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections at once.
pub(crate) const MAX_CONNECTIONS: usize = 16;
/// Connections from one address that have not sent their head yet.
pub(crate) const MAX_IDLE_PER_SOURCE: usize = 4;

/// The Prometheus text format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Why a command produced no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failed {
    /// The command was refused (an unknown server, a change without a master): the
    /// client's to fix.
    Refused(String),
    /// Nobody could answer (the master is stopping, a worker did not reply).
    Unavailable(String),
}

/// A command on its way.
pub type Ran = Pin<Box<dyn Future<Output = Result<Answer, Failed>> + Send>>;

/// Runs runtime commands for the endpoint, exactly as the control socket would.
pub trait Commands: Send + Sync + 'static {
    fn run(&self, command: Command) -> Ran;

    /// Whether runtime changes can be made this way (the stats page hides its buttons
    /// otherwise).
    fn changes(&self) -> bool {
        true
    }
}

/// What one endpoint serves with: who runs its commands, who may use the stats page.
pub struct Endpoint {
    pub(crate) commands: Arc<dyn Commands>,
    /// `None`: the stats page is open and read-only.
    pub(crate) auth: Option<Credentials>,
    /// Connections closed before their head to make room (`tollgate_admin_idle_closed_total`).
    idle_closed: std::sync::atomic::AtomicU64,
}

impl Endpoint {
    pub fn new(commands: Arc<dyn Commands>, auth: Option<&StatsAuth>) -> Self {
        Endpoint {
            commands,
            auth: auth.map(Credentials::new),
            idle_closed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Runs `command`, bounded by `COMMAND_TIMEOUT`.
    pub(crate) async fn run(&self, command: Command) -> Result<Answer, Failed> {
        match tokio::time::timeout(COMMAND_TIMEOUT, self.commands.run(command)).await {
            Ok(answer) => answer,
            Err(_) => Err(Failed::Unavailable("timed out".into())),
        }
    }
}

/// Binds the endpoint (blocking, before any runtime: a port in use is a start-up failure).
pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, Error> {
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| Error::io(Side::Internal, format!("cannot listen on {addr} ([admin] bind)"), e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io(Side::Internal, "admin endpoint", e))?;
    Ok(listener)
}

/// Registers `listener` with the current runtime and logs its address.
pub(crate) fn register(listener: std::net::TcpListener) -> Option<TcpListener> {
    match TcpListener::from_std(listener) {
        Ok(l) => {
            if let Ok(addr) = l.local_addr() {
                tracing::info!(addr = %addr, "admin endpoint ready (GET /metrics, stats page at /)");
            }
            Some(l)
        }
        Err(e) => {
            tracing::error!(error = %e, "admin endpoint: cannot register the socket");
            None
        }
    }
}

/// Without a master: this process's own metrics (as generation 1); changes are refused.
struct Process(Arc<Shared>);

impl Commands for Process {
    fn run(&self, command: Command) -> Ran {
        let answer = match command {
            Command::Metrics => Ok(Answer::Metrics(MetricsReport {
                generations: vec![GenerationMetrics {
                    generation: 1,
                    metrics: crate::runtime::metrics::snapshot(&self.0),
                }],
                generation_label: self.0.config.admin.generation_label,
                ..MetricsReport::default()
            })),
            other => Err(Failed::Refused(format!(
                "`{}` needs the master (this process runs without one)",
                other.name()
            ))),
        };
        Box::pin(std::future::ready(answer))
    }

    fn changes(&self) -> bool {
        false
    }
}

/// Without a master: serves this process's endpoint until the runtime it is spawned on stops.
pub async fn serve_process(listener: std::net::TcpListener, shared: Arc<Shared>) {
    let Some(listener) = register(listener) else {
        return;
    };
    let auth = shared.config.admin.stats_auth.clone();
    let endpoint = Endpoint::new(Arc::new(Process(shared)), auth.as_ref());
    serve(listener, Arc::new(endpoint)).await;
}

/// One open connection, in accept order.
struct Conn {
    id: u64,
    source: IpAddr,
    /// No head yet: it may be closed to make room.
    idle: bool,
    close: Arc<Notify>,
}

/// The endpoint's open connections (see the module doc); shared by the accept loop and the
/// sessions, which remove themselves when done.
#[derive(Default)]
struct Conns {
    next_id: u64,
    open: Vec<Conn>,
}

impl Conns {
    /// Whether a new connection can be taken: a free slot, or an idle one to close.
    fn room(&self) -> bool {
        self.open.len() < MAX_CONNECTIONS || self.open.iter().any(|c| c.idle)
    }

    /// Closes the oldest idle connection (of `source`, if given); whether there was one.
    fn close_oldest_idle(&mut self, source: Option<IpAddr>) -> bool {
        let Some(i) = self
            .open
            .iter()
            .position(|c| c.idle && source.is_none_or(|s| s == c.source))
        else {
            return false;
        };
        let c = self.open.remove(i);
        c.close.notify_one();
        true
    }

    /// Takes a connection from `source`, closing idle ones to make room; `None`: no room
    /// (every slot holds a connection that sent its head).
    fn admit(&mut self, source: IpAddr) -> Option<(u64, Arc<Notify>)> {
        let idle_here = self.open.iter().filter(|c| c.idle && c.source == source).count();
        if idle_here >= MAX_IDLE_PER_SOURCE {
            self.close_oldest_idle(Some(source));
        }
        if self.open.len() >= MAX_CONNECTIONS && !self.close_oldest_idle(None) {
            return None;
        }
        let id = self.next_id;
        self.next_id += 1;
        let close = Arc::new(Notify::new());
        self.open.push(Conn {
            id,
            source,
            idle: true,
            close: Arc::clone(&close),
        });
        Some((id, close))
    }

    fn busy(&mut self, id: u64) {
        if let Some(c) = self.open.iter_mut().find(|c| c.id == id) {
            c.idle = false;
        }
    }

    fn remove(&mut self, id: u64) {
        self.open.retain(|c| c.id != id);
    }
}

/// The registry and the signal that a slot came free.
struct Slots {
    conns: Mutex<Conns>,
    freed: Notify,
}

impl Slots {
    fn lock(&self) -> std::sync::MutexGuard<'_, Conns> {
        // Nothing panics while holding it; a poisoned lock still holds a consistent list.
        self.conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Serves `listener` forever.
pub async fn serve(listener: TcpListener, endpoint: Arc<Endpoint>) {
    let slots = Arc::new(Slots {
        conns: Mutex::new(Conns::default()),
        freed: Notify::new(),
    });
    loop {
        // Stop accepting only while every slot holds a connection that sent its head.
        loop {
            let freed = slots.freed.notified();
            if slots.lock().room() {
                break;
            }
            freed.await;
        }
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::debug!(error = %e, "admin endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // `None`: the idle ones turned busy since `room` (the new one is closed).
        let Some((id, close)) = slots.lock().admit(peer.ip()) else {
            continue;
        };
        let endpoint = Arc::clone(&endpoint);
        let slots = Arc::clone(&slots);
        tokio::spawn(async move {
            let started = session(stream, &endpoint, || slots.lock().busy(id));
            tokio::select! {
                done = started => if let Err(e) = done {
                    tracing::debug!(error = %e, "admin endpoint: connection failed");
                },
                () = close.notified() => {
                    endpoint.idle_closed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(%peer, "admin endpoint: idle connection closed to make room");
                }
            }
            slots.lock().remove(id);
            slots.freed.notify_one();
        });
    }
}

/// The parts of a request head the endpoint looks at.
#[derive(Debug, Default)]
pub(crate) struct Asked {
    pub method: Option<Method>,
    pub path: String,
    /// After the `?`, undecoded (empty: none).
    pub query: String,
    pub authorization: Option<String>,
    /// `X-Tollgate-Action: 1`, which a cross-origin form cannot send (see `stats`).
    pub action_header: bool,
    pub origin: Option<String>,
    pub host: Option<String>,
}

/// One answer; `headers` are extra lines, each ending in CRLF.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: &'static str,
    pub content_type: &'static str,
    pub headers: &'static str,
    pub body: Cow<'static, str>,
}

impl Response {
    pub(crate) fn text(status: &'static str, body: impl Into<Cow<'static, str>>) -> Self {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: "",
            body: body.into(),
        }
    }

    fn wrong_method(allow: &'static str) -> Self {
        Response {
            headers: allow,
            ..Response::text("405 Method Not Allowed", "method not allowed\n")
        }
    }
}

/// One connection: its head, then the answer. `proved` is called once the head is in
/// (from then on the connection is not closed to make room).
async fn session(mut stream: TcpStream, endpoint: &Endpoint, proved: impl FnOnce()) -> std::io::Result<()> {
    let asked = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
        Ok(asked) => asked?,
        Err(_) => return Ok(()),
    };
    proved();
    let head_only = asked.as_ref().is_some_and(|a| a.method == Some(Method::Head));
    let response = match asked {
        Some(asked) => respond(endpoint, &asked).await,
        None => Response::text("400 Bad Request", "bad request\n"),
    };
    let head = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{}Connection: close\r\n\r\n",
        response.status,
        response.content_type,
        response.body.len(),
        response.headers,
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        if !head_only {
            stream.write_all(response.body.as_bytes()).await?;
        }
        stream.shutdown().await
    };
    tokio::time::timeout(WRITE_TIMEOUT, write).await.unwrap_or_else(|_| {
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client took no answer",
        ))
    })
}

/// What each path serves.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    Page,
    Json,
    Action,
    WrongMethod(&'static str),
    NotFound,
}

fn route(method: Option<Method>, path: &str) -> Route {
    // HEAD is GET without the body (RFC 9110 §9.3.2): a monitor's liveness probe.
    let get = matches!(method, Some(Method::Get | Method::Head));
    match path {
        "/metrics" if get => Route::Metrics,
        "/" | "/stats" if get => Route::Page,
        "/stats.json" if get => Route::Json,
        "/metrics" | "/" | "/stats" | "/stats.json" => Route::WrongMethod("Allow: GET, HEAD\r\n"),
        "/stats/server" if method == Some(Method::Post) => Route::Action,
        "/stats/server" => Route::WrongMethod("Allow: POST\r\n"),
        _ => Route::NotFound,
    }
}

async fn respond(endpoint: &Endpoint, asked: &Asked) -> Response {
    match route(asked.method, &asked.path) {
        Route::Metrics => metrics(endpoint).await,
        Route::Page => stats::page(endpoint, asked),
        Route::Json => stats::json(endpoint, asked).await,
        Route::Action => stats::action(endpoint, asked).await,
        Route::WrongMethod(allow) => Response::wrong_method(allow),
        Route::NotFound => Response::text("404 Not Found", "not found: try GET /metrics or GET /stats\n"),
    }
}

async fn metrics(endpoint: &Endpoint) -> Response {
    match endpoint.run(Command::Metrics).await {
        Ok(Answer::Metrics(report)) => {
            let mut text = super::prometheus::render(&report);
            // The endpoint's own counter: it lives here, not in a worker or the master.
            let closed = endpoint.idle_closed.load(std::sync::atomic::Ordering::Relaxed);
            text.push_str(&format!(
                "# HELP tollgate_admin_idle_closed_total Admin endpoint connections closed before sending a request head, to make room (at most {MAX_CONNECTIONS} at once, {MAX_IDLE_PER_SOURCE} idle per address).\n\
                 # TYPE tollgate_admin_idle_closed_total counter\ntollgate_admin_idle_closed_total {closed}\n"
            ));
            Response {
                content_type: CONTENT_TYPE,
                ..Response::text("200 OK", text)
            }
        }
        Ok(_) => Response::text("503 Service Unavailable", "scrape failed: unexpected answer\n"),
        Err(Failed::Refused(e) | Failed::Unavailable(e)) => {
            Response::text("503 Service Unavailable", format!("scrape failed: {e}\n"))
        }
    }
}

/// Reads one request head (`None`: not one our codec takes); the body, if any, is ignored.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Asked>> {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut len = 0;
    let mut scratch = HeadScratch::new();
    let limits = Limits {
        max_header_size: MAX_HEAD,
        ..Limits::default()
    };
    loop {
        let Some(free) = buf.get_mut(len..).filter(|f| !f.is_empty()) else {
            return Ok(None);
        };
        let n = stream.read(free).await?;
        if n == 0 {
            return Ok(None);
        }
        len += n;
        let seen = buf.get(..len).unwrap_or_default();
        match parse_request_head(seen, &limits, &mut scratch) {
            Ok(None) => {}
            Ok(Some(head)) => {
                let target = String::from_utf8_lossy(head.target.of(seen));
                let (path, query) = target.split_once('?').unwrap_or((&target, ""));
                let field = |name: &[u8]| head.header(seen, name).map(|v| String::from_utf8_lossy(v).into_owned());
                let asked = Asked {
                    method: Some(head.method),
                    path: path.to_string(),
                    query: query.to_string(),
                    authorization: field(b"authorization"),
                    action_header: field(b"x-tollgate-action").as_deref() == Some("1"),
                    origin: field(b"origin"),
                    host: head.host.map(|h| String::from_utf8_lossy(h.of(seen)).into_owned()),
                };
                head.reclaim(&mut scratch);
                return Ok(Some(asked));
            }
            Err(_) => return Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn each_path_takes_its_method() {
        let get = Some(Method::Get);
        let post = Some(Method::Post);
        assert_eq!(route(get, "/metrics"), Route::Metrics);
        assert_eq!(route(post, "/metrics"), Route::WrongMethod("Allow: GET, HEAD\r\n"));
        assert_eq!(route(Some(Method::Head), "/metrics"), Route::Metrics);
        assert_eq!(route(Some(Method::Head), "/stats"), Route::Page);
        assert_eq!(route(get, "/"), Route::Page);
        assert_eq!(route(get, "/stats"), Route::Page);
        assert_eq!(route(get, "/stats.json"), Route::Json);
        assert_eq!(route(post, "/stats/server"), Route::Action);
        assert_eq!(route(get, "/stats/server"), Route::WrongMethod("Allow: POST\r\n"));
        assert_eq!(route(get, "/metricsx"), Route::NotFound);
        assert_eq!(route(get, "/stats/"), Route::NotFound);
    }

    #[test]
    fn idle_connections_make_room_and_proven_ones_keep_theirs() {
        let mut conns = Conns::default();
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        // One address never holds more than its share of idle slots: its oldest goes.
        let first = conns.admit(a).unwrap();
        for _ in 1..MAX_IDLE_PER_SOURCE {
            conns.admit(a).unwrap();
        }
        let before = conns.open.len();
        conns.admit(a).unwrap();
        assert_eq!(conns.open.len(), before, "one closed, one taken");
        assert!(
            !conns.open.iter().any(|c| c.id == first.0),
            "the oldest idle one was closed"
        );
        // Full of proven connections but one idle: the idle one makes room.
        conns.open.clear();
        for i in 0..MAX_CONNECTIONS {
            let source = IpAddr::from([10, 0, (i / 256) as u8, (i % 256) as u8]);
            let (id, _) = conns.admit(source).unwrap();
            if i != 3 {
                conns.busy(id);
            }
        }
        let idle = conns.open.get(3).map(|c| c.id).unwrap();
        assert!(conns.room());
        conns.admit(b).unwrap();
        assert!(!conns.open.iter().any(|c| c.id == idle));
        // Every slot proven: no room, and a new one is not taken.
        let last = conns.open.last().map(|c| c.id).unwrap();
        conns.busy(last);
        assert!(!conns.room());
        assert!(conns.admit(b).is_none());
        assert_eq!(conns.open.len(), MAX_CONNECTIONS);
    }
}
