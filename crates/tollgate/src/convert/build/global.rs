//! `global`, `userlist` and `resolvers` sections, and the global `[timeouts]` taken from the
//! defaults section most proxies use.

use std::collections::BTreeMap;

use super::super::ParseError;
use super::super::emit::{Table, arr, q};
use super::super::lexer::Line;
use super::super::sections::Section;
use super::values::{duration, time_ms};
use super::{Builder, View, main_defaults};

/// Global settings later sections read.
#[derive(Debug, Default)]
pub(crate) struct Globals {
    pub crt_base: Option<String>,
    pub ca_base: Option<String>,
    /// `ssl-default-bind-*`: applied to every `ssl` bind without its own.
    pub bind_options: Vec<String>,
    pub bind_ciphers_raw: Option<String>,
    pub bind_ciphersuites: Option<String>,
    pub bind_curves: Option<String>,
    pub server_options: Vec<String>,
    /// Userlists: name → (user, password hash) lines kept.
    pub userlists: BTreeMap<String, Vec<(String, String)>>,
    /// The global `[log]` has a sink: proxies with `log global` log.
    pub log_sink: bool,
    /// `timeout tarpit` of the main defaults.
    pub tarpit: Option<String>,
    /// `spread-checks`: each [backend.health]'s `jitter`, in percent.
    pub spread: Option<u64>,
    /// Files the config names may be read (ACL `-f` lists, certificate directories).
    pub files: bool,
    /// Global timeouts as milliseconds, by HAProxy name.
    pub timeouts: BTreeMap<String, u64>,
}

const TIMEOUTS: &[(&str, &str)] = &[
    ("connect", "connect"),
    ("client", "client"),
    ("server", "server"),
    ("queue", "queue"),
    ("tunnel", "tunnel"),
    ("http-request", "http_request"),
    ("http-keep-alive", "http_keep_alive"),
    ("client-hs", "tls_handshake"),
];

