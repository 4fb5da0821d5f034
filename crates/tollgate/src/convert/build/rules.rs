//! `http-request` / `http-response` rules and `use_backend` as tollgate routes.
//!
//! HAProxy runs a frontend's request rules in order (a `deny`, `redirect`, `return` or `auth`
//! stops them), then picks a backend (`use_backend`, first match; else `default_backend`),
//! then runs that backend's rules. tollgate's routes are one ordered list where the first
//! match decides, each carrying its own rewrites. So: the frontend's stopping rules become
//! routes first; then, for each backend choice, that backend's stopping rules (ANDed with the
//! choice's condition), then the choice itself with every rewrite that applies. A rewrite
//! with a condition splits a route in two — the route with the condition and the rewrite
//! first, the route without both after it — which is exact, since the first match wins.

use super::super::cond::{Acls, Conj, Ctx, Dnf, HeaderMatch, Test, condition};
use super::super::emit::{Table, arr, inline, q, verbatim};
use super::super::lexer::Line;
use super::values::{fixed, template};

/// Routes one choice may split into before the split is refused.
const MAX_VARIANTS: usize = 64;

#[derive(Debug, Clone)]
pub(crate) enum Action {
    Deny(u16),
    Redirect(Vec<(String, String)>),
    Return(Vec<(String, String)>),
    Backend(String),
}

#[derive(Debug, Clone)]
pub(crate) enum EditOp {
    SetHeader(String, String),
    AddHeader(String, String),
    DelHeader(String),
    Rewrite(String, String),
    SetHost(String),
    RespSet(String, String),
    RespAdd(String, String),
    RespDel(String),
    /// `auth = { basic = ... }` as TOML.
    Auth(String),
    /// `compress = ...` as TOML.
    Compress(String),
    /// A route's `timeouts` key and duration.
    Timeout(String, String),
}

#[derive(Debug, Clone)]
pub(crate) enum RuleKind {
    Stop(Action),
    Edit(EditOp),
}

#[derive(Debug, Clone)]
pub(crate) struct Rule<'a> {
    pub line: &'a Line,
    pub cond: Dnf,
    pub kind: RuleKind,
}

/// One direction's header edits: tollgate applies `remove`, then `set`, then `add`; HAProxy's
/// rules in order are folded into that (a later `set` drops an earlier `add`, a `del` both).
#[derive(Debug, Clone, Default)]
pub(crate) struct HeaderEdits {
    set: Vec<(String, String)>,
    add: Vec<(String, String)>,
    remove: Vec<String>,
}

impl HeaderEdits {
    fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }

    fn forget(&mut self, n: &str) {
        self.set.retain(|(x, _)| !x.eq_ignore_ascii_case(n));
        self.add.retain(|(x, _)| !x.eq_ignore_ascii_case(n));
    }

    fn set(&mut self, n: &str, v: &str) {
        self.forget(n);
        self.set.push((n.to_string(), v.to_string()));
    }

    fn add(&mut self, n: &str, v: &str) -> Result<(), String> {
        if self.add.iter().any(|(x, _)| x.eq_ignore_ascii_case(n)) {
            return Err(format!(
                "a second `add-header {n}` on one route has no equivalent (one added field per name)"
            ));
        }
        self.add.push((n.to_string(), v.to_string()));
        Ok(())
    }

    fn remove(&mut self, n: &str) {
        self.forget(n);
        if !self.remove.iter().any(|x| x.eq_ignore_ascii_case(n)) {
            self.remove.push(n.to_string());
        }
    }

    /// `{ set = {...}, add = {...}, remove = [...] }`, or nothing when empty.
    fn toml(&self) -> Option<String> {
        let map =
            |pairs: &[(String, String)]| inline(&pairs.iter().map(|(k, v)| (k.clone(), q(v))).collect::<Vec<_>>());
        let mut parts = Vec::new();
        if !self.set.is_empty() {
            parts.push(("set".to_string(), map(&self.set)));
        }
        if !self.add.is_empty() {
            parts.push(("add".to_string(), map(&self.add)));
        }
        if !self.remove.is_empty() {
            parts.push(("remove".to_string(), arr(&self.remove)));
        }
        (!parts.is_empty()).then(|| inline(&parts))
    }
}

