//! CIDR blocks for `trusted_proxies`: a short list scanned in order (a handful of balancer
//! networks; route conditions over many prefixes use the route table's own matcher).

use std::fmt;
use std::net::IpAddr;

/// One block: an address and a prefix length, the bits past the prefix zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: u128,
    len: u8,
    v4: bool,
}

impl Cidr {
    /// `10.0.0.0/8`, `::1/128`, or a bare address (a single host).
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (ip, len) = match text.split_once('/') {
            Some((ip, len)) => (ip, Some(len)),
            None => (text, None),
        };
        let bad = || format!("`{text}` is not an IP address or CIDR block (e.g. \"10.0.0.0/8\", \"::1/128\")");
        let ip: IpAddr = ip.parse().map_err(|_| bad())?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) if !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) => l.parse::<u8>().map_err(|_| bad())?,
            Some(_) => return Err(bad()),
        };
        if len > max {
            return Err(format!("`{text}`: a prefix length is at most {max}"));
        }
        let cidr = Cidr {
            net: bits(ip),
            len,
            v4: ip.is_ipv4(),
        };
        if cidr.net & !cidr.mask() != 0 {
            return Err(format!("`{text}` has bits set past its /{len} prefix"));
        }
        Ok(cidr)
    }

    fn mask(&self) -> u128 {
        let width = if self.v4 { 32 } else { 128 };
        let full: u128 = if self.v4 { u128::from(u32::MAX) } else { u128::MAX };
        match width - u32::from(self.len) {
            0 => full,
            host if host >= 128 => 0,
            host => full & !((1u128 << host) - 1),
        }
    }

    /// `ip` is in this block (an IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        ip.is_ipv4() == self.v4 && bits(ip) & self.mask() == self.net
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ip = if self.v4 {
            IpAddr::from(std::net::Ipv4Addr::from(u32::try_from(self.net).unwrap_or(0)))
        } else {
            IpAddr::from(std::net::Ipv6Addr::from(self.net))
        };
        write!(f, "{ip}/{}", self.len)
    }
}

/// An IPv4-mapped IPv6 address as IPv4 (a dual-stack socket's view of an IPv4 peer).
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// A list of blocks; empty contains nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cidrs(pub Vec<Cidr>);

impl Cidrs {
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }
}
