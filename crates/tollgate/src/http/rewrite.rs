//! What a matched route changes on the way through, sans-io: templates over a fixed set of
//! request variables, header edits (`set`/`add`/`remove`), path rewrites (prefix or regex).
//!
//! Owns: [`Template`], [`RequestVars`], [`HeaderRules`], [`PathRewrite`], [`Rewrite`].
//! Everything is built once at config load (regexes compiled, replacements and templates
//! parsed, literal text checked); applying it writes into a caller's buffer.
//!
//! Invariants: a template's literal text holds only bytes allowed in a field value (checked
//! at load); what a variable brings in comes from the request and is checked after
//! rendering: a rendered value with a byte not allowed in a field value (CR, LF, NUL, other
//! controls) is never written — the caller is told, and counts it. Path and query are
//! copied byte for byte: percent-encoding is never decoded nor re-encoded.

use std::fmt;

pub use super::path_regex::PathRegex;

/// The variables a template may use. Values come from the request as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    /// `http` or `https`: how the client reached tollgate.
    Scheme,
    /// The request's host without port (absolute-form authority, else `Host`), as sent.
    Host,
    /// The port in the request's authority, empty when it names none.
    Port,
    /// Host and port as sent.
    Authority,
    /// The path, without the query.
    Path,
    /// The query, without `?` (empty when there is none).
    Query,
    /// The path and, when the target has one, `?` and the query: the target as sent.
    PathAndQuery,
}

impl Var {
    pub const ALL: [(&'static str, Var); 7] = [
        ("scheme", Var::Scheme),
        ("host", Var::Host),
        ("port", Var::Port),
        ("authority", Var::Authority),
        ("path", Var::Path),
        ("query", Var::Query),
        ("path_and_query", Var::PathAndQuery),
    ];
}

/// The request a template is rendered for: borrowed from the head, nothing copied.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestVars<'a> {
    pub scheme: &'a str,
    /// `host[:port]` as sent (empty when the request has none).
    pub authority: &'a [u8],
    /// The origin-form target: path, then `?query` if any.
    pub path_and_query: &'a [u8],
}

impl<'a> RequestVars<'a> {
    /// The vars of a request with this target (origin or absolute form) and `Host` value.
    pub fn of(scheme: &'a str, target: &'a [u8], host: Option<&'a [u8]>) -> Self {
        let (authority, path_and_query) = split_target(target);
        RequestVars {
            scheme,
            authority: authority.or(host).unwrap_or_default(),
            path_and_query,
        }
    }

    fn value(&self, var: Var) -> &'a [u8] {
        let (host, port) = split_port(self.authority);
        let (path, query) = split_query(self.path_and_query);
        match var {
            Var::Scheme => self.scheme.as_bytes(),
            Var::Host => host,
            Var::Port => port,
            Var::Authority => self.authority,
            Var::Path => path,
            Var::Query => query.unwrap_or_default(),
            Var::PathAndQuery => self.path_and_query,
        }
    }
}

/// An absolute-form target's authority and its origin-form rest; other forms as they are.
pub fn split_target(target: &[u8]) -> (Option<&[u8]>, &[u8]) {
    if target.starts_with(b"/") || target == b"*" {
        return (None, target);
    }
    let Some(at) = target.windows(3).position(|w| w == b"://") else {
        return (None, target);
    };
    let rest = target.get(at + 3..).unwrap_or_default();
    let end = rest.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    // `http://a?q` has the empty path: origin-form writes it as `/`.
    let tail: &[u8] = if tail.is_empty() { b"/" } else { tail };
    (Some(authority), tail)
}

/// `host[:port]` split at the port colon (an IPv6 literal keeps its brackets).
fn split_port(authority: &[u8]) -> (&[u8], &[u8]) {
    match authority.iter().rposition(|&b| b == b':') {
        Some(i) if !authority.starts_with(b"[") || authority.get(i.saturating_sub(1)) == Some(&b']') => (
            authority.get(..i).unwrap_or_default(),
            authority.get(i + 1..).unwrap_or_default(),
        ),
        _ => (authority, b""),
    }
}

