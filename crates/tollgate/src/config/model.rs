//! The validated, immutable configuration the proxy runs on.
//!
//! Built only by `validate`; every reference is resolved to an index and every default
//! applied, so the data path never looks anything up by name. A reload builds a new `Config`
//! and swaps the `Arc`; nothing mutates one in place.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use super::file::ForwardTargetName as ForwardTarget;
pub use super::file::ForwardedName as Forwarded;
use super::sni::SniMatcher;
use crate::http::h2;

pub use super::file::ModeName as Mode;

/// Accept backlog given to listen(2). The kernel caps it at net.core.somaxconn.
pub const DEFAULT_BACKLOG: u32 = 4096;
pub const DEFAULT_BUFFER_SIZE: usize = 64 * 1024;
pub const DEFAULT_BUFFER_BUDGET: u64 = 1 << 30;
pub const DEFAULT_RETRIES: u32 = 3;
pub const DEFAULT_MAX_PIPES: u32 = 64;
/// `max_compressors`: 64 compressors hold at most ~40 MiB (zstd's state is the largest,
/// ~600 KiB at the default level and window; docs/benchmarks.md "Compression").
pub const DEFAULT_MAX_COMPRESSORS: u32 = 64;
/// `max_auth_checks`: a bcrypt check at htpasswd's default cost takes a few ms of a core;
/// 4 per worker keep a password-guessing flood from taking more than that many cores.
pub const DEFAULT_MAX_AUTH_CHECKS: u32 = 4;
/// The kernel's own default pipe size: sixteen pages.
pub const DEFAULT_PIPE_SIZE: usize = 64 * 1024;
pub const DEFAULT_MAX_HANDSHAKES: u32 = 1000;
/// `global.max_handshakes_per_source` when absent: a busy NAT's share, a small part of
/// `max_handshakes`.
pub const DEFAULT_MAX_HANDSHAKES_PER_SOURCE: u32 = 100;

#[derive(Debug, Clone)]
pub struct Config {
    /// Where the config came from: a path, or `None` for the embedded default.
    pub source: Option<PathBuf>,
    /// The files it was read from, as named: the main file first, then each included file
    /// in the order read (`tollgate check` lists them).
    pub files: Vec<PathBuf>,
    pub global: Global,
    pub timeouts: Timeouts,
    pub http: Http,
    pub watchdog: Watchdog,
    pub log: Log,
    pub admin: Admin,
    pub frontends: Vec<Frontend>,
    pub backends: Vec<Backend>,
    /// `[resolvers]`: the DNS client of `discover` (host-named servers, SRV records).
    pub resolvers: Resolvers,
    /// `[http2]`: HTTP/2 client connections.
    pub http2: Http2,
    /// `[http3]`: HTTP/3 over QUIC on frontends with `[frontend.quic]`.
    pub http3: Http3,
    /// `[[frontend.tls.acme]]` orders, `global.state_dir`, the challenge answers in flight.
    pub acme: super::acme::Acme,
    /// `[shared]`: the Redis shared limits are counted in (`None`: no section).
    pub sharing: Option<super::shared::Sharing>,
}

/// How server host names and SRV records are resolved (the `discover` module runs it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolvers {
    /// Nameservers to ask; empty = the system's (/etc/resolv.conf, with /etc/hosts first).
    pub nameservers: Vec<SocketAddr>,
    /// How often every name is asked again.
    pub resolve_interval: Duration,
    /// One query attempt's limit.
    pub timeout: Duration,
    /// Attempts per query (each nameserver in turn) before the answer counts as a failure.
    pub attempts: u32,
}

pub const DEFAULT_RESOLVE_INTERVAL: Duration = Duration::from_secs(10);

