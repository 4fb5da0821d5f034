//! A `frontend` (or the frontend half of a `listen`): binds and TLS (a frontend whose binds
//! differ in TLS or PROXY protocol becomes one tollgate frontend per kind), the stats page
//! and Prometheus exporter (tollgate's `[admin]`), limits from stick tables, and the routes.

use std::collections::BTreeMap;

use super::super::cond::{Acls, Conj, Ctx, Dnf, Test};
use super::super::emit::{Frontend, Table, arr, inline, q};
use super::super::lexer::Line;
use super::super::{Issue, ParseError};
use super::rules::{
    Action, EditOp, RouteSpec, Rule, RuleKind, http_request, http_response, route_table, rule_condition, split_by_edits,
};
use super::values::{duration, log_template, size, time_ms};
use super::{Builder, View};

/// TLS settings of one kind of bind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Tls {
    certs: Vec<String>,
    alpn: Option<Vec<String>>,
    min: Option<String>,
    max: Option<String>,
    ciphers: Option<Vec<String>>,
    suites: Option<Vec<String>>,
    curves: Option<Vec<String>>,
    verify: Option<String>,
    ca_file: Option<String>,
    crl_file: Option<String>,
    strict_sni: bool,
    no_tickets: bool,
}

#[derive(Debug, Clone, Default)]
struct BindGroup {
    addrs: Vec<String>,
    tls: Option<Tls>,
    accept_proxy: bool,
    h2c: bool,
    src: Vec<String>,
}

const OPENSSL_CIPHERS: &[(&str, &str)] = &[
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ),
    ("ECDHE-RSA-AES128-GCM-SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    ("ECDHE-RSA-AES256-GCM-SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
];

