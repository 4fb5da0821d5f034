//! A `backend` (or the backend half of a `listen`): mode, balancing, retries, timeouts,
//! cookie persistence, servers (with `default-server`), and active checks.

use super::super::ParseError;
use super::super::emit::{Backend, Table, inline, q};
use super::super::lexer::Line;
use super::values::{duration, time_ms};
use super::{Builder, View};

/// Server keywords with no argument.
const FLAGS: &[&str] = &[
    "check",
    "no-check",
    "backup",
    "no-backup",
    "send-proxy",
    "send-proxy-v2",
    "send-proxy-v2-ssl",
    "send-proxy-v2-ssl-cn",
    "no-send-proxy",
    "ssl",
    "no-ssl",
    "check-ssl",
    "no-check-ssl",
    "check-send-proxy",
    "agent-check",
    "no-agent-check",
    "disabled",
    "enabled",
    "non-stick",
    "tfo",
    "no-tls-tickets",
    "tls-tickets",
    "allow-0rtt",
    "no-sslv3",
    "no-tlsv10",
    "no-tlsv11",
    "no-tlsv12",
    "no-tlsv13",
    "force-sslv3",
    "force-tlsv10",
    "force-tlsv11",
    "force-tlsv12",
    "force-tlsv13",
    "no-verifyhost",
    "stick",
];

/// What a server line said, after `default-server`.
#[derive(Default)]
struct ServerLine {
    check: bool,
    agent: bool,
    inter: Option<(u64, String)>,
    rise: Option<(u64, String)>,
    fall: Option<(u64, String)>,
    agent_inter: Option<(u64, String)>,
    on_marked_down: bool,
    check_ssl: bool,
    error_limit: Option<u64>,
    observe: bool,
}

impl Builder<'_, '_> {
    pub(super) fn backend(&mut self, v: &View<'_>) -> Result<(), ParseError> {
        let mut be = Backend::default();
        let h = &mut be.head;
        h.set("name", q(&v.name), &v.header.at());
        self.use_line(v.header);
        if let Some(l) = v.last("mode") {
            match l.word(1) {
                "http" | "tcp" => {
                    h.set("mode", q(l.word(1)), &l.at());
                    self.use_line(l);
                }
                _ => self.drop_line(h, l, "only `mode http` and `mode tcp` have an equivalent"),
            }
        }
        self.balance(v, &mut be.head);
        if let Some(l) = v.last("retries") {
            let n: u64 = l
                .word(1)
                .parse()
                .map_err(|_| ParseError::at(&l.file, l.line, "`retries` needs a number"))?;
            if n != 3 {
                be.head.set("retries", n.min(16).to_string(), &l.at());
            }
            self.use_line(l);
        }
        self.backend_timeouts(v, &mut be.head);
        let sticky = self.cookie(v, &mut be);
        match v.option("redispatch") {
            Some((true, l)) => {
                self.note(l, "tollgate retries another server for every failed connect; `redispatch = true` (the default) covers sticky requests");
            }
            Some((false, l)) if sticky => {
                be.head.set("redispatch", "false".into(), &l.at());
                self.use_line(l);
            }
            Some((false, l)) => self.note(l, "tollgate's retries prefer a server not tried yet whatever this says; it matters only with cookie persistence"),
            None if sticky => be.head.set("redispatch", "false".into(), "HAProxy's default: no option redispatch"),
            None => {}
        }
        self.servers(v, &mut be)?;
        // A backend's `stick-table` and `option forwardfor` are read by the frontends that
        // route here (their limits and `forwarded` key).
        self.model.backends.push(be);
        Ok(())
    }

