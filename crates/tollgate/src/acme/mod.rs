//! ACME (RFC 8555): certificates ordered from a CA for the `[[frontend.tls.acme]]` blocks,
//! renewed before they expire. One thread per process (`tollgate-acme`, its own
//! current_thread runtime), never on the data path; the protocol is instant-acme's.
//!
//! - [`order`]: one issuance (order, challenges, CSR, chain).
//! - [`files`]: `state_dir` (0700) and its files (0600): the account, certificates, keys.
//! - [`schedule`]: sans-io renewal time (two thirds of the lifetime, jittered) and backoff.
//!
//! Invariants:
//! - the challenges are answered by this process's own listeners: the thread publishes
//!   answers in the config's `ChallengeBook` (tls-alpn-01: `tls::terminate` serves the
//!   challenge certificate to handshakes offering `acme-tls/1`; http-01: the HTTP pipeline
//!   answers `/.well-known/acme-challenge/TOKEN` before routing) and withdraws them when
//!   the order ends.
//! - a certificate still valid in `state_dir` was loaded with the config (it serves from
//!   the first handshake): a reload or a restart orders nothing; the thread only schedules
//!   its renewal. Until a first certificate exists the frontend's `[[frontend.tls.cert]]`
//!   (or a self-signed certificate made at load, logged at warn) serves the names.
//! - a new certificate is written to `state_dir` first, then installed; a failed order or
//!   renewal changes nothing that serves (the old certificate stays) and is retried with a
//!   bounded exponential backoff. Orders of one process run one at a time.

mod files;
mod order;
mod schedule;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;

use self::order::Failure;
use crate::config::acme::{AcmeOrder, cert_paths, load_stored, validity};
use crate::config::cert_store::CertSource;
use crate::ctx::Shared;

/// Stops the ACME thread when dropped (an order in flight is abandoned: the next process
/// starts it again).
pub(crate) type Handle = crate::background::Stopper<oneshot::Sender<()>>;

/// Starts the thread when the config orders certificates.
pub(crate) fn start(shared: &Arc<Shared>) -> std::io::Result<Option<Handle>> {
    let acme = &shared.config.acme;
    let Some(state_dir) = acme.state_dir.clone() else {
        return Ok(None);
    };
    if acme.orders.is_empty() {
        return Ok(None);
    }
    let (stop, stopped) = oneshot::channel::<()>();
    let shared = Arc::clone(shared);
    let thread = std::thread::Builder::new()
        .name("tollgate-acme".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("acme: no runtime: {e}");
                    return;
                }
            };
            runtime.block_on(async {
                tokio::select! {
                    _ = stopped => {}
                    () = run(&shared, &state_dir) => {}
                }
            });
            // A name lookup of the HTTP client may still run on the blocking pool.
            runtime.shutdown_timeout(Duration::from_secs(1));
        })?;
    Ok(Some(Handle::new(stop, thread)))
}

async fn run(shared: &Shared, state_dir: &Path) {
    if let Err(e) = files::prepare_dir(state_dir) {
        tracing::error!(state_dir = %state_dir.display(), "acme: cannot use state_dir, no certificate will be ordered: {e}");
        return;
    }
    let turn = tokio::sync::Mutex::new(());
    let loops = shared
        .config
        .acme
        .orders
        .iter()
        .map(|order| order_loop(shared, state_dir, order, &turn));
    futures_util::future::join_all(loops).await;
}

/// One block's life: wait until its certificate is due (now, when there is none), order,
/// install, repeat; a failure waits out the backoff.
async fn order_loop(shared: &Shared, state_dir: &Path, order: &AcmeOrder, turn: &tokio::sync::Mutex<()>) {
    let names = order.domains.join(",");
    let mut current = load_stored(state_dir, order, SystemTime::now()).map(|s| (s.not_before, s.not_after));
    match current {
        Some((_, until)) => tracing::info!(
            names,
            "acme: stored certificate valid for {} more",
            crate::config::units::human_duration(left(until))
        ),
        None if order.fallback_self_signed => {
            tracing::warn!(names, "acme: serving a self-signed certificate until the CA issues one")
        }
        None => tracing::info!(
            names,
            "acme: serving the frontend's [[frontend.tls.cert]] until the CA issues one"
        ),
    }
    let stats = &shared.config.acme.stats;
    let mut failures = 0u32;
    let mut wait = due(current, order);
    loop {
        tokio::time::sleep(wait).await;
        let renewal = current.is_some();
        let outcome = {
            let _turn = turn.lock().await;
            attempt(shared, state_dir, order).await
        };
        match outcome {
            Ok(validity) => {
                stats.orders_ok.fetch_add(1, Ordering::Relaxed);
                if renewal {
                    stats.renewals.fetch_add(1, Ordering::Relaxed);
                }
                failures = 0;
                current = Some(validity);
                wait = due(current, order);
                tracing::info!(
                    names,
                    renewal,
                    "acme: certificate installed, valid for {}, next renewal in {}",
                    crate::config::units::human_duration(left(validity.1)),
                    crate::config::units::human_duration(wait)
                );
            }
            Err(failure) => {
                stats.orders_failed.fetch_add(1, Ordering::Relaxed);
                failures += 1;
                // A CA that limits us is not asked again within minutes.
                if failure.is("rateLimited") {
                    failures = failures.max(8);
                }
                wait = schedule::backoff(failures, schedule::jitter());
                log_failure(&names, &failure, failures, wait);
            }
        }
    }
}

