//! Bytes → header. `parse` looks at what has arrived so far: `Ok(None)` = a prefix of a
//! possible header (read more), `Ok(Some)` = a whole header and its exact length, `Err` =
//! never a valid header whatever follows.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{Accept, Command, Header, Ssl, Tlvs, V1_MAX_LEN, V2_MAX_LEN, V2_SIGNATURE, Version, tlv};

/// A whole header and how many bytes it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub header: Header,
    pub len: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The bytes do not start a header of an accepted version.
    NotProxy,
    /// Longer than [`V1_MAX_LEN`] / [`V2_MAX_LEN`].
    TooLong,
    Malformed(&'static str),
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::NotProxy => f.write_str("no PROXY protocol header"),
            ParseError::TooLong => f.write_str("PROXY protocol header too long"),
            ParseError::Malformed(why) => write!(f, "malformed PROXY protocol header: {why}"),
        }
    }
}

const V1_PREFIX: &[u8] = b"PROXY ";

/// Parses the header at the start of `buf`, if one of an accepted version is there.
pub fn parse(buf: &[u8], accept: Accept) -> Result<Option<Parsed>, ParseError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let prefix_of = |sig: &[u8]| {
        let n = buf.len().min(sig.len());
        buf.get(..n) == sig.get(..n)
    };
    if first == b'\r' && accept.v2() && prefix_of(&V2_SIGNATURE) {
        return v2(buf);
    }
    if first == b'P' && accept.v1() && prefix_of(V1_PREFIX) {
        return v1(buf);
    }
    Err(ParseError::NotProxy)
}

fn v1(buf: &[u8]) -> Result<Option<Parsed>, ParseError> {
    let window = buf.get(..buf.len().min(V1_MAX_LEN)).unwrap_or_default();
    let Some(lf) = window.iter().position(|&b| b == b'\n') else {
        return if buf.len() >= V1_MAX_LEN {
            Err(ParseError::TooLong)
        } else {
            Ok(None)
        };
    };
    let line = window.get(..lf).unwrap_or_default();
    let Some(line) = line.strip_suffix(b"\r") else {
        return Err(ParseError::Malformed("a v1 line ends with CRLF"));
    };
    let text = std::str::from_utf8(line).map_err(|_| ParseError::Malformed("a v1 line is ASCII"))?;
    let mut fields = text.split(' ');
    fields.next(); // "PROXY", checked by the caller
    let addrs = match fields.next() {
        // The sender does not know the addresses: the connection's own stand.
        Some("UNKNOWN") => None,
        Some(family @ ("TCP4" | "TCP6")) => {
            let mut next = || fields.next().ok_or(ParseError::Malformed("a v1 line has 6 fields"));
            let (src, dst, sport, dport) = (next()?, next()?, next()?, next()?);
            if fields.next().is_some() {
                return Err(ParseError::Malformed("a v1 line has 6 fields"));
            }
            let ip = |s: &str| -> Result<IpAddr, ParseError> {
                let ip = if family == "TCP4" {
                    s.parse::<Ipv4Addr>().map(IpAddr::V4)
                } else {
                    s.parse::<Ipv6Addr>().map(IpAddr::V6)
                };
                ip.map_err(|_| ParseError::Malformed("a v1 address does not match its family"))
            };
            Some((
                SocketAddr::new(ip(src)?, port(sport)?),
                SocketAddr::new(ip(dst)?, port(dport)?),
            ))
        }
        _ => return Err(ParseError::Malformed("a v1 family is TCP4, TCP6 or UNKNOWN")),
    };
    Ok(Some(Parsed {
        header: Header {
            version: Version::V1,
            command: Command::Proxy,
            addrs,
            tlvs: Tlvs::default(),
        },
        len: lf + 1,
    }))
}

fn port(s: &str) -> Result<u16, ParseError> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::Malformed("a v1 port is 1 to 5 digits"));
    }
    s.parse()
        .map_err(|_| ParseError::Malformed("a v1 port is at most 65535"))
}

