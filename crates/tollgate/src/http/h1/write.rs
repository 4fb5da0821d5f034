//! Head rewriting for forwarding, and the proxy's own small error responses.
//!
//! Owns: [`HeadEdits`], [`ConnectionOut`], [`Proto`], [`write_request_head`],
//! [`write_response_head`], [`write_error_response`]. Writers append to a caller-owned `Vec<u8>`
//! and allocate nothing else (a route's regex path rewrite searches with its thread's slots,
//! `http::path_regex`).
//!
//! Invariants: hop-by-hop fields (`Connection` and every field it names, `Keep-Alive`, `TE`,
//! `Proxy-Connection`, `HTTP2-Settings`, and `Upgrade` unless the message is an upgrade
//! forwarded with [`ConnectionOut::Upgrade`], and then without an `h2c` offer) are never
//! forwarded; `Host`, `Content-Length` and
//! `Transfer-Encoding` are always forwarded as received (the body keeps the framing they
//! announce: a chunked body is only re-framed canonically, see [`super::body`]) — except that
//! a route's `set_host` replaces `Host`, and a response to an HTTP/1.0 client loses its
//! `Transfer-Encoding` ([`HeadEdits::no_transfer_encoding`]: its body goes de-chunked). A route's header rules (`HeadEdits::rewrite`) apply
//! to the received fields (config load refuses hop-by-hop and framing names in them); the
//! proxy's own fields (forwarding, sticky cookie, `Connection`) are written after them.
//! `Proxy-Authorization`/`Proxy-Authenticate` are kept: whether they are meant for us is the
//! proxy's policy, not the codec's. Lines always end in CRLF. Every head
//! is written as HTTP/1.1 (a 1.0 request goes upstream as 1.1; its `BodyFraming` and
//! `keep_alive` already say what 1.0 means, and the caller picks `Connection` accordingly).

use std::io::Write;
use std::net::IpAddr;

use super::headers::{HeaderEntry, HeaderKind};
use super::request::RequestHead;
use super::response::ResponseHead;
use crate::http::rewrite::{HeaderRules, RequestVars, Rewrite, split_target};

/// The `Connection` field to write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConnectionOut {
    /// Write none (HTTP/1.1 default: keep-alive).
    #[default]
    Omit,
    /// `Connection: keep-alive`.
    KeepAlive,
    /// `Connection: close`.
    Close,
    /// `Connection: upgrade`, and the `Upgrade` field of an upgrade message is kept.
    Upgrade,
}

/// Scheme the client used, for `X-Forwarded-Proto` and `Forwarded: proto=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Http,
    Https,
}

impl Proto {
    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Http => "http",
            Proto::Https => "https",
        }
    }
}

/// What to change while forwarding a head.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeadEdits<'a> {
    /// `Connection` field to write.
    pub connection: ConnectionOut,
    /// Append this address to `X-Forwarded-For` (merging existing fields into one, in order).
    pub x_forwarded_for: Option<IpAddr>,
    /// Replace `X-Forwarded-Proto` with this.
    pub x_forwarded_proto: Option<Proto>,
    /// Append a `for=<ip>[;proto=..]` element to `Forwarded` (merging existing fields).
    pub forwarded: Option<(IpAddr, Option<Proto>)>,
    /// Write the request line as HTTP/1.0 (for an HTTP/1.0 client, so the server answers in
    /// a framing that client understands: never chunked).
    pub http10: bool,
    /// A response for an HTTP/1.0 client: its `Transfer-Encoding` fields are not written
    /// (RFC 9112 §6.1; a chunked body then goes de-chunked and close-delimited, see
    /// `BodyTracker::decode`). Responses only.
    pub no_transfer_encoding: bool,
    /// A cookie the proxy owns (sticky sessions): removed from a request's `Cookie` fields
    /// (the others kept byte for byte; a field left empty is dropped), and a response's
    /// `Set-Cookie` fields that set it are dropped.
    pub cookie: Option<&'a [u8]>,
    /// Complete header lines (each ending in CRLF) written after the forwarded fields.
    pub append: &'a [u8],
    /// Received fields with these names (lowercase) are dropped: the proxy writes its own
    /// (a client certificate's identity, in `append`). Requests only.
    pub strip: &'a [Box<str>],
    /// A matched route's rewrites: requests get its request rules, path and host, responses
    /// its response rules.
    pub rewrite: Option<&'a Rewrite>,
    /// The client's scheme, for the route's templates (`{scheme}`); `None` reads as `http`.
    pub scheme: Option<Proto>,
    /// A request target written in place of the received one (its path normalised:
    /// `http::normalize::target`); the route's path rewrite reads it too, its templates
    /// the received one.
    pub target: Option<&'a [u8]>,
    /// The request's ID field (`[frontend] request_id`): name and value. Received fields of
    /// that name are dropped and this one written last. Requests and responses.
    pub id_field: Option<(&'a [u8], &'a [u8])>,
    /// A `traceparent` tollgate started (`[frontend] trace`): received `traceparent` and
    /// `tracestate` fields are dropped and this one written last. Requests only.
    pub traceparent: Option<&'a [u8]>,
    /// Fields a route's `auth` owns (lowercase): received ones dropped, `auth_lines`
    /// written instead. Requests only.
    pub auth_strip: &'a [Box<str>],
    /// Complete lines (CRLF-terminated) the route's `auth` adds (a forward auth server's
    /// copied fields).
    pub auth_lines: &'a [u8],
}

