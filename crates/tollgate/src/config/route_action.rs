//! What a matched `[[frontend.route]]` does: the action keys as written (`backend`,
//! `return`, `redirect`, `deny`, and with `backend` the rewrites `request_headers`,
//! `response_headers`, `rewrite_path`, `set_host`) and their validation into
//! `model::RouteAction`.
//!
//! Everything that can be checked is checked here, with its position: template variables
//! and literal bytes (no CR/LF/NUL can come from the file), header names (hop-by-hop and
//! framing fields refused: the proxy owns them), regexes compiled (size-bounded), status
//! codes, `body_file` read (size-bounded). What only the request can bring (a variable's
//! value) is checked when rendered (`http::rewrite`).

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::file::{ModeName, ReturnSection, RouteSection};
use super::model::{Answer, Backend, Redirect, RouteAction};
use super::validate::Validator;
use crate::http::rewrite::{HeaderRules, PathRewrite, Rewrite, Template, field_name_ok, field_value_ok};

/// `body_file` larger than this is refused: the body is held in memory by every worker.
pub(crate) const MAX_BODY_FILE: u64 = 1024 * 1024;

/// Compiled `rewrite_path.regex` programs larger than this are refused.
const MAX_REGEX_SIZE: usize = 1024 * 1024;

/// Names a route may not edit: the proxy decides them (framing, connection management), or
/// another key does (`set_host`, the frontend's `forwarded`). Whether `remove` may still drop
/// the client's own, and why not otherwise.
const OWNED_NAMES: [(&str, bool, &str); 11] = [
    ("connection", false, "a hop-by-hop field"),
    ("keep-alive", false, "a hop-by-hop field"),
    ("te", false, "a hop-by-hop field"),
    (
        "transfer-encoding",
        false,
        "a hop-by-hop field that decides the framing",
    ),
    ("upgrade", false, "a hop-by-hop field"),
    ("proxy-connection", false, "a hop-by-hop field"),
    ("content-length", false, "the framing is the proxy's"),
    ("host", false, "`set_host` sets the Host"),
    ("x-forwarded-for", true, FORWARDING),
    ("x-forwarded-proto", true, FORWARDING),
    ("forwarded", true, FORWARDING),
];

const FORWARDING: &str = "the frontend's `forwarded` key writes it (`remove` drops the client's)";

/// `name = "value"` pairs of a TOML table, positions kept.
pub(crate) type FieldsSection = BTreeMap<Spanned<String>, Spanned<String>>;

/// `redirect = { to = "https://{host}{path_and_query}", status = 301 }`, or the scheme
/// switch `redirect = { scheme = "https" }` (host, path and query kept; `port` optional).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RedirectSection {
    pub to: Option<Spanned<String>>,
    pub scheme: Option<Spanned<String>>,
    pub port: Option<Spanned<u16>>,
    pub status: Option<Spanned<u16>>,
}

/// `deny = 403`, `deny = { status = 403 }`, or `deny = true` (403 in HTTP mode; TCP mode:
/// close the connection).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum DenySection {
    Status(u16),
    Flag(bool),
    Table(DenyTable),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DenyTable {
    pub status: Option<u16>,
}

/// `request_headers` / `response_headers`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeaderEditsSection {
    #[serde(default)]
    pub set: FieldsSection,
    #[serde(default)]
    pub add: FieldsSection,
    #[serde(default)]
    pub remove: Vec<Spanned<String>>,
}

/// `rewrite_path = { prefix = "/api", to = "/" }` or `{ regex = "...", replace = "..." }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RewritePathSection {
    pub prefix: Option<Spanned<String>>,
    pub to: Option<Spanned<String>>,
    pub regex: Option<Spanned<String>>,
    pub replace: Option<Spanned<String>>,
}

/// Which direction a header rule applies to: requests may use variables, responses not.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Request,
    Response,
}