    fn balance(&mut self, v: &View<'_>, h: &mut Table) {
        let Some(l) = v.last("balance") else { return };
        let algo = l.word(1);
        let hash_key = match algo {
            "roundrobin" | "leastconn" | "first" => {
                h.set("balance", q(algo), &l.at());
                self.use_line(l);
                None
            }
            a if a.starts_with("random") => {
                h.set("balance", q("random"), &l.at());
                if a != "random" && a != "random(2)" {
                    self.note(l, "tollgate's random draws two servers (power of two choices)");
                } else {
                    self.use_line(l);
                }
                None
            }
            "static-rr" => {
                h.set("balance", q("roundrobin"), &l.at());
                self.note(
                    l,
                    "static-rr becomes roundrobin: weights changed at run time take effect at once",
                );
                None
            }
            "source" => Some("source".to_string()),
            "uri" => {
                if l.words.len() > 2 {
                    self.note(l, "`uri` options (whole, len, depth, path-only) are not kept: the whole path and query are hashed");
                }
                Some("uri".to_string())
            }
            a if a.starts_with("hdr(") && a.ends_with(')') => {
                Some(format!("header:{}", a.trim_start_matches("hdr(").trim_end_matches(')')))
            }
            a if a.starts_with("rdp-cookie") || a.starts_with("url_param") || a.starts_with("hash") => {
                self.drop_line(h, l, "this balance algorithm has no equivalent: roundrobin is used");
                return;
            }
            _ => {
                self.drop_line(h, l, "unknown balance algorithm: roundrobin is used");
                return;
            }
        };
        let Some(key) = hash_key else { return };
        h.set("balance", q("hash"), &l.at());
        h.set("hash_key", q(&key), &l.at());
        self.use_line(l);
        let factor = v.last("hash-balance-factor");
        match factor {
            Some(f) => {
                let n: u64 = f.word(1).parse().unwrap_or(0);
                h.set(
                    "hash_balance_factor",
                    (if n < 100 { 0 } else { n.min(1000) }).to_string(),
                    &f.at(),
                );
                self.use_line(f);
            }
            None => h.set("hash_balance_factor", "0".into(), "HAProxy's default: no bounded loads"),
        }
        match v.last("hash-type") {
            Some(t) if t.word(1) == "consistent" => self.use_line(t),
            Some(t) => self.note(t, "tollgate's hash is always consistent (a ring by server name): keys map to other servers than HAProxy's map-based hash"),
            None => self.note(l, "HAProxy's default hash is map-based; tollgate's is consistent (a ring by server name): keys map to other servers"),
        }
    }

    fn backend_timeouts(&mut self, v: &View<'_>, h: &mut Table) {
        let mut own = Vec::new();
        let mut own_at: Vec<String> = Vec::new();
        for (name, key) in [("connect", "connect"), ("server", "server")] {
            let Some(l) = v.timeout(name) else { continue };
            let Ok(ms) = time_ms(l.word(2)) else { continue };
            self.use_line(l);
            if self.g.timeouts.get(name) != Some(&ms) {
                own.push((key.to_string(), q(&duration(ms))));
                own_at.push(l.at());
            }
        }
        for name in [
            "queue",
            "tunnel",
            "check",
            "http-request",
            "http-keep-alive",
            "client",
            "tarpit",
            "client-fin",
            "server-fin",
        ] {
            let Some(l) = v.timeout(name) else { continue };
            let Ok(ms) = time_ms(l.word(2)) else { continue };
            if self.g.timeouts.get(name).is_none_or(|g| *g == ms)
                || v.is_frontend()
                || name == "check"
                || name == "tarpit"
            {
                self.use_line(l);
            } else {
                self.note(
                    l,
                    &format!("tollgate's `timeouts` for `{name}` are global: this backend's own value is not applied"),
                );
            }
        }
        if !own.is_empty() {
            h.set("timeouts", inline(&own), &own_at.join(", "));
        }
    }

    /// `cookie NAME insert ...` → `[backend.sticky]`; true when set.
    fn cookie(&mut self, v: &View<'_>, be: &mut Backend) -> bool {
        let Some(l) = v.last("cookie") else { return false };
        let mut t = Table::default();
        let mut insert = false;
        let mut flags = std::collections::BTreeSet::new();
        let mut words = l.words.iter().skip(2);
        let mut domain = None;
        while let Some(w) = words.next() {
            match w.as_str() {
                "insert" => insert = true,
                "domain" => domain = words.next().cloned(),
                "maxidle" | "maxlife" | "attr" => {
                    let _ = words.next();
                    flags.insert(w.clone());
                }
                other => {
                    flags.insert(other.to_string());
                }
            }
        }
        if !insert {
            self.drop_line(
                &mut be.head,
                l,
                "only `insert` cookies have an equivalent (`rewrite` and `prefix` modes do not)",
            );
            return false;
        }
        t.set("cookie", q(l.word(1)), &l.at());
        t.set("httponly", flags.contains("httponly").to_string(), &l.at());
        t.set("nocache", flags.contains("nocache").to_string(), &l.at());
        if flags.contains("secure") {
            t.set("secure", "true".into(), &l.at());
        }
        if let Some(d) = domain {
            t.set("domain", q(&d), &l.at());
        }
        let mut diffs = vec!["values are hashes of the backend's and server's names, not the `cookie` value of each server: a client's HAProxy cookie is balanced once more".to_string()];
        if !flags.contains("indirect") {
            diffs.push("the cookie is always removed before the server (as with `indirect`)".into());
        }
        let ignored: Vec<&String> = flags
            .iter()
            .filter(|f| !["indirect", "nocache", "httponly", "secure"].contains(&f.as_str()))
            .collect();
        if !ignored.is_empty() {
            diffs.push(format!(
                "not kept: {}",
                ignored.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
            ));
        }
        self.note(l, &diffs.join("; "));
        be.sticky = Some(t);
        true
    }

