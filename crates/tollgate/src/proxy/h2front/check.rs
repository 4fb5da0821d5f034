//! The HTTP/2 request rules a proxy to HTTP/1 adds to the codec's (issue 13, item 4), sans-io,
//! on the head the codec decoded and checked. The codec (`http::h2::head`) already refuses,
//! as a malformed stream, every byte an HTTP/1 line or field could be ended or split by, names
//! that are not lowercase tokens, connection-specific fields, a `te` other than `trailers`,
//! bad or disagreeing `content-length`s, a `:path` not in origin form, userinfo in
//! `:authority` and a `host` that disagrees with it; what is left is judged here, once,
//! before the head becomes `http` types.
//!
//! Owns: [`request`] → [`Checked`] or a [`Refusal`]. Invariant: a request that passes can be
//! written as an unambiguous HTTP/1.1 request: origin-form target (or `*` for OPTIONS), one
//! authority, no byte that could end a line or a field (CR, LF, NUL) anywhere, no field that
//! would change HTTP/1 framing or connection handling.

use crate::http::h2::RequestHead;

/// Why a request was refused (answered with 400, never forwarded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal(pub &'static str);

/// What the checks learned that forwarding needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Checked {
    /// From `content-length`, when the request has one.
    pub content_length: Option<u64>,
}

/// Judges a head the codec let through; `end_stream`: the HEADERS frame ended the stream (no
/// body).
pub(crate) fn request(head: &RequestHead, end_stream: bool) -> Result<Checked, Refusal> {
    if head.is_connect() {
        return Err(Refusal("CONNECT is not proxied"));
    }
    if !matches!(head.scheme(), Some(b"http" | b"https")) {
        return Err(Refusal(":scheme missing or not http/https"));
    }
    authority(head)?;
    let content_length = head.content_length();
    if end_stream && content_length.is_some_and(|n| n > 0) {
        return Err(Refusal("content-length without DATA"));
    }
    Ok(Checked { content_length })
}

/// One authority: `:authority` (the codec checked that a `host` beside it is equal), or else
/// one `host`, either a valid `uri-host [":" port]` as an HTTP/1 Host must be.
fn authority(head: &RequestHead) -> Result<(), Refusal> {
    let mut hosts = head.fields().get_all(b"host");
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(Refusal("several host fields"));
    }
    let chosen = match (head.authority(), host) {
        (Some(a), _) => a,
        (None, Some(h)) => h,
        (None, None) => return Err(Refusal("no :authority and no host")),
    };
    // The grammar HTTP/1 Host is held to (`http::host`): no userinfo, path, space or bad port.
    if chosen.is_empty() || !crate::http::host::is_valid(chosen) {
        return Err(Refusal("bad authority"));
    }
    Ok(())
}

