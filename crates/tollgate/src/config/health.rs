//! Health-check configuration: `[backend.health]`, the per-server check keys (`check`,
//! `check_port`, `agent_port`), the backend's passive `error_limit` and `[global]
//! max_health_checks` — as written (serde structs), as validated (model structs), and the
//! validation between the two.
//!
//! Owns: [`HealthCheck`] (one per backend with `[backend.health]`) and [`ServerCheck`] (every
//! server, resolved: a server of a backend without health checks has `enabled = false` and
//! nothing else set). Invariants after validation: `rise`, `fall`, `interval` and `timeout`
//! are non-zero; HTTP-only keys exist only on `type = "http"`; `error_limit`, `check_port`
//! and `agent_port` exist only where active checks run (what brings a passively marked-down
//! server back is its next passing check, so a server nothing checks is never marked down
//! passively); a check over TLS only on a server with `tls = true` (its verifier and SNI
//! are reused).

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::file::{BackendSection, ModeName};
use super::model::Server;
use super::units::DurationValue;

/// `[global] max_health_checks` when absent: checks in flight at once, process-wide.
pub const DEFAULT_MAX_HEALTH_CHECKS: u32 = 64;
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
pub const DEFAULT_RISE: u32 = 2;
pub const DEFAULT_FALL: u32 = 3;
pub const DEFAULT_JITTER_PERCENT: u32 = 10;
/// Most body bytes an HTTP check reads looking for `expect_body`.
pub const MAX_BODY_READ: usize = 16 * 1024;
/// Shortest `interval` accepted: below it checks are load, not health.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// `type` of `[backend.health]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckType {
    Tcp,
    Http,
}

/// What happens to a server's established connections when checks mark it down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnMarkedDown {
    /// They finish on their own (HAProxy's default).
    #[default]
    None,
    /// They are closed at once.
    ShutdownSessions,
}

/// One `expect_status` entry: a code (`200`) or an inclusive range (`"200-399"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum StatusSpec {
    Code(u32),
    Text(String),
}

/// `expect_status`: one entry or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum StatusList {
    One(StatusSpec),
    Many(Vec<StatusSpec>),
}

/// `[backend.health]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HealthSection {
    #[serde(rename = "type")]
    pub kind: Spanned<CheckType>,
    pub interval: Option<Spanned<DurationValue>>,
    pub timeout: Option<Spanned<DurationValue>>,
    pub rise: Option<Spanned<u32>>,
    pub fall: Option<Spanned<u32>>,
    /// `"10%"`: each delay between checks is the interval ± up to this fraction.
    pub jitter: Option<Spanned<String>>,
    pub method: Option<Spanned<String>>,
    pub path: Option<Spanned<String>>,
    pub host: Option<Spanned<String>>,
    pub expect_status: Option<Spanned<StatusList>>,
    pub expect_body: Option<Spanned<String>>,
    pub tls: Option<Spanned<bool>>,
    pub on_marked_down: Option<Spanned<OnMarkedDown>>,
    pub agent_interval: Option<Spanned<DurationValue>>,
}

/// A backend's active checks, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    pub kind: CheckKind,
    pub interval: Duration,
    /// For one check: connect, TLS handshake, request, response.
    pub timeout: Duration,
    /// Consecutive passing checks that bring a server up.
    pub rise: u32,
    /// Consecutive failing checks that bring a server down.
    pub fall: u32,
    /// Each delay is `interval × (1 ± u)`, `u` uniform in `[0, jitter_percent/100]`.
    pub jitter_percent: u32,
    pub on_marked_down: OnMarkedDown,
    /// How often the agent (`agent_port`) is asked.
    pub agent_interval: Duration,
    /// The backend's passive `error_limit` (0 = off), for servers added at run time (DNS).
    pub error_limit: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckKind {
    /// A connect within the timeout passes.
    Tcp,
    Http(HttpCheck),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpCheck {
    pub method: String,
    pub path: String,
    /// The Host header; `None` = the server's address.
    pub host: Option<String>,
    /// Inclusive ranges; a status passes if any contains it.
    pub expect_status: Vec<(u16, u16)>,
    pub expect_body: Option<String>,
}

impl HttpCheck {
    pub fn status_ok(&self, status: u16) -> bool {
        self.expect_status.iter().any(|(lo, hi)| (*lo..=*hi).contains(&status))
    }
}

/// One server's check settings, resolved (defaults applied, backend keys folded in).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerCheck {
    /// Active checks run for this server.
    pub enabled: bool,
    /// Checks go to this port instead of the server's.
    pub port: Option<u16>,
    /// HAProxy agent protocol on this port.
    pub agent_port: Option<u16>,
    /// Checks speak TLS (with the server's own TLS settings).
    pub tls: bool,
    /// Consecutive errors on live traffic that mark the server down; 0 = off.
    pub error_limit: u32,
    /// Checks open with a PROXY header of this version (`check_send_proxy`).
    pub send_proxy: Option<crate::proxyproto::Version>,
}