/// A target's path and its query (without `?`; `None` when there is no `?`).
pub fn split_query(path_and_query: &[u8]) -> (&[u8], Option<&[u8]>) {
    match path_and_query.iter().position(|&b| b == b'?') {
        Some(i) => (path_and_query.get(..i).unwrap_or_default(), path_and_query.get(i + 1..)),
        None => (path_and_query, None),
    }
}

/// A byte a field value may hold (RFC 9110 5.5: VCHAR, obs-text, SP, HTAB): the rule the
/// HTTP/1 parser applies to what it receives.
pub fn field_byte_ok(b: u8) -> bool {
    crate::http::h1::headers::is_field_value_byte(b)
}

pub fn field_value_ok(value: &[u8]) -> bool {
    value.iter().all(|&b| field_byte_ok(b))
}

/// A header name as RFC 9110 allows it (a token).
pub fn field_name_ok(name: &[u8]) -> bool {
    crate::http::h1::headers::is_token(name)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(Box<[u8]>),
    Var(Var),
}

/// Text with `{variable}` references (`{{` and `}}` for literal braces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
    /// As written in the config (for `tollgate explain`).
    source: Box<str>,
}

/// Why a template was refused at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateError {
    UnknownVar(String),
    Unclosed,
    StrayBrace,
    /// A literal byte not allowed in a field value (CR, LF, NUL, another control).
    BadByte(u8),
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateError::UnknownVar(v) => {
                let known: Vec<String> = Var::ALL.iter().map(|(n, _)| format!("{{{n}}}")).collect();
                write!(f, "unknown variable `{{{v}}}` (known: {})", known.join(" "))
            }
            TemplateError::Unclosed => write!(f, "`{{` without its `}}` (write `{{{{` for a literal brace)"),
            TemplateError::StrayBrace => write!(f, "`}}` without its `{{` (write `}}}}` for a literal brace)"),
            TemplateError::BadByte(b) => write!(
                f,
                "contains byte 0x{b:02x}, which a header field value cannot carry (CR, LF, NUL and other controls are refused)"
            ),
        }
    }
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let mut pieces = Vec::new();
        let mut lit = Vec::new();
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            rest = &rest[c.len_utf8()..];
            match c {
                '{' if rest.starts_with('{') => {
                    lit.push(b'{');
                    rest = &rest[1..];
                }
                '}' if rest.starts_with('}') => {
                    lit.push(b'}');
                    rest = &rest[1..];
                }
                '}' => return Err(TemplateError::StrayBrace),
                '{' => {
                    let end = rest.find('}').ok_or(TemplateError::Unclosed)?;
                    let name = &rest[..end];
                    let var = Var::ALL
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, v)| *v)
                        .ok_or_else(|| TemplateError::UnknownVar(name.to_string()))?;
                    rest = &rest[end + 1..];
                    if !lit.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut lit).into_boxed_slice()));
                    }
                    pieces.push(Piece::Var(var));
                }
                c => {
                    let mut utf8 = [0u8; 4];
                    lit.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                }
            }
        }
        if !lit.is_empty() {
            pieces.push(Piece::Text(lit.into_boxed_slice()));
        }
        for p in &pieces {
            if let Piece::Text(t) = p
                && let Some(&b) = t.iter().find(|&&b| !field_byte_ok(b))
            {
                return Err(TemplateError::BadByte(b));
            }
        }
        Ok(Template {
            pieces,
            source: text.into(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The fixed text, when the template uses no variable.
    pub fn literal(&self) -> Option<&[u8]> {
        match self.pieces.as_slice() {
            [] => Some(b""),
            [Piece::Text(t)] => Some(t),
            _ => None,
        }
    }

    /// Appends the rendered text to `out`; false (and `out` as it was) if the result holds a
    /// byte a field value cannot carry.
    pub fn render(&self, vars: &RequestVars<'_>, out: &mut Vec<u8>) -> bool {
        let mark = out.len();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.extend_from_slice(t),
                Piece::Var(v) => {
                    let value = vars.value(*v);
                    if !field_value_ok(value) {
                        out.truncate(mark);
                        return false;
                    }
                    out.extend_from_slice(value);
                }
            }
        }
        true
    }
}

