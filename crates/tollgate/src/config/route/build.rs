//! The conditions as written (`file::RouteSection`, `NotSection`, `MatcherSection`) turned
//! into [`Cond`]s, every refusal positioned at the value at fault. A route, a `not` and a
//! matcher share the condition keys; [`Keys`] borrows them from any of the three.

use std::collections::HashMap;
use std::ops::Range;

use toml::Spanned;

use super::super::prefix_set::PrefixSet;
use super::{Cidr, Cond, Conditions, Matcher, Regex, Scheme, ValueTest};
use crate::config::file::{
    ClientCertName, HeaderMatchSection, MatcherSection, ModeName, NameValueSection, NotSection, OneOrMore,
    RouteSection, SchemeName,
};
use crate::config::model::HostPattern;

type Errors = Vec<(Range<usize>, String, String)>;

/// The condition keys of a route, a `not` or a matcher.
#[derive(Default)]
pub(in crate::config) struct Keys<'a> {
    host: Option<&'a Spanned<OneOrMore>>,
    path: Option<&'a Spanned<OneOrMore>>,
    path_prefix: Option<&'a Spanned<OneOrMore>>,
    path_regex: Option<&'a Spanned<OneOrMore>>,
    method: Option<&'a Spanned<OneOrMore>>,
    query: Option<&'a Spanned<NameValueSection>>,
    header: Option<&'a Spanned<HeaderMatchSection>>,
    cookie: Option<&'a Spanned<NameValueSection>>,
    source: Option<&'a Spanned<OneOrMore>>,
    scheme: Option<&'a Spanned<SchemeName>>,
    sni: Option<&'a Spanned<OneOrMore>>,
    client_cert: Option<&'a Spanned<ClientCertName>>,
    matcher: Option<&'a Spanned<String>>,
    matchers: Option<&'a Spanned<Vec<Spanned<String>>>>,
    not: Option<&'a Spanned<NotSection>>,
}

