//! What a `Host` field (HTTP/1) or an `:authority` (HTTP/2) may hold, and when two of them
//! name the same place, sans-io and allocation-free: shared by both codecs' callers.
//!
//! Owns: [`Authority`], [`parse`], [`is_valid`], [`same`]. The grammar is RFC 9110 §7.2's
//! `uri-host [ ":" port ]`, i.e. RFC 3986 §3.2.2-3.2.3 without userinfo: a reg-name
//! (unreserved, sub-delims, `%XX`), an IPv4 address (a reg-name too) or an IP-literal
//! (`[IPv6]` or `[vX.…]`), then an optional port of decimal digits no greater than 65535.
//! Anything else — a space, `/`, `?`, `#`, `@`, a second colon outside brackets, a port with
//! a letter — is invalid: RFC 9112 §3.2 makes such a request a 400, and a proxy that forwards
//! it lets the server, a log or a redirect read a host the proxy never judged.
//!
//! The empty value is valid (RFC 9112 §3.2: a client sends `Host:` empty when the target
//! has no authority); an empty host with a port (`:80`) is not. An empty port (`host:`) is
//! valid, as RFC 3986 allows, and compares as no port.

use std::net::Ipv6Addr;

/// A valid authority, split: the host as sent (brackets kept on an IP-literal) and its port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Authority<'a> {
    /// reg-name, IPv4 or `[IP-literal]`; empty only when the whole value is.
    pub host: &'a [u8],
    /// The port, when one is written (`host:` counts as none).
    pub port: Option<u16>,
}

/// Splits a `Host` / `:authority` value, or `None` if it is not a valid one.
pub fn parse(value: &[u8]) -> Option<Authority<'_>> {
    let bracketed = value.first() == Some(&b'[');
    let (host, port) = if bracketed {
        let close = value.iter().position(|&b| b == b']')?;
        let (host, rest) = value.split_at(close + 1);
        if !ip_literal(host.get(1..close).unwrap_or_default()) {
            return None;
        }
        match rest {
            [] => (host, None),
            [b':', port @ ..] => (host, Some(port)),
            _ => return None,
        }
    } else {
        match value.iter().position(|&b| b == b':') {
            Some(i) => (value.get(..i)?, Some(value.get(i + 1..)?)),
            None => (value, None),
        }
    };
    if !bracketed && !reg_name(host) {
        return None;
    }
    // `:80` or `:` names a port on no host.
    if host.is_empty() && !value.is_empty() {
        return None;
    }
    let port = match port {
        None | Some([]) => None,
        Some(digits) => Some(port_number(digits)?),
    };
    Some(Authority { host, port })
}

/// A valid `Host` / `:authority` value (see the module doc).
pub fn is_valid(value: &[u8]) -> bool {
    parse(value).is_some()
}

/// Both values are valid and name the same host and port: hosts compared without case
/// (RFC 3986 §6.2.2.1), a missing port read as `default_port` (the scheme's, when known).
pub fn same(a: &[u8], b: &[u8], default_port: Option<u16>) -> bool {
    match (parse(a), parse(b)) {
        (Some(a), Some(b)) => a.host.eq_ignore_ascii_case(b.host) && a.port.or(default_port) == b.port.or(default_port),
        _ => false,
    }
}

/// The port a scheme implies when an authority names none: `http` 80, `https` 443.
pub fn default_port(scheme: &[u8]) -> Option<u16> {
    if scheme.eq_ignore_ascii_case(b"http") {
        Some(80)
    } else if scheme.eq_ignore_ascii_case(b"https") {
        Some(443)
    } else {
        None
    }
}

/// `*( unreserved / pct-encoded / sub-delims )`.
fn reg_name(host: &[u8]) -> bool {
    let mut rest = host;
    while let [b, tail @ ..] = rest {
        rest = match b {
            b'%' => match tail {
                [h, l, tail @ ..] if h.is_ascii_hexdigit() && l.is_ascii_hexdigit() => tail,
                _ => return false,
            },
            _ if unreserved_or_sub_delim(*b) => tail,
            _ => return false,
        };
    }
    true
}

