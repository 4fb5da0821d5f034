//! Forward authentication (Traefik's `ForwardAuth`, nginx's `auth_request`), sans-io: where
//! the auth server is ([`Target`]), the request it gets ([`write_request`]) and what its
//! answer decides ([`Answer`]). `proxy::auth` does the I/O.
//!
//! The auth server gets the client's method, the auth URL's path, the client's headers (all
//! end-to-end ones, or `request_headers`) and what it needs to know of the original request:
//! `X-Forwarded-Method`, `X-Forwarded-Proto`, `X-Forwarded-Host`, `X-Forwarded-Uri` (also as
//! nginx's `X-Original-URI`) and `X-Forwarded-For`; never a body. A 2xx lets the request
//! through with `copy_headers` taken from the answer; any other final status is the client's
//! answer, as the auth server made it (its body bounded by [`MAX_ANSWER_BODY`]).
//!
//! The auth request asks for a kept-alive connection: a worker reuses it for its next check
//! (`proxy::auth` keeps a few idle ones per worker thread).
//!
//! Invariants: every value written into the auth request comes from a parsed request head
//! (no CR or LF can be in it); the answer's head and body are bounded; hop-by-hop and
//! framing fields of the answer are never passed to the client (the proxy frames it).

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use serde::Deserialize;

use crate::http::h1::headers::is_hop_or_framing;

/// Largest body of an auth server's refusal passed on to the client.
pub const MAX_ANSWER_BODY: usize = 64 * 1024;

/// `fail`: what a check that could not be made does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailMode {
    /// 502 (no answer) or 504 (no answer in time).
    Closed,
    /// The request goes through unauthenticated.
    Open,
}

/// `auth.forward`, validated.
#[derive(Debug, Clone)]
pub struct Forward {
    pub target: Target,
    /// Lowercase names of the answer's fields copied into the request to the server.
    pub copy_headers: Vec<Box<str>>,
    /// Lowercase names of the client's fields the auth server gets; `None`: all end-to-end.
    pub request_headers: Option<Vec<Box<str>>>,
    pub timeout: Duration,
    pub fail: FailMode,
}

/// Where the auth server is: resolved at load (a reload resolves it again).
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// `Host` for the auth request (as written in the URL).
    pub authority: Box<str>,
    /// Path and query of the URL (`/` when it has none).
    pub path: Box<str>,
}

impl Target {
    /// `http://host[:port][/path]`.
    pub fn parse(url: &str) -> Result<Target, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or("must be an `http://` URL (the auth server is on a trusted network)")?;
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, "/"),
        };
        if authority.is_empty()
            || authority.contains('@')
            || !path.bytes().all(|b| b.is_ascii_graphic())
            || !authority.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err("must be `http://host[:port]/path` (no user info, no spaces)".into());
        }
        let has_port = match authority.strip_prefix('[') {
            Some(v6) => v6.split_once(']').is_some_and(|(_, tail)| tail.starts_with(':')),
            None => authority.contains(':'),
        };
        let with_port = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve `{authority}`: {e}"))?
            .next()
            .ok_or_else(|| format!("`{authority}` has no address"))?;
        Ok(Target {
            addr,
            authority: authority.into(),
            path: path.into(),
        })
    }
}

/// What the original request says, for the auth request.
pub struct Original<'a, I> {
    pub method: &'a [u8],
    pub target: &'a [u8],
    pub host: &'a [u8],
    pub proto: &'a str,
    pub client: std::net::IpAddr,
    /// The client's fields (name, value).
    pub fields: I,
}

