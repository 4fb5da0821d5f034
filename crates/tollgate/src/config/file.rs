//! The config file as written: strict serde structs, one per TOML table.
//!
//! Every struct denies unknown fields (a misplaced key silently ignored is how a benchmark
//! measures nothing), and no struct uses `flatten` (it loses error positions). Values that
//! later checks refer to are `Spanned` so validation errors can point at file:line:col.
//! Nothing here has defaults applied: `validate` turns this into the immutable model.

use serde::Deserialize;
use toml::Spanned;

use super::units::{ByteSize, DurationValue};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConfigFile {
    /// `include = ["conf.d/*.toml"]`: read and removed before this struct is filled
    /// (`config::include`); declared so the key is known (and listed among the keys an
    /// unknown one is told about).
    #[expect(dead_code, reason = "`config::include` reads the key before deserializing")]
    pub include: Option<Vec<String>>,
    #[serde(default)]
    pub global: GlobalSection,
    #[serde(default)]
    pub timeouts: TimeoutsSection,
    #[serde(default)]
    pub http: HttpSection,
    #[serde(default)]
    pub watchdog: WatchdogSection,
    #[serde(default)]
    pub log: LogSection,
    #[serde(default)]
    pub admin: AdminSection,
    #[serde(default)]
    pub frontend: Vec<FrontendSection>,
    #[serde(default)]
    pub backend: Vec<BackendSection>,
    /// `[resolvers]`: how server host names and SRV records are resolved.
    pub resolvers: Option<ResolversSection>,
    /// `[http2]`: HTTP/2 on client connections (settings and flood limits).
    #[serde(default)]
    pub http2: Http2Section,
    /// `[http3]`: HTTP/3 connections on frontends with `[frontend.quic]` (`config::quic`).
    #[serde(default)]
    pub http3: super::quic::Http3Section,
    /// `[shared]`: the Redis that limits with `shared = true` are counted in, across instances.
    pub shared: Option<Spanned<SharedSection>>,
}

/// `[shared]`: where and how often shared limits are synchronised (`config::shared`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SharedSection {
    /// `redis://[:password@]host[:port][/db]` or `redis+unix:///path`; required.
    pub redis: Option<Spanned<String>>,
    /// A file holding the password (the URL then has none).
    pub redis_password_file: Option<Spanned<String>>,
    pub sync_interval: Option<Spanned<DurationValue>>,
    /// One sync round's bound (connect included).
    pub timeout: Option<Spanned<DurationValue>>,
    pub fail: Option<Spanned<FailName>>,
    /// The first part of every key tollgate writes.
    pub prefix: Option<Spanned<String>>,
}

/// `shared.fail`: what shared limits do while Redis is unreachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailName {
    /// Go on counting locally.
    #[default]
    Open,
    /// Refuse what a shared limit covers, with its action.
    Closed,
}