/// The rewrites one route carries, in tollgate's terms.
#[derive(Debug, Clone, Default)]
pub(crate) struct Edits {
    request: HeaderEdits,
    pub rewrite: Option<(String, String)>,
    set_host: Option<String>,
    response: HeaderEdits,
    auth: Option<String>,
    compress: Option<String>,
    timeouts: Vec<(String, String)>,
    pub src: Vec<String>,
}

impl Edits {
    pub(crate) fn is_empty(&self) -> bool {
        self.request.is_empty()
            && self.rewrite.is_none()
            && self.set_host.is_none()
            && self.response.is_empty()
            && self.auth.is_none()
            && self.compress.is_none()
            && self.timeouts.is_empty()
    }

    /// Applies one rewrite after the ones before it, as HAProxy would in order.
    pub(crate) fn apply(&mut self, op: &EditOp, at: &str) -> Result<(), String> {
        match op {
            EditOp::SetHeader(n, v) => self.request.set(n, v),
            EditOp::AddHeader(n, v) => self.request.add(n, v)?,
            EditOp::DelHeader(n) => self.request.remove(n),
            EditOp::Rewrite(re, to) => {
                if self.rewrite.is_some() {
                    return Err("a second path rewrite on one route has no equivalent".into());
                }
                self.rewrite = Some((re.clone(), to.clone()));
            }
            EditOp::SetHost(h) => self.set_host = Some(h.clone()),
            EditOp::RespSet(n, v) => self.response.set(n, v),
            EditOp::RespAdd(n, v) => self.response.add(n, v)?,
            EditOp::RespDel(n) => self.response.remove(n),
            EditOp::Auth(a) => self.auth = Some(a.clone()),
            EditOp::Compress(c) => self.compress = Some(c.clone()),
            EditOp::Timeout(k, v) => {
                self.timeouts.retain(|(x, _)| x != k);
                self.timeouts.push((k.clone(), v.clone()));
            }
        }
        if !at.is_empty() && !self.src.iter().any(|s| s == at) {
            self.src.push(at.to_string());
        }
        Ok(())
    }

    fn write(&self, t: &mut Table, src: &str) {
        if let Some(v) = self.request.toml() {
            t.set("request_headers", v, src);
        }
        if let Some((re, to)) = &self.rewrite {
            t.set(
                "rewrite_path",
                inline(&[("regex".into(), q(re)), ("replace".into(), verbatim(to))]),
                src,
            );
        }
        if let Some(h) = &self.set_host {
            t.set("set_host", q(h), src);
        }
        if let Some(v) = self.response.toml() {
            t.set("response_headers", v, src);
        }
        if let Some(a) = &self.auth {
            t.set("auth", a.clone(), src);
        }
        if let Some(c) = &self.compress {
            t.set("compress", c.clone(), src);
        }
        if !self.timeouts.is_empty() {
            let pairs: Vec<(String, String)> = self.timeouts.iter().map(|(k, v)| (k.clone(), q(v))).collect();
            t.set("timeouts", inline(&pairs), src);
        }
    }
}

/// Splits the words of a rule into the action's and the condition (`if`/`unless`).
pub(crate) fn split_condition(words: &[String]) -> (&[String], Option<(bool, &[String])>) {
    match words.iter().position(|w| w == "if" || w == "unless") {
        Some(i) => {
            let unless = words.get(i).is_some_and(|w| w == "unless");
            (
                words.get(..i).unwrap_or_default(),
                Some((unless, words.get(i + 1..).unwrap_or_default())),
            )
        }
        None => (words, None),
    }
}

pub(crate) fn rule_condition(words: &[String], acls: &Acls, ctx: &Ctx<'_>) -> Result<(Vec<String>, Dnf), String> {
    let (action, cond) = split_condition(words);
    let dnf = match cond {
        Some((unless, c)) => condition(c, unless, acls, ctx)?,
        None => Dnf::always(),
    };
    Ok((action.to_vec(), dnf))
}