impl Default for Resolvers {
    fn default() -> Self {
        Resolvers {
            nameservers: Vec::new(),
            resolve_interval: DEFAULT_RESOLVE_INTERVAL,
            timeout: Duration::from_secs(1),
            attempts: 2,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Global {
    pub workers: usize,
    pub thread_per_core: bool,
    /// Most client connections the whole process serves at once; 0 = not set, the runtime
    /// derives it from the process's descriptor limit (`effective_maxconn`).
    pub maxconn: u32,
    pub buffer_size: usize,
    /// Bytes of copy buffers all workers may hold together (split evenly among workers).
    pub buffer_budget: u64,
    pub backlog: u32,
    /// New connections accepted per second, process-wide; 0 = unlimited.
    pub max_accept_rate: u32,
    /// Serve from worker processes under a master (`false` = one process, no reload).
    pub master: bool,
    /// The master's control socket (Unix stream socket).
    pub control_socket: PathBuf,
    /// splice(2) pipes one worker keeps (in use + pooled); beyond it relays copy.
    pub max_pipes: u32,
    /// Responses one worker compresses at once; beyond it responses go uncompressed.
    pub max_compressors: u32,
    /// Password checks one worker runs at once, off its thread; more wait for a slot.
    pub max_auth_checks: u32,
    /// Capacity asked of the kernel for each splice pipe: bytes moved per splice(2) call.
    pub pipe_size: usize,
    /// TLS handshakes in progress at once, process-wide; more wait for a slot.
    pub max_handshakes: u32,
    /// TLS connections (termination) one source (IPv4 address, IPv6 /64) may have open
    /// before the end of their handshake, process-wide; more are closed at accept.
    pub max_handshakes_per_source: u32,
    /// Health checks in flight at once, process-wide.
    pub max_health_checks: u32,
    /// Who worker processes run as (`user`/`group`); `None` = as started.
    pub run_as: Option<RunAs>,
    /// Workers running as root is deliberate: no warning.
    pub allow_root: bool,
    /// With per-worker SO_REUSEPORT sockets, a worker with more than `least + 1 + least / 4`
    /// sessions open (`least`: the least loaded worker's) hands a new connection to that one.
    pub connection_rebalance: bool,
    /// Who may use the control socket: its file's permission bits and group.
    pub control_access: SocketAccess,
    /// A plain HTTP/1 client connection that waits this long for its first or next request
    /// leaves its task for the worker's park (`ctx::park`): it then holds its socket and a
    /// slab entry, no task, no reactor registration, no buffer.
    pub park_idle_after: Duration,
}

/// `global.park_idle_after`'s default: long past a busy client's next request (a few
/// milliseconds), short against the seconds a browser's idle connection waits. A park and
/// its resume cost one `epoll_ctl` and a task (`ctx::park`), so a client asking every few
/// hundred milliseconds loses little to it.
pub const DEFAULT_PARK_IDLE_AFTER: Duration = Duration::from_millis(250);

/// The control socket file's permissions (connecting needs write permission on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketAccess {
    /// Permission bits; always includes the owner's read and write.
    pub mode: u32,
    /// Group to give the file (`None`: the master's).
    pub gid: Option<u32>,
}

/// Owner only, HAProxy's `stats socket ... mode 600`.
pub const DEFAULT_CONTROL_SOCKET_MODE: u32 = 0o600;

impl Default for SocketAccess {
    fn default() -> Self {
        SocketAccess {
            mode: DEFAULT_CONTROL_SOCKET_MODE,
            gid: None,
        }
    }
}

/// `[admin]`: the operator's HTTP endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admin {
    /// Where `GET /metrics` is served (`None`: nowhere). Bound by the master, so it lives
    /// across reloads; a changed value takes effect at the next start.
    pub bind: Option<SocketAddr>,
    /// `stats_auth`: who may use the stats page (`None`: anyone, read-only).
    pub stats_auth: Option<StatsAuth>,
    /// `generation_label`: `/metrics` has a series per live generation, labelled, instead
    /// of one series carrying the exited generations' counts (`admin::prometheus`).
    pub generation_label: bool,
}

/// `[admin] stats_auth = "user:password"`: HTTP Basic credentials for the stats page and
/// its actions. Both parts non-empty; the user has no `:` (RFC 7617). `Debug` hides the
/// password, so the config can be logged.
#[derive(Clone, PartialEq, Eq)]
pub struct StatsAuth {
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for StatsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatsAuth")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// The user and group a worker switches to, resolved at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// As written, for logs.
    pub user: String,
    pub uid: u32,
    pub gid: u32,
}

/// Where the master listens for `tollgate reload` unless `global.control_socket` says otherwise.
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/tollgate/tollgate.sock";

/// `[log]`: where access log lines go and how they look (docs/logging.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Log {
    pub access: LogSink,
    pub format: LogFormat,
    /// `[log]`'s line and sampling (a frontend without `[frontend.log]` has this one).
    pub plan: super::log_layout::LogPlan,
}

/// Where access log lines go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum LogSink {
    /// No access log (the default, as in HAProxy: nothing is logged unless configured).
    #[default]
    Off,
    Stdout,
    /// Appended to this file; reopened on SIGUSR1.
    File(PathBuf),
    /// One RFC 5424 datagram per line to this UDP address.
    Syslog(SocketAddr),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    #[default]
    Json,
    /// The fixed layout of docs/logging.md.
    Text,
}

/// Stall detection for worker threads (see `runtime::watchdog`).
#[derive(Debug, Clone, Copy)]
pub struct Watchdog {
    pub enabled: bool,
    /// CPU time a thread may burn without scheduler progress before a warning.
    pub warn_after: Duration,
    /// CPU time without progress after which the worker aborts (the master restarts it).
    pub abort_after: Duration,
    /// Wall-clock time without progress (and without burning CPU) before a warning.
    pub no_progress_after: Duration,
}