fn unreserved_or_sub_delim(b: u8) -> bool {
    matches!(b,
        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~'
        | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=')
}

/// Between the brackets: an IPv6 address (no zone: RFC 9110 has none in `Host`), or
/// `"v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )`.
fn ip_literal(inner: &[u8]) -> bool {
    if let [b'v' | b'V', rest @ ..] = inner {
        let Some(dot) = rest.iter().position(|&b| b == b'.') else {
            return false;
        };
        let (version, tail) = rest.split_at(dot);
        let tail = tail.get(1..).unwrap_or_default();
        return !version.is_empty()
            && version.iter().all(u8::is_ascii_hexdigit)
            && !tail.is_empty()
            && tail.iter().all(|&b| b == b':' || unreserved_or_sub_delim(b));
    }
    // `Ipv6Addr`'s parser takes only hex digits, colons and a dotted IPv4 tail.
    std::str::from_utf8(inner).is_ok_and(|s| s.parse::<Ipv6Addr>().is_ok())
}

/// `1*DIGIT` no greater than 65535 (leading zeros allowed, as RFC 3986 does).
fn port_number(digits: &[u8]) -> Option<u16> {
    let mut n: u32 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u32::from(d - b'0');
        if n > u32::from(u16::MAX) {
            return None;
        }
    }
    u16::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_hosts() {
        for ok in [
            &b""[..],
            b"example.com",
            b"EXAMPLE.com:8080",
            b"a",
            b"a:",
            b"127.0.0.1",
            b"127.0.0.1:65535",
            b"[::1]",
            b"[::1]:443",
            b"[2001:db8::1.2.3.4]",
            b"[v1.fe80::a+b]",
            b"xn--bcher-kva.example",
            b"a%20b",
            b"under_score.example",
            b"sub!$&'()*+,;=delims",
            b"host:00080",
        ] {
            assert!(is_valid(ok), "{}", String::from_utf8_lossy(ok));
        }
    }

    #[test]
    fn invalid_hosts() {
        for bad in [
            &b"a b"[..],
            b"evil.example/x?",
            b"evil.example/",
            b"a@b.example",
            b"user:pw@b.example",
            b"x:notaport",
            b"x:80x",
            b"x:65536",
            b"x:99999999999999999999",
            b":80",
            b":",
            b"a:1:2",
            b"a#b",
            b"a?b",
            b"a%2",
            b"a%zz",
            b"a\"b",
            b"[::1",
            b"[::1]x",
            b"[::1]:x",
            b"[::g]",
            b"[fe80::1%25eth0]",
            b"[v.x]",
            b"[v1.]",
            b"[]",
            b"a\tb",
            b"\xc3\xa9.example",
            b"a\\b",
        ] {
            assert!(!is_valid(bad), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn parts() {
        assert_eq!(
            parse(b"[::1]:8080"),
            Some(Authority {
                host: b"[::1]",
                port: Some(8080)
            })
        );
        assert_eq!(parse(b"a:"), Some(Authority { host: b"a", port: None }));
    }

    #[test]
    fn sameness() {
        assert!(same(b"Example.COM", b"example.com", Some(80)));
        assert!(same(b"example.com:80", b"example.com", Some(80)));
        assert!(same(b"example.com:", b"example.com:443", Some(443)));
        assert!(!same(b"example.com:80", b"example.com", Some(443)));
        assert!(!same(b"example.com:80", b"example.com", None));
        assert!(!same(b"public.example", b"admin.example", Some(80)));
        assert!(!same(b"a b", b"a b", None), "invalid values are never the same");
        assert_eq!(default_port(b"HTTPS"), Some(443));
        assert_eq!(default_port(b"ws"), None);
    }
}