    fn servers(&mut self, v: &View<'_>, be: &mut Backend) -> Result<(), ParseError> {
        let defaults: Vec<&Line> = v.all("default-server").collect();
        let mut lines: Vec<(&Line, ServerLine)> = Vec::new();
        for l in v.all("server") {
            let mut s = Table::default();
            let name = l.word(1);
            let address = l.word(2);
            if name.is_empty() || address.is_empty() {
                return Err(ParseError::at(&l.file, l.line, "`server` needs a name and an address"));
            }
            s.set("name", q(name), &l.at());
            match server_address(address) {
                Ok(a) => s.set("address", q(&a), &l.at()),
                Err(reason) => {
                    self.drop_line(&mut be.head, l, &reason);
                    continue;
                }
            }
            let mut words: Vec<String> = Vec::new();
            for d in &defaults {
                words.extend(d.words.iter().skip(1).cloned());
                self.use_line(d);
            }
            words.extend(l.words.iter().skip(3).cloned());
            let mut sl = ServerLine::default();
            let mut agent_port = None;
            let mut disabled = false;
            let mut ignored = Vec::new();
            let mut i = 0;
            while let Some(w) = words.get(i) {
                i += 1;
                let arg = words.get(i).cloned().unwrap_or_default();
                let takes_arg = !FLAGS.contains(&w.as_str());
                if takes_arg {
                    i += 1;
                }
                let num = || {
                    arg.parse::<u64>()
                        .map_err(|_| ParseError::at(&l.file, l.line, &format!("`{w}` needs a number, not `{arg}`")))
                };
                match w.as_str() {
                    "check" => sl.check = true,
                    "no-check" => sl.check = false,
                    "agent-check" => sl.agent = true,
                    "no-agent-check" => {
                        sl.agent = false;
                        s.remove("agent_port");
                    }
                    "inter" => {
                        sl.inter = Some((time_ms(&arg).map_err(|m| ParseError::at(&l.file, l.line, &m))?, l.at()))
                    }
                    "rise" => sl.rise = Some((num()?, l.at())),
                    "fall" => sl.fall = Some((num()?, l.at())),
                    "agent-inter" => {
                        sl.agent_inter = Some((time_ms(&arg).map_err(|m| ParseError::at(&l.file, l.line, &m))?, l.at()))
                    }
                    "weight" => s.set("weight", num()?.min(256).to_string(), &l.at()),
                    "maxconn" => s.set("maxconn", num()?.to_string(), &l.at()),
                    "backup" => s.set("backup", "true".into(), &l.at()),
                    "no-backup" => s.remove("backup"),
                    "send-proxy" => s.set("send_proxy", q("v1"), &l.at()),
                    "send-proxy-v2" | "send-proxy-v2-ssl" | "send-proxy-v2-ssl-cn" => {
                        s.set("send_proxy", q("v2"), &l.at())
                    }
                    "no-send-proxy" => s.remove("send_proxy"),
                    "ssl" => s.set("tls", "true".into(), &l.at()),
                    "no-ssl" => s.remove("tls"),
                    "verify" if arg == "none" => s.set("verify", "false".into(), &l.at()),
                    "verify" => s.remove("verify"),
                    "ca-file" => s.set("ca_file", q(&self.ca_path(&arg)), &l.at()),
                    "crt" => {
                        s.set("cert", q(&self.crt_path(&arg)), &l.at());
                        s.set("key", q(&self.crt_path(&arg)), &l.at());
                    }
                    "sni" => match arg.strip_prefix("str(").and_then(|a| a.strip_suffix(')')) {
                        Some(name) => s.set("sni", q(name), &l.at()),
                        None => ignored.push(format!("`sni {arg}` (a fixed `sni` only)")),
                    },
                    "alpn" | "proto" if arg == "h2" => s.set("proto", q("h2"), &l.at()),
                    "alpn" | "proto" if arg.starts_with("http/1") => {}
                    "slowstart" => s.set(
                        "slowstart",
                        q(&duration(
                            time_ms(&arg).map_err(|m| ParseError::at(&l.file, l.line, &m))?,
                        )),
                        &l.at(),
                    ),
                    "agent-port" => {
                        let n = num()?;
                        agent_port = Some(n);
                    }
                    "port" => s.set("check_port", num()?.to_string(), &l.at()),
                    "check-ssl" => sl.check_ssl = true,
                    "check-send-proxy" => s.set("check_send_proxy", "true".into(), &l.at()),
                    "on-marked-down" if arg == "shutdown-sessions" => sl.on_marked_down = true,
                    "observe" => sl.observe = true,
                    "error-limit" => sl.error_limit = Some(num()?),
                    "on-error" if arg == "mark-down" || arg == "sudden-death" || arg == "fail-check" => {}
                    "cookie" | "id" | "init-addr" | "resolvers" | "resolve-prefer" | "resolve-net" | "resolve-opts"
                    | "check-sni" | "check-alpn" | "check-proto" | "pool-max-conn" | "pool-low-conn"
                    | "pool-purge-delay" | "max-reuse" | "tfo" | "fastinter" | "downinter" | "no-tls-tickets"
                    | "tls-tickets" | "no-sslv3" | "no-tlsv10" | "no-tlsv11" | "non-stick" | "stick" | "ssl-reuse"
                    | "no-ssl-reuse" | "no-verifyhost" | "minconn" | "log-proto" | "ws" => {}
                    "ssl-min-ver" if arg == "TLSv1.3" => s.set("min_version", q("1.3"), &l.at()),
                    "ssl-min-ver" => {}
                    "ssl-max-ver" if arg == "TLSv1.2" => s.set("max_version", q("1.2"), &l.at()),
                    "disabled" => disabled = true,
                    "enabled" => disabled = false,
                    "maxqueue" => ignored.push(
                        "`maxqueue` (no per-server queue bound: backend `maxqueue` bounds the whole queue)".into(),
                    ),
                    other => ignored.push(format!("`{other}`")),
                }
            }
            // An agent port counts only with `agent-check` (a `default-server`'s may be undone).
            match agent_port {
                Some(p) if sl.agent => s.set("agent_port", p.to_string(), &l.at()),
                _ => s.remove("agent_port"),
            }
            // TLS settings count only with `ssl` (HAProxy ignores them otherwise).
            let mut ignored_tls = false;
            if !s.has("tls") {
                for k in ["ca_file", "verify", "sni", "cert", "key", "min_version", "max_version"] {
                    ignored_tls |= s.has(k);
                    s.remove(k);
                }
                sl.check_ssl = false;
            }
            if ignored_tls {
                self.note(
                    l,
                    "its TLS settings are not applied without `ssl` (HAProxy ignores them too)",
                );
            }
            if disabled {
                s.set("weight", "0".into(), &l.at());
                self.note(l, "`disabled`: weight 0, so it takes no traffic (`tollgate ctl set server B/S weight N` brings it in, as `enable server` would)");
            }
            if sl.observe
                && let Some(n) = sl.error_limit.or(Some(10))
            {
                be.head.set("error_limit", n.to_string(), &l.at());
            }
            if ignored.is_empty() {
                self.use_line(l);
            } else {
                self.push(super::super::Issue::dropped(
                    &l.file,
                    l.line,
                    &l.raw,
                    &format!("converted without {}", ignored.join(", ")),
                ));
                s.comment(&format!("UNCONVERTED part of {}: {}", l.at(), ignored.join(", ")));
                self.use_line(l);
            }
            be.servers.push(s);
            lines.push((l, sl));
        }
        for l in v.all("server-template") {
            self.drop_line(&mut be.head, l, "no equivalent for a template: give the servers a host name (re-resolved by [resolvers]) or list SRV records in [[backend.discover]]");
        }
        self.health(v, be, &lines);
        Ok(())
    }

