//! The one command protocol, spoken on the master's control socket (`tollgate reload`,
//! `status`, `ctl`) and on the master ↔ worker channel: typed messages, serde, JSON bodies in
//! length-prefixed frames (`codec`).
//!
//! Schema rules (additive): a message carries the protocol version `v` and a request `id`
//! that its reply repeats. A new field is optional with a default, so older peers ignore it
//! and newer peers read an older message; a field is never removed or renamed, a variant
//! never reused. What a peer cannot understand — an unknown command, a missing field, a
//! wrong type, a version it does not speak, bytes that are not a frame — is refused with
//! an error that says which, never a panic.

pub mod codec;
pub mod show;
pub mod table;

use serde::{Deserialize, Serialize};

use crate::config::ids::IdTable;
use crate::live::server::{AdminState, OperState, ServerView};
use crate::metrics::MetricsSnapshot;

/// The protocol version this build speaks.
pub(crate) const VERSION: u32 = 1;

/// What a client asks the master.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Command {
    /// Re-read the config file and start a new generation on it.
    Reload,
    /// Worker generations and their state.
    Status,
    /// Live state of every server (of one backend).
    ShowServers {
        #[serde(default)]
        backend: Option<String>,
    },
    /// Set a server's admin state; `kill` (with `maint`) closes its established connections.
    SetServerState {
        backend: String,
        server: String,
        state: AdminState,
        #[serde(default)]
        kill: bool,
    },
    SetServerWeight {
        backend: String,
        server: String,
        weight: u32,
    },
    /// Stop (`enabled = false`) or resume accepting on a frontend; its established
    /// connections are served either way.
    SetFrontend { frontend: String, enabled: bool },
    /// Close the server's established sessions (HAProxy's `shutdown sessions server`),
    /// changing nothing else: new connections may still pick it.
    ShutdownSessions { backend: String, server: String },
    /// Every metric of every live generation (what `GET /metrics` renders).
    Metrics,
    /// Where a request would go now: the serving generation's config and its live server
    /// states (`tollgate ctl explain`).
    Explain { query: ExplainQuery },
    /// Move a server to another address (`IP:PORT`, or `IP` to keep its port).
    SetServerAddress {
        backend: String,
        server: String,
        address: String,
    },
    /// Add a server to a backend (HAProxy's `add server`): in maint unless `enabled`.
    AddServer {
        backend: String,
        server: String,
        spec: AddServerArgs,
    },
    /// Remove a server that is in maint (or drain) with no connection and no queued request.
    DelServer { backend: String, server: String },
    /// `show stat|sessions|errors|budgets|certs`, answered by every live generation.
    Show { query: show::Query },
    /// Serve the certificate `cert_pem` (a PEM chain, leaf first) with the key `key_pem`
    /// (absent: the configured key of the certificate configured from `cert`, else
    /// `cert_pem` itself) on `frontend`, from the next handshake on: it replaces the
    /// certificate configured from `cert`, or the one serving the same names, or is added.
    ///
    /// The contents travel, not the paths: `ctl` reads the files with the caller's own
    /// rights (as HAProxy's `set ssl cert` takes the PEM over its socket), and the master
    /// never opens a path a caller names. `cert` and `key` (canonical, as `ctl` resolved
    /// them) only name the files: `cert` is matched against the configured paths.
    SetCert {
        frontend: String,
        cert: String,
        cert_pem: Pem,
        #[serde(default)]
        key: Option<String>,
        #[serde(default)]
        key_pem: Option<Pem>,
        /// The DER OCSP response found next to the certificate (`CERT.ocsp`), hex.
        #[serde(default)]
        ocsp_hex: Option<String>,
    },
    /// A stick table's entries and counters, from the serving generation.
    ShowTable { limit: String },
    /// Forget one entry of a stick table (`key`, as `show table` prints it), or all.
    ClearTable {
        limit: String,
        #[serde(default)]
        key: Option<String>,
    },
}

/// PEM text on its way (`set cert`): it may hold a private key, so its `Debug` shows only
/// its length.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Pem(pub String);

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pem({} bytes)", self.0.len())
    }
}

