//! A frontend's routes: HTTP (the stopping rules, then each backend choice with its
//! backend's rules and every rewrite that applies) and TCP (access lists, SNI and source
//! routes). See `rules` for how HAProxy's rule order becomes route order.

use super::super::Issue;
use super::super::cond::{Acls, Conj, Ctx, Dnf, Test};
use super::super::emit::{Frontend, Table, arr, inline, q};
use super::super::lexer::Line;
use super::frontend::{no_files, read_acl_file};
use super::rules::{
    Action, EditOp, RouteSpec, Rule, RuleKind, http_request, http_response, route_table, rule_condition, split_by_edits,
};
use super::values::{duration, time_ms};
use super::{Builder, View};

/// The backend traffic no rule routed goes to: `default_backend`, or a `listen`'s own
/// servers; with the line that says so.
fn default_choice<'v>(v: &View<'v>) -> Option<(String, String, &'v Line)> {
    v.last("default_backend")
        .map(|l| (l.word(1).to_string(), l.at(), l))
        .or_else(|| {
            (v.kind == super::super::sections::Kind::Listen && v.is_backend())
                .then(|| (v.name.clone(), v.header.at(), v.header))
        })
}

/// A rule after `http-request allow if C` runs only where C does not hold.
fn guarded<'a>(mut rule: Rule<'a>, guards: &[Dnf]) -> Result<Rule<'a>, String> {
    for g in guards {
        rule.cond = rule.cond.and(&g.not()?)?;
    }
    Ok(rule)
}

