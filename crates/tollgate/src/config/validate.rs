//! Turns the file as written into the model: defaults applied, names resolved to indexes,
//! addresses parsed (host names are not resolved here: `discover` does it at run time), and every inconsistency reported with the position of the value at fault.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use toml::Spanned;

use super::cert_store::{CertSource, CertStore};
use super::file::{
    BackendSection, ConfigFile, FrontendSection, ModeName, OffloadSection, ProtoName, RouteSection, ServerSection,
    TlsSection,
};
use super::model::*;
use super::sni::SniMatcher;
use super::sources::SourceMap;
use super::tls as certs;
use super::tls_policy::PolicyKeys;
use super::units::ByteSize;

/// See `Validator::frontend_acme`.
#[derive(Default)]
struct FrontendAcme {
    stored: Vec<certs::LoadedCert>,
    challenge: Option<super::acme::AlpnChallenge>,
    self_signed: Option<certs::LoadedCert>,
}

/// `global.workers` at most: a thread each. A fixed bound (not a multiple of the CPUs) so
/// `check` judges a file the same on every machine; more than any machine's cores.
const MAX_WORKERS: usize = 1024;

/// `http2.max_concurrent_streams` at most: a connection's stream table is scanned per
/// frame (`http::h2::stream`); browsers open at most 100, HAProxy and nginx default to
/// 100 and 128.
const MAX_CONCURRENT_STREAMS: u32 = 1024;

/// ALPN protocols an http-mode frontend may offer: HTTP/2 (`proxy::h2front`) and HTTP/1.
const HTTP_ALPN: [&str; 3] = ["h2", "http/1.1", "http/1.0"];

pub(super) struct Validator<'a> {
    pub errors: Vec<(Range<usize>, String, String)>,
    /// Relative certificate paths are taken from here (the config file's directory).
    pub base_dir: Option<PathBuf>,
    /// `[[frontend.tls.acme]]` blocks validated so far, and the challenge book their
    /// frontends' tls-alpn-01 configs read.
    acme_found: Vec<super::acme::AcmeOrder>,
    acme_book: std::sync::Arc<super::acme::ChallengeBook>,
    /// `global.state_dir`, absolute (stored ACME certificates are loaded from it).
    state_dir: Option<PathBuf>,
    /// The files spans are in: a message about two places names the other one.
    sources: &'a SourceMap,
}

impl<'a> Validator<'a> {
    pub(super) fn new(sources: &'a SourceMap) -> Self {
        Validator {
            errors: Vec::new(),
            base_dir: None,
            acme_found: Vec::new(),
            acme_book: Default::default(),
            state_dir: None,
            sources,
        }
    }

    /// A size given in the file, if any and within `min..=max` (refused with its position
    /// otherwise, and then `None` so the caller uses its default).
    fn byte_size(
        &mut self,
        value: &Option<Spanned<ByteSize>>,
        key: &str,
        (min, min_text): (u64, &str),
        (max, max_text): (u64, &str),
    ) -> Option<usize> {
        let v = value.as_ref()?;
        let size = v.get_ref().0;
        if (min..=max).contains(&size) {
            return usize::try_from(size).ok();
        }
        self.err(
            v.span(),
            key.into(),
            format!("must be between {min_text} and {max_text}"),
        );
        None
    }

    pub(super) fn err(&mut self, span: Range<usize>, key: String, msg: String) {
        self.errors.push((span, key, msg));
    }

    pub(super) fn build(&mut self, file: ConfigFile) -> Option<Config> {
        let global = self.global(&file);
        let timeouts = self.timeouts(&file);
        let http = self.http(&file, global.buffer_size);
        let watchdog = self.watchdog(&file);
        let log = self.log(&file);
        let admin = self.admin(&file);
        let backends = self.backends(&file);
        let resolvers = self.resolvers(&file);
        self.state_dir = file.global.state_dir.as_ref().map(|d| self.path(d.get_ref()));
        let frontends = self.frontends(&file, &backends, &log);
        let http2 = self.http2(&file);
        let http3 = super::quic::http3(&file.http3, &mut self.errors);
        super::quic::workers_fit(&file, &mut self.errors);
        let acme = super::acme::Acme {
            state_dir: self.acme_whole(&file, &frontends),
            orders: std::mem::take(&mut self.acme_found),
            book: std::sync::Arc::clone(&self.acme_book),
            stats: Default::default(),
        };
        let sharing = super::shared::sharing(&file, self.base_dir.as_deref(), &mut self.errors);
        if file.frontend.is_empty() {
            self.err(
                0..0,
                "frontend".into(),
                "no [[frontend]]: the config serves nothing (see docs/config.md)".into(),
            );
        }
        if !self.errors.is_empty() {
            return None;
        }
        Some(Config {
            source: None,
            files: Vec::new(),
            global,
            timeouts,
            http,
            watchdog,
            log,
            admin,
            frontends,
            backends,
            resolvers,
            http2,
            http3,
            acme,
            sharing,
        })
    }

    /// `[admin]`: an `IP:port` (port 0 = any free port, logged at start; for tests) and
    /// the stats page's credentials, which need the endpoint.
    fn admin(&mut self, file: &ConfigFile) -> Admin {
        let bind = file
            .admin
            .bind
            .as_ref()
            .and_then(|bind| match bind.get_ref().parse::<SocketAddr>() {
                Ok(addr) => Some(addr),
                Err(_) => {
                    self.err(
                        bind.span(),
                        "admin.bind".into(),
                        format!(
                            "`{}` is not an IP:port address (e.g. \"127.0.0.1:9100\")",
                            bind.get_ref()
                        ),
                    );
                    None
                }
            });
        let written = match (&file.admin.stats_auth, &file.admin.stats_auth_file) {
            (Some(_), Some(path)) => {
                self.err(
                    path.span(),
                    "admin.stats_auth_file".into(),
                    "`stats_auth_file` and `stats_auth` are two ways of giving the same credentials: keep one".into(),
                );
                None
            }
            (Some(auth), None) => Some((auth.get_ref().clone(), auth.span(), "admin.stats_auth")),
            (None, Some(path)) => match super::bounded::read_secret(&self.path(path.get_ref())) {
                // The position and key are the file key's: the message never quotes a secret.
                Ok(text) => Some((text, path.span(), "admin.stats_auth_file")),
                Err(msg) => {
                    self.err(path.span(), "admin.stats_auth_file".into(), msg);
                    None
                }
            },
            (None, None) => None,
        };
        let stats_auth = written.and_then(|(text, span, key)| {
            let parsed = stats_auth(&text);
            let parsed = match (parsed, &file.admin.bind) {
                (Ok(_), None) => Err("needs admin.bind (the endpoint that serves the stats page)".to_string()),
                (other, _) => other,
            };
            parsed.map_err(|msg| self.err(span, key.into(), msg)).ok()
        });
        Admin {
            bind,
            stats_auth,
            generation_label: file.admin.generation_label.unwrap_or(false),
        }
    }

