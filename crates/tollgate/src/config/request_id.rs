//! `[[frontend]] request_id = { header, response, trust_from }`: every request of an HTTP
//! frontend carries an ID in `header` to its server (and, with `response`, back to its
//! client), logged with it. A client's own ID is kept only from a `trust_from` address, and
//! only if `http::request_id::is_acceptable` passes it; else it is replaced.
//!
//! Refused at load: on a tcp-mode frontend (there is no request), and a `header` that is
//! not a field name or names a field the proxy already owns (framing, hop-by-hop, `Host`,
//! the forwarding headers, pseudo-headers).

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use super::file::{ModeName, OneOrMore};
use super::prefix_set::PrefixSet;

type Errors = Vec<(Range<usize>, String, String)>;

/// The header an ID travels in unless `header` says otherwise (Envoy's, Heroku's, and what
/// most application frameworks read).
pub const DEFAULT_HEADER: &str = "x-request-id";

/// `request_id` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RequestIdSection {
    pub header: Option<Spanned<String>>,
    pub response: Option<bool>,
    pub trust_from: Option<Spanned<OneOrMore>>,
}

/// A frontend's request IDs.
#[derive(Debug, Clone)]
pub struct RequestIds {
    /// The field name, lowercase.
    pub header: Box<str>,
    /// Also sent back to the client in the response.
    pub response: bool,
    /// Clients whose own ID is kept (when acceptable); empty: every ID is generated.
    pub trust_from: PrefixSet,
}

impl RequestIds {
    /// Whether a client at `ip` may bring its own ID.
    pub fn trusts(&self, ip: std::net::IpAddr) -> bool {
        !self.trust_from.is_empty() && self.trust_from.contains(ip)
    }
}

/// Fields tollgate writes or judges itself besides the hop-by-hop and framing ones: a
/// request ID there would be lost or would change how the message is read.
const OWNED: &[&str] = &[
    "host",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-proto",
    "cookie",
    "set-cookie",
    "traceparent",
    "tracestate",
];

pub(super) fn request_ids(
    section: Option<&Spanned<RequestIdSection>>,
    mode: ModeName,
    key: &str,
    errors: &mut Errors,
) -> Option<RequestIds> {
    let section = section?;
    let key = format!("{key}.request_id");
    if mode != ModeName::Http {
        errors.push((
            section.span(),
            key,
            "request IDs need an http-mode frontend (a tcp frontend sees no request)".into(),
        ));
        return None;
    }
    let s = section.get_ref();
    let header = match &s.header {
        None => DEFAULT_HEADER.to_string(),
        Some(h) => {
            let name = h.get_ref().to_ascii_lowercase();
            let token = !name.is_empty() && name.bytes().all(is_tchar);
            if !token {
                errors.push((
                    h.span(),
                    format!("{key}.header"),
                    format!("`{}` is not a header field name", h.get_ref()),
                ));
                return None;
            }
            if OWNED.contains(&name.as_str()) || crate::http::h1::headers::is_hop_or_framing(name.as_bytes()) {
                errors.push((
                    h.span(),
                    format!("{key}.header"),
                    format!(
                        "`{name}` is a field tollgate writes or judges itself; name another (e.g. \"{DEFAULT_HEADER}\")"
                    ),
                ));
                return None;
            }
            name
        }
    };
    let trust_from = match &s.trust_from {
        None => PrefixSet::default(),
        Some(list) => PrefixSet::new(super::route::sources(errors, list, &format!("{key}.trust_from"))?),
    };
    Some(RequestIds {
        header: header.into_boxed_str(),
        response: s.response.unwrap_or(false),
        trust_from,
    })
}

/// RFC 9110 §5.6.2 `tchar`.
pub(super) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}