impl Builder<'_, '_> {
    pub(super) fn global(&mut self, s: &Section) -> Result<(), ParseError> {
        let mut t = Table::default();
        for l in &s.lines {
            let err = |m: &str| ParseError::at(&l.file, l.line, m);
            let num = |i: usize| {
                l.word(i)
                    .parse::<u64>()
                    .map_err(|_| err(&format!("`{}` needs a number", l.word(0))))
            };
            match l.word(0) {
                "maxconn" => {
                    self.model.global.set("maxconn", num(1)?.to_string(), &l.at());
                    self.use_line(l);
                }
                "nbthread" => {
                    self.model.global.set("workers", num(1)?.to_string(), &l.at());
                    self.use_line(l);
                }
                "maxconnrate" => {
                    self.model.global.set("max_accept_rate", num(1)?.to_string(), &l.at());
                    self.use_line(l);
                }
                "user" | "uid" => {
                    self.model.global.set("user", q(l.word(1)), &l.at());
                    self.use_line(l);
                }
                "group" | "gid" => {
                    self.model.global.set("group", q(l.word(1)), &l.at());
                    self.use_line(l);
                }
                "hard-stop-after" => {
                    let ms = time_ms(l.word(1)).map_err(|m| err(&m))?;
                    self.model.timeouts.set("hard_stop_after", q(&duration(ms)), &l.at());
                    self.use_line(l);
                }
                "spread-checks" => {
                    let n = num(1)?.min(50);
                    self.g.spread = Some(n);
                    self.note(l, "becomes `jitter` in each [backend.health] (at most 50 %)");
                }
                "crt-base" => {
                    self.g.crt_base = Some(l.word(1).to_string());
                    self.note(l, "applied: relative `crt` paths were joined to it");
                }
                "ca-base" => {
                    self.g.ca_base = Some(l.word(1).to_string());
                    self.note(l, "applied: relative `ca-file` and `crl-file` paths were joined to it");
                }
                "ssl-default-bind-options" => {
                    self.g.bind_options.extend(l.words.iter().skip(1).cloned());
                    self.note(l, "applied to every `ssl` bind");
                }
                "ssl-default-bind-ciphers" => {
                    self.g.bind_ciphers_raw = Some(l.word(1).to_string());
                    self.note(
                        l,
                        "applied to every `ssl` bind (OpenSSL names mapped to rustls' suites)",
                    );
                }
                "ssl-default-bind-ciphersuites" => {
                    self.g.bind_ciphersuites = Some(l.word(1).to_string());
                    self.note(l, "applied to every `ssl` bind");
                }
                "ssl-default-bind-curves" => {
                    self.g.bind_curves = Some(l.word(1).to_string());
                    self.note(l, "applied to every `ssl` bind");
                }
                "ssl-default-server-options" => {
                    self.g.server_options.extend(l.words.iter().skip(1).cloned());
                    self.note(l, "applied to every `ssl` server");
                }
                "ssl-default-server-ciphers" | "ssl-default-server-ciphersuites" => {
                    self.note(
                        l,
                        "tollgate's default policy towards servers is used (TLS 1.2 and 1.3, AEAD suites only)",
                    );
                }
                "stats" if l.word(1) == "socket" => self.stats_socket(l),
                "stats" if l.word(1) == "timeout" => {
                    self.note(l, "not needed: `tollgate ctl` opens one connection per command");
                }
                "log" => self.global_log(l, &mut t),
                "daemon" => self.note(
                    l,
                    "not needed: tollgate runs in the foreground under its service manager (docs/operations.md)",
                ),
                "master-worker" => self.note(l, "not needed: master mode is tollgate's default"),
                "pidfile" => self.note(l, "not needed: the service manager tracks the master's pid"),
                "chroot" => self.note(
                    l,
                    "no equivalent: workers drop to `user` instead (docs/config.md#privileges)",
                ),
                "nbproc" => self.drop_line(
                    &mut t,
                    l,
                    "processes have no equivalent: `workers` threads share one process",
                ),
                "server-state-file" => self.note(l, "not needed: a reload carries server states over"),
                "localpeer" => self.note(l, "not needed: no `peers`"),
                "insecure-fork-wanted"
                | "expose-experimental-directives"
                | "set-dumpable"
                | "quiet"
                | "zero-warning"
                | "strict-limits"
                | "ulimit-n"
                | "node"
                | "description"
                | "log-send-hostname"
                | "log-tag"
                | "cpu-map"
                | "numa-cpu-mapping"
                | "busy-polling"
                | "noepoll"
                | "nosplice"
                | "nogetaddrinfo"
                | "noreuseport"
                | "h1-case-adjust"
                | "h1-case-adjust-file"
                | "ssl-server-verify"
                | "ssl-engine"
                | "ssl-mode-async"
                | "ssl-load-extra-files"
                | "ssl-dh-param-file"
                | "limited-quic"
                | "profiling.tasks"
                | "profiling.memory"
                | "thread-groups"
                | "httpclient.resolvers.prefer"
                | "httpclient.ssl.verify" => {
                    let reason = format!(
                        "`{}` sets an HAProxy process detail; tollgate has no such setting",
                        l.word(0)
                    );
                    self.drop_line(&mut t, l, &reason);
                }
                _ => {}
            }
        }
        self.model.global.comments.extend(t.comments);
        Ok(())
    }

