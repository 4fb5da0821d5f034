//! A worker process's answers to `show stat`, `show sessions`, `show errors` and `show
//! budgets`: one [`GenerationShow`] for all its threads.
//!
//! `stat` and `budgets` read the per-thread cells every thread publishes (atomics; no
//! thread is disturbed). `sessions` and `errors` live in thread-owned state (`ctx::sessions`,
//! `ctx::errors`, no lock): each thread is asked through its inbox to walk its own and send
//! back a copy; the answer waits for every thread up to [`ASK_TIMEOUT`] and names the
//! threads that did not answer in time rather than blocking.

use std::time::{Duration, Instant};

use crate::command::show::{
    BackendStat, ErrorCapture, FrontendStat, GenerationShow, MAX_SESSIONS, Query, ServerStat, SessionView, StatReport,
    ThreadBudgets, bound_errors,
};
use crate::ctx::inbox::{Message, ThreadAnswer, ThreadQuery};
use crate::ctx::sessions::{Names, SessionEntry};
use crate::ctx::{Shared, WorkerCtx};
use crate::ids::ServerId;
use crate::live::server::CounterTotals;
use crate::metrics::BudgetMetrics;
use crate::stats::epoch_ms;

/// Longest a `show sessions|errors` waits for every thread's copy.
pub(crate) const ASK_TIMEOUT: Duration = Duration::from_secs(1);

/// This process's answer to `query`.
pub(crate) fn answer(
    shared: &Shared,
    inboxes: &[crate::ctx::inbox::Sender],
    query: &Query,
) -> Result<GenerationShow, String> {
    let mut out = GenerationShow::default();
    match query {
        Query::Stat { frontend, backend } => out.stat = Some(stat(shared, frontend.as_deref(), backend.as_deref())),
        Query::Budgets => out.budgets = budgets(shared),
        Query::Certs { frontend } => out.certs = super::certs::views(shared, frontend.as_deref()),
        Query::Sessions { backend, server } => {
            let ask = ThreadQuery::Sessions {
                backend: backend.clone(),
                server: server.clone(),
            };
            for a in ask_threads(inboxes, &ask)? {
                if let ThreadAnswer::Sessions { sessions, left_out } = a {
                    out.sessions.extend(sessions);
                    out.sessions_left_out += left_out;
                }
            }
            bound(&mut out.sessions, &mut out.sessions_left_out);
        }
        Query::Errors => {
            for a in ask_threads(inboxes, &ThreadQuery::Errors)? {
                if let ThreadAnswer::Errors(errors) = a {
                    out.errors.extend(errors);
                }
            }
            out.errors.sort_by_key(|e| e.time_ms);
            out.errors_left_out = bound_errors(&mut out.errors);
        }
    }
    Ok(out)
}

/// At most `MAX_SESSIONS` listed, the oldest first; the others counted.
fn bound(sessions: &mut Vec<SessionView>, left_out: &mut u64) {
    sessions.sort_by_key(|s| std::cmp::Reverse(s.age_ms));
    if sessions.len() > MAX_SESSIONS {
        *left_out += (sessions.len() - MAX_SESSIONS) as u64;
        sessions.truncate(MAX_SESSIONS);
    }
}

/// Asks every thread, waits (bounded) for every answer.
fn ask_threads(inboxes: &[crate::ctx::inbox::Sender], query: &ThreadQuery) -> Result<Vec<ThreadAnswer>, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut asked = 0;
    for inbox in inboxes {
        let msg = Message::Show {
            query: query.clone(),
            reply: tx.clone(),
        };
        // A stopped thread has nothing to show.
        if inbox.send(msg).is_ok() {
            asked += 1;
        }
    }
    drop(tx);
    let deadline = Instant::now() + ASK_TIMEOUT;
    let mut answers = Vec::with_capacity(asked);
    while answers.len() < asked {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(a) => answers.push(a),
            // Every sender gone: threads that stopped meanwhile dropped theirs unanswered.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                return Err(format!(
                    "{} of {asked} worker thread(s) did not answer within {ASK_TIMEOUT:?}",
                    asked - answers.len()
                ));
            }
        }
    }
    Ok(answers)
}