    fn health(&mut self, v: &View<'_>, be: &mut Backend, lines: &[(&Line, ServerLine)]) {
        let checked: Vec<&(&Line, ServerLine)> = lines.iter().filter(|(_, s)| s.check || s.agent).collect();
        let httpchk = v.option("httpchk").filter(|(on, _)| *on);
        if checked.is_empty() {
            if let Some((_, l)) = httpchk {
                self.note(
                    l,
                    "no server has `check`: HAProxy checks none, and neither does tollgate",
                );
            }
            for l in v.all("http-check") {
                self.use_line(l);
            }
            return;
        }
        let mut h = Table::default();
        match httpchk {
            Some((_, l)) => {
                h.set("type", q("http"), &l.at());
                let args: Vec<&String> = l.words.iter().skip(2).collect();
                // HAProxy's method is OPTIONS unless given (with one argument, the URI).
                let (method, uri, version, host) = match args.as_slice() {
                    [] => ("OPTIONS", None, None, None),
                    [uri] => ("OPTIONS", Some(uri.as_str()), None, None),
                    [m, uri] => (m.as_str(), Some(uri.as_str()), None, None),
                    [m, uri, ver] => (m.as_str(), Some(uri.as_str()), Some(ver.as_str()), None),
                    [m, uri, ver, host, ..] => {
                        (m.as_str(), Some(uri.as_str()), Some(ver.as_str()), Some(host.as_str()))
                    }
                };
                if method != "GET" {
                    h.set("method", q(method), &l.at());
                }
                if let Some(host) = host {
                    h.set("host", q(host), &l.at());
                }
                if let Some(u) = uri.filter(|u| *u != "/") {
                    if u.starts_with('/') {
                        h.set("path", q(u), &l.at());
                    } else {
                        self.note(
                            l,
                            &format!("a check target `{u}` that is not a path: `/` is asked instead"),
                        );
                    }
                }
                if let Some(host) = version.and_then(|v| {
                    v.split("\r\n")
                        .find_map(|p| p.strip_prefix("Host:").or_else(|| p.strip_prefix("host:")))
                }) {
                    h.set("host", q(host.trim()), &l.at());
                }
                self.use_line(l);
            }
            None => {
                let first = checked.first().map(|(l, _)| l.at()).unwrap_or_default();
                h.set("type", q("tcp"), &first);
            }
        }
        for l in v.all("http-check").collect::<Vec<_>>() {
            self.http_check(l, &mut h, &mut be.head);
        }
        if let Some((on, l)) = v.option("tcp-check") {
            if on && v.all("tcp-check").next().is_some() {
                self.note(
                    l,
                    "a tcp check connects only: `tcp-check send/expect` sequences have no equivalent",
                );
            } else {
                self.use_line(l);
            }
        }
        // Per backend in tollgate: the first checked server's values.
        let first = checked.first().map(|(_, s)| s);
        if let Some((ms, at)) = first.and_then(|s| s.inter.clone()) {
            h.set("interval", q(&duration(ms.max(100))), &at);
        }
        if let Some((n, at)) = first.and_then(|s| s.rise.clone()) {
            h.set("rise", n.clamp(1, 1000).to_string(), &at);
        }
        if let Some((n, at)) = first.and_then(|s| s.fall.clone()) {
            h.set("fall", n.clamp(1, 1000).to_string(), &at);
        }
        if let Some((ms, at)) = first.and_then(|s| s.agent_inter.clone()) {
            h.set("agent_interval", q(&duration(ms.max(100))), &at);
        }
        if let Some(l) = v.timeout("check")
            && let Ok(ms) = time_ms(l.word(2))
        {
            let connect = self.g.timeouts.get("connect").copied().unwrap_or(5000);
            h.set("timeout", q(&duration(ms + connect)), &l.at());
            self.note(
                l,
                "tollgate's check `timeout` bounds the whole check: `timeout connect` + `timeout check`",
            );
        }
        if let Some(n) = self.g.spread {
            h.set("jitter", q(&format!("{n}%")), "global spread-checks");
        }
        if let Some((l, _)) = lines.iter().find(|(_, s)| s.on_marked_down) {
            h.set("on_marked_down", q("shutdown-sessions"), &l.at());
        }
        if checked.iter().all(|(_, s)| s.check_ssl)
            && be.servers.iter().all(|s| s.has("tls") || !s.has("check"))
            && let Some((l, _)) = checked.first()
        {
            h.set("tls", "true".into(), &l.at());
        }
        let differ = checked.iter().any(|(_, s)| {
            s.inter.as_ref().map(|x| x.0) != first.and_then(|f| f.inter.as_ref().map(|x| x.0))
                || s.rise.as_ref().map(|x| x.0) != first.and_then(|f| f.rise.as_ref().map(|x| x.0))
                || s.fall.as_ref().map(|x| x.0) != first.and_then(|f| f.fall.as_ref().map(|x| x.0))
        });
        if differ && let Some((l, _)) = checked.get(1) {
            self.note(
                l,
                "`inter`/`rise`/`fall` are per backend in tollgate: the first checked server's values apply to all",
            );
        }
        for ((l, s), table) in lines.iter().zip(be.servers.iter_mut()) {
            if !s.check && !s.agent {
                table.set("check", "false".into(), &format!("{} (no `check`)", l.at()));
            }
            if s.agent && !s.check {
                self.note(
                    l,
                    "an agent without `check`: tollgate checks this server too (tcp), as agents run beside checks",
                );
            }
        }
        be.health = Some(h);
    }

