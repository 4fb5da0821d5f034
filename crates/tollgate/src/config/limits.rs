//! Per-route and per-backend limits: `timeouts = { … }`, `max_body_size` and `retries` as
//! written on a `[[frontend.route]]` or a `[[backend]]`, checked against where they stand
//! and turned into [`Overrides`] (applied per request by `Config::request_limits`).
//!
//! Invariants after validation: every duration is non-zero; a route holds no `connect`
//! (how a server is reached is its backend's business); route limits exist only on routes
//! of http frontends that send to a backend (elsewhere they would limit nothing);
//! `http_request` on a backend only in http mode.

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::file::{BackendSection, ModeName, RouteSection, TimeoutOverridesSection};
use super::model::Overrides;
use super::units::DurationValue;

type Errors = Vec<(Range<usize>, String, String)>;

/// Most retries a route may allow: past a few, retrying is load, not resilience.
const MAX_ROUTE_RETRIES: u32 = 16;

/// A route's `timeouts`, `max_body_size` and `retries`.
pub(super) fn route(r: &RouteSection, key: &str, mode: ModeName, errors: &mut Errors) -> Overrides {
    let spans = [
        ("timeouts", r.timeouts.as_ref().map(Spanned::span)),
        ("max_body_size", r.max_body_size.as_ref().map(Spanned::span)),
        ("retries", r.retries.as_ref().map(Spanned::span)),
    ];
    // What these limit is the request's way to a server: elsewhere they would do nothing.
    let refusal = match (mode, &r.backend) {
        (ModeName::Tcp, _) => Some("needs an http-mode frontend (a tcp backend has its own `timeouts`)"),
        (ModeName::Http, None) => Some("needs a route to a `backend`"),
        (ModeName::Http, Some(_)) => None,
    };
    if let Some(why) = refusal {
        for (field, span) in spans {
            if let Some(span) = span {
                errors.push((span, format!("{key}.{field}"), format!("`{field}` on a route {why}")));
            }
        }
        return Overrides::NONE;
    }
    let mut out = Overrides::NONE;
    if let Some(t) = &r.timeouts {
        let tkey = format!("{key}.timeouts");
        if let Some(c) = &t.get_ref().connect {
            let msg = "a route cannot set `connect`: set it in its backend's `timeouts`".to_string();
            errors.push((c.span(), format!("{tkey}.connect"), msg));
        }
        out.server = positive(&t.get_ref().server, &format!("{tkey}.server"), errors);
        out.http_request = positive(&t.get_ref().http_request, &format!("{tkey}.http_request"), errors);
    }
    out.max_body_size = r.max_body_size.as_ref().map(|m| m.get_ref().0);
    if let Some(n) = &r.retries {
        if *n.get_ref() > MAX_ROUTE_RETRIES {
            let msg = format!("must be at most {MAX_ROUTE_RETRIES}");
            errors.push((n.span(), format!("{key}.retries"), msg));
        } else {
            out.retries = Some(*n.get_ref());
        }
    }
    out
}

/// A backend's `timeouts`.
pub(super) fn backend(b: &BackendSection, key: &str, mode: ModeName, errors: &mut Errors) -> Overrides {
    let Some(t) = &b.timeouts else {
        return Overrides::NONE;
    };
    let tkey = format!("{key}.timeouts");
    let TimeoutOverridesSection {
        connect,
        server,
        http_request,
    } = t.get_ref();
    if let (Some(h), ModeName::Tcp) = (http_request, mode) {
        let msg = "`http_request` needs an http-mode backend".to_string();
        errors.push((h.span(), format!("{tkey}.http_request"), msg));
    }
    Overrides {
        connect: positive(connect, &format!("{tkey}.connect"), errors),
        server: positive(server, &format!("{tkey}.server"), errors),
        http_request: positive(http_request, &format!("{tkey}.http_request"), errors),
        ..Overrides::NONE
    }
}

fn positive(value: &Option<Spanned<DurationValue>>, key: &str, errors: &mut Errors) -> Option<Duration> {
    let v = value.as_ref()?;
    if v.get_ref().0.is_zero() {
        errors.push((v.span(), key.to_string(), "must be greater than 0".into()));
        return None;
    }
    Some(v.get_ref().0)
}

#[cfg(test)]
mod tests {
    use super::super::parse;