impl HeadEdits<'_> {
    #[inline]
    fn strips(&self, name: &[u8]) -> bool {
        self.strip.iter().any(|n| n.as_bytes().eq_ignore_ascii_case(name))
            || self.auth_strip.iter().any(|n| n.as_bytes().eq_ignore_ascii_case(name))
            || self.id_field.is_some_and(|(id, _)| id.eq_ignore_ascii_case(name))
            || (self.traceparent.is_some()
                && (name.eq_ignore_ascii_case(b"traceparent") || name.eq_ignore_ascii_case(b"tracestate")))
    }
}

/// Write the request line (as HTTP/1.1) and the forwarded header fields to `out`. Returns
/// how many of the route's fields were left out because their rendered value could not be
/// sent (the caller counts them).
pub fn write_request_head(head: &RequestHead, buf: &[u8], edits: &HeadEdits, out: &mut Vec<u8>) -> u32 {
    out.extend_from_slice(head.method_span.of(buf));
    out.push(b' ');
    let received = head.target.of(buf);
    let target = edits.target.unwrap_or(received);
    match edits.rewrite {
        Some(r) if r.changes_target() => {
            let (authority, path_and_query) = split_target(target);
            // An absolute-form target keeps its authority unless `set_host` names another:
            // then it goes as origin-form, so that only `Host` names the host.
            if r.host.is_none()
                && let Some(a) = authority
            {
                let scheme_end = target.windows(3).position(|w| w == b"://").map_or(0, |i| i + 3);
                out.extend_from_slice(target.get(..scheme_end).unwrap_or_default());
                out.extend_from_slice(a);
            }
            r.write_target(path_and_query, out);
        }
        _ => out.extend_from_slice(target),
    }
    out.extend_from_slice(if edits.http10 {
        b" HTTP/1.0\r\n"
    } else {
        b" HTTP/1.1\r\n"
    });
    let Some(rewrite) = edits.rewrite else {
        write_fields(&head.headers, buf, head.upgrade, edits, out);
        return 0;
    };
    let host = head.host.map(|h| h.of(buf));
    // Templates read the request as the client sent it.
    let vars = RequestVars::of(edits.scheme.unwrap_or(Proto::Http).as_str(), received, host);
    let mut skipped = 0;
    let route = Route {
        rules: Some(&rewrite.request_headers),
        set_host: rewrite.host.is_some(),
    };
    write_fields_with(&head.headers, buf, head.upgrade, edits, route, out, |out| {
        if let Some(host) = &rewrite.host {
            push_field(b"Host", host, out);
        }
        skipped = rewrite.request_headers.write_h1(&vars, out);
    });
    skipped
}