type Errors = Vec<(Range<usize>, String, String)>;

/// Validates a backend's health keys and fills in `servers[..].check`; the errors go to
/// `errors` with the position of the value at fault. `servers` are the ones that validated
/// (matched to their sections by name).
pub(super) fn backend_health(
    b: &BackendSection,
    key: &str,
    mode: ModeName,
    servers: &mut [Server],
    errors: &mut Errors,
) -> Option<Arc<HealthCheck>> {
    let health = b
        .health
        .as_ref()
        .map(|h| section(h, &format!("{key}.health"), mode, errors));
    if let (Some(limit), None) = (&b.error_limit, &health) {
        errors.push((
            limit.span(),
            format!("{key}.error_limit"),
            "`error_limit` needs [backend.health]: only a passing check brings a server marked down by errors back"
                .into(),
        ));
    }
    let error_limit = b.error_limit.as_ref().map_or(0, |l| *l.get_ref());
    let health = health.map(|h| HealthCheck { error_limit, ..h });
    let tls_default = b.health.as_ref().and_then(|h| h.tls.as_ref());
    for (j, s) in b.server.iter().enumerate() {
        let skey = format!("{key}.server[{j}]");
        let Some(server) = servers.iter_mut().find(|m| m.name == *s.name.get_ref()) else {
            continue;
        };
        if health.is_none() {
            for (field, span) in [
                ("check", s.check.as_ref().map(Spanned::span)),
                ("check_port", s.check_port.as_ref().map(Spanned::span)),
                ("agent_port", s.agent_port.as_ref().map(Spanned::span)),
                ("check_send_proxy", s.check_send_proxy.as_ref().map(Spanned::span)),
            ] {
                if let Some(span) = span {
                    errors.push((
                        span,
                        format!("{skey}.{field}"),
                        format!("`{field}` needs [backend.health]"),
                    ));
                }
            }
            continue;
        }
        let enabled = s.check.as_ref().is_none_or(|c| *c.get_ref());
        let port = nonzero_port(s.check_port.as_ref(), &format!("{skey}.check_port"), errors);
        let agent_port = nonzero_port(s.agent_port.as_ref(), &format!("{skey}.agent_port"), errors);
        if !enabled {
            for (field, span) in [
                ("check_port", s.check_port.as_ref().map(Spanned::span)),
                ("agent_port", s.agent_port.as_ref().map(Spanned::span)),
            ] {
                if let Some(span) = span {
                    errors.push((
                        span,
                        format!("{skey}.{field}"),
                        format!("`{field}` is unused with `check = false`"),
                    ));
                }
            }
        }
        // HAProxy's rule: a TLS server checked on its own port is checked over TLS.
        let tls = match tls_default {
            Some(t) => *t.get_ref(),
            None => server.tls.is_some() && port.is_none(),
        };
        if tls && enabled && server.tls.is_none() {
            let span = tls_default.map_or(s.name.span(), Spanned::span);
            errors.push((
                span,
                format!("{key}.health.tls"),
                format!("checks over TLS need `tls = true` on server `{}`", server.name),
            ));
        }
        server.check = ServerCheck {
            enabled,
            port,
            agent_port,
            tls: tls && enabled,
            error_limit: if enabled { error_limit } else { 0 },
            send_proxy: super::proxy::check_send_proxy(s, server.send_proxy),
        };
    }
    health.map(Arc::new)
}