/// A certificate the master checked for `ctl set cert`, as every worker process
/// installs it (and a restarted one re-installs it: see `master::desired`). Its `Debug`
/// leaves the private key out.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertInstall {
    pub frontend: String,
    pub cert_path: String,
    pub key_path: String,
    pub cert_pem: String,
    pub key_pem: String,
    /// The DER OCSP response found next to the certificate (`CERT_PATH.ocsp`), hex.
    #[serde(default)]
    pub ocsp_hex: Option<String>,
}

impl std::fmt::Debug for CertInstall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertInstall")
            .field("frontend", &self.frontend)
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .field("cert_pem_len", &self.cert_pem.len())
            .field("ocsp", &self.ocsp_hex.is_some())
            .finish_non_exhaustive()
    }
}

/// One request to explain (`tollgate explain`, `ctl explain`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExplainQuery {
    pub method: String,
    /// `scheme://host[:port]/path?query` (scheme and port optional).
    pub url: String,
    /// Request headers, `(name, value)`.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The TLS SNI (TCP/TLS frontends); defaults to the URL's host.
    #[serde(default)]
    pub sni: Option<String>,
    /// The client presented a verified certificate (`client_cert` routes).
    #[serde(default)]
    pub client_cert: bool,
    /// Pick this frontend by name.
    #[serde(default)]
    pub frontend: Option<String>,
    /// Pick the frontend bound to this port (default: the URL's port, else its scheme's).
    #[serde(default)]
    pub port: Option<u16>,
    /// The client address (hashing by source).
    pub source: std::net::IpAddr,
}

/// `add server`'s settings as the operator gave them (the master checks them).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddServerArgs {
    /// `IP:PORT`.
    pub address: String,
    #[serde(default)]
    pub weight: Option<u32>,
    #[serde(default)]
    pub maxconn: Option<u32>,
    #[serde(default)]
    pub backup: bool,
    /// Health-checked (needs the backend's `[backend.health]`).
    #[serde(default)]
    pub check: bool,
    /// The ramp after it comes up; the backend's `slowstart` when absent.
    #[serde(default)]
    pub slowstart_ms: Option<u64>,
    /// Starts `ready` instead of `maint`.
    #[serde(default)]
    pub enabled: bool,
}

impl Command {
    pub fn name(&self) -> &'static str {
        match self {
            Command::Reload => "reload",
            Command::Status => "status",
            Command::ShowServers { .. } => "show servers",
            Command::SetServerState { .. } => "set server state",
            Command::SetServerWeight { .. } => "set server weight",
            Command::ShutdownSessions { .. } => "shutdown sessions",
            Command::SetFrontend { enabled: true, .. } => "enable frontend",
            Command::SetFrontend { enabled: false, .. } => "disable frontend",
            Command::Metrics => "metrics",
            Command::Explain { .. } => "explain",
            Command::SetServerAddress { .. } => "set server address",
            Command::AddServer { .. } => "add server",
            Command::DelServer { .. } => "del server",
            Command::Show { query } => query.name(),
            Command::SetCert { .. } => "set cert",
            Command::ShowTable { .. } => "show table",
            Command::ClearTable { .. } => "clear table",
        }
    }
}

/// A client's request: version, id, command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub v: u32,
    pub id: u64,
    pub command: Command,
}

/// What a command produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Answer {
    /// Done; a line or a few for a person.
    Text {
        text: String,
    },
    Servers {
        servers: Vec<ServerView>,
    },
    Reload(ReloadReport),
    Metrics(MetricsReport),
    /// `ctl explain`: the explanation as lines and as data.
    Explained {
        text: String,
        detail: serde_json::Value,
    },
    Show(show::ShowReport),
    /// `show table`.
    Table(table::TableReport),
    /// `tollgate status`.
    Status(StatusReport),
}

/// `tollgate status`: the master and its worker generations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReport {
    /// The master's process id, the config file it runs, the listening sockets it holds.
    pub pid: u32,
    pub config: String,
    pub sockets: usize,
    /// The generation serving now (`None`: none, e.g. while the first one starts).
    #[serde(default)]
    pub serving: Option<u64>,
    /// Every live generation, oldest first.
    pub generations: Vec<GenerationStatus>,
}

/// One worker generation in `tollgate status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationStatus {
    pub generation: u64,
    pub pid: u32,
    /// `starting`, `serving` or `stopping`.
    pub state: String,
    /// Milliseconds since it was started.
    pub up_ms: u64,
}