impl Default for Watchdog {
    fn default() -> Self {
        Watchdog {
            enabled: true,
            warn_after: Duration::from_millis(100),
            abort_after: Duration::from_secs(1),
            no_progress_after: Duration::from_secs(5),
        }
    }
}

/// What a route or a backend changes of the global limits for the requests it takes
/// (`None`: the next level's). Routes set `server`, `http_request`, `max_body_size` and
/// `retries`; backends `connect`, `server` and `http_request` (a backend's retries are
/// [`Backend::retries`]). Checked at load: a level never holds a key it may not set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overrides {
    pub connect: Option<Duration>,
    pub server: Option<Duration>,
    pub http_request: Option<Duration>,
    pub max_body_size: Option<u64>,
    pub retries: Option<u32>,
}

impl Overrides {
    /// Nothing overridden: what traffic no route matched runs under.
    pub const NONE: Overrides = Overrides {
        connect: None,
        server: None,
        http_request: None,
        max_body_size: None,
        retries: None,
    };

    pub fn is_empty(&self) -> bool {
        *self == Overrides::NONE
    }
}

/// The limits one request runs under: the global ones with its backend's overrides, then
/// its route's, applied (`Config::request_limits`).
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    pub timeouts: Timeouts,
    /// A backend's or route's `http_request`: head and body must have arrived within this
    /// of the request's start (the global value bounds the head alone).
    pub whole_request: Option<Duration>,
    /// Largest request body (413 above); 0 = unlimited.
    pub max_body_size: u64,
    /// The route's retry budget, every kind of retry counted; `None` = the backend's rules.
    pub retries: Option<u32>,
}

impl RequestLimits {
    /// Whether a request that has been retried `done` times may be retried once more.
    pub fn may_retry(&self, done: u32) -> bool {
        self.retries.is_none_or(|budget| done < budget)
    }
}

impl Config {
    /// How long a connect to a server of `backend` may take (its `timeouts.connect`).
    pub fn connect_timeout(&self, backend: usize) -> Duration {
        self.backends
            .get(backend)
            .and_then(|b| b.overrides.connect)
            .unwrap_or(self.timeouts.connect)
    }

