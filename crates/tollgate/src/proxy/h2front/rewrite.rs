//! A matched route's rewrites on an HTTP/2 client's request head (`http::request::Parts`),
//! before it is written for an HTTP/1.1 server (`to_h1`) or an HTTP/2 one (`to_h2`): both
//! read the rewritten parts, so the two paths cannot disagree. The h1 client path applies
//! the same `http::rewrite` rules while writing its head (`h1::write_request_head`).

use http::request::Parts;
use http::uri::{PathAndQuery, Uri};

use crate::http::rewrite::{RequestVars, Rewrite};

/// Applies `rewrite` to `parts`; returns how many fields were left out (a rendered value
/// that could not be a field value), for the caller to count. `normalized`: the path and
/// query the path rewrite starts from instead of the received ones (`http::normalize`).
pub(super) fn request(parts: &mut Parts, rewrite: &Rewrite, scheme: &str, normalized: Option<&[u8]>) -> u32 {
    // The variables read the request as the client sent it.
    let uri = parts.uri.clone();
    let host = parts.headers.get(http::header::HOST).cloned();
    let authority = uri
        .authority()
        .map(|a| a.as_str().as_bytes())
        .or(host.as_ref().map(|h| h.as_bytes()));
    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str()).as_bytes();
    let vars = RequestVars::of(scheme, path_and_query, authority);
    let mut skipped = rewrite.request_headers.apply_to_map(&mut parts.headers, &vars);
    if rewrite.changes_target() {
        let mut target = Vec::with_capacity(path_and_query.len() + 16);
        rewrite.write_target(normalized.unwrap_or(path_and_query), &mut target);
        let mut uri_parts = uri.into_parts();
        match PathAndQuery::try_from(target) {
            Ok(p) => uri_parts.path_and_query = Some(p),
            Err(_) => skipped += 1,
        }
        if let Some(host) = &rewrite.host {
            match http::uri::Authority::try_from(&host[..]) {
                Ok(a) if uri_parts.scheme.is_some() => uri_parts.authority = Some(a),
                Ok(_) => {}
                Err(_) => skipped += 1,
            }
            // Without `:authority` the writers take `host`: it says the same.
            if let Ok(v) = http::HeaderValue::from_bytes(host) {
                parts.headers.insert(http::header::HOST, v);
            }
        }
        if uri_parts.authority.is_none() {
            // A scheme needs an authority; the writers take the host from `host` then.
            uri_parts.scheme = None;
        }
        match Uri::from_parts(uri_parts) {
            Ok(u) => parts.uri = u,
            Err(_) => skipped += 1,
        }
    }
    skipped
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::http::rewrite::{HeaderRules, PathRewrite, Template};

    #[test]
    fn path_host_and_fields_change_together() {
        let rewrite = Rewrite {
            request_headers: HeaderRules::new(
                vec![(
                    "x-orig".into(),
                    Template::parse("{scheme}://{host}{path_and_query}").unwrap(),
                )],
                vec![],
                vec!["x-drop".into()],
            ),
            path: Some(PathRewrite::prefix("/api", "/").unwrap()),
            host: Some(b"internal.example".as_slice().into()),
            ..Rewrite::default()
        };
        let req = http::Request::builder()
            .uri("https://public.example/api/a%2Fb?x=%20&y")
            .header("x-drop", "1")
            .header("x-drop", "2")
            .body(())
            .unwrap();
        let (mut parts, ()) = req.into_parts();
        assert_eq!(request(&mut parts, &rewrite, "https", None), 0);
        assert_eq!(parts.uri.to_string(), "https://internal.example/a%2Fb?x=%20&y");
        assert!(parts.headers.get("x-drop").is_none());
        assert_eq!(
            parts.headers.get("x-orig").unwrap(),
            "https://public.example/api/a%2Fb?x=%20&y"
        );
        assert_eq!(parts.headers.get("host").unwrap(), "internal.example");
        // No `:authority` (the client sent `host`): the path still changes, `host` says where.
        let req = http::Request::builder()
            .uri("/api/x?y")
            .header("host", "public.example")
            .body(())
            .unwrap();
        let (mut parts, ()) = req.into_parts();
        assert_eq!(request(&mut parts, &rewrite, "http", None), 0);
        assert_eq!(parts.uri.to_string(), "/x?y");
        assert_eq!(parts.headers.get("host").unwrap(), "internal.example");
        assert_eq!(parts.headers.get("x-orig").unwrap(), "http://public.example/api/x?y");
    }
}
