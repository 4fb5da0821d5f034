//! The PROXY protocol (versions 1 and 2), sans-io: bytes → [`Header`] ([`parse`]) and a
//! connection's addresses → bytes ([`write_v1`], [`write_v2`]); and the CIDR list that says
//! which peers may send one ([`Cidrs`]).
//!
//! Invariants: the parser never reads past the header it reports (`Parsed::len` is exactly
//! the header's length, so the caller consumes just that and leaves the rest for TLS, HTTP
//! or a relay), never allocates more than the header's own TLV values, and is bounded:
//! a v1 line is at most [`V1_MAX_LEN`] bytes, a v2 header at most [`V2_MAX_LEN`]. Anything
//! else is an error, never a panic (fuzzed: `fuzz/fuzz_targets/proxy_header.rs`).
//!
//! The v2 CRC32C TLV is not verified (it is optional, and loopback and data-centre links
//! already checksum); unknown TLVs are skipped.

mod cidr;
mod parse;
mod write;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;

pub use cidr::{Cidr, Cidrs};
pub use parse::{ParseError, Parsed, parse};
pub use write::{write_v1, write_v2};

/// The longest v1 header: `PROXY TCP6 <39> <39> <5> <5>\r\n`.
pub const V1_MAX_LEN: usize = 107;
/// The longest v2 header accepted: the 16 fixed bytes and up to 4080 of addresses and TLVs.
pub const V2_MAX_LEN: usize = 4096;
/// Every v2 header starts with these 12 bytes.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// v2 TLV types (the spec's `PP2_TYPE_*`).
pub mod tlv {
    pub const ALPN: u8 = 0x01;
    pub const AUTHORITY: u8 = 0x02;
    pub const CRC32C: u8 = 0x03;
    pub const NOOP: u8 = 0x04;
    pub const UNIQUE_ID: u8 = 0x05;
    pub const SSL: u8 = 0x20;
    pub const SSL_VERSION: u8 = 0x21;
    /// `PP2_CLIENT_SSL` in the SSL TLV's client bit field.
    pub const CLIENT_SSL: u8 = 0x01;
}

/// Which header versions a frontend accepts (`accept_proxy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    V1,
    V2,
    Any,
}

impl Accept {
    fn v1(self) -> bool {
        matches!(self, Accept::V1 | Accept::Any)
    }
    fn v2(self) -> bool {
        matches!(self, Accept::V2 | Accept::Any)
    }
}

/// A header version to send (`send_proxy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }
}

/// `LOCAL` (the balancer's own connection, e.g. its health check: use the connection's own
/// addresses) or `PROXY` (relayed for the client at `Header::addrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Local,
    Proxy,
}

/// A parsed header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub version: Version,
    pub command: Command,
    /// Source (the client) and destination, for `PROXY` over TCP; `None` for `LOCAL`, v1
    /// `UNKNOWN` and v2 `AF_UNSPEC`/`AF_UNIX` (the connection's own addresses stand).
    pub addrs: Option<(SocketAddr, SocketAddr)>,
    pub tlvs: Tlvs,
}

/// The v2 TLVs tollgate keeps (v1 has none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tlvs {
    pub alpn: Option<Vec<u8>>,
    /// The host name the client asked for (its SNI, usually).
    pub authority: Option<String>,
    pub unique_id: Option<Vec<u8>>,
    /// The client connection was TLS: its `SSL_VERSION` sub-TLV (e.g. `TLSv1.3`), if sent.
    pub ssl: Option<Ssl>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ssl {
    pub client: u8,
    pub verify: u32,
    pub version: Option<String>,
}

impl Tlvs {
    pub fn is_empty(&self) -> bool {
        self.alpn.is_none() && self.authority.is_none() && self.unique_id.is_none() && self.ssl.is_none()
    }
}
