//! `auth = { basic = { … } | forward = { … } | jwt = { … } }` on an http route: who may
//! use it (`auth` holds the methods, `proxy::auth` runs them; `config::jwt` reads `jwt`).
//!
//! Refused at load: on a tcp-mode route, none or more than one method, an unreadable or
//! refused htpasswd file (`auth::basic` says which line and why), a forward `url` that is
//! not `http://host:port/path` or whose host does not resolve, header names that are not
//! tokens or that tollgate owns (`host`, `content-length`, the hop-by-hop ones), a
//! `timeout` of zero or over a minute.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::file::ModeName;
use super::units::DurationValue;
use crate::auth::basic::{MAX_USERS_FILE, Users};
use crate::auth::forward::{FailMode, Forward};
use crate::auth::jwt::Jwks;
use crate::auth::{BasicAuth, JwtAuth, Method, RouteAuth};

type Errors = Vec<(Range<usize>, String, String)>;

/// `auth` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuthSection {
    pub basic: Option<Spanned<BasicSection>>,
    pub forward: Option<Spanned<ForwardSection>>,
    pub jwt: Option<Spanned<super::jwt::JwtSection>>,
}

/// `auth.basic`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BasicSection {
    /// The realm the challenge names (`WWW-Authenticate: Basic realm="…"`).
    pub realm: Option<Spanned<String>>,
    /// An htpasswd file, relative to the config's directory.
    pub users_file: Spanned<String>,
    /// Send the client's `Authorization` on to the server (default: removed).
    pub pass_authorization: Option<bool>,
}

/// `auth.forward`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForwardSection {
    /// `http://host:port/path`: where each request is asked about.
    pub url: Spanned<String>,
    /// Headers of the auth server's 2xx answer copied into the request to the server.
    pub copy_headers: Option<Spanned<Vec<Spanned<String>>>>,
    /// The client's headers the auth server gets (default: all but hop-by-hop ones).
    pub request_headers: Option<Spanned<Vec<Spanned<String>>>>,
    /// The whole check (connect, request, answer); default 5 s.
    pub timeout: Option<Spanned<DurationValue>>,
    /// What a check that failed (no answer in time, a refused connection) does: `closed`
    /// answers 502/504 (default), `open` lets the request through.
    pub fail: Option<Spanned<FailMode>>,
    /// Send the client's `Authorization` on to the server (default: removed).
    pub pass_authorization: Option<bool>,
}

/// Whether `name` may be set or copied by an auth method: a token, not a field tollgate
/// writes or frames by.
fn settable(name: &str) -> bool {
    crate::http::h1::headers::is_token(name.as_bytes())
        && !crate::http::h1::headers::is_hop_or_framing(name.as_bytes())
        && !matches!(name, "host" | "expect")
}

/// The route's auth, or `None` (absent, or refused: errors pushed).
pub(super) fn route_auth(
    section: Option<&Spanned<AuthSection>>,
    mode: ModeName,
    key: &str,
    path: impl Fn(&str) -> std::path::PathBuf,
    base_dir: Option<&std::path::Path>,
    errors: &mut Errors,
) -> Option<Arc<RouteAuth>> {
    let section = section?;
    let key = format!("{key}.auth");
    let refuse = |errors: &mut Errors, span: Range<usize>, k: String, why: String| {
        errors.push((span, k, why));
        None
    };
    if mode != ModeName::Http {
        return refuse(
            errors,
            section.span(),
            key,
            "authentication needs an http route (a tcp route sees no request)".into(),
        );
    }
    let s = section.get_ref();
    match (&s.basic, &s.forward, &s.jwt) {
        (Some(b), None, None) => basic(b, &key, path, errors),
        (None, Some(f), None) => forward(f, &key, errors),
        (None, None, Some(j)) => jwt(j, &key, base_dir, errors),
        (None, None, None) => refuse(
            errors,
            section.span(),
            key,
            "needs one method: `basic`, `forward` or `jwt`".into(),
        ),
        _ => refuse(
            errors,
            section.span(),
            key,
            "one method per route: `basic`, `forward` or `jwt`".into(),
        ),
    }
}