/// Write the status line (as HTTP/1.1) and the forwarded header fields to `out`. Only
/// `connection`, `no_transfer_encoding`, `cookie`, `append`, `id_field` and the route's
/// response rules apply to responses; the forwarding fields are ignored.
pub fn write_response_head(head: &ResponseHead, buf: &[u8], edits: &HeadEdits, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_status(head.status, out);
    out.push(b' ');
    out.extend_from_slice(head.reason.of(buf));
    out.extend_from_slice(b"\r\n");
    let edits = HeadEdits {
        connection: edits.connection,
        no_transfer_encoding: edits.no_transfer_encoding,
        cookie: edits.cookie,
        append: edits.append,
        rewrite: edits.rewrite,
        id_field: edits.id_field,
        ..HeadEdits::default()
    };
    match edits.rewrite {
        // Response rules hold no variables (config load refuses them): nothing to render.
        Some(r) => {
            let route = Route {
                rules: Some(&r.response_headers),
                set_host: false,
            };
            write_fields_with(
                &head.headers,
                buf,
                head.switching_protocols,
                &edits,
                route,
                out,
                |out| {
                    r.response_headers.write_h1(&RequestVars::default(), out);
                },
            );
        }
        None => write_fields(&head.headers, buf, head.switching_protocols, &edits, out),
    }
}

fn push_status(status: u16, out: &mut Vec<u8>) {
    let s = status.min(999);
    out.extend_from_slice(&[
        b'0' + (s / 100) as u8,
        b'0' + (s / 10 % 10) as u8,
        b'0' + (s % 10) as u8,
    ]);
}

fn write_fields(entries: &[HeaderEntry], buf: &[u8], is_upgrade: bool, edits: &HeadEdits, out: &mut Vec<u8>) {
    write_fields_with(entries, buf, is_upgrade, edits, Route::NONE, out, |_| {});
}

/// A route's part in writing the fields: which received ones it drops, whether it replaces
/// `Host`.
#[derive(Clone, Copy)]
struct Route<'a> {
    rules: Option<&'a HeaderRules>,
    set_host: bool,
}

impl Route<'_> {
    const NONE: Route<'static> = Route {
        rules: None,
        set_host: false,
    };

    #[inline]
    fn drops(&self, name: &[u8]) -> bool {
        self.rules.is_some_and(|r| r.drops(name))
    }
}