    /// The limits of a request that goes to `backend` (`None`: answered by the proxy) by a
    /// route with these overrides (`Overrides::NONE` for the default backend).
    pub fn request_limits(&self, backend: Option<usize>, route: &Overrides) -> RequestLimits {
        let mut timeouts = self.timeouts;
        let backend = backend
            .and_then(|b| self.backends.get(b))
            .map_or(&Overrides::NONE, |b| &b.overrides);
        for level in [backend, route] {
            timeouts.connect = level.connect.unwrap_or(timeouts.connect);
            timeouts.server = level.server.unwrap_or(timeouts.server);
        }
        RequestLimits {
            timeouts,
            whole_request: route.http_request.or(backend.http_request),
            max_body_size: route.max_body_size.unwrap_or(self.http.max_body_size),
            retries: route.retries,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    /// Idle limit for a client connection (TCP mode: no byte moved either way).
    pub client: Duration,
    /// Idle limit on the server side.
    pub server: Duration,
    /// Longest a connection waits for a server slot (server maxconn) before giving up.
    pub queue: Duration,
    /// After a soft stop, connections still open this long are closed.
    pub hard_stop_after: Duration,
    /// HTTP: the whole request head must arrive within this (the slowloris defense).
    pub http_request: Duration,
    /// HTTP: longest wait for the next request on a keep-alive client connection.
    pub http_keep_alive: Duration,
    /// HTTP: idle server connections in the pool are closed after this.
    pub pool_idle: Duration,
    /// Longest a TLS handshake (termination or to a server) may take; for termination,
    /// counted from the arrival of the whole ClientHello.
    pub tls_handshake: Duration,
    /// Termination: longest to wait for a whole ClientHello after accept (the wait takes no
    /// `max_handshakes` slot).
    pub client_hello: Duration,
    /// Longest to wait for a complete ClientHello when routing by SNI without terminating.
    pub tls_inspect: Duration,
    /// Longest to wait for a complete PROXY protocol header (`accept_proxy`).
    pub proxy_header: Duration,
    /// Idle limit of a tunnel, nothing moved either way: a TCP-mode relay or an HTTP
    /// connection after its upgrade (WebSocket). `None`: the lesser of `client` and the
    /// (backend's) `server`, as before the key existed. HAProxy's `timeout tunnel`.
    pub tunnel: Option<Duration>,
}

impl Timeouts {
    /// How long a tunnel may sit with nothing moving either way before it is closed.
    pub fn tunnel_idle(&self) -> Duration {
        self.tunnel.unwrap_or(self.client.min(self.server))
    }
}

/// The largest request head HTTP mode accepts unless `http.max_header_size` says otherwise
/// (never more than `global.buffer_size`: a head is read into one buffer).
pub const DEFAULT_MAX_HEADER_SIZE: usize = 32 * 1024;

/// Limits of HTTP mode.
#[derive(Debug, Clone, Copy)]
pub struct Http {
    /// At most `global.buffer_size` (checked at load).
    pub max_header_size: usize,
    pub max_request_line: usize,
    pub max_headers: usize,
    /// Largest request body accepted by Content-Length (413 above); 0 = unlimited.
    pub max_body_size: u64,
    /// Idle server connections kept per server per worker.
    pub pool_max_idle: usize,
}

impl Default for Http {
    fn default() -> Self {
        Http {
            max_header_size: DEFAULT_MAX_HEADER_SIZE,
            max_request_line: 8 * 1024,
            max_headers: 100,
            max_body_size: 0,
            pool_max_idle: 64,
        }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            client: Duration::from_secs(30),
            server: Duration::from_secs(30),
            queue: Duration::from_secs(5),
            hard_stop_after: Duration::from_secs(30),
            http_request: Duration::from_secs(10),
            http_keep_alive: Duration::from_secs(10),
            pool_idle: Duration::from_secs(10),
            tls_handshake: Duration::from_secs(10),
            client_hello: Duration::from_secs(5),
            tls_inspect: Duration::from_secs(5),
            proxy_header: Duration::from_secs(5),
            tunnel: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Frontend {
    pub name: String,
    pub binds: Vec<SocketAddr>,
    pub mode: Mode,
    /// 0 = bounded only by the global maxconn.
    pub maxconn: u32,
    /// Where traffic no route matched goes; `None` = refused (503 in HTTP, closed in TCP).
    pub default_backend: Option<usize>,
    pub forwarded: Forwarded,
    /// The target a server gets: normalised (as routes matched it) or as sent.
    pub forward_target: ForwardTarget,
    /// The routes in order, compiled for matching (`config::route`); derefs to `[Route]`.
    pub routes: super::route::RouteTable,
    /// TCP mode: SNI pattern -> index in `routes`, built when any route has `sni`. Its
    /// presence makes the frontend read the ClientHello (peeked, or from the handshake).
    pub sni_routes: Option<SniMatcher>,
    /// Close connections whose SNI matches no route (passthrough) or no certificate (TLS).
    pub reject_unknown_sni: bool,
    /// Terminate TLS on this frontend.
    pub tls: Option<FrontendTls>,
    pub splice: Offload,
    /// Plain HTTP: a connection that opens with the HTTP/2 preface speaks HTTP/2.
    pub h2c: bool,
    /// `allow` / `deny`: which client addresses may open a connection at all.
    pub access: super::prefix_set::Access,
    /// Connections open with a PROXY protocol header (`accept_proxy`, `trusted_proxies`).
    pub accept_proxy: Option<super::proxy::AcceptProxy>,
    /// Sessions keep their origin (addresses, TLS facts) for a server's PROXY header: some
    /// server of the config has `send_proxy`.
    pub keep_origin: bool,
    /// `[[frontend.limit]]`, in the order written (at most 8). One no route names counts
    /// every request (TCP mode: connection) of the frontend; one a route names, only the
    /// requests of the routes naming it.
    pub limits: Vec<super::limit::Limit>,
    /// The limits no route names (bit i: `limits[i]`): they count every request.
    pub unrouted_limits: u8,
    /// HTTP mode: `request_id` (`config::request_id`).
    pub request_ids: Option<super::request_id::RequestIds>,
    /// HTTP mode: `trace` (`config::trace`).
    pub trace: Option<super::trace::Trace>,
    /// HTTP mode: response compression for routes without their own (`config::compress`).
    pub compress: Option<std::sync::Arc<crate::http::compress::Policy>>,
    /// The access log's line and sampling for this frontend's streams (`config::log_layout`).
    pub log: std::sync::Arc<super::log_layout::LogPlan>,
    /// `[frontend.quic]`: HTTP/3 over QUIC beside the TCP binds (TLS frontends in HTTP mode).
    pub quic: Option<Quic>,
}

/// `[frontend.quic]`: the UDP addresses HTTP/3 is served on, with the frontend's
/// certificates, routes, limits, logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quic {
    pub binds: Vec<SocketAddr>,
    /// 0-RTT (off by default): when on, only safe methods are taken early, and they reach
    /// the server marked `Early-Data: 1` (RFC 8470).
    pub zero_rtt: bool,
    /// `Alt-Svc: h3=":PORT"; ma=SECONDS` on this frontend's HTTP/1 and HTTP/2 responses
    /// (PORT: the first quic bind's); zero sends none.
    pub alt_svc_max_age: Duration,
    /// That field's value, rendered once (`None`: none sent).
    pub alt_svc: Option<Box<[u8]>>,
}

impl Quic {
    pub fn new(binds: Vec<SocketAddr>, zero_rtt: bool, alt_svc_max_age: Duration) -> Quic {
        let alt_svc = binds.first().filter(|_| !alt_svc_max_age.is_zero()).map(|b| {
            format!("h3=\":{}\"; ma={}", b.port(), alt_svc_max_age.as_secs())
                .into_bytes()
                .into()
        });
        Quic {
            binds,
            zero_rtt,
            alt_svc_max_age,
            alt_svc,
        }
    }
}

impl Frontend {
    /// The `Alt-Svc` value this frontend's responses carry (a quic bind and a max age).
    pub fn alt_svc(&self) -> Option<&[u8]> {
        self.quic.as_ref().and_then(|q| q.alt_svc.as_deref())
    }
}

/// A switch for an offload (splice, kTLS) that engages after `after_bytes` in one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offload {
    pub enabled: bool,
    pub after_bytes: u64,
}

/// TLS termination: the rustls config every worker shares (one ticketer, one session cache),
/// so a session resumed on any core was issued by the same keys.
#[derive(Debug, Clone)]
pub struct FrontendTls {
    pub server_config: Arc<rustls::ServerConfig>,
    pub ktls: Offload,
    /// The certificates `server_config` resolves SNI with, swappable at run time.
    pub certs: Arc<super::cert_store::CertStore>,
    /// The `[[frontend.tls.cert]]` entries' files, in config order.
    pub files: Vec<CertFiles>,
    /// With a tls-alpn-01 `[[frontend.tls.acme]]`: what handshakes offering `acme-tls/1`
    /// get while a name is under validation (`config::acme::ChallengeBook`).
    pub acme_challenge: Option<super::acme::AlpnChallenge>,
    /// `[frontend.tls.client_auth]` (its verifier is in `server_config`).
    pub client_auth: Option<ClientAuth>,
}

/// Client certificates asked for: what the sessions need beyond the verifier.
#[derive(Debug, Clone)]
pub struct ClientAuth {
    /// No certificate fails the handshake (else it is optional).
    pub required: bool,
    /// HTTP mode: the request fields the client's identity goes to the server in.
    pub headers: ClientCertHeaders,
}

/// The field names, as written (each optional: a name left out is not sent).
#[derive(Debug, Clone, Default)]
pub struct ClientCertHeaders {
    /// The subject, RFC 4514 (`CN=client,O=Example`).
    pub subject: Option<Box<str>>,
    /// SHA-256 of the leaf certificate's DER, lowercase hex.
    pub fingerprint: Option<Box<str>>,
    /// `SUCCESS` (a certificate verified) or `NONE` (none presented).
    pub verified: Option<Box<str>>,
    /// Every name above, lowercase: dropped from every request a client sends, so only
    /// the proxy's own values reach a server.
    pub names: Vec<Box<str>>,
}

/// One `[[frontend.tls.cert]]`'s files and what is done with them at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    /// Polled; a changed, valid pair is swapped in (`watch`).
    pub watch: bool,
    /// Its OCSP response is fetched from its responder and kept fresh (`ocsp_fetch`).
    pub ocsp_fetch: bool,
}

impl CertFiles {
    /// HAProxy's convention: the DER OCSP response to staple sits next to the certificate.
    pub fn ocsp_path(&self) -> std::path::PathBuf {
        let mut p = self.cert.clone().into_os_string();
        p.push(".ocsp");
        p.into()
    }
}

/// The HTTP version spoken to a server (`proto`): HTTP/1.1 connections pooled one request
/// at a time, or HTTP/2 connections carrying many streams (`proxy::h2back`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ServerProto {
    #[default]
    H1,
    H2,
}