/// How long until the certificate valid `current` is renewed (none: now).
fn due(current: Option<(SystemTime, SystemTime)>, order: &AcmeOrder) -> Duration {
    current.map_or(Duration::ZERO, |(from, until)| {
        schedule::renew_at(from, until, order.renew_before, schedule::jitter())
            .duration_since(SystemTime::now())
            .unwrap_or_default()
    })
}

fn left(until: SystemTime) -> Duration {
    let secs = until.duration_since(SystemTime::now()).unwrap_or_default().as_secs();
    Duration::from_secs(secs)
}

/// Orders, stores and installs one certificate; its validity.
async fn attempt(shared: &Shared, state_dir: &Path, order: &AcmeOrder) -> Result<(SystemTime, SystemTime), Failure> {
    let book = &shared.config.acme.book;
    let account = files::account(state_dir, order).await.map_err(Failure::new)?;
    let issued = match order::issue(&account, order, book).await {
        // The CA forgot the account (a test CA restarted, an account deactivated): a new
        // one, once.
        Err(failure) if failure.is("accountDoesNotExist") => {
            tracing::warn!(directory = %order.directory, "acme: the CA does not know the stored account: creating another");
            files::forget_account(state_dir, order).map_err(Failure::new)?;
            let account = files::account(state_dir, order).await.map_err(Failure::new)?;
            order::issue(&account, order, book).await?
        }
        other => other?,
    };
    let (cert_path, key_path) = cert_paths(state_dir, order);
    let write = |path: &PathBuf, text: &str| {
        files::write_private(path, text.as_bytes()).map_err(|e| Failure::new(format!("{}: {e}", path.display())))
    };
    write(&key_path, &issued.key_pem)?;
    write(&cert_path, &issued.chain_pem)?;
    let provider = crate::config::tls::provider();
    let cert = crate::config::tls::load_cert(&cert_path, &key_path, &provider).map_err(Failure::new)?;
    let leaf = cert.key.end_entity_cert().map_err(|e| Failure::new(e.to_string()))?;
    let validity = validity(leaf).ok_or_else(|| Failure::new("the issued certificate's validity is unreadable"))?;
    install(shared, order, cert)?;
    Ok(validity)
}

/// Puts a new certificate in front of the names' next handshakes (the frontend's live
/// store: open connections keep theirs).
fn install(shared: &Shared, order: &AcmeOrder, cert: crate::config::tls::LoadedCert) -> Result<(), Failure> {
    let store = shared
        .config
        .frontends
        .get(order.frontend)
        .and_then(|f| f.tls.as_ref())
        .map(|t| &t.certs)
        .ok_or_else(|| Failure::new("the frontend has no TLS"))?;
    store
        .install(&order.domains, cert.key, CertSource::Acme)
        .map(|_| ())
        .map_err(|msg| Failure::new(format!("install: {msg}")))
}

fn log_failure(names: &str, failure: &Failure, failures: u32, retry_in: Duration) {
    match &failure.problem {
        Some(p) => tracing::warn!(
            names,
            failures,
            problem_type = p.r#type.as_deref().unwrap_or("-"),
            problem_detail = p.detail.as_deref().unwrap_or("-"),
            status = p.status.unwrap_or(0),
            "acme: {} failed ({p}); retry in {}",
            failure.what,
            crate::config::units::human_duration(retry_in)
        ),
        None => tracing::warn!(
            names,
            failures,
            "acme: order failed: {}; retry in {}",
            failure.what,
            crate::config::units::human_duration(retry_in)
        ),
    }
}

/// An instant-acme error with its causes, for logs.
fn describe(context: &str, e: &instant_acme::Error) -> String {
    let mut text = format!("{context}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
