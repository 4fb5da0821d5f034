//! HAProxy ACLs and `if`/`unless` conditions, as tollgate route conditions: a condition is an
//! OR ([`Dnf`]) of ANDs ([`Conj`]) of tests that are true ([`Conj::pos`]) or false
//! ([`Conj::neg`]), each test one tollgate condition key (`host`, `path_prefix`, `source`,
//! ...). A route holds one AND; an OR becomes one route per term.
//!
//! Invariants: a criterion, flag or match method without an exact equivalent is refused
//! with the reason (the rule using it is then dropped, never half-converted); expansion is
//! bounded ([`MAX_TERMS`]) so a hostile condition cannot blow up.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// Terms an expanded condition may have; past it the rule is dropped.
pub(crate) const MAX_TERMS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderMatch {
    Present,
    Value(String),
    Prefix(String),
    Regex(String),
}

/// A stick-counter fetch compared to a number: `sc_http_req_rate(0) gt 10`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counter {
    pub slot: u8,
    pub table: Option<String>,
    /// `http_req_rate`, `conn_cur`, `conn_rate`, `http_err_rate`, ...
    pub what: String,
    /// The largest value still admitted (`gt 10` → 10, `ge 10` → 9).
    pub max: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Test {
    Host(Vec<String>),
    Path(Vec<String>),
    PathPrefix(Vec<String>),
    PathRegex(Vec<String>),
    Method(Vec<String>),
    Query {
        name: String,
        value: Option<String>,
    },
    Header {
        name: String,
        m: HeaderMatch,
    },
    Cookie {
        name: String,
        value: Option<String>,
    },
    Source(Vec<String>),
    Scheme(String),
    Sni(Vec<String>),
    /// A stick counter: only a rate-limit rule can use it.
    Counter(Counter),
    /// `http_auth(USERLIST)`: only an `auth` rule can use it.
    HttpAuth(String),
    /// `req.ssl_hello_type 1`: the SNI-passthrough idiom, read by tollgate itself.
    SslHello,
}

impl Test {
    /// The route key this test fills.
    pub(crate) fn key(&self) -> &'static str {
        match self {
            Test::Host(_) => "host",
            Test::Path(_) => "path",
            Test::PathPrefix(_) => "path_prefix",
            Test::PathRegex(_) => "path_regex",
            Test::Method(_) => "method",
            Test::Query { .. } => "query",
            Test::Header { .. } => "header",
            Test::Cookie { .. } => "cookie",
            Test::Source(_) => "source",
            Test::Scheme(_) => "scheme",
            Test::Sni(_) => "sni",
            Test::Counter(_) => "counter",
            Test::HttpAuth(_) => "http_auth",
            Test::SslHello => "ssl_hello",
        }
    }

    fn list_mut(&mut self) -> Option<&mut Vec<String>> {
        match self {
            Test::Host(v)
            | Test::Path(v)
            | Test::PathPrefix(v)
            | Test::PathRegex(v)
            | Test::Method(v)
            | Test::Source(v)
            | Test::Sni(v) => Some(v),
            _ => None,
        }
    }
}

/// Tests that must all hold (`pos`) and none of which may hold (`neg`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Conj {
    pub pos: Vec<Test>,
    pub neg: Vec<Test>,
}

impl Conj {
    pub(crate) fn is_true(&self) -> bool {
        self.pos.is_empty() && self.neg.is_empty()
    }

    pub(crate) fn and(&self, other: &Conj) -> Conj {
        let mut c = self.clone();
        c.pos.extend(other.pos.iter().cloned());
        c.neg.extend(other.neg.iter().cloned());
        c
    }

    pub(crate) fn tests(&self) -> impl Iterator<Item = &Test> {
        self.pos.iter().chain(&self.neg)
    }
}

/// Any of the terms holds. No term: never; one empty term: always.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dnf(pub Vec<Conj>);

impl Dnf {
    pub(crate) fn always() -> Dnf {
        Dnf(vec![Conj::default()])
    }

