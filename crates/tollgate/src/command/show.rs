//! The `show` commands of the runtime API beyond `show servers` and `show info`: what is
//! asked (`Query`) and what comes back (`ShowReport`), master ↔ worker and to `ctl`.
//!
//! Invariants: plain data, additive like the rest of the protocol (every field added later
//! has a default). A worker process answers for all its threads in one `GenerationShow`;
//! the master puts one per live generation in the report (and merges the error captures of
//! every generation into `ShowReport::errors`, oldest first). Answers are bounded: at most
//! [`MAX_SESSIONS`] sessions in a whole report, the rest counted in `sessions_left_out`.

use serde::{Deserialize, Serialize};

use crate::live::server::ServerView;

/// The most sessions one `show sessions` answer lists (per worker process, and in all).
pub const MAX_SESSIONS: usize = 10_000;

/// The most escaped capture text one `show errors` answer carries (per worker process, and
/// in all), well inside a frame: many threads' rings of large escaped captures would not be.
pub const MAX_ERRORS_TEXT: usize = 8 << 20;

/// Drops the oldest captures (`errors` is oldest first) while their text is over
/// `MAX_ERRORS_TEXT`; how many it dropped.
pub fn bound_errors(errors: &mut Vec<ErrorCapture>) -> u64 {
    let mut total: usize = errors.iter().map(|e| e.escaped.len()).sum();
    let mut drop = 0;
    while total > MAX_ERRORS_TEXT && drop < errors.len() {
        total -= errors.get(drop).map_or(0, |e| e.escaped.len());
        drop += 1;
    }
    errors.drain(..drop);
    drop as u64
}

/// What a `show` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub enum Query {
    /// Frontends, backends and servers (HAProxy's `show stat`), optionally one frontend or
    /// one backend (and its servers) only.
    Stat {
        #[serde(default)]
        frontend: Option<String>,
        #[serde(default)]
        backend: Option<String>,
    },
    /// Every live client connection, optionally only those on one backend (or server).
    Sessions {
        #[serde(default)]
        backend: Option<String>,
        #[serde(default)]
        server: Option<String>,
    },
    /// The last requests and responses refused as malformed.
    Errors,
    /// Every budget of every worker thread.
    Budgets,
    /// Every TLS frontend's certificates (of one frontend), as its handshakes see them now.
    Certs {
        #[serde(default)]
        frontend: Option<String>,
    },
}

impl Query {
    pub fn name(&self) -> &'static str {
        match self {
            Query::Stat { .. } => "show stat",
            Query::Sessions { .. } => "show sessions",
            Query::Errors => "show errors",
            Query::Budgets => "show budgets",
            Query::Certs { .. } => "show certs",
        }
    }

    /// `stat`, `sessions`, `errors`, `budgets` or `certs` (`ShowReport::what`).
    pub fn what(&self) -> &'static str {
        self.name().trim_start_matches("show ")
    }
}

/// The answer to a `show`: one entry per live generation, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShowReport {
    /// What was asked: `stat`, `sessions`, `errors`, `budgets` or `certs` (filled by the master).
    #[serde(default)]
    pub what: String,
    #[serde(default)]
    pub generations: Vec<GenerationShow>,
    /// `show errors`: every generation's captures, oldest first.
    #[serde(default)]
    pub errors: Vec<ErrorCapture>,
    /// `show sessions`: sessions not listed because the answer holds `MAX_SESSIONS`.
    #[serde(default)]
    pub sessions_left_out: u64,
    /// `show errors`: the oldest captures left out to stay within `MAX_ERRORS_TEXT`.
    #[serde(default)]
    pub errors_left_out: u64,
}

/// One worker process's answer (only the part the query asked for is filled).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationShow {
    /// Filled in by the master (the worker does not know its number).
    #[serde(default)]
    pub generation: u64,
    #[serde(default)]
    pub stat: Option<StatReport>,
    #[serde(default)]
    pub sessions: Vec<SessionView>,
    #[serde(default)]
    pub sessions_left_out: u64,
    #[serde(default)]
    pub errors: Vec<ErrorCapture>,
    #[serde(default)]
    pub errors_left_out: u64,
    #[serde(default)]
    pub budgets: Vec<ThreadBudgets>,
    #[serde(default)]
    pub certs: Vec<CertView>,
}

/// One certificate of a TLS frontend (`show certs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertView {
    pub frontend: String,
    pub names: Vec<String>,
    /// Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    /// `file`, `acme` or `runtime`.
    pub source: String,
    /// The certificate file it was read from (file, runtime).
    #[serde(default)]
    pub path: Option<String>,
    /// Hex.
    pub serial: String,
    /// SHA-256 of the leaf, `AB:CD:...`.
    pub sha256: String,
    /// Served when the SNI matches no name.
    #[serde(default)]
    pub default: bool,
    /// An OCSP response is stapled; its nextUpdate (Unix seconds), when it has one.
    #[serde(default)]
    pub stapled: bool,
    #[serde(default)]
    pub ocsp_next_update: Option<i64>,
    /// When it was installed (loaded, swapped in), Unix seconds.
    #[serde(default)]
    pub installed_at: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatReport {
    #[serde(default)]
    pub frontends: Vec<FrontendStat>,
    #[serde(default)]
    pub backends: Vec<BackendStat>,
    #[serde(default)]
    pub servers: Vec<ServerStat>,
}