/// TLS to a server.
#[derive(Debug, Clone)]
pub struct ServerTls {
    pub client_config: Arc<rustls::ClientConfig>,
    pub server_name: rustls::pki_types::ServerName<'static>,
}

pub use crate::http::rewrite::{HeaderRules, PathRewrite, Rewrite, Template};

#[derive(Debug, Clone)]
pub struct Route {
    /// `name`, else `route[N]` (N: its index in the frontend's routes, from 0).
    pub name: Box<str>,
    /// What a request (TCP mode: a connection's source and SNI) must meet, all ANDed (`config::route`).
    pub when: super::route::Conditions,
    /// Per-route limits (`timeouts`, `max_body_size`, `retries`).
    pub overrides: Overrides,
    pub action: RouteAction,
    /// The frontend's `limits` (bit i: `Frontend::limits[i]`) this route names.
    pub limits: u8,
    /// `compress`: replaces the frontend's (no codings: off for this route).
    pub compress: Option<std::sync::Arc<crate::http::compress::Policy>>,
    /// `auth`: who may use this route.
    pub auth: Option<std::sync::Arc<crate::auth::RouteAuth>>,
}

/// What a matched route does (`config::route_action` builds it).
#[derive(Debug, Clone)]
pub enum RouteAction {
    /// Forward to this backend, with the route's rewrites if it has any.
    Backend(usize, Option<Box<Rewrite>>),
    /// Answer here: `return`, and `deny` (a short text body).
    Return(Box<Answer>),
    Redirect(Box<Redirect>),
    /// TCP mode, `deny = true`: close the connection at once (validation never puts it on
    /// an HTTP frontend, where `deny` answers a status).
    Close,
}