    fn stats_socket(&mut self, l: &Line) {
        let path = l.word(2);
        if path.starts_with("ipv4@") || path.contains(':') {
            let mut t = Table::default();
            self.drop_line(
                &mut t,
                l,
                "a TCP runtime API socket has no equivalent: the control socket is a Unix socket",
            );
            self.model.global.comments.extend(t.comments);
            return;
        }
        let path = path.strip_prefix("unix@").unwrap_or(path);
        self.model.global.set("control_socket", q(path), &l.at());
        let mut rest = l.words.iter().skip(3);
        let mut extra = Vec::new();
        while let Some(w) = rest.next() {
            match w.as_str() {
                "mode" => {
                    if let Some(m) = rest.next() {
                        let m = if m.len() < 4 { format!("0{m}") } else { m.clone() };
                        self.model.global.set("control_socket_mode", q(&m), &l.at());
                    }
                }
                "group" | "gid" => {
                    if let Some(g) = rest.next() {
                        self.model.global.set("control_socket_group", q(g), &l.at());
                    }
                }
                "level" | "user" | "uid" => {
                    let v = rest.next().cloned().unwrap_or_default();
                    extra.push(format!("`{w} {v}`"));
                }
                other => extra.push(format!("`{other}`")),
            }
        }
        let mut note = "the master's control socket, used by `tollgate ctl` and `tollgate reload`".to_string();
        if !extra.is_empty() {
            note.push_str(&format!("; {} not applied (whoever can open the socket may run every command, as HAProxy's `level admin`; listening sockets are always the master's)", extra.join(", ")));
        }
        self.note(l, &note);
    }

    fn global_log(&mut self, l: &Line, t: &mut Table) {
        let target = l.word(1);
        let sink = if target == "stdout" || target == "stderr" {
            Some("stdout".to_string())
        } else if let Some(addr) = target
            .strip_prefix("udp@")
            .or_else(|| target.strip_prefix("udp4@"))
            .or(Some(target))
            && !addr.starts_with('/')
            && !addr.contains('@')
            && addr.parse::<std::net::IpAddr>().is_ok()
                | addr
                    .rsplit_once(':')
                    .is_some_and(|(h, p)| h.parse::<std::net::IpAddr>().is_ok() && p.parse::<u16>().is_ok())
        {
            let with_port = if addr.parse::<std::net::IpAddr>().is_ok() {
                format!("{addr}:514")
            } else {
                addr.to_string()
            };
            Some(format!("syslog://{with_port}"))
        } else {
            None
        };
        match sink {
            Some(s) if !self.g.log_sink => {
                self.g.log_sink = true;
                self.model.log.set("access", q(&s), &l.at());
                self.model.log.set("format", q("text"), &l.at());
                self.note(
                    l,
                    "access lines go here in tollgate's text layout (one per request or TCP session; `log-format` becomes `template`); facility local0, severity info; tollgate's own messages go to stderr",
                );
            }
            Some(_) => self.drop_line(t, l, "tollgate writes access lines to one place: the first `log` line was used"),
            None => self.drop_line(t, l, "tollgate logs to stdout, a file or syslog over UDP (`syslog://HOST:PORT`); a Unix socket or ring has no equivalent"),
        }
    }

    pub(super) fn userlist(&mut self, s: &Section) {
        let mut users = Vec::new();
        let mut t = Table::default();
        for l in &s.lines {
            match (l.word(0), l.word(2)) {
                ("user", "password") => {
                    let hash = l.word(3);
                    if ["$2a$", "$2b$", "$2y$", "$5$", "$6$"]
                        .iter()
                        .any(|p| hash.starts_with(p))
                    {
                        users.push((l.word(1).to_string(), hash.to_string()));
                        self.note(l, "written to the htpasswd file of the userlist, beside the output");
                    } else {
                        self.drop_line(&mut t, l, "tollgate takes bcrypt and SHA-256/512 crypt hashes only (MD5 and DES crypt are refused): make a new one with `htpasswd -B`");
                    }
                }
                ("user", "insecure-password") => self.drop_line(
                    &mut t,
                    l,
                    "a clear-text password has no equivalent: make a bcrypt hash with `htpasswd -B`",
                ),
                ("group", _) => self.drop_line(
                    &mut t,
                    l,
                    "groups have no equivalent: a route's `auth.basic` admits every user of its file",
                ),
                _ => {}
            }
            if l.words.iter().any(|w| w == "groups") {
                self.note(
                    l,
                    "the user's groups are not kept: a route's `auth.basic` admits every user of its file",
                );
            }
        }
        self.use_line(&s.header);
        self.model.trailing.extend(t.comments);
        self.g.userlists.insert(s.name.clone(), users);
    }