fn nonzero_port(port: Option<&Spanned<u16>>, key: &str, errors: &mut Errors) -> Option<u16> {
    let p = port?;
    if *p.get_ref() == 0 {
        errors.push((p.span(), key.to_string(), "must be a port in 1..65535".into()));
        return None;
    }
    Some(*p.get_ref())
}

fn section(h: &HealthSection, key: &str, mode: ModeName, errors: &mut Errors) -> HealthCheck {
    let mut err = |span: Range<usize>, field: &str, msg: String| errors.push((span, format!("{key}.{field}"), msg));
    let duration =
        |v: &Option<Spanned<DurationValue>>, field: &str, err: &mut dyn FnMut(Range<usize>, &str, String)| {
            let v = v.as_ref()?;
            if v.get_ref().0 < MIN_INTERVAL {
                err(v.span(), field, format!("must be at least {MIN_INTERVAL:?}"));
                return None;
            }
            Some(v.get_ref().0)
        };
    let interval = duration(&h.interval, "interval", &mut err).unwrap_or(DEFAULT_INTERVAL);
    // HAProxy's default: a check may take as long as the interval between two.
    let timeout = match &h.timeout {
        Some(t) if t.get_ref().0.is_zero() => {
            err(t.span(), "timeout", "must be greater than 0".into());
            interval
        }
        Some(t) => t.get_ref().0,
        None => interval,
    };
    let agent_interval = duration(&h.agent_interval, "agent_interval", &mut err).unwrap_or(interval);
    let count = |v: &Option<Spanned<u32>>,
                 field: &str,
                 default: u32,
                 err: &mut dyn FnMut(Range<usize>, &str, String)| {
        match v {
            Some(n) if !(1..=1000).contains(n.get_ref()) => {
                err(n.span(), field, "must be between 1 and 1000".into());
                default
            }
            Some(n) => *n.get_ref(),
            None => default,
        }
    };
    let rise = count(&h.rise, "rise", DEFAULT_RISE, &mut err);
    let fall = count(&h.fall, "fall", DEFAULT_FALL, &mut err);
    let jitter_percent = match &h.jitter {
        Some(j) => parse_percent(j.get_ref()).filter(|p| *p <= 50).unwrap_or_else(|| {
            err(
                j.span(),
                "jitter",
                format!("`{}` is not a percentage from \"0%\" to \"50%\"", j.get_ref()),
            );
            DEFAULT_JITTER_PERCENT
        }),
        None => DEFAULT_JITTER_PERCENT,
    };
    let kind = match h.kind.get_ref() {
        CheckType::Tcp => {
            for (field, span) in [
                ("method", h.method.as_ref().map(Spanned::span)),
                ("path", h.path.as_ref().map(Spanned::span)),
                ("host", h.host.as_ref().map(Spanned::span)),
                ("expect_status", h.expect_status.as_ref().map(Spanned::span)),
                ("expect_body", h.expect_body.as_ref().map(Spanned::span)),
            ] {
                if let Some(span) = span {
                    err(span, field, format!("`{field}` needs type = \"http\""));
                }
            }
            CheckKind::Tcp
        }
        CheckType::Http => CheckKind::Http(http_check(h, &mut err)),
    };
    // An HTTP check against a TCP backend is fine (the server may speak HTTP on the side);
    // the mode only matters for what the proxy relays.
    let _ = mode;
    HealthCheck {
        kind,
        interval,
        timeout,
        rise,
        fall,
        jitter_percent,
        on_marked_down: h
            .on_marked_down
            .as_ref()
            .map_or_else(OnMarkedDown::default, |o| *o.get_ref()),
        agent_interval,
        error_limit: 0,
    }
}