    fn global(&mut self, file: &ConfigFile) -> Global {
        let g = &file.global;
        let workers = match &g.workers {
            Some(w) if *w.get_ref() == 0 => {
                self.err(w.span(), "global.workers".into(), "must be at least 1".into());
                1
            }
            Some(w) if *w.get_ref() > MAX_WORKERS => {
                self.err(
                    w.span(),
                    "global.workers".into(),
                    format!("must be at most {MAX_WORKERS} (one thread each; no machine gains from more)"),
                );
                1
            }
            Some(w) => *w.get_ref(),
            // One per CPU; with HTTP/3 at most as many as a QUIC connection ID can name.
            None => {
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
                if file.frontend.iter().any(|f| f.quic.is_some()) {
                    cpus.min(super::quic::MAX_QUIC_WORKERS)
                } else {
                    cpus
                }
            }
        };
        let maxconn = match &g.maxconn {
            Some(m) if *m.get_ref() == 0 => {
                self.err(m.span(), "global.maxconn".into(), "must be at least 1".into());
                1
            }
            Some(m) => *m.get_ref(),
            // Resolved by the runtime from the process's descriptor limit.
            None => 0,
        };
        let buffer_size = self
            .byte_size(
                &g.buffer_size,
                "global.buffer_size",
                (1 << 10, "1KiB"),
                (16 << 20, "16MiB"),
            )
            .unwrap_or(DEFAULT_BUFFER_SIZE);
        let buffer_budget = g
            .buffer_budget
            .as_ref()
            .map_or(DEFAULT_BUFFER_BUDGET, |b| b.get_ref().0);
        // Each worker needs at least two buffers (one per direction) or a relay can never move.
        let floor = (buffer_size as u64) * 2 * workers as u64;
        if let Some(b) = &g.buffer_budget
            && buffer_budget < floor
        {
            self.err(
                b.span(),
                "global.buffer_budget".into(),
                format!("must hold at least 2 buffers per worker ({floor} bytes)"),
            );
        }
        let pipe_size = self
            .byte_size(&g.pipe_size, "global.pipe_size", (4 << 10, "4KiB"), (1 << 20, "1MiB"))
            .unwrap_or(DEFAULT_PIPE_SIZE);
        let run_as = super::users::run_as(g).unwrap_or_else(|(span, key, msg)| {
            self.err(span, key.into(), msg);
            None
        });
        let control_access = self.control_access(g, run_as.as_ref());
        Global {
            workers,
            thread_per_core: g.thread_per_core.unwrap_or(true),
            maxconn,
            buffer_size,
            buffer_budget: buffer_budget.max(floor),
            backlog: g.backlog.unwrap_or(DEFAULT_BACKLOG),
            max_accept_rate: g.max_accept_rate.unwrap_or(0),
            master: g.master.unwrap_or(true),
            control_socket: self.control_socket(g.control_socket.as_ref()),
            max_pipes: g.max_pipes.unwrap_or(DEFAULT_MAX_PIPES),
            max_compressors: g.max_compressors.unwrap_or(DEFAULT_MAX_COMPRESSORS),
            max_auth_checks: match &g.max_auth_checks {
                Some(m) if *m.get_ref() == 0 => {
                    self.err(m.span(), "global.max_auth_checks".into(), "must be at least 1".into());
                    1
                }
                Some(m) => *m.get_ref(),
                None => DEFAULT_MAX_AUTH_CHECKS,
            },
            pipe_size,
            max_handshakes: match &g.max_handshakes {
                Some(m) if *m.get_ref() == 0 => {
                    self.err(m.span(), "global.max_handshakes".into(), "must be at least 1".into());
                    1
                }
                Some(m) => *m.get_ref(),
                None => DEFAULT_MAX_HANDSHAKES,
            },
            max_handshakes_per_source: match &g.max_handshakes_per_source {
                Some(m) if *m.get_ref() == 0 => {
                    let key = "global.max_handshakes_per_source".into();
                    self.err(m.span(), key, "must be at least 1".into());
                    1
                }
                Some(m) => *m.get_ref(),
                None => DEFAULT_MAX_HANDSHAKES_PER_SOURCE,
            },
            max_health_checks: super::health::max_health_checks(g.max_health_checks.as_ref(), &mut self.errors),
            control_access,
            run_as,
            allow_root: g.allow_root.unwrap_or(false),
            connection_rebalance: g.connection_rebalance.unwrap_or(true),
            park_idle_after: g
                .park_idle_after
                .as_ref()
                .map_or(super::model::DEFAULT_PARK_IDLE_AFTER, |d| d.get_ref().0),
        }
    }

    /// `control_socket_mode` (octal, the owner's read and write always in it) and
    /// `control_socket_group`. Refused when the workers (`user`, `group`) could open the
    /// socket: they parse what clients send, and the master they would command is root.
    fn control_access(
        &mut self,
        g: &super::file::GlobalSection,
        workers: Option<&super::model::RunAs>,
    ) -> super::model::SocketAccess {
        let mut access = super::model::SocketAccess::default();
        if let Some(mode) = &g.control_socket_mode {
            let text = mode.get_ref();
            match u32::from_str_radix(text.trim_start_matches("0o"), 8) {
                Ok(bits) if bits <= 0o777 && bits & 0o600 == 0o600 => access.mode = bits,
                _ => self.err(
                    mode.span(),
                    "global.control_socket_mode".into(),
                    format!(
                        "`{text}` is not an octal mode from 600 to 777 that lets the owner read and write (e.g. \"0660\")"
                    ),
                ),
            }
        }
        if let Some(group) = &g.control_socket_group {
            match super::users::group_id(group, "global.control_socket_group") {
                Ok(gid) => access.gid = Some(gid),
                Err((span, key, msg)) => self.err(span, key.into(), msg),
            }
        }
        if let (Some(workers), Some(mode)) = (workers, &g.control_socket_mode) {
            let by_group = access.mode & 0o020 != 0 && access.gid == Some(workers.gid);
            let by_others = access.mode & 0o002 != 0;
            if by_group || by_others {
                let how = if by_group {
                    "its group is the one the workers run in"
                } else {
                    "it lets every user write to it"
                };
                self.err(
                    mode.span(),
                    "global.control_socket_mode".into(),
                    format!(
                        "the workers (user `{}`) could command the master through the control socket: {how}; \
                         give the socket an operators' group instead (\"0660\" with control_socket_group)",
                        workers.user
                    ),
                );
            }
        }
        access
    }

    fn control_socket(&mut self, path: Option<&Spanned<String>>) -> std::path::PathBuf {
        let Some(path) = path else {
            return DEFAULT_CONTROL_SOCKET.into();
        };
        // Relative to the config file, like certificate paths: the master may be started
        // from any directory, and `tollgate reload --config` resolves it the same way.
        let resolved = self.path(path.get_ref());
        // sun_path holds 108 bytes including the terminating NUL.
        let len = resolved.as_os_str().len();
        if path.get_ref().is_empty() || len > 107 {
            self.err(
                path.span(),
                "global.control_socket".into(),
                format!("must be a path of 1 to 107 bytes (`{}` is {len})", resolved.display()),
            );
        }
        resolved
    }

    /// `[log]`: `access` is `off`, `stdout`, `syslog://HOST:PORT` or a file path (relative
    /// to the config file's directory).
    fn log(&mut self, file: &ConfigFile) -> Log {
        use super::file::LogFormatName;
        let l = &file.log;
        let format = match l.format.as_ref().map(|f| *f.get_ref()) {
            Some(LogFormatName::Text) => LogFormat::Text,
            Some(LogFormatName::Json) | None => LogFormat::Json,
        };
        let capture_limit = match &l.capture_limit {
            None => super::log_layout::DEFAULT_CAPTURE_LIMIT,
            Some(v) if (1..=super::log_layout::MAX_CAPTURE_LIMIT).contains(v.get_ref()) => *v.get_ref(),
            Some(v) => {
                self.err(
                    v.span(),
                    "log.capture_limit".into(),
                    format!("must be from 1 to {} bytes", super::log_layout::MAX_CAPTURE_LIMIT),
                );
                super::log_layout::DEFAULT_CAPTURE_LIMIT
            }
        };
        let keys = super::log_layout::LayoutKeys {
            fields: l.fields.as_ref(),
            template: l.template.as_ref(),
            sample: l.sample.as_ref(),
            slow: l.slow.as_ref(),
        };
        let plan = super::log_layout::plan(&keys, format, capture_limit, &mut self.errors);
        let Some(access) = &l.access else {
            return Log {
                format,
                plan,
                ..Log::default()
            };
        };
        let text = access.get_ref().trim();
        let sink = if text.is_empty() {
            self.err(
                access.span(),
                "log.access".into(),
                "must not be empty (use \"off\")".into(),
            );
            LogSink::Off
        } else if text == "off" {
            LogSink::Off
        } else if text == "stdout" {
            LogSink::Stdout
        } else if let Some(addr) = text.strip_prefix("syslog://") {
            match std::net::ToSocketAddrs::to_socket_addrs(addr)
                .ok()
                .and_then(|mut a| a.next())
            {
                Some(a) => LogSink::Syslog(a),
                None => {
                    self.err(
                        access.span(),
                        "log.access".into(),
                        format!("`{addr}` is not a HOST:PORT that resolves (syslog over UDP)"),
                    );
                    LogSink::Off
                }
            }
        } else {
            let path = Path::new(text);
            LogSink::File(match &self.base_dir {
                Some(dir) if path.is_relative() => dir.join(path),
                _ => path.to_path_buf(),
            })
        };
        Log {
            access: sink,
            format,
            plan,
        }
    }

