//! The live stats page on the admin endpoint: `GET /` (or `/stats`) answers one
//! self-contained HTML page (`stats.html`: inline CSS and JS, no external asset, so it works
//! offline) whose script polls `GET /stats.json` every 2 s and redraws in place;
//! `POST /stats/server?backend=B&server=S&state=drain|maint|ready` is its buttons.
//!
//! The data is the `metrics` command's answer (what `/metrics` and `ctl show info` render)
//! cut to the newest serving generation: frontends, backends and their servers as
//! `ctl show servers --json` shows them. A button runs the very command
//! `tollgate ctl set server B/S state S` sends, through the same master queue, and is logged
//! like one (`via="admin http"` and the user instead of a uid).
//!
//! Invariants: without `[admin] stats_auth` the page is open and read-only (the action
//! answers 403); with it, page, data and action need HTTP Basic credentials, compared as
//! SHA-256 digests in constant time. An action must carry `X-Tollgate-Action: 1` — a header
//! a cross-origin form cannot send and a cross-origin script cannot send without a CORS
//! preflight, which this endpoint never grants — and an `Origin`, when present, must be this
//! host's. The page is served with a CSP that allows no other origin.

use serde::Serialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::http::{Asked, Endpoint, Failed, Response};
use crate::command::{Answer, Command, GenerationMetrics, MetricsReport};
use crate::config::model::StatsAuth;
use crate::live::server::{AdminState, ServerView};
use crate::metrics::FrontendMetrics;

/// The page (served as is: it fetches its data itself).
const PAGE: &str = include_str!("stats.html");

/// Nothing but this page's own inline code and same-origin requests; no framing (the
/// buttons must not be clickjacked).
const PAGE_HEADERS: &str = "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; \
style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
frame-ancestors 'none'\r\nX-Frame-Options: DENY\r\nX-Content-Type-Options: nosniff\r\n";

const CHALLENGE: &str = "WWW-Authenticate: Basic realm=\"tollgate stats\", charset=\"UTF-8\"\r\n";

/// `stats_auth` as the endpoint checks it: the user (for logs) and the digest of the
/// `Authorization: Basic` token a browser sends for it.
pub(crate) struct Credentials {
    user: String,
    digest: [u8; 32],
}

impl Credentials {
    pub(crate) fn new(auth: &StatsAuth) -> Self {
        let token = base64(format!("{}:{}", auth.user, auth.password).as_bytes());
        Credentials {
            user: auth.user.clone(),
            digest: Sha256::digest(token.as_bytes()).into(),
        }
    }

    /// Whether `authorization` (the header's value) carries these credentials. Digests of
    /// equal length are compared in constant time, so neither the password nor its length
    /// shows in the answer's timing.
    fn accepts(&self, authorization: Option<&str>) -> bool {
        let Some((scheme, token)) = authorization.and_then(|v| v.trim().split_once(' ')) else {
            return false;
        };
        let digest: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        let same: bool = digest.ct_eq(&self.digest).into();
        scheme.eq_ignore_ascii_case("basic") && same
    }
}

/// Standard base64 with padding (RFC 4648), as browsers encode Basic credentials.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let symbol = |v: u32| char::from(ALPHABET.get((v & 63) as usize).copied().unwrap_or(b'='));
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let v = (b(0) << 16) | (b(1) << 8) | b(2);
        out.push(symbol(v >> 18));
        out.push(symbol(v >> 12));
        out.push(if chunk.len() > 1 { symbol(v >> 6) } else { '=' });
        out.push(if chunk.len() > 2 { symbol(v) } else { '=' });
    }
    out
}

/// `Ok(user)` when the request may see the page (`None`: no credentials configured).
fn authorize<'e>(endpoint: &'e Endpoint, asked: &Asked) -> Result<Option<&'e str>, Response> {
    match &endpoint.auth {
        None => Ok(None),
        Some(c) if c.accepts(asked.authorization.as_deref()) => Ok(Some(&c.user)),
        Some(_) => Err(Response {
            headers: CHALLENGE,
            ..Response::text("401 Unauthorized", "credentials required ([admin] stats_auth)\n")
        }),
    }
}