/// Header names a route may not touch (tollgate refuses them; see docs/config.md).
fn header_name(n: &str) -> Result<String, String> {
    let lower = n.to_ascii_lowercase();
    match lower.as_str() {
        "connection" | "keep-alive" | "te" | "transfer-encoding" | "upgrade" | "proxy-connection"
        | "content-length" => Err(format!(
            "`{n}` is the proxy's own framing field: rules may not change it"
        )),
        "" => Err("a header rule without a name".into()),
        _ => Ok(n.to_string()),
    }
}

/// One `http-request` line (its words after `http-request`) as a rule.
pub(crate) fn http_request<'a>(
    line: &'a Line,
    words: &[String],
    acls: &Acls,
    ctx: &Ctx<'_>,
    userlists: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Rule<'a>>, String> {
    let (action, cond) = rule_condition(words, acls, ctx)?;
    let w = |i: usize| action.get(i).map_or("", String::as_str);
    let kind = match w(0) {
        "deny" => RuleKind::Stop(deny(&action)?),
        "reject" | "silent-drop" => {
            return Err(format!(
                "`{}` closes the connection without an answer; tollgate routes answer (use `deny`)",
                w(0)
            ));
        }
        "redirect" => RuleKind::Stop(Action::Redirect(redirect(action.get(1..).unwrap_or_default())?)),
        "return" => RuleKind::Stop(Action::Return(return_action(action.get(1..).unwrap_or_default())?)),
        "set-header" => {
            let name = header_name(w(1))?;
            if name.eq_ignore_ascii_case("host") {
                let v = template(w(2))?;
                if v.contains('{') {
                    return Err(
                        "`set-header Host` with an expression has no equivalent (`set_host` is fixed text)".into(),
                    );
                }
                RuleKind::Edit(EditOp::SetHost(v.replace("{{", "{").replace("}}", "}")))
            } else {
                forwarding_guard(&name)?;
                RuleKind::Edit(EditOp::SetHeader(name, template(w(2))?))
            }
        }
        "add-header" => {
            let name = header_name(w(1))?;
            if name.eq_ignore_ascii_case("host") {
                return Err("`add-header Host` has no equivalent".into());
            }
            forwarding_guard(&name)?;
            RuleKind::Edit(EditOp::AddHeader(name, template(w(2))?))
        }
        "del-header" => {
            let name = header_name(w(1))?;
            if name.eq_ignore_ascii_case("host") {
                return Err("`del-header Host` has no equivalent".into());
            }
            if action.len() > 2 && action.get(2..) != Some(&["-m".to_string(), "str".to_string()][..]) {
                return Err("`del-header` with a match method other than `-m str` has no equivalent".into());
            }
            RuleKind::Edit(EditOp::DelHeader(name))
        }
        "replace-path" => {
            let re = w(1);
            let to = replacement(w(2))?;
            super::super::cond::criterion(&["path_reg".into(), re.into()], ctx)
                .map_err(|e| format!("`replace-path`: {e}"))?;
            // HAProxy replaces the whole path with the replacement when the regex matches
            // anywhere in it; tollgate replaces the match: the regex is widened to the path.
            let whole = if re.starts_with('^') && re.ends_with('$') && !re.ends_with("\\$") {
                re.to_string()
            } else {
                format!("^.*?(?:{re}).*$")
            };
            RuleKind::Edit(EditOp::Rewrite(whole, to))
        }
        "set-timeout" => match (w(1), super::values::time_ms(w(2))) {
            ("server", Ok(ms)) => RuleKind::Edit(EditOp::Timeout("server".into(), super::values::duration(ms))),
            _ => return Err("only `set-timeout server` has an equivalent (a route's `timeouts.server`)".into()),
        },
        "set-path" => {
            let v = w(1);
            let to = match v.find("%[path]") {
                Some(_) => v.replacen("%[path]", "${1}", 1),
                None => v.to_string(),
            };
            if to.contains("%[") || !to.starts_with('/') && !to.starts_with("${1}") {
                return Err("`set-path` with this expression has no equivalent".into());
            }
            let to = to.replace('$', "$$").replace("$${1}", "${1}");
            RuleKind::Edit(EditOp::Rewrite("^(.*)$".into(), to))
        }
        "auth" => {
            let realm = match (w(1), w(2)) {
                ("realm", r) => r.to_string(),
                _ => "tollgate".to_string(),
            };
            let list = cond
                .0
                .iter()
                .flat_map(|c| c.neg.iter())
                .find_map(|t| {
                    if let Test::HttpAuth(l) = t {
                        Some(l.clone())
                    } else {
                        None
                    }
                })
                .ok_or("`http-request auth` without `unless { http_auth(LIST) }` has no equivalent")?;
            let file = userlists(&list).ok_or_else(|| format!("userlist `{list}` has no user tollgate can take"))?;
            let basic = inline(&[("realm".into(), q(&realm)), ("users_file".into(), q(&file))]);
            let mut cond = cond;
            for c in &mut cond.0 {
                c.neg.retain(|t| !matches!(t, Test::HttpAuth(_)));
            }
            return Ok(Some(Rule {
                line,
                cond,
                kind: RuleKind::Edit(EditOp::Auth(inline(&[("basic".into(), basic)]))),
            }));
        }
        "normalize-uri" => return Ok(None),
        "track-sc0"
        | "track-sc1"
        | "track-sc2"
        | "capture"
        | "set-var"
        | "unset-var"
        | "set-log-level"
        | "set-nice"
        | "set-tos"
        | "set-mark"
        | "allow"
        | "wait-for-body"
        | "wait-for-handshake"
        | "early-hint"
        | "set-src"
        | "set-dst"
        | "set-uri"
        | "replace-uri"
        | "set-query"
        | "set-method"
        | "replace-header"
        | "replace-value"
        | "tarpit"
        | "use-service"
        | "cache-use"
        | "do-resolve"
        | "sc-inc-gpc0"
        | "sc-inc-gpc1"
        | "sc-set-gpt0"
        | "set-map"
        | "del-map"
        | "add-acl"
        | "del-acl"
        | "disable-l7-retry"
        | "strict-mode"
        | "set-bandwidth-limit" => {
            return Err(format!("`http-request {}` has no route equivalent", w(0)));
        }
        other => return Err(format!("`http-request {other}` has no equivalent")),
    };
    Ok(Some(Rule { line, cond, kind }))
}