    pub(crate) fn never() -> Dnf {
        Dnf(Vec::new())
    }

    fn test(t: Test) -> Dnf {
        Dnf(vec![Conj {
            pos: vec![t],
            neg: Vec::new(),
        }])
    }

    pub(crate) fn is_always(&self) -> bool {
        self.0.iter().any(Conj::is_true)
    }

    fn or(mut self, other: Dnf) -> Result<Dnf, String> {
        self.0.extend(other.0);
        bounded(self)
    }

    pub(crate) fn and(&self, other: &Dnf) -> Result<Dnf, String> {
        let mut out = Vec::new();
        for a in &self.0 {
            for b in &other.0 {
                out.push(a.and(b));
                if out.len() > MAX_TERMS {
                    return Err(format!("the condition expands to more than {MAX_TERMS} routes"));
                }
            }
        }
        Ok(Dnf(out))
    }

    /// !(A ∨ B) = !A ∧ !B, and !(a ∧ b ∧ !c) = !a ∨ !b ∨ c.
    pub(crate) fn not(&self) -> Result<Dnf, String> {
        let mut acc = Dnf::always();
        for conj in &self.0 {
            let mut alts = Vec::new();
            for t in &conj.pos {
                alts.push(Conj {
                    pos: Vec::new(),
                    neg: vec![t.clone()],
                });
            }
            for t in &conj.neg {
                alts.push(Conj {
                    pos: vec![t.clone()],
                    neg: Vec::new(),
                });
            }
            acc = acc.and(&Dnf(alts))?;
        }
        Ok(acc)
    }
}

fn bounded(d: Dnf) -> Result<Dnf, String> {
    if d.0.len() > MAX_TERMS {
        return Err(format!("the condition expands to more than {MAX_TERMS} routes"));
    }
    Ok(merge_alternatives(d))
}

/// `path_beg /a` OR `path_beg /b` is one test with both values.
fn merge_alternatives(d: Dnf) -> Dnf {
    let mut out: Vec<Conj> = Vec::new();
    for conj in d.0 {
        let single = conj.neg.is_empty() && conj.pos.len() == 1;
        if single
            && let Some(prev) = out.iter_mut().find(|p| {
                p.neg.is_empty()
                    && p.pos.len() == 1
                    && p.pos.first().map(Test::key) == conj.pos.first().map(Test::key)
                    && p.pos.first().is_some_and(|t| t.clone().list_mut().is_some())
            })
            && let (Some(into), Some(mut from)) = (prev.pos.first_mut(), conj.pos.first().cloned())
            && let (Some(a), Some(b)) = (into.list_mut(), from.list_mut())
        {
            for v in b.drain(..) {
                if !a.contains(&v) {
                    a.push(v);
                }
            }
            continue;
        }
        out.push(conj);
    }
    Dnf(out)
}

/// A named ACL: the OR of its lines.
#[derive(Debug, Default, Clone)]
pub(crate) struct Acls {
    named: BTreeMap<String, Result<Dnf, String>>,
}

impl Acls {
    /// Adds one `acl NAME criterion ...` line (several lines of one name are ORed).
    pub(crate) fn add(&mut self, name: &str, words: &[String], ctx: &Ctx<'_>) {
        let compiled = criterion(words, ctx);
        let merged = match (self.named.remove(name), compiled) {
            (None, c) => c,
            (Some(Ok(a)), Ok(b)) => a.or(b),
            (Some(Err(e)), _) | (Some(Ok(_)), Err(e)) => Err(e),
        };
        self.named.insert(name.to_string(), merged);
    }
}

/// What a criterion may read: the proxy's mode and files named by `-f`.
pub(crate) struct Ctx<'a> {
    pub http: bool,
    /// The directory `-f FILE` paths are relative to (HAProxy: the working directory).
    pub read_file: &'a dyn Fn(&str) -> Result<String, String>,
}

