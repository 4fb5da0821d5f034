//! Route matching: the conditions a `[[frontend.route]]` (or a `[[frontend.matcher]]`)
//! states, the borrowed view of a request they are checked against, and the table a
//! frontend's routes are compiled into at load so that finding the first matching route
//! costs about the same for 1,000 routes as for 10.
//!
//! Invariants: "the first matching route decides" — [`RouteTable::first_match`] returns
//! exactly the first route whose conditions all hold ([`RouteTable::first_miss`] is `None`);
//! the indexes only skip routes that cannot match. Nothing here allocates per request or
//! compiles a regex after load: regexes use the linear-time engine of the `regex` crate
//! (`regex-automata`), each bounded in size at load, with per-thread search caches.

mod build;
mod pattern;
mod table;
pub mod tcp;
mod view;

#[cfg(test)]
mod tests;

use std::fmt;
use std::net::IpAddr;
use std::ops::Range;

pub(super) use build::{Builder, Keys, sources};
pub use pattern::{MAX_REGEX_SIZE, Regex};
pub use table::RouteTable;
pub use view::{Headers, NoHeaders, RequestView};

use super::model::HostPattern;
pub use crate::http::h1::Proto as Scheme;

/// A route's (or a matcher's) conditions, all of which must hold, in the order they are
/// checked (cheap ones first; the order of `docs/config.md`).
#[derive(Debug, Clone, Default)]
pub struct Conditions(pub Vec<Cond>);

impl Conditions {
    /// No condition: matches everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The SNI patterns of a top-level `sni` condition (what TCP mode routes by).
    pub fn sni(&self) -> Option<&[HostPattern]> {
        self.0.iter().find_map(|c| match c {
            Cond::Sni(p) => Some(p.as_slice()),
            _ => None,
        })
    }
}

/// One condition. A list holds when any of its entries does.
#[derive(Debug, Clone)]
pub enum Cond {
    Host(Vec<HostPattern>),
    /// The path without the query, exactly.
    Path(Vec<Box<[u8]>>),
    PathPrefix(Vec<Box<[u8]>>),
    /// Patterns `ids` of the frontend's path regex set (`written` as in the file).
    PathRegex {
        ids: Range<usize>,
        written: Vec<String>,
    },
    /// Case-sensitive, as written (upper case).
    Method(Vec<Box<[u8]>>),
    /// A `name[=value]` pair of the query string; `value: None` = present.
    Query {
        name: Box<[u8]>,
        value: Option<Box<[u8]>>,
    },
    /// A field called `name` (lowercase) whose value passes `test`.
    Header {
        name: Box<str>,
        test: ValueTest,
    },
    Cookie {
        name: Box<[u8]>,
        value: Option<Box<[u8]>>,
    },
    Source(super::prefix_set::PrefixSet),
    Scheme(Scheme),
    Sni(Vec<HostPattern>),
    /// `true`: the client presented a certificate that verified; `false`: it presented none.
    ClientCert(bool),
    /// The `[[frontend.matcher]]` at this index (of `RouteTable::matchers`) holds.
    Matcher {
        index: usize,
        name: String,
    },
    /// None of these holds.
    Not(Vec<Cond>),
}

/// What a header's value must be.
#[derive(Debug, Clone)]
pub enum ValueTest {
    Present,
    Exact(Box<[u8]>),
    Prefix(Box<[u8]>),
    Regex(Regex),
}

impl ValueTest {
    fn as_text(&self) -> Option<(&'static str, String)> {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match self {
            ValueTest::Present => None,
            ValueTest::Exact(v) => Some(("value", text(v))),
            ValueTest::Prefix(v) => Some(("prefix", text(v))),
            ValueTest::Regex(r) => Some(("regex", r.as_str().to_string())),
        }
    }
}

/// A `[[frontend.matcher]]`: a named set of conditions.
#[derive(Debug, Clone)]
pub struct Matcher {
    pub name: String,
    pub when: Conditions,
}

/// An address block: `10.0.0.0/8`, `::1/128`, or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    len: u8,
}