impl Validator<'_> {
    /// The route's action; `None` (errors recorded) when it has none, several, or a bad one.
    pub(super) fn route_action(
        &mut self,
        r: &RouteSection,
        key: &str,
        mode: ModeName,
        backends: &[Backend],
    ) -> Option<RouteAction> {
        let http_only = [
            ("return", r.return_response.as_ref().map(|x| x.span())),
            ("redirect", r.redirect.as_ref().map(|x| x.span())),
            ("request_headers", r.request_headers.as_ref().map(|x| x.span())),
            ("response_headers", r.response_headers.as_ref().map(|x| x.span())),
            ("rewrite_path", r.rewrite_path.as_ref().map(|x| x.span())),
            ("set_host", r.set_host.as_ref().map(|x| x.span())),
        ];
        if mode == ModeName::Tcp {
            let mut refused = false;
            for (field, span) in http_only.iter().cloned() {
                if let Some(span) = span {
                    self.err(
                        span,
                        format!("{key}.{field}"),
                        format!("`{field}` needs an http-mode frontend"),
                    );
                    refused = true;
                }
            }
            if refused {
                return None;
            }
        }
        let actions = [
            ("backend", r.backend.as_ref().map(|x| x.span())),
            ("return", r.return_response.as_ref().map(|x| x.span())),
            ("redirect", r.redirect.as_ref().map(|x| x.span())),
            ("deny", r.deny.as_ref().map(|x| x.span())),
        ];
        let given: Vec<_> = actions.iter().filter(|(_, s)| s.is_some()).collect();
        if given.len() != 1 {
            let span = given
                .first()
                .and_then(|(_, s)| s.clone())
                .or_else(|| super::route::Keys::of_route(r).first_span())
                .unwrap_or(0..0);
            let msg = "a route needs exactly one of `backend`, `return`, `redirect` or `deny`";
            self.err(span, key.to_string(), msg.into());
            return None;
        }
        if r.backend.is_none() {
            // Rewrites shape what goes to a server and what comes back from it.
            let rewrites = http_only.iter().skip(2).filter_map(|(f, s)| s.clone().map(|s| (f, s)));
            for (field, span) in rewrites.collect::<Vec<_>>() {
                self.err(
                    span,
                    format!("{key}.{field}"),
                    format!("`{field}` applies to requests forwarded to a `backend`: this route answers itself"),
                );
            }
        }
        if let Some(name) = &r.backend {
            let backend = self.backend_ref(name, format!("{key}.backend"), mode, backends)?;
            let rewrite = self.rewrite(r, key);
            return Some(RouteAction::Backend(backend, rewrite.map(Box::new)));
        }
        if let Some(ret) = &r.return_response {
            return self
                .answer(ret.get_ref(), ret.span(), &format!("{key}.return"))
                .map(|a| RouteAction::Return(Box::new(a)));
        }
        if let Some(redirect) = &r.redirect {
            return self
                .redirect(redirect, &format!("{key}.redirect"))
                .map(|r| RouteAction::Redirect(Box::new(r)));
        }
        let deny = r.deny.as_ref()?;
        let status = match (deny.get_ref(), mode) {
            (DenySection::Flag(true), ModeName::Tcp) => return Some(RouteAction::Close),
            (_, ModeName::Tcp) => {
                let msg = "a tcp-mode route denies with `deny = true` (the connection is closed: there is no status)";
                self.err(deny.span(), format!("{key}.deny"), msg.into());
                return None;
            }
            (DenySection::Flag(false), _) => {
                let msg = "`deny = false` denies nothing: remove the route, or give it a `backend`";
                self.err(deny.span(), format!("{key}.deny"), msg.into());
                return None;
            }
            (DenySection::Flag(true), _) => 403,
            (DenySection::Status(s), _) => *s,
            (DenySection::Table(t), _) => t.status.unwrap_or(403),
        };
        if !(400..=599).contains(&status) {
            self.err(deny.span(), format!("{key}.deny"), "must be between 400 and 599".into());
            return None;
        }
        let body = format!("{}\n", crate::http::status::reason(status));
        Some(RouteAction::Return(Box::new(Answer {
            status,
            content_type: "text/plain".into(),
            body: body.into_bytes().into_boxed_slice(),
            headers: Vec::new(),
        })))
    }

    fn answer(&mut self, ret: &ReturnSection, span: std::ops::Range<usize>, key: &str) -> Option<Answer> {
        let status = ret.status;
        if !(200..=599).contains(&status) {
            self.err(
                span.clone(),
                format!("{key}.status"),
                "must be between 200 and 599".into(),
            );
        }
        let body: Box<[u8]> = match (&ret.body, &ret.body_file) {
            (Some(_), Some(file)) => {
                self.err(
                    file.span(),
                    format!("{key}.body_file"),
                    "give `body` or `body_file`, not both".into(),
                );
                return None;
            }
            (Some(body), None) => body.get_ref().as_bytes().into(),
            (None, Some(file)) => self.body_file(file, &format!("{key}.body_file"))?,
            (None, None) => Box::default(),
        };
        // RFC 9110 §15.3.5, §15.4.5: a 204 or 304 has no content, so neither a body nor the
        // fields describing one.
        let bodiless = status == 204 || status == 304;
        if bodiless && (!body.is_empty() || ret.content_type.is_some()) {
            self.err(
                span.clone(),
                key.to_string(),
                format!("a {status} response has no content: give it no `body`, `body_file` or `content_type`"),
            );
            return None;
        }
        let content_type = match &ret.content_type {
            Some(ct) if !field_value_ok(ct.get_ref().as_bytes()) || ct.get_ref().is_empty() => {
                self.err(
                    ct.span(),
                    format!("{key}.content_type"),
                    "is not a header field value (CR, LF, NUL and other controls are refused)".into(),
                );
                return None;
            }
            Some(ct) => ct.get_ref().clone(),
            None if bodiless => String::new(),
            None => "text/plain".into(),
        };
        let mut headers = Vec::new();
        for (name, value) in by_position(ret.headers.iter().flatten()) {
            let k = format!("{key}.headers.{}", name.get_ref());
            if !self.field_name(name, &k, false) {
                continue;
            }
            if name.get_ref().eq_ignore_ascii_case("content-type") {
                self.err(name.span(), k, "set it with `content_type`".into());
                continue;
            }
            let Some(t) = self.template(value, &k, Direction::Response) else {
                continue;
            };
            headers.push((name.get_ref().clone(), t.literal().unwrap_or_default().into()));
        }
        Some(Answer {
            status,
            content_type,
            body,
            headers,
        })
    }

    fn body_file(&mut self, file: &Spanned<String>, key: &str) -> Option<Box<[u8]>> {
        let path = self.path(file.get_ref());
        // Bounded by what is read, not by the size the file reports (0 for a device).
        match super::bounded::read_bounded(&path, MAX_BODY_FILE) {
            Ok(bytes) => Some(bytes.into_boxed_slice()),
            Err(e) => {
                self.err(
                    file.span(),
                    key.into(),
                    format!("cannot read `{}`: {e}", path.display()),
                );
                None
            }
        }
    }

    fn redirect(&mut self, r: &Spanned<RedirectSection>, key: &str) -> Option<Redirect> {
        let section = r.get_ref();
        let status = section.status.as_ref().map_or(302, |s| *s.get_ref());
        if let Some(s) = &section.status
            && !matches!(status, 301 | 302 | 303 | 307 | 308)
        {
            self.err(
                s.span(),
                format!("{key}.status"),
                "must be 301, 302, 303, 307 or 308".into(),
            );
            return None;
        }
        let text = match (&section.to, &section.scheme) {
            (Some(to), None) => {
                if let Some(p) = &section.port {
                    self.err(p.span(), format!("{key}.port"), "`port` goes with `scheme`".into());
                    return None;
                }
                if to.get_ref().is_empty() {
                    self.err(to.span(), format!("{key}.to"), "is empty".into());
                    return None;
                }
                to.clone()
            }
            (None, Some(scheme)) => {
                if !matches!(scheme.get_ref().as_str(), "http" | "https") {
                    self.err(
                        scheme.span(),
                        format!("{key}.scheme"),
                        "must be \"http\" or \"https\"".into(),
                    );
                    return None;
                }
                let port = section
                    .port
                    .as_ref()
                    .map_or(String::new(), |p| format!(":{}", p.get_ref()));
                let text = format!("{}://{{host}}{port}{{path_and_query}}", scheme.get_ref());
                Spanned::new(scheme.span(), text)
            }
            _ => {
                self.err(r.span(), key.into(), "needs exactly one of `to` or `scheme`".into());
                return None;
            }
        };
        let location = self.template(&text, &format!("{key}.to"), Direction::Request)?;
        Some(Redirect { status, location })
    }

    /// The rewrites of a `backend` route; `None` when it has none (or they are refused).
    fn rewrite(&mut self, r: &RouteSection, key: &str) -> Option<Rewrite> {
        let errors = self.errors.len();
        let request_headers = r
            .request_headers
            .as_ref()
            .map(|h| self.header_rules(h.get_ref(), &format!("{key}.request_headers"), Direction::Request))
            .unwrap_or_default();
        let response_headers = r
            .response_headers
            .as_ref()
            .map(|h| self.header_rules(h.get_ref(), &format!("{key}.response_headers"), Direction::Response))
            .unwrap_or_default();
        let path = r
            .rewrite_path
            .as_ref()
            .and_then(|p| self.path_rewrite(p, &format!("{key}.rewrite_path")));
        let host = r.set_host.as_ref().and_then(|h| {
            let text = h.get_ref();
            let (name, port) = match text.rsplit_once(':') {
                Some((n, p)) if !n.ends_with(']') || text.starts_with('[') => (n, Some(p)),
                _ => (text.as_str(), None),
            };
            let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok());
            let name_ok = (super::model::HostPattern::parse(name).is_some() && !name.starts_with("*."))
                || name.parse::<std::net::IpAddr>().is_ok()
                || (name.starts_with('[') && name.ends_with(']'));
            if port_ok && name_ok {
                Some(text.as_bytes().into())
            } else {
                self.err(
                    h.span(),
                    format!("{key}.set_host"),
                    format!("`{text}` is not a host name or address with an optional port"),
                );
                None
            }
        });
        let rewrite = Rewrite {
            request_headers,
            response_headers,
            path,
            host,
        };
        let empty =
            rewrite.request_headers.is_empty() && rewrite.response_headers.is_empty() && !rewrite.changes_target();
        (self.errors.len() == errors && !empty).then_some(rewrite)
    }

    fn header_rules(&mut self, h: &HeaderEditsSection, key: &str, dir: Direction) -> HeaderRules {
        let fields = |this: &mut Self, table: &FieldsSection, what: &str| {
            let mut out = Vec::new();
            for (name, value) in by_position(table.iter()) {
                let k = format!("{key}.{what}.{}", name.get_ref());
                if !this.field_name(name, &k, true) {
                    continue;
                }
                if let Some(t) = this.template(value, &k, dir) {
                    out.push((name.get_ref().clone(), t));
                }
            }
            out
        };
        let set = fields(self, &h.set, "set");
        let add = fields(self, &h.add, "add");
        let mut remove = Vec::new();
        for (i, name) in h.remove.iter().enumerate() {
            let k = format!("{key}.remove[{i}]");
            if !self.field_name(name, &k, false) {
                continue;
            }
            let lower = name.get_ref().to_ascii_lowercase();
            if let Some((other, _)) = h.set.iter().find(|(n, _)| n.get_ref().eq_ignore_ascii_case(&lower)) {
                self.err(
                    name.span(),
                    k,
                    format!(
                        "`{}` is also in `set` (which already replaces every field of that name)",
                        other.get_ref()
                    ),
                );
                continue;
            }
            remove.push(lower);
        }
        HeaderRules::new(set, add, remove)
    }

    /// A field name a route may edit; `writes`: set or add (forwarding fields refused).
    fn field_name(&mut self, name: &Spanned<String>, key: &str, writes: bool) -> bool {
        let text = name.get_ref();
        if !field_name_ok(text.as_bytes()) {
            self.err(name.span(), key.into(), format!("`{text}` is not a header field name"));
            return false;
        }
        let lower = text.to_ascii_lowercase();
        let owned = OWNED_NAMES
            .iter()
            .find(|(n, _, _)| *n == lower)
            .filter(|(_, removable, _)| writes || !removable);
        if let Some((_, _, why)) = owned {
            self.err(
                name.span(),
                key.into(),
                format!("`{text}` cannot be edited by a route: {why}"),
            );
            return false;
        }
        true
    }

    fn template(&mut self, text: &Spanned<String>, key: &str, dir: Direction) -> Option<Template> {
        match Template::parse(text.get_ref()) {
            Ok(t) if dir == Direction::Response && t.literal().is_none() => {
                self.err(
                    text.span(),
                    key.into(),
                    "variables are for requests: a response field's value is fixed text".into(),
                );
                None
            }
            Ok(t) => Some(t),
            Err(e) => {
                self.err(text.span(), key.into(), e.to_string());
                None
            }
        }
    }

    fn path_rewrite(&mut self, p: &Spanned<RewritePathSection>, key: &str) -> Option<PathRewrite> {
        let s = p.get_ref();
        match (&s.prefix, &s.to, &s.regex, &s.replace) {
            (Some(prefix), Some(to), None, None) => {
                for (v, k) in [(prefix, "prefix"), (to, "to")] {
                    if !v.get_ref().starts_with('/') {
                        self.err(v.span(), format!("{key}.{k}"), "must start with `/`".into());
                        return None;
                    }
                }
                match PathRewrite::prefix(prefix.get_ref(), to.get_ref()) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        self.err(p.span(), key.into(), e.to_string());
                        None
                    }
                }
            }
            (None, None, Some(regex), Some(replace)) => {
                let compiled = match crate::http::path_regex::PathRegex::new(regex.get_ref(), MAX_REGEX_SIZE) {
                    Ok(r) => r,
                    Err(e) => {
                        self.err(regex.span(), format!("{key}.regex"), format!("bad regex: {e}"));
                        return None;
                    }
                };
                match PathRewrite::regex(compiled, replace.get_ref()) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        self.err(replace.span(), format!("{key}.replace"), e.to_string());
                        None
                    }
                }
            }
            _ => {
                self.err(
                    p.span(),
                    key.into(),
                    "needs `prefix` and `to`, or `regex` and `replace`".into(),
                );
                None
            }
        }
    }
}

/// A table's entries in the order the file gives them (a map sorts them by name).
fn by_position<'a>(
    entries: impl Iterator<Item = (&'a Spanned<String>, &'a Spanned<String>)>,
) -> Vec<(&'a Spanned<String>, &'a Spanned<String>)> {
    let mut v: Vec<_> = entries.collect();
    v.sort_by_key(|(n, _)| n.span().start);
    v
}

#[cfg(test)]
#[path = "route_action_tests.rs"]
mod tests;