/// `if ...` / `unless ...` words (after the keyword) as a condition.
pub(crate) fn condition(words: &[String], unless: bool, acls: &Acls, ctx: &Ctx<'_>) -> Result<Dnf, String> {
    let mut result = Dnf::never();
    let mut term = Dnf::always();
    let mut i = 0;
    let mut empty_term = true;
    while let Some(w) = words.get(i) {
        i += 1;
        if w == "||" || w == "or" {
            if empty_term {
                return Err("`||` with no condition before it".into());
            }
            result = result.or(std::mem::replace(&mut term, Dnf::always()))?;
            empty_term = true;
            continue;
        }
        let (negated, rest) = match w.strip_prefix('!') {
            Some(r) => (true, r.to_string()),
            None => (false, w.clone()),
        };
        let rest = if rest.is_empty() {
            let next = words.get(i).cloned().ok_or("`!` negates nothing")?;
            i += 1;
            next
        } else {
            rest
        };
        let atom = if rest == "{" {
            let start = i;
            while words.get(i).is_some_and(|w| w != "}") {
                i += 1;
            }
            if words.get(i).is_none() {
                return Err("`{` without its closing `}`".into());
            }
            let inner = words.get(start..i).unwrap_or_default();
            i += 1;
            criterion(inner, ctx)?
        } else {
            match rest.as_str() {
                "TRUE" => Dnf::always(),
                "FALSE" => Dnf::never(),
                name => match acls.named.get(name) {
                    Some(Ok(d)) => d.clone(),
                    Some(Err(e)) => return Err(format!("acl `{name}`: {e}")),
                    None => return Err(format!("acl `{name}` is not declared")),
                },
            }
        };
        let atom = if negated { atom.not()? } else { atom };
        term = term.and(&atom)?;
        empty_term = false;
    }
    if empty_term && !result.0.is_empty() {
        return Err("`||` with no condition after it".into());
    }
    if empty_term && words.is_empty() {
        return Err("`if`/`unless` with no condition".into());
    }
    result = result.or(term)?;
    if unless {
        result.not().map(merge_alternatives)
    } else {
        Ok(result)
    }
}

struct Criterion<'a> {
    fetch: &'a str,
    args: Vec<String>,
    lower: bool,
}

fn parse_fetch(word: &str) -> Result<Criterion<'_>, String> {
    let (head, converters) = match word.find(')') {
        Some(close) => word.split_at(close + 1),
        None => match word.find(',') {
            Some(c) => word.split_at(c),
            None => (word, ""),
        },
    };
    let mut lower = false;
    for conv in converters.split(',').filter(|c| !c.is_empty()) {
        if conv == "lower" {
            lower = true;
        } else {
            return Err(format!("the converter `{conv}` has no equivalent in route conditions"));
        }
    }
    let (fetch, args) = match head.find('(') {
        Some(open) => {
            let inner = head.get(open + 1..head.len().saturating_sub(1)).unwrap_or_default();
            (
                head.get(..open).unwrap_or_default(),
                inner.split(',').map(str::to_string).collect(),
            )
        }
        None => (head, Vec::new()),
    };
    Ok(Criterion { fetch, args, lower })
}

/// One ACL criterion with its flags and values: `hdr(host) -i a.example b.example`.
pub(crate) fn criterion(words: &[String], ctx: &Ctx<'_>) -> Result<Dnf, String> {
    let first = words.first().ok_or("an ACL with no criterion")?;
    let c = parse_fetch(first)?;
    let mut nocase = c.lower;
    let mut method: Option<String> = None;
    let mut values: Vec<String> = Vec::new();
    let mut from_file: Option<String> = None;
    let mut i = 1;
    while let Some(w) = words.get(i) {
        i += 1;
        match w.as_str() {
            "-i" => nocase = true,
            "-n" | "-u" => {}
            "-m" => method = Some(words.get(i).cloned().ok_or("`-m` names no match method")?),
            "-f" => {
                let file = words.get(i).ok_or("`-f` names no file")?;
                let text = (ctx.read_file)(file)?;
                from_file = Some(file.clone());
                values.extend(
                    text.lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty() && !l.starts_with('#'))
                        .map(str::to_string),
                );
            }
            "-M" => return Err("`-M` (map files) has no equivalent".into()),
            "--" => {
                values.extend(words.iter().skip(i).cloned());
                break;
            }
            _ => {
                values.push(w.clone());
                continue;
            }
        }
        if matches!(w.as_str(), "-m" | "-f") {
            i += 1;
        }
    }
    // A value read from a file is not echoed in a message: the file may not be the
    // config's to show (a hostile config naming a secret file learns nothing from the report).
    let result = criterion_values(&c, nocase, method, values, ctx);
    match (&result, from_file) {
        (Err(_), Some(file)) => Err(format!("`-f {file}`: its values are not ones `{}` takes", c.fetch)),
        _ => result,
    }
}

