//! `tollgate explain` and `ctl explain`: what the proxy would do with one request, from
//! the config alone or from a running generation's config and live server states.
//!
//! Sans-io: given a loaded [`Config`] and a [`Query`] (method, URL, headers, SNI, client
//! address) it names the frontend and why, each route tried and the condition that failed
//! it, the backend or fixed response, and the server a dry-run pick chooses and why.
//!
//! Invariant: nothing here decides on its own. The route is the one the proxy's own route
//! table picks (`RouteTable::first_match`), each earlier route's reason the first condition
//! `RouteTable::first_miss` finds unmet, TCP routing by `config::route::tcp`, and the pick is the
//! backend's real balancer (from the registry) over a fresh live server set, built and asked
//! the way `ctx::backends::LocalBackend::take` does: primaries first, then backups. Offline,
//! every server is in its configured state (admin ready, oper unknown, no load); against a
//! running process (`explain_live`) the dry servers take the live states, effective weights
//! and connection counts first. A round-robin pick is a fresh balancer's first pick: each
//! worker thread's rotation is its own.

use std::fmt::{self, Write as _};

use serde::Serialize;

use crate::balance::{self, Candidate, PickContext};
use crate::config::model::{HashKey, RouteAction};
use crate::config::route::{Cond, Headers, RequestView, Scheme, ValueTest};
use crate::config::{Backend, Config, Frontend, Mode};
use crate::live::backend::BackendLive;
use crate::live::server::ServerView;

/// One request to explain (the protocol's type: `ctl explain` sends it to the master).
pub use crate::command::ExplainQuery as Query;

/// The URL split as routing reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Url {
    scheme: Option<String>,
    /// Lowercase, without port.
    host: Option<String>,
    port: Option<u16>,
    /// Path and query, `/` when absent.
    path: String,
}

fn parse_url(text: &str) -> Result<Url, String> {
    // A request target has no spaces or control bytes: what follows one is not the path
    // (`explain 'GET http://x/a junk'` is refused, not explained as `/a junk`).
    if text.is_empty() || text.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!(
            "{text:?} is not a URL (expected `[METHOD] URL`, the URL without spaces)"
        ));
    }
    let (scheme, rest) = match text.split_once("://") {
        Some((s, r)) => (Some(s.to_ascii_lowercase()), r),
        None => (None, text),
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (rest.get(..i).unwrap_or(""), rest.get(i..).unwrap_or("/")),
        None => (rest, "/"),
    };
    // `[v6]:port` keeps its brackets in the host, as the request's Host would.
    let (host, port) = match authority.rfind(':') {
        Some(i) if !authority.starts_with('[') || authority.get(..i).is_some_and(|h| h.ends_with(']')) => {
            (authority.get(..i).unwrap_or(""), authority.get(i + 1..))
        }
        _ => (authority, None),
    };
    let port = port
        .map(|p| p.parse::<u16>().map_err(|_| format!("bad port {p:?} in {text:?}")))
        .transpose()?;
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    Ok(Url {
        scheme,
        host: (!host.is_empty()).then(|| host.to_ascii_lowercase()),
        port,
        path,
    })
}

/// Why a route was passed over.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Skipped {
    pub route: usize,
    pub reason: String,
}

/// Where the request goes.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Target {
    Backend {
        name: String,
    },
    Return {
        status: u16,
        content_type: String,
        body: String,
    },
    /// A `redirect` route: its status and `Location` template as configured.
    Redirect {
        status: u16,
        location: String,
    },
    Refused {
        reason: String,
    },
}

/// One server as the pick saw it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ServerState {
    pub name: String,
    pub address: String,
    pub admin: String,
    pub oper: String,
    pub weight: u32,
    pub effective_weight: u32,
    pub backup: bool,
    pub usable: bool,
    pub load: u32,
}

/// The dry-run pick.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Pick {
    pub algorithm: String,
    /// What the hash key was made from, when the backend hashes.
    pub hash_key: Option<String>,
    /// The sticky cookie the request carries and what it names (sticky backends).
    pub sticky: Option<String>,
    pub servers: Vec<ServerState>,
    /// The chosen server, if any.
    pub server: Option<String>,
    pub reason: String,
}

/// The whole answer.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Explanation {
    pub frontend: String,
    pub frontend_reason: String,
    pub mode: String,
    pub skipped: Vec<Skipped>,
    /// The path (and query) and host as routes read them (`http::normalize`), when they
    /// differ from the request's: routes matched these.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub normalized_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub normalized_host: Option<String>,
    /// The route that matched (index), or `None` for the default backend / refusal.
    pub route: Option<usize>,
    pub route_reason: String,
    pub target: Target,
    pub pick: Option<Pick>,
    /// The limits the request runs under when it goes to a backend: the global ones with
    /// the backend's and the route's overrides (`Config::request_limits`).
    pub limits: Option<Limits>,
}