impl StatusReport {
    /// The lines `tollgate status` prints.
    pub fn text(&self) -> String {
        let mut out = format!(
            "master pid {} config {} sockets {}\n",
            self.pid, self.config, self.sockets
        );
        for g in &self.generations {
            out.push_str(&format!(
                "generation {} pid {} {} up {} ms\n",
                g.generation, g.pid, g.state, g.up_ms
            ));
        }
        out
    }
}

/// The master's own figures and one snapshot per live worker generation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsReport {
    /// `None` without a master (`--no-master`).
    #[serde(default)]
    pub master: Option<MasterMetrics>,
    #[serde(default)]
    pub generations: Vec<GenerationMetrics>,
    /// The counters of every generation that exited since the master started, as each
    /// reported them at its end (`None` without a master).
    #[serde(default)]
    pub retired: Option<Box<crate::metrics::MetricsSnapshot>>,
    /// `[admin] generation_label`: a series per live generation instead of merged ones.
    #[serde(default)]
    pub generation_label: bool,
}

impl MetricsReport {
    /// One generation's worth of series: the retired counters, then every live generation's
    /// figures, oldest first (`MetricsSnapshot::absorb`).
    pub fn merged(&self) -> GenerationMetrics {
        let mut metrics = self.retired.as_deref().cloned().unwrap_or_default();
        let mut live: Vec<&GenerationMetrics> = self.generations.iter().collect();
        live.sort_by_key(|g| g.generation);
        for g in live {
            metrics.absorb(&g.metrics, true);
        }
        GenerationMetrics {
            generation: self.generations.iter().map(|g| g.generation).max().unwrap_or(0),
            metrics,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MasterMetrics {
    /// Reloads that put a new generation in service, and reloads refused.
    pub reloads: u64,
    pub reloads_refused: u64,
    /// The newest serving generation (0: none).
    pub current_generation: u64,
    /// Live generations by state: `(state, count)`.
    #[serde(default)]
    pub generations: Vec<(String, u64)>,
    /// The master's version and how long it has run (`show info`).
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub uptime_seconds: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationMetrics {
    pub generation: u64,
    #[serde(default)]
    pub metrics: MetricsSnapshot,
}

/// The answer to a request: same id, the answer or why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    pub v: u32,
    pub id: u64,
    #[serde(flatten)]
    pub outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    Ok { answer: Answer },
    Error { message: String },
}

impl Reply {
    pub fn ok(id: u64, answer: Answer) -> Self {
        Reply {
            v: VERSION,
            id,
            outcome: Outcome::Ok { answer },
        }
    }

    pub fn error(id: u64, message: impl Into<String>) -> Self {
        Reply {
            v: VERSION,
            id,
            outcome: Outcome::Error {
                message: message.into(),
            },
        }
    }

    pub fn text(id: u64, text: impl Into<String>) -> Self {
        Reply::ok(id, Answer::Text { text: text.into() })
    }
}

/// One runtime change to a server, as the master keeps it and workers apply it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerChange {
    pub backend: String,
    pub server: String,
    #[serde(default)]
    pub state: Option<AdminState>,
    #[serde(default)]
    pub weight: Option<u32>,
    /// Close the server's established connections (with `state = maint`). Never kept
    /// across a reload: it is an action, not a state.
    #[serde(default)]
    pub kill: bool,
    /// New connections go here (`set server address`).
    #[serde(default)]
    pub address: Option<std::net::SocketAddr>,
    /// A server created at run time (`add server`), with this definition.
    #[serde(default)]
    pub add: Option<NewServer>,
    /// The server is removed (`del server`); with `add`, a file server replaced by a
    /// runtime one of the same name.
    #[serde(default)]
    pub delete: bool,
}

/// A runtime server's definition, checked by the master (its id from the master's table).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewServer {
    pub id: crate::ids::ServerId,
    pub address: std::net::SocketAddr,
    pub weight: u32,
    #[serde(default)]
    pub maxconn: u32,
    #[serde(default)]
    pub backup: bool,
    #[serde(default)]
    pub check: bool,
    #[serde(default)]
    pub slowstart_ms: Option<u64>,
}

impl ServerChange {
    /// `app/a state=drain weight=5`, for logs and reload reports.
    pub fn describe(&self) -> String {
        let mut out = format!("{}/{}", self.backend, self.server);
        if self.delete {
            out.push_str(" deleted");
        }
        if let Some(n) = &self.add {
            out.push_str(&format!(" added address={} weight={}", n.address, n.weight));
            if n.maxconn != 0 {
                out.push_str(&format!(" maxconn={}", n.maxconn));
            }
            for (on, word) in [(n.backup, " backup"), (n.check, " check")] {
                if on {
                    out.push_str(word);
                }
            }
        }
        if let Some(a) = self.address {
            out.push_str(&format!(" address={a}"));
        }
        if let Some(s) = self.state {
            out.push_str(&format!(" state={}", s.as_str()));
        }
        if let Some(w) = self.weight {
            out.push_str(&format!(" weight={w}"));
        }
        out
    }
}

/// What a reload did with the runtime changes made before it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadReport {
    pub text: String,
    /// Re-applied to the new generation.
    #[serde(default)]
    pub kept: Vec<String>,
    /// Dropped because the new config changes (or removes) that server.
    #[serde(default)]
    pub overridden: Vec<String>,
}