fn criterion_values(
    c: &Criterion<'_>,
    nocase: bool,
    method: Option<String>,
    values: Vec<String>,
    ctx: &Ctx<'_>,
) -> Result<Dnf, String> {
    let arg = |n: usize| c.args.get(n).map(|s| s.trim().to_string()).unwrap_or_default();
    let fetch = c.fetch;
    let http_only = |t: Dnf| {
        if ctx.http {
            Ok(t)
        } else {
            Err(format!("`{fetch}` needs mode http"))
        }
    };
    match fetch {
        "always_true" => Ok(Dnf::always()),
        "always_false" => Ok(Dnf::never()),
        "path" | "path_beg" | "path_end" | "path_sub" | "path_reg" | "path_dir" | "url_beg" => {
            let m = method.as_deref().unwrap_or(match fetch {
                "path" => "str",
                "path_beg" | "url_beg" => "beg",
                "path_end" => "end",
                "path_sub" => "sub",
                "path_reg" => "reg",
                _ => "dir",
            });
            if fetch == "url_beg" && values.iter().any(|v| v.contains('?')) {
                return Err("`url_beg` with a query has no equivalent".into());
            }
            http_only(path_test(m, nocase, values)?)
        }
        "method" => {
            if method.as_deref().is_some_and(|m| m != "str") {
                return Err("`method` with a match method other than exact".into());
            }
            let v: Vec<String> = values
                .iter()
                .map(|m| if nocase { m.to_ascii_uppercase() } else { m.clone() })
                .collect();
            if v.iter().any(|m| m.bytes().any(|b| b.is_ascii_lowercase())) {
                return Err("a lower-case method never matches in tollgate (methods are written in capitals)".into());
            }
            http_only(Dnf::test(Test::Method(nonempty(v)?)))
        }
        "src" => {
            if method.as_deref().is_some_and(|m| m != "ip") {
                return Err("`src` with a match method other than ip".into());
            }
            let blocks = values.iter().map(|v| cidr(v)).collect::<Result<Vec<_>, _>>()?;
            Ok(Dnf::test(Test::Source(nonempty(blocks)?)))
        }
        "hdr" | "req.hdr" | "req.fhdr" | "fhdr" | "hdr_beg" | "hdr_end" | "hdr_sub" | "hdr_reg" | "hdr_dom" => {
            let name = arg(0).to_ascii_lowercase();
            if name.is_empty() {
                return Err(format!("`{fetch}` without a header name has no equivalent"));
            }
            if c.args.len() > 1 {
                return Err(format!("`{fetch}` with an occurrence argument has no equivalent"));
            }
            let m = method.as_deref().unwrap_or(match fetch {
                "hdr_beg" => "beg",
                "hdr_end" => "end",
                "hdr_sub" => "sub",
                "hdr_reg" => "reg",
                "hdr_dom" => "dom",
                _ => "str",
            });
            http_only(header_test(&name, m, nocase, values)?)
        }
        "ssl_fc_sni" | "req.ssl_sni" | "req_ssl_sni" => {
            if method.as_deref().is_some_and(|m| m != "str") {
                return Err(format!(
                    "`{fetch}` with a match method other than exact (tollgate's `sni` is exact or `*.` one label)"
                ));
            }
            let names: Vec<String> = values.iter().map(|v| v.to_ascii_lowercase()).collect();
            Ok(Dnf::test(Test::Sni(nonempty(names)?)))
        }
        "ssl_fc" => {
            if !values.is_empty() {
                return Err("`ssl_fc` with values".into());
            }
            Ok(Dnf::test(Test::Scheme("https".into())))
        }
        "cook" | "req.cook" => {
            let make = |name: String, value: Option<String>| Test::Cookie { name, value };
            http_only(named_value(
                fetch,
                "cookie",
                arg(0),
                method.as_deref(),
                nocase,
                values,
                make,
            )?)
        }
        "url_param" | "urlp" => {
            let make = |name: String, value: Option<String>| Test::Query { name, value };
            http_only(named_value(
                fetch,
                "parameter",
                arg(0),
                method.as_deref(),
                nocase,
                values,
                make,
            )?)
        }
        "http_auth" => Ok(Dnf::test(Test::HttpAuth(arg(0)))),
        "req.ssl_hello_type" | "req_ssl_hello_type" if values == ["1"] => Ok(Dnf::test(Test::SslHello)),
        f if counter_fetch(f, &c.args).is_some() => {
            let (slot, table, what) = counter_fetch(f, &c.args).unwrap_or_default();
            let (op, n) = match values.as_slice() {
                [op, n] => (
                    op.as_str(),
                    n.parse::<u64>().map_err(|_| format!("`{n}` is not a number"))?,
                ),
                _ => return Err(format!("`{f}` is compared as `gt N` or `ge N` here")),
            };
            let max = match op {
                "gt" => n,
                "ge" => n.checked_sub(1).ok_or("`ge 0` refuses everything")?,
                _ => return Err(format!("`{f} {op}`: only `gt` and `ge` become a limit")),
            };
            Ok(Dnf::test(Test::Counter(Counter { slot, table, what, max })))
        }
        other => Err(format!(
            "the ACL criterion `{other}` has no equivalent in tollgate's route conditions"
        )),
    }
}