/// `request_headers` / `response_headers`: fields removed, replaced, added.
#[derive(Debug, Clone, Default)]
pub struct HeaderRules {
    /// Names (lowercase) whose fields are dropped: every `remove` and `set` name.
    dropped: Vec<Box<[u8]>>,
    /// Fields written after the kept ones: the `set` ones, then the `add` ones, in file order.
    written: Vec<(Box<[u8]>, Template)>,
}

impl HeaderRules {
    /// `set` replaces every field of its name with one, `add` appends one, `remove` drops
    /// every field of its name (applied in that order: remove, set, add).
    pub fn new(set: Vec<(String, Template)>, add: Vec<(String, Template)>, remove: Vec<String>) -> Self {
        let lower = |n: &str| n.to_ascii_lowercase().into_bytes().into_boxed_slice();
        let mut dropped: Vec<Box<[u8]>> = remove.iter().map(|n| lower(n)).collect();
        dropped.extend(set.iter().map(|(n, _)| lower(n)));
        let written = set
            .into_iter()
            .chain(add)
            .map(|(n, t)| (n.into_bytes().into_boxed_slice(), t))
            .collect();
        HeaderRules { dropped, written }
    }

    pub fn is_empty(&self) -> bool {
        self.dropped.is_empty() && self.written.is_empty()
    }

    /// Whether a received field of this name is left out.
    #[inline]
    pub fn drops(&self, name: &[u8]) -> bool {
        self.dropped.iter().any(|d| name.eq_ignore_ascii_case(d))
    }

    /// The `set` and `add` fields, in writing order.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &Template)> {
        self.written.iter().map(|(n, t)| (&**n, t))
    }

    /// Writes the `set` and `add` fields as HTTP/1 lines; returns how many were left out
    /// because their rendered value could not be sent.
    pub fn write_h1(&self, vars: &RequestVars<'_>, out: &mut Vec<u8>) -> u32 {
        let mut skipped = 0;
        for (name, value) in self.fields() {
            let mark = out.len();
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            if value.render(vars, out) {
                out.extend_from_slice(b"\r\n");
            } else {
                out.truncate(mark);
                skipped += 1;
            }
        }
        skipped
    }

    /// Applies the rules to a header map (HTTP/2 heads); returns the fields left out.
    pub fn apply_to_map(&self, map: &mut ::http::HeaderMap, vars: &RequestVars<'_>) -> u32 {
        for name in &self.dropped {
            if let Ok(n) = ::http::HeaderName::from_bytes(name) {
                map.remove(n);
            }
        }
        let mut skipped = 0;
        let mut value = Vec::new();
        for (name, template) in self.fields() {
            value.clear();
            let rendered = template.render(vars, &mut value);
            match (
                rendered,
                ::http::HeaderName::from_bytes(name),
                ::http::HeaderValue::from_bytes(&value),
            ) {
                (true, Ok(n), Ok(v)) => {
                    map.append(n, v);
                }
                _ => skipped += 1,
            }
        }
        skipped
    }
}

/// One piece of a regex replacement: text, or a capture group's match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplacePiece {
    Text(Box<[u8]>),
    Group(usize),
}

/// `rewrite_path`: applied to the path only; the query follows unchanged.
#[derive(Debug, Clone)]
pub enum PathRewrite {
    /// A path starting with `prefix` has it replaced by `to` (one `/` kept where they meet).
    Prefix { prefix: Box<[u8]>, to: Box<[u8]> },
    /// The first match of `regex` in the path replaced by `replace`.
    Regex {
        regex: PathRegex,
        replace: Vec<ReplacePiece>,
    },
}

/// Why a regex replacement was refused at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaceError {
    NoSuchGroup(String),
    Unclosed,
    BadByte(u8),
}

