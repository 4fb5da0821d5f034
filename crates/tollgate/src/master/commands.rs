//! The master's side of runtime commands: a control request becomes an answer from the
//! master itself (reload, status), or messages to worker generations whose replies are
//! gathered here (`Pending`) and folded into one answer.
//!
//! Invariants: a change is validated against the current config and recorded in the
//! desired state *before* it is sent, so a generation started afterwards gets it too; a
//! pending request is answered exactly once — when every generation asked has replied or
//! exited, or at `REPLY_TIMEOUT` naming the ones that did not.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::control::Request;
use super::desired::Desired;
use super::desired::servers::Undo;
use super::{Event, GenState, Master};
use crate::command::table::TableOp;
use crate::command::{
    Answer, Command, ExplainQuery, GenerationMetrics, MasterMetrics, MetricsReport, Outcome, Reply, ServerChange,
    ToWorker, codec,
};
use crate::config::Config;
use crate::live::server::ServerView;

/// Longest the master waits for workers to answer a command.
pub(crate) const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

enum Gather {
    /// Servers from one generation.
    Servers,
    /// An acknowledgement from every generation.
    Applied { what: String },
    /// A metrics snapshot from every live generation, with the master's own figures and
    /// the exited generations' counters (read when the answer is made).
    Metrics {
        master: MasterMetrics,
        retired: Retired,
        label: bool,
    },
    /// The serving generation's servers, to explain `query` against `config` (its config).
    Explain {
        config: Arc<Config>,
        query: Box<ExplainQuery>,
    },
    /// A `show` answer from every live generation (`master::show`); what was asked.
    Show { what: &'static str },
    /// An acknowledgement from every generation, whose texts say what each one did.
    Installed { what: String },
    /// `show table` / `clear table` from the serving generation: its answer as it is.
    Table,
}

/// A command on its way to the workers: where its answer goes and how it is gathered.
struct Ask {
    request: u64,
    client_id: u64,
    reply: oneshot::Sender<Reply>,
    gather: Gather,
    undo: Option<Undo>,
}

pub(crate) struct Pending {
    client_id: u64,
    reply: Option<oneshot::Sender<Reply>>,
    waiting: HashSet<u64>,
    asked: usize,
    gather: Gather,
    servers: Vec<ServerView>,
    metrics: Vec<GenerationMetrics>,
    shows: Vec<crate::command::show::GenerationShow>,
    /// The generations' text answers (`Gather::Installed`).
    texts: Vec<String>,
    /// `Gather::Table`: the worker's answer.
    answer: Option<Answer>,
    errors: Vec<String>,
    deadline: Instant,
    /// When the master sent the command (the answer says how long the workers took).
    sent: Instant,
    /// For an `add` or `del` the workers may refuse: the record to put back if they do.
    undo: Option<Undo>,
}

impl Pending {
    /// Answers the client; returns the record to put back when the command failed.
    fn finish(&mut self) -> Option<Undo> {
        let tx = self.reply.take()?;
        let failed = !self.errors.is_empty();
        let reply = if failed {
            Reply::error(self.client_id, self.errors.join("; "))
        } else {
            match &self.gather {
                Gather::Servers => Reply::ok(
                    self.client_id,
                    Answer::Servers {
                        servers: std::mem::take(&mut self.servers),
                    },
                ),
                Gather::Metrics { master, retired, label } => {
                    let mut generations = std::mem::take(&mut self.metrics);
                    generations.sort_by_key(|g| g.generation);
                    let retired = retired.answer(&mut generations);
                    Reply::ok(
                        self.client_id,
                        Answer::Metrics(MetricsReport {
                            master: Some(master.clone()),
                            generations,
                            retired: Some(Box::new(retired)),
                            generation_label: *label,
                        }),
                    )
                }
                Gather::Explain { config, query } => explained(self.client_id, config, query, &self.servers),
                Gather::Show { what } => Reply::ok(
                    self.client_id,
                    Answer::Show(super::show::merge(std::mem::take(&mut self.shows), what)),
                ),
                Gather::Installed { what } => Reply::text(
                    self.client_id,
                    format!(
                        "{what}: {} (applied by {} generation(s) in {} ms)",
                        dedup(&self.texts).join("; "),
                        self.asked,
                        self.sent.elapsed().as_millis()
                    ),
                ),
                Gather::Table => match self.answer.take() {
                    Some(answer) => Reply::ok(self.client_id, answer),
                    None => Reply::error(self.client_id, "the worker gave no answer"),
                },
                Gather::Applied { what } => Reply::text(
                    self.client_id,
                    format!(
                        "{what} (applied by {} generation(s), every worker thread, in {} ms)",
                        self.asked,
                        self.sent.elapsed().as_millis()
                    ),
                ),
            }
        };
        let _ = tx.send(reply);
        if failed { self.undo.take() } else { None }
    }
}

/// `texts` without repeats, in order (every generation usually did the same).
fn dedup(texts: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in texts {
        if !out.contains(t) {
            out.push(t.clone());
        }
    }
    out
}

/// `ctl explain`'s answer: the explanation against the live server states.
fn explained(client_id: u64, config: &Config, query: &ExplainQuery, servers: &[ServerView]) -> Reply {
    match crate::admin::explain::explain_live(config, query, servers) {
        Ok(explanation) => Reply::ok(
            client_id,
            Answer::Explained {
                text: explanation.to_string(),
                detail: serde_json::to_value(&explanation).unwrap_or(serde_json::Value::Null),
            },
        ),
        Err(message) => Reply::error(client_id, message),
    }
}

impl Master {
    pub(super) async fn on_request(&mut self, req: Request, events: &mut mpsc::UnboundedReceiver<Event>) {
        let Request { id, command, reply } = req;
        match command {
            Command::Reload => {
                let answer = match self.reload(events).await {
                    Ok(report) => Reply::ok(id, Answer::Reload(report)),
                    Err(text) => Reply::error(id, text),
                };
                let _ = reply.send(answer);
            }
            Command::Status => {
                let _ = reply.send(Reply::ok(id, Answer::Status(self.status())));
            }
            Command::ShowServers { backend } => {
                if let Some(b) = &backend
                    && self.config.backend(b).is_none()
                {
                    let _ = reply.send(Reply::error(id, format!("no backend `{b}`")));
                    return;
                }
                self.gather_servers(id, reply, backend, Gather::Servers).await;
            }
            Command::Explain { query } => {
                let gather = Gather::Explain {
                    config: Arc::clone(&self.config),
                    query: Box::new(query),
                };
                self.gather_servers(id, reply, None, gather).await;
            }
            Command::Metrics => {
                // Every live generation: a stopping one still serves connections; one that
                // sent its last counters is as good as gone.
                let generations: Vec<u64> = self
                    .gens
                    .iter()
                    .filter(|g| g.state != GenState::Starting && !self.retired.has(g.id))
                    .map(|g| g.id)
                    .collect();
                let request = self.next_request_id();
                let gather = Gather::Metrics {
                    master: self.master_metrics(),
                    retired: self.retired.clone(),
                    label: self.config.admin.generation_label,
                };
                let msg = ToWorker::Metrics { id: request };
                self.send_and_gather(request, id, reply, gather, &generations, &msg)
                    .await;
            }
            Command::Show { query } => {
                if let Err(msg) = super::show::validate(&self.config, &query) {
                    let _ = reply.send(Reply::error(id, msg));
                    return;
                }
                // Every live generation: a stopping one still has sessions and counters. But
                // certificates are what new handshakes get: only serving generations make them.
                let certs = matches!(query, crate::command::show::Query::Certs { .. });
                let generations: Vec<u64> = self
                    .gens
                    .iter()
                    .filter(|g| g.state != GenState::Starting && !(certs && g.state == GenState::Stopping))
                    .map(|g| g.id)
                    .collect();
                let request = self.next_request_id();
                let what = query.what();
                let msg = ToWorker::Show { id: request, query };
                self.send_and_gather(request, id, reply, Gather::Show { what }, &generations, &msg)
                    .await;
            }
            Command::ShowTable { limit } => self.table(id, reply, TableOp::Show { limit }).await,
            Command::ClearTable { limit, key } => self.table(id, reply, TableOp::Clear { limit, key }).await,
            Command::SetServerState {
                backend,
                server,
                state,
                kill,
            } => {
                let change = ServerChange {
                    backend,
                    server,
                    state: Some(state),
                    kill,
                    ..Default::default()
                };
                self.apply(id, reply, change).await;
            }
            Command::SetServerWeight {
                backend,
                server,
                weight,
            } => {
                let change = ServerChange {
                    backend,
                    server,
                    weight: Some(weight),
                    ..Default::default()
                };
                self.apply(id, reply, change).await;
            }
            Command::SetFrontend { frontend, enabled } => {
                if let Err(msg) = Desired::validate_frontend(&self.config, &frontend) {
                    let _ = reply.send(Reply::error(id, msg));
                    return;
                }
                self.desired.record_frontend(&frontend, enabled);
                let what = format!("frontend {frontend} {}", if enabled { "enabled" } else { "disabled" });
                tracing::info!("runtime change: {what}");
                let generations: Vec<u64> = self.gens.iter().map(|g| g.id).collect();
                let request = self.next_request_id();
                let msg = ToWorker::Frontend {
                    id: request,
                    frontend,
                    enabled,
                };
                self.send_and_gather(request, id, reply, Gather::Applied { what }, &generations, &msg)
                    .await;
            }
            Command::ShutdownSessions { backend, server } => {
                let change = ServerChange {
                    backend,
                    server,
                    kill: true,
                    ..Default::default()
                };
                self.apply(id, reply, change).await;
            }
            Command::SetServerAddress {
                backend,
                server,
                address,
            } => match self.desired.readdress(&self.config, &backend, &server, &address) {
                Ok(change) => self.apply(id, reply, change).await,
                Err(msg) => {
                    let _ = reply.send(Reply::error(id, msg));
                }
            },
            Command::AddServer { backend, server, spec } => {
                match self.desired.new_server(&self.config, &backend, &server, &spec) {
                    Ok(change) => self.apply(id, reply, change).await,
                    Err(msg) => {
                        let _ = reply.send(Reply::error(id, msg));
                    }
                }
            }
            Command::SetCert {
                frontend,
                cert,
                cert_pem,
                key,
                key_pem,
                ocsp_hex,
            } => {
                let sent = super::certs::Sent {
                    frontend: &frontend,
                    cert: &cert,
                    cert_pem: &cert_pem,
                    key: key.as_deref(),
                    key_pem: key_pem.as_ref(),
                    ocsp_hex: ocsp_hex.as_deref(),
                };
                let install = match super::certs::prepare(&self.config, &sent) {
                    Ok(i) => i,
                    Err(msg) => {
                        let _ = reply.send(Reply::error(id, msg));
                        return;
                    }
                };
                let what = format!("frontend {frontend}: certificate {}", install.cert_path);
                // The path is the caller's text: escaped (`{:?}`), as every caller-supplied
                // value that reaches a log.
                tracing::info!(frontend = %frontend, cert = ?install.cert_path, "runtime change: certificate set");
                self.desired.record_cert(install.clone());
                let generations: Vec<u64> = self
                    .gens
                    .iter()
                    .filter(|g| g.state != GenState::Stopping)
                    .map(|g| g.id)
                    .collect();
                let request = self.next_request_id();
                let msg = ToWorker::SetCert {
                    id: request,
                    cert: install,
                };
                self.send_and_gather(request, id, reply, Gather::Installed { what }, &generations, &msg)
                    .await;
            }
            Command::DelServer { backend, server } => {
                let change = ServerChange {
                    backend,
                    server,
                    delete: true,
                    ..Default::default()
                };
                self.apply(id, reply, change).await;
            }
        }
    }