/// One frontend, every thread summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontendStat {
    pub name: String,
    /// `OPEN`, or `STOPPED` while disabled (`ctl disable frontend`).
    pub state: String,
    /// Client connections open now, and accepted so far.
    pub sessions_current: u64,
    pub sessions_total: u64,
    /// The frontend's `maxconn` (0: none).
    #[serde(default)]
    pub sessions_limit: u32,
    /// Connections accepted per second now, and the busiest second (per-thread maxima
    /// summed: an upper bound).
    pub session_rate: u64,
    pub session_rate_max: u64,
    /// Streams ended: HTTP requests, TCP sessions.
    pub requests: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Requests the proxy answered with a 4xx itself (refused, malformed, timed out).
    pub denied_4xx: u64,
    /// Requests refused as malformed (the ones `show errors` captures).
    pub malformed: u64,
    /// Connections closed by the frontend's `allow` / `deny` lists or a TCP `deny` route.
    #[serde(default)]
    pub conn_denied: u64,
    /// TLS handshakes completed (`None`: not a TLS frontend).
    #[serde(default)]
    pub tls_handshakes: Option<u64>,
}

/// One backend, every thread and server summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendStat {
    pub name: String,
    /// `UP` while any server may take new connections, else `DOWN`.
    pub state: String,
    /// Server slots held now (connections or requests in flight), and server connections
    /// made so far.
    pub sessions_current: u64,
    pub sessions_total: u64,
    /// Streams given to a server per second now, and the busiest second (upper bound).
    pub session_rate: u64,
    pub session_rate_max: u64,
    /// Requests waiting for a slot now, the most seen waiting at once (per-thread maxima
    /// summed), and those refused because `maxqueue` were waiting.
    pub queue_current: u64,
    pub queue_max: u64,
    pub queue_full: u64,
    pub requests: u64,
    /// Bytes to its servers and back to clients.
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub responses_5xx: u64,
    pub connect_errors: u64,
    /// Attempts moved to another server after a failed connect (tollgate always moves a
    /// retry to another server while one is left: HAProxy's retries and redispatches in one).
    pub retries: u64,
    /// Responses refused as malformed (the ones `show errors` captures).
    pub malformed_responses: u64,
}

/// One server: `show servers` plus rates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStat {
    #[serde(flatten)]
    pub server: ServerView,
    pub session_rate: u64,
    pub session_rate_max: u64,
}

/// One live client connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionView {
    /// Unique within its worker thread and generation.
    pub id: u64,
    pub worker: u32,
    pub age_ms: u64,
    pub client: String,
    pub frontend: String,
    #[serde(default)]
    pub backend: Option<String>,
    #[serde(default)]
    pub server: Option<String>,
    /// Bytes from the client forwarded to servers, and bytes written to the client: TCP
    /// sessions and tunnels live, HTTP requests as each one ends.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// `handshake`, `reading-request`, `queued`, `connecting`, `forwarding`,
    /// `idle-keepalive`, `tunnel` or `closing`.
    pub state: String,
    #[serde(default)]
    pub tls: bool,
    /// HTTP/3 over QUIC (`tls` is true too).
    #[serde(default)]
    pub quic: bool,
    /// The ID of the request in flight on an HTTP/1 connection (`[frontend] request_id`);
    /// none between requests, and on HTTP/2 connections (each stream has its own: see the
    /// access log).
    #[serde(default)]
    pub request_id: Option<String>,
}

/// A request or response refused as malformed, as captured when it was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCapture {
    /// Unix milliseconds.
    pub time_ms: u64,
    #[serde(default)]
    pub generation: u64,
    pub worker: u32,
    /// `request` (from a client) or `response` (from a server).
    pub side: String,
    pub client: String,
    pub frontend: String,
    #[serde(default)]
    pub backend: Option<String>,
    #[serde(default)]
    pub server: Option<String>,
    /// What was wrong, in words.
    pub error: String,
    /// The offending byte's offset in the message (from its first byte).
    pub offset: u64,
    /// Bytes the proxy had of the message, and how many of them were captured.
    pub length: u64,
    pub captured: u64,
    /// The captured bytes, printable ASCII as is, others as `\r`, `\n`, `\t`, `\\`, `\xHH`.
    pub escaped: String,
    /// Where the offending byte starts in `escaped` (in chars; `escaped.len()` if past it).
    pub escaped_offset: u64,
    /// The request's ID (`[frontend] request_id`), when it had one: a malformed response's
    /// request always does, a malformed request never (it is refused before).
    #[serde(default)]
    pub request_id: Option<String>,
}

/// One worker thread's budgets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadBudgets {
    pub worker: u32,
    pub budgets: Vec<crate::metrics::BudgetMetrics>,
}