/// X-Forwarded-For and friends are written by the frontend's `forwarded` key.
fn forwarding_guard(name: &str) -> Result<(), String> {
    match name.to_ascii_lowercase().as_str() {
        "x-forwarded-for" | "x-forwarded-proto" | "forwarded" => Err(format!(
            "`{name}` is written by the frontend's `forwarded` key (x-forwarded-for sets X-Forwarded-Proto too); a rule may only remove it"
        )),
        _ => Ok(()),
    }
}

/// One `http-response` line as a rewrite.
pub(crate) fn http_response<'a>(
    line: &'a Line,
    words: &[String],
    acls: &Acls,
    ctx: &Ctx<'_>,
) -> Result<Rule<'a>, String> {
    let (action, cond) = rule_condition(words, acls, ctx)?;
    if !cond.is_always() {
        return Err(
            "a conditional `http-response` rule has no equivalent (response rules are per route, unconditional)".into(),
        );
    }
    let w = |i: usize| action.get(i).map_or("", String::as_str);
    let op = match w(0) {
        "set-header" => EditOp::RespSet(header_name(w(1))?, fixed(w(2))?),
        "add-header" => EditOp::RespAdd(header_name(w(1))?, fixed(w(2))?),
        "del-header" if action.len() == 2 || action.get(2..) == Some(&["-m".to_string(), "str".to_string()][..]) => {
            EditOp::RespDel(header_name(w(1))?)
        }
        other => {
            return Err(format!(
                "`http-response {other}` has no equivalent (set-header, add-header, del-header only)"
            ));
        }
    };
    Ok(Rule {
        line,
        cond,
        kind: RuleKind::Edit(op),
    })
}

