//! Header → bytes, for `send_proxy` and `check_send_proxy`.
//!
//! Both addresses go out in one family: IPv4 when both are IPv4 (or IPv4-mapped), else
//! IPv6 (an IPv4 one mapped), as the spec requires one family per header.

use std::net::{IpAddr, SocketAddr};

use super::cidr::canonical;
use super::{Command, Tlvs, tlv};

/// A TLV value longer than this is left out (tollgate's own values are host names, ALPN
/// ids and TLS version names: far shorter).
const MAX_TLV_VALUE: usize = 1024;

fn same_family(src: SocketAddr, dst: SocketAddr) -> (SocketAddr, SocketAddr) {
    let (s, d) = (canonical(src.ip()), canonical(dst.ip()));
    match (s, d) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (SocketAddr::new(s, src.port()), SocketAddr::new(d, dst.port())),
        _ => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V4(a) => IpAddr::V6(a.to_ipv6_mapped()),
                v6 => v6,
            };
            (SocketAddr::new(v6(s), src.port()), SocketAddr::new(v6(d), dst.port()))
        }
    }
}

/// Appends `PROXY TCP4|TCP6 SRC DST SPORT DPORT\r\n` (or `PROXY UNKNOWN\r\n` without addresses).
pub fn write_v1(out: &mut Vec<u8>, addrs: Option<(SocketAddr, SocketAddr)>) {
    use std::io::Write;
    let Some((src, dst)) = addrs.map(|(s, d)| same_family(s, d)) else {
        out.extend_from_slice(b"PROXY UNKNOWN\r\n");
        return;
    };
    let family = if src.is_ipv4() { "TCP4" } else { "TCP6" };
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        "PROXY {family} {} {} {} {}\r\n",
        src.ip(),
        dst.ip(),
        src.port(),
        dst.port()
    );
}

/// Appends a v2 header: `PROXY` with `addrs` over TCP, or `LOCAL` (no addresses), and `tlvs`.
pub fn write_v2(out: &mut Vec<u8>, command: Command, addrs: Option<(SocketAddr, SocketAddr)>, tlvs: &Tlvs) {
    let start = out.len();
    out.extend_from_slice(&super::V2_SIGNATURE);
    out.push(match command {
        Command::Local => 0x20,
        Command::Proxy => 0x21,
    });
    let addrs = addrs
        .filter(|_| command == Command::Proxy)
        .map(|(s, d)| same_family(s, d));
    out.push(match addrs {
        None => 0x00,
        Some((s, _)) if s.is_ipv4() => 0x11,
        Some(_) => 0x21,
    });
    out.extend_from_slice(&[0, 0]); // the length, set below
    if let Some((src, dst)) = addrs {
        for ip in [src.ip(), dst.ip()] {
            match ip {
                IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
                IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
            }
        }
        out.extend_from_slice(&src.port().to_be_bytes());
        out.extend_from_slice(&dst.port().to_be_bytes());
    }
    if let Some(alpn) = &tlvs.alpn {
        put_tlv(out, tlv::ALPN, alpn);
    }
    if let Some(name) = &tlvs.authority {
        put_tlv(out, tlv::AUTHORITY, name.as_bytes());
    }
    if let Some(id) = tlvs.unique_id.as_ref().filter(|id| id.len() <= 128) {
        put_tlv(out, tlv::UNIQUE_ID, id);
    }
    if let Some(ssl) = &tlvs.ssl {
        let mut value = Vec::with_capacity(16);
        value.push(ssl.client);
        value.extend_from_slice(&ssl.verify.to_be_bytes());
        if let Some(version) = &ssl.version {
            put_tlv(&mut value, tlv::SSL_VERSION, version.as_bytes());
        }
        put_tlv(out, tlv::SSL, &value);
    }
    let body = u16::try_from(out.len() - start - 16).unwrap_or(u16::MAX);
    if let Some(len) = out.get_mut(start + 14..start + 16) {
        len.copy_from_slice(&body.to_be_bytes());
    }
}

fn put_tlv(out: &mut Vec<u8>, kind: u8, value: &[u8]) {
    let Ok(len) = u16::try_from(value.len()) else {
        return;
    };
    if value.len() > MAX_TLV_VALUE {
        return;
    }
    out.push(kind);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(value);
}
