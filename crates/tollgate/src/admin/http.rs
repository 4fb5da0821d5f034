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
//! Bounds: a request head of at most 8 KiB that must arrive within 5 s (a body is never
//! read); at most `MAX_CONNECTIONS` connections at once (more wait in the kernel backlog);
//! a command answers within `COMMAND_TIMEOUT` or the client gets a 503.

use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::stats::{self, Credentials};
use crate::command::{Answer, Command, GenerationMetrics, MetricsReport};
use crate::config::model::StatsAuth;
use crate::error::{Error, Side};
use crate::http::h1::{HeadScratch, Limits, MessageHead, Method, parse_request_head};
use crate::runtime::Shared;

const MAX_HEAD: usize = 8 * 1024;
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a command (a scrape, a state change) may take before the client gets a 503.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_CONNECTIONS: usize = 16;

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
}

impl Endpoint {
    pub fn new(commands: Arc<dyn Commands>, auth: Option<&StatsAuth>) -> Self {
        Endpoint {
            commands,
            auth: auth.map(Credentials::new),
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
                master: None,
                generations: vec![GenerationMetrics {
                    generation: 1,
                    metrics: crate::runtime::metrics::snapshot(&self.0),
                }],
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

/// Serves `listener` forever.
pub async fn serve(listener: TcpListener, endpoint: Arc<Endpoint>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::debug!(error = %e, "admin endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let endpoint = Arc::clone(&endpoint);
        tokio::spawn(async move {
            if let Err(e) = session(stream, &endpoint).await {
                tracing::debug!(error = %e, "admin endpoint: connection failed");
            }
            drop(permit);
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

async fn session(mut stream: TcpStream, endpoint: &Endpoint) -> std::io::Result<()> {
    let asked = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
        Ok(asked) => asked?,
        Err(_) => return Ok(()),
    };
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
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(response.body.as_bytes()).await?;
    stream.shutdown().await
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
    let get = method == Some(Method::Get);
    match path {
        "/metrics" if get => Route::Metrics,
        "/" | "/stats" if get => Route::Page,
        "/stats.json" if get => Route::Json,
        "/metrics" | "/" | "/stats" | "/stats.json" => Route::WrongMethod("Allow: GET\r\n"),
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
        Ok(Answer::Metrics(report)) => Response {
            content_type: CONTENT_TYPE,
            ..Response::text("200 OK", super::prometheus::render(&report))
        },
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
    use super::*;

    #[test]
    fn each_path_takes_its_method() {
        let get = Some(Method::Get);
        let post = Some(Method::Post);
        assert_eq!(route(get, "/metrics"), Route::Metrics);
        assert_eq!(route(post, "/metrics"), Route::WrongMethod("Allow: GET\r\n"));
        assert_eq!(route(get, "/"), Route::Page);
        assert_eq!(route(get, "/stats"), Route::Page);
        assert_eq!(route(get, "/stats.json"), Route::Json);
        assert_eq!(route(post, "/stats/server"), Route::Action);
        assert_eq!(route(get, "/stats/server"), Route::WrongMethod("Allow: POST\r\n"));
        assert_eq!(route(get, "/metricsx"), Route::NotFound);
        assert_eq!(route(get, "/stats/"), Route::NotFound);
    }
}