impl Cidr {
    /// `IP/len` or `IP`; the address must have no bit set past `len`.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (ip, len) = match text.split_once('/') {
            Some((ip, len)) => (ip, Some(len)),
            None => (text, None),
        };
        let net: IpAddr = ip
            .parse()
            .map_err(|_| format!("`{text}` is not an IP address or CIDR block (e.g. \"10.0.0.0/8\", \"::1/128\")"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("`{text}`: the prefix length must be 0..={max}")),
            },
        };
        let cidr = Cidr { net, len };
        if cidr.masked(net) != bits(net) {
            return Err(format!(
                "`{text}` has bits set past /{len} (the block is written by its first address)"
            ));
        }
        Ok(cidr)
    }

    fn masked(&self, ip: IpAddr) -> u128 {
        let width = if ip.is_ipv4() { 32 } else { 128 };
        let keep = u32::from(self.len);
        let mask = if keep == 0 { 0 } else { u128::MAX << (width - keep) };
        bits(ip) & mask
    }

    pub fn is_ipv4(&self) -> bool {
        self.net.is_ipv4()
    }

    /// The first and last address of the block, as numbers of its family's width.
    pub fn range(&self) -> (u128, u128) {
        let width = if self.net.is_ipv4() { 32 } else { 128 };
        let host_bits = width - u32::from(self.len);
        let span = if host_bits == 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        let first = bits(self.net);
        (first, first | span)
    }

    /// Whether `ip` is in the block (an IPv4-mapped IPv6 address counts as its IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        ip.is_ipv4() == self.net.is_ipv4() && self.masked(ip) == bits(self.net)
    }
}

fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

/// As written in the config file (TOML), for `tollgate explain`.
impl fmt::Display for Cond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: impl Iterator<Item = T>) -> fmt::Result {
            let items: Vec<String> = items.map(|i| format!("{:?}", i.to_string())).collect();
            match items.as_slice() {
                [one] => f.write_str(one),
                many => write!(f, "[{}]", many.join(", ")),
            }
        }
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let hosts = |p: &HostPattern| match p {
            HostPattern::Exact(n) => n.clone(),
            HostPattern::Wildcard(s) => format!("*{s}"),
        };
        match self {
            Cond::Host(p) => {
                f.write_str("host = ")?;
                list(f, p.iter().map(hosts))
            }
            Cond::Path(p) => {
                f.write_str("path = ")?;
                list(f, p.iter().map(|b| text(b)))
            }
            Cond::PathPrefix(p) => {
                f.write_str("path_prefix = ")?;
                list(f, p.iter().map(|b| text(b)))
            }
            Cond::PathRegex { written, .. } => {
                f.write_str("path_regex = ")?;
                list(f, written.iter())
            }
            Cond::Method(m) => {
                f.write_str("method = ")?;
                list(f, m.iter().map(|b| text(b)))
            }
            Cond::Query { name, value } | Cond::Cookie { name, value } => {
                let key = if matches!(self, Cond::Query { .. }) {
                    "query"
                } else {
                    "cookie"
                };
                write!(f, "{key} = {{ name = {:?}", text(name))?;
                if let Some(v) = value {
                    write!(f, ", value = {:?}", text(v))?;
                }
                f.write_str(" }")
            }
            Cond::Header { name, test } => {
                write!(f, "header = {{ name = {name:?}")?;
                if let Some((k, v)) = test.as_text() {
                    write!(f, ", {k} = {v:?}")?;
                }
                f.write_str(" }")
            }
            Cond::Source(c) => {
                f.write_str("source = ")?;
                list(f, c.blocks().iter())
            }
            Cond::Scheme(s) => write!(f, "scheme = {:?}", s.as_str()),
            Cond::Sni(p) => {
                f.write_str("sni = ")?;
                list(f, p.iter().map(hosts))
            }
            Cond::ClientCert(verified) => {
                write!(f, "client_cert = {:?}", if *verified { "verified" } else { "absent" })
            }
            Cond::Matcher { name, .. } => write!(f, "matcher = {name:?}"),
            Cond::Not(inner) => {
                f.write_str("not = { ")?;
                for (i, c) in inner.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{c}")?;
                }
                f.write_str(" }")
            }
        }
    }
}
