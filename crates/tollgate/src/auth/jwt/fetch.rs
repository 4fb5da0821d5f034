//! The `jwks_url` refresher: one thread per process (`tollgate-jwks`, its own current_thread
//! runtime, like the ACME and discovery threads), never on the data path. Each [`Jwks`] with
//! a URL gets a loop: fetch at once, then every `refresh`; after a failure again sooner, with
//! a doubling delay ([`RETRY_FIRST`], never more than `refresh`); and early when a token's
//! unknown `kid` asks for it ([`Jwks::ask_early_refresh`], rate-limited there).
//!
//! Invariants: a fetch is bounded ([`FETCH_TIMEOUT`] for all of it, the body at
//! [`MAX_JWKS`]); a failed fetch or a refused document changes nothing that serves (the last
//! good key set stays), is logged at warn with its reason and counted
//! ([`JwksStats`](super::JwksStats)). Redirects are not followed (a JWKS URL is the
//! provider's published one). HTTPS is verified by the platform's roots (rustls'
//! platform verifier, as the ACME client does).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_LENGTH, USER_AGENT};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::oneshot;

use super::{Jwks, KeySet, MAX_JWKS};

/// The whole of one fetch: connect, TLS, request, headers and body.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The first wait after a failed fetch, doubled per failure up to the `refresh` interval.
pub const RETRY_FIRST: Duration = Duration::from_secs(5);

type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// Starts the refresher thread for the sets of `sets` that have a `jwks_url` (`None` when
/// none has). It runs until `stopped`'s sender is dropped or sends; join the returned
/// handle then (`background::Stopper::new(stop, thread)` does both).
pub fn spawn_refresher(
    sets: Vec<Arc<Jwks>>,
    stopped: oneshot::Receiver<()>,
) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    let sets: Vec<Arc<Jwks>> = sets.into_iter().filter(|s| s.url().is_some()).collect();
    if sets.is_empty() {
        return Ok(None);
    }
    let thread = std::thread::Builder::new()
        .name("tollgate-jwks".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("jwks: no runtime, no key set will be fetched: {e}");
                    return;
                }
            };
            runtime.block_on(async {
                let loops = sets.iter().map(|s| refresh_loop(Arc::clone(s)));
                tokio::select! {
                    _ = stopped => {}
                    _ = futures_util::future::join_all(loops) => {}
                }
            });
            // A name lookup of the HTTP client may still run on the blocking pool.
            runtime.shutdown_timeout(Duration::from_secs(1));
        })?;
    Ok(Some(thread))
}

/// Keeps `jwks` fetched from its URL, forever (returns at once for a file's set). Runs on
/// any tokio runtime with time and I/O enabled; [`spawn_refresher`] gives it a thread.
pub async fn refresh_loop(jwks: Arc<Jwks>) {
    let Some(source) = jwks.url().cloned() else {
        return;
    };
    let url = source.url.to_string();
    let client = match client() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(url, "jwks: no HTTPS client, the key set will never load: {e}");
            return;
        }
    };
    let stats = jwks.stats();
    let mut failures = 0u32;
    loop {
        let wait = match fetch(&client, &source.url).await {
            Ok(keys) => {
                let changed = keys.kids() != jwks.load().kids() || failures > 0;
                if changed {
                    tracing::info!(
                        url,
                        keys = keys.len(),
                        skipped = keys.skipped(),
                        "jwks: key set loaded (kids {:?})",
                        keys.kids()
                    );
                } else {
                    tracing::debug!(url, keys = keys.len(), "jwks: key set unchanged");
                }
                jwks.store(keys);
                // Counted once installed: a reader of the counter sees the new set.
                stats.fetches_ok.fetch_add(1, Ordering::Relaxed);
                let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
                stats.last_ok_unix.store(now, Ordering::Relaxed);
                failures = 0;
                source.refresh
            }
            Err(reason) => {
                stats.fetches_failed.fetch_add(1, Ordering::Relaxed);
                failures = failures.saturating_add(1);
                let wait = backoff(failures, source.refresh);
                tracing::warn!(
                    url,
                    failures,
                    "jwks: fetch failed, the last good key set stays: {reason}; retry in {}s",
                    wait.as_secs_f32()
                );
                wait
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = jwks.early.notified() => {
                tracing::debug!(url, "jwks: early fetch for an unknown kid");
            }
        }
    }
}

/// The wait after the `failures`-th failure in a row: [`RETRY_FIRST`] doubled, at most
/// `refresh`.
pub(super) fn backoff(failures: u32, refresh: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    RETRY_FIRST.saturating_mul(1 << doublings).min(refresh)
}

fn client() -> Result<HttpClient, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_platform_verifier(provider)
        .map_err(|e| e.to_string())?
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1)
        .pool_idle_timeout(Duration::from_secs(60))
        .build(https))
}

/// One fetch of `url`, parsed.
async fn fetch(client: &HttpClient, url: &http::Uri) -> Result<KeySet, String> {
    let request = http::Request::get(url.clone())
        .header(ACCEPT, "application/jwk-set+json, application/json")
        .header(USER_AGENT, concat!("tollgate/", env!("CARGO_PKG_VERSION")))
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("request: {e}"))?;
    let body = tokio::time::timeout(FETCH_TIMEOUT, async {
        let response = client.request(request).await.map_err(|e| describe(&e))?;
        let status = response.status();
        if status != http::StatusCode::OK {
            return Err(if status.is_redirection() {
                format!("status {status} (redirects are not followed: give the final URL)")
            } else {
                format!("status {status}")
            });
        }
        let announced = response
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if announced.is_some_and(|n| n > MAX_JWKS as u64) {
            return Err(format!("the body is larger than the {MAX_JWKS}-byte limit"));
        }
        let collected = Limited::new(response.into_body(), MAX_JWKS)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    format!("the body is larger than the {MAX_JWKS}-byte limit")
                } else {
                    format!("reading the body: {e}")
                }
            })?;
        Ok(collected.to_bytes())
    })
    .await
    .map_err(|_| format!("no complete answer within {}s", FETCH_TIMEOUT.as_secs()))??;
    KeySet::from_jwks(&body)
}

/// An error with its causes (hyper-util's own text is only "client error (Connect)").
fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