/// Fields never sent to the auth server: hop-by-hop and framing (no body goes), `Host`
/// and `Expect`, and the forwarding fields tollgate writes itself.
fn never_sent(name: &[u8]) -> bool {
    const NAMES: &[&[u8]] = &[
        b"host",
        b"expect",
        b"x-forwarded-method",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"x-forwarded-uri",
        b"x-original-uri",
        b"x-forwarded-for",
    ];
    is_hop_or_framing(name) || NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// The auth request's head, into `out`.
pub fn write_request<'a, I: Iterator<Item = (&'a [u8], &'a [u8])>>(f: &Forward, o: Original<'a, I>, out: &mut Vec<u8>) {
    // CONNECT's target is an authority, not a path: the auth server is asked with GET.
    let method = if o.method.eq_ignore_ascii_case(b"CONNECT") {
        &b"GET"[..]
    } else {
        o.method
    };
    out.extend_from_slice(method);
    out.push(b' ');
    out.extend_from_slice(f.target.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(f.target.authority.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in o.fields {
        let wanted = match &f.request_headers {
            Some(list) => list.iter().any(|n| n.as_bytes().eq_ignore_ascii_case(name)),
            None => true,
        };
        if wanted && !never_sent(name) {
            push(out, name, value);
        }
    }
    push(out, b"X-Forwarded-Method", method);
    push(out, b"X-Forwarded-Proto", o.proto.as_bytes());
    push(out, b"X-Forwarded-Host", o.host);
    push(out, b"X-Forwarded-Uri", o.target);
    push(out, b"X-Original-URI", o.target);
    out.extend_from_slice(b"X-Forwarded-For: ");
    out.extend_from_slice(o.client.to_string().as_bytes());
    // Kept alive: the worker reuses the connection for its next check (`proxy::auth`).
    out.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
}

fn push(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// What the auth server's answer decides.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// 2xx: through, with these fields for the server (name as configured, value).
    Allow(Vec<(Box<str>, Vec<u8>)>),
    /// Another final status: the client gets it, with these fields and this body.
    Deny {
        status: u16,
        fields: Vec<(Vec<u8>, Vec<u8>)>,
        body: Vec<u8>,
    },
}

/// The decision for an answer with `status` and `fields`, its body `body`.
pub fn decide<'a>(f: &Forward, status: u16, fields: impl Iterator<Item = (&'a [u8], &'a [u8])>, body: &[u8]) -> Answer {
    if (200..300).contains(&status) {
        let mut copied = Vec::new();
        for (name, value) in fields {
            if let Some(n) = f.copy_headers.iter().find(|n| n.as_bytes().eq_ignore_ascii_case(name)) {
                copied.push((n.clone(), value.to_vec()));
            }
        }
        return Answer::Allow(copied);
    }
    Answer::Deny {
        status,
        fields: fields
            .filter(|(n, _)| !is_hop_or_framing(n))
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect(),
        body: body.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forward(copy: &[&str], request: Option<&[&str]>) -> Forward {
        Forward {
            target: Target::parse("http://127.0.0.1:9000/check?x=1").unwrap(),
            copy_headers: copy.iter().map(|s| Box::from(*s)).collect(),
            request_headers: request.map(|r| r.iter().map(|s| Box::from(*s)).collect()),
            timeout: Duration::from_secs(1),
            fail: FailMode::Closed,
        }
    }

    #[test]
    fn urls() {
        let t = Target::parse("http://127.0.0.1:9000/check?x=1").unwrap();
        assert_eq!(
            (t.addr.port(), &*t.authority, &*t.path),
            (9000, "127.0.0.1:9000", "/check?x=1")
        );
        let t = Target::parse("http://127.0.0.1").unwrap();
        assert_eq!((t.addr.port(), &*t.path), (80, "/"));
        let t = Target::parse("http://[::1]:81/a").unwrap();
        assert_eq!(t.addr.port(), 81);
        for bad in [
            "https://127.0.0.1/",
            "127.0.0.1:9000",
            "http://",
            "http://u:p@127.0.0.1/",
            "http://127.0.0.1/a b",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_auth_request_carries_the_original_and_no_framing() {
        let fields: Vec<(&[u8], &[u8])> = vec![
            (b"Authorization", b"Bearer x"),
            (b"Cookie", b"a=1"),
            (b"Content-Length", b"5"),
            (b"X-Forwarded-For", b"6.6.6.6"),
            (b"X-Original-URI", b"/forged"),
        ];
        let mut out = Vec::new();
        let o = Original {
            method: b"POST",
            target: b"/api/x?y=2",
            host: b"app.example",
            proto: "https",
            client: "10.0.0.9".parse().unwrap(),
            fields: fields.iter().copied(),
        };
        write_request(&forward(&[], None), o, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "POST /check?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9000\r\nAuthorization: Bearer x\r\nCookie: a=1\r\n\
             X-Forwarded-Method: POST\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: app.example\r\n\
             X-Forwarded-Uri: /api/x?y=2\r\nX-Original-URI: /api/x?y=2\r\nX-Forwarded-For: 10.0.0.9\r\n\
             Content-Length: 0\r\n\r\n"
        );
        let mut out = Vec::new();
        let o = Original {
            method: b"GET",
            target: b"/",
            host: b"h",
            proto: "http",
            client: "::1".parse().unwrap(),
            fields: fields.iter().copied(),
        };
        write_request(&forward(&[], Some(&["cookie"])), o, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("Cookie: a=1\r\n") && !text.contains("Authorization"),
            "{text}"
        );
    }

    #[test]
    fn answers_decide() {
        let f = forward(&["x-user", "x-groups"], None);
        let fields: Vec<(&[u8], &[u8])> = vec![(b"X-User", b"alice"), (b"X-Other", b"1"), (b"x-groups", b"a,b")];
        assert_eq!(
            decide(&f, 200, fields.iter().copied(), b""),
            Answer::Allow(vec![
                ("x-user".into(), b"alice".to_vec()),
                ("x-groups".into(), b"a,b".to_vec())
            ])
        );
        let fields: Vec<(&[u8], &[u8])> = vec![
            (b"WWW-Authenticate", b"Bearer"),
            (b"Content-Length", b"6"),
            (b"Connection", b"close"),
        ];
        assert_eq!(
            decide(&f, 401, fields.iter().copied(), b"nope!\n"),
            Answer::Deny {
                status: 401,
                fields: vec![(b"WWW-Authenticate".to_vec(), b"Bearer".to_vec())],
                body: b"nope!\n".to_vec()
            }
        );
    }
}