    fn watchdog(&mut self, file: &ConfigFile) -> Watchdog {
        let w = &file.watchdog;
        let mut out = Watchdog {
            enabled: w.enabled.unwrap_or(true),
            ..Watchdog::default()
        };
        let fields = [
            ("warn_after", &w.warn_after, &mut out.warn_after),
            ("abort_after", &w.abort_after, &mut out.abort_after),
            ("no_progress_after", &w.no_progress_after, &mut out.no_progress_after),
        ];
        for (key, value, slot) in fields {
            if let Some(v) = value {
                if v.get_ref().0 < std::time::Duration::from_millis(10) {
                    self.err(v.span(), format!("watchdog.{key}"), "must be at least 10ms".into());
                } else {
                    *slot = v.get_ref().0;
                }
            }
        }
        if out.abort_after <= out.warn_after {
            let span = w
                .abort_after
                .as_ref()
                .or(w.warn_after.as_ref())
                .map_or(0..0, |v| v.span());
            self.err(
                span,
                "watchdog.abort_after".into(),
                format!("must be greater than warn_after ({:?})", out.warn_after),
            );
        }
        out
    }

    fn timeouts(&mut self, file: &ConfigFile) -> Timeouts {
        let t = &file.timeouts;
        let mut out = Timeouts::default();
        let fields = [
            ("connect", &t.connect, &mut out.connect),
            ("client", &t.client, &mut out.client),
            ("server", &t.server, &mut out.server),
            ("queue", &t.queue, &mut out.queue),
            ("hard_stop_after", &t.hard_stop_after, &mut out.hard_stop_after),
            ("http_request", &t.http_request, &mut out.http_request),
            ("http_keep_alive", &t.http_keep_alive, &mut out.http_keep_alive),
            ("pool_idle", &t.pool_idle, &mut out.pool_idle),
            ("tls_handshake", &t.tls_handshake, &mut out.tls_handshake),
            ("client_hello", &t.client_hello, &mut out.client_hello),
            ("tls_inspect", &t.tls_inspect, &mut out.tls_inspect),
            ("proxy_header", &t.proxy_header, &mut out.proxy_header),
        ];
        for (key, value, slot) in fields {
            if let Some(v) = value {
                if v.get_ref().0.is_zero() {
                    self.err(v.span(), format!("timeouts.{key}"), "must be greater than 0".into());
                } else {
                    *slot = v.get_ref().0;
                }
            }
        }
        if let Some(v) = &t.tunnel {
            if v.get_ref().0.is_zero() {
                self.err(v.span(), "timeouts.tunnel".into(), "must be greater than 0".into());
            } else {
                out.tunnel = Some(v.get_ref().0);
            }
        }
        out
    }

    fn http(&mut self, file: &ConfigFile, buffer_size: usize) -> Http {
        let h = &file.http;
        let mut out = Http {
            max_header_size: DEFAULT_MAX_HEADER_SIZE.min(buffer_size),
            ..Http::default()
        };
        let sized = [
            (
                "max_header_size",
                &h.max_header_size,
                &mut out.max_header_size,
                1024u64..=1 << 20,
            ),
            (
                "max_request_line",
                &h.max_request_line,
                &mut out.max_request_line,
                64..=1 << 20,
            ),
        ];
        for (key, value, slot, range) in sized {
            if let Some(v) = value {
                if range.contains(&v.get_ref().0) {
                    *slot = v.get_ref().0 as usize;
                } else {
                    self.err(
                        v.span(),
                        format!("http.{key}"),
                        format!("must be within {range:?} bytes"),
                    );
                }
            }
        }
        // A head is read into one buffer: a larger limit could never be reached.
        if let Some(v) = &h.max_header_size
            && v.get_ref().0 > buffer_size as u64
        {
            self.err(
                v.span(),
                "http.max_header_size".into(),
                format!(
                    "must not exceed global.buffer_size ({buffer_size} bytes): a request head is read into one buffer"
                ),
            );
        }
        if let Some(n) = &h.max_headers {
            if (1..=crate::http::h1::HEADER_CAP).contains(n.get_ref()) {
                out.max_headers = *n.get_ref();
            } else {
                self.err(
                    n.span(),
                    "http.max_headers".into(),
                    format!("must be 1..={}", crate::http::h1::HEADER_CAP),
                );
            }
        }
        out.max_body_size = h.max_body_size.map_or(0, |s| s.0);
        out.pool_max_idle = h.pool_max_idle.unwrap_or(out.pool_max_idle);
        out
    }