fn read_acl_file(path: &str) -> Result<String, String> {
    let bytes = crate::config::bounded::read_file(std::path::Path::new(path), 1024 * 1024)
        .map_err(|e| format!("`-f {path}`: {e} (convert where the file is, or list its values)"))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

impl Builder<'_, '_> {
    pub(super) fn frontend(&mut self, v: &View<'_>, views: &[View<'_>]) -> Result<(), ParseError> {
        self.use_line(v.header);
        if self.admin_only(v) {
            return Ok(());
        }
        let ctx = Ctx {
            http: v.http,
            read_file: &read_acl_file,
        };
        let mut acls = Acls::default();
        let mut head = Table::default();
        for l in v.all("acl") {
            let name = l.word(1);
            if name.is_empty() || l.words.len() < 3 {
                return Err(ParseError::at(&l.file, l.line, "`acl` needs a name and a criterion"));
            }
            acls.add(name, l.words.get(2..).unwrap_or_default(), &ctx);
            self.use_line(l);
        }
        let groups = self.binds(v, &mut head)?;
        head.set("name", q(&v.name), &v.header.at());
        if let Some(l) = v.last("mode") {
            if matches!(l.word(1), "http" | "tcp") {
                head.set("mode", q(l.word(1)), &l.at());
                self.use_line(l);
            }
        }
        if let Some(l) = v
            .all("maxconn")
            .filter(|l| !v.inherited(l) || v.kind == super::super::sections::Kind::Listen)
            .last()
        {
            if let Ok(n) = l.word(1).parse::<u64>() {
                head.set("maxconn", n.to_string(), &l.at());
                self.use_line(l);
            }
        }
        self.frontend_timeouts(v);
        let mut fe = Frontend::default();
        self.limits(v, &acls, &ctx, &mut fe, &mut head);
        let targets = if v.http {
            self.http_routes(v, views, &acls, &ctx, &mut fe, &mut head)
        } else {
            self.tcp_routes(v, &acls, &ctx, &mut fe, &mut head)
        };
        if v.http {
            self.forwarded(v, views, &targets, &mut head);
            self.http_frontend_keys(v, &mut head);
        }
        fe.head = head;
        let many = groups.len() > 1;
        for (i, g) in groups.iter().enumerate() {
            let mut f = fe.clone();
            if many && i > 0 {
                let suffix = if g.tls.is_some() {
                    "tls".to_string()
                } else {
                    format!("{}", i + 1)
                };
                f.head.set("name", q(&format!("{}-{suffix}", v.name)), &v.header.at());
            }
            let mut h = Table::default();
            for e in &f.head.entries {
                if e.key == "name" {
                    h.entries.push(e.clone());
                    h.set("bind", arr(&g.addrs), &g.src.join(", "));
                } else {
                    h.entries.push(e.clone());
                }
            }
            h.comments = f.head.comments.clone();
            if g.accept_proxy {
                h.set("accept_proxy", q("any"), &g.src.join(", "));
                h.set(
                    "trusted_proxies",
                    arr(&["0.0.0.0/0".to_string(), "::/0".to_string()]),
                    "accept-proxy: HAProxy trusts any peer",
                );
            }
            if g.h2c {
                h.set("h2c", "true".into(), &g.src.join(", "));
            }
            if let Some(tls) = &g.tls {
                self.tls_tables(tls, &mut f, &mut h, &g.src.join(", "));
            }
            f.head = h;
            self.model.frontends.push(f);
        }
        Ok(())
    }

    fn tls_tables(&mut self, tls: &Tls, f: &mut Frontend, h: &mut Table, src: &str) {
        let mut t = Table::default();
        if let Some(a) = &tls.alpn {
            t.set("alpn", arr(a), src);
        }
        if let Some(m) = &tls.min {
            t.set("min_version", q(m), src);
        }
        if let Some(m) = &tls.max {
            t.set("max_version", q(m), src);
        }
        if let Some(c) = &tls.ciphers {
            t.set("ciphers", arr(c), src);
        }
        if let Some(c) = &tls.suites {
            t.set("ciphersuites", arr(c), src);
        }
        if let Some(c) = &tls.curves {
            t.set("curves", arr(c), src);
        }
        if tls.no_tickets {
            t.set("session_tickets", "false".into(), src);
        }
        if tls.strict_sni {
            h.set("reject_unknown_sni", "true".into(), src);
        }
        f.tls = Some(t);
        f.certs = tls
            .certs
            .iter()
            .map(|c| {
                let mut ct = Table::default();
                let key = if std::path::Path::new(&format!("{c}.key")).is_file() {
                    format!("{c}.key")
                } else {
                    c.clone()
                };
                ct.set("cert", q(c), src);
                ct.set("key", q(&key), src);
                ct
            })
            .collect();
        if let Some(mode) = &tls.verify {
            let mut ca = Table::default();
            ca.set("mode", q(if mode == "optional" { "optional" } else { "required" }), src);
            if let Some(c) = &tls.ca_file {
                ca.set("ca_file", q(c), src);
            }
            if let Some(c) = &tls.crl_file {
                ca.set("crl_file", q(c), src);
            }
            f.client_auth = Some(ca);
        }
    }

    /// A proxy that only serves the stats page or the Prometheus exporter: `[admin]`.
    fn admin_only(&mut self, v: &View<'_>) -> bool {
        let own = |l: &&Line| !v.inherited(l);
        let stats: Vec<&Line> = v.all("stats").filter(own).collect();
        let prom: Vec<&Line> = v
            .all("http-request")
            .filter(own)
            .filter(|l| l.words.iter().any(|w| w == "prometheus-exporter"))
            .collect();
        let serves = stats.iter().any(|l| matches!(l.word(1), "enable" | "uri")) || !prom.is_empty();
        let routes = v.all("use_backend").next().is_some()
            || v.all("default_backend").next().is_some()
            || v.all("server").next().is_some();
        if !serves {
            return false;
        }
        if routes {
            let mut t = Table::default();
            for l in stats.iter().chain(&prom) {
                self.drop_line(&mut t, l, "the stats page and /metrics are tollgate's [admin] endpoint, on an address of its own: this proxy also carries traffic");
            }
            self.model.admin.comments.extend(t.comments);
            return false;
        }
        let Some(bind) = v.all("bind").next() else { return false };
        if self.model.admin.has("bind") {
            let mut t = Table::default();
            self.drop_line(
                &mut t,
                bind,
                "tollgate has one [admin] endpoint: the first stats proxy was used",
            );
            self.model.admin.comments.extend(t.comments);
            for l in v.lines.iter().filter(|(_, inh)| !inh).map(|(l, _)| *l) {
                self.use_line(l);
            }
            return true;
        }
        let addr = bind_addrs(bind.word(1))
            .ok()
            .and_then(|a| a.into_iter().next())
            .unwrap_or_default();
        self.model.admin.set("bind", q(&addr), &bind.at());
        self.note(bind, "the stats page (at `/` and `/stats`) and Prometheus metrics (at `/metrics`) are served here by [admin]; counters go on across reloads");
        for l in v.all("bind").skip(1) {
            self.note(l, "[admin] binds one address");
        }
        for l in &stats {
            match l.word(1) {
                "auth" if !self.model.admin.has("stats_auth") => {
                    self.model.admin.set("stats_auth", q(l.word(2)), &l.at());
                    self.note(
                        l,
                        "one user; with it the page shows drain/maint/ready buttons (as `stats admin`)",
                    );
                }
                "uri" if l.word(2) != "/" => self.note(l, "tollgate's page is at `/` and `/stats`"),
                _ => self.note(l, "not needed: tollgate's stats page has no such setting"),
            }
        }
        for l in &prom {
            self.note(l, "Prometheus metrics are at `/metrics` of [admin]");
        }
        for l in v.lines.iter().filter(|(_, inh)| !inh).map(|(l, _)| *l) {
            if !self.used.contains(&super::addr(l)) {
                self.note(l, "part of a stats-only proxy: not needed for [admin]");
            }
        }
        true
    }

    fn binds(&mut self, v: &View<'_>, head: &mut Table) -> Result<Vec<BindGroup>, ParseError> {
        let mut groups: Vec<BindGroup> = Vec::new();
        for l in v.all("bind") {
            let addrs = match bind_addrs(l.word(1)) {
                Ok(a) => a,
                Err(reason) => {
                    self.drop_line(head, l, &reason);
                    continue;
                }
            };
            let mut tls: Option<Tls> = None;
            let mut spec = Tls::default();
            let mut accept_proxy = false;
            let mut h2c = false;
            let mut ignored = Vec::new();
            let mut notes = Vec::new();
            let mut i = 2;
            while let Some(w) = l.words.get(i) {
                let arg = l.words.get(i + 1).cloned().unwrap_or_default();
                let mut takes = true;
                match w.as_str() {
                    "ssl" => {
                        tls = Some(Tls::default());
                        takes = false;
                    }
                    "crt" => spec.certs.extend(self.cert_files(&arg)),
                    "alpn" => spec.alpn = Some(arg.split(',').map(str::to_string).collect()),
                    "npn" => notes.push("`npn` (NPN is not offered; ALPN is)".to_string()),
                    "accept-proxy" => {
                        accept_proxy = true;
                        takes = false;
                    }
                    "ssl-min-ver" => spec.min = tls_version(&arg, &mut notes),
                    "ssl-max-ver" => spec.max = tls_version(&arg, &mut notes),
                    "ciphers" => spec.ciphers = Some(map_ciphers(&arg, &mut notes)),
                    "ciphersuites" => spec.suites = Some(map_suites(&arg, &mut notes)),
                    "curves" | "ecdhe" => spec.curves = Some(arg.split(':').map(str::to_string).collect()),
                    "verify" if arg == "none" => {}
                    "verify" => spec.verify = Some(arg.clone()),
                    "ca-file" => spec.ca_file = Some(self.ca_path(&arg)),
                    "crl-file" => spec.crl_file = Some(self.ca_path(&arg)),
                    "strict-sni" => {
                        spec.strict_sni = true;
                        takes = false;
                    }
                    "no-tls-tickets" => {
                        spec.no_tickets = true;
                        takes = false;
                    }
                    "proto" if arg == "h2" => h2c = true,
                    "no-sslv3"
                    | "no-tlsv10"
                    | "no-tlsv11"
                    | "v4v6"
                    | "v6only"
                    | "tfo"
                    | "defer-accept"
                    | "prefer-client-ciphers"
                    | "allow-0rtt"
                    | "no-alpn"
                    | "ssl_fc" => takes = false,
                    "no-tlsv12" => {
                        spec.min = Some("1.3".into());
                        takes = false;
                    }
                    "no-tlsv13" => {
                        spec.max = Some("1.2".into());
                        takes = false;
                    }
                    "name" | "id" | "process" | "thread" | "nice" | "backlog" | "maxconn" | "mss" | "interface"
                    | "tcp-ut" | "level" | "severity-output" | "gid" | "uid" | "user" | "group" | "mode"
                    | "namespace" => {}
                    "transparent"
                    | "generate-certificates"
                    | "crt-list"
                    | "ca-sign-file"
                    | "ca-sign-pass"
                    | "crt-ignore-err"
                    | "ca-ignore-err"
                    | "expose-fd"
                    | "quic-cc-algo"
                    | "quic-force-retry" => {
                        ignored.push(format!("`{w}`"));
                        if matches!(w.as_str(), "transparent" | "generate-certificates") {
                            takes = false;
                        }
                    }
                    other => {
                        ignored.push(format!("`{other}`"));
                        takes = false;
                    }
                }
                i += if takes { 2 } else { 1 };
            }
            let tls = tls.map(|_| {
                let mut s = spec.clone();
                self.apply_default_bind(&mut s, &mut notes);
                s
            });
            if let Some(t) = &tls
                && t.certs.is_empty()
            {
                self.drop_line(
                    head,
                    l,
                    "an `ssl` bind without a `crt` tollgate can use (a certificate file or a directory here)",
                );
                continue;
            }
            if !ignored.is_empty() {
                self.push(Issue::dropped(
                    &l.file,
                    l.line,
                    &l.raw,
                    &format!("converted without {}", ignored.join(", ")),
                ));
                head.comment(&format!("UNCONVERTED part of {}: {}", l.at(), ignored.join(", ")));
            }
            if !notes.is_empty() {
                self.note(l, &notes.join("; "));
            }
            self.use_line(l);
            let at = l.at();
            match groups
                .iter_mut()
                .find(|g| g.tls == tls && g.accept_proxy == accept_proxy && g.h2c == h2c)
            {
                Some(g) => {
                    g.addrs.extend(addrs);
                    g.src.push(at);
                }
                None => groups.push(BindGroup {
                    addrs,
                    tls,
                    accept_proxy,
                    h2c,
                    src: vec![at],
                }),
            }
        }
        if groups.len() > 1 {
            self.note(
                v.header,
                "its binds differ in TLS or PROXY protocol: one tollgate frontend per kind, with the same routes",
            );
        }
        if groups.is_empty() {
            groups.push(BindGroup::default());
        }
        Ok(groups)
    }

    fn apply_default_bind(&self, s: &mut Tls, notes: &mut Vec<String>) {
        for o in &self.g.bind_options {
            match o.as_str() {
                "no-tlsv12" if s.min.is_none() => s.min = Some("1.3".into()),
                "no-tls-tickets" => s.no_tickets = true,
                _ => {}
            }
        }
        if let Some(i) = self.g.bind_options.iter().position(|o| o == "ssl-min-ver")
            && s.min.is_none()
            && let Some(v) = self.g.bind_options.get(i + 1)
        {
            s.min = tls_version(v, notes);
        }
        if s.ciphers.is_none()
            && let Some(c) = &self.g.bind_ciphers_raw
        {
            s.ciphers = Some(map_ciphers(c, notes));
        }
        if s.suites.is_none()
            && let Some(c) = &self.g.bind_ciphersuites
        {
            s.suites = Some(map_suites(c, notes));
        }
        if s.curves.is_none()
            && let Some(c) = &self.g.bind_curves
        {
            s.curves = Some(c.split(':').map(str::to_string).collect());
        }
        if s.ciphers.as_ref().is_some_and(Vec::is_empty) {
            s.ciphers = None;
            notes.push("no TLS 1.2 suite of the list is one rustls offers: tollgate's default suites are used".into());
        }
        if s.suites.as_ref().is_some_and(Vec::is_empty) {
            s.suites = None;
        }
    }

    /// `crt FILE` (a combined PEM, as cert and key), or a directory of them.
    fn cert_files(&self, arg: &str) -> Vec<String> {
        let path = self.crt_path(arg);
        let p = std::path::Path::new(&path);
        if p.is_dir() {
            let mut files: Vec<String> = std::fs::read_dir(p)
                .map(|d| {
                    d.filter_map(Result::ok)
                        .map(|e| e.path())
                        .filter(|f| {
                            f.is_file()
                                && !f
                                    .extension()
                                    .is_some_and(|x| ["key", "ocsp", "issuer", "sctl"].iter().any(|e| x == *e))
                        })
                        .map(|f| f.display().to_string())
                        .collect()
                })
                .unwrap_or_default();
            files.sort();
            return files;
        }
        vec![path]
    }

    fn frontend_timeouts(&mut self, v: &View<'_>) {
        for name in [
            "client",
            "http-request",
            "http-keep-alive",
            "client-hs",
            "tunnel",
            "queue",
            "connect",
            "server",
        ] {
            let Some(l) = v.timeout(name) else { continue };
            let Ok(ms) = time_ms(l.word(2)) else { continue };
            if self.g.timeouts.get(name) == Some(&ms)
                || v.inherited(l)
                || v.is_backend() && matches!(name, "connect" | "server")
            {
                self.use_line(l);
            } else if matches!(name, "connect" | "server" | "queue") {
                self.use_line(l);
            } else {
                self.note(
                    l,
                    &format!(
                        "tollgate's `timeouts.{}` is global: this frontend's value ({}) is not applied",
                        name.replace('-', "_"),
                        duration(ms)
                    ),
                );
            }
        }
    }

    /// Stick tables, trackers and the `deny if { sc_http_req_rate(N) gt X }` rules that
    /// read them become `[[frontend.limit]]`s.
    fn limits(&mut self, v: &View<'_>, acls: &Acls, ctx: &Ctx<'_>, fe: &mut Frontend, head: &mut Table) {
        // slot → (key, table name, line)
        let mut trackers: BTreeMap<u8, (String, String, &Line)> = BTreeMap::new();
        let tracking = |l: &Line| -> Option<(u8, usize)> {
            let (i, w) = l.words.iter().enumerate().find(|(_, w)| w.starts_with("track-sc"))?;
            let slot = w.trim_start_matches("track-sc").parse().ok()?;
            Some((slot, i))
        };
        for l in v.all("http-request").chain(v.all("tcp-request")).collect::<Vec<_>>() {
            let Some((slot, i)) = tracking(l) else { continue };
            let expr = l.word(i + 1);
            let table = match (l.word(i + 2), l.word(i + 3)) {
                ("table", t) => t.to_string(),
                _ => v.name.clone(),
            };
            let key = match expr {
                "src" => Some("source".to_string()),
                "path" => Some("path".to_string()),
                "ssl_fc_sni" | "req.ssl_sni" | "req_ssl_sni" => Some("sni".to_string()),
                e => e
                    .strip_prefix("req.hdr(")
                    .or_else(|| e.strip_prefix("hdr("))
                    .and_then(|h| h.strip_suffix(')'))
                    .map(|h| format!("header:{}", h.to_ascii_lowercase())),
            };
            let conditional = l.words.iter().any(|w| w == "if" || w == "unless");
            match key {
                Some(k) if !conditional => {
                    trackers.insert(slot, (k, table, l));
                }
                _ => self.drop_line(
                    head,
                    l,
                    "only an unconditional tracker of src, path, the SNI or a request header becomes a limit key",
                ),
            }
        }
        if trackers.is_empty() {
            return;
        }
        let tables: Vec<&Line> = self
            .sections
            .iter()
            .flat_map(|s| s.lines.iter())
            .filter(|l| l.word(0) == "stick-table")
            .collect();
        let owner_of = |l: &Line| {
            self.sections
                .iter()
                .find(|s| s.lines.iter().any(|x| std::ptr::eq(x, l)))
                .map(|s| s.name.clone())
        };
        let mut made: BTreeMap<String, Table> = BTreeMap::new();
        let rules: Vec<&Line> = v.all("http-request").chain(v.all("tcp-request")).collect();
        for l in rules {
            let start = if l.word(0) == "tcp-request" { 2 } else { 1 };
            let action = l.word(start);
            if !matches!(action, "deny" | "tarpit" | "reject" | "silent-drop") {
                continue;
            }
            let Ok((words, dnf)) = rule_condition(l.words.get(start..).unwrap_or_default(), acls, ctx) else {
                continue;
            };
            let counter = match dnf.0.as_slice() {
                [Conj { pos, neg }] if neg.is_empty() && pos.len() == 1 => match pos.first() {
                    Some(Test::Counter(c)) => c.clone(),
                    _ => continue,
                },
                _ if dnf
                    .0
                    .iter()
                    .flat_map(Conj::tests)
                    .any(|t| matches!(t, Test::Counter(_))) =>
                {
                    self.drop_line(head, l, "a limit with other conditions besides the counter has no equivalent (a limit counts every request of the frontend, or of routes naming it)");
                    continue;
                }
                _ => continue,
            };
            let Some((key, table_name, track_line)) = trackers.get(&counter.slot).cloned() else {
                self.drop_line(head, l, "the counter reads a slot no `track-sc` line fills");
                continue;
            };
            let table_name = counter.table.clone().unwrap_or(table_name);
            let Some(table) = tables
                .iter()
                .find(|t| owner_of(t).as_deref() == Some(table_name.as_str()))
            else {
                self.drop_line(head, l, &format!("no `stick-table` in `{table_name}`"));
                continue;
            };
            let limit = made
                .entry(format!("{}-{}", table_name, counter.slot))
                .or_insert_with(|| {
                    let mut t = Table::default();
                    let name: String = format!("{}-sc{}", table_name, counter.slot)
                        .chars()
                        .map(|c| {
                            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                                c
                            } else {
                                '_'
                            }
                        })
                        .collect();
                    t.set("name", q(&name), &table.at());
                    t.set("key", q(&key), &track_line.at());
                    t
                });
            self.use_line(track_line);
            self.use_line(table);
            let store = table
                .words
                .iter()
                .position(|w| w == "store")
                .and_then(|i| table.words.get(i + 1))
                .cloned()
                .unwrap_or_default();
            let period = |what: &str| {
                store.split(',').find_map(|s| {
                    s.strip_prefix(&format!("{what}("))
                        .and_then(|p| p.strip_suffix(')'))
                        .and_then(|p| time_ms(p).ok())
                })
            };
            match counter.what.as_str() {
                "http_req_rate" | "conn_rate" => {
                    let Some(p) = period(&counter.what) else {
                        self.drop_line(head, l, &format!("the table does not store `{}`", counter.what));
                        continue;
                    };
                    limit.set("rate", q(&format!("{}/{}", counter.max, duration(p))), &l.at());
                    if let Some(size_at) = table.words.iter().position(|w| w == "size")
                        && let Some(n) = table.words.get(size_at + 1).and_then(|s| size(s).ok())
                    {
                        limit.set("size", n.to_string(), &table.at());
                    }
                    if let Some(e) = table
                        .words
                        .iter()
                        .position(|w| w == "expire")
                        .and_then(|i| table.words.get(i + 1))
                        .and_then(|e| time_ms(e).ok())
                    {
                        limit.set("expire", q(&duration(e.max(2 * p))), &table.at());
                        if e < 2 * p {
                            self.note(table, "`expire` raised to two periods of the rate: tollgate's sliding window reads the previous period");
                        }
                    }
                }
                "conn_cur" => limit.set("concurrent", counter.max.to_string(), &l.at()),
                other => {
                    self.drop_line(
                        head,
                        l,
                        &format!(
                            "`{other}` has no limit equivalent (request rate, connection rate and concurrency only)"
                        ),
                    );
                    continue;
                }
            }
            let status = words
                .iter()
                .position(|w| w == "deny_status")
                .and_then(|i| words.get(i + 1))
                .cloned();
            let act = match (action, status.as_deref()) {
                ("deny", Some("429")) if v.http => "429",
                ("deny", _) if v.http => {
                    self.note(
                        l,
                        "an over-limit request gets 429 Too Many Requests (with Retry-After), not this status",
                    );
                    "429"
                }
                ("tarpit", _) => {
                    if let Some(t) = &self.g.tarpit {
                        limit.set("tarpit", q(t), &l.at());
                    }
                    "tarpit"
                }
                _ => "close",
            };
            limit.set("action", q(act), &l.at());
            self.note(l, "a limit: tollgate counts only admitted requests, so a client over the rate gets exactly the rate; HAProxy's counter also counts refused ones");
        }
        fe.limits = made.into_values().collect();
    }

    /// The `forwarded` key: HAProxy adds X-Forwarded-For only with `option forwardfor` in the
    /// frontend or the backend; tollgate's default adds it always.
    fn forwarded(&mut self, v: &View<'_>, views: &[View<'_>], targets: &[String], head: &mut Table) {
        let mut lines = Vec::new();
        let fe = v.option("forwardfor");
        if let Some((true, l)) = fe {
            lines.push(l);
        }
        let mut some_without = fe.is_none_or(|(on, _)| !on);
        let mut any_backend_with = false;
        for t in targets {
            let Some(b) = views.iter().find(|b| b.is_backend() && b.name == *t) else {
                continue;
            };
            match b.option("forwardfor") {
                Some((true, l)) => {
                    lines.push(l);
                    any_backend_with = true;
                }
                _ => some_without = some_without && fe.is_none_or(|(on, _)| !on),
            }
        }
        let on = fe.is_some_and(|(on, _)| on) || any_backend_with;
        if on {
            let at = lines.first().map(|l| l.at()).unwrap_or_default();
            head.set("forwarded", q("x-forwarded-for"), &at);
            for l in &lines {
                if l.words.len() > 2 {
                    self.note(
                        l,
                        "`except`, `header` and `if-none` are not kept: X-Forwarded-For is appended for every request",
                    );
                } else {
                    self.note(l, "X-Forwarded-For is appended, and X-Forwarded-Proto set, as HAProxy's forwardfor plus `http-request set-header X-Forwarded-Proto`");
                }
            }
            if any_backend_with && some_without && fe.is_none_or(|(on, _)| !on) {
                self.note(v.header, "forwardfor is set on some of its backends only: tollgate adds X-Forwarded-For on every route of the frontend");
            }
        } else {
            head.set(
                "forwarded",
                q("none"),
                "HAProxy adds no forwarding header without `option forwardfor`",
            );
        }
        if let Some((false, l)) = fe {
            self.use_line(l);
        }
    }

    /// unique-id, compression and logging keys of an http frontend.
    fn http_frontend_keys(&mut self, v: &View<'_>, head: &mut Table) {
        if let Some(h) = v.last("unique-id-header") {
            head.set("request_id", inline(&[("header".into(), q(h.word(1)))]), &h.at());
            self.note(
                h,
                "the ID is a UUIDv7 made by tollgate, not `unique-id-format`; a client's own is replaced",
            );
            if let Some(f) = v.last("unique-id-format") {
                self.note(
                    f,
                    "tollgate's request IDs are UUIDv7 (time-ordered): the format is not kept",
                );
            }
        }
        let algos: Vec<&Line> = v.all2("compression", "algo").collect();
        if let Some(l) = algos
            .last()
            .filter(|_| !(v.is_backend() && v.kind != super::super::sections::Kind::Listen))
        {
            let mut pairs = Vec::new();
            let known: Vec<String> = l
                .words
                .iter()
                .skip(2)
                .filter(|a| a.as_str() == "gzip")
                .cloned()
                .collect();
            if known.len() + 2 < l.words.len() {
                self.note(l, "only gzip of these is offered (deflate and raw-deflate have no equivalent; tollgate also offers br and zstd when listed)");
            } else {
                self.use_line(l);
            }
            pairs.push(("algorithms".to_string(), arr(&known)));
            if let Some(t) = v.all2("compression", "type").last() {
                pairs.push((
                    "types".to_string(),
                    arr(&t.words.iter().skip(2).cloned().collect::<Vec<_>>()),
                ));
                self.use_line(t);
            }
            head.set("compress", inline(&pairs), &l.at());
            for l in v.all2("compression", "offload") {
                self.note(
                    l,
                    "not needed: a response the server compressed already is forwarded as it is",
                );
            }
        }
        if let Some(l) = v.last("log-format")
            && !self.model.log.has("template")
        {
            match log_template(l.word(1)) {
                Ok(t) => {
                    self.model.log.set("template", crate::convert::emit::q(&t), &l.at());
                    self.model.log.set("format", q("text"), &l.at());
                    self.note(l, "the access log's template, for every frontend; timers and sizes are tollgate's fields of the same meaning");
                }
                Err(reason) => {
                    let mut t = Table::default();
                    self.drop_line(&mut t, l, &format!("{reason}: tollgate's own text layout is used"));
                    head.comments.extend(t.comments);
                }
            }
        }
    }

    fn http_routes(
        &mut self,
        v: &View<'_>,
        views: &[View<'_>],
        acls: &Acls,
        ctx: &Ctx<'_>,
        fe: &mut Frontend,
        head: &mut Table,
    ) -> Vec<String> {
        let lists: Vec<String> = self
            .g
            .userlists
            .iter()
            .filter(|(_, u)| !u.is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        let userlists =
            move |name: &str| -> Option<String> { lists.iter().any(|l| l == name).then(|| format!("{name}.htpasswd")) };
        let mut stops: Vec<Rule<'_>> = Vec::new();
        let mut edits: Vec<Rule<'_>> = Vec::new();
        let mut specs: Vec<RouteSpec> = Vec::new();
        if let Some(l) = v.last("monitor-uri") {
            let body = "<html><body><h1>200 OK</h1>\nService ready.\n</body></html>\n";
            let ret = vec![
                ("status".to_string(), "200".to_string()),
                ("body".into(), q(body)),
                ("content_type".into(), q("text/html")),
            ];
            specs.push(RouteSpec {
                conj: Conj {
                    pos: vec![Test::Path(vec![l.word(1).to_string()])],
                    neg: Vec::new(),
                },
                action: Action::Return(ret),
                edits: Default::default(),
                src: l.at(),
            });
            self.use_line(l);
        }
        let mut used_lists = Vec::new();
        for l in v.all("http-request").collect::<Vec<_>>() {
            if self.used.contains(&super::addr(l)) {
                continue;
            }
            if l.word(1) == "set-header" && l.word(3) == "%[unique-id]" {
                head.set("request_id", inline(&[("header".into(), q(l.word(2)))]), &l.at());
                self.note(l, "the ID is a UUIDv7 made by tollgate, not `unique-id-format`");
                continue;
            }
            if l.word(1) == "use-service" {
                self.drop_line(
                    head,
                    l,
                    "the Prometheus exporter is tollgate's [admin] endpoint (`/metrics`), on an address of its own",
                );
                continue;
            }
            match http_request(l, l.words.get(1..).unwrap_or_default(), acls, ctx, &userlists) {
                Ok(Some(rule)) => {
                    if let RuleKind::Edit(EditOp::Auth(_)) = &rule.kind {
                        used_lists.push(l.word(0).to_string());
                    }
                    self.use_line(l);
                    match rule.kind {
                        RuleKind::Stop(_) => stops.push(rule),
                        RuleKind::Edit(_) => edits.push(rule),
                    }
                }
                Ok(None) => self.note(l, "not needed: tollgate always matches routes on the normalised path (docs/config.md#normalised-paths-and-hosts)"),
                Err(reason) => self.drop_line(head, l, &reason),
            }
        }
        for l in v.all("redirect").collect::<Vec<_>>() {
            match rule_condition(l.words.get(1..).unwrap_or_default(), acls, ctx)
                .and_then(|(action, cond)| Ok((super::rules::redirect(&action)?, cond)))
            {
                Ok((p, cond)) => {
                    stops.push(Rule {
                        line: l,
                        cond,
                        kind: RuleKind::Stop(Action::Redirect(p)),
                    });
                    self.use_line(l);
                }
                Err(reason) => self.drop_line(head, l, &reason),
            }
        }
        let mut resp: Vec<Rule<'_>> = Vec::new();
        for l in v.all("http-response").collect::<Vec<_>>() {
            match http_response(l, l.words.get(1..).unwrap_or_default(), acls, ctx) {
                Ok(r) => {
                    self.use_line(l);
                    resp.push(r);
                }
                Err(reason) => self.drop_line(head, l, &reason),
            }
        }
        for r in &stops {
            if let RuleKind::Stop(a) = &r.kind {
                for c in &r.cond.0 {
                    specs.push(RouteSpec {
                        conj: c.clone(),
                        action: a.clone(),
                        edits: Default::default(),
                        src: r.line.at(),
                    });
                }
            }
        }
        // Backend choices, in order, then the default.
        let mut choices: Vec<(Dnf, String, String)> = Vec::new();
        for l in v.all("use_backend").collect::<Vec<_>>() {
            match rule_condition(l.words.get(2..).unwrap_or_default(), acls, ctx) {
                Ok((_, cond)) if !l.word(1).is_empty() && !l.word(1).contains('%') => {
                    choices.push((cond, l.word(1).to_string(), l.at()));
                    self.use_line(l);
                }
                Ok(_) => self.drop_line(head, l, "a backend named by an expression has no equivalent"),
                Err(reason) => self.drop_line(head, l, &reason),
            }
        }
        let default = v
            .last("default_backend")
            .map(|l| (l.word(1).to_string(), l.at(), l))
            .or_else(|| {
                (v.kind == super::super::sections::Kind::Listen && v.is_backend())
                    .then(|| (v.name.clone(), v.header.at(), v.header))
            });
        if let Some((_, _, l)) = &default {
            self.use_line(l);
        }
        let mut targets: Vec<String> = Vec::new();
        let mut default_plain = None;
        let all_choices: Vec<(Dnf, String, String)> = choices
            .into_iter()
            .chain(default.clone().map(|(b, at, _)| (Dnf::always(), b, at)))
            .collect();
        let last = all_choices.len().saturating_sub(1);
        for (n, (cond, backend, at)) in all_choices.iter().enumerate() {
            if !targets.contains(backend) {
                targets.push(backend.clone());
            }
            let Some(bv) = views.iter().find(|b| b.is_backend() && b.name == *backend) else {
                let mut t = Table::default();
                t.comment(&format!("{at}: backend `{backend}` is not defined"));
                head.comments.extend(t.comments);
                continue;
            };
            let (b_stops, b_edits, b_resp) = self.backend_rules(bv, &userlists);
            let is_default = n == last && default.is_some();
            let all_edits: Vec<(&Rule<'_>, &EditOp)> = edits
                .iter()
                .chain(b_edits.iter())
                .chain(b_resp.iter())
                .chain(resp.iter())
                .filter_map(|r| {
                    if let RuleKind::Edit(op) = &r.kind {
                        Some((r, op))
                    } else {
                        None
                    }
                })
                .collect();
            let compress = self.backend_compress(bv);
            if is_default && b_stops.is_empty() && all_edits.is_empty() && compress.is_none() {
                default_plain = Some((backend.clone(), at.clone()));
                continue;
            }
            for conj in &cond.0 {
                for r in &b_stops {
                    if let RuleKind::Stop(a) = &r.kind {
                        for c in &r.cond.0 {
                            specs.push(RouteSpec {
                                conj: conj.and(c),
                                action: a.clone(),
                                edits: Default::default(),
                                src: r.line.at(),
                            });
                        }
                    }
                }
                match split_by_edits(conj, &all_edits) {
                    Ok(variants) => {
                        for (c, mut e) in variants {
                            if let Some(cm) = &compress {
                                let _ = e_apply_compress(&mut e, cm);
                            }
                            specs.push(RouteSpec {
                                conj: c,
                                action: Action::Backend(backend.clone()),
                                edits: e,
                                src: at.clone(),
                            });
                        }
                    }
                    Err((where_, reason)) => {
                        let mut t = Table::default();
                        t.comment(&format!(
                            "UNCONVERTED: the route {at} to `{backend}`: {where_}: {reason}"
                        ));
                        head.comments.extend(t.comments);
                        self.push(Issue::dropped(
                            &where_.rsplit_once(':').map(|(f, _)| f.to_string()).unwrap_or_default(),
                            where_.rsplit_once(':').and_then(|(_, n)| n.parse().ok()).unwrap_or(0),
                            &format!("(route to {backend})"),
                            &reason,
                        ));
                    }
                }
            }
        }
        let _ = used_lists;
        if let Some((b, at)) = default_plain {
            head.set("default_backend", q(&b), &at);
        }
        for s in &specs {
            match route_table(s, true, &mut fe.matchers, "acl-") {
                Ok(t) => fe.routes.push(t),
                Err(reason) => {
                    let mut t = Table::default();
                    t.comment(&format!("UNCONVERTED route from {}: {reason}", s.src));
                    head.comments.extend(t.comments);
                    let (f, n) = s
                        .src
                        .rsplit_once(':')
                        .map(|(f, n)| (f.to_string(), n.parse().unwrap_or(0)))
                        .unwrap_or_default();
                    self.push(Issue::dropped(&f, n, "(route)", &reason));
                }
            }
        }
        self.write_side_files();
        targets
    }

    /// A backend's own `http-request`/`http-response` rules, read with its own ACLs.
    fn backend_rules<'v>(
        &mut self,
        bv: &View<'v>,
        userlists: &dyn Fn(&str) -> Option<String>,
    ) -> (Vec<Rule<'v>>, Vec<Rule<'v>>, Vec<Rule<'v>>) {
        let ctx = Ctx {
            http: bv.http,
            read_file: &read_acl_file,
        };
        let mut acls = Acls::default();
        for l in bv.all("acl") {
            acls.add(l.word(1), l.words.get(2..).unwrap_or_default(), &ctx);
            self.use_line(l);
        }
        let (mut stops, mut edits, mut resp) = (Vec::new(), Vec::new(), Vec::new());
        let mut t = Table::default();
        if bv.is_frontend() {
            return (stops, edits, resp);
        }
        for l in bv.all("http-request").collect::<Vec<_>>() {
            match http_request(l, l.words.get(1..).unwrap_or_default(), &acls, &ctx, userlists) {
                Ok(Some(r)) => {
                    self.use_line(l);
                    match r.kind {
                        RuleKind::Stop(_) => stops.push(r),
                        RuleKind::Edit(_) => edits.push(r),
                    }
                }
                Ok(None) => self.note(l, "not needed: tollgate always matches routes on the normalised path"),
                Err(reason) => self.drop_line(&mut t, l, &reason),
            }
        }
        for l in bv.all("redirect").collect::<Vec<_>>() {
            match rule_condition(l.words.get(1..).unwrap_or_default(), &acls, &ctx)
                .and_then(|(a, c)| Ok((super::rules::redirect(&a)?, c)))
            {
                Ok((p, cond)) => {
                    stops.push(Rule {
                        line: l,
                        cond,
                        kind: RuleKind::Stop(Action::Redirect(p)),
                    });
                    self.use_line(l);
                }
                Err(reason) => self.drop_line(&mut t, l, &reason),
            }
        }
        for l in bv.all("http-response").collect::<Vec<_>>() {
            match http_response(l, l.words.get(1..).unwrap_or_default(), &acls, &ctx) {
                Ok(r) => {
                    self.use_line(l);
                    resp.push(r);
                }
                Err(reason) => self.drop_line(&mut t, l, &reason),
            }
        }
        if let Some(b) = self
            .model
            .backends
            .iter_mut()
            .find(|b| b.head.get("name") == Some(q(&bv.name).as_str()))
        {
            for c in t.comments {
                if !b.head.comments.contains(&c) {
                    b.head.comments.push(c);
                }
            }
        }
        (stops, edits, resp)
    }

    /// A backend's `compression`: its routes' `compress`.
    fn backend_compress(&mut self, bv: &View<'_>) -> Option<String> {
        if bv.is_frontend() {
            return None;
        }
        let l = bv.all2("compression", "algo").last()?;
        let known: Vec<String> = l
            .words
            .iter()
            .skip(2)
            .filter(|a| a.as_str() == "gzip")
            .cloned()
            .collect();
        let mut pairs = vec![("algorithms".to_string(), arr(&known))];
        if let Some(t) = bv.all2("compression", "type").last() {
            pairs.push((
                "types".to_string(),
                arr(&t.words.iter().skip(2).cloned().collect::<Vec<_>>()),
            ));
            self.use_line(t);
        }
        self.note(
            l,
            "a backend's compression becomes the `compress` of each route to it (gzip only of HAProxy's algorithms)",
        );
        for l in bv.all2("compression", "offload") {
            self.note(
                l,
                "not needed: a response the server compressed already is forwarded as it is",
            );
        }
        Some(inline(&pairs))
    }

    fn write_side_files(&mut self) {
        for (name, users) in &self.g.userlists {
            if users.is_empty() {
                continue;
            }
            let file = format!("{name}.htpasswd");
            if self.model.side_files.iter().any(|(f, _)| *f == file) {
                continue;
            }
            let body: String = users.iter().map(|(u, h)| format!("{u}:{h}\n")).collect();
            self.model.side_files.push((file, body));
        }
    }

    fn tcp_routes(
        &mut self,
        v: &View<'_>,
        acls: &Acls,
        ctx: &Ctx<'_>,
        fe: &mut Frontend,
        head: &mut Table,
    ) -> Vec<String> {
        let mut allow: Vec<String> = Vec::new();
        let mut deny: Vec<String> = Vec::new();
        let mut specs: Vec<RouteSpec> = Vec::new();
        for l in v.all("tcp-request").collect::<Vec<_>>() {
            if self.used.contains(&super::addr(l)) {
                continue;
            }
            let stage = l.word(1);
            if stage == "inspect-delay" {
                if let Ok(ms) = time_ms(l.word(2)) {
                    self.model.timeouts.set("tls_inspect", q(&duration(ms)), &l.at());
                    self.note(
                        l,
                        "becomes the global `timeouts.tls_inspect`: how long an SNI route waits for the ClientHello",
                    );
                }
                continue;
            }
            let parsed = rule_condition(l.words.get(3..).unwrap_or_default(), acls, ctx);
            let (action, cond) = match parsed {
                Ok((_, c)) => (l.word(2), c),
                Err(reason) => {
                    self.drop_line(head, l, &reason);
                    continue;
                }
            };
            let only_source = |d: &Dnf| -> Option<Vec<String>> {
                let mut out = Vec::new();
                for c in &d.0 {
                    if !c.neg.is_empty() {
                        return None;
                    }
                    match c.pos.as_slice() {
                        [Test::Source(s)] => out.extend(s.iter().cloned()),
                        _ => return None,
                    }
                }
                Some(out)
            };
            match (stage, action) {
                ("content", "accept") if cond.0.iter().all(|c| c.pos.iter().all(|t| matches!(t, Test::SslHello))) => {
                    self.note(l, "not needed: tollgate reads the ClientHello itself for SNI routes");
                }
                ("connection" | "session", "reject") if only_source(&cond).is_some() => {
                    deny.extend(only_source(&cond).unwrap_or_default());
                    self.use_line(l);
                }
                ("connection" | "session", "accept") if only_source(&cond).is_some() => {
                    allow.extend(only_source(&cond).unwrap_or_default());
                    self.use_line(l);
                }
                ("connection" | "session", "reject") if cond.is_always() && !allow.is_empty() => self.use_line(l),
                ("content", "reject") => {
                    for c in &cond.0 {
                        specs.push(RouteSpec {
                            conj: c.clone(),
                            action: Action::Deny(403),
                            edits: Default::default(),
                            src: l.at(),
                        });
                    }
                    self.use_line(l);
                }
                _ => self.drop_line(
                    head,
                    l,
                    "this `tcp-request` rule has no equivalent (source access lists, SNI or source routes only)",
                ),
            }
        }
        if !allow.is_empty() {
            head.set("allow", arr(&allow), "tcp-request connection accept");
        }
        if !deny.is_empty() {
            head.set("deny", arr(&deny), "tcp-request connection reject");
        }
        let mut targets = Vec::new();
        for l in v.all("use_backend").collect::<Vec<_>>() {
            match rule_condition(l.words.get(2..).unwrap_or_default(), acls, ctx) {
                Ok((_, cond)) => {
                    for c in &cond.0 {
                        specs.push(RouteSpec {
                            conj: c.clone(),
                            action: Action::Backend(l.word(1).to_string()),
                            edits: Default::default(),
                            src: l.at(),
                        });
                    }
                    targets.push(l.word(1).to_string());
                    self.use_line(l);
                }
                Err(reason) => self.drop_line(head, l, &reason),
            }
        }
        let default = v
            .last("default_backend")
            .map(|l| (l.word(1).to_string(), l.at(), l))
            .or_else(|| {
                (v.kind == super::super::sections::Kind::Listen && v.is_backend())
                    .then(|| (v.name.clone(), v.header.at(), v.header))
            });
        if let Some((b, at, l)) = default {
            head.set("default_backend", q(&b), &at);
            targets.push(b);
            self.use_line(l);
        }
        // tollgate tries source-only routes at accept, before any SNI route.
        let is_source_only =
            |s: &RouteSpec| s.conj.pos.iter().all(|t| matches!(t, Test::Source(_))) && !s.conj.pos.is_empty();
        let before: Vec<String> = specs.iter().map(|s| s.src.clone()).collect();
        specs.sort_by_key(|s| !is_source_only(s));
        if specs.iter().map(|s| s.src.clone()).collect::<Vec<_>>() != before {
            self.note(v.header, "source-only routes are tried first (at accept, before the ClientHello): their order moved ahead of SNI routes");
        }
        for s in &specs {
            match route_table(s, false, &mut fe.matchers, "acl-") {
                Ok(t) => fe.routes.push(t),
                Err(reason) => {
                    let (f, n) = s
                        .src
                        .rsplit_once(':')
                        .map(|(f, n)| (f.to_string(), n.parse().unwrap_or(0)))
                        .unwrap_or_default();
                    head.comment(&format!("UNCONVERTED route from {}: {reason}", s.src));
                    self.push(Issue::dropped(&f, n, "(route)", &reason));
                }
            }
        }
        targets
    }
}

fn e_apply_compress(e: &mut super::rules::Edits, c: &str) -> Result<(), String> {
    e.apply(&EditOp::Compress(c.to_string()), "")
}

fn tls_version(v: &str, notes: &mut Vec<String>) -> Option<String> {
    match v {
        "TLSv1.3" => Some("1.3".into()),
        "TLSv1.2" => Some("1.2".into()),
        _ => {
            notes.push(format!("{v} is not offered: tollgate speaks TLS 1.2 and 1.3"));
            Some("1.2".into())
        }
    }
}

fn map_ciphers(list: &str, notes: &mut Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for c in list.split(':').filter(|c| !c.is_empty()) {
        match OPENSSL_CIPHERS.iter().find(|(o, _)| *o == c) {
            Some((_, r)) => out.push((*r).to_string()),
            None => skipped.push(c.to_string()),
        }
    }
    if !skipped.is_empty() && !out.is_empty() {
        notes.push(format!(
            "TLS 1.2 suites rustls does not offer were left out: {}",
            skipped.join(":")
        ));
    }
    out
}

fn map_suites(list: &str, notes: &mut Vec<String>) -> Vec<String> {
    let known = [
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
    ];
    let (ok, skipped): (Vec<&str>, Vec<&str>) = list
        .split(':')
        .filter(|c| !c.is_empty())
        .partition(|c| known.contains(c));
    if !skipped.is_empty() {
        notes.push(format!("TLS 1.3 suites left out: {}", skipped.join(":")));
    }
    ok.into_iter().map(str::to_string).collect()
}

/// `:80`, `*:80`, `1.2.3.4:80`, `[::]:80`, `:::80`, `ipv6@:80`, ranges `:8000-8002`, lists.
pub(crate) fn bind_addrs(spec: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for a in spec.split(',') {
        let (family, a) = match a.split_once('@') {
            Some(("ipv4" | "tcp" | "tcp4", rest)) => (Some(4), rest),
            Some(("ipv6" | "tcp6", rest)) => (Some(6), rest),
            Some(("quic4" | "quic6", _)) => {
                return Err("a QUIC bind: tollgate's HTTP/3 is `[frontend.quic] bind` on a TLS frontend".into());
            }
            Some((p, _)) => return Err(format!("a `{p}@` address has no equivalent: frontends bind IP:port")),
            None if a.starts_with('/') => {
                return Err("a Unix socket bind has no equivalent: frontends bind IP:port".into());
            }
            None => (None, a),
        };
        let (host, ports) = a.rsplit_once(':').ok_or_else(|| format!("`{a}` has no port"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = if host.is_empty() || host == "*" {
            if family == Some(6) {
                "[::]".to_string()
            } else {
                "0.0.0.0".to_string()
            }
        } else if host.contains(':') {
            format!("[{host}]")
        } else {
            host.parse::<std::net::IpAddr>()
                .map_err(|_| format!("`{host}`: a frontend binds an IP address, not a name"))?;
            host.to_string()
        };
        let (lo, hi) = match ports.split_once('-') {
            Some((a, b)) => (a, b),
            None => (ports, ports),
        };
        let lo: u16 = lo.parse().map_err(|_| format!("`{ports}` is not a port"))?;
        let hi: u16 = hi.parse().map_err(|_| format!("`{ports}` is not a port"))?;
        if hi < lo || hi - lo > 64 {
            return Err(format!(
                "the port range `{ports}` is not one tollgate expands (at most 65 ports)"
            ));
        }
        for p in lo..=hi {
            out.push(format!("{host}:{p}"));
        }
    }
    Ok(out)
}