/// `GET /`, `GET /stats`.
pub(crate) fn page(endpoint: &Endpoint, asked: &Asked) -> Response {
    if let Err(refused) = authorize(endpoint, asked) {
        return refused;
    }
    Response {
        content_type: "text/html; charset=utf-8",
        headers: PAGE_HEADERS,
        ..Response::text("200 OK", PAGE)
    }
}

/// `GET /stats.json`.
pub(crate) async fn json(endpoint: &Endpoint, asked: &Asked) -> Response {
    if let Err(refused) = authorize(endpoint, asked) {
        return refused;
    }
    let report = match endpoint.run(Command::Metrics).await {
        Ok(Answer::Metrics(report)) => report,
        Ok(_) => return Response::text("503 Service Unavailable", "unexpected answer\n"),
        Err(Failed::Refused(e) | Failed::Unavailable(e)) => {
            return Response::text("503 Service Unavailable", format!("{e}\n"));
        }
    };
    match view(&report, endpoint.auth.is_some() && endpoint.commands.changes()) {
        Some(view) => Response {
            content_type: "application/json",
            ..Response::text("200 OK", serde_json::to_string(&view).unwrap_or_default())
        },
        None => Response::text("503 Service Unavailable", "no generation is serving\n"),
    }
}

/// What `/stats.json` answers.
#[derive(Debug, Serialize)]
struct View<'a> {
    version: &'static str,
    /// The master's (`None` without a master).
    uptime_seconds: Option<u64>,
    generation: u64,
    /// Seconds since the epoch now: the page shows last changes relative to it, so the
    /// browser's clock does not matter.
    time: u64,
    /// The same in milliseconds: the page's rates are per second of this clock.
    time_ms: u64,
    /// Whether the page offers drain/maint/ready (`stats_auth` is set and a master runs).
    actions: bool,
    frontends: &'a [FrontendMetrics],
    backends: Vec<BackendView<'a>>,
}

#[derive(Debug, Serialize)]
struct BackendView<'a> {
    name: &'a str,
    /// Requests waiting for a slot on any of its servers.
    queued: u32,
    servers: Vec<&'a ServerView>,
}

/// The newest serving generation's figures (`None`: no generation answered).
fn view(report: &MetricsReport, actions: bool) -> Option<View<'_>> {
    let current = report.master.as_ref().map(|m| m.current_generation);
    let generation: &GenerationMetrics = report
        .generations
        .iter()
        .find(|g| Some(g.generation) == current)
        .or_else(|| report.generations.iter().max_by_key(|g| g.generation))?;
    let m = &generation.metrics;
    let backends = m
        .backends
        .iter()
        .map(|b| BackendView {
            name: &b.name,
            queued: b.queued,
            servers: m.servers.iter().filter(|s| s.backend == b.name).collect(),
        })
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Some(View {
        version: env!("CARGO_PKG_VERSION"),
        uptime_seconds: report.master.as_ref().map(|m| m.uptime_seconds),
        generation: generation.generation,
        time: now.as_secs(),
        time_ms: u64::try_from(now.as_millis()).unwrap_or(u64::MAX),
        actions,
        frontends: &m.frontends,
        backends,
    })
}

/// `POST /stats/server?backend=B&server=S&state=drain|maint|ready`.
pub(crate) async fn action(endpoint: &Endpoint, asked: &Asked) -> Response {
    let user = match authorize(endpoint, asked) {
        Ok(Some(user)) => user,
        Ok(None) => {
            return Response::text(
                "403 Forbidden",
                "the stats page is read-only: set [admin] stats_auth to enable its actions\n",
            );
        }
        Err(refused) => return refused,
    };
    if let Err(why) = same_origin(asked) {
        return Response::text("403 Forbidden", format!("{why}\n"));
    }
    let command = match set_state(&asked.query) {
        Ok(c) => c,
        Err(e) => return Response::text("400 Bad Request", format!("{e}\n")),
    };
    if let Command::SetServerState {
        backend, server, state, ..
    } = &command
    {
        // Validated names (`set_state`), and still escaped: no client byte reaches a log raw
        // (`user` is the configured one, checked at load to hold no control character).
        tracing::info!(via = "admin http", user = %user, command = command.name(), server = ?format!("{backend}/{server}"), state = state.as_str(), "control: command");
    }
    match endpoint.run(command).await {
        Ok(Answer::Text { text }) => Response::text("200 OK", text + "\n"),
        Ok(_) => Response::text("200 OK", "done\n"),
        Err(Failed::Refused(e)) => Response::text("400 Bad Request", format!("{e}\n")),
        Err(Failed::Unavailable(e)) => Response::text("503 Service Unavailable", format!("{e}\n")),
    }
}

