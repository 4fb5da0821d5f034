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