/// Effective per-request limits, in milliseconds and bytes.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Limits {
    pub connect_ms: u64,
    pub server_ms: u64,
    /// A route's or backend's `timeouts.http_request`: the request body's deadline.
    pub body_within_ms: Option<u64>,
    /// 0 = unlimited.
    pub max_body_size: u64,
    /// The route's retry budget (every kind), or `None`: the backend's connect `retries`.
    pub retries: Option<u32>,
    pub backend_retries: u32,
}

/// Explains `query` against `config`, every server in its configured state.
pub fn explain(config: &Config, query: &Query) -> Result<Explanation, String> {
    explain_with(config, query, &[])
}

/// Explains `query` against `config` with the servers as `live` shows them (a running
/// generation's `show servers`): their admin and operational states, effective weights and
/// active connections. Servers `live` does not name keep their configured state.
pub fn explain_live(config: &Config, query: &Query, live: &[ServerView]) -> Result<Explanation, String> {
    explain_with(config, query, live)
}

fn explain_with(config: &Config, query: &Query, live: &[ServerView]) -> Result<Explanation, String> {
    if query.method.is_empty() || !query.method.bytes().all(crate::http::h1::headers::is_tchar) {
        return Err(format!("{:?} is not an HTTP method", query.method));
    }
    let url = parse_url(&query.url)?;
    let (fe, frontend_reason) = choose_frontend(config, query, &url)?;
    let mut out = Explanation {
        frontend: fe.name.clone(),
        frontend_reason,
        mode: fe.mode.as_str().to_string(),
        skipped: Vec::new(),
        normalized_path: None,
        normalized_host: None,
        route: None,
        route_reason: String::new(),
        target: Target::Refused { reason: String::new() },
        pick: None,
        limits: None,
    };
    if !fe.access.admits(query.source) {
        out.route_reason = "the frontend's allow / deny lists refuse the source".to_string();
        out.target = Target::Refused {
            reason: format!("source {} refused at accept (connection closed)", query.source),
        };
        return Ok(out);
    }
    let backend = match fe.mode {
        Mode::Http => http_route(fe, query, &url, &mut out),
        Mode::Tcp => sni_route(fe, query, &url, &mut out),
    };
    if let Some(b) = backend.and_then(|b| config.backends.get(b)) {
        out.target = Target::Backend { name: b.name.clone() };
        out.pick = Some(dry_pick(b, query, &url, fe.mode, live));
        let overrides = out
            .route
            .and_then(|i| fe.routes.get(i))
            .map_or(&crate::config::model::Overrides::NONE, |r| &r.overrides);
        let l = config.request_limits(backend, overrides);
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        out.limits = Some(Limits {
            connect_ms: ms(l.timeouts.connect),
            server_ms: ms(l.timeouts.server),
            body_within_ms: l.whole_request.map(ms),
            max_body_size: if fe.mode == Mode::Http { l.max_body_size } else { 0 },
            retries: l.retries,
            backend_retries: b.retries,
        });
    }
    Ok(out)
}

fn choose_frontend<'c>(config: &'c Config, query: &Query, url: &Url) -> Result<(&'c Frontend, String), String> {
    if let Some(name) = &query.frontend {
        let fe = config
            .frontends
            .iter()
            .find(|f| &f.name == name)
            .ok_or_else(|| format!("no frontend named {name:?}"))?;
        return Ok((fe, "named with --frontend".to_string()));
    }
    let port = query.port.or(url.port).or(match url.scheme.as_deref() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    });
    let bound = |f: &&Frontend| port.is_some_and(|p| f.binds.iter().any(|a| a.port() == p));
    let on_port: Vec<&Frontend> = config.frontends.iter().filter(bound).collect();
    let tls_wanted = url.scheme.as_deref() == Some("https");
    let by_scheme = on_port
        .iter()
        .find(|f| f.tls.is_some() == tls_wanted)
        .or(on_port.first());
    if let (Some(fe), Some(p)) = (by_scheme, port) {
        let mut why = format!("binds port {p}");
        if on_port.len() > 1 {
            let _ = write!(
                why,
                ", {} with TLS as the scheme asks",
                if tls_wanted { "terminates" } else { "no" }
            );
        }
        return Ok((fe, why));
    }
    match config.frontends.as_slice() {
        [only] => Ok((only, "the only frontend".to_string())),
        _ => Err(match port {
            Some(p) => format!("no frontend binds port {p}; name one with --frontend"),
            None => "several frontends: name one with --frontend or --port".to_string(),
        }),
    }
}

fn header_of<'q>(query: &'q Query, name: &str) -> Option<&'q [u8]> {
    query
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_bytes())
}