fn v2(buf: &[u8]) -> Result<Option<Parsed>, ParseError> {
    let Some(fixed) = buf.get(..16) else {
        return Ok(None);
    };
    let (ver_cmd, family) = (fixed.get(12).copied().unwrap_or(0), fixed.get(13).copied().unwrap_or(0));
    let body_len = usize::from(u16::from_be_bytes([
        fixed.get(14).copied().unwrap_or(0),
        fixed.get(15).copied().unwrap_or(0),
    ]));
    if ver_cmd >> 4 != 2 {
        return Err(ParseError::Malformed("v2 version nibble is not 2"));
    }
    let command = match ver_cmd & 0x0f {
        0 => Command::Local,
        1 => Command::Proxy,
        _ => return Err(ParseError::Malformed("v2 command is LOCAL or PROXY")),
    };
    let len = 16 + body_len;
    if len > V2_MAX_LEN {
        return Err(ParseError::TooLong);
    }
    let Some(body) = buf.get(16..len) else {
        return Ok(None);
    };
    let addr_len = match family >> 4 {
        0 => 0,
        1 => 12,
        2 => 36,
        3 => 216,
        _ => return Err(ParseError::Malformed("v2 address family unknown")),
    };
    let (addresses, rest) = body
        .split_at_checked(addr_len)
        .ok_or(ParseError::Malformed("v2 addresses longer than the header"))?;
    let stream = family & 0x0f;
    if stream > 2 {
        return Err(ParseError::Malformed("v2 transport unknown"));
    }
    let addrs = match (command, family >> 4) {
        (Command::Local, _) | (_, 0 | 3) => None,
        (Command::Proxy, _) if stream != 1 => return Err(ParseError::Malformed("v2 transport is not a stream")),
        (Command::Proxy, 1) => Some(inet(addresses)),
        (Command::Proxy, _) => Some(inet6(addresses)),
    };
    Ok(Some(Parsed {
        header: Header {
            version: Version::V2,
            command,
            addrs,
            tlvs: tlvs(rest)?,
        },
        len,
    }))
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b.get(at).copied().unwrap_or(0), b.get(at + 1).copied().unwrap_or(0)])
}

fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(s) = b.get(at..at + N) {
        out.copy_from_slice(s);
    }
    out
}

fn inet(a: &[u8]) -> (SocketAddr, SocketAddr) {
    let src = Ipv4Addr::from(array::<4>(a, 0));
    let dst = Ipv4Addr::from(array::<4>(a, 4));
    (
        SocketAddr::new(src.into(), be16(a, 8)),
        SocketAddr::new(dst.into(), be16(a, 10)),
    )
}

fn inet6(a: &[u8]) -> (SocketAddr, SocketAddr) {
    let src = Ipv6Addr::from(array::<16>(a, 0));
    let dst = Ipv6Addr::from(array::<16>(a, 16));
    (
        SocketAddr::new(src.into(), be16(a, 32)),
        SocketAddr::new(dst.into(), be16(a, 34)),
    )
}

/// Splits `b` into (type, value) pairs; a TLV running past the end is malformed.
fn each_tlv(mut b: &[u8], mut f: impl FnMut(u8, &[u8]) -> Result<(), ParseError>) -> Result<(), ParseError> {
    while let Some((&kind, rest)) = b.split_first() {
        let len = usize::from(be16(rest, 0));
        let value = rest
            .get(2..2 + len)
            .ok_or(ParseError::Malformed("v2 TLV longer than the header"))?;
        f(kind, value)?;
        b = rest.get(2 + len..).unwrap_or_default();
    }
    Ok(())
}

fn tlvs(b: &[u8]) -> Result<Tlvs, ParseError> {
    let mut out = Tlvs::default();
    each_tlv(b, |kind, value| {
        match kind {
            tlv::ALPN => out.alpn = Some(value.to_vec()),
            tlv::AUTHORITY => {
                let name = std::str::from_utf8(value).map_err(|_| ParseError::Malformed("v2 authority is UTF-8"))?;
                out.authority = Some(name.to_string());
            }
            tlv::UNIQUE_ID if value.len() > 128 => {
                return Err(ParseError::Malformed("v2 unique id is at most 128 bytes"));
            }
            tlv::UNIQUE_ID => out.unique_id = Some(value.to_vec()),
            tlv::SSL => out.ssl = Some(ssl(value)?),
            _ => {}
        }
        Ok(())
    })?;
    Ok(out)
}

fn ssl(value: &[u8]) -> Result<Ssl, ParseError> {
    let Some(client) = value.first().copied() else {
        return Err(ParseError::Malformed("v2 SSL TLV shorter than 5 bytes"));
    };
    if value.len() < 5 {
        return Err(ParseError::Malformed("v2 SSL TLV shorter than 5 bytes"));
    }
    let verify = u32::from_be_bytes(array::<4>(value, 1));
    let mut version = None;
    each_tlv(value.get(5..).unwrap_or_default(), |kind, sub| {
        if kind == tlv::SSL_VERSION {
            version = Some(String::from_utf8_lossy(sub).into_owned());
        }
        Ok(())
    })?;
    Ok(Ssl {
        client,
        verify,
        version,
    })
}