/// `[resolvers]`: the DNS client that re-resolves server host names and `discover` records.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolversSection {
    /// `"IP"` or `"IP:port"`; absent = the system's (/etc/resolv.conf).
    pub nameservers: Option<Spanned<Vec<Spanned<String>>>>,
    pub resolve_interval: Option<Spanned<DurationValue>>,
    /// One query attempt's limit.
    pub timeout: Option<Spanned<DurationValue>>,
    pub attempts: Option<Spanned<u32>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GlobalSection {
    pub workers: Option<Spanned<usize>>,
    pub thread_per_core: Option<bool>,
    pub maxconn: Option<Spanned<u32>>,
    pub buffer_size: Option<Spanned<ByteSize>>,
    pub buffer_budget: Option<Spanned<ByteSize>>,
    pub backlog: Option<u32>,
    pub max_accept_rate: Option<u32>,
    /// Run a master process that owns the sockets and supervises worker generations.
    pub master: Option<bool>,
    /// The master's Unix control socket (`tollgate reload` talks to it).
    pub control_socket: Option<Spanned<String>>,
    pub max_pipes: Option<u32>,
    /// Responses one worker compresses at once (`http::compress`); beyond it, sent as they are.
    pub max_compressors: Option<u32>,
    /// Password checks (bcrypt and the like) one worker runs at once (`auth.basic`).
    pub max_auth_checks: Option<Spanned<u32>>,
    pub pipe_size: Option<Spanned<ByteSize>>,
    pub max_handshakes: Option<Spanned<u32>>,
    /// TLS connections one source may have before the end of their handshake.
    pub max_handshakes_per_source: Option<Spanned<u32>>,
    /// Health checks in flight at once, process-wide (see `config::health`).
    pub max_health_checks: Option<Spanned<u32>>,
    /// Worker processes switch to this user (name, or a numeric uid) after receiving the sockets.
    pub user: Option<Spanned<String>>,
    /// ...and this group (default: the user's primary group).
    pub group: Option<Spanned<String>>,
    /// Workers may run as root without a warning.
    pub allow_root: Option<bool>,
    /// Hand a new connection from a crowded worker to the least loaded one.
    pub connection_rebalance: Option<bool>,
    /// Permissions of the control socket file, octal (`"0600"`).
    pub control_socket_mode: Option<Spanned<String>>,
    /// Group the control socket file is given (name or gid).
    pub control_socket_group: Option<Spanned<String>>,
    /// Where ACME keeps the account key and the certificates it obtained.
    pub state_dir: Option<Spanned<String>>,
    /// An idle HTTP/1 client connection moves to the worker's park after this long.
    pub park_idle_after: Option<Spanned<DurationValue>>,
}

/// `[log]`: access logs (docs/logging.md).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LogSection {
    /// `off`, `stdout`, a file path, or `syslog://HOST:PORT` (UDP).
    pub access: Option<Spanned<String>>,
    pub format: Option<Spanned<LogFormatName>>,
    /// JSON: the keys of a line, in order (`config::log_layout`).
    pub fields: Option<Spanned<Vec<Spanned<String>>>>,
    /// Text: the line, with `{field}` placeholders.
    pub template: Option<Spanned<String>>,
    /// Share of normal requests logged (errors and slow ones always are).
    pub sample: Option<Spanned<f64>>,
    /// Requests that took at least this long are always logged.
    pub slow: Option<Spanned<DurationValue>>,
    /// Bytes of a captured header or cookie kept.
    pub capture_limit: Option<Spanned<usize>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogFormatName {
    Json,
    Text,
}

/// `[admin]`: the operator's HTTP endpoint (`GET /metrics`, the stats page).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AdminSection {
    /// `IP:port` the master (or a `--no-master` process) serves `/metrics` on.
    pub bind: Option<Spanned<String>>,
    /// `user:password` for the stats page; with it, the page offers drain/maint/ready.
    pub stats_auth: Option<Spanned<String>>,
    /// A file holding `user:password` (instead of `stats_auth`).
    pub stats_auth_file: Option<Spanned<String>>,
    /// A series per live worker generation (`generation` label) instead of merged ones.
    pub generation_label: Option<bool>,
}

/// `[watchdog]`: per-worker-thread stall detection.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WatchdogSection {
    pub enabled: Option<bool>,
    pub warn_after: Option<Spanned<DurationValue>>,
    pub abort_after: Option<Spanned<DurationValue>>,
    pub no_progress_after: Option<Spanned<DurationValue>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimeoutsSection {
    pub connect: Option<Spanned<DurationValue>>,
    pub client: Option<Spanned<DurationValue>>,
    pub server: Option<Spanned<DurationValue>>,
    pub queue: Option<Spanned<DurationValue>>,
    pub hard_stop_after: Option<Spanned<DurationValue>>,
    pub http_request: Option<Spanned<DurationValue>>,
    pub http_keep_alive: Option<Spanned<DurationValue>>,
    pub pool_idle: Option<Spanned<DurationValue>>,
    pub tls_handshake: Option<Spanned<DurationValue>>,
    /// A terminating frontend's whole ClientHello must arrive within this.
    pub client_hello: Option<Spanned<DurationValue>>,
    pub tls_inspect: Option<Spanned<DurationValue>>,
    /// The whole PROXY protocol header must arrive within this (`accept_proxy`).
    pub proxy_header: Option<Spanned<DurationValue>>,
    /// Idle limit of a tunnel (TCP mode, an upgraded HTTP connection), both ways.
    pub tunnel: Option<Spanned<DurationValue>>,
}