/// The explained request's headers, as routes look them up.
struct QueryHeaders<'q>(&'q Query);

impl Headers for QueryHeaders<'_> {
    fn any_value(&self, name: &str, test: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        self.0
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .any(|(_, v)| test(v.as_bytes()))
    }
}

/// HTTP routing: the proxy's own route table picks the route; each earlier route is
/// named with the first of its conditions the request misses (the proxy's own check).
fn http_route(fe: &Frontend, query: &Query, url: &Url, out: &mut Explanation) -> Option<usize> {
    // The URL's authority is the request's host (the proxy refuses an absolute form and a
    // Host that differ), else Host; routes read it as the proxy does (`http::normalize::host`).
    let mut host_buf = [0u8; 256];
    let written = url.host.as_deref().map(str::as_bytes).or(header_of(query, "host"));
    let host = written.and_then(|h| crate::http::normalize::host(h, &mut host_buf));
    // Said when it lost its trailing dot (case and port are never worth saying).
    if let Some(h) = host
        && written.is_some_and(|w| crate::http::normalize::without_port(w).ends_with(b"."))
    {
        out.normalized_host = Some(h.to_string());
    }
    let scheme = match url.scheme.as_deref() {
        Some("https") => Scheme::Https,
        Some(_) => Scheme::Http,
        None if fe.tls.is_some() => Scheme::Https,
        None => Scheme::Http,
    };
    // Over TLS a client names the host it wants in its handshake too.
    let sni = match (&query.sni, scheme) {
        (Some(sni), _) => Some(sni.to_ascii_lowercase()),
        (None, Scheme::Https) => url.host.clone(),
        (None, Scheme::Http) => None,
    };
    let (path, query_string) = RequestView::split_target(url.path.as_bytes());
    let path = crate::http::normalize::path(path);
    if let std::borrow::Cow::Owned(p) = &path {
        out.normalized_path = Some(String::from_utf8_lossy(p).into_owned());
    }
    let headers = QueryHeaders(query);
    let view = RequestView {
        method: query.method.as_bytes(),
        host,
        path: &path,
        query: query_string,
        scheme,
        source: query.source,
        sni: sni.as_deref(),
        client_cert: query.client_cert,
        headers: &headers,
    };
    let matched = fe.routes.first_match(&view);
    for i in 0..matched.unwrap_or(fe.routes.len()) {
        let reason = match fe.routes.first_miss(i, &view) {
            Some(cond) => why_not(fe, cond, &view, query),
            // The table and the walk disagree: a bug, said rather than hidden.
            None => "matches, but the route table chose a later route (a bug: please report)".to_string(),
        };
        out.skipped.push(Skipped { route: i, reason });
    }
    if let Some((i, r)) = matched.and_then(|i| fe.routes.get(i).map(|r| (i, r))) {
        out.route = Some(i);
        out.route_reason = match (&out.normalized_path, &out.normalized_host) {
            (None, None) => "every condition holds".to_string(),
            (p, h) => {
                let mut on = Vec::new();
                if let Some(p) = p {
                    on.push(format!("the normalised path {p}"));
                }
                if let Some(h) = h {
                    on.push(format!("the normalised host {h}"));
                }
                format!("every condition holds (on {})", on.join(" and "))
            }
        };
        return match &r.action {
            RouteAction::Backend(b, _) => Some(*b),
            RouteAction::Return(answer) => {
                out.target = Target::Return {
                    status: answer.status,
                    content_type: answer.content_type.clone(),
                    body: String::from_utf8_lossy(&answer.body).into_owned(),
                };
                None
            }
            RouteAction::Redirect(redirect) => {
                out.target = Target::Redirect {
                    status: redirect.status,
                    location: redirect.location.as_str().to_string(),
                };
                None
            }
            RouteAction::Close => {
                out.target = Target::Refused {
                    reason: "the route denies: the connection is closed".into(),
                };
                None
            }
        };
    }
    default_backend(fe, out)
}