    fn http_check(&mut self, l: &Line, h: &mut Table, head: &mut Table) {
        let w = |i: usize| l.word(i);
        match w(1) {
            "expect" if w(2) == "status" => match w(3).parse::<u16>() {
                Ok(n) => {
                    h.set("expect_status", n.to_string(), &l.at());
                    self.use_line(l);
                }
                Err(_) if w(3).contains('-') => {
                    h.set("expect_status", q(w(3)), &l.at());
                    self.use_line(l);
                }
                Err(_) => self.drop_line(head, l, "`expect status` with a list has no equivalent"),
            },
            "expect" if w(2) == "rstatus" => {
                let range = match w(3) {
                    "^2" | "^2.." | "^2[0-9][0-9]" | "^2[0-9]{2}" => Some("200-299"),
                    "^[23]" | "^(2|3)" | "^[23][0-9][0-9]" => Some("200-399"),
                    "^3" => Some("300-399"),
                    _ => None,
                };
                match range {
                    Some(r) => {
                        h.set("expect_status", q(r), &l.at());
                        self.use_line(l);
                    }
                    None => self.drop_line(head, l, "this `rstatus` regex has no range equivalent"),
                }
            }
            "expect" if w(2) == "string" => {
                h.set("expect_body", q(w(3)), &l.at());
                self.use_line(l);
            }
            "send" => {
                let mut i = 2;
                while i < l.words.len() {
                    match (w(i), w(i + 1), w(i + 2)) {
                        ("meth", m, _) => h.set("method", q(m), &l.at()),
                        ("uri", u, _) if u.starts_with('/') => h.set("path", q(u), &l.at()),
                        ("hdr", name, value) if name.eq_ignore_ascii_case("host") => {
                            h.set("host", q(value), &l.at());
                            i += 1;
                        }
                        ("ver", _, _) => {}
                        _ => {
                            self.drop_line(head, l, "only `meth`, `uri`, `ver` and a Host `hdr` of `http-check send` have an equivalent");
                            return;
                        }
                    }
                    i += 2;
                }
                self.use_line(l);
            }
            "disable-on-404" => self.drop_line(head, l, "no equivalent: a 404 is a failed check unless `expect_status` includes it"),
            _ => self.drop_line(head, l, "this `http-check` has no equivalent (status, a status range, a body substring, method, path and Host only)"),
        }
    }