    /// A stick table's `show` or `clear`, by the newest serving generation: the tables of
    /// older ones serve only their last connections, and a reload starts new tables.
    async fn table(&mut self, client_id: u64, reply: oneshot::Sender<Reply>, op: TableOp) {
        let known = self
            .config
            .frontends
            .iter()
            .any(|f| f.limits.iter().any(|l| l.name == op.limit()));
        if !known {
            let _ = reply.send(Reply::error(client_id, format!("no limit `{}`", op.limit())));
            return;
        }
        let Some(generation) = self.serving_generation() else {
            let _ = reply.send(Reply::error(client_id, "no generation is serving"));
            return;
        };
        let request = self.next_request_id();
        let msg = ToWorker::Table { id: request, op };
        self.send_and_gather(request, client_id, reply, Gather::Table, &[generation], &msg)
            .await;
    }

    /// Asks the newest serving generation for its servers (of `backend`), for `gather`.
    async fn gather_servers(
        &mut self,
        client_id: u64,
        reply: oneshot::Sender<Reply>,
        backend: Option<String>,
        gather: Gather,
    ) {
        let Some(generation) = self.serving_generation() else {
            let _ = reply.send(Reply::error(client_id, "no generation is serving"));
            return;
        };
        let request = self.next_request_id();
        let msg = ToWorker::ShowServers { id: request, backend };
        self.send_and_gather(request, client_id, reply, gather, &[generation], &msg)
            .await;
    }