fn http_check(h: &HealthSection, err: &mut dyn FnMut(Range<usize>, &str, String)) -> HttpCheck {
    let method = match &h.method {
        Some(m) if !crate::http::h1::headers::is_token(m.get_ref().as_bytes()) => {
            err(
                m.span(),
                "method",
                format!("`{}` is not an HTTP method (a token)", m.get_ref()),
            );
            "GET".to_string()
        }
        Some(m) => m.get_ref().clone(),
        None => "GET".to_string(),
    };
    let visible = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic());
    let path = match &h.path {
        Some(p) if !p.get_ref().starts_with('/') || !visible(p.get_ref()) => {
            err(
                p.span(),
                "path",
                "must start with `/` and contain no spaces or control bytes".into(),
            );
            "/".to_string()
        }
        Some(p) => p.get_ref().clone(),
        None => "/".to_string(),
    };
    let host = match &h.host {
        Some(v) if !visible(v.get_ref()) => {
            err(
                v.span(),
                "host",
                "must be a non-empty host name with no spaces or control bytes".into(),
            );
            None
        }
        Some(v) => Some(v.get_ref().clone()),
        None => None,
    };
    let expect_status = match &h.expect_status {
        Some(list) => statuses(list.get_ref()).unwrap_or_else(|msg| {
            err(list.span(), "expect_status", msg);
            vec![(200, 399)]
        }),
        None => vec![(200, 399)],
    };
    let expect_body = match &h.expect_body {
        Some(b) if b.get_ref().is_empty() || b.get_ref().len() > MAX_BODY_READ => {
            err(b.span(), "expect_body", format!("must be 1 to {MAX_BODY_READ} bytes"));
            None
        }
        Some(b) => Some(b.get_ref().clone()),
        None => None,
    };
    HttpCheck {
        method,
        path,
        host,
        expect_status,
        expect_body,
    }
}

/// `"10%"` → 10.
pub(crate) fn parse_percent(text: &str) -> Option<u32> {
    text.trim().strip_suffix('%')?.trim().parse().ok()
}

fn statuses(list: &StatusList) -> Result<Vec<(u16, u16)>, String> {
    let specs: Vec<&StatusSpec> = match list {
        StatusList::One(s) => vec![s],
        StatusList::Many(v) => v.iter().collect(),
    };
    if specs.is_empty() {
        return Err("needs at least one status or range".into());
    }
    let code = |n: u32| {
        u16::try_from(n)
            .ok()
            .filter(|c| (100..=599).contains(c))
            .ok_or_else(|| format!("{n} is not a status code (100..=599)"))
    };
    let parse = |t: &str| {
        t.trim()
            .parse::<u32>()
            .map_err(|_| format!("`{t}` is not a status code or a range like \"200-399\""))
    };
    specs
        .into_iter()
        .map(|s| match s {
            StatusSpec::Code(n) => code(*n).map(|c| (c, c)),
            StatusSpec::Text(t) => {
                let (lo, hi) = t.split_once('-').unwrap_or((t, t));
                let (lo, hi) = (code(parse(lo)?)?, code(parse(hi)?)?);
                if lo > hi {
                    return Err(format!("range `{t}` ends before it starts"));
                }
                Ok((lo, hi))
            }
        })
        .collect()
}