    /// `name` is a valid name not in `seen` (names seen so far, where). A duplicate from
    /// another file (an included one) names the file and place of the first.
    fn unique_name(&mut self, seen: &mut HashMap<String, Range<usize>>, name: &Spanned<String>, key: String) {
        let n = name.get_ref();
        if n.is_empty() || !n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            self.err(
                name.span(),
                key,
                format!("name `{n}` must be non-empty and use only letters, digits, `-`, `_`, `.`"),
            );
        } else if let Some(first) = seen.get(n) {
            let message = if self.sources.file_of(first.start) == self.sources.file_of(name.span().start) {
                format!("duplicate name `{n}`")
            } else {
                format!(
                    "duplicate name `{n}`: also defined at {}",
                    self.sources.position(first.start)
                )
            };
            self.err(name.span(), key, message);
        } else {
            seen.insert(n.clone(), name.span());
        }
    }

    fn backends(&mut self, file: &ConfigFile) -> Vec<Backend> {
        let mut seen = HashMap::new();
        let mut out = Vec::new();
        for (i, b) in file.backend.iter().enumerate() {
            let key = format!("backend[{i}]");
            self.unique_name(&mut seen, &b.name, format!("{key}.name"));
            let balance = match &b.balance {
                Some(name) if !super::BALANCE_ALGORITHMS.contains(&name.get_ref().as_str()) => {
                    self.err(
                        name.span(),
                        format!("{key}.balance"),
                        format!(
                            "unknown algorithm `{}` (known: {})",
                            name.get_ref(),
                            super::BALANCE_ALGORITHMS.join(", ")
                        ),
                    );
                    String::new()
                }
                Some(name) => name.get_ref().clone(),
                None => super::DEFAULT_BALANCE.to_string(),
            };
            let mode = b.mode.as_ref().map_or(ModeName::Tcp, |m| *m.get_ref());
            let (hash_key, hash_balance_factor) = self.hash_options(b, &key, &balance, mode);
            let backend_slowstart = self.slowstart(&b.slowstart, &key);
            let backend_proto = self.proto(b.proto.as_ref(), &format!("{key}.proto"), mode);
            let mut server_names = HashMap::new();
            let mut servers = Vec::new();
            for (j, s) in b.server.iter().enumerate() {
                let skey = format!("{key}.server[{j}]");
                self.unique_name(&mut server_names, &s.name, format!("{skey}.name"));
                let (address, host) = match parse_address(s.address.get_ref()) {
                    Ok(a) => a,
                    Err(msg) => {
                        self.err(s.address.span(), format!("{skey}.address"), msg);
                        continue;
                    }
                };
                let weight = match &s.weight {
                    // 0..=256 as at run time (`ctl set server … weight 0`): 0 takes no new
                    // connections (HAProxy's `weight 0`).
                    Some(w) if !(0..=256).contains(w.get_ref()) => {
                        self.err(w.span(), format!("{skey}.weight"), "must be between 0 and 256".into());
                        1
                    }
                    Some(w) => *w.get_ref(),
                    None => 1,
                };
                let proto = match &s.proto {
                    Some(p) => self.proto(Some(p), &format!("{skey}.proto"), mode),
                    None => backend_proto,
                };
                let tls = self.server_tls(s, &skey, mode, proto);
                let slowstart = self
                    .slowstart(&s.slowstart, &skey)
                    .unwrap_or_else(|| backend_slowstart.unwrap_or_default());
                servers.push(Server {
                    id: Default::default(),
                    name: s.name.get_ref().clone(),
                    address,
                    host,
                    weight,
                    maxconn: s.maxconn.unwrap_or(0),
                    backup: s.backup.unwrap_or(false),
                    tls,
                    proto,
                    slowstart,
                    check: Default::default(),
                    send_proxy: super::proxy::send_proxy(s, &skey, proto, &mut self.errors),
                });
            }
            let health = super::health::backend_health(b, &key, mode, &mut servers, &mut self.errors);
            out.push(Backend {
                id: Default::default(),
                name: b.name.get_ref().clone(),
                mode,
                balance,
                hash_key,
                hash_balance_factor,
                retries: b.retries.unwrap_or(DEFAULT_RETRIES),
                slowstart: backend_slowstart.unwrap_or_default(),
                health,
                queue: queue_options(b),
                any_h2: servers.iter().any(|s| s.proto == ServerProto::H2),
                proto: backend_proto,
                servers,
                sticky: self.sticky(b, &key, mode),
                discover: self.discover(b, &key),
                overrides: super::limits::backend(b, &key, mode, &mut self.errors),
            });
        }
        out
    }

    /// A `slowstart` duration (backend or server): 0 switches it off; otherwise at least
    /// 100ms (the ramp's tick) and at most a day (a typo's order of magnitude).
    fn slowstart(
        &mut self,
        value: &Option<Spanned<super::units::DurationValue>>,
        key: &str,
    ) -> Option<std::time::Duration> {
        let v = value.as_ref()?;
        let d = v.get_ref().0;
        let ok = d.is_zero()
            || (std::time::Duration::from_millis(100)..=std::time::Duration::from_secs(86_400)).contains(&d);
        if !ok {
            self.err(
                v.span(),
                format!("{key}.slowstart"),
                "must be 0 (off) or between 100ms and 24h".into(),
            );
            return None;
        }
        Some(d)
    }

    /// `hash_key` and `hash_balance_factor`: only with `balance = "hash"` (elsewhere they
    /// would silently do nothing); request keys only on HTTP backends.
    fn hash_options(
        &mut self,
        b: &super::file::BackendSection,
        key: &str,
        balance: &str,
        mode: ModeName,
    ) -> (Option<HashKey>, u32) {
        let factor = super::DEFAULT_HASH_BALANCE_FACTOR;
        if balance != "hash" {
            for (span, name) in [
                (b.hash_key.as_ref().map(Spanned::span), "hash_key"),
                (b.hash_balance_factor.as_ref().map(Spanned::span), "hash_balance_factor"),
            ] {
                if let Some(span) = span {
                    self.err(
                        span,
                        format!("{key}.{name}"),
                        "only applies with balance = \"hash\"".into(),
                    );
                }
            }
            return (None, factor);
        }
        let factor = match &b.hash_balance_factor {
            Some(f) if *f.get_ref() != 0 && !(100..=1000).contains(f.get_ref()) => {
                self.err(
                    f.span(),
                    format!("{key}.hash_balance_factor"),
                    "must be 100..=1000 (percent of the average load), or 0 for no bound".into(),
                );
                factor
            }
            Some(f) => *f.get_ref(),
            None => factor,
        };
        let Some(spec) = &b.hash_key else {
            return (Some(HashKey::Source), factor);
        };
        let text = spec.get_ref().as_str();
        let parsed = match text.split_once(':') {
            None if text == "source" => Ok(HashKey::Source),
            None if text == "uri" => Ok(HashKey::Uri),
            Some(("header", name)) if crate::http::h1::headers::is_token(name.as_bytes()) => {
                Ok(HashKey::Header(name.into()))
            }
            Some(("cookie", name)) if crate::http::h1::headers::is_token(name.as_bytes()) => {
                Ok(HashKey::Cookie(name.into()))
            }
            _ => Err(format!(
                "`{text}` is not a hash key: \"source\", \"uri\", \"header:NAME\" or \"cookie:NAME\" (NAME a token)"
            )),
        };
        match parsed {
            Ok(HashKey::Source) => (Some(HashKey::Source), factor),
            Ok(_) if mode != ModeName::Http => {
                self.err(
                    spec.span(),
                    format!("{key}.hash_key"),
                    format!("`{text}` needs an HTTP backend (mode = \"http\"); TCP backends hash \"source\""),
                );
                (Some(HashKey::Source), factor)
            }
            Ok(k) => (Some(k), factor),
            Err(msg) => {
                self.err(spec.span(), format!("{key}.hash_key"), msg);
                (Some(HashKey::Source), factor)
            }
        }
    }

    /// `[backend.sticky]`: HTTP backends only (a TCP backend has no cookies); the name a
    /// token, attributes free of `;` and control bytes (they are written into Set-Cookie).
    fn sticky(&mut self, b: &super::file::BackendSection, key: &str, mode: ModeName) -> Option<Sticky> {
        let section = b.sticky.as_ref()?;
        let key = format!("{key}.sticky");
        if mode != ModeName::Http {
            self.err(
                section.span(),
                key,
                "cookie stickiness needs an HTTP backend (mode = \"http\"); TCP backends stick by balance = \"hash\" (hash_key = \"source\")".into(),
            );
            return None;
        }
        let s = section.get_ref();
        let name = s.cookie.get_ref();
        if !crate::http::h1::headers::is_token(name.as_bytes()) {
            let msg = format!("cookie name `{name}` must be a token (letters, digits, `!#$%&'*+-.^_`|~`)");
            self.err(s.cookie.span(), format!("{key}.cookie"), msg);
        }
        let attribute_ok = |v: &str| v.bytes().all(|b| b > 0x20 && b != 0x7f && b != b';');
        let mut attribute = |v: &Option<Spanned<String>>, field: &str| {
            let v = v.as_ref()?;
            if v.get_ref().is_empty() || !attribute_ok(v.get_ref()) {
                let msg = "must be non-empty, without spaces, `;` or control characters".to_string();
                self.err(v.span(), format!("{key}.{field}"), msg);
            }
            Some(v.get_ref().clone())
        };
        let path = attribute(&s.path, "path").unwrap_or_else(|| "/".into());
        let domain = attribute(&s.domain, "domain");
        Some(Sticky {
            cookie: name.clone(),
            path,
            domain,
            httponly: s.httponly.unwrap_or(true),
            secure: s.secure.unwrap_or(false),
            nocache: s.nocache.unwrap_or(true),
        })
    }

    fn frontends(&mut self, file: &ConfigFile, backends: &[Backend], log: &Log) -> Vec<Frontend> {
        let mut seen = HashMap::new();
        let mut bound = HashSet::new();
        let mut quic_bound = HashSet::new();
        let mut limit_names = HashSet::new();
        let mut out = Vec::new();
        for (i, f) in file.frontend.iter().enumerate() {
            let key = format!("frontend[{i}]");
            self.unique_name(&mut seen, &f.name, format!("{key}.name"));
            let mode = f.mode.as_ref().map_or(ModeName::Tcp, |m| *m.get_ref());
            if f.bind.get_ref().is_empty() {
                self.err(
                    f.bind.span(),
                    format!("{key}.bind"),
                    "needs at least one address".into(),
                );
            }
            let mut binds = Vec::new();
            for (j, b) in f.bind.get_ref().iter().enumerate() {
                match b.get_ref().parse::<SocketAddr>() {
                    Ok(addr) if addr.port() != 0 && !bound.insert(addr) => self.err(
                        b.span(),
                        format!("{key}.bind[{j}]"),
                        format!("address {addr} is bound twice"),
                    ),
                    Ok(addr) => binds.push(addr),
                    Err(_) => self.err(
                        b.span(),
                        format!("{key}.bind[{j}]"),
                        format!(
                            "`{}` is not an IP:port address (e.g. \"127.0.0.1:8080\" or \"[::1]:8080\")",
                            b.get_ref()
                        ),
                    ),
                }
            }
            let default_backend = f
                .default_backend
                .as_ref()
                .and_then(|name| self.backend_ref(name, format!("{key}.default_backend"), mode, backends));
            let limits = super::limit::limits(f, mode, &key, &mut limit_names, &mut self.errors);
            let mut conditions = super::route::Builder::new(mode, f.tls.is_some());
            conditions.client_auth = f.tls.as_ref().is_some_and(|t| t.client_auth.is_some());
            let matchers = conditions.matchers(&mut self.errors, &f.matcher, &key);
            let routes: Vec<Route> = f
                .route
                .iter()
                .enumerate()
                .filter_map(|(j, r)| {
                    let route = self.route(r, format!("{key}.route[{j}]"), mode, backends, &mut conditions)?;
                    let named =
                        super::limit::route_limits(r, &limits, mode, &format!("{key}.route[{j}]"), &mut self.errors);
                    Some(Route { limits: named, ..route })
                })
                .collect();
            let routed = routes.iter().fold(0u8, |all, r| all | r.limits);
            let unrouted_limits = super::limit::all_bits(limits.len()) & !routed;
            // Counted as written: a route refused above must not also cause this error.
            if f.default_backend.is_none() && f.route.is_empty() {
                self.err(
                    f.name.span(),
                    format!("{key}.default_backend"),
                    "is required (or at least one route)".into(),
                );
            }
            let sni_routes = self.sni_routes(f, mode, &routes, &key);
            self.tcp_route_order(f, mode, &key);
            let routes =
                super::route::RouteTable::new(routes, matchers, &conditions.path_regexes).unwrap_or_else(|msg| {
                    self.err(
                        f.name.span(),
                        format!("{key}.route"),
                        format!("the path regexes together: {msg}"),
                    );
                    super::route::RouteTable::default()
                });
            self.mode_keys(f, mode, &key);
            let reject_unknown_sni = f.reject_unknown_sni.as_ref().is_some_and(|r| *r.get_ref());
            let index = out.len();
            let tls = f
                .tls
                .as_ref()
                .and_then(|t| self.frontend_tls(f, t, &format!("{key}.tls"), (index, mode), reject_unknown_sni));
            out.push(Frontend {
                name: f.name.get_ref().clone(),
                binds,
                mode,
                maxconn: f.maxconn.unwrap_or(0),
                default_backend,
                forwarded: f.forwarded.as_ref().map_or(Forwarded::XForwardedFor, |v| *v.get_ref()),
                forward_target: f.forward_target.as_ref().map(|v| *v.get_ref()).unwrap_or_default(),
                routes,
                sni_routes,
                reject_unknown_sni,
                tls,
                splice: offload(f.splice.as_ref().map(Spanned::get_ref)),
                h2c: self.h2c(f, mode, &key),
                access: self.access(f, &key),
                accept_proxy: super::proxy::accept_proxy(f, &key, &mut self.errors),
                keep_origin: backends
                    .iter()
                    .any(|b| b.servers.iter().any(|s| s.send_proxy.is_some())),
                limits,
                unrouted_limits,
                request_ids: super::request_id::request_ids(f.request_id.as_ref(), mode, &key, &mut self.errors),
                trace: super::trace::trace(f.trace.as_ref(), mode, &key, &mut self.errors),
                compress: super::compress::policy(f.compress.as_ref(), mode, &key, &mut self.errors),
                log: std::sync::Arc::new(super::log_layout::frontend_plan(
                    f.log.as_ref(),
                    &log.plan,
                    log.format,
                    mode,
                    &key,
                    &mut self.errors,
                )),
                quic: super::quic::quic(f, mode, &key, &mut quic_bound, &mut self.errors),
            });
        }
        out
    }

    /// TCP mode decides source-only routes at accept, before SNI routes and the route with
    /// no condition (`config::route::tcp`): they must be written first, so that the file's
    /// order is the order they are tried in.
    fn tcp_route_order(&mut self, f: &FrontendSection, mode: ModeName, key: &str) {
        if mode != ModeName::Tcp {
            return;
        }
        let mut later = None;
        for (j, r) in f.route.iter().enumerate() {
            match (&r.source, &r.sni) {
                (Some(source), None) => {
                    if let Some(before) = later {
                        self.err(
                            source.span(),
                            format!("{key}.route[{j}].source"),
                            format!(
                                "a tcp-mode route with `source` and no `sni` is decided at accept, before \
                                 route[{before}] (`sni` or no condition): write it before that route"
                            ),
                        );
                    }
                }
                _ => {
                    later.get_or_insert(j);
                }
            }
        }
    }

    /// A frontend's `allow` / `deny` lists (any mode: checked at accept).
    fn access(&mut self, f: &FrontendSection, key: &str) -> super::prefix_set::Access {
        let mut list = |v: &Option<Spanned<super::file::OneOrMore>>, field: &str| {
            let blocks = super::route::sources(&mut self.errors, v.as_ref()?, &format!("{key}.{field}"))?;
            Some(super::prefix_set::PrefixSet::new(blocks))
        };
        super::prefix_set::Access {
            allow: list(&f.allow, "allow"),
            deny: list(&f.deny, "deny"),
        }
    }

    /// The SNI matcher over a frontend's `sni` routes (route index as target), if it has any.
    /// TCP mode only: in HTTP mode `sni` is a condition like any other.
    fn sni_routes(&mut self, f: &FrontendSection, mode: ModeName, routes: &[Route], key: &str) -> Option<SniMatcher> {
        if mode != ModeName::Tcp {
            return None;
        }
        let patterns: Vec<(String, usize)> = routes
            .iter()
            .enumerate()
            .flat_map(|(i, r)| {
                r.when.sni().unwrap_or_default().iter().map(move |p| match p {
                    HostPattern::Exact(name) => (name.clone(), i),
                    HostPattern::Wildcard(suffix) => (format!("*{suffix}"), i),
                })
            })
            .collect();
        if patterns.is_empty() {
            return None;
        }
        match SniMatcher::new(patterns) {
            Ok(m) => Some(m),
            Err(e) => {
                let at = f.route.iter().enumerate().find(|(_, r)| {
                    r.sni
                        .as_ref()
                        .is_some_and(|s| s.get_ref().0.iter().any(|p| p.eq_ignore_ascii_case(&e.pattern)))
                });
                let (span, k) = match at {
                    Some((j, r)) => (
                        r.sni.as_ref().map_or(0..0, |s| s.span()),
                        format!("{key}.route[{j}].sni"),
                    ),
                    None => (f.name.span(), format!("{key}.route")),
                };
                self.err(span, k, e.to_string());
                None
            }
        }
    }

    pub(super) fn path(&self, text: &str) -> PathBuf {
        let p = Path::new(text);
        match &self.base_dir {
            Some(base) if p.is_relative() => base.join(p),
            _ => p.to_path_buf(),
        }
    }

    /// `[frontend.tls]`: certificates are read here, so a reload re-reads them.
    fn frontend_tls(
        &mut self,
        f: &FrontendSection,
        t: &TlsSection,
        key: &str,
        (index, mode): (usize, ModeName),
        reject_unknown_sni: bool,
    ) -> Option<FrontendTls> {
        let provider = certs::provider();
        let mut orders = self.acme_orders(&t.acme, key, index);
        if t.cert.is_empty() && t.acme.is_empty() {
            self.err(
                f.name.span(),
                format!("{key}.cert"),
                "needs at least one [[frontend.tls.cert]] (or [[frontend.tls.acme]])".into(),
            );
            return None;
        }
        for o in &mut orders {
            o.fallback_self_signed = t.cert.is_empty();
        }
        let acme = self.frontend_acme(f, key, &orders, &provider);
        self.acme_found.extend(orders);
        let mut loaded = Vec::new();
        let mut files = Vec::new();
        let mut default = None;
        for (i, c) in t.cert.iter().enumerate() {
            let cert_files = CertFiles {
                cert: self.path(c.cert.get_ref()),
                key: self.path(c.key.get_ref()),
                watch: c.watch.or(t.watch).unwrap_or(false),
                ocsp_fetch: c.ocsp_fetch.or(t.ocsp_fetch).unwrap_or(false),
            };
            if c.default == Some(true) {
                if default.is_some() {
                    self.err(
                        c.cert.span(),
                        format!("{key}.cert[{i}].default"),
                        "only one certificate can be the default".into(),
                    );
                }
                default = Some(i);
            }
            match certs::load_cert(&cert_files.cert, &cert_files.key, &provider) {
                Ok(cert)
                    if cert_files.ocsp_fetch
                        && let Err(msg) = certs::fetchable(&cert.key) =>
                {
                    self.err(c.cert.span(), format!("{key}.cert[{i}].ocsp_fetch"), msg);
                }
                Ok(cert) => loaded.push((
                    certs::with_staple_file(cert, &cert_files.ocsp_path()),
                    cert_files.clone(),
                )),
                Err(msg) => self.err(c.cert.span(), format!("{key}.cert[{i}].cert"), msg),
            }
            files.push(cert_files);
        }
        let policy = self.tls_policy(
            &PolicyKeys {
                min_version: t.min_version.as_ref(),
                max_version: t.max_version.as_ref(),
                ciphersuites: t.ciphersuites.as_ref(),
                ciphers: t.ciphers.as_ref(),
                curves: t.curves.as_ref(),
            },
            key,
        );
        let mut alpn = Vec::new();
        for (i, p) in t.alpn.iter().flatten().enumerate() {
            if p.get_ref().is_empty() || p.get_ref().len() > 255 {
                self.err(
                    p.span(),
                    format!("{key}.alpn[{i}]"),
                    "a protocol name is 1 to 255 bytes".into(),
                );
            } else if mode == ModeName::Http && !HTTP_ALPN.contains(&p.get_ref().as_str()) {
                // A client that gets a protocol HTTP mode does not speak would send bytes
                // it reads as a bad request: the client sees an empty reply.
                self.err(
                    p.span(),
                    format!("{key}.alpn[{i}]"),
                    format!(
                        "`{}` is not spoken by an http-mode frontend: offer \"h2\", \"http/1.1\" (and \"http/1.0\"), or use a tcp-mode frontend to relay it",
                        p.get_ref()
                    ),
                );
            }
            alpn.push(p.get_ref().as_bytes().to_vec());
        }
        let keys = loaded
            .iter()
            .enumerate()
            .map(|(i, (c, _))| (format!("cert[{i}]"), c.key.key.algorithm()))
            // Ordered certificates get a fresh ECDSA P-256 key (`config::acme`).
            .chain(
                (!t.acme.is_empty()).then(|| ("the ACME certificates".to_string(), rustls::SignatureAlgorithm::ECDSA)),
            );
        self.tls12_suites_fit(&policy, keys, t.ciphers.as_ref(), key);
        let ktls = offload(t.ktls.as_ref().map(Spanned::get_ref));
        let provider = policy.provider();
        let client_auth = t
            .client_auth
            .as_ref()
            .map(|c| self.client_auth(c, &format!("{key}.client_auth"), mode, &provider));
        if loaded.len() != t.cert.len() || client_auth.as_ref().is_some_and(Option::is_none) {
            return None;
        }
        let (client_verifier, client_auth) = client_auth.flatten().unzip();
        let mut entries: Vec<_> = loaded
            .into_iter()
            .map(|(c, f)| {
                let source = CertSource::File {
                    cert: f.cert,
                    key: f.key,
                };
                (c.key, c.names, source)
            })
            .collect();
        if let Some(fallback) = acme.self_signed {
            // Without files, names nothing else serves get the self-signed one.
            default = Some(entries.len());
            entries.push((fallback.key, fallback.names, CertSource::SelfSigned));
        }
        let default = if reject_unknown_sni {
            None
        } else {
            Some(default.unwrap_or(0))
        };
        let store = match CertStore::new(f.name.get_ref(), entries, default) {
            Ok(store) => Arc::new(store),
            Err(msg) => {
                self.err(f.name.span(), key.to_string(), msg);
                return None;
            }
        };
        // Certificates ACME stored earlier and still valid serve at once: a reload or a
        // restart orders nothing.
        for stored in acme.stored {
            if let Err(msg) = store.install(&stored.names, stored.key, CertSource::Acme) {
                tracing::warn!(
                    frontend = f.name.get_ref(),
                    "acme: stored certificate not installed: {msg}"
                );
            }
        }
        let settings = certs::ServerSettings {
            frontend: f.name.get_ref().clone(),
            certs: Arc::clone(&store),
            versions: policy.versions.clone(),
            alpn,
            session_tickets: t.session_tickets.unwrap_or(true),
            session_cache: t.session_cache.unwrap_or(true),
            // Wherever kTLS is enabled; a session hands its keys over only where the kernel
            // has the ULP (probed once per process at run time, see `proxy::tcp`).
            secret_extraction: ktls.enabled,
            client_verifier,
        };
        match certs::server_config(settings, provider) {
            Ok(server_config) => Some(FrontendTls {
                server_config,
                ktls,
                certs: store,
                files,
                acme_challenge: acme.challenge,
                client_auth,
            }),
            Err(msg) => {
                self.err(f.name.span(), key.to_string(), msg);
                None
            }
        }
    }

    /// What a frontend's `[[frontend.tls.acme]]` blocks add to its TLS: the certificates
    /// stored in `state_dir` and still valid, the tls-alpn-01 config, and (without
    /// `[[frontend.tls.cert]]`) a self-signed certificate for the names until the CA issues.
    fn frontend_acme(
        &mut self,
        f: &FrontendSection,
        key: &str,
        orders: &[super::acme::AcmeOrder],
        provider: &Arc<rustls::crypto::CryptoProvider>,
    ) -> FrontendAcme {
        let mut out = FrontendAcme::default();
        if orders.is_empty() {
            return out;
        }
        if let Some(dir) = &self.state_dir {
            out.stored = orders
                .iter()
                .filter_map(|o| super::acme::load_stored(dir, o, std::time::SystemTime::now()))
                .map(|s| s.cert)
                .collect();
        }
        if orders
            .iter()
            .any(|o| o.challenge == super::acme::ChallengeKind::TlsAlpn01)
        {
            match super::acme::challenge_config(Arc::clone(&self.acme_book), Arc::clone(provider)) {
                Ok(c) => out.challenge = Some(c),
                Err(msg) => self.err(f.name.span(), format!("{key}.acme"), msg),
            }
        }
        if orders.first().is_some_and(|o| o.fallback_self_signed) {
            let names: Vec<String> = orders.iter().flat_map(|o| o.domains.iter().cloned()).collect();
            match super::acme::self_signed(&names) {
                Ok(c) => out.self_signed = Some(c),
                Err(msg) => self.err(f.name.span(), format!("{key}.acme"), msg),
            }
        }
        out
    }

    /// `tls = true` on a server: verified against `ca_file` unless `verify = false`.
    /// In HTTP mode the ClientHello offers ALPN `http/1.1` (`h2` for a `proto = "h2"` server); TCP mode relays bytes it does
    /// not parse and offers nothing.
    /// `proto` on a backend or server: HTTP/2 only means something in HTTP mode.
    fn proto(&mut self, p: Option<&Spanned<ProtoName>>, key: &str, mode: ModeName) -> ServerProto {
        match p.map(|p| (*p.get_ref(), p.span())) {
            Some((ProtoName::H2, span)) if mode != ModeName::Http => {
                self.err(span, key.to_string(), "`proto = \"h2\"` needs `mode = \"http\"`".into());
                ServerProto::H1
            }
            Some((ProtoName::H2, _)) => ServerProto::H2,
            Some((ProtoName::H1, _)) | None => ServerProto::H1,
        }
    }

    fn server_tls(&mut self, s: &ServerSection, key: &str, mode: ModeName, proto: ServerProto) -> Option<ServerTls> {
        let enabled = s.tls.as_ref().is_some_and(|t| *t.get_ref());
        if !enabled {
            let extras = [
                ("ca_file", s.ca_file.as_ref().map(|v| v.span())),
                ("verify", s.verify.as_ref().map(|v| v.span())),
                ("sni", s.sni.as_ref().map(|v| v.span())),
                ("min_version", s.min_version.as_ref().map(|v| v.span())),
                ("max_version", s.max_version.as_ref().map(|v| v.span())),
                ("ciphersuites", s.ciphersuites.as_ref().map(|v| v.span())),
                ("ciphers", s.ciphers.as_ref().map(|v| v.span())),
                ("curves", s.curves.as_ref().map(|v| v.span())),
                ("cert", s.cert.as_ref().map(|v| v.span())),
                ("key", s.key.as_ref().map(|v| v.span())),
            ];
            for (field, span) in extras {
                if let Some(span) = span {
                    self.err(span, format!("{key}.{field}"), format!("`{field}` needs `tls = true`"));
                }
            }
            return None;
        }
        let verify = s.verify.as_ref().is_none_or(|v| *v.get_ref());
        let ca_file = match (&s.ca_file, verify) {
            (Some(ca), true) => Some(self.path(ca.get_ref())),
            (None, true) => {
                let span = s.tls.as_ref().map_or(0..0, |t| t.span());
                self.err(
                    span,
                    format!("{key}.ca_file"),
                    "TLS to a server needs `ca_file` (or an explicit `verify = false`)".into(),
                );
                return None;
            }
            (Some(ca), false) => {
                self.err(
                    ca.span(),
                    format!("{key}.ca_file"),
                    "`ca_file` is unused with `verify = false`".into(),
                );
                None
            }
            (None, false) => None,
        };
        let name_text = match &s.sni {
            Some(sni) => sni.get_ref().clone(),
            None => host_part(s.address.get_ref()).to_string(),
        };
        let server_name = match rustls::pki_types::ServerName::try_from(name_text.clone()) {
            Ok(n) => n,
            Err(_) => {
                let span = s.sni.as_ref().map_or(s.address.span(), |v| v.span());
                self.err(
                    span,
                    format!("{key}.sni"),
                    format!("`{name_text}` is not a DNS name or IP address"),
                );
                return None;
            }
        };
        let alpn = match mode {
            // Only h2 is offered: a server that picks nothing is refused at connect.
            ModeName::Http if proto == ServerProto::H2 => vec![b"h2".to_vec()],
            ModeName::Http => vec![b"http/1.1".to_vec()],
            ModeName::Tcp => Vec::new(),
        };
        let policy = self.tls_policy(
            &PolicyKeys {
                min_version: s.min_version.as_ref(),
                max_version: s.max_version.as_ref(),
                ciphersuites: s.ciphersuites.as_ref(),
                ciphers: s.ciphers.as_ref(),
                curves: s.curves.as_ref(),
            },
            key,
        );
        let provider = policy.provider();
        let client_cert = match (&s.cert, &s.key) {
            (None, None) => None,
            (Some(cert), Some(k)) => {
                match certs::load_cert(&self.path(cert.get_ref()), &self.path(k.get_ref()), &provider) {
                    Ok(loaded) => Some(loaded.key),
                    Err(msg) => {
                        self.err(cert.span(), format!("{key}.cert"), msg);
                        return None;
                    }
                }
            }
            (Some(v), None) | (None, Some(v)) => {
                self.err(
                    v.span(),
                    key.to_string(),
                    "a client certificate needs both `cert` and `key`".into(),
                );
                return None;
            }
        };
        let settings = certs::ClientSettings {
            ca_file: ca_file.as_deref(),
            alpn,
            versions: &policy.versions,
            client_cert,
        };
        match certs::client_config(settings, provider) {
            Ok(client_config) => Some(ServerTls {
                client_config,
                server_name,
            }),
            Err(msg) => {
                let span = s.ca_file.as_ref().map_or(s.address.span(), |v| v.span());
                self.err(span, format!("{key}.ca_file"), msg);
                None
            }
        }
    }

    /// Frontend keys whose mode (or missing section) gives them no effect: refused rather
    /// than silently ignored. Route keys are checked per route (`route`).
    fn mode_keys(&mut self, f: &FrontendSection, mode: ModeName, key: &str) {
        let tcp_only = [(
            "tls.ktls",
            f.tls.as_ref().and_then(|t| t.ktls.as_ref()).map(Spanned::span),
        )];
        let http_only = [
            ("forwarded", f.forwarded.as_ref().map(Spanned::span)),
            ("forward_target", f.forward_target.as_ref().map(Spanned::span)),
        ];
        let (refused, needs): (&[_], _) = match mode {
            ModeName::Http => (&tcp_only, "tcp"),
            ModeName::Tcp => (&http_only, "http"),
        };
        for (field, span) in refused {
            if let Some(span) = span {
                self.err(
                    span.clone(),
                    format!("{key}.{field}"),
                    format!("`{field}` needs a {needs}-mode frontend"),
                );
            }
        }
        // splice(2) moves bytes between two plain sockets: behind TLS in user space there is
        // never one on the client's side (kTLS hands the socket back, TCP mode only).
        let ktls = f
            .tls
            .as_ref()
            .and_then(|t| t.ktls.as_ref())
            .is_some_and(|k| k.get_ref().enabled.unwrap_or(false));
        if let Some(splice) = &f.splice
            && f.tls.is_some()
            && !(mode == ModeName::Tcp && ktls)
        {
            let why = match mode {
                ModeName::Http => {
                    "`splice` needs plain sockets: an http frontend with `[frontend.tls]` never has one (HTTP mode keeps TLS in user space)"
                }
                ModeName::Tcp => {
                    "`splice` on a `[frontend.tls]` frontend needs `[frontend.tls.ktls] enabled = true` (without it the plaintext never leaves user space)"
                }
            };
            self.err(splice.span(), format!("{key}.splice"), why.into());
        }
        if let Some(r) = &f.reject_unknown_sni
            && f.tls.is_none()
            && f.route.iter().all(|route| route.sni.is_none())
        {
            self.err(
                r.span(),
                format!("{key}.reject_unknown_sni"),
                "`reject_unknown_sni` needs `[frontend.tls]` or an `sni` route (no SNI is read otherwise)".into(),
            );
        }
    }

    /// Resolves a backend name used by a frontend in `mode`.
    pub(super) fn backend_ref(
        &mut self,
        name: &Spanned<String>,
        key: String,
        mode: ModeName,
        backends: &[Backend],
    ) -> Option<usize> {
        let Some(idx) = backends.iter().position(|b| &b.name == name.get_ref()) else {
            self.err(name.span(), key, format!("backend `{}` does not exist", name.get_ref()));
            return None;
        };
        let backend_mode = backends.get(idx).map_or(mode, |b| b.mode);
        if backend_mode != mode {
            self.err(
                name.span(),
                key,
                format!(
                    "frontend mode \"{}\" does not match backend `{}` mode \"{}\"",
                    mode.as_str(),
                    name.get_ref(),
                    backend_mode.as_str()
                ),
            );
        }
        Some(idx)
    }

    fn route(
        &mut self,
        r: &RouteSection,
        key: String,
        mode: ModeName,
        backends: &[Backend],
        conditions: &mut super::route::Builder,
    ) -> Option<Route> {
        let when = conditions.route(&mut self.errors, r, &key);
        let action = self.route_action(r, &key, mode, backends)?;
        let name = match &r.name {
            Some(n) if n.get_ref().is_empty() || n.get_ref().chars().any(char::is_control) => {
                self.err(
                    n.span(),
                    format!("{key}.name"),
                    "must be printable text, not empty".into(),
                );
                key.rsplit('.').next().unwrap_or_default().into()
            }
            Some(n) => n.get_ref().as_str().into(),
            None => key.rsplit('.').next().unwrap_or_default().into(),
        };
        Some(Route {
            name,
            when,
            overrides: super::limits::route(r, &key, mode, &mut self.errors),
            compress: super::compress::policy(r.compress.as_ref(), mode, &key, &mut self.errors),
            auth: {
                let base = self.base_dir.clone();
                let path = move |text: &str| match &base {
                    Some(b) if std::path::Path::new(text).is_relative() => b.join(text),
                    _ => std::path::PathBuf::from(text),
                };
                let base = self.base_dir.clone();
                super::auth::route_auth(r.auth.as_ref(), mode, &key, path, base.as_deref(), &mut self.errors)
            },
            action,
            limits: 0,
        })
    }
}