/// A server's health as its generation's checker last saw it: worker → master on every
/// change, master → the next generation (`ToWorker::Config`), which starts from it instead
/// of `unknown`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthReport {
    pub backend: String,
    pub server: String,
    pub oper: OperState,
    /// The agent's weight percentage (100 without an agent).
    #[serde(default = "full_percent")]
    pub agent_percent: u32,
}

fn full_percent() -> u32 {
    100
}

/// Master → worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ToWorker {
    /// Once, right after the sockets: the config the master validated, the id table, and
    /// the runtime changes to apply before saying ready.
    Config {
        path: String,
        text: String,
        #[serde(default)]
        ids: IdTable,
        #[serde(default)]
        changes: Vec<ServerChange>,
        /// Frontends an operator disabled: the generation starts with them not accepting.
        #[serde(default)]
        disabled_frontends: Vec<String>,
        /// Health states of the previous generation (see `HealthReport`).
        #[serde(default)]
        health: Vec<HealthReport>,
        /// Certificates set at run time since the config was loaded (`ctl set cert`), in
        /// order: a worker restarted on the same config installs them again.
        #[serde(default)]
        certs: Vec<CertInstall>,
        /// The master's session ticket keys (`config::tickets`): every generation seals and
        /// opens tickets with the same keys, so a session resumes across a reload. Only on
        /// this channel (never argv, environment or a file).
        #[serde(default)]
        tickets: Option<crate::config::tickets::TicketKeys>,
        /// The key of the tag in QUIC connection IDs (`quic::cid`), the same for every
        /// generation so that each can tell another's connections. Only on this channel.
        #[serde(default)]
        quic_key: Option<[u8; 16]>,
    },
    /// A newer generation reads the QUIC sockets now (a reload): stop reading them and take
    /// this generation's datagrams from it (`quic::handover`). Sent just before `Stop`.
    HandOver,
    /// Soft stop: stop accepting, finish what is in flight, exit.
    Stop,
    /// Close everything, exit.
    HardStop,
    Apply {
        id: u64,
        change: ServerChange,
    },
    ShowServers {
        id: u64,
        #[serde(default)]
        backend: Option<String>,
    },
    /// Reopen the access log file (the master got SIGUSR1). No reply.
    ReopenLogs,
    /// Answered with `Answer::Metrics` holding one generation: this process's snapshot.
    Metrics {
        id: u64,
    },
    /// Enable or disable a frontend (answered like `Apply`).
    Frontend {
        id: u64,
        frontend: String,
        enabled: bool,
    },
    /// Answered with `Answer::Show` holding one generation: this process's threads.
    Show {
        id: u64,
        query: show::Query,
    },
    /// Install a certificate (answered like `Apply`, the text saying what it replaced).
    SetCert {
        id: u64,
        cert: CertInstall,
    },
    /// Answered with `Answer::Table` (show) or `Answer::Text` (clear).
    Table {
        id: u64,
        op: table::TableOp,
    },
}

/// Worker → master.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ToMaster {
    /// Serving: every accept loop runs.
    Ready,
    /// Soft-stopping: no longer accepting.
    Draining,
    Failed {
        message: String,
    },
    Reply(Reply),
    /// A server's health changed (checks, agent, live-traffic errors).
    Health(HealthReport),
    /// The generation's counters as it ends (its last message): the master carries them
    /// into the merged metrics, so no counter goes back when a generation exits.
    Final(Box<crate::metrics::MetricsSnapshot>),
}
