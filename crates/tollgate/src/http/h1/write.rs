//! Head rewriting for forwarding, and the proxy's own small error responses.
//!
//! Owns: [`HeadEdits`], [`ConnectionOut`], [`Proto`], [`write_request_head`],
//! [`write_response_head`], [`write_error_response`]. Writers append to a caller-owned `Vec<u8>`
//! and allocate nothing else.
//!
//! Invariants: hop-by-hop fields (`Connection` and every field it names, `Keep-Alive`, `TE`,
//! `Proxy-Connection`, and `Upgrade` unless the message is an upgrade forwarded with
//! [`ConnectionOut::Upgrade`]) are never forwarded; `Host`, `Content-Length` and
//! `Transfer-Encoding` are always forwarded as received (the body keeps the framing they
//! announce: a chunked body is only re-framed canonically, see [`super::body`]).
//! `Proxy-Authorization`/`Proxy-Authenticate` are kept: whether they are meant for us is the
//! proxy's policy, not the codec's. Lines always end in CRLF. Every head
//! is written as HTTP/1.1 (a 1.0 request goes upstream as 1.1; its `BodyFraming` and
//! `keep_alive` already say what 1.0 means, and the caller picks `Connection` accordingly).

use std::io::Write;
use std::net::IpAddr;

use super::headers::{HeaderEntry, HeaderKind};
use super::request::RequestHead;
use super::response::ResponseHead;

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
    /// A cookie the proxy owns (sticky sessions): removed from a request's `Cookie` fields
    /// (the others kept byte for byte; a field left empty is dropped), and a response's
    /// `Set-Cookie` fields that set it are dropped.
    pub cookie: Option<&'a [u8]>,
    /// Complete header lines (each ending in CRLF) written after the forwarded fields.
    pub append: &'a [u8],
}

/// Write the request line (as HTTP/1.1) and the forwarded header fields to `out`.
pub fn write_request_head(head: &RequestHead, buf: &[u8], edits: &HeadEdits, out: &mut Vec<u8>) {
    out.extend_from_slice(head.method_span.of(buf));
    out.push(b' ');
    out.extend_from_slice(head.target.of(buf));
    out.extend_from_slice(if edits.http10 {
        b" HTTP/1.0\r\n"
    } else {
        b" HTTP/1.1\r\n"
    });
    write_fields(&head.headers, buf, head.upgrade, edits, out);
}

/// Write the status line (as HTTP/1.1) and the forwarded header fields to `out`. Only
/// `connection`, `cookie` and `append` apply to responses; the forwarding fields are ignored.
pub fn write_response_head(head: &ResponseHead, buf: &[u8], edits: &HeadEdits, out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_status(head.status, out);
    out.push(b' ');
    out.extend_from_slice(head.reason.of(buf));
    out.extend_from_slice(b"\r\n");
    let edits = HeadEdits {
        connection: edits.connection,
        cookie: edits.cookie,
        append: edits.append,
        ..HeadEdits::default()
    };
    write_fields(&head.headers, buf, head.switching_protocols, &edits, out);
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
    let keep_upgrade = is_upgrade && edits.connection == ConnectionOut::Upgrade;
    for e in entries {
        let skip = match e.kind {
            HeaderKind::Upgrade => !keep_upgrade,
            HeaderKind::XForwardedFor => edits.x_forwarded_for.is_some(),
            HeaderKind::XForwardedProto => edits.x_forwarded_proto.is_some(),
            HeaderKind::Forwarded => edits.forwarded.is_some(),
            _ => e.is_hop_by_hop(),
        };
        if skip {
            continue;
        }
        match edits.cookie {
            Some(cookie) => push_field_without_cookie(e.name.of(buf), e.value.of(buf), cookie, out),
            None => push_field(e.name.of(buf), e.value.of(buf), out),
        }
    }
    if let Some(ip) = edits.x_forwarded_for {
        out.extend_from_slice(b"X-Forwarded-For: ");
        push_existing(entries, buf, HeaderKind::XForwardedFor, out);
        push_ip(ip, out);
        out.extend_from_slice(b"\r\n");
    }
    if let Some(proto) = edits.x_forwarded_proto {
        push_field(b"X-Forwarded-Proto", proto.as_str().as_bytes(), out);
    }
    if let Some((ip, proto)) = edits.forwarded {
        out.extend_from_slice(b"Forwarded: ");
        push_existing(entries, buf, HeaderKind::Forwarded, out);
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

fn push_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
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
