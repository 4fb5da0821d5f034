//! A `frontend` (or the frontend half of a `listen`): binds and TLS (a frontend whose binds
//! differ in TLS or PROXY protocol becomes one tollgate frontend per kind), the stats page
//! and Prometheus exporter (tollgate's `[admin]`), limits from stick tables, and the routes.

use super::super::cond::{Acls, Ctx};
use super::super::emit::{Frontend, Table, arr, inline, q};
use super::super::lexer::Line;
use super::super::{Issue, ParseError};
use super::values::{duration, log_template, time_ms};
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

pub(super) fn no_files(path: &str) -> Result<String, String> {
    Err(format!("`-f {path}`: files are not read here"))
}

pub(super) fn read_acl_file(path: &str) -> Result<String, String> {
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
        let upgraded;
        let to_http = !v.http
            && v.last("default_backend")
                .and_then(|l| views.iter().find(|b| b.is_backend() && b.name == l.word(1)))
                .is_some_and(|b| b.http);
        let v = if to_http {
            upgraded = View {
                http: true,
                ..v.clone()
            };
            self.note(v.header, "a TCP frontend whose default backend is in HTTP mode: HAProxy upgrades its connections to HTTP, and it is converted as an HTTP frontend");
            &upgraded
        } else {
            v
        };
        let ctx = Ctx {
            http: v.http,
            read_file: if self.g.files { &read_acl_file } else { &no_files },
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
        if groups.is_empty() {
            let mut t = Table::default();
            self.drop_line(
                &mut t,
                v.header,
                "no bind tollgate can use (IP:port): the proxy is not converted",
            );
            self.model.trailing.extend(head.comments);
            self.model.trailing.extend(t.comments);
            for (l, _) in &v.lines {
                self.use_line(l);
            }
            return Ok(());
        }
        head.set("name", q(&v.name), &v.header.at());
        if let Some(l) = v.last("mode")
            && matches!(l.word(1), "http" | "tcp")
        {
            head.set("mode", q(l.word(1)), &l.at());
            self.use_line(l);
        }
        if to_http {
            head.set("mode", q("http"), &v.header.at());
        }
        if let Some(l) = v.last("maxconn")
            && let Ok(n) = l.word(1).parse::<u64>()
        {
            head.set("maxconn", n.to_string(), &l.at());
            self.use_line(l);
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
        if !head.has("default_backend") && fe.routes.is_empty() {
            let mut r = Table::default();
            r.set("name", q(&format!("{} (no backend)", v.header.at())), "");
            r.set("deny", if v.http { "503".into() } else { "true".into() }, "");
            fe.routes.push(r);
            self.note(
                v.header,
                "no backend: every request gets 503 (TCP: the connection is closed), as in HAProxy",
            );
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
                // Limit names are unique in a config: each kind of bind counts on its own.
                for l in &mut f.limits {
                    if let Some(n) = l.get("name").map(|n| n.trim_matches('"').to_string()) {
                        l.set("name", q(&format!("{n}-{suffix}")), "");
                    }
                }
                if !f.limits.is_empty() {
                    self.note(v.header, "its stick table is counted per kind of bind here: a client's requests over TLS and in clear count separately");
                }
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
                let key = if self.g.files && std::path::Path::new(&format!("{c}.key")).is_file() {
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
        let mut t = Table::default();
        for l in v.lines.iter().filter(|(_, inh)| !inh).map(|(l, _)| *l) {
            if self.used.contains(&super::addr(l)) {
                continue;
            }
            if matches!(l.word(0), "http-request" | "tcp-request" | "acl" | "http-response") {
                self.drop_line(
                    &mut t,
                    l,
                    "[admin] has no access rules: bind it to loopback or a management network, and set `stats_auth`",
                );
            } else {
                self.note(l, "part of a stats-only proxy: not needed for [admin]");
            }
        }
        self.model.admin.comments.extend(t.comments);
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
        if self.g.files && p.is_dir() {
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
            // connect, server and queue are the backends' to apply.
            if self.g.timeouts.get(name) == Some(&ms)
                || v.inherited(l)
                || matches!(name, "connect" | "server" | "queue")
            {
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
        let proto_rule = v
            .all("http-request")
            .any(|l| l.word(1) == "set-header" && l.word(2).eq_ignore_ascii_case("x-forwarded-proto"));
        let on = fe.is_some_and(|(on, _)| on) || any_backend_with || proto_rule;
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

    /// `compression algo` (the line `l`) and `type` of a proxy as a `compress` value.
    pub(super) fn compression(&mut self, v: &View<'_>, l: &Line) -> String {
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
        let mut pairs = vec![("algorithms".to_string(), arr(&known))];
        if let Some(t) = v.all2("compression", "type").last() {
            pairs.push(("types".to_string(), arr(&media_types(t))));
            self.use_line(t);
        }
        for o in v.all2("compression", "offload") {
            self.note(
                o,
                "not needed: a response the server compressed already is forwarded as it is",
            );
        }
        inline(&pairs)
    }

    /// unique-id, compression and logging keys of an http frontend.
    fn http_frontend_keys(&mut self, v: &View<'_>, head: &mut Table) {
        head.set(
            "forward_target",
            q("original"),
            "HAProxy forwards the target as the client sent it",
        );
        if let Some(h) = v.last("unique-id-header").filter(|_| !head.has("request_id")) {
            head.set("request_id", inline(&[("header".into(), q(h.word(1)))]), &h.at());
        }
        if let Some(h) = v.last("unique-id-header") {
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
            let c = self.compression(v, l);
            head.set("compress", c, &l.at());
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
            Some(("ipv4" | "tcp" | "tcp4" | "mptcp" | "mptcp4", rest)) => (Some(4), rest),
            Some(("ipv6" | "tcp6" | "mptcp6", rest)) => (Some(6), rest),
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

/// HAProxy compares `compression type`s as prefixes: `text/` is every text type.
fn media_types(l: &Line) -> Vec<String> {
    l.words
        .iter()
        .skip(2)
        .map(|t| {
            if t.ends_with('/') {
                format!("{t}*")
            } else if t.contains('/') {
                t.clone()
            } else {
                format!("{t}/*")
            }
        })
        .collect()
}