    pub(super) fn resolvers(&mut self, s: &Section) {
        let mut t = Table::default();
        if self.model.resolvers.has("nameservers") {
            self.whole_section(s, "tollgate has one [resolvers]: the first section was used");
            return;
        }
        self.use_line(&s.header);
        let mut servers = Vec::new();
        for l in &s.lines {
            match (l.word(0), l.word(1)) {
                ("nameserver", _) => {
                    let a = l.word(2).strip_prefix("udp@").unwrap_or(l.word(2));
                    servers.push(a.to_string());
                    self.use_line(l);
                }
                ("parse-resolv-conf", _) => self.note(l, "the system's nameservers are used when `nameservers` is not set"),
                ("timeout", "retry") => {
                    if let Ok(ms) = time_ms(l.word(2)) {
                        self.model.resolvers.set("timeout", q(&duration(ms)), &l.at());
                        self.use_line(l);
                    }
                }
                ("timeout", "resolve") => {
                    if let Ok(ms) = time_ms(l.word(2)) {
                        self.model.resolvers.set("resolve_interval", q(&duration(ms.max(10))), &l.at());
                        self.use_line(l);
                    }
                }
                ("resolve_retries", n) => {
                    if let Ok(n) = n.parse::<u64>() {
                        self.model.resolvers.set("attempts", n.clamp(1, 10).to_string(), &l.at());
                        self.use_line(l);
                    }
                }
                ("hold" | "accepted_payload_size", _) => {
                    self.note(l, "not needed: names are asked again every `resolve_interval`; record TTLs and held states are not used")
                }
                _ => {
                    let reason = format!("`{}` has no equivalent in [resolvers]", l.word(0));
                    self.drop_line(&mut t, l, &reason);
                }
            }
        }
        if !servers.is_empty() {
            let at = s.header.at();
            self.model.resolvers.set("nameservers", arr(&servers), &at);
        }
        self.model.resolvers.comments.extend(t.comments);
    }

    /// `[timeouts]` from the defaults section most proxies use; a timeout it does not set
    /// comes from the first proxy that sets it (its own differing values are notes).
    pub(super) fn global_timeouts(&mut self, views: &[View<'_>]) {
        let main = main_defaults(views).and_then(|d| self.sections.get(d));
        let lines = main.map(|s| s.effective(self.sections)).unwrap_or_default();
        for (haproxy, tollgate) in TIMEOUTS {
            let from_defaults = lines
                .iter()
                .rev()
                .find(|(l, _)| l.word(0) == "timeout" && l.word(1) == *haproxy)
                .map(|(l, _)| *l);
            let client_side = matches!(*haproxy, "client" | "http-request" | "http-keep-alive" | "client-hs");
            let line = from_defaults.or_else(|| {
                views
                    .iter()
                    .filter(|v| !client_side || v.is_frontend())
                    .find_map(|v| v.timeout(haproxy))
            });
            let Some(l) = line else { continue };
            if let Ok(ms) = time_ms(l.word(2)) {
                self.g.timeouts.insert((*haproxy).to_string(), ms);
                self.model.timeouts.set(tollgate, q(&duration(ms)), &l.at());
                self.use_line(l);
            }
        }
        if let Some((l, _)) = lines
            .iter()
            .rev()
            .find(|(l, _)| l.word(0) == "timeout" && l.word(1) == "tarpit")
        {
            self.g.tarpit = time_ms(l.word(2)).ok().map(duration);
            self.use_line(l);
        }
        let Some(h) = main.map(|s| &s.header).or_else(|| views.first().map(|v| v.header)) else {
            return;
        };
        for (name, default) in [("client", "30s"), ("server", "30s")] {
            if !self.g.timeouts.contains_key(name) {
                self.push(super::super::Issue::note(
                    &h.file,
                    h.line,
                    &h.raw,
                    &format!("no `timeout {name}`: HAProxy waits forever (and warns); tollgate's default is {default}"),
                ));
            }
        }
    }
}
