//! The admin HTTP endpoint (`[admin] bind`): `GET /metrics` answers the Prometheus text of a
//! fresh scrape; any other path is 404, another method on `/metrics` 405, a request our
//! HTTP/1 codec refuses 400. One request per connection (`Connection: close`).
//!
//! Where it runs: the master binds it (it lives across reloads and is never bound twice)
//! and a scrape becomes a `metrics` command gathered from every live generation; without a
//! master, the serving process answers from its own threads' cells. The endpoint never
//! touches a worker thread: it only asks for a snapshot (`scrape`).
//!
//! Bounds: a request head of at most 8 KiB that must arrive within 5 s; at most
//! `MAX_CONNECTIONS` connections at once (more wait in the kernel backlog).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::command::{GenerationMetrics, MetricsReport};
use crate::error::{Error, Side};
use crate::http::h1::{HeadScratch, Limits, Method, parse_request_head};
use crate::runtime::Shared;

const MAX_HEAD: usize = 8 * 1024;
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a scrape may take before the client gets a 503.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_CONNECTIONS: usize = 16;

/// The Prometheus text format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

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
                tracing::info!(addr = %addr, "admin endpoint ready (GET /metrics)");
            }
            Some(l)
        }
        Err(e) => {
            tracing::error!(error = %e, "admin endpoint: cannot register the socket");
            None
        }
    }
}

/// Without a master: serves this process's own metrics (as generation 1) until the
/// runtime it is spawned on stops.
pub async fn serve_process(listener: std::net::TcpListener, shared: Arc<Shared>) {
    let Some(listener) = register(listener) else {
        return;
    };
    let scrape = move || {
        let shared = Arc::clone(&shared);
        async move {
            let report = MetricsReport {
                master: None,
                generations: vec![GenerationMetrics {
                    generation: 1,
                    metrics: crate::runtime::metrics::snapshot(&shared),
                }],
            };
            Ok(super::prometheus::render(&report))
        }
    };
    serve(listener, scrape).await;
}

/// Serves `listener` forever; `scrape` produces the body of one `GET /metrics`.
pub async fn serve<F, Fut>(listener: TcpListener, scrape: F)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<String, String>> + Send,
{
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
        let scrape = scrape.clone();
        tokio::spawn(async move {
            if let Err(e) = session(stream, scrape).await {
                tracing::debug!(error = %e, "admin endpoint: connection failed");
            }
            drop(permit);
        });
    }
}

/// What one request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    WrongMethod,
    NotFound,
    Bad,
}

async fn session<F, Fut>(mut stream: TcpStream, scrape: F) -> std::io::Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<String, String>>,
{
    let route = match tokio::time::timeout(HEAD_TIMEOUT, read_route(&mut stream)).await {
        Ok(route) => route?,
        Err(_) => return Ok(()),
    };
    let (status, content_type, body) = match route {
        Route::Metrics => match tokio::time::timeout(SCRAPE_TIMEOUT, scrape()).await {
            Ok(Ok(text)) => ("200 OK", CONTENT_TYPE, text),
            Ok(Err(e)) => ("503 Service Unavailable", "text/plain", format!("scrape failed: {e}\n")),
            Err(_) => ("503 Service Unavailable", "text/plain", "scrape timed out\n".into()),
        },
        Route::WrongMethod => ("405 Method Not Allowed", "text/plain", "only GET /metrics\n".into()),
        Route::NotFound => ("404 Not Found", "text/plain", "not found: try GET /metrics\n".into()),
        Route::Bad => ("400 Bad Request", "text/plain", "bad request\n".into()),
    };
    let allow = if route == Route::WrongMethod {
        "Allow: GET\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// Reads one request head and classifies it; the body, if any, is ignored.
async fn read_route(stream: &mut TcpStream) -> std::io::Result<Route> {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut len = 0;
    let mut scratch = HeadScratch::new();
    let limits = Limits {
        max_header_size: MAX_HEAD,
        ..Limits::default()
    };
    loop {
        let Some(free) = buf.get_mut(len..).filter(|f| !f.is_empty()) else {
            return Ok(Route::Bad);
        };
        let n = stream.read(free).await?;
        if n == 0 {
            return Ok(Route::Bad);
        }
        len += n;
        let seen = buf.get(..len).unwrap_or_default();
        match parse_request_head(seen, &limits, &mut scratch) {
            Ok(None) => {}
            Ok(Some(head)) => {
                let route = classify(head.method, head.target.of(seen));
                head.reclaim(&mut scratch);
                return Ok(route);
            }
            Err(_) => return Ok(Route::Bad),
        }
    }
}

fn classify(method: Method, target: &[u8]) -> Route {
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    match (path, method) {
        (b"/metrics", Method::Get) => Route::Metrics,
        (b"/metrics", _) => Route::WrongMethod,
        _ => Route::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_metrics_is_served() {
        assert_eq!(classify(Method::Get, b"/metrics"), Route::Metrics);
        assert_eq!(classify(Method::Get, b"/metrics?x=1"), Route::Metrics);
        assert_eq!(classify(Method::Post, b"/metrics"), Route::WrongMethod);
        assert_eq!(classify(Method::Get, b"/"), Route::NotFound);
        assert_eq!(classify(Method::Get, b"/metricsx"), Route::NotFound);
    }
}