/// `[http]`: limits of HTTP mode, for every http frontend.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpSection {
    pub max_header_size: Option<Spanned<ByteSize>>,
    pub max_request_line: Option<Spanned<ByteSize>>,
    pub max_headers: Option<Spanned<usize>>,
    pub max_body_size: Option<ByteSize>,
    pub pool_max_idle: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardedName {
    XForwardedFor,
    Forwarded,
    None,
}

/// `forward_target`: the request target a server gets (routes always match it normalised).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardTargetName {
    /// The path as routes matched it (`http::normalize`), the query as sent.
    #[default]
    Normalized,
    /// The target as the client sent it.
    Original,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModeName {
    Tcp,
    Http,
}

impl ModeName {
    /// As written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            ModeName::Tcp => "tcp",
            ModeName::Http => "http",
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FrontendSection {
    pub name: Spanned<String>,
    pub bind: Spanned<Vec<Spanned<String>>>,
    pub mode: Option<Spanned<ModeName>>,
    pub maxconn: Option<u32>,
    pub default_backend: Option<Spanned<String>>,
    /// HTTP mode: which forwarding header to add.
    pub forwarded: Option<Spanned<ForwardedName>>,
    /// HTTP mode: forward the normalised target or the one the client sent.
    pub forward_target: Option<Spanned<ForwardTargetName>>,
    /// Ordered rules; the first that matches decides, else `default_backend`.
    #[serde(default)]
    pub route: Vec<RouteSection>,
    /// `[[frontend.matcher]]`: named condition sets the routes refer to.
    #[serde(default)]
    pub matcher: Vec<MatcherSection>,
    /// TCP mode: close connections whose SNI no `sni` route (or certificate) matches.
    pub reject_unknown_sni: Option<Spanned<bool>>,
    /// `[frontend.tls]`: terminate TLS here.
    pub tls: Option<TlsSection>,
    /// `[frontend.splice]`: TCP relays, HTTP tunnels and HTTP Content-Length bodies move
    /// bytes with splice(2) between plain sockets.
    pub splice: Option<Spanned<OffloadSection>>,
    /// HTTP mode without TLS: accept HTTP/2 with prior knowledge (the connection preface).
    pub h2c: Option<Spanned<bool>>,
    /// Accept connections only from these blocks (checked at accept, before any byte).
    pub allow: Option<Spanned<OneOrMore>>,
    /// Close connections from these blocks at accept (wins over `allow`).
    pub deny: Option<Spanned<OneOrMore>>,
    /// Every connection opens with a PROXY protocol header (`config::proxy`)...
    pub accept_proxy: Option<Spanned<super::proxy::AcceptName>>,
    /// ...from a peer in one of these blocks.
    pub trusted_proxies: Option<Spanned<Vec<Spanned<String>>>>,
    /// `[[frontend.limit]]`: rate and concurrency limits per key (`config::limit`).
    #[serde(default)]
    pub limit: Vec<super::limit::LimitSection>,
    /// HTTP mode: an ID per request, to servers, clients and logs (`config::request_id`).
    pub request_id: Option<Spanned<super::request_id::RequestIdSection>>,
    /// HTTP mode: start a W3C trace for requests without one (`config::trace`).
    pub trace: Option<Spanned<super::trace::TraceSection>>,
    /// `[frontend.log]`: this frontend's access log line, if not `[log]`'s.
    pub log: Option<Spanned<super::log_layout::FrontendLogSection>>,
    /// HTTP mode: compress responses (`config::compress`).
    pub compress: Option<Spanned<super::compress::CompressSection>>,
    /// `[frontend.quic]`: HTTP/3 over QUIC on UDP binds (`config::quic`).
    pub quic: Option<Spanned<super::quic::QuicSection>>,
}

/// `[frontend.tls]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TlsSection {
    /// `[[frontend.tls.cert]]`: one certificate chain and its key per entry.
    #[serde(default)]
    pub cert: Vec<CertSection>,
    /// The TLS policy (`config::tls_policy`): "1.2" or "1.3"...
    pub min_version: Option<Spanned<String>>,
    pub max_version: Option<Spanned<String>>,
    /// ...TLS 1.3 suites, TLS 1.2 suites and key-exchange groups, by rustls' names.
    pub ciphersuites: Option<Spanned<Vec<Spanned<String>>>>,
    pub ciphers: Option<Spanned<Vec<Spanned<String>>>>,
    pub curves: Option<Spanned<Vec<Spanned<String>>>>,
    pub alpn: Option<Vec<Spanned<String>>>,
    pub session_tickets: Option<bool>,
    pub session_cache: Option<bool>,
    /// `[frontend.tls.ktls]`.
    pub ktls: Option<Spanned<OffloadSection>>,
    /// Poll every certificate's files and swap in a changed pair (each cert may override).
    pub watch: Option<bool>,
    /// Fetch and refresh OCSP responses from each certificate's responder (each cert may
    /// override).
    pub ocsp_fetch: Option<bool>,
    /// `[[frontend.tls.acme]]`: certificates ordered from an ACME CA (`config::acme`).
    #[serde(default)]
    pub acme: Vec<super::acme::AcmeSection>,
    /// `[frontend.tls.client_auth]`: ask clients for a certificate (`config::client_auth`).
    pub client_auth: Option<Spanned<ClientAuthSection>>,
}