/// A response the proxy makes for a `return` or `deny` route.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Box<[u8]>,
    /// `return.headers`: name as written, value checked (no variables).
    pub headers: Vec<(String, Box<[u8]>)>,
}

/// A `redirect` route: `Location` rendered from the request, and its status (301, 302,
/// 303, 307 or 308).
#[derive(Debug, Clone)]
pub struct Redirect {
    pub status: u16,
    pub location: Template,
}

/// A host name pattern: `a.example` exactly, or `*.example` = exactly one more label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    Exact(String),
    /// Stored as the suffix with its dot, e.g. `.example`.
    Wildcard(String),
}

impl HostPattern {
    /// Parses a lowercase pattern; `None` if it is not a host name or a `*.` wildcard.
    pub fn parse(text: &str) -> Option<HostPattern> {
        let text = text.to_ascii_lowercase();
        let (wild, name) = match text.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, text.as_str()),
        };
        let label_ok = |l: &str| {
            !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if name.is_empty() || !name.split('.').all(label_ok) {
            return None;
        }
        Some(if wild {
            HostPattern::Wildcard(format!(".{name}"))
        } else {
            HostPattern::Exact(name.to_string())
        })
    }

    /// `host` must already be lowercase and without port.
    pub fn matches(&self, host: &str) -> bool {
        match self {
            HostPattern::Exact(name) => host == name,
            HostPattern::Wildcard(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|label| !label.is_empty() && !label.contains('.')),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Backend {
    /// Stable across reloads (assigned by `ids::IdTable`).
    pub id: super::ids::BackendId,
    pub name: String,
    pub mode: Mode,
    /// Name of an algorithm in `balance::ALGORITHMS` (one of `config::BALANCE_ALGORITHMS`).
    pub balance: String,
    /// What `balance = "hash"` hashes; `None` for every other algorithm (so that requests
    /// to them compute no key at all).
    pub hash_key: Option<HashKey>,
    /// Bounded-load factor of `balance = "hash"`, percent of the average load (0 = none).
    pub hash_balance_factor: u32,
    /// Connection attempts after the first one fails.
    pub retries: u32,
    /// The backend's `slowstart` (zero = none): what its servers ramp over unless they set
    /// their own; servers added at run time take it too.
    pub slowstart: Duration,
    /// `[backend.health]`: active checks; `None` = none.
    pub health: Option<Arc<super::health::HealthCheck>>,
    pub queue: QueueOptions,
    pub servers: Vec<Server>,
    /// Some of `servers` speak HTTP/2 (`proto = "h2"`): requests keep what only HTTP/2
    /// needs of their head (`TE: trailers`).
    pub any_h2: bool,
    /// The backend's `proto`: its servers' default, and what servers added at run time speak.
    pub proto: ServerProto,
    /// Cookie persistence (`[backend.sticky]`, HTTP backends only).
    pub sticky: Option<Sticky>,
    /// `[[backend.discover]]`: SRV names whose records add servers at run time.
    pub discover: Vec<Discover>,
    /// `timeouts = { … }`: `connect`, `server` and `http_request` for this backend's traffic.
    pub overrides: Overrides,
}

/// Cookie persistence, as HAProxy's `cookie NAME insert indirect nocache`: responses get a
/// cookie naming (opaquely) the server that answered unless the request already carried
/// that server's value; requests carrying a usable server's value go to it; the cookie is
/// removed from requests before they reach the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sticky {
    /// The cookie's name (a token).
    pub cookie: String,
    /// `Path` attribute (default `/`).
    pub path: String,
    /// `Domain` attribute; `None` = host-only cookie.
    pub domain: Option<String>,
    /// `HttpOnly` attribute (default on: scripts have no use for it).
    pub httponly: bool,
    /// `Secure` attribute (default off).
    pub secure: bool,
    /// A response that gets the cookie also gets `Cache-Control: private` unless it is
    /// already private, no-cache or no-store (default on).
    pub nocache: bool,
}

/// Servers from the SRV records of one name (see `discover`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discover {
    /// As written, e.g. `_http._tcp.app.example`.
    pub srv: String,
    /// Every discovered server's maxconn (0 = no limit).
    pub maxconn: u32,
}