/// `deny [deny_status N]`, or with a payload of its own (`content-type`, `string`, `file`,
/// `hdr`): a `return` of that status.
fn deny(action: &[String]) -> Result<Action, String> {
    let mut status = 403u16;
    let mut payload: Vec<String> = Vec::new();
    let mut i = 1;
    while let Some(w) = action.get(i) {
        match w.as_str() {
            "deny_status" | "status" => {
                status = action
                    .get(i + 1)
                    .and_then(|s| s.parse().ok())
                    .ok_or("`deny_status` needs a status")?;
                i += 2;
            }
            "content-type" | "string" | "lf-string" | "file" | "hdr" => {
                let n = if w == "hdr" { 3 } else { 2 };
                payload.extend(action.iter().skip(i).take(n).cloned());
                i += n;
            }
            _ => return Err(format!("`deny` with `{w}` has no equivalent")),
        }
    }
    if !(400..=599).contains(&status) {
        return Err(format!("deny status {status}: tollgate denies with 400..599"));
    }
    if payload.is_empty() {
        return Ok(Action::Deny(status));
    }
    let mut args = vec!["status".to_string(), status.to_string()];
    args.extend(payload);
    Ok(Action::Return(return_action(&args)?))
}

/// `redirect scheme|location|prefix X [code N] [drop-query]` (after `redirect`).
pub(crate) fn redirect(args: &[String]) -> Result<Vec<(String, String)>, String> {
    let kind = args.first().map_or("", String::as_str);
    let target = args.get(1).ok_or("`redirect` needs a target")?;
    let mut code = 302u16;
    let mut drop_query = false;
    let mut i = 2;
    while let Some(w) = args.get(i) {
        match w.as_str() {
            "code" => {
                code = args
                    .get(i + 1)
                    .and_then(|c| c.parse().ok())
                    .ok_or("`code` needs a status")?;
                i += 2;
                continue;
            }
            "drop-query" => drop_query = true,
            other => return Err(format!("`redirect ... {other}` has no equivalent")),
        }
        i += 1;
    }
    if ![301, 302, 303, 307, 308].contains(&code) {
        return Err(format!(
            "redirect code {code}: tollgate redirects with 301, 302, 303, 307 or 308"
        ));
    }
    let mut out = match kind {
        "scheme" => vec![("scheme".to_string(), q(target))],
        "location" => vec![("to".to_string(), q(&template(target)?))],
        "prefix" => {
            let rest = if drop_query { "{path}" } else { "{path_and_query}" };
            let prefix = template(target)?;
            let prefix = if prefix == "/" { String::new() } else { prefix };
            vec![("to".to_string(), q(&format!("{prefix}{rest}")))]
        }
        other => return Err(format!("`redirect {other}` has no equivalent")),
    };
    if drop_query && kind != "prefix" {
        return Err("`drop-query` with this redirect has no equivalent".into());
    }
    out.push(("status".into(), code.to_string()));
    Ok(out)
}

fn return_action(args: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut out = vec![("status".to_string(), "200".to_string())];
    let mut headers = Vec::new();
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let next = args.get(i + 1).cloned().unwrap_or_default();
        match w.as_str() {
            "status" => {
                if let Some(first) = out.first_mut() {
                    first.1 = next.parse::<u16>().map_err(|_| "`status` needs a number")?.to_string();
                }
            }
            "content-type" => out.push(("content_type".into(), q(&next))),
            "string" => out.push(("body".into(), q(&next))),
            "lf-string" if !next.contains('%') => out.push(("body".into(), q(&next))),
            "file" => out.push(("body_file".into(), q(&next))),
            "hdr" => {
                let value = args.get(i + 2).cloned().unwrap_or_default();
                headers.push((next.clone(), q(&fixed(&value)?)));
                i += 1;
            }
            other => return Err(format!("`return ... {other}` has no equivalent")),
        }
        i += 2;
    }
    if !headers.is_empty() {
        out.push(("headers".into(), inline(&headers)));
    }
    Ok(out)
}