impl<'a> Keys<'a> {
    pub(in crate::config) fn of_route(r: &'a RouteSection) -> Keys<'a> {
        Keys {
            host: r.host.as_ref(),
            path: r.path.as_ref(),
            path_prefix: r.path_prefix.as_ref(),
            path_regex: r.path_regex.as_ref(),
            method: r.method.as_ref(),
            query: r.query.as_ref(),
            header: r.header.as_ref(),
            cookie: r.cookie.as_ref(),
            source: r.source.as_ref(),
            scheme: r.scheme.as_ref(),
            sni: r.sni.as_ref(),
            client_cert: r.client_cert.as_ref(),
            matcher: r.matcher.as_ref(),
            matchers: r.matchers.as_ref(),
            not: r.not.as_ref(),
        }
    }

    fn of_not(n: &'a NotSection) -> Keys<'a> {
        Keys {
            host: n.host.as_ref(),
            path: n.path.as_ref(),
            path_prefix: n.path_prefix.as_ref(),
            path_regex: n.path_regex.as_ref(),
            method: n.method.as_ref(),
            query: n.query.as_ref(),
            header: n.header.as_ref(),
            cookie: n.cookie.as_ref(),
            source: n.source.as_ref(),
            scheme: n.scheme.as_ref(),
            sni: n.sni.as_ref(),
            client_cert: n.client_cert.as_ref(),
            matcher: n.matcher.as_ref(),
            matchers: n.matchers.as_ref(),
            not: None,
        }
    }

    fn of_matcher(m: &'a MatcherSection) -> Keys<'a> {
        Keys {
            host: m.host.as_ref(),
            path: m.path.as_ref(),
            path_prefix: m.path_prefix.as_ref(),
            path_regex: m.path_regex.as_ref(),
            method: m.method.as_ref(),
            query: m.query.as_ref(),
            header: m.header.as_ref(),
            cookie: m.cookie.as_ref(),
            source: m.source.as_ref(),
            scheme: m.scheme.as_ref(),
            sni: m.sni.as_ref(),
            client_cert: m.client_cert.as_ref(),
            not: m.not.as_ref(),
            matcher: None,
            matchers: None,
        }
    }

    /// Each key given, by name, with its span, in the order conditions are checked.
    fn given(&self) -> Vec<(&'static str, Range<usize>)> {
        let span = |s: Option<Range<usize>>, name| s.map(|s| (name, s));
        [
            span(self.host.map(Spanned::span), "host"),
            span(self.path.map(Spanned::span), "path"),
            span(self.path_prefix.map(Spanned::span), "path_prefix"),
            span(self.path_regex.map(Spanned::span), "path_regex"),
            span(self.method.map(Spanned::span), "method"),
            span(self.query.map(Spanned::span), "query"),
            span(self.header.map(Spanned::span), "header"),
            span(self.cookie.map(Spanned::span), "cookie"),
            span(self.source.map(Spanned::span), "source"),
            span(self.scheme.map(Spanned::span), "scheme"),
            span(self.sni.map(Spanned::span), "sni"),
            span(self.client_cert.map(Spanned::span), "client_cert"),
            span(self.matcher.map(Spanned::span), "matcher"),
            span(self.matchers.map(Spanned::span), "matchers"),
            span(self.not.map(Spanned::span), "not"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// Where the keys start (for an error about the whole set).
    pub(in crate::config) fn first_span(&self) -> Option<Range<usize>> {
        self.given().into_iter().map(|(_, s)| s).next()
    }
}

/// Builds one frontend's conditions: its matchers first, then its routes.
pub(in crate::config) struct Builder {
    mode: ModeName,
    /// The frontend terminates TLS (so an HTTP request has an SNI).
    tls: bool,
    /// The frontend asks clients for certificates (`[frontend.tls.client_auth]`).
    pub(in crate::config) client_auth: bool,
    matcher_names: HashMap<String, usize>,
    /// Every path regex so far; `Cond::PathRegex::ids` index it.
    pub(in crate::config) path_regexes: Vec<String>,
}

impl Builder {
    pub(in crate::config) fn new(mode: ModeName, tls: bool) -> Builder {
        Builder {
            mode,
            tls,
            client_auth: false,
            matcher_names: HashMap::new(),
            path_regexes: Vec::new(),
        }
    }

    /// `[[frontend.matcher]]`: HTTP mode only, names unique, none using another.
    pub(in crate::config) fn matchers(
        &mut self,
        errors: &mut Errors,
        sections: &[MatcherSection],
        key: &str,
    ) -> Vec<Matcher> {
        let mut out = Vec::new();
        for (i, m) in sections.iter().enumerate() {
            let mkey = format!("{key}.matcher[{i}]");
            if self.mode == ModeName::Tcp {
                errors.push((m.name.span(), mkey, "`matcher` needs an http-mode frontend".into()));
                continue;
            }
            let name = m.name.get_ref();
            if name.is_empty() {
                errors.push((m.name.span(), format!("{mkey}.name"), "must not be empty".into()));
            } else if self.matcher_names.contains_key(name) {
                errors.push((
                    m.name.span(),
                    format!("{mkey}.name"),
                    format!("a matcher named `{name}` is defined twice"),
                ));
                continue;
            }
            let keys = Keys::of_matcher(m);
            if keys.given().is_empty() {
                errors.push((
                    m.name.span(),
                    mkey.clone(),
                    "a matcher needs at least one condition".into(),
                ));
            }
            let when = self.conditions(errors, &keys, &mkey, true);
            self.matcher_names.insert(name.clone(), out.len());
            out.push(Matcher {
                name: name.clone(),
                when,
            });
        }
        out
    }

    /// A route's conditions (`key`: `frontend[i].route[j]`).
    pub(in crate::config) fn route(&mut self, errors: &mut Errors, r: &RouteSection, key: &str) -> Conditions {
        self.conditions(errors, &Keys::of_route(r), key, false)
    }

    fn conditions(&mut self, errors: &mut Errors, keys: &Keys<'_>, key: &str, in_matcher: bool) -> Conditions {
        let mut out = Vec::new();
        for (field, span) in keys.given() {
            let refused = match (self.mode, field) {
                (ModeName::Tcp, "sni" | "source") => None,
                (ModeName::Tcp, _) => Some(format!("`{field}` needs an http-mode frontend")),
                (ModeName::Http, "sni") if !self.tls => {
                    Some("`sni` in an http-mode frontend needs `[frontend.tls]` (a plain connection has no SNI)".into())
                }
                (ModeName::Http, "client_cert") if !self.client_auth => Some(
                    "`client_cert` needs `[frontend.tls.client_auth]` (no client certificate is asked for otherwise)"
                        .into(),
                ),
                (ModeName::Http, "matcher" | "matchers") if in_matcher => {
                    Some("a matcher cannot use another matcher".into())
                }
                _ => None,
            };
            if let Some(msg) = refused {
                errors.push((span, format!("{key}.{field}"), msg));
            }
        }
        let at = |field: &str| format!("{key}.{field}");
        if let Some(v) = keys.host {
            out.extend(self.hosts(errors, v, &at("host")).map(Cond::Host));
        }
        if let Some(v) = keys.path {
            out.extend(paths(errors, v, &at("path"), false).map(Cond::Path));
        }
        if let Some(v) = keys.path_prefix {
            out.extend(paths(errors, v, &at("path_prefix"), true).map(Cond::PathPrefix));
        }
        if let Some(v) = keys.path_regex {
            out.extend(self.path_regex(errors, v, &at("path_regex")));
        }
        if let Some(v) = keys.method {
            out.extend(methods(errors, v, &at("method")).map(Cond::Method));
        }
        if let Some(v) = keys.query {
            out.extend(name_value(errors, v, &at("query"), |_| true).map(|(name, value)| Cond::Query { name, value }));
        }
        if let Some(v) = keys.header {
            out.extend(header(errors, v, &at("header")));
        }
        if let Some(v) = keys.cookie {
            let token = |n: &str| n.bytes().all(is_tchar);
            out.extend(name_value(errors, v, &at("cookie"), token).map(|(name, value)| Cond::Cookie { name, value }));
        }
        if let Some(v) = keys.source {
            out.extend(sources(errors, v, &at("source")).map(|b| Cond::Source(PrefixSet::new(b))));
        }
        if let Some(v) = keys.scheme {
            out.push(Cond::Scheme(match v.get_ref() {
                SchemeName::Http => Scheme::Http,
                SchemeName::Https => Scheme::Https,
            }));
        }
        if let Some(v) = keys.sni {
            out.extend(self.hosts(errors, v, &at("sni")).map(Cond::Sni));
        }
        if let Some(v) = keys.client_cert {
            out.push(Cond::ClientCert(*v.get_ref() == ClientCertName::Verified));
        }
        let named = keys
            .matcher
            .into_iter()
            .map(|m| (m, at("matcher")))
            .chain(keys.matchers.into_iter().flat_map(|list| {
                list.get_ref()
                    .iter()
                    .enumerate()
                    .map(move |(i, m)| (m, format!("{key}.matchers[{i}]")))
            }));
        for (name, mkey) in named {
            match self.matcher_names.get(name.get_ref()) {
                Some(&index) if !in_matcher => out.push(Cond::Matcher {
                    index,
                    name: name.get_ref().clone(),
                }),
                Some(_) => {}
                None => errors.push((
                    name.span(),
                    mkey,
                    format!("no [[frontend.matcher]] named `{}` in this frontend", name.get_ref()),
                )),
            }
        }
        if let Some(matchers) = keys.matchers
            && matchers.get_ref().is_empty()
        {
            errors.push((matchers.span(), at("matchers"), "must name at least one matcher".into()));
        }
        if let Some(not) = keys.not {
            let inner = Keys::of_not(not.get_ref());
            if inner.given().is_empty() {
                errors.push((not.span(), at("not"), "`not` needs at least one condition".into()));
            } else {
                let negated = self.conditions(errors, &inner, &at("not"), in_matcher);
                out.push(Cond::Not(negated.0));
            }
        }
        Conditions(out)
    }

    fn hosts(&self, errors: &mut Errors, v: &Spanned<OneOrMore>, key: &str) -> Option<Vec<HostPattern>> {
        let list = non_empty(errors, v, key)?;
        let mut out = Vec::new();
        for text in list {
            match HostPattern::parse(text) {
                Some(p) => out.push(p),
                None => errors.push((
                    v.span(),
                    key.to_string(),
                    format!("`{text}` is not a host name or a `*.domain` wildcard"),
                )),
            }
        }
        (out.len() == list.len()).then_some(out)
    }

    fn path_regex(&mut self, errors: &mut Errors, v: &Spanned<OneOrMore>, key: &str) -> Option<Cond> {
        let list = non_empty(errors, v, key)?;
        for text in list {
            if let Err(e) = Regex::new(text) {
                errors.push((v.span(), key.to_string(), format!("regex `{text}`: {e}")));
                return None;
            }
        }
        let first = self.path_regexes.len();
        self.path_regexes.extend(list.iter().cloned());
        Some(Cond::PathRegex {
            ids: first..self.path_regexes.len(),
            written: list.to_vec(),
        })
    }
}

fn non_empty<'v>(errors: &mut Errors, v: &'v Spanned<OneOrMore>, key: &str) -> Option<&'v [String]> {
    let list = v.get_ref().0.as_slice();
    if list.is_empty() {
        errors.push((v.span(), key.to_string(), "must list at least one value".into()));
        return None;
    }
    Some(list)
}

/// `path` and `path_prefix`: start with `/`; the query is matched with `query`.
fn paths(errors: &mut Errors, v: &Spanned<OneOrMore>, key: &str, prefix: bool) -> Option<Vec<Box<[u8]>>> {
    let list = non_empty(errors, v, key)?;
    for p in list {
        let msg = if !p.starts_with('/') {
            "must start with `/`"
        } else if p.contains('?') {
            "is matched against the path only: match the query with `query`"
        } else {
            continue;
        };
        let what = if prefix { "a prefix" } else { "a path" };
        errors.push((v.span(), key.to_string(), format!("{what} `{p}` {msg}")));
        return None;
    }
    Some(list.iter().map(|p| p.as_bytes().into()).collect())
}

/// The token characters of RFC 9110 5.6.2 (method and field names).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn methods(errors: &mut Errors, v: &Spanned<OneOrMore>, key: &str) -> Option<Vec<Box<[u8]>>> {
    let list = non_empty(errors, v, key)?;
    for m in list {
        let msg = if m.is_empty() || !m.bytes().all(is_tchar) {
            format!("`{m}` is not a method name")
        } else if m.bytes().any(|b| b.is_ascii_lowercase()) {
            format!("methods are case-sensitive: write `{}`", m.to_ascii_uppercase())
        } else {
            continue;
        };
        errors.push((v.span(), key.to_string(), msg));
        return None;
    }
    Some(list.iter().map(|m| m.as_bytes().into()).collect())
}

type NameValue = (Box<[u8]>, Option<Box<[u8]>>);

fn name_value(
    errors: &mut Errors,
    v: &Spanned<NameValueSection>,
    key: &str,
    valid: impl Fn(&str) -> bool,
) -> Option<NameValue> {
    let s = v.get_ref();
    let name = s.name.get_ref();
    if name.is_empty() || !valid(name) {
        errors.push((
            s.name.span(),
            format!("{key}.name"),
            format!("`{name}` is not a valid name here"),
        ));
        return None;
    }
    Some((
        name.as_bytes().into(),
        s.value.as_ref().map(|v| v.get_ref().as_bytes().into()),
    ))
}

fn header(errors: &mut Errors, v: &Spanned<HeaderMatchSection>, key: &str) -> Option<Cond> {
    let h = v.get_ref();
    let name = h.name.get_ref();
    if name.is_empty() || !name.bytes().all(is_tchar) {
        errors.push((
            h.name.span(),
            format!("{key}.name"),
            format!("`{name}` is not a header name"),
        ));
        return None;
    }
    let given: Vec<_> = [("value", &h.value), ("prefix", &h.prefix), ("regex", &h.regex)]
        .into_iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
        .collect();
    let test = match given.as_slice() {
        [] => ValueTest::Present,
        [("value", v)] => ValueTest::Exact(v.get_ref().as_bytes().into()),
        [("prefix", v)] => ValueTest::Prefix(v.get_ref().as_bytes().into()),
        [(_, v)] => match Regex::new(v.get_ref()) {
            Ok(re) => ValueTest::Regex(re),
            Err(e) => {
                errors.push((
                    v.span(),
                    format!("{key}.regex"),
                    format!("regex `{}`: {e}", v.get_ref()),
                ));
                return None;
            }
        },
        [_, (k, v), ..] => {
            errors.push((
                v.span(),
                format!("{key}.{k}"),
                "give at most one of `value`, `prefix` and `regex` (none: the header is present)".into(),
            ));
            return None;
        }
    };
    Some(Cond::Header {
        name: name.to_ascii_lowercase().into(),
        test,
    })
}

pub(in crate::config) fn sources(errors: &mut Errors, v: &Spanned<OneOrMore>, key: &str) -> Option<Vec<Cidr>> {
    let list = non_empty(errors, v, key)?;
    let mut out = Vec::new();
    for text in list {
        match Cidr::parse(text) {
            Ok(c) => out.push(c),
            Err(msg) => {
                errors.push((v.span(), key.to_string(), msg));
                return None;
            }
        }
    }
    Some(out)
}