impl Backend {
    /// Whether any of its servers comes from DNS at run time (a host-named address or SRV).
    pub fn uses_dns(&self) -> bool {
        !self.discover.is_empty() || self.servers.iter().any(|s| s.host.is_some())
    }
}

/// How a backend's requests wait when every usable server is at its `maxconn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueOptions {
    /// Requests that may wait at once, process-wide; one more is refused with 503 (0 = no
    /// limit, HAProxy's default).
    pub maxqueue: u32,
    /// A sticky request whose connect to its server failed may retry on another server;
    /// `false` keeps its retries on that server while it is usable (HAProxy's `option
    /// redispatch`).
    pub redispatch: bool,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            maxqueue: 0,
            redispatch: true,
        }
    }
}

/// What consistent hashing keys a connection or request by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// The client's IP address.
    Source,
    /// The request target (path and query).
    Uri,
    /// The first value of this header (name as written; matched case-insensitively).
    Header(String),
    /// The value of this cookie.
    Cookie(String),
}

#[derive(Debug, Clone)]
pub struct Server {
    /// Stable across reloads (assigned by `ids::IdTable`).
    pub id: super::ids::ServerId,
    pub name: String,
    /// With a `host`, the unspecified IP with the port until `discover` resolves the name at
    /// start (the server is unusable until then).
    pub address: SocketAddr,
    /// The host name of an address written `name:port`: resolved at start and every
    /// `resolvers.resolve_interval` by `discover`, never at load.
    pub host: Option<String>,
    pub weight: u32,
    /// 0 = no limit.
    pub maxconn: u32,
    pub backup: bool,
    pub tls: Option<ServerTls>,
    /// The HTTP version spoken to this server (HTTP mode; TCP mode relays bytes).
    pub proto: ServerProto,
    /// How long the weight ramps up after the server comes up (back to ready, or down to
    /// up); zero = no ramp. The backend's `slowstart` unless the server sets its own.
    pub slowstart: Duration,
    /// Health-check settings, resolved (`enabled = false` when nothing checks it).
    pub check: super::health::ServerCheck,
    /// Connections to this server open with a PROXY protocol header of this version.
    pub send_proxy: Option<crate::proxyproto::Version>,
}

impl Global {
    /// `maxconn`, or when not set, what `fd_limit` descriptors allow: two per proxied
    /// connection, a reserve for listeners and logs.
    pub fn effective_maxconn(&self, fd_limit: u64) -> u32 {
        match self.maxconn {
            0 => (fd_limit.saturating_sub(256) / 2).clamp(64, 100_000) as u32,
            m => m,
        }
    }
}

impl Config {
    pub fn backend(&self, name: &str) -> Option<&Backend> {
        self.backends.iter().find(|b| b.name == name)
    }

    /// One line for `tollgate check` and the startup log.
    /// What `check`, a start and a reload warn about without refusing the file: a
    /// certificate that has expired or is not valid yet (every client would refuse it, but
    /// the operator may be about to swap it in with `ctl set cert`).
    pub fn warnings(&self) -> Vec<String> {
        use super::cert_store::CertSource;
        let now = super::cert_store::unix_now();
        let mut out = Vec::new();
        for f in &self.frontends {
            let Some(tls) = &f.tls else { continue };
            for e in tls.certs.entries() {
                let what = match &e.source {
                    CertSource::File { cert, .. } => format!("{:?}", cert.display().to_string()),
                    other => format!("({})", other.as_str()),
                };
                let names = e.names.join(", ");
                if e.facts.not_after <= now {
                    let days = (now - e.facts.not_after) / 86_400;
                    out.push(format!(
                        "frontend {}: the certificate {what} for {names} expired {days} day(s) ago: clients will refuse it",
                        f.name
                    ));
                } else if e.facts.not_before > now + 60 {
                    out.push(format!(
                        "frontend {}: the certificate {what} for {names} is not valid yet: clients will refuse it",
                        f.name
                    ));
                }
            }
        }
        out
    }

    pub fn summary(&self) -> String {
        let servers: usize = self.backends.iter().map(|b| b.servers.len()).sum();
        format!(
            "{} frontend(s), {} backend(s), {} server(s), {} worker(s), maxconn {}",
            self.frontends.len(),
            self.backends.len(),
            servers,
            self.global.workers,
            match self.global.maxconn {
                0 => "auto (from the descriptor limit)".to_string(),
                m => m.to_string(),
            }
        )
    }
}

