//! The client-certificate identity an HTTP session passes to servers
//! (`[frontend.tls.client_auth] headers`), rendered once per connection: as HTTP/1 lines the
//! h1 head writer appends (`HeadEdits::append`), or as fields an h2 stream appends to its
//! head. Either way the configured names are first dropped from what the client sent
//! (`ClientCertHeaders::names`), certificate or not, so a server only ever sees the proxy's.

use crate::config::model::ClientCertHeaders;
use crate::tls::client_cert::{fingerprint, subject};

/// `verified` when a certificate verified, and when none was presented (`optional`).
const VERIFIED: &str = "SUCCESS";
const ABSENT: &str = "NONE";

/// The configured fields and their values for a client whose leaf certificate is `leaf`.
fn fields<'h>(h: &'h ClientCertHeaders, leaf: Option<&[u8]>) -> Vec<(&'h str, String)> {
    let mut out = Vec::with_capacity(3);
    if let (Some(name), Some(der)) = (&h.subject, leaf) {
        out.push((&**name, subject(der)));
    }
    if let (Some(name), Some(der)) = (&h.fingerprint, leaf) {
        out.push((&**name, fingerprint(der)));
    }
    if let Some(name) = &h.verified {
        out.push((&**name, if leaf.is_some() { VERIFIED } else { ABSENT }.to_string()));
    }
    out
}

/// `Name: value\r\n` per field (values are printable ASCII: `tls::client_cert`).
pub(crate) fn h1_lines(h: &ClientCertHeaders, leaf: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields(h, leaf) {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The same fields for HTTP/2 (a subject empty of anything printable is left out).
pub(crate) fn h2_fields(h: &ClientCertHeaders, leaf: Option<&[u8]>) -> Vec<(http::HeaderName, http::HeaderValue)> {
    fields(h, leaf)
        .into_iter()
        .filter_map(|(name, value)| {
            let name = http::HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()).ok()?;
            Some((name, http::HeaderValue::try_from(value).ok()?))
        })
        .collect()
}