/// `[frontend.tls.client_auth]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClientAuthSection {
    /// PEM bundle of the CAs that may sign client certificates.
    pub ca_file: Spanned<String>,
    pub mode: Option<Spanned<ClientAuthMode>>,
    /// Certificate revocation lists (PEM or DER), one file or a list.
    pub crl_file: Option<Spanned<OneOrMore>>,
    /// HTTP mode: the request fields the client's identity goes to the server in.
    pub headers: Option<Spanned<ClientCertHeadersSection>>,
}

/// `mode` of `[frontend.tls.client_auth]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ClientAuthMode {
    /// No certificate (or one that does not verify): the handshake fails.
    Required,
    /// No certificate is fine; one that does not verify still fails the handshake.
    Optional,
}

/// `headers = { subject = "…", fingerprint = "…", verified = "…" }`: a name per field sent;
/// a field left out is not sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClientCertHeadersSection {
    pub subject: Option<Spanned<String>>,
    pub fingerprint: Option<Spanned<String>>,
    pub verified: Option<Spanned<String>>,
}

/// `client_cert = "verified" | "absent"` on a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ClientCertName {
    Verified,
    Absent,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CertSection {
    /// PEM file: the certificate chain, leaf first.
    pub cert: Spanned<String>,
    /// PEM file: the private key (PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key: Spanned<String>,
    /// Serve this one when no certificate matches the SNI (default: the first listed).
    pub default: Option<bool>,
    /// This certificate's `watch` (default: the frontend's).
    pub watch: Option<bool>,
    /// This certificate's `ocsp_fetch` (default: the frontend's).
    pub ocsp_fetch: Option<bool>,
}

/// `[frontend.splice]` and `[frontend.tls.ktls]`: an offload switched on after a byte count.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OffloadSection {
    pub enabled: Option<bool>,
    pub after_bytes: Option<ByteSize>,
}