/// A cookie or query parameter: present (`-m found`), or equal to one of the values (one
/// route term each, since the condition holds one value).
fn named_value(
    fetch: &str,
    what: &str,
    name: String,
    method: Option<&str>,
    nocase: bool,
    values: Vec<String>,
    make: impl Fn(String, Option<String>) -> Test,
) -> Result<Dnf, String> {
    if name.is_empty() {
        return Err(format!("`{fetch}` without a {what} name has no equivalent"));
    }
    match method {
        Some("found") => Ok(Dnf::test(make(name, None))),
        None | Some("str") if !nocase => Ok(Dnf(nonempty(values)?
            .into_iter()
            .map(|v| Conj {
                pos: vec![make(name.clone(), Some(v))],
                neg: Vec::new(),
            })
            .collect())),
        _ => Err(format!(
            "`{fetch}` matched other than exactly (or `-m found`) has no equivalent"
        )),
    }
}

/// `sc_http_req_rate(0)`, `sc0_http_req_rate`, `sc_http_req_rate(0,table)`, `src_conn_cur`.
fn counter_fetch(fetch: &str, args: &[String]) -> Option<(u8, Option<String>, String)> {
    const WHAT: &[&str] = &[
        "http_req_rate",
        "http_req_cnt",
        "conn_cur",
        "conn_rate",
        "conn_cnt",
        "http_err_rate",
    ];
    if let Some(what) = fetch.strip_prefix("sc_") {
        let slot = args.first()?.trim().parse().ok()?;
        return WHAT
            .contains(&what)
            .then(|| (slot, args.get(1).map(|t| t.trim().to_string()), what.to_string()));
    }
    let rest = fetch.strip_prefix("sc")?;
    let (digit, what) = rest.split_at_checked(1)?;
    let slot: u8 = digit.parse().ok()?;
    let what = what.strip_prefix('_')?;
    WHAT.contains(&what)
        .then(|| (slot, args.first().map(|t| t.trim().to_string()), what.to_string()))
}