/// `maxqueue` and `redispatch` (any value is valid; defaults in `QueueOptions`).
fn queue_options(b: &super::file::BackendSection) -> QueueOptions {
    let default = QueueOptions::default();
    QueueOptions {
        maxqueue: b.maxqueue.unwrap_or(default.maxqueue),
        redispatch: b.redispatch.unwrap_or(default.redispatch),
    }
}

fn offload(section: Option<&OffloadSection>) -> Offload {
    section.map_or_else(Offload::default, |o| Offload {
        enabled: o.enabled.unwrap_or(false),
        after_bytes: o.after_bytes.map_or(0, |b| b.0),
    })
}

/// The host of "host:port" without IPv6 brackets.
fn host_part(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host)
}

/// "IP:port", or "name:port": the name is checked here and resolved by `discover` at run
/// time, so the address is then the unspecified IP with the port.
fn parse_address(text: &str) -> Result<(SocketAddr, Option<String>), String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return if addr.port() == 0 {
            Err(format!("address `{text}` needs a non-zero port"))
        } else {
            Ok((addr, None))
        };
    }
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("address `{text}` must be host:port"))?;
    let port = match port.parse::<u16>() {
        Ok(p) if p != 0 && !host.is_empty() => p,
        _ => return Err(format!("address `{text}` must be host:port with a port in 1..65535")),
    };
    if !is_dns_name(host) {
        return Err(format!(
            "address `{text}`: `{host}` is neither an IP address nor a host name (IPv6 goes in brackets: `[::1]:80`)"
        ));
    }
    Ok((
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
        Some(host.to_string()),
    ))
}