/// `[http2]`: HTTP/2 client connections. Every limit is per connection; the flood limits
/// count frames within one `flood_window` (a fixed window restarted when it ends), and a
/// connection past any of them gets GOAWAY `ENHANCE_YOUR_CALM` and is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2 {
    pub max_concurrent_streams: u32,
    pub initial_stream_window: u32,
    pub initial_connection_window: u32,
    pub max_frame_size: u32,
    /// Decoded header list (HPACK expanded), per request.
    pub max_header_list_size: u32,
    /// Encoded header block (HEADERS + CONTINUATION payloads), counted before buffering.
    pub max_header_block_size: u32,
    /// Frames in one header block (HEADERS + CONTINUATION).
    pub max_header_block_frames: u32,
    /// Response bytes a client connection may hold unwritten (no send capacity past it).
    pub max_send_buffer: u32,
    pub flood_window: Duration,
    /// RST_STREAM frames from the client (rapid reset).
    pub max_client_resets: u32,
    /// RST_STREAM frames tollgate sent (streams the client made it reset: MadeYouReset).
    pub max_server_resets: u32,
    pub max_pings: u32,
    pub max_settings: u32,
    /// DATA frames with no payload and no END_STREAM.
    pub max_empty_data: u32,
    pub max_priority: u32,
    pub max_window_updates: u32,
    /// Request heads over `max_header_list_size` (answered 431).
    pub max_oversized_heads: u32,
}

impl Default for Http2 {
    fn default() -> Self {
        Http2 {
            max_concurrent_streams: 100,
            initial_stream_window: 256 * 1024,
            initial_connection_window: 1024 * 1024,
            max_frame_size: 16 * 1024,
            max_header_list_size: 32 * 1024,
            max_header_block_size: 64 * 1024,
            max_header_block_frames: 32,
            max_send_buffer: 256 * 1024,
            flood_window: Duration::from_secs(10),
            max_client_resets: 200,
            max_server_resets: 100,
            max_pings: 100,
            max_settings: 100,
            max_empty_data: 100,
            max_priority: 1000,
            max_window_updates: 10000,
            max_oversized_heads: 20,
        }
    }
}

/// `[http3]`: HTTP/3 connections' limits, with HTTP/2's flood defences' equivalents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http3 {
    /// Request streams a client may have open at once (QUIC bidirectional stream credit).
    pub max_concurrent_streams: u32,
    /// Request body bytes a stream may have in flight (QUIC stream receive window).
    pub stream_window: u32,
    /// The same for all of a connection's streams together.
    pub connection_window: u32,
    /// Decoded request head (QPACK expanded), per request (SETTINGS_MAX_FIELD_SECTION_SIZE).
    pub max_field_section_size: u32,
    /// A connection with no packet for this long is closed (QUIC max_idle_timeout).
    pub idle_timeout: Duration,
    /// Within `http2.flood_window`: request streams the client reset or abandoned before
    /// their response (rapid reset); past it the connection is closed H3_EXCESSIVE_LOAD.
    pub max_client_resets: u32,
    /// New connections per second per worker above which a client must first prove its
    /// address (a Retry round trip); 0 = always.
    pub retry_above: u32,
}

impl Default for Http3 {
    fn default() -> Self {
        Http3 {
            max_concurrent_streams: 100,
            stream_window: 256 * 1024,
            connection_window: 1024 * 1024,
            max_field_section_size: 32 * 1024,
            idle_timeout: Duration::from_secs(30),
            max_client_resets: 200,
            retry_above: 1000,
        }
    }
}

/// The native HTTP/2 codec's limits from `[http2]` (`max_send_buffer` is the caller's).
impl From<&Http2> for h2::Settings {
    fn from(h: &Http2) -> Self {
        h2::Settings {
            max_concurrent_streams: h.max_concurrent_streams,
            initial_stream_window: h.initial_stream_window.min(h2::frame::MAX_WINDOW as u32),
            initial_connection_window: h.initial_connection_window.min(h2::frame::MAX_WINDOW as u32),
            max_frame_size: h
                .max_frame_size
                .clamp(h2::frame::MIN_MAX_FRAME_SIZE, h2::frame::MAX_MAX_FRAME_SIZE),
            max_header_list_size: h.max_header_list_size,
            max_header_block_size: h.max_header_block_size,
            max_header_block_frames: h.max_header_block_frames,
            flood_window: h.flood_window,
            max_client_resets: h.max_client_resets,
            max_server_resets: h.max_server_resets,
            max_pings: h.max_pings,
            max_settings: h.max_settings,
            max_empty_data: h.max_empty_data,
            max_priority: h.max_priority,
            max_window_updates: h.max_window_updates,
            max_oversized_heads: h.max_oversized_heads,
        }
    }
}

impl Default for h2::Settings {
    fn default() -> Self {
        h2::Settings::from(&Http2::default())
    }
}