impl Builder<'_, '_> {
    /// `redirect ...` lines (the keyword before `http-request redirect`): run after the
    /// `http-request` rules, as HAProxy runs them.
    fn legacy_redirects<'v>(
        &mut self,
        v: &View<'v>,
        acls: &Acls,
        ctx: &Ctx<'_>,
        stops: &mut Vec<Rule<'v>>,
        t: &mut Table,
    ) {
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
                Err(reason) => self.drop_line(t, l, &reason),
            }
        }
    }

    /// `http-request allow [if C]`: the rules after it are skipped where C holds.
    fn allow_rule(&mut self, l: &Line, acls: &Acls, ctx: &Ctx<'_>, guards: &mut Vec<Dnf>, t: &mut Table) {
        match rule_condition(l.words.get(1..).unwrap_or_default(), acls, ctx) {
            Ok((action, cond)) if action.len() == 1 => {
                guards.push(cond);
                self.note(
                    l,
                    "the rules after it carry its negation: they apply only where it does not hold",
                );
            }
            Ok(_) => self.drop_line(t, l, "`allow` takes no argument"),
            Err(reason) => self.drop_line(t, l, &reason),
        }
    }

    pub(super) fn http_routes(
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
        let mut guards: Vec<Dnf> = Vec::new();
        for l in v.all("http-request").collect::<Vec<_>>() {
            if self.used.contains(&super::addr(l)) {
                continue;
            }
            if l.word(1) == "set-header" && l.word(3) == "%[unique-id]" {
                head.set("request_id", inline(&[("header".into(), q(l.word(2)))]), &l.at());
                self.note(l, "the ID is a UUIDv7 made by tollgate, not `unique-id-format`");
                continue;
            }
            if l.word(1) == "set-header" && l.word(2).eq_ignore_ascii_case("x-forwarded-proto") {
                self.note(l, "tollgate sets X-Forwarded-Proto itself: `forwarded = \"x-forwarded-for\"` (which also appends X-Forwarded-For)");
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
            if l.word(1) == "allow" {
                self.allow_rule(l, acls, ctx, &mut guards, head);
                continue;
            }
            match http_request(l, l.words.get(1..).unwrap_or_default(), acls, ctx, &userlists)
                .and_then(|r| r.map(|r| guarded(r, &guards)).transpose())
            {
                Ok(Some(rule)) if rule.cond.0.is_empty() => {
                    self.note(l, "never reached: an `http-request allow` before it holds for every request it would");
                }
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
        self.legacy_redirects(v, acls, ctx, &mut stops, head);
        let mut resp: Vec<Rule<'_>> = Vec::new();
        for l in v
            .all("http-response")
            .chain(v.all("http-after-response"))
            .collect::<Vec<_>>()
        {
            if l.word(1) == "set-header" && l.word(3) == "%[unique-id]" && l.words.len() == 4 {
                let pairs = [
                    ("header".to_string(), q(l.word(2))),
                    ("response".to_string(), "true".to_string()),
                ];
                head.set("request_id", inline(&pairs), &l.at());
                self.note(l, "the request ID goes back to the client too (`response = true`); it is a UUIDv7 made by tollgate, on its own answers as well");
                continue;
            }
            match http_response(l, l.words.get(1..).unwrap_or_default(), acls, ctx) {
                Ok(r) => {
                    self.after_response_note(l);
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
        let default = default_choice(v);
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
                    Ok((variants, skipped, notes)) => {
                        for (line, note) in notes {
                            self.note(line, &note);
                        }
                        for (line, reason) in skipped {
                            let mut t = Table::default();
                            self.drop_line(&mut t, line, &reason);
                            for c in t.comments {
                                if !head.comments.contains(&c) {
                                    head.comments.push(c);
                                }
                            }
                        }
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
            read_file: if self.g.files { &read_acl_file } else { &no_files },
        };
        let mut acls = Acls::default();
        for l in bv.all("acl") {
            acls.add(l.word(1), l.words.get(2..).unwrap_or_default(), &ctx);
            self.use_line(l);
        }
        let (mut stops, mut edits, mut resp) = (Vec::new(), Vec::new(), Vec::new());
        let mut t = Table::default();
        let mut guards: Vec<Dnf> = Vec::new();
        if bv.is_frontend() {
            return (stops, edits, resp);
        }
        for l in bv.all("http-request").collect::<Vec<_>>() {
            if l.word(1) == "allow" {
                self.allow_rule(l, &acls, &ctx, &mut guards, &mut t);
                continue;
            }
            match http_request(l, l.words.get(1..).unwrap_or_default(), &acls, &ctx, userlists)
                .and_then(|r| r.map(|r| guarded(r, &guards)).transpose())
            {
                Ok(Some(r)) if r.cond.0.is_empty() => {
                    self.note(
                        l,
                        "never reached: an `http-request allow` before it holds for every request it would",
                    );
                }
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
        self.legacy_redirects(bv, &acls, &ctx, &mut stops, &mut t);
        for l in bv
            .all("http-response")
            .chain(bv.all("http-after-response"))
            .collect::<Vec<_>>()
        {
            match http_response(l, l.words.get(1..).unwrap_or_default(), &acls, &ctx) {
                Ok(r) => {
                    self.after_response_note(l);
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
        let c = self.compression(bv, l);
        self.note(
            l,
            "a backend's compression becomes the `compress` of each route to it (gzip only of HAProxy's algorithms)",
        );
        Some(c)
    }

    fn after_response_note(&mut self, l: &Line) {
        if l.word(0) == "http-after-response" {
            self.note(l, "applied to the server's responses only: tollgate's own answers (errors, redirects, returns) carry exactly what their route says");
        } else {
            self.use_line(l);
        }
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

    pub(super) fn tcp_routes(
        &mut self,
        v: &View<'_>,
        acls: &Acls,
        ctx: &Ctx<'_>,
        fe: &mut Frontend,
        head: &mut Table,
    ) -> Vec<String> {
        let mut allow: Vec<String> = Vec::new();
        let mut hello_accepted = false;
        let (mut allow_at, mut deny_at): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
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
            let only_not_source = |d: &Dnf| -> Option<Vec<String>> {
                match d.0.as_slice() {
                    [c] if c.pos.is_empty() && !c.neg.is_empty() => c
                        .neg
                        .iter()
                        .map(|t| if let Test::Source(s) = t { Some(s.clone()) } else { None })
                        .collect::<Option<Vec<_>>>()
                        .map(|v| v.concat()),
                    _ => None,
                }
            };
            match (stage, action) {
                ("connection" | "session", "reject") if only_not_source(&cond).is_some() => {
                    allow.extend(only_not_source(&cond).unwrap_or_default());
                    allow_at.push(l.at());
                    self.use_line(l);
                }
                ("content", "reject") if cond.is_always() && hello_accepted => {
                    self.note(l, "not needed: a frontend with SNI routes closes a connection that does not open with a ClientHello");
                }
                ("content", "accept") if cond.0.iter().all(|c| c.pos.iter().all(|t| matches!(t, Test::SslHello))) => {
                    hello_accepted = true;
                    self.note(l, "not needed: tollgate reads the ClientHello itself for SNI routes");
                }
                ("connection" | "session", "reject") if only_source(&cond).is_some() => {
                    deny.extend(only_source(&cond).unwrap_or_default());
                    deny_at.push(l.at());
                    self.use_line(l);
                }
                ("connection" | "session", "accept") if only_source(&cond).is_some() => {
                    allow.extend(only_source(&cond).unwrap_or_default());
                    allow_at.push(l.at());
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
            head.set("allow", arr(&allow), &allow_at.join(", "));
        }
        if !deny.is_empty() {
            head.set("deny", arr(&deny), &deny_at.join(", "));
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
        let default = default_choice(v);
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