/// The CSRF guard (see the module doc).
fn same_origin(asked: &Asked) -> Result<(), &'static str> {
    if !asked.action_header {
        return Err("an action needs the header `X-Tollgate-Action: 1`");
    }
    let Some(origin) = &asked.origin else {
        return Ok(());
    };
    let host = asked.host.as_deref().unwrap_or_default();
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    if host.is_empty() || authority != Some(host) {
        return Err("cross-origin action refused (Origin is not this host)");
    }
    Ok(())
}

/// The query's `backend`, `server` and `state` as the command `ctl set server B/S state S`
/// sends (never `--kill`: the page has no button for it).
fn set_state(query: &str) -> Result<Command, String> {
    let (mut backend, mut server, mut state) = (None, None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value).ok_or_else(|| format!("`{key}`: bad percent-encoding"))?;
        match key {
            "backend" => backend = Some(value),
            "server" => server = Some(value),
            "state" => state = Some(value),
            other => return Err(format!("unknown parameter `{other}` (backend, server, state)")),
        }
    }
    let need = |v: Option<String>, key: &str| v.filter(|v| !v.is_empty()).ok_or(format!("`{key}` is missing"));
    let (backend, server, state) = (
        need(backend, "backend")?,
        need(server, "server")?,
        need(state, "state")?,
    );
    for (key, name) in [("backend", &backend), ("server", &server)] {
        if !crate::config::is_name(name) {
            return Err(format!(
                "`{key}`: a name uses only letters, digits, `-`, `_`, `.` (got {name:?})"
            ));
        }
    }
    let state = AdminState::parse(&state).ok_or_else(|| format!("unknown state {state:?} (ready, drain, maint)"))?;
    Ok(Command::SetServerState {
        backend,
        server,
        state,
        kill: false,
    })
}