    /// Reload counters and generations by state, for a metrics answer.
    fn master_metrics(&self) -> MasterMetrics {
        let count = |state: GenState| self.gens.iter().filter(|g| g.state == state).count() as u64;
        let states = [GenState::Starting, GenState::Serving, GenState::Stopping];
        MasterMetrics {
            reloads: self.reloads.done,
            reloads_refused: self.reloads.refused,
            current_generation: self.serving_generation().unwrap_or(0),
            generations: states.iter().map(|s| (s.as_str().to_string(), count(*s))).collect(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime_seconds: self.began.elapsed().as_secs(),
        }
    }

    /// The newest serving generation.
    pub(super) fn serving_generation(&self) -> Option<u64> {
        self.gens
            .iter()
            .filter(|g| g.state == GenState::Serving)
            .map(|g| g.id)
            .max()
    }

    fn next_request_id(&mut self) -> u64 {
        let id = self.next_request;
        self.next_request += 1;
        id
    }

    /// Validates and records `change`, then sends it to every live generation.
    async fn apply(&mut self, client_id: u64, reply: oneshot::Sender<Reply>, change: ServerChange) {
        if let Err(msg) = self.desired.validate(&self.config, &change) {
            let _ = reply.send(Reply::error(client_id, msg));
            return;
        }
        // Workers refuse a `del` of a busy server; an `add` they refuse did not happen either.
        let undo = (change.delete || change.add.is_some()).then(|| self.desired.undo_point(&change));
        self.desired.record(&change);
        let what = change.describe() + if change.kill { " (sessions killed)" } else { "" };
        tracing::info!("runtime change: {what}");
        let generations: Vec<u64> = self.gens.iter().map(|g| g.id).collect();
        let request = self.next_request_id();
        let msg = ToWorker::Apply { id: request, change };
        let ask = Ask {
            request,
            client_id,
            reply,
            gather: Gather::Applied { what },
            undo,
        };
        self.ask(ask, &generations, &msg).await;
    }

    async fn send_and_gather(
        &mut self,
        request: u64,
        client_id: u64,
        reply: oneshot::Sender<Reply>,
        gather: Gather,
        generations: &[u64],
        msg: &ToWorker,
    ) {
        let ask = Ask {
            request,
            client_id,
            reply,
            gather,
            undo: None,
        };
        self.ask(ask, generations, msg).await;
    }

    /// Sends `msg` to `generations` and gathers their replies into one answer.
    async fn ask(&mut self, ask: Ask, generations: &[u64], msg: &ToWorker) {
        let Ask {
            request,
            client_id,
            reply,
            gather,
            undo,
        } = ask;
        let mut pending = Pending {
            client_id,
            reply: Some(reply),
            waiting: HashSet::new(),
            asked: 0,
            gather,
            servers: Vec::new(),
            metrics: Vec::new(),
            shows: Vec::new(),
            texts: Vec::new(),
            answer: None,
            errors: Vec::new(),
            deadline: Instant::now() + REPLY_TIMEOUT,
            sent: Instant::now(),
            undo,
        };
        for g in self.gens.iter_mut().filter(|g| generations.contains(&g.id)) {
            let sent = tokio::time::timeout(Duration::from_secs(1), codec::write_async(&mut g.to_worker, msg)).await;
            if matches!(sent, Ok(Ok(()))) {
                pending.waiting.insert(g.id);
                pending.asked += 1;
            } else {
                tracing::warn!(generation = g.id, "could not send a command to a worker");
            }
        }
        if pending.waiting.is_empty() {
            if pending.asked == 0 && generations.is_empty() {
                pending.errors.push("no worker generation is running".into());
            }
            if let Some(undo) = pending.finish() {
                self.desired.restore(undo);
            }
            return;
        }
        self.pending.insert(request, pending);
    }

    pub(super) fn on_reply(&mut self, generation: u64, reply: Reply) {
        let Some(pending) = self.pending.get_mut(&reply.id) else {
            tracing::debug!(generation, id = reply.id, "reply to no pending command");
            return;
        };
        if !pending.waiting.remove(&generation) {
            return;
        }
        match reply.outcome {
            Outcome::Ok {
                answer: Answer::Servers { servers },
            } => pending.servers.extend(servers),
            Outcome::Ok {
                answer: Answer::Metrics(report),
            } => pending.metrics.extend(report.generations.into_iter().map(|mut g| {
                g.generation = generation;
                g
            })),
            Outcome::Ok {
                answer: Answer::Show(report),
            } => pending.shows.extend(report.generations.into_iter().map(|mut g| {
                g.generation = generation;
                g
            })),
            Outcome::Ok { answer } if matches!(pending.gather, Gather::Table) => pending.answer = Some(answer),
            Outcome::Ok {
                answer: Answer::Text { text },
            } => pending.texts.push(text),
            Outcome::Ok { .. } => {}
            Outcome::Error { message } => pending.errors.push(format!("generation {generation}: {message}")),
        }
        if pending.waiting.is_empty() {
            if let Some(undo) = pending.finish() {
                self.desired.restore(undo);
            }
            self.pending.remove(&reply.id);
        }
    }

    /// A generation exited: stop waiting for it.
    pub(super) fn forget_generation(&mut self, generation: u64) {
        let mut undo = Vec::new();
        self.pending.retain(|_, p| {
            if p.waiting.remove(&generation) && p.waiting.is_empty() {
                undo.extend(p.finish());
                return false;
            }
            true
        });
        for u in undo {
            self.desired.restore(u);
        }
    }

    /// Answers the requests whose workers did not reply in time.
    pub(super) fn expire_pending(&mut self) {
        let now = Instant::now();
        let mut undo = Vec::new();
        self.pending.retain(|_, p| {
            if now < p.deadline {
                return true;
            }
            let late: Vec<String> = p.waiting.iter().map(u64::to_string).collect();
            p.errors
                .push(format!("no answer from generation(s) {}", late.join(", ")));
            undo.extend(p.finish());
            false
        });
        for u in undo {
            self.desired.restore(u);
        }
    }
}

/// The counters of the generations that exited, carried by the master so the merged
/// metrics never go back (HAProxy's reset at every reload). Shared with the metrics answers
/// in flight: an answer reads it when it is made, not when it was asked.
///
/// A generation's figures are in exactly one place: its live answers until it retires,
/// then here. `retire` with its last counters (`ToMaster::Final`) adds those; a generation
/// that exited without them (a crash) adds the last ones it answered a scrape with: what it
/// counted after that scrape is lost, but no counter a scraper saw goes back.
#[derive(Debug, Clone, Default)]
pub(crate) struct Retired(Arc<std::sync::Mutex<RetiredCounts>>);

#[derive(Debug, Default)]
struct RetiredCounts {
    counters: crate::metrics::MetricsSnapshot,
    /// Generations retired (their answers are no longer counted).
    gens: HashSet<u64>,
    /// Each live generation's last answer, for `retire` without last counters.
    last: std::collections::HashMap<u64, crate::metrics::MetricsSnapshot>,
}

impl Retired {
    pub(crate) fn has(&self, generation: u64) -> bool {
        self.0.lock().is_ok_and(|r| r.gens.contains(&generation))
    }

    /// `generation` is gone: its `last` counters (else what it answered last) join the
    /// retired ones, once.
    pub(crate) fn retire(&self, generation: u64, last: Option<&crate::metrics::MetricsSnapshot>) {
        let Ok(mut r) = self.0.lock() else {
            return;
        };
        let answered = r.last.remove(&generation);
        if !r.gens.insert(generation) {
            return;
        }
        if let Some(counts) = last.or(answered.as_ref()) {
            r.counters.absorb(counts, false);
        }
    }

    /// For an answer: drops from `live` the generations retired since they answered (their
    /// counters are in the retired ones now), keeps what the others answered, and returns
    /// the retired counters.
    fn answer(&self, live: &mut Vec<GenerationMetrics>) -> crate::metrics::MetricsSnapshot {
        let Ok(mut r) = self.0.lock() else {
            return crate::metrics::MetricsSnapshot::default();
        };
        live.retain(|g| !r.gens.contains(&g.generation));
        for g in live.iter() {
            r.last.insert(g.generation, g.metrics.clone());
        }
        r.counters.clone()
    }
}