fn jwt(
    j: &Spanned<super::jwt::JwtSection>,
    key: &str,
    base_dir: Option<&std::path::Path>,
    errors: &mut Errors,
) -> Option<Arc<RouteAuth>> {
    let (policy, source) = super::jwt::policy(j, &format!("{key}.jwt"), base_dir, errors)?;
    // The claims' fields are the proxy's to write: a client's own are always dropped.
    let strip = policy.header_names().map(|n| Box::from(n.as_str())).collect();
    Some(Arc::new(RouteAuth {
        strip,
        method: Method::Jwt(JwtAuth {
            challenge: "Bearer realm=\"tollgate\"".into(),
            policy,
            jwks: Arc::new(Jwks::new(source)),
        }),
    }))
}

fn basic(
    b: &Spanned<BasicSection>,
    key: &str,
    path: impl Fn(&str) -> std::path::PathBuf,
    errors: &mut Errors,
) -> Option<Arc<RouteAuth>> {
    let key = format!("{key}.basic");
    let s = b.get_ref();
    let realm = s.realm.as_ref().map_or("restricted", |r| r.get_ref().as_str());
    if realm.is_empty() || realm.chars().any(|c| c.is_control() || c == '"' || c == '\\') {
        let span = s.realm.as_ref().map_or(b.span(), Spanned::span);
        errors.push((
            span,
            format!("{key}.realm"),
            "must be printable text without `\"` or `\\`".into(),
        ));
        return None;
    }
    let file = path(s.users_file.get_ref());
    let users = match super::bounded::read_bounded(&file, MAX_USERS_FILE) {
        Ok(bytes) => match String::from_utf8(bytes)
            .map_err(|_| "not UTF-8 text".to_string())
            .and_then(|t| Users::parse(&t))
        {
            Ok(u) if u.is_empty() => Err("has no user".to_string()),
            other => other,
        },
        Err(e) => Err(e.to_string()),
    };
    let users = match users {
        Ok(u) => u,
        Err(why) => {
            errors.push((
                s.users_file.span(),
                format!("{key}.users_file"),
                format!("`{}`: {why}", file.display()),
            ));
            return None;
        }
    };
    let pass = s.pass_authorization.unwrap_or(false);
    Some(Arc::new(RouteAuth {
        strip: if pass { Vec::new() } else { vec!["authorization".into()] },
        method: Method::Basic(BasicAuth {
            challenge: format!("Basic realm=\"{realm}\", charset=\"UTF-8\"").into(),
            users: Arc::new(users),
            source: file,
        }),
    }))
}

fn forward(f: &Spanned<ForwardSection>, key: &str, errors: &mut Errors) -> Option<Arc<RouteAuth>> {
    let key = format!("{key}.forward");
    let s = f.get_ref();
    let before = errors.len();
    let target = match crate::auth::forward::Target::parse(s.url.get_ref()) {
        Ok(t) => Some(t),
        Err(why) => {
            errors.push((s.url.span(), format!("{key}.url"), why));
            None
        }
    };
    let names = |list: &Option<Spanned<Vec<Spanned<String>>>>, k: &str, errors: &mut Errors| -> Vec<Box<str>> {
        let mut out: Vec<Box<str>> = Vec::new();
        for n in list.iter().flat_map(|l| l.get_ref()) {
            let lower = n.get_ref().to_ascii_lowercase();
            if !settable(&lower) {
                errors.push((
                    n.span(),
                    format!("{key}.{k}"),
                    format!("`{}` is not a header an auth server may set or see", n.get_ref()),
                ));
            } else if !out.iter().any(|o| **o == *lower) {
                out.push(lower.into());
            }
        }
        out
    };
    let copy_headers = names(&s.copy_headers, "copy_headers", errors);
    let request_headers = s
        .request_headers
        .as_ref()
        .map(|_| names(&s.request_headers, "request_headers", errors));
    let timeout = match &s.timeout {
        None => Duration::from_secs(5),
        Some(t) if t.get_ref().0.is_zero() || t.get_ref().0 > Duration::from_secs(60) => {
            errors.push((t.span(), format!("{key}.timeout"), "from 1ms to 60s".into()));
            Duration::from_secs(5)
        }
        Some(t) => t.get_ref().0,
    };
    if errors.len() > before {
        return None;
    }
    let pass = s.pass_authorization.unwrap_or(false);
    let mut strip: Vec<Box<str>> = copy_headers.clone();
    if !pass {
        strip.push("authorization".into());
    }
    Some(Arc::new(RouteAuth {
        strip,
        method: Method::Forward(Forward {
            target: target?,
            copy_headers,
            request_headers,
            timeout,
            fail: s.fail.as_ref().map_or(FailMode::Closed, |f| *f.get_ref()),
        }),
    }))
}