/// A DNS name: labels of letters, digits, `-` and `_` (SRV names start with `_`), an optional
/// final dot.
fn is_dns_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    name.len() <= 253 && matches!(HostPattern::parse(name), Some(HostPattern::Exact(_)))
}

/// `[resolvers]` and `[[backend.discover]]`: the DNS side of the config.
impl Validator<'_> {
    fn resolvers(&mut self, file: &ConfigFile) -> Resolvers {
        let mut out = Resolvers::default();
        let Some(r) = &file.resolvers else {
            return out;
        };
        if let Some(list) = &r.nameservers {
            if list.get_ref().is_empty() {
                self.err(
                    list.span(),
                    "resolvers.nameservers".into(),
                    "must list at least one nameserver (leave the key out for the system's)".into(),
                );
            }
            for (i, ns) in list.get_ref().iter().enumerate() {
                match parse_nameserver(ns.get_ref()) {
                    Some(addr) => out.nameservers.push(addr),
                    None => self.err(
                        ns.span(),
                        format!("resolvers.nameservers[{i}]"),
                        format!("`{}` must be an IP address or IP:port", ns.get_ref()),
                    ),
                }
            }
        }
        for (key, value, slot) in [
            ("resolve_interval", &r.resolve_interval, &mut out.resolve_interval),
            ("timeout", &r.timeout, &mut out.timeout),
        ] {
            if let Some(v) = value {
                if v.get_ref().0 < std::time::Duration::from_millis(10) {
                    self.err(v.span(), format!("resolvers.{key}"), "must be at least 10ms".into());
                } else {
                    *slot = v.get_ref().0;
                }
            }
        }
        if let Some(a) = &r.attempts {
            if (1..=10).contains(a.get_ref()) {
                out.attempts = *a.get_ref();
            } else {
                self.err(a.span(), "resolvers.attempts".into(), "must be 1..=10".into());
            }
        }
        out
    }

    fn discover(&mut self, b: &BackendSection, key: &str) -> Vec<Discover> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (i, d) in b.discover.iter().enumerate() {
            let name = d.srv.get_ref();
            let dkey = format!("{key}.discover[{i}].srv");
            if !is_dns_name(name) {
                self.err(
                    d.srv.span(),
                    dkey,
                    format!("`{name}` is not a DNS name (e.g. \"_http._tcp.app.example\")"),
                );
            } else if !seen.insert(name.to_ascii_lowercase()) {
                self.err(d.srv.span(), dkey, format!("`{name}` is listed twice"));
            } else {
                out.push(Discover {
                    srv: name.clone(),
                    maxconn: d.maxconn.unwrap_or(0),
                });
            }
        }
        out
    }
}

