//! gRPC-aware failures: a gRPC client reads the outcome of a call from `grpc-status`, not
//! from the HTTP status, so a failure on the proxy's side is answered as gRPC does — HTTP
//! 200, a "trailers-only" response whose head carries `grpc-status: 14` (UNAVAILABLE) and
//! a `grpc-message` — instead of a bare 502 the client would report as a protocol error.

use http::{HeaderValue, StatusCode};

/// `grpc-status` UNAVAILABLE: the call may be retried (the proxy's failures are).
pub(crate) const UNAVAILABLE: u32 = 14;

/// Whether a request is a gRPC call (`content-type: application/grpc` or `application/grpc+…`).
pub(crate) fn is_grpc(content_type: &[u8]) -> bool {
    let Some(rest) = content_type.strip_prefix(b"application/grpc") else {
        return false;
    };
    matches!(rest.first(), None | Some(b'+' | b';'))
}

/// The trailers-only response a gRPC client gets when the proxy fails its call: HTTP 200,
/// `content-type: application/grpc`, `grpc-status: 14`, `grpc-message` (percent-encoded
/// as gRPC requires, so any text is a valid header value).
pub(crate) fn unavailable(message: &str) -> http::response::Parts {
    let (mut parts, ()) = http::Response::new(()).into_parts();
    parts.status = StatusCode::OK;
    let headers = &mut parts.headers;
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from(UNAVAILABLE));
    if let Ok(value) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert("grpc-message", value);
    }
    parts
}

/// gRPC's `grpc-message` encoding: printable ASCII except `%` as is, the rest `%XX`.
fn percent_encode(text: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types_are_recognised() {
        assert!(is_grpc(b"application/grpc"));
        assert!(is_grpc(b"application/grpc+proto"));
        assert!(is_grpc(b"application/grpc;charset=utf-8"));
        assert!(!is_grpc(b"application/grpcx"));
        assert!(!is_grpc(b"application/json"));
    }

    #[test]
    fn a_proxy_failure_is_grpc_unavailable_with_http_200() {
        let parts = unavailable("no server: 50% down\n");
        assert_eq!(parts.status, StatusCode::OK);
        let header = |n: &str| parts.headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
        assert_eq!(header("grpc-status").as_deref(), Some("14"));
        assert_eq!(header("content-type").as_deref(), Some("application/grpc"));
        assert_eq!(header("grpc-message").as_deref(), Some("no server: 50%25 down%0A"));
    }
}