/// Why condition `cond` does not hold for `view`, in the operator's words.
fn why_not(fe: &Frontend, cond: &Cond, view: &RequestView<'_>, query: &Query) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let path = text(view.path);
    let any_of = |items: Vec<String>| items.join(" or ");
    let header_is = |name: &str| {
        header_of(query, name).map_or_else(|| "absent".to_string(), |v| format!("{:?}", String::from_utf8_lossy(v)))
    };
    match cond {
        Cond::Host(p) => format!(
            "host {} does not match {}",
            view.host.unwrap_or("(none)"),
            any_of(p.iter().map(pattern).collect())
        ),
        Cond::Path(p) => format!("path {path} is not {}", any_of(p.iter().map(|b| text(b)).collect())),
        Cond::PathPrefix(p) => format!(
            "path {path} does not start with {}",
            any_of(p.iter().map(|b| text(b)).collect())
        ),
        Cond::PathRegex { written, .. } => format!(
            "path {path} does not match {}",
            any_of(written.iter().map(|w| format!("/{w}/")).collect())
        ),
        Cond::Method(m) => format!(
            "method {} is not {}",
            text(view.method),
            any_of(m.iter().map(|b| text(b)).collect())
        ),
        Cond::Header { name, test } => {
            let got = header_is(name);
            match test {
                ValueTest::Present => format!("header {name} is absent"),
                ValueTest::Exact(want) => format!("header {name} is {got}, not {:?}", text(want)),
                ValueTest::Prefix(p) => format!("header {name} is {got}, which does not start with {:?}", text(p)),
                ValueTest::Regex(re) => format!("header {name} is {got}, which does not match /{}/", re.as_str()),
            }
        }
        Cond::Query { .. } | Cond::Cookie { .. } | Cond::Scheme(_) => {
            let seen = match cond {
                Cond::Query { .. } => format!("query {:?}", text(view.query.unwrap_or_default())),
                Cond::Cookie { .. } => format!("cookie header {}", header_is("cookie")),
                _ => format!("scheme {}", view.scheme.as_str()),
            };
            format!("{seen} does not meet {cond}")
        }
        Cond::Source(blocks) => format!(
            "source {} is not in {}",
            view.source,
            any_of(blocks.blocks().iter().map(ToString::to_string).collect())
        ),
        Cond::Sni(p) => format!(
            "sni {} does not match {}",
            view.sni.unwrap_or("(none)"),
            any_of(p.iter().map(pattern).collect())
        ),
        Cond::ClientCert(true) => "no verified client certificate (explain with --client-cert)".to_string(),
        Cond::ClientCert(false) => "a verified client certificate was presented".to_string(),
        Cond::Matcher { index, name } => match fe.routes.matcher_miss(*index, view) {
            Some(inner) => format!("matcher {name}: {}", why_not(fe, inner, view, query)),
            None => format!("matcher {name} does not hold"),
        },
        Cond::Not(inner) => match fe.routes.first_holding(inner, view) {
            Some(held) => format!("{held} holds (under `not`)"),
            None => format!("{cond} does not hold"),
        },
    }
}

fn default_backend(fe: &Frontend, out: &mut Explanation) -> Option<usize> {
    match fe.default_backend {
        Some(b) => {
            out.route_reason = "no route matched: the frontend's default backend".to_string();
            Some(b)
        }
        None => {
            out.route_reason = "no route matched and no default backend".to_string();
            out.target = Target::Refused {
                reason: "no route (503)".to_string(),
            };
            None
        }
    }
}

fn pattern(p: &crate::config::model::HostPattern) -> String {
    match p {
        crate::config::model::HostPattern::Exact(n) => n.clone(),
        crate::config::model::HostPattern::Wildcard(s) => format!("*{s}"),
    }
}

/// TCP routing as the proxy does it (`config::route::tcp`): source-only routes, then the
/// SNI (given, else the URL's host) through the proxy's own SNI router.
fn sni_route(fe: &Frontend, query: &Query, url: &Url, out: &mut Explanation) -> Option<usize> {
    use crate::config::route::tcp::{self, TcpTarget};
    if let Some((i, target)) = tcp::at_accept(fe, query.source) {
        out.route = Some(i);
        out.route_reason = format!("source {} is in its blocks (decided at accept)", query.source);
        return match target {
            TcpTarget::Backend(b) => Some(b),
            TcpTarget::Close => {
                out.target = Target::Refused {
                    reason: "the route denies: the connection is closed".into(),
                };
                None
            }
        };
    }
    if fe.sni_routes.is_none() {
        return default_backend(fe, out);
    }
    let sni = query.sni.as_deref().or(url.host.as_deref());
    let matched = fe.sni_routes.as_ref().zip(sni).and_then(|(m, name)| m.lookup(name));
    for (i, r) in fe.routes.iter().enumerate() {
        if Some(i) == matched {
            break;
        }
        if let Some(p) = r.when.sni() {
            let patterns: Vec<String> = p.iter().map(pattern).collect();
            out.skipped.push(Skipped {
                route: i,
                reason: format!(
                    "sni {} does not match {}",
                    sni.unwrap_or("(none)"),
                    patterns.join(" or ")
                ),
            });
        }
    }
    let decided = tcp::after_sni(fe, query.source, sni);
    let chosen = match decided {
        Some(TcpTarget::Backend(b)) => Some(b),
        _ => None,
    };
    out.route = matched;
    out.route_reason = match (matched, decided) {
        (_, Some(TcpTarget::Close)) => {
            out.target = Target::Refused {
                reason: "the route denies: the connection is closed".into(),
            };
            "a deny route matched".to_string()
        }
        (Some(_), Some(_)) => "its sni pattern matches".to_string(),
        (_, None) => {
            out.target = Target::Refused {
                reason: "no sni route matches (reject_unknown_sni, or nowhere to go)".to_string(),
            };
            "no sni route matched".to_string()
        }
        (None, Some(_)) => "no sni route matched: the route without conditions, else the default backend".to_string(),
    };
    chosen
}