/// A nameserver: "IP" (port 53) or "IP:port" ("[v6]:port").
fn parse_nameserver(text: &str) -> Option<SocketAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, 53));
    }
    text.parse::<SocketAddr>().ok().filter(|a| a.port() != 0)
}

/// `user:password`: both non-empty, printable ASCII or UTF-8 without control characters
/// (they could not travel in an `Authorization` header); the first `:` splits them.
fn stats_auth(text: &str) -> Result<StatsAuth, String> {
    let shape = "expected \"user:password\", both parts non-empty";
    let (user, password) = text.split_once(':').ok_or_else(|| shape.to_string())?;
    if user.is_empty() || password.is_empty() {
        return Err(shape.into());
    }
    if text.chars().any(char::is_control) {
        return Err("control characters are not allowed".into());
    }
    Ok(StatsAuth {
        user: user.to_string(),
        password: password.to_string(),
    })
}

/// `[http2]` and the frontend's `h2c` (issue 13): kept together, apart from the rest.
impl Validator<'_> {
    fn http2(&mut self, file: &ConfigFile) -> Http2 {
        let h = &file.http2;
        let mut out = Http2::default();
        // RFC 9113 6.5.2: windows up to 2^31-1, frames 16 KiB..16 MiB-1.
        let sizes = [
            (
                "initial_stream_window",
                &h.initial_stream_window,
                &mut out.initial_stream_window,
                65_535,
                (1 << 31) - 1,
            ),
            (
                "initial_connection_window",
                &h.initial_connection_window,
                &mut out.initial_connection_window,
                65_535,
                (1 << 31) - 1,
            ),
            (
                "max_frame_size",
                &h.max_frame_size,
                &mut out.max_frame_size,
                16_384,
                (1 << 24) - 1,
            ),
            (
                "max_header_list_size",
                &h.max_header_list_size,
                &mut out.max_header_list_size,
                1024,
                1 << 20,
            ),
            (
                "max_header_block_size",
                &h.max_header_block_size,
                &mut out.max_header_block_size,
                1024,
                1 << 20,
            ),
            (
                "max_send_buffer",
                &h.max_send_buffer,
                &mut out.max_send_buffer,
                16_384,
                64 << 20,
            ),
        ];
        for (key, value, slot, min, max) in sizes {
            let Some(v) = value else { continue };
            match u32::try_from(v.get_ref().0) {
                Ok(n) if (min..=max).contains(&n) => *slot = n,
                _ => self.err(
                    v.span(),
                    format!("http2.{key}"),
                    format!("must be within {min}..={max} bytes"),
                ),
            }
        }
        let counts = [
            (
                "max_concurrent_streams",
                &h.max_concurrent_streams,
                &mut out.max_concurrent_streams,
            ),
            (
                "max_header_block_frames",
                &h.max_header_block_frames,
                &mut out.max_header_block_frames,
            ),
            ("max_client_resets", &h.max_client_resets, &mut out.max_client_resets),
            ("max_server_resets", &h.max_server_resets, &mut out.max_server_resets),
            ("max_pings", &h.max_pings, &mut out.max_pings),
            ("max_settings", &h.max_settings, &mut out.max_settings),
            ("max_empty_data", &h.max_empty_data, &mut out.max_empty_data),
            ("max_priority", &h.max_priority, &mut out.max_priority),
            ("max_window_updates", &h.max_window_updates, &mut out.max_window_updates),
            (
                "max_oversized_heads",
                &h.max_oversized_heads,
                &mut out.max_oversized_heads,
            ),
        ];
        for (key, value, slot) in counts {
            let Some(v) = value else { continue };
            if *v.get_ref() == 0 {
                self.err(v.span(), format!("http2.{key}"), "must be greater than 0".into());
            } else if key == "max_concurrent_streams" && *v.get_ref() > MAX_CONCURRENT_STREAMS {
                self.err(
                    v.span(),
                    format!("http2.{key}"),
                    format!("must be at most {MAX_CONCURRENT_STREAMS} (a connection's streams are scanned per frame)"),
                );
            } else {
                *slot = *v.get_ref();
            }
        }
        if let Some(v) = &h.flood_window {
            if v.get_ref().0.is_zero() {
                self.err(v.span(), "http2.flood_window".into(), "must be greater than 0".into());
            } else {
                out.flood_window = v.get_ref().0;
            }
        }
        out
    }

    /// `h2c = true` only where a plain HTTP/1 connection is read (http mode, no TLS: a TLS
    /// frontend offers HTTP/2 through `tls.alpn`).
    fn h2c(&mut self, f: &FrontendSection, mode: ModeName, key: &str) -> bool {
        let Some(v) = &f.h2c else { return false };
        if !*v.get_ref() {
            return false;
        }
        if mode != ModeName::Http {
            self.err(
                v.span(),
                format!("{key}.h2c"),
                "`h2c` needs an http-mode frontend".into(),
            );
        } else if f.tls.is_some() {
            self.err(
                v.span(),
                format!("{key}.h2c"),
                "`h2c` is HTTP/2 without TLS: on a TLS frontend offer \"h2\" in `tls.alpn`".into(),
            );
        }
        true
    }
}