    const BASE: &str = "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"MODE\"\ndefault_backend = \"be\"\n\
                        ROUTE\n[[backend]]\nname = \"be\"\nmode = \"MODE\"\nBACKEND\n[[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:9\"\n";

    fn config(mode: &str, route: &str, backend: &str) -> String {
        BASE.replace("MODE", mode)
            .replace("ROUTE", route)
            .replace("BACKEND", backend)
    }

    /// The first error's key and message.
    fn refusal(src: &str) -> (String, String, usize) {
        let e = parse(src, "t.toml").map(|_| ()).expect_err("accepted");
        let first = e.0.into_iter().next().expect("an error");
        (first.key, first.message, first.line)
    }

    #[test]
    fn route_and_backend_limits_resolve_in_order() {
        let route = "[[frontend.route]]\npath_prefix = \"/a\"\nbackend = \"be\"\n\
                     timeouts = { server = \"2s\", http_request = \"3s\" }\nmax_body_size = \"1KiB\"\nretries = 0\n";
        let backend = "timeouts = { connect = \"1s\", server = \"5s\", http_request = \"7s\" }";
        let c = parse(&config("http", route, backend), "t.toml").expect("valid");
        let overrides = &c.frontends[0].routes[0].overrides;
        let limits = c.request_limits(Some(0), overrides);
        assert_eq!(limits.timeouts.server, std::time::Duration::from_secs(2));
        assert_eq!(limits.timeouts.connect, std::time::Duration::from_secs(1));
        assert_eq!(limits.whole_request, Some(std::time::Duration::from_secs(3)));
        assert_eq!((limits.max_body_size, limits.retries), (1024, Some(0)));
        assert!(!limits.may_retry(0));
        // The default backend: the backend's overrides, the global rest.
        let limits = c.request_limits(Some(0), &crate::config::model::Overrides::NONE);
        assert_eq!(limits.timeouts.server, std::time::Duration::from_secs(5));
        assert_eq!(limits.whole_request, Some(std::time::Duration::from_secs(7)));
        assert_eq!((limits.max_body_size, limits.retries), (0, None));
        assert!(limits.may_retry(5));
        assert_eq!(c.connect_timeout(0), std::time::Duration::from_secs(1));
    }

    #[test]
    fn misplaced_limits_are_refused_with_their_key() {
        let cases = [
            (
                config(
                    "tcp",
                    "[[frontend.route]]\nsni = \"a.example\"\nbackend = \"be\"\nretries = 1\n",
                    "",
                ),
                "frontend[0].route[0].retries",
                "needs an http-mode frontend",
            ),
            (
                config(
                    "http",
                    "[[frontend.route]]\npath_prefix = \"/\"\nbackend = \"be\"\ntimeouts = { connect = \"1s\" }\n",
                    "",
                ),
                "frontend[0].route[0].timeouts.connect",
                "set it in its backend",
            ),
            (
                config(
                    "http",
                    "[[frontend.route]]\npath_prefix = \"/\"\nreturn = { status = 200 }\nmax_body_size = \"1k\"\n",
                    "",
                ),
                "frontend[0].route[0].max_body_size",
                "needs a route to a `backend`",
            ),
            (
                config(
                    "http",
                    "[[frontend.route]]\npath_prefix = \"/\"\nbackend = \"be\"\nretries = 17\n",
                    "",
                ),
                "frontend[0].route[0].retries",
                "at most 16",
            ),
            (
                config(
                    "http",
                    "[[frontend.route]]\npath_prefix = \"/\"\nbackend = \"be\"\ntimeouts = { server = \"0s\" }\n",
                    "",
                ),
                "frontend[0].route[0].timeouts.server",
                "greater than 0",
            ),
            (
                config("tcp", "", "timeouts = { http_request = \"1s\" }"),
                "backend[0].timeouts.http_request",
                "needs an http-mode backend",
            ),
            (
                config("http", "", "timeouts = { client = \"1s\" }"),
                "backend[0].timeouts.client",
                "unknown field",
            ),
        ];
        for (src, key, message) in cases {
            let (k, m, line) = refusal(&src);
            assert_eq!(k, key, "{src}");
            assert!(m.contains(message), "{m} / {src}");
            assert!(line > 1, "no position: {src}");
        }
    }
}