/// On a worker thread: its part of the answer (called by its inbox loop).
pub(crate) fn on_thread(ctx: &WorkerCtx, query: ThreadQuery) -> ThreadAnswer {
    let names = ThreadNames(ctx);
    let worker = u32::try_from(ctx.id).unwrap_or(u32::MAX);
    match query {
        ThreadQuery::Sessions { backend, server } => {
            let b = backend.as_deref().and_then(|name| names.backend_index(name));
            let wanted_backend = backend.is_some();
            let keep = |e: &SessionEntry| {
                if !wanted_backend {
                    return true;
                }
                let on = e.backend.get();
                if on.is_none() || on != b {
                    return false;
                }
                match (&server, on.zip(e.server.get())) {
                    (None, _) => true,
                    (Some(want), Some((b, s))) => names.server(b, s).as_deref() == Some(want.as_str()),
                    (Some(_), None) => false,
                }
            };
            let (sessions, left_out) = ctx.sessions.view(worker, &names, &keep, MAX_SESSIONS);
            ThreadAnswer::Sessions { sessions, left_out }
        }
        ThreadQuery::Errors => {
            let errors: Vec<ErrorCapture> = ctx
                .errors
                .try_borrow()
                .map_or_else(|_| Vec::new(), |r| r.view(worker, &names));
            ThreadAnswer::Errors(errors)
        }
    }
}

/// Names from the thread's config and live server sets.
struct ThreadNames<'a>(&'a WorkerCtx);

impl ThreadNames<'_> {
    fn backend_index(&self, name: &str) -> Option<usize> {
        self.0.shared.config.backends.iter().position(|b| b.name == name)
    }
}

impl Names for ThreadNames<'_> {
    fn frontend(&self, frontend: usize) -> String {
        let fe = self.0.shared.config.frontends.get(frontend);
        fe.map_or_else(|| "-".to_string(), |f| f.name.clone())
    }

    fn backend(&self, backend: usize) -> Option<String> {
        self.0.shared.config.backends.get(backend).map(|b| b.name.clone())
    }

    fn server(&self, backend: usize, server: ServerId) -> Option<String> {
        let live = self.0.shared.backends.get(backend)?;
        let set = live.servers();
        let at = set.position(server)?;
        set.servers.get(at).map(|s| s.name.to_string())
    }
}

/// Frontends, backends and servers; one frontend, or one backend and its servers, when asked.
pub(crate) fn stat(shared: &Shared, frontend: Option<&str>, backend: Option<&str>) -> StatReport {
    let now_ms = epoch_ms(Instant::now());
    let all = frontend.is_none() && backend.is_none();
    let frontends = (0..shared.config.frontends.len())
        .filter(|&i| {
            all || shared
                .config
                .frontends
                .get(i)
                .is_some_and(|f| Some(f.name.as_str()) == frontend)
        })
        .filter_map(|i| frontend_stat(shared, i, now_ms))
        .collect();
    let chosen: Vec<usize> = (0..shared.backends.len())
        .filter(|&i| all || shared.backends.get(i).is_some_and(|b| Some(&*b.name) == backend))
        .collect();
    StatReport {
        frontends,
        backends: chosen.iter().filter_map(|&i| backend_stat(shared, i, now_ms)).collect(),
        servers: chosen.iter().flat_map(|&i| server_stats(shared, i, now_ms)).collect(),
    }
}

fn frontend_stat(shared: &Shared, i: usize, now_ms: u64) -> Option<FrontendStat> {
    let f = shared.config.frontends.get(i)?;
    let cells = || shared.stat.iter().filter_map(move |t| t.frontend(i));
    let sum = |get: &dyn Fn(&crate::ctx::stat::FrontendStatCell) -> u64| cells().map(get).sum::<u64>();
    let metrics = || shared.metrics.iter().filter_map(move |t| t.frontends.get(i));
    Some(FrontendStat {
        name: f.name.clone(),
        state: if shared.paused.is_disabled(i) {
            "STOPPED"
        } else {
            "OPEN"
        }
        .to_string(),
        sessions_current: sum(&|c| c.sessions_active.get()),
        sessions_total: sum(&|c| c.sessions_total.get()),
        sessions_limit: f.maxconn,
        session_rate: sum(&|c| c.rate.rate(now_ms)),
        session_rate_max: sum(&|c| c.rate.max(now_ms)),
        requests: metrics().map(|c| c.streams.get()).sum(),
        bytes_in: metrics().map(|c| c.bytes_in.get()).sum(),
        bytes_out: metrics().map(|c| c.bytes_out.get()).sum(),
        denied_4xx: sum(&|c| c.proxy_4xx.get()),
        malformed: sum(&|c| c.malformed.get()),
        conn_denied: metrics().map(|c| c.conn_denied.get()).sum(),
        tls_handshakes: f.tls.is_some().then(|| sum(&|c| c.tls_handshakes.get())),
    })
}