/// What the backend hashes this request by, as the proxy computes it.
fn hash_key(b: &Backend, query: &Query, url: &Url, mode: Mode) -> Option<(u64, String)> {
    use crate::balance::hash::{cookie_value, key_of_bytes, key_of_ip};
    let spec = b.hash_key.as_ref()?;
    let found: Option<(&[u8], String)> = match (mode, spec) {
        (Mode::Tcp, _) | (_, HashKey::Source) => None,
        (_, HashKey::Uri) => Some((url.path.as_bytes(), "uri".to_string())),
        (_, HashKey::Header(name)) => header_of(query, name).map(|v| (v, format!("header {name}"))),
        (_, HashKey::Cookie(name)) => query
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("cookie"))
            .find_map(|(_, v)| cookie_value(v.as_bytes(), name.as_bytes()))
            .map(|v| (v, format!("cookie {name}"))),
    };
    Some(match found {
        Some((bytes, what)) => (
            key_of_bytes(bytes),
            format!("{what} = {:?}", String::from_utf8_lossy(bytes)),
        ),
        None => (key_of_ip(query.source), format!("source {}", query.source)),
    })
}

/// A sticky backend's cookie in the request (its first value, as the proxy reads it).
fn sticky_cookie(b: &Backend, query: &Query) -> Option<(String, String)> {
    let name = &b.sticky.as_ref()?.cookie;
    query
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("cookie"))
        .find_map(|(_, v)| crate::http::cookie::find(v.as_bytes(), name.as_bytes()))
        .map(|v| (name.clone(), String::from_utf8_lossy(v).into_owned()))
}