/// `[[frontend.route]]`: conditions (all given ones must match) and one action.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RouteSection {
    /// What logs (and metrics) call the route; `route[N]` when unnamed.
    pub name: Option<Spanned<String>>,
    // Conditions (`config::route`): all ANDed; a list of strings is any of them.
    /// HTTP mode: the request's host, exact (`a.example`) or one-label wildcard (`*.example`).
    pub host: Option<Spanned<OneOrMore>>,
    /// HTTP mode: the path (without the query) is exactly this.
    pub path: Option<Spanned<OneOrMore>>,
    /// HTTP mode: the path starts with this.
    pub path_prefix: Option<Spanned<OneOrMore>>,
    /// HTTP mode: the path matches this regular expression (linear-time engine).
    pub path_regex: Option<Spanned<OneOrMore>>,
    pub method: Option<Spanned<OneOrMore>>,
    pub query: Option<Spanned<NameValueSection>>,
    /// HTTP mode: a header field (name case-insensitive) has this value, prefix, regex, or is present.
    pub header: Option<Spanned<HeaderMatchSection>>,
    pub cookie: Option<Spanned<NameValueSection>>,
    /// The client's address is in one of these CIDR blocks.
    pub source: Option<Spanned<OneOrMore>>,
    pub scheme: Option<Spanned<SchemeName>>,
    /// The TLS server name (TCP mode: the ClientHello's; HTTP mode: the handshake's).
    pub sni: Option<Spanned<OneOrMore>>,
    /// HTTP mode: the client presented a verified certificate, or none.
    pub client_cert: Option<Spanned<ClientCertName>>,
    /// `[[frontend.matcher]]` names whose conditions must hold too.
    pub matcher: Option<Spanned<String>>,
    pub matchers: Option<Spanned<Vec<Spanned<String>>>>,
    /// Conditions none of which may hold.
    pub not: Option<Spanned<NotSection>>,
    // Actions (`config::route_action`): exactly one of backend, return, redirect, deny;
    // the rewrites only with `backend`.
    /// Send matching traffic to this backend...
    pub backend: Option<Spanned<String>>,
    /// ...or answer it here (HTTP mode)...
    #[serde(rename = "return")]
    pub return_response: Option<Spanned<ReturnSection>>,
    /// ...or redirect it...
    pub redirect: Option<Spanned<super::route_action::RedirectSection>>,
    /// ...or refuse it (`deny = 403` or `deny = { status = 403 }`).
    pub deny: Option<Spanned<super::route_action::DenySection>>,
    /// On the way to the backend: header edits both ways, the path, the Host.
    pub request_headers: Option<Spanned<super::route_action::HeaderEditsSection>>,
    pub response_headers: Option<Spanned<super::route_action::HeaderEditsSection>>,
    pub rewrite_path: Option<Spanned<super::route_action::RewritePathSection>>,
    pub set_host: Option<Spanned<String>>,
    // --- per-route limits (HTTP mode): override the backend's and the global ones ---
    /// `timeouts = { server = "…", http_request = "…" }` for the requests this route takes.
    pub timeouts: Option<Spanned<TimeoutOverridesSection>>,
    /// Largest request body this route accepts (413 above); 0 = unlimited.
    pub max_body_size: Option<Spanned<ByteSize>>,
    /// Retries of any kind a request of this route may get (0 = sent once, never again).
    pub retries: Option<Spanned<u32>>,
    /// HTTP mode: the `[[frontend.limit]]` names that count this route's requests (a limit
    /// some route names counts only those routes' requests).
    pub limits: Option<Spanned<Vec<Spanned<String>>>>,
    /// HTTP mode: compress this route's responses (replaces the frontend's `compress`).
    pub compress: Option<Spanned<super::compress::CompressSection>>,
    /// HTTP mode: who may use this route (`config::auth`).
    pub auth: Option<Spanned<super::auth::AuthSection>>,
}

/// `timeouts = { … }` on a route or a backend: the global `[timeouts]` it overrides.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TimeoutOverridesSection {
    /// Backends only: a route does not pick how a server is connected to.
    pub connect: Option<Spanned<DurationValue>>,
    pub server: Option<Spanned<DurationValue>>,
    /// HTTP only: the whole request, head and body, must arrive within this.
    pub http_request: Option<Spanned<DurationValue>>,
}

/// `not = { ... }` in a route or a matcher: the route's condition keys, without `not`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NotSection {
    pub host: Option<Spanned<OneOrMore>>,
    pub path: Option<Spanned<OneOrMore>>,
    pub path_prefix: Option<Spanned<OneOrMore>>,
    pub path_regex: Option<Spanned<OneOrMore>>,
    pub method: Option<Spanned<OneOrMore>>,
    pub query: Option<Spanned<NameValueSection>>,
    pub header: Option<Spanned<HeaderMatchSection>>,
    pub cookie: Option<Spanned<NameValueSection>>,
    pub source: Option<Spanned<OneOrMore>>,
    pub scheme: Option<Spanned<SchemeName>>,
    pub sni: Option<Spanned<OneOrMore>>,
    pub client_cert: Option<Spanned<ClientCertName>>,
    pub matcher: Option<Spanned<String>>,
    pub matchers: Option<Spanned<Vec<Spanned<String>>>>,
}