/// `[global] max_health_checks`: at least 1.
pub(super) fn max_health_checks(v: Option<&Spanned<u32>>, errors: &mut Errors) -> u32 {
    match v {
        Some(m) if *m.get_ref() == 0 => {
            errors.push((m.span(), "global.max_health_checks".into(), "must be at least 1".into()));
            DEFAULT_MAX_HEALTH_CHECKS
        }
        Some(m) => *m.get_ref(),
        None => DEFAULT_MAX_HEALTH_CHECKS,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::config::parse;

    fn config(health: &str, server_extra: &str) -> String {
        format!(
            "[[frontend]]\nname = \"f\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"app\"\n\
             [[backend]]\nname = \"app\"\n{health}\n\
             [[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:1\"\n{server_extra}\n"
        )
    }

    fn error(text: &str) -> crate::config::ConfigError {
        parse(text, "t.toml").map(|_| ()).unwrap_err().0.remove(0)
    }

    #[test]
    fn defaults_follow_haproxy() {
        let c = parse(&config("[backend.health]\ntype = \"http\"", ""), "t.toml").unwrap();
        let h = c.backends[0].health.as_deref().unwrap();
        assert_eq!(
            (h.interval, h.timeout, h.rise, h.fall),
            (DEFAULT_INTERVAL, DEFAULT_INTERVAL, 2, 3)
        );
        assert_eq!(h.jitter_percent, 10);
        let CheckKind::Http(http) = &h.kind else { panic!() };
        assert!(http.status_ok(200) && http.status_ok(399) && !http.status_ok(404));
        assert!(c.backends[0].servers[0].check.enabled);
        assert_eq!(c.global.max_health_checks, DEFAULT_MAX_HEALTH_CHECKS);
        let none = parse(&config("", ""), "t.toml").unwrap();
        assert!(none.backends[0].health.is_none() && !none.backends[0].servers[0].check.enabled);
    }

    #[test]
    fn statuses_accept_codes_ranges_and_one_value() {
        let c = parse(
            &config(
                "[backend.health]\ntype = \"http\"\nexpect_status = [204, \"300-302\"]",
                "",
            ),
            "t.toml",
        )
        .unwrap();
        let CheckKind::Http(http) = &c.backends[0].health.as_deref().unwrap().kind else {
            panic!()
        };
        assert_eq!(http.expect_status, [(204, 204), (300, 302)]);
        let one = parse(
            &config("[backend.health]\ntype = \"http\"\nexpect_status = \"200\"", ""),
            "t.toml",
        )
        .unwrap();
        let CheckKind::Http(http) = &one.backends[0].health.as_deref().unwrap().kind else {
            panic!()
        };
        assert_eq!(http.expect_status, [(200, 200)]);
    }

    #[test]
    fn nonsense_is_refused_with_line_and_key() {
        let cases = [
            (
                "[backend.health]\ntype = \"tcp\"\nrise = 0",
                "",
                "health.rise",
                "between 1",
            ),
            (
                "[backend.health]\ntype = \"tcp\"\nfall = 0",
                "",
                "health.fall",
                "between 1",
            ),
            (
                "[backend.health]\ntype = \"tcp\"\ntimeout = \"0s\"",
                "",
                "health.timeout",
                "greater than 0",
            ),
            (
                "[backend.health]\ntype = \"tcp\"\ninterval = \"1ms\"",
                "",
                "health.interval",
                "at least",
            ),
            (
                "[backend.health]\ntype = \"tcp\"\nexpect_body = \"ok\"",
                "",
                "health.expect_body",
                "type = \"http\"",
            ),
            (
                "[backend.health]\ntype = \"http\"\nexpect_status = [\"399-200\"]",
                "",
                "expect_status",
                "ends before",
            ),
            (
                "[backend.health]\ntype = \"http\"\nexpect_status = [700]",
                "",
                "expect_status",
                "not a status",
            ),
            (
                "[backend.health]\ntype = \"http\"\npath = \"x\"",
                "",
                "health.path",
                "start with",
            ),
            (
                "[backend.health]\ntype = \"http\"\njitter = \"80%\"",
                "",
                "health.jitter",
                "percentage",
            ),
            (
                "[backend.health]\ntype = \"http\"\ntls = true",
                "",
                "health.tls",
                "tls = true",
            ),
            ("error_limit = 3", "", "error_limit", "needs [backend.health]"),
            ("", "check_port = 8080", "check_port", "needs [backend.health]"),
            (
                "[backend.health]\ntype = \"tcp\"",
                "check = false\nagent_port = 9",
                "agent_port",
                "unused",
            ),
            (
                "[backend.health]\ntype = \"tcp\"",
                "check_port = 0",
                "check_port",
                "1..65535",
            ),
        ];
        for (health, server, key, msg) in cases {
            // `error_limit` belongs to the backend table, before the health table.
            let text = if health.starts_with("error_limit") {
                config("", server).replace("name = \"app\"\n", &format!("name = \"app\"\n{health}\n"))
            } else {
                config(health, server)
            };
            let e = error(&text);
            assert!(
                e.key.ends_with(key) && e.message.contains(msg),
                "{health} / {server}: {e}"
            );
            assert!(e.line > 0, "{e}");
        }
    }

    #[test]
    fn unchecked_servers_are_never_marked_down_passively() {
        let text = config("error_limit = 5\n[backend.health]\ntype = \"tcp\"", "check = false");
        let c = parse(&text, "t.toml").unwrap();
        assert_eq!(c.backends[0].servers[0].check, ServerCheck::default());
    }
}