/// No byte that ends a line or a field in HTTP/1: CR, LF, NUL. (Every byte folded, which
/// the compiler vectorises, rather than searched one at a time: these bytes are rare.)
pub(crate) fn bytes_ok(b: &[u8]) -> bool {
    let bad = b
        .iter()
        .fold(0u8, |acc, &c| acc | u8::from(c == b'\r' || c == b'\n' || c == 0));
    bad == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::http::h2::head::HeadFault;

    type Fields<'a> = &'a [(&'a str, &'a str)];

    /// What becomes of a request: the codec's verdict, then this module's.
    fn verdict(
        method: &str,
        scheme: &str,
        authority: &str,
        fields: Fields,
        end_stream: bool,
    ) -> Result<Checked, String> {
        let mut all = vec![(":method", method), (":path", "/")];
        if !scheme.is_empty() {
            all.push((":scheme", scheme));
        }
        if !authority.is_empty() {
            all.push((":authority", authority));
        }
        all.extend_from_slice(fields);
        let (head, verdict) = RequestHead::decoded(&all, usize::MAX);
        verdict.map_err(|f| match f {
            HeadFault::Malformed(why) => format!("codec: {why}"),
            HeadFault::TooLarge => "codec: too large".to_owned(),
        })?;
        request(&head, end_stream).map_err(|r| r.0.to_owned())
    }

    #[test]
    fn a_plain_request_passes() {
        let plain = verdict("GET", "https", "example.com", &[("accept", "*/*")], true);
        assert_eq!(plain, Ok(Checked { content_length: None }));
        let with_body = verdict("POST", "http", "", &[("content-length", "5"), ("host", "h")], false);
        assert_eq!(
            with_body,
            Ok(Checked {
                content_length: Some(5)
            })
        );
        assert!(verdict("OPTIONS", "http", "h", &[], true).is_ok());
    }

    #[test]
    fn each_refusal_comes_from_here_or_from_the_codec() {
        type Case<'a> = (&'a str, &'a str, &'a str, Fields<'a>, bool, &'a str);
        let cases: &[Case] = &[
            // This module's rules.
            ("GET", "ftp", "h", &[], true, ":scheme missing or not http/https"),
            (
                "GET",
                "http",
                "",
                &[("host", "a"), ("host", "a")],
                true,
                "several host fields",
            ),
            ("GET", "http", "", &[("host", "u@h")], true, "bad authority"),
            ("GET", "http", "", &[("host", "a b")], true, "bad authority"),
            ("GET", "http", "", &[("host", "h#")], true, "bad authority"),
            ("GET", "http", "", &[("host", "x:notaport")], true, "bad authority"),
            ("GET", "http", "", &[("host", "h/x?")], true, "bad authority"),
            ("GET", "http", "x:notaport", &[], true, "bad authority"),
            ("GET", "http", "h:65536", &[], true, "bad authority"),
            (
                "POST",
                "http",
                "h",
                &[("content-length", "3")],
                true,
                "content-length without DATA",
            ),
            // The codec's, which this module counts on.
            ("GET", "", "h", &[], true, "codec: missing :scheme or :path"),
            ("GET", "http", "", &[], true, "codec: no :authority nor host"),
            (
                "GET",
                "http",
                "h",
                &[("host", "other")],
                true,
                "codec: host disagrees with :authority",
            ),
            (
                "GET",
                "http",
                "h",
                &[("connection", "close")],
                true,
                "codec: connection-specific field",
            ),
            (
                "GET",
                "http",
                "h",
                &[("te", "gzip")],
                true,
                "codec: te other than trailers",
            ),
            (
                "GET",
                "http",
                "h",
                &[("transfer-encoding", "chunked")],
                true,
                "codec: connection-specific field",
            ),
            (
                "GET",
                "http",
                "h",
                &[("content-length", "x")],
                true,
                "codec: content-length not a number",
            ),
            (
                "POST",
                "http",
                "h",
                &[("content-length", "1"), ("content-length", "2")],
                false,
                "codec: content-length values disagree",
            ),
            ("GET", "http", "u@h", &[], true, "codec: :authority with userinfo"),
            (
                "GET",
                "http",
                "h",
                &[("x", " padded")],
                true,
                "codec: whitespace around a field value",
            ),
            (
                "GET",
                "http",
                "h",
                &[("x", "a\rb")],
                true,
                "codec: control character in a field value",
            ),
        ];
        for (m, scheme, authority, fields, end, why) in cases {
            let got = verdict(m, scheme, authority, fields, *end);
            assert_eq!(got, Err((*why).to_owned()), "{m} {scheme} {authority} {fields:?}");
        }
    }

    #[test]
    fn connect_is_refused_here_after_the_codec_lets_it_through() {
        let (head, verdict) = RequestHead::decoded(&[(":method", "CONNECT"), (":authority", "h:443")], usize::MAX);
        assert_eq!(verdict, Ok(()));
        assert_eq!(request(&head, false), Err(Refusal("CONNECT is not proxied")));
    }
}