impl fmt::Display for ReplaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplaceError::NoSuchGroup(g) => write!(f, "the regex has no capture group `{g}`"),
            ReplaceError::Unclosed => write!(f, "`${{` without its `}}` (write `$$` for a literal `$`)"),
            ReplaceError::BadByte(b) => write!(f, "contains byte 0x{b:02x}, which a request path cannot carry"),
        }
    }
}

/// A byte a request target may carry as written (RFC 3986 unreserved, reserved, `%`).
fn target_byte_ok(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~:/?#[]@!$&'()*+,;=%".contains(&b)
}

impl PathRewrite {
    /// A prefix rewrite; both start with `/` (checked by the caller) and hold only path bytes.
    pub fn prefix(prefix: &str, to: &str) -> Result<PathRewrite, ReplaceError> {
        for s in [prefix, to] {
            if let Some(&b) = s
                .as_bytes()
                .iter()
                .find(|&&b| !target_byte_ok(b) || b == b'?' || b == b'#')
            {
                return Err(ReplaceError::BadByte(b));
            }
        }
        Ok(PathRewrite::Prefix {
            prefix: prefix.as_bytes().into(),
            to: to.as_bytes().into(),
        })
    }

    /// A regex rewrite: `$N`, `${N}` and `${name}` insert a group's match, `$$` a `$`.
    pub fn regex(regex: PathRegex, replace: &str) -> Result<PathRewrite, ReplaceError> {
        let mut pieces = Vec::new();
        let mut lit = Vec::new();
        let b = replace.as_bytes();
        let mut i = 0;
        let group_of = |name: &str| {
            regex
                .group(name)
                .ok_or_else(|| ReplaceError::NoSuchGroup(name.to_string()))
        };
        while let Some(&c) = b.get(i) {
            if c != b'$' {
                if !target_byte_ok(c) || c == b'?' || c == b'#' {
                    return Err(ReplaceError::BadByte(c));
                }
                lit.push(c);
                i += 1;
                continue;
            }
            let (name, next) = match b.get(i + 1) {
                Some(b'$') => {
                    lit.push(b'$');
                    i += 2;
                    continue;
                }
                Some(b'{') => {
                    let close = b
                        .get(i + 2..)
                        .and_then(|r| r.iter().position(|&x| x == b'}'))
                        .ok_or(ReplaceError::Unclosed)?;
                    (replace.get(i + 2..i + 2 + close).unwrap_or_default(), i + 3 + close)
                }
                _ => {
                    let digits = b
                        .get(i + 1..)
                        .unwrap_or_default()
                        .iter()
                        .take_while(|x| x.is_ascii_digit())
                        .count();
                    if digits == 0 {
                        // A lone `$` is itself.
                        lit.push(b'$');
                        i += 1;
                        continue;
                    }
                    (replace.get(i + 1..i + 1 + digits).unwrap_or_default(), i + 1 + digits)
                }
            };
            let group = group_of(name)?;
            if !lit.is_empty() {
                pieces.push(ReplacePiece::Text(std::mem::take(&mut lit).into_boxed_slice()));
            }
            pieces.push(ReplacePiece::Group(group));
            i = next;
        }
        if !lit.is_empty() {
            pieces.push(ReplacePiece::Text(lit.into_boxed_slice()));
        }
        Ok(PathRewrite::Regex { regex, replace: pieces })
    }

    /// Writes the rewritten `path` to `out` (the path as it is when the rewrite does not
    /// apply). An empty result is written as `/`.
    pub fn write(&self, path: &[u8], out: &mut Vec<u8>) {
        let mark = out.len();
        match self {
            PathRewrite::Prefix { prefix, to } => match path.strip_prefix(&**prefix) {
                Some(rest) => {
                    out.extend_from_slice(to);
                    let rest = if to.ends_with(b"/") {
                        rest.strip_prefix(b"/").unwrap_or(rest)
                    } else {
                        rest
                    };
                    out.extend_from_slice(rest);
                }
                None => out.extend_from_slice(path),
            },
            PathRewrite::Regex { regex, replace } => regex.with_captures(path, |caps| {
                let Some((caps, m)) = caps.and_then(|c| c.get_match().map(|m| (c, m))) else {
                    out.extend_from_slice(path);
                    return;
                };
                out.extend_from_slice(path.get(..m.start()).unwrap_or_default());
                for p in replace {
                    match p {
                        ReplacePiece::Text(t) => out.extend_from_slice(t),
                        ReplacePiece::Group(g) => {
                            if let Some(span) = caps.get_group(*g) {
                                out.extend_from_slice(path.get(span.range()).unwrap_or_default());
                            }
                        }
                    }
                }
                out.extend_from_slice(path.get(m.end()..).unwrap_or_default());
            }),
        }
        if out.len() == mark {
            out.push(b'/');
        }
    }
}