fn nonempty(v: Vec<String>) -> Result<Vec<String>, String> {
    if v.is_empty() {
        Err("an ACL with no value never matches".into())
    } else {
        Ok(v)
    }
}

/// Escapes text for a regex-crate pattern.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn alternation(values: &[String]) -> String {
    let parts: Vec<String> = values.iter().map(|v| escape(v)).collect();
    if parts.len() == 1 {
        parts.concat()
    } else {
        format!("(?:{})", parts.join("|"))
    }
}

fn valid_regex(re: &str) -> Result<String, String> {
    regex_automata::meta::Regex::new(re)
        .map(|_| re.to_string())
        .map_err(|e| format!("the regex `{re}` is not one tollgate's engine reads: {e}"))
}

fn path_test(m: &str, nocase: bool, values: Vec<String>) -> Result<Dnf, String> {
    let values = nonempty(values)?;
    let ci = if nocase { "(?i)" } else { "" };
    let t = match (m, nocase) {
        ("str", false) => Test::Path(values),
        ("beg", false) => Test::PathPrefix(values),
        ("found", _) => return Ok(Dnf::always()),
        ("str", true) => Test::PathRegex(vec![valid_regex(&format!("{ci}^{}$", alternation(&values)))?]),
        ("beg", true) => Test::PathRegex(vec![valid_regex(&format!("{ci}^{}", alternation(&values)))?]),
        ("end", _) => Test::PathRegex(vec![valid_regex(&format!("{ci}{}$", alternation(&values)))?]),
        ("sub", _) => Test::PathRegex(vec![valid_regex(&format!("{ci}{}", alternation(&values)))?]),
        ("dir", _) => Test::PathRegex(vec![valid_regex(&format!(
            "{ci}(?:^|/){}(?:/|$)",
            alternation(&values)
        ))?]),
        ("reg", _) => Test::PathRegex(
            values
                .iter()
                .map(|v| valid_regex(&format!("{ci}{v}")))
                .collect::<Result<_, _>>()?,
        ),
        (other, _) => return Err(format!("the match method `-m {other}` on a path has no equivalent")),
    };
    if let Test::Path(v) | Test::PathPrefix(v) = &t
        && v.iter().any(|p| !p.starts_with('/') || p.contains('?'))
    {
        return Err(
            "a path value that does not start with `/`, or holds a `?`, never matches a normalised path".into(),
        );
    }
    Ok(Dnf::test(t))
}

fn header_test(name: &str, m: &str, nocase: bool, values: Vec<String>) -> Result<Dnf, String> {
    if m == "found" {
        return Ok(Dnf::test(Test::Header {
            name: name.into(),
            m: HeaderMatch::Present,
        }));
    }
    let values = nonempty(values)?;
    if name == "host" && m == "str" && values.iter().all(|v| !v.contains(':')) {
        // tollgate's host is compared case-insensitively, without the port.
        return Ok(Dnf::test(Test::Host(
            values.iter().map(|v| v.to_ascii_lowercase()).collect(),
        )));
    }
    let ci = if nocase || name == "host" { "(?i)" } else { "" };
    let one = values.len() == 1 && !nocase;
    let hm = match m {
        "str" if one => HeaderMatch::Value(values.concat()),
        "beg" if one => HeaderMatch::Prefix(values.concat()),
        "str" => HeaderMatch::Regex(valid_regex(&format!("{ci}^{}$", alternation(&values)))?),
        "beg" => HeaderMatch::Regex(valid_regex(&format!("{ci}^{}", alternation(&values)))?),
        "end" => HeaderMatch::Regex(valid_regex(&format!("{ci}{}$", alternation(&values)))?),
        "sub" => HeaderMatch::Regex(valid_regex(&format!("{ci}{}", alternation(&values)))?),
        "dom" => HeaderMatch::Regex(valid_regex(&format!(
            "{ci}(?:^|[./:]){}(?:$|[./:])",
            alternation(&values)
        ))?),
        "reg" => {
            let alts: Vec<String> = values.iter().map(|v| format!("(?:{v})")).collect();
            HeaderMatch::Regex(valid_regex(&format!("{ci}{}", alts.join("|")))?)
        }
        other => return Err(format!("the match method `-m {other}` on a header has no equivalent")),
    };
    Ok(Dnf::test(Test::Header {
        name: name.into(),
        m: hm,
    }))
}