fn backend_stat(shared: &Shared, i: usize, now_ms: u64) -> Option<BackendStat> {
    let b = shared.backends.get(i)?;
    let set = b.servers();
    let cells = || shared.stat.iter().filter_map(move |t| t.backend(i));
    let mut t = CounterTotals::default();
    let mut active = 0u64;
    for s in &set.servers {
        active += u64::from(s.active());
        t.add(&s.totals());
    }
    Some(BackendStat {
        name: b.name.to_string(),
        state: if set.servers.iter().any(|s| s.is_usable()) {
            "UP"
        } else {
            "DOWN"
        }
        .to_string(),
        sessions_current: active,
        sessions_total: t.connections,
        session_rate: cells().map(|c| c.rate.rate(now_ms)).sum(),
        session_rate_max: cells().map(|c| c.rate.max(now_ms)).sum(),
        queue_current: u64::from(b.queued()),
        queue_max: cells().map(|c| c.queue_max.get()).sum(),
        queue_full: b.queue_full(),
        requests: t.requests,
        bytes_in: t.bytes_to_server,
        bytes_out: t.bytes_to_client,
        responses_5xx: t.responses_5xx,
        connect_errors: t.connect_failures,
        retries: t.retries,
        malformed_responses: cells().map(|c| c.malformed_responses.get()).sum(),
    })
}

fn server_stats(shared: &Shared, i: usize, now_ms: u64) -> Vec<ServerStat> {
    let Some(b) = shared.backends.get(i) else {
        return Vec::new();
    };
    let (queued, queue_full) = (b.queued(), b.queue_full());
    b.servers()
        .servers
        .iter()
        .map(|s| {
            let (rate, max) = s.rates(now_ms);
            ServerStat {
                server: crate::live::server::ServerView {
                    backend_queued: queued,
                    backend_queue_full: queue_full,
                    ..s.view()
                },
                session_rate: rate,
                session_rate_max: max,
            }
        })
        .collect()
}

/// Every thread's budgets: what it holds of each, how often it waited, how many wait now.
/// `maxconn`, `handshakes` and `accept_rate` are process-wide limits (a thread's row shows
/// its own use of them); `buffers` and `pipes` are each thread's own.
pub(crate) fn budgets(shared: &Shared) -> Vec<ThreadBudgets> {
    let g = &shared.config.global;
    let workers = shared.stats.len().max(1) as u64;
    let (maxconn, _) = shared.budgets.global_usage();
    let budget =
        |name: &str, limit: u64, in_use: Option<u64>, parked: Option<u64>, waiting: Option<u64>| BudgetMetrics {
            name: name.into(),
            limit,
            in_use,
            parked,
            waiting,
        };
    shared
        .stats
        .iter()
        .enumerate()
        .map(|(w, s)| ThreadBudgets {
            worker: u32::try_from(w).unwrap_or(u32::MAX),
            budgets: vec![
                budget(
                    "maxconn",
                    u64::from(maxconn),
                    Some(s.sessions_active.get()),
                    Some(s.accept_paused.get()),
                    None,
                ),
                budget(
                    "accept_rate",
                    u64::from(g.max_accept_rate),
                    None,
                    Some(s.accept_rate_delayed.get()),
                    None,
                ),
                budget(
                    "buffers",
                    g.buffer_budget / workers / (g.buffer_size.max(1) as u64),
                    Some(s.buffers_in_use.get()),
                    Some(s.buffer_waits.get()),
                    Some(s.buffer_waiters.get()),
                ),
                budget(
                    "handshakes",
                    u64::from(g.max_handshakes),
                    Some(s.tls_handshakes_active.get()),
                    Some(s.tls_handshake_waits.get()),
                    None,
                ),
                budget("pipes", u64::from(g.max_pipes), Some(s.pipes_in_use.get()), None, None),
                budget(
                    "auth_checks",
                    u64::from(g.max_auth_checks),
                    Some(s.auth_verifying.get()),
                    Some(s.auth_verify_waits.get()),
                    None,
                ),
                // Over it a response goes uncompressed: "parked" counts those.
                budget(
                    "compressors",
                    u64::from(g.max_compressors),
                    Some(s.compressors_in_use.get()),
                    Some(s.compress_over_budget.get()),
                    None,
                ),
            ],
        })
        .collect()
}