/// What a route sends to its backend changes: the request's fields, path and host, and the
/// response's fields.
#[derive(Debug, Clone, Default)]
pub struct Rewrite {
    pub request_headers: HeaderRules,
    pub response_headers: HeaderRules,
    pub path: Option<PathRewrite>,
    /// `set_host`: the `Host` (HTTP/2: `:authority`) the server gets.
    pub host: Option<Box<[u8]>>,
}

impl Rewrite {
    /// Whether the request target or `Host` changes.
    pub fn changes_target(&self) -> bool {
        self.path.is_some() || self.host.is_some()
    }

    /// The origin-form target after `rewrite_path`: the new path, then the query as sent.
    pub fn write_target(&self, path_and_query: &[u8], out: &mut Vec<u8>) {
        let (path, query) = split_query(path_and_query);
        match &self.path {
            Some(p) => p.write(path, out),
            None => out.extend_from_slice(path),
        }
        if let Some(q) = query {
            out.push(b'?');
            out.extend_from_slice(q);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn vars<'a>(target: &'a [u8], host: &'a [u8]) -> RequestVars<'a> {
        RequestVars::of("http", target, Some(host))
    }

    fn render(t: &str, v: &RequestVars<'_>) -> String {
        let mut out = Vec::new();
        assert!(Template::parse(t).unwrap().render(v, &mut out));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn templates_copy_path_and_query_byte_for_byte() {
        let v = vars(b"/a%2Fb?x=%20&y", b"Example.com:8080");
        assert_eq!(
            render("https://{host}{path_and_query}", &v),
            "https://Example.com/a%2Fb?x=%20&y"
        );
        assert_eq!(
            render("{scheme}|{port}|{authority}|{path}|{query}", &v),
            "http|8080|Example.com:8080|/a%2Fb|x=%20&y"
        );
        assert_eq!(render("{{literal}} }}", &v), "{literal} }");
        let v = vars(b"http://h:1/p?", b"ignored");
        assert_eq!(
            render("{host}{path_and_query}", &v),
            "h/p?",
            "an empty query keeps its `?`"
        );
        let v = vars(b"http://h", b"ignored");
        assert_eq!(render("{path_and_query}", &v), "/");
        let v = vars(b"/", b"[::1]:80");
        assert_eq!(render("{host} {port}", &v), "[::1] 80");
    }

    #[test]
    fn templates_refuse_what_a_field_cannot_carry() {
        assert_eq!(Template::parse("a\r\nb: c"), Err(TemplateError::BadByte(b'\r')));
        assert_eq!(Template::parse("a\0"), Err(TemplateError::BadByte(0)));
        assert_eq!(Template::parse("{nope}"), Err(TemplateError::UnknownVar("nope".into())));
        assert_eq!(Template::parse("{host"), Err(TemplateError::Unclosed));
        assert_eq!(Template::parse("a}"), Err(TemplateError::StrayBrace));
        // A value brought in by a variable is checked after rendering.
        let t = Template::parse("x-{host}").unwrap();
        let mut out = b"keep".to_vec();
        assert!(!t.render(&vars(b"/", b"evil\r\nset-cookie: a=b"), &mut out));
        assert_eq!(out, b"keep");
    }

    #[test]
    fn header_rules_write_set_then_add_and_report_skips() {
        let t = |s: &str| Template::parse(s).unwrap();
        let rules = HeaderRules::new(
            vec![("X-Set".into(), t("1"))],
            vec![("X-Add".into(), t("{host}"))],
            vec!["Server".into()],
        );
        assert!(rules.drops(b"server") && rules.drops(b"x-set") && !rules.drops(b"x-add"));
        let mut out = Vec::new();
        assert_eq!(rules.write_h1(&vars(b"/", b"h"), &mut out), 0);
        assert_eq!(out, b"X-Set: 1\r\nX-Add: h\r\n");
        out.clear();
        assert_eq!(rules.write_h1(&vars(b"/", b"h\x01"), &mut out), 1);
        assert_eq!(out, b"X-Set: 1\r\n");
        let mut map = ::http::HeaderMap::new();
        map.append("server", "a".parse().unwrap());
        map.append("x-set", "old".parse().unwrap());
        map.append("x-set", "older".parse().unwrap());
        map.append("x-add", "first".parse().unwrap());
        assert_eq!(rules.apply_to_map(&mut map, &vars(b"/", b"h")), 0);
        assert!(map.get("server").is_none());
        assert_eq!(map.get_all("x-set").iter().count(), 1);
        assert_eq!(
            map.get_all("x-add")
                .iter()
                .map(|v| v.to_str().unwrap())
                .collect::<Vec<_>>(),
            ["first", "h"]
        );
    }

    fn rewrite(p: &PathRewrite, path_and_query: &str) -> String {
        let r = Rewrite {
            path: Some(p.clone()),
            ..Rewrite::default()
        };
        let mut out = Vec::new();
        r.write_target(path_and_query.as_bytes(), &mut out);
        let mut again = Vec::new();
        r.write_target(path_and_query.as_bytes(), &mut again);
        assert_eq!(out, again, "the same with the thread's slots reused");
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn prefix_rewrites_keep_one_slash_and_the_query() {
        let p = PathRewrite::prefix("/api", "/").unwrap();
        assert_eq!(rewrite(&p, "/api/users?x=%20"), "/users?x=%20");
        assert_eq!(rewrite(&p, "/api"), "/");
        assert_eq!(rewrite(&p, "/other/api"), "/other/api");
        let p = PathRewrite::prefix("/", "/v2/").unwrap();
        assert_eq!(rewrite(&p, "/a%2Fb"), "/v2/a%2Fb");
        assert!(PathRewrite::prefix("/a b", "/").is_err());
    }

    #[test]
    fn regex_rewrites_expand_groups() {
        let re = |s: &str| PathRegex::new(s, 1 << 20).unwrap();
        let p = PathRewrite::regex(re("^/u/(?P<id>[0-9]+)/(.*)$"), "/users/${id}/$2$$").unwrap();
        assert_eq!(rewrite(&p, "/u/42/x%2Fy?q"), "/users/42/x%2Fy$?q");
        assert_eq!(rewrite(&p, "/v/1/x"), "/v/1/x", "no match: unchanged");
        let p = PathRewrite::regex(re("^/old"), "/new").unwrap();
        assert_eq!(rewrite(&p, "/old/x"), "/new/x");
        assert_eq!(
            PathRewrite::regex(re("^/(a)"), "/$2").err(),
            Some(ReplaceError::NoSuchGroup("2".into()))
        );
        assert_eq!(
            PathRewrite::regex(re("^/(a)"), "/${nope}").err(),
            Some(ReplaceError::NoSuchGroup("nope".into()))
        );
        assert_eq!(
            PathRewrite::regex(re("^/"), "/a b").err(),
            Some(ReplaceError::BadByte(b' '))
        );
        // A backtracking-shaped pattern on a path that defeats backtracking engines (2^64
        // ways to fail): the linear-time engine answers at once.
        let p = PathRewrite::regex(re("^/((a+)+)$"), "/x$1").unwrap();
        let path = format!("/{}b", "a".repeat(64));
        assert_eq!(rewrite(&p, &path), path, "no match, unchanged");
        assert!(PathRegex::new("(a{1000}){1000}", 1 << 20).is_err(), "a size bound");
    }
}