    pub(super) fn crt_path(&self, p: &str) -> String {
        join_base(self.g.crt_base.as_deref(), p)
    }

    pub(super) fn ca_path(&self, p: &str) -> String {
        join_base(self.g.ca_base.as_deref(), p)
    }
}

fn join_base(base: Option<&str>, p: &str) -> String {
    match base {
        Some(b) if !p.starts_with('/') => format!("{}/{p}", b.trim_end_matches('/')),
        _ => p.to_string(),
    }
}

/// A server address as tollgate reads it.
fn server_address(a: &str) -> Result<String, String> {
    let a = a
        .strip_prefix("ipv4@")
        .or_else(|| a.strip_prefix("ipv6@"))
        .or_else(|| a.strip_prefix("tcp@"))
        .or_else(|| a.strip_prefix("mptcp@"))
        .or_else(|| a.strip_prefix("mptcp4@"))
        .or_else(|| a.strip_prefix("mptcp6@"))
        .unwrap_or(a);
    if a.starts_with('/') || a.contains('@') {
        return Err("a Unix socket or special address has no equivalent: servers are `IP:port` or `name:port`".into());
    }
    let (host, port) = match a.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && !h.ends_with(':') => (h, p),
        _ => {
            return Err(
                "a server without a port (HAProxy uses the client's destination port) has no equivalent".into(),
            );
        }
    };
    if port.starts_with('+') || port.starts_with('-') || port.parse::<u16>().is_err() {
        return Err("a port offset or range has no equivalent: servers have a fixed port".into());
    }
    if host.contains(':') && !host.starts_with('[') {
        return Ok(format!("[{host}]:{port}"));
    }
    Ok(format!("{host}:{port}"))
}