/// Asks the backend's real balancer, over a fresh server set, as a worker would.
fn dry_pick(b: &Backend, query: &Query, url: &Url, mode: Mode, live: &[ServerView]) -> Pick {
    let dry = BackendLive::new(b, 1);
    let set = dry.servers();
    let view_of = |name: &str| live.iter().find(|v| v.backend == b.name && v.name == name);
    // Held until the pick is made: the dry servers carry the live ones' load.
    let mut held = Vec::new();
    for s in &set.servers {
        if let Some(v) = view_of(&s.name) {
            s.set_admin(v.admin);
            s.set_oper(v.oper);
            // The live effective weight already folds in the agent's % and the ramp.
            s.set_weight(v.effective_weight);
            held.extend((0..v.active).map_while(|_| s.try_take()));
        }
    }
    let candidates: Vec<Candidate> = set
        .servers
        .iter()
        .map(|s| Candidate {
            id: s.id,
            weight: s.effective_weight(),
            name_hash: balance::hash::name_hash(&s.name),
        })
        .collect();
    let build = balance::lookup(&b.balance).unwrap_or(balance::RoundRobin::boxed);
    let mut balancer = build(&candidates, 0);
    let key = hash_key(b, query, url, mode);
    let servers: Vec<ServerState> = set
        .servers
        .iter()
        .map(|s| {
            let view = view_of(&s.name);
            ServerState {
                name: s.name.to_string(),
                address: view.map_or_else(|| s.address.to_string(), |v| v.address.to_string()),
                admin: s.admin().as_str().to_string(),
                oper: s.oper().as_str().to_string(),
                weight: view.map_or_else(|| s.weight(), |v| v.weight),
                effective_weight: s.effective_weight(),
                backup: s.backup,
                usable: s.is_usable(),
                load: view.map_or_else(
                    || s.active().saturating_add(s.queued()),
                    |v| v.active.saturating_add(v.queued),
                ),
            }
        })
        .collect();
    let mut pick = Pick {
        algorithm: b.balance.clone(),
        hash_key: key.as_ref().map(|(_, what)| what.clone()),
        sticky: None,
        servers,
        server: None,
        reason: "no usable server (503)".to_string(),
    };
    // A sticky cookie naming a usable server of the backend bypasses the balancer, as in
    // the proxy (`take_by_id`); one naming no server, or an unusable one, balances.
    if let Some((cookie, value)) = sticky_cookie(b, query) {
        let named = set
            .servers
            .iter()
            .find(|s| format!("{:016x}", crate::ctx::sticky::value_of(&b.name, &s.name)) == value);
        match named {
            Some(s) if s.is_usable() => {
                pick.sticky = Some(format!("{cookie}={value} names server {}", s.name));
                pick.reason = format!("the sticky cookie {cookie}={value} names it, and it is usable");
                pick.server = Some(s.name.to_string());
                drop(held);
                return pick;
            }
            Some(s) => {
                pick.sticky = Some(format!(
                    "{cookie}={value} names server {}, which is not usable: balanced",
                    s.name
                ));
            }
            None => {
                pick.sticky = Some(format!("{cookie}={value} names no server of the backend: balanced"));
            }
        }
    }
    for backup in [false, true] {
        let usable = |i: usize| set.servers.get(i).is_some_and(|s| s.backup == backup && s.is_usable());
        let ctx = PickContext::new(&set.servers, &usable, key.as_ref().map(|(k, _)| *k))
            .with_balance_factor(b.hash_balance_factor);
        if let Some(server) = balancer.pick(&ctx).and_then(|i| set.servers.get(i)) {
            let role = if backup {
                "a backup: no primary is usable"
            } else {
                "a usable primary"
            };
            pick.reason = format!("{} picks it among the usable servers; it is {role}", b.balance);
            pick.server = Some(server.name.to_string());
            break;
        }
    }
    drop(held);
    pick
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "frontend {} ({}): {}",
            self.frontend, self.mode, self.frontend_reason
        )?;
        if let Some(p) = &self.normalized_path {
            writeln!(f, "routes read the path as {p} (normalised)")?;
        }
        if let Some(h) = &self.normalized_host {
            writeln!(f, "routes read the host as {h} (normalised)")?;
        }
        for s in &self.skipped {
            writeln!(f, "route[{}] skipped: {}", s.route, s.reason)?;
        }
        match self.route {
            Some(i) => writeln!(f, "route[{i}] matched: {}", self.route_reason)?,
            None => writeln!(f, "route: {}", self.route_reason)?,
        }
        match &self.target {
            Target::Backend { name } => writeln!(f, "backend {name}")?,
            Target::Return {
                status,
                content_type,
                body,
            } => writeln!(f, "return {status} ({content_type}): {body:?}")?,
            Target::Redirect { status, location } => writeln!(f, "redirect {status} to {location}")?,
            Target::Refused { reason } => writeln!(f, "refused: {reason}")?,
        }
        if let Some(p) = &self.pick {
            writeln!(f, "balance {}", p.algorithm)?;
            if let Some(k) = &p.hash_key {
                writeln!(f, "hash key: {k}")?;
            }
            if let Some(k) = &p.sticky {
                writeln!(f, "sticky cookie: {k}")?;
            }
            for s in &p.servers {
                writeln!(
                    f,
                    "server {} {}: admin {}, oper {}, weight {} (effective {}), {}, load {}, {}",
                    s.name,
                    s.address,
                    s.admin,
                    s.oper,
                    s.weight,
                    s.effective_weight,
                    if s.backup { "backup" } else { "primary" },
                    s.load,
                    if s.usable { "usable" } else { "not usable" }
                )?;
            }
            match &p.server {
                Some(s) => writeln!(f, "pick: {s}: {}", p.reason)?,
                None => writeln!(f, "pick: none: {}", p.reason)?,
            }
        }
        if let Some(l) = &self.limits {
            write!(f, "limits: connect {}ms, server {}ms", l.connect_ms, l.server_ms)?;
            if let Some(b) = l.body_within_ms {
                write!(f, ", request body within {b}ms")?;
            }
            if l.max_body_size > 0 {
                write!(f, ", max body {} bytes", l.max_body_size)?;
            }
            match l.retries {
                Some(r) => writeln!(f, ", retries {r} (the route's, every kind)")?,
                None => writeln!(f, ", connect retries {} (the backend's)", l.backend_retries)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn config(text: &str) -> Config {
        crate::config::parse(text, "test.toml").unwrap()
    }

    fn query(url: &str) -> Query {
        Query {
            method: "GET".into(),
            url: url.into(),
            headers: Vec::new(),
            sni: None,
            client_cert: false,
            frontend: None,
            port: None,
            source: IpAddr::from([127, 0, 0, 1]),
        }
    }

    const HTTP: &str = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
mode = "http"
default_backend = "api"

[[frontend.route]]
host = "www.example"
backend = "api"

[[frontend.route]]
path_prefix = "/admin"
backend = "api"

[[frontend.route]]
header = { name = "x-beta", value = "1" }
backend = "api"

[[frontend.route]]
path_prefix = "/gone"
return = { status = 410, body = "gone" }

[[frontend.route]]
host = "*.example"
backend = "hashed"

[[backend]]
name = "api"
mode = "http"
[[backend.server]]
name = "a"
address = "127.0.0.1:9001"
[[backend.server]]
name = "b"
address = "127.0.0.1:9002"
backup = true

[[backend]]
name = "hashed"
mode = "http"
balance = "hash"
hash_key = "source"
[[backend.server]]
name = "h1"
address = "127.0.0.1:9011"
[[backend.server]]
name = "h2"
address = "127.0.0.1:9012"
[[backend.server]]
name = "h3"
address = "127.0.0.1:9013"
"#;

    #[test]
    fn urls_split_as_routing_reads_them() {
        let u = parse_url("https://API.example:8443/v1/x?y=1").unwrap();
        assert_eq!(u.host.as_deref(), Some("api.example"));
        assert_eq!(u.port, Some(8443));
        assert_eq!(u.path, "/v1/x?y=1");
        assert_eq!(parse_url("http://h").unwrap().path, "/");
        assert!(parse_url("http://h:x/").is_err());
        let v6 = parse_url("[::1]:8080/p").unwrap();
        assert_eq!((v6.host.as_deref(), v6.port), (Some("[::1]"), Some(8080)));
        assert_eq!(parse_url("/only/path").unwrap().host, None);
    }

    /// Routes match the normalised path and host, and the explanation says so.
    #[test]
    fn a_bypass_spelling_matches_on_the_normalised_path_and_host() {
        let c = config(HTTP);
        let e = explain(&c, &query("http://other.example:8080/x/..//%61dmin/%2e/p")).unwrap();
        assert_eq!(e.route, Some(1), "{e}");
        assert_eq!(e.normalized_path.as_deref(), Some("/admin/p"));
        assert_eq!(e.normalized_host, None);
        assert_eq!(
            e.route_reason,
            "every condition holds (on the normalised path /admin/p)"
        );
        assert!(
            e.to_string().contains("routes read the path as /admin/p (normalised)"),
            "{e}"
        );
        let e = explain(&c, &query("http://WWW.example.:8080/")).unwrap();
        assert_eq!(e.route, Some(0), "{e}");
        assert_eq!(e.normalized_host.as_deref(), Some("www.example"));
        assert_eq!(
            e.route_reason,
            "every condition holds (on the normalised host www.example)"
        );
        // A normal request says nothing more.
        let e = explain(&c, &query("http://www.example:8080/admin")).unwrap();
        assert_eq!((e.normalized_path, e.normalized_host), (None, None));
        assert_eq!(e.route_reason, "every condition holds");
    }

    #[test]
    fn each_skipped_route_names_what_differed() {
        let c = config(HTTP);
        let mut q = query("http://api.example:8080/v1/x");
        q.headers.push(("X-Beta".into(), "2".into()));
        let e = explain(&c, &q).unwrap();
        assert_eq!(e.frontend, "web");
        assert_eq!(e.frontend_reason, "binds port 8080");
        let reasons: Vec<&str> = e.skipped.iter().map(|s| s.reason.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "host api.example does not match www.example",
                "path /v1/x does not start with /admin",
                "header x-beta is \"2\", not \"1\"",
                "path /v1/x does not start with /gone",
            ]
        );
        assert_eq!(e.route, Some(4));
        assert_eq!(e.target, Target::Backend { name: "hashed".into() });
    }

    #[test]
    fn matchers_negations_and_the_new_conditions_name_what_missed() {
        let c = config(
            r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
mode = "http"
default_backend = "api"

[[frontend.matcher]]
name = "api"
host = "api.example"
path_prefix = "/v1/"

[[frontend.route]]
matcher = "api"
backend = "api"

[[frontend.route]]
path_prefix = "/v2/"
not = { method = ["DELETE", "PUT"] }
backend = "api"

[[frontend.route]]
path_regex = "^/v2/[0-9]+$"
query = { name = "debug" }
backend = "api"

[[frontend.route]]
source = "10.0.0.0/8"
backend = "api"

[[frontend.route]]
cookie = { name = "sid", value = "7" }
return = { status = 204 }

[[backend]]
name = "api"
mode = "http"
[[backend.server]]
name = "a"
address = "127.0.0.1:9001"
"#,
        );
        let mut q = query("http://api.example:8080/v2/42?debug");
        q.method = "DELETE".into();
        q.headers.push(("Cookie".into(), "sid=7".into()));
        let e = explain(&c, &q).unwrap();
        let reasons: Vec<&str> = e.skipped.iter().map(|s| s.reason.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "matcher api: path /v2/42 does not start with /v1/",
                "method = [\"DELETE\", \"PUT\"] holds (under `not`)",
            ]
        );
        assert_eq!(e.route, Some(2), "{e}");
        q.url = "http://api.example:8080/v2/x".into();
        let e = explain(&c, &q).unwrap();
        assert_eq!(e.skipped[2].reason, "path /v2/x does not match /^/v2/[0-9]+$/");
        assert_eq!(e.skipped[3].reason, "source 127.0.0.1 is not in 10.0.0.0/8");
        assert_eq!(e.route, Some(4));
        q.headers.clear();
        let e = explain(&c, &q).unwrap();
        assert!(e.skipped[4].reason.contains("does not meet cookie"), "{e}");
        assert_eq!(e.route, None);
    }

    #[test]
    fn a_fixed_response_is_the_target() {
        let e = explain(&config(HTTP), &query("http://other.test:8080/gone/x")).unwrap();
        assert_eq!(e.route, Some(3));
        assert!(matches!(e.target, Target::Return { status: 410, .. }));
        assert!(e.pick.is_none());
        assert!(e.to_string().contains("return 410"));
    }

    #[test]
    fn no_route_falls_to_the_default_backend_and_its_primary() {
        let e = explain(&config(HTTP), &query("http://other.test:8080/x")).unwrap();
        assert_eq!(e.route, None);
        assert_eq!(e.target, Target::Backend { name: "api".into() });
        let pick = e.pick.unwrap();
        assert_eq!(pick.server.as_deref(), Some("a"), "offline every primary is usable");
        assert!(pick.reason.contains("a usable primary"));
        assert!(pick.servers.iter().any(|s| s.backup && s.name == "b" && s.usable));
    }

    #[test]
    fn the_limits_a_request_runs_under_are_shown() {
        let c = config(
            r#"
[timeouts]
server = "30s"

[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
mode = "http"
default_backend = "api"

[[frontend.route]]
path_prefix = "/pay"
backend = "api"
retries = 0
max_body_size = "64KiB"
timeouts = { http_request = "5s" }

[[backend]]
name = "api"
mode = "http"
timeouts = { connect = "1s", server = "2m" }
[[backend.server]]
name = "a"
address = "127.0.0.1:9001"
"#,
        );
        let e = explain(&c, &query("http://x.test:8080/pay/1")).unwrap();
        let l = e.limits.clone().unwrap();
        assert_eq!(
            (l.connect_ms, l.server_ms, l.body_within_ms),
            (1000, 120_000, Some(5000))
        );
        assert_eq!((l.max_body_size, l.retries), (65536, Some(0)));
        let text = e.to_string();
        assert!(
            text.contains("limits: connect 1000ms, server 120000ms, request body within 5000ms, max body 65536 bytes, retries 0 (the route's, every kind)"),
            "{text}"
        );
        // The default backend: its own overrides, the backend's retries.
        let l = explain(&c, &query("http://x.test:8080/other")).unwrap().limits.unwrap();
        assert_eq!(
            (l.server_ms, l.body_within_ms, l.retries, l.backend_retries),
            (120_000, None, None, 3)
        );
    }

    #[test]
    fn hashing_by_source_names_the_key_and_is_stable() {
        let c = config(HTTP);
        let mut q = query("http://x.example:8080/");
        q.source = IpAddr::from([10, 0, 0, 7]);
        let first = explain(&c, &q).unwrap().pick.unwrap();
        assert_eq!(first.hash_key.as_deref(), Some("source 10.0.0.7"));
        assert_eq!(first.algorithm, "hash");
        let again = explain(&c, &q).unwrap().pick.unwrap();
        assert_eq!(first.server, again.server, "the same key picks the same server");
        // Some other source lands elsewhere: the key is really used.
        let moved = (1..=50u8).any(|i| {
            q.source = IpAddr::from([10, 0, 1, i]);
            explain(&c, &q).unwrap().pick.unwrap().server != first.server
        });
        assert!(moved);
    }

    #[test]
    fn a_cookie_key_names_its_value_and_a_missing_one_falls_back_to_the_source() {
        let text = HTTP.replace(r#"hash_key = "source""#, r#"hash_key = "cookie:sid""#);
        let c = config(&text);
        let mut q = query("http://x.example:8080/");
        q.headers.push(("Cookie".into(), "a=1; sid=42".into()));
        let pick = explain(&c, &q).unwrap().pick.unwrap();
        assert_eq!(pick.hash_key.as_deref(), Some(r#"cookie sid = "42""#));
        q.headers.clear();
        let pick = explain(&c, &q).unwrap().pick.unwrap();
        assert_eq!(pick.hash_key.as_deref(), Some("source 127.0.0.1"));
    }

    #[test]
    fn an_unknown_frontend_or_port_is_an_error() {
        let c = config(HTTP);
        let mut q = query("http://a.example:9999/");
        assert!(explain(&c, &q).is_ok(), "the only frontend answers any port");
        q.frontend = Some("nope".into());
        assert!(explain(&c, &q).unwrap_err().contains("no frontend named"));
    }
}