/// `[[frontend.matcher]]`: a named set of conditions routes reuse (HAProxy's named ACL).
/// A matcher cannot use another matcher.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MatcherSection {
    pub name: Spanned<String>,
    pub host: Option<Spanned<OneOrMore>>,
    pub path: Option<Spanned<OneOrMore>>,
    pub path_prefix: Option<Spanned<OneOrMore>>,
    pub path_regex: Option<Spanned<OneOrMore>>,
    pub method: Option<Spanned<OneOrMore>>,
    pub query: Option<Spanned<NameValueSection>>,
    pub header: Option<Spanned<HeaderMatchSection>>,
    pub cookie: Option<Spanned<NameValueSection>>,
    pub source: Option<Spanned<OneOrMore>>,
    pub scheme: Option<Spanned<SchemeName>>,
    pub sni: Option<Spanned<OneOrMore>>,
    pub client_cert: Option<Spanned<ClientCertName>>,
    pub not: Option<Spanned<NotSection>>,
}

/// A string or a list of strings (`host = "a"` or `host = ["a", "b"]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OneOrMore(pub Vec<String>);

impl<'de> Deserialize<'de> for OneOrMore {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = OneOrMore;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<OneOrMore, E> {
                Ok(OneOrMore(vec![v.to_string()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<OneOrMore, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    out.push(s);
                }
                Ok(OneOrMore(out))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// `scheme = "http" | "https"`: how the client reached the frontend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SchemeName {
    Http,
    Https,
}

/// `header = { name = "x-beta", value = "1" }`: at most one of `value` (exact), `prefix`
/// and `regex`; none of them = the header is present.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeaderMatchSection {
    pub name: Spanned<String>,
    pub value: Option<Spanned<String>>,
    pub prefix: Option<Spanned<String>>,
    pub regex: Option<Spanned<String>>,
}

/// `query` and `cookie`: `{ name = "v", value = "2" }`, or just the name for presence.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NameValueSection {
    pub name: Spanned<String>,
    pub value: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReturnSection {
    pub status: u16,
    pub body: Option<Spanned<String>>,
    /// The body read from this file at load (relative to the config file's directory).
    pub body_file: Option<Spanned<String>>,
    pub content_type: Option<Spanned<String>>,
    /// Fields added to the response: name = value (no variables).
    pub headers: Option<super::route_action::FieldsSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BackendSection {
    pub name: Spanned<String>,
    pub mode: Option<Spanned<ModeName>>,
    pub balance: Option<Spanned<String>>,
    /// `balance = "hash"` only: "source", "uri", "header:NAME" or "cookie:NAME".
    pub hash_key: Option<Spanned<String>>,
    /// `balance = "hash"` only: percent of the average load (100..=1000, 0 = unbounded).
    pub hash_balance_factor: Option<Spanned<u32>>,
    pub retries: Option<u32>,
    /// Ramp a server's weight up over this long after it comes up (default for its servers).
    pub slowstart: Option<Spanned<DurationValue>>,
    /// `[backend.health]`: active checks (see `config::health`).
    pub health: Option<super::health::HealthSection>,
    /// Passive health: consecutive errors on live traffic that mark a server down.
    pub error_limit: Option<Spanned<u32>>,
    /// Requests that may wait for a server slot, process-wide (0 = no limit).
    pub maxqueue: Option<u32>,
    /// A queued request whose server leaves may go to another one.
    pub redispatch: Option<bool>,
    #[serde(default)]
    pub server: Vec<ServerSection>,
    /// `[backend.sticky]`: cookie persistence (HTTP backends).
    pub sticky: Option<Spanned<StickySection>>,
    /// `[[backend.discover]]`: servers from DNS SRV records.
    #[serde(default)]
    pub discover: Vec<DiscoverSection>,
    /// The protocol spoken to its servers unless a server says otherwise ("h1", "h2").
    pub proto: Option<Spanned<ProtoName>>,
    /// `timeouts = { connect, server, http_request }`: the global `[timeouts]` overridden
    /// for this backend's traffic.
    pub timeouts: Option<Spanned<TimeoutOverridesSection>>,
}

/// `[backend.sticky]`: the proxy inserts a cookie naming the server that answered, and
/// sends later requests carrying it to that server.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StickySection {
    pub cookie: Spanned<String>,
    pub path: Option<Spanned<String>>,
    pub domain: Option<Spanned<String>>,
    pub httponly: Option<bool>,
    pub secure: Option<bool>,
    pub nocache: Option<bool>,
}

/// `[[backend.discover]]`: one SRV name whose records become servers of the backend.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DiscoverSection {
    pub srv: Spanned<String>,
    /// Every discovered server's `maxconn`.
    pub maxconn: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerSection {
    pub name: Spanned<String>,
    pub address: Spanned<String>,
    pub weight: Option<Spanned<u32>>,
    pub maxconn: Option<u32>,
    pub backup: Option<bool>,
    /// Speak TLS to this server.
    pub tls: Option<Spanned<bool>>,
    /// PEM bundle of the CAs that may sign the server's certificate.
    pub ca_file: Option<Spanned<String>>,
    /// `false` = accept any certificate (explicit opt-out).
    pub verify: Option<Spanned<bool>>,
    /// Server name sent in the ClientHello and verified (default: the address's host name).
    pub sni: Option<Spanned<String>>,
    /// The TLS policy towards this server, as on `[frontend.tls]`.
    pub min_version: Option<Spanned<String>>,
    pub max_version: Option<Spanned<String>>,
    pub ciphersuites: Option<Spanned<Vec<Spanned<String>>>>,
    pub ciphers: Option<Spanned<Vec<Spanned<String>>>>,
    pub curves: Option<Spanned<Vec<Spanned<String>>>>,
    /// Overrides the backend's `slowstart` for this server.
    pub slowstart: Option<Spanned<DurationValue>>,
    /// Health checks: `false` = never checked (default: checked when the backend has
    /// `[backend.health]`), on `check_port` instead of the server's port, agent on `agent_port`.
    pub check: Option<Spanned<bool>>,
    pub check_port: Option<Spanned<u16>>,
    pub agent_port: Option<Spanned<u16>>,
    /// PEM files: the client certificate chain and key presented to a server that asks.
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
    /// The protocol spoken to this server ("h1", "h2"; default: the backend's `proto`).
    pub proto: Option<Spanned<ProtoName>>,
    /// Open every connection to this server with a PROXY protocol header.
    pub send_proxy: Option<Spanned<super::proxy::VersionName>>,
    /// Health checks open with one too.
    pub check_send_proxy: Option<Spanned<bool>>,
}

/// `proto` on a backend or a server: HTTP/1.1 or HTTP/2 to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ProtoName {
    H1,
    H2,
}

/// `[http2]`: HTTP/2 client connections (issue 13). Sizes are bytes; flood limits are
/// frames per `flood_window` on one connection.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Http2Section {
    pub max_concurrent_streams: Option<Spanned<u32>>,
    pub initial_stream_window: Option<Spanned<ByteSize>>,
    pub initial_connection_window: Option<Spanned<ByteSize>>,
    pub max_frame_size: Option<Spanned<ByteSize>>,
    pub max_header_list_size: Option<Spanned<ByteSize>>,
    pub max_header_block_size: Option<Spanned<ByteSize>>,
    pub max_header_block_frames: Option<Spanned<u32>>,
    pub max_send_buffer: Option<Spanned<ByteSize>>,
    pub flood_window: Option<Spanned<DurationValue>>,
    pub max_client_resets: Option<Spanned<u32>>,
    pub max_server_resets: Option<Spanned<u32>>,
    pub max_pings: Option<Spanned<u32>>,
    pub max_settings: Option<Spanned<u32>>,
    pub max_empty_data: Option<Spanned<u32>>,
    pub max_priority: Option<Spanned<u32>>,
    pub max_window_updates: Option<Spanned<u32>>,
    pub max_oversized_heads: Option<Spanned<u32>>,
}