/// An address or block as tollgate reads it: host bits past the length cleared (HAProxy
/// accepts `10.0.0.1/8` as `10.0.0.0/8`; tollgate refuses it).
pub(crate) fn cidr(v: &str) -> Result<String, String> {
    let (addr, len) = match v.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (v, None),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| format!("`{v}` is not an address or a block (names are not resolved)"))?;
    let Some(len) = len else { return Ok(ip.to_string()) };
    // HAProxy also takes a dotted mask: 10.0.0.0/255.0.0.0.
    let bits: u32 = match len.parse::<u32>() {
        Ok(n) => n,
        Err(_) => match len.parse::<std::net::Ipv4Addr>() {
            Ok(mask) => u32::from(mask).count_ones(),
            Err(_) => return Err(format!("`{v}`: `{len}` is not a prefix length")),
        },
    };
    let masked = match ip {
        IpAddr::V4(a) if bits <= 32 => {
            let m = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
            IpAddr::from(std::net::Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) if bits <= 128 => {
            let m = if bits == 0 { 0 } else { u128::MAX << (128 - bits) };
            IpAddr::from(std::net::Ipv6Addr::from(u128::from(a) & m))
        }
        _ => return Err(format!("`{v}`: prefix length out of range")),
    };
    Ok(format!("{masked}/{bits}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn ctx() -> Ctx<'static> {
        Ctx {
            http: true,
            read_file: &|_| Err("no files".into()),
        }
    }

    #[test]
    fn conditions_expand() {
        let c = ctx();
        let mut acls = Acls::default();
        acls.add("api", &w("path_beg /api"), &c);
        acls.add("api", &w("path_beg /v2"), &c);
        acls.add("net", &w("hdr(host) -i Example.NET"), &c);
        let d = condition(&w("api net"), false, &acls, &c).unwrap();
        assert_eq!(d.0.len(), 1);
        assert_eq!(
            d.0[0].pos,
            [Test::PathPrefix(w("/api /v2")), Test::Host(w("example.net"))]
        );
        let d = condition(&w("api || !net"), false, &acls, &c).unwrap();
        assert_eq!(d.0.len(), 2);
        assert_eq!(d.0[1].neg, [Test::Host(w("example.net"))]);
        let d = condition(&w("api net"), true, &acls, &c).unwrap();
        assert_eq!(d.0.len(), 2, "unless a b = !a or !b");
        let d = condition(&w("{ src 10.1.2.3/8 } !{ method POST }"), false, &acls, &c).unwrap();
        assert_eq!(d.0[0].pos, [Test::Source(w("10.0.0.0/8"))]);
        assert!(condition(&w("nope"), false, &acls, &c).is_err());
        assert!(condition(&w("{ hdr_cnt(x) gt 1 }"), false, &acls, &c).is_err());
        let d = condition(&w("{ sc_http_req_rate(0) gt 10 }"), false, &acls, &c).unwrap();
        assert_eq!(
            d.0[0].pos[0],
            Test::Counter(Counter {
                slot: 0,
                table: None,
                what: "http_req_rate".into(),
                max: 10
            })
        );
    }

    #[test]
    fn blow_up_is_bounded() {
        let c = ctx();
        let acls = Acls::default();
        let many = "{ src 10.0.0.1 } { src 10.0.0.2 } ".repeat(40);
        assert!(condition(&w(&many), true, &acls, &c).is_err());
    }
}