/// The fields; `own` writes the route's fields after the received ones that are kept,
/// before the proxy's.
fn write_fields_with(
    entries: &[HeaderEntry],
    buf: &[u8],
    is_upgrade: bool,
    edits: &HeadEdits,
    route: Route<'_>,
    out: &mut Vec<u8>,
    own: impl FnOnce(&mut Vec<u8>),
) {
    let keep_upgrade = is_upgrade && edits.connection == ConnectionOut::Upgrade;
    // Most heads strip nothing: one test per head, not a call per field.
    let strips = !edits.strip.is_empty()
        || !edits.auth_strip.is_empty()
        || edits.id_field.is_some()
        || edits.traceparent.is_some();
    for e in entries {
        if keep_upgrade && e.kind == HeaderKind::Upgrade {
            push_upgrade_without_h2c(e.name.of(buf), e.value.of(buf), out);
            continue;
        }
        let skip = match e.kind {
            HeaderKind::Upgrade => !keep_upgrade,
            HeaderKind::XForwardedFor => edits.x_forwarded_for.is_some(),
            HeaderKind::XForwardedProto => edits.x_forwarded_proto.is_some(),
            HeaderKind::Forwarded => edits.forwarded.is_some(),
            HeaderKind::Host => route.set_host,
            HeaderKind::TransferEncoding => edits.no_transfer_encoding,
            _ => e.is_hop_by_hop(),
        };
        if skip || route.drops(e.name.of(buf)) || (strips && edits.strips(e.name.of(buf))) {
            continue;
        }
        match edits.cookie {
            Some(cookie) => push_field_without_cookie(e.name.of(buf), e.value.of(buf), cookie, out),
            None => push_field(e.name.of(buf), e.value.of(buf), out),
        }
    }
    own(out);
    if let Some(ip) = edits.x_forwarded_for {
        out.extend_from_slice(b"X-Forwarded-For: ");
        if !route.drops(b"x-forwarded-for") {
            push_existing(entries, buf, HeaderKind::XForwardedFor, out);
        }
        push_ip(ip, out);
        out.extend_from_slice(b"\r\n");
    }
    if let Some(proto) = edits.x_forwarded_proto {
        push_field(b"X-Forwarded-Proto", proto.as_str().as_bytes(), out);
    }
    if let Some((ip, proto)) = edits.forwarded {
        out.extend_from_slice(b"Forwarded: ");
        if !route.drops(b"forwarded") {
            push_existing(entries, buf, HeaderKind::Forwarded, out);
        }
        out.extend_from_slice(b"for=");
        match ip {
            IpAddr::V4(_) => push_ip(ip, out),
            IpAddr::V6(_) => {
                out.extend_from_slice(b"\"[");
                push_ip(ip, out);
                out.extend_from_slice(b"]\"");
            }
        }
        if let Some(p) = proto {
            out.extend_from_slice(b";proto=");
            out.extend_from_slice(p.as_str().as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(edits.append);
    out.extend_from_slice(edits.auth_lines);
    if let Some((name, value)) = edits.id_field {
        push_field(name, value, out);
    }
    if let Some(value) = edits.traceparent {
        push_field(b"traceparent", value, out);
    }
    match edits.connection {
        ConnectionOut::Omit => {}
        ConnectionOut::KeepAlive => push_field(b"Connection", b"keep-alive", out),
        ConnectionOut::Close => push_field(b"Connection", b"close", out),
        ConnectionOut::Upgrade => push_field(b"Connection", b"upgrade", out),
    }
    out.extend_from_slice(b"\r\n");
}

/// An address in its canonical text form (IPv4 by hand: it is the hot case).
fn push_ip(ip: IpAddr, out: &mut Vec<u8>) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                if o >= 100 {
                    out.push(b'0' + o / 100);
                }
                if o >= 10 {
                    out.push(b'0' + o / 10 % 10);
                }
                out.push(b'0' + o % 10);
            }
        }
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// Existing non-empty values of `kind`, each followed by `, `.
fn push_existing(entries: &[HeaderEntry], buf: &[u8], kind: HeaderKind, out: &mut Vec<u8>) {
    for e in entries.iter().filter(|e| e.kind == kind) {
        let v = e.value.of(buf);
        if !v.is_empty() {
            out.extend_from_slice(v);
            out.extend_from_slice(b", ");
        }
    }
}

/// A field as `push_field`, except that a `Cookie` field loses the cookie `cookie` (and is
/// dropped if nothing else is left) and a `Set-Cookie` field setting it is dropped.
fn push_field_without_cookie(name: &[u8], value: &[u8], cookie: &[u8], out: &mut Vec<u8>) {
    use crate::http::cookie;
    if name.eq_ignore_ascii_case(b"cookie") && cookie::contains(value, cookie) {
        let mark = out.len();
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        if cookie::push_without(value, cookie, out) {
            out.extend_from_slice(b"\r\n");
        } else {
            out.truncate(mark);
        }
    } else if !(name.eq_ignore_ascii_case(b"set-cookie") && cookie::sets(value, cookie)) {
        push_field(name, value, out);
    }
}

/// An upgrade's `Upgrade` field without its `h2c` offer (see `Analysis::has_upgrade`): as
/// received when it names no `h2c`, else the other protocols, or nothing if none is left.
fn push_upgrade_without_h2c(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    use super::headers::{is_h2c, list_elements};
    if !list_elements(value).any(is_h2c) {
        push_field(name, value, out);
        return;
    }
    let mark = out.len();
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    let mut first = true;
    for p in list_elements(value).filter(|p| !p.is_empty() && !is_h2c(p)) {
        if !first {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(p);
        first = false;
    }
    if first {
        out.truncate(mark);
    } else {
        out.extend_from_slice(b"\r\n");
    }
}

fn push_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// A whole response the proxy makes, into `out` (cleared first): the status line, the
/// `Content-Type` when given, `Content-Length`, `fields`, `Connection: close` unless
/// `keep`, and `body` unless `head_only` (the answer to a HEAD).
pub fn write_made_response<'f>(
    status: u16,
    content_type: Option<&[u8]>,
    fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
    body: &[u8],
    (keep, head_only): (bool, bool),
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    push_status(status, out);
    out.push(b' ');
    out.extend_from_slice(crate::http::status::reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
    // A 204 or 304 carries no content and no Content-Length (RFC 9110 §8.6, §15.3.5).
    let bodiless = status == 204 || status == 304;
    if let Some(t) = content_type.filter(|t| !t.is_empty()) {
        push_field(b"Content-Type", t, out);
    }
    if !bodiless {
        let mut n = itoa::Buffer::new();
        push_field(b"Content-Length", n.format(body.len()).as_bytes(), out);
    }
    for (name, value) in fields {
        push_field(name, value, out);
    }
    if !keep {
        push_field(b"Connection", b"close", out);
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
}

/// `data` as one chunk of a chunked body (`{hex}\r\n{data}\r\n`); nothing for no data
/// (an empty chunk would end the body).
pub fn push_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let mut hex = [0u8; 16];
    let mut n = data.len();
    let mut at = hex.len();
    while n > 0 && at > 0 {
        at -= 1;
        if let Some(d) = hex.get_mut(at) {
            *d = b"0123456789abcdef".get(n & 15).copied().unwrap_or(b'0');
        }
        n >>= 4;
    }
    out.extend_from_slice(hex.get(at..).unwrap_or_default());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Adds `name: value` as the last field of `head`, a response head alone, just written
/// (it ends with its blank line: no search for it, as a forwarded response's head is edited
/// per response); nothing if `head` does not end a head.
pub fn add_head_field(head: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    if !head.ends_with(b"\r\n\r\n") {
        return;
    }
    let at = head.len() - 2;
    let field = name.iter().chain(b": ").chain(value).chain(b"\r\n").copied();
    head.splice(at..at, field);
}

/// Adds `name: value` as the last field of the head at the start of `out` (a response the
/// proxy made itself, in full); nothing if `out` holds no complete head.
pub fn add_response_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    let Some(end) = out.windows(4).position(|w| w == b"\r\n\r\n") else {
        return;
    };
    let at = end + 2;
    let field = name.iter().chain(b": ").chain(value).chain(b"\r\n").copied();
    out.splice(at..at, field);
}

/// Append a small complete response for `status` (400, 408, 413, 414, 431, 500, 501, 502, 503,
/// 504, 505; anything else writes the 500 one) with `Content-Length`, `Content-Type: text/plain`,
/// `Connection: close` and `Cache-Control: no-cache`.
pub fn write_error_response(status: u16, out: &mut Vec<u8>) {
    let (status, reason) = match status {
        400 => (400, "Bad Request"),
        408 => (408, "Request Timeout"),
        413 => (413, "Content Too Large"),
        414 => (414, "URI Too Long"),
        431 => (431, "Request Header Fields Too Large"),
        501 => (501, "Not Implemented"),
        502 => (502, "Bad Gateway"),
        503 => (503, "Service Unavailable"),
        504 => (504, "Gateway Timeout"),
        505 => (505, "HTTP Version Not Supported"),
        _ => (500, "Internal Server Error"),
    };
    // Body: "<reason>\n".
    let _ = write!(
        out,
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\
         Connection: close\r\nCache-Control: no-cache\r\n\r\n{reason}\n",
        reason.len() + 1
    );
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::http::h1::{HeadScratch, Limits, parse_request_head, parse_response_head};
    use crate::http::rewrite::{HeaderRules, PathRewrite, Template};

    fn rewrite() -> Rewrite {
        let t = |s: &str| Template::parse(s).unwrap();
        Rewrite {
            request_headers: HeaderRules::new(
                vec![("X-Set".into(), t("{scheme}|{host}|{path}|{query}"))],
                vec![("X-Add".into(), t("added"))],
                vec!["x-dup".into(), "x-forwarded-for".into()],
            ),
            response_headers: HeaderRules::new(vec![], vec![("X-Resp".into(), t("c"))], vec!["server".into()]),
            path: Some(PathRewrite::prefix("/api", "/").unwrap()),
            host: Some(b"internal".as_slice().into()),
        }
    }

    fn request(buf: &[u8], edits: &HeadEdits) -> String {
        let head = parse_request_head(buf, &Limits::default(), &mut HeadScratch::new())
            .unwrap()
            .unwrap();
        let mut out = Vec::new();
        assert_eq!(write_request_head(&head, buf, edits, &mut out), 0);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_request_id_field_replaces_every_received_one_and_goes_last() {
        let edits = HeadEdits {
            id_field: Some((&b"x-request-id"[..], &b"0190-id"[..])),
            connection: ConnectionOut::Close,
            ..HeadEdits::default()
        };
        let buf = b"GET / HTTP/1.1\r\nHost: h\r\nX-Request-ID: a\r\nX-Other: 1\r\nx-request-id: b\r\n\r\n";
        assert_eq!(
            request(buf, &edits),
            "GET / HTTP/1.1\r\nHost: h\r\nX-Other: 1\r\nx-request-id: 0190-id\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn a_field_is_added_last_to_a_response_the_proxy_made() {
        let mut out = Vec::new();
        write_error_response(503, &mut out);
        add_response_field(&mut out, b"x-request-id", b"abc");
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.ends_with("Cache-Control: no-cache\r\nx-request-id: abc\r\n\r\nService Unavailable\n"),
            "{text}"
        );
        let mut partial = b"HTTP/1.1 200 OK\r\n".to_vec();
        add_response_field(&mut partial, b"x", b"y");
        assert_eq!(partial, b"HTTP/1.1 200 OK\r\n", "no complete head: nothing added");
        let mut head = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec();
        add_head_field(&mut head, b"alt-svc", b"h3=\":443\"");
        assert_eq!(
            head,
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nalt-svc: h3=\":443\"\r\n\r\n"
        );
        add_head_field(&mut partial, b"x", b"y");
        assert_eq!(partial, b"HTTP/1.1 200 OK\r\n", "not a head: nothing added");
    }

    #[test]
    fn a_route_rewrites_target_host_and_fields_before_the_proxys_own() {
        let r = rewrite();
        let edits = HeadEdits {
            rewrite: Some(&r),
            scheme: Some(Proto::Https),
            x_forwarded_for: Some([10, 0, 0, 1].into()),
            ..HeadEdits::default()
        };
        let buf = b"GET /api/a%2Fb?x=%20&y HTTP/1.1\r\nHost: public\r\nX-Dup: 1\r\nX-Set: old\r\n\
X-Forwarded-For: 6.6.6.6\r\nX-Dup: 2\r\nX-Keep: k\r\n\r\n";
        assert_eq!(
            request(buf, &edits),
            "GET /a%2Fb?x=%20&y HTTP/1.1\r\nX-Keep: k\r\nHost: internal\r\nX-Set: https|public|/api/a%2Fb|x=%20&y\r\n\
X-Add: added\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n"
        );
        // Absolute form: with `set_host` it goes as origin-form (only Host names the host).
        let buf = b"GET http://public:81/api?q HTTP/1.1\r\nHost: public:81\r\n\r\n";
        let out = request(buf, &edits);
        assert!(
            out.starts_with("GET /?q HTTP/1.1\r\nHost: internal\r\nX-Set: https|public|/api|q\r\n"),
            "{out}"
        );
        let path_only = Rewrite {
            host: None,
            ..rewrite()
        };
        let edits = HeadEdits {
            rewrite: Some(&path_only),
            ..HeadEdits::default()
        };
        let out = request(buf, &edits);
        assert!(
            out.starts_with("GET http://public:81/?q HTTP/1.1\r\nHost: public:81\r\n"),
            "{out}"
        );
    }

    #[test]
    fn a_route_edits_the_response_fields() {
        let r = rewrite();
        let buf = b"HTTP/1.1 200 OK\r\nServer: x\r\nX-Resp: a\r\nContent-Length: 0\r\nServer: y\r\n\r\n";
        let head = parse_response_head(
            buf,
            &Limits::default(),
            crate::http::h1::Method::Get,
            &mut HeadScratch::new(),
        )
        .unwrap()
        .unwrap();
        let mut out = Vec::new();
        let edits = HeadEdits {
            rewrite: Some(&r),
            ..HeadEdits::default()
        };
        write_response_head(&head, buf, &edits, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\nX-Resp: a\r\nContent-Length: 0\r\nX-Resp: c\r\n\r\n"
        );
    }
}