/// `\1` back-references as `${1}`; a literal `$` doubled.
fn replacement(v: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = v.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(d) if d.is_ascii_digit() => out.push_str(&format!("${{{d}}}")),
                Some(o) => out.push(o),
                None => out.push('\\'),
            },
            '$' => out.push_str("$$"),
            '%' if chars.peek() == Some(&'[') => {
                return Err("a replacement with a sample expression has no equivalent".into());
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// One route in the making.
#[derive(Debug, Clone)]
pub(crate) struct RouteSpec {
    pub conj: Conj,
    pub action: Action,
    pub edits: Edits,
    pub src: String,
}

/// A backend choice with every rewrite that applies: the variants, most specific first.
/// The variants, the rewrites that could not be applied (the route keeps the others), and
/// notes on how some were applied.
pub(crate) type Split<'a> = (Vec<(Conj, Edits)>, Vec<(&'a Line, String)>, Vec<(&'a Line, String)>);

pub(crate) fn split_by_edits<'a>(base: &Conj, edits: &[(&Rule<'a>, &EditOp)]) -> Result<Split<'a>, (String, String)> {
    let mut variants = vec![(base.clone(), Edits::default())];
    let mut skipped: Vec<(&'a Line, String)> = Vec::new();
    let mut notes: Vec<(&'a Line, String)> = Vec::new();
    for (rule, op) in edits {
        let at = rule.line.at();
        let mut failed = None;
        if let EditOp::Rewrite(..) = op
            && variants.iter().any(|(_, e)| e.rewrite.is_some())
        {
            // HAProxy applies both rewrites in turn; a route carries one. Where the first
            // one's regex matches, its route keeps it; the other paths get the second.
            let mut next = Vec::new();
            for (conj, e) in &variants {
                let Some((re, _)) = e.rewrite.clone() else {
                    for c in &rule.cond.0 {
                        let mut with = e.clone();
                        let _ = with.apply(op, &at);
                        next.push((conj.and(c), with));
                    }
                    next.push((conj.clone(), e.clone()));
                    continue;
                };
                next.push((
                    conj.and(&Conj {
                        pos: vec![Test::PathRegex(vec![re])],
                        neg: Vec::new(),
                    }),
                    e.clone(),
                ));
                for c in &rule.cond.0 {
                    let mut with = e.clone();
                    with.rewrite = None;
                    let _ = with.apply(op, &at);
                    next.push((conj.and(c), with));
                }
                next.push((conj.clone(), e.clone()));
            }
            variants = within_bound(next, &at)?;
            notes.push((rule.line, "a second path rewrite: paths the first one's regex matches get the first only (HAProxy would apply both in turn), the others this one".to_string()));
            continue;
        }
        if rule.cond.is_always() {
            for (_, e) in &mut variants {
                if let Err(m) = e.apply(op, &at) {
                    failed = Some(m);
                }
            }
        } else {
            let mut next = Vec::new();
            for (conj, e) in &variants {
                for c in &rule.cond.0 {
                    let mut with = e.clone();
                    match with.apply(op, &at) {
                        Ok(()) => next.push((conj.and(c), with)),
                        Err(m) => failed = Some(m),
                    }
                }
                next.push((conj.clone(), e.clone()));
            }
            variants = within_bound(next, &at)?;
        }
        if let Some(m) = failed {
            skipped.push((rule.line, m));
        }
    }
    Ok((variants, skipped, notes))
}

/// The split variants, unless there are more than [`MAX_VARIANTS`].
fn within_bound(next: Vec<(Conj, Edits)>, at: &str) -> Result<Vec<(Conj, Edits)>, (String, String)> {
    if next.len() > MAX_VARIANTS {
        return Err((
            at.to_string(),
            format!("the conditional rewrites split a route into more than {MAX_VARIANTS} routes"),
        ));
    }
    Ok(next)
}

/// A route's table. `matchers` collects the named conditions it needs (HTTP only).
pub(crate) fn route_table(r: &RouteSpec, http: bool, matchers: &mut Vec<Table>, prefix: &str) -> Result<Table, String> {
    let mut t = Table::default();
    t.set("name", q(&r.src), "");
    write_conditions(&mut t, &r.conj, http, matchers, prefix)?;
    match &r.action {
        Action::Backend(b) => t.set("backend", q(b), ""),
        Action::Deny(s) if !http => {
            let _ = s;
            t.set("deny", "true".into(), "");
        }
        Action::Deny(s) => t.set("deny", s.to_string(), ""),
        Action::Redirect(p) => t.set("redirect", inline(p), ""),
        Action::Return(p) => t.set("return", inline(p), ""),
    }
    if !r.edits.is_empty() {
        if !matches!(r.action, Action::Backend(_)) {
            return Err("rewrites apply only to a route that forwards".into());
        }
        let src = r.edits.src.join(", ");
        r.edits.write(&mut t, &src);
    }
    Ok(t)
}

fn test_value(t: &Test) -> Result<String, String> {
    let list = |v: &Vec<String>| if v.len() == 1 { q(v.concat().as_str()) } else { arr(v) };
    Ok(match t {
        Test::Host(v)
        | Test::Path(v)
        | Test::PathPrefix(v)
        | Test::PathRegex(v)
        | Test::Source(v)
        | Test::Sni(v)
        | Test::Method(v) => list(v),
        Test::Scheme(s) => q(s),
        Test::Query { name, value } | Test::Cookie { name, value } => {
            let mut p = vec![("name".to_string(), q(name))];
            if let Some(v) = value {
                p.push(("value".into(), q(v)));
            }
            inline(&p)
        }
        Test::Header { name, m } => {
            let mut p = vec![("name".to_string(), q(name))];
            match m {
                HeaderMatch::Present => {}
                HeaderMatch::Value(v) => p.push(("value".into(), q(v))),
                HeaderMatch::Prefix(v) => p.push(("prefix".into(), q(v))),
                HeaderMatch::Regex(v) => p.push(("regex".into(), q(v))),
            }
            inline(&p)
        }
        Test::Counter(_) => return Err("a stick counter can only be a whole rate-limit condition".into()),
        Test::HttpAuth(_) => return Err("`http_auth` can only be used by `http-request auth`".into()),
        Test::SslHello => return Err("`req.ssl_hello_type` is only read by `tcp-request content accept`".into()),
    })
}

fn write_conditions(
    t: &mut Table,
    c: &Conj,
    http: bool,
    matchers: &mut Vec<Table>,
    prefix: &str,
) -> Result<(), String> {
    let mut named = Vec::new();
    for test in &c.pos {
        if !http && !matches!(test, Test::Sni(_) | Test::Source(_)) {
            return Err(format!(
                "`{}` has no equivalent in a TCP route (SNI and source only)",
                test.key()
            ));
        }
        if t.has(test.key()) {
            named.push(matcher(test, matchers, prefix)?);
        } else {
            t.set(test.key(), test_value(test)?, "");
        }
    }
    if !named.is_empty() {
        t.set("matchers", arr(&named), "");
    }
    if c.neg.is_empty() {
        return Ok(());
    }
    if !http {
        return Err("a negated condition has no equivalent in a TCP route".into());
    }
    let mut not = Table::default();
    let mut not_named = Vec::new();
    for test in &c.neg {
        if not.has(test.key()) {
            not_named.push(matcher(test, matchers, prefix)?);
        } else {
            not.set(test.key(), test_value(test)?, "");
        }
    }
    if !not_named.is_empty() {
        not.set("matchers", arr(&not_named), "");
    }
    let pairs: Vec<(String, String)> = not.entries.iter().map(|e| (e.key.clone(), e.value.clone())).collect();
    t.set("not", inline(&pairs), "");
    Ok(())
}

/// A named matcher holding one test, shared by the routes that need it.
fn matcher(test: &Test, matchers: &mut Vec<Table>, prefix: &str) -> Result<String, String> {
    let value = test_value(test)?;
    if let Some(m) = matchers
        .iter()
        .find(|m| m.entries.len() == 2 && m.get(test.key()) == Some(value.as_str()))
    {
        return Ok(m.get("name").unwrap_or_default().trim_matches('"').to_string());
    }
    let name = format!("{prefix}{}", matchers.len() + 1);
    let mut m = Table::default();
    m.set("name", q(&name), "");
    m.set(test.key(), value, "");
    matchers.push(m);
    Ok(name)
}