/// `%XX` escapes and `+` for a space, as `URLSearchParams` writes them; `None`: a broken
/// escape or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let mut out = Vec::with_capacity(text.len());
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'%' => {
                let hex = [bytes.next()?, bytes.next()?];
                let hex = std::str::from_utf8(&hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn base64_matches_rfc_4648() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("Aladdin:open sesame", "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain}");
        }
    }

    #[test]
    fn only_the_configured_credentials_pass() {
        let c = Credentials::new(&StatsAuth {
            user: "Aladdin".into(),
            password: "open sesame".into(),
        });
        assert!(c.accepts(Some("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")));
        assert!(c.accepts(Some("basic  QWxhZGRpbjpvcGVuIHNlc2FtZQ== ")));
        for wrong in [
            None,
            Some(""),
            Some("Basic"),
            Some("Bearer QWxhZGRpbjpvcGVuIHNlc2FtZQ=="),
            Some("Basic QWxhZGRpbjpvcGVuIHNlc2FtZA=="),
            Some("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ"),
        ] {
            assert!(!c.accepts(wrong), "{wrong:?}");
        }
    }

    #[test]
    fn actions_parse_like_ctl_set_server_state() {
        let c = set_state("backend=app&server=web%2D1&state=drain").unwrap();
        assert_eq!(
            c,
            Command::SetServerState {
                backend: "app".into(),
                server: "web-1".into(),
                state: AdminState::Drain,
                kill: false
            }
        );
        assert!(
            set_state("backend=app&server=a&state=sleep")
                .unwrap_err()
                .contains("unknown state")
        );
        assert!(set_state("backend=app&state=drain").unwrap_err().contains("`server`"));
        assert!(set_state("backend=app&server=a&state=maint&kill=1").is_err());
        assert!(set_state("backend=a%zz&server=a&state=ready").is_err());
    }

    #[test]
    fn actions_need_the_custom_header_and_a_matching_origin() {
        let asked = |header: bool, origin: Option<&str>| Asked {
            action_header: header,
            origin: origin.map(Into::into),
            host: Some("127.0.0.1:9100".into()),
            ..Asked::default()
        };
        assert!(same_origin(&asked(true, None)).is_ok());
        assert!(same_origin(&asked(true, Some("http://127.0.0.1:9100"))).is_ok());
        assert!(same_origin(&asked(false, None)).is_err());
        assert!(same_origin(&asked(true, Some("http://evil.example"))).is_err());
        assert!(same_origin(&asked(true, Some("null"))).is_err());
    }

    // What a client sends in the query and the Authorization header never panics, and what
    // a browser's URLSearchParams encodes decodes back.
    proptest::proptest! {
        #[test]
        fn any_query_or_header_is_an_answer_not_a_panic(query in ".{0,80}", header in ".{0,80}") {
            let _ = set_state(&query);
            let c = Credentials::new(&StatsAuth { user: "u".into(), password: "p".into() });
            proptest::prop_assert!(!c.accepts(Some(&header)) || header.trim().ends_with("dTpw"));
        }

        #[test]
        fn percent_encoding_round_trips(name in "\\PC{0,40}") {
            let encoded: String = name
                .bytes()
                .map(|b| match b {
                    b' ' => "+".to_string(),
                    b if b.is_ascii_alphanumeric() => char::from(b).to_string(),
                    b => format!("%{b:02X}"),
                })
                .collect();
            proptest::prop_assert_eq!(percent_decode(&encoded), Some(name));
        }
    }

    #[test]
    fn the_view_is_the_current_generation_grouped_by_backend() {
        use crate::command::MasterMetrics;
        use crate::metrics::{BackendMetrics, MetricsSnapshot};
        let server = |backend: &str, name: &str| {
            let json = format!(
                r#"{{"id":1,"backend":"{backend}","name":"{name}","address":"127.0.0.1:1","admin":"ready",
                "oper":"up","weight":1,"effective_weight":1,"backup":false,"maxconn":0,"active":0,
                "queued":0,"last_change":0,"counters":{{"connections":0,"requests":0,
                "bytes_to_server":0,"bytes_to_client":0,"connect_failures":0,"retries":0,
                "responses_1xx":0,"responses_2xx":0,"responses_3xx":0,"responses_4xx":0,
                "responses_5xx":0,"responses_other":0}}}}"#
            );
            serde_json::from_str::<ServerView>(&json).unwrap()
        };
        let generation = |n: u64, servers: Vec<ServerView>| GenerationMetrics {
            generation: n,
            metrics: MetricsSnapshot {
                backends: ["a", "b"]
                    .iter()
                    .map(|n| BackendMetrics {
                        name: (*n).into(),
                        ..BackendMetrics::default()
                    })
                    .collect(),
                servers,
                ..MetricsSnapshot::default()
            },
        };
        let report = MetricsReport {
            master: Some(MasterMetrics {
                current_generation: 2,
                ..MasterMetrics::default()
            }),
            generations: vec![
                generation(1, vec![server("a", "old")]),
                generation(2, vec![server("a", "x"), server("b", "y"), server("a", "z")]),
            ],
            ..MetricsReport::default()
        };
        let v = view(&report, true).unwrap();
        assert_eq!(v.generation, 2);
        let names: Vec<Vec<&str>> = v
            .backends
            .iter()
            .map(|b| b.servers.iter().map(|s| s.name.as_str()).collect())
            .collect();
        assert_eq!(names, vec![vec!["x", "z"], vec!["y"]]);
        assert!(view(&MetricsReport::default(), false).is_none());
    }
}
