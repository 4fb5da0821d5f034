//! Datagrams between worker generations: what keeps a reload from losing a QUIC connection.
//!
//! Every generation reads the *same* UDP sockets (the master hands each a duplicate), so
//! after a reload a datagram of an old generation's connection may be read by the new one.
//! The master gives each generation, per worker thread, the receiving end of a Unix datagram
//! pair (`inbound`), and each newer generation the sending ends of every older live one
//! (`outbound`). A datagram whose connection ID names an older generation is sent there,
//! with what the socket read with it (source address, destination IP, ECN, GRO stride); the
//! old generation's thread reads it from its pair and gives it to its endpoint as if its own
//! socket had read it. Once handed over (`ToWorker::HandOver`, at a reload), an old
//! generation stops reading the UDP sockets at all — the new one reads everything and
//! forwards its share — but keeps sending from them, so its clients see no change.
//!
//! Invariants: only the master creates the pairs, so nothing outside the process tree can
//! write into an endpoint (a spoofed source address would otherwise be trivial); a message
//! is one datagram (or GRO batch) with a fixed header, and anything malformed is dropped;
//! sends never block (a full pair drops the datagram, as a full socket buffer would).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;

use quinn::udp::{EcnCodepoint, RecvMeta};

/// What the master hands a generation for QUIC across generations.
#[derive(Debug, Default)]
pub struct Handover {
    /// The CID tag key every generation shares.
    pub key: Option<[u8; 16]>,
    /// Per worker thread of this generation: the receiving end of its pair.
    pub inbound: Vec<OwnedFd>,
    /// Older live generations: (generation, per worker thread the sending end).
    pub outbound: Vec<(u64, Vec<OwnedFd>)>,
}

/// Header: version, group (u16), family (4 or 6), source IP (16), source port (u16),
/// destination IP present (u8), destination IP (16), ECN (u8), stride (u16).
const HEADER: usize = 1 + 2 + 1 + 16 + 2 + 1 + 16 + 1 + 2;
const VERSION: u8 = 1;
/// The largest message: a header and a GRO batch of 64 KiB.
pub(super) const MAX_MESSAGE: usize = HEADER + 65_535;

fn ip_bytes(ip: IpAddr) -> (u8, [u8; 16]) {
    match ip {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&v4.octets());
            (4, b)
        }
        IpAddr::V6(v6) => (6, v6.octets()),
    }
}

fn ip_from(family: u8, b: &[u8]) -> Option<IpAddr> {
    match family {
        4 => {
            let o: [u8; 4] = b.get(..4)?.try_into().ok()?;
            Some(IpAddr::V4(Ipv4Addr::from(o)))
        }
        6 => {
            let o: [u8; 16] = b.get(..16)?.try_into().ok()?;
            Some(IpAddr::V6(Ipv6Addr::from(o)))
        }
        _ => None,
    }
}

/// One datagram (or GRO batch) as a message for another generation's thread.
pub(super) fn encode(group: usize, meta: &RecvMeta, data: &[u8], out: &mut Vec<u8>) -> Option<()> {
    out.clear();
    let group = u16::try_from(group).ok()?;
    let stride = u16::try_from(meta.stride.min(65_535)).ok()?;
    let (family, src) = ip_bytes(meta.addr.ip());
    out.push(VERSION);
    out.extend_from_slice(&group.to_be_bytes());
    out.push(family);
    out.extend_from_slice(&src);
    out.extend_from_slice(&meta.addr.port().to_be_bytes());
    match meta.dst_ip {
        Some(ip) => {
            let (f, b) = ip_bytes(ip);
            out.push(f);
            out.extend_from_slice(&b);
        }
        None => {
            out.push(0);
            out.extend_from_slice(&[0u8; 16]);
        }
    }
    out.push(meta.ecn.map_or(0, |e| e as u8));
    out.extend_from_slice(&stride.to_be_bytes());
    out.extend_from_slice(data);
    Some(())
}

/// A message back as (group, meta, datagram); `None` for anything malformed.
pub(super) fn decode(msg: &[u8]) -> Option<(usize, RecvMeta, &[u8])> {
    let head = msg.get(..HEADER)?;
    let data = msg.get(HEADER..)?;
    if head.first() != Some(&VERSION) || data.is_empty() {
        return None;
    }
    let group = usize::from(u16::from_be_bytes(head.get(1..3)?.try_into().ok()?));
    let src = ip_from(*head.get(3)?, head.get(4..20)?)?;
    let port = u16::from_be_bytes(head.get(20..22)?.try_into().ok()?);
    let dst_ip = match *head.get(22)? {
        0 => None,
        f => Some(ip_from(f, head.get(23..39)?)?),
    };
    let ecn = EcnCodepoint::from_bits(*head.get(39)?);
    let stride = usize::from(u16::from_be_bytes(head.get(40..42)?.try_into().ok()?));
    let mut meta = RecvMeta::default();
    meta.addr = SocketAddr::new(src, port);
    meta.len = data.len();
    meta.stride = if stride == 0 { data.len() } else { stride };
    meta.ecn = ecn;
    meta.dst_ip = dst_ip;
    Some((group, meta, data))
}

/// The sending ends toward older generations, by generation.
#[derive(Debug, Default)]
pub(super) struct Outbound {
    /// Newest first: a CID's 3 generation bits name the newest older generation with them.
    by_generation: Vec<(u64, Vec<UnixDatagram>)>,
}

impl Outbound {
    pub(super) fn new(ends: Vec<(u64, Vec<OwnedFd>)>) -> io::Result<Self> {
        let mut by_generation = Vec::with_capacity(ends.len());
        for (generation, fds) in ends {
            let socks = fds
                .into_iter()
                .map(|fd| {
                    let s = UnixDatagram::from(fd);
                    s.set_nonblocking(true)?;
                    Ok(s)
                })
                .collect::<io::Result<Vec<_>>>()?;
            by_generation.push((generation, socks));
        }
        by_generation.sort_by(|a, b| b.0.cmp(&a.0));
        Ok(Outbound { by_generation })
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_generation.is_empty()
    }

    /// The pair to `thread` of the newest older generation whose number ends in `bits`.
    pub(super) fn to(&self, bits: u8, thread: usize) -> Option<&UnixDatagram> {
        let (_, socks) = self.by_generation.iter().find(|(g, _)| g % 8 == u64::from(bits))?;
        socks.get(thread)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_datagram_and_what_was_read_with_it_cross_intact() {
        for (src, dst) in [
            ("192.0.2.7:4433", Some("127.0.0.1")),
            ("[2001:db8::1]:65535", None),
        ] {
            let mut meta = RecvMeta::default();
            meta.addr = src.parse().unwrap();
            meta.len = 5;
            meta.stride = 5;
            meta.ecn = Some(EcnCodepoint::Ect0);
            meta.dst_ip = dst.map(|d| d.parse().unwrap());
            let mut msg = Vec::new();
            encode(3, &meta, b"hello", &mut msg).unwrap();
            let (group, back, data) = decode(&msg).unwrap();
            assert_eq!((group, data), (3, &b"hello"[..]));
            assert_eq!(back.addr, meta.addr);
            assert_eq!(back.dst_ip, meta.dst_ip);
            assert_eq!(back.ecn, meta.ecn);
            assert_eq!((back.len, back.stride), (5, 5));
        }
    }

    #[test]
    fn malformed_messages_are_refused() {
        let mut meta = RecvMeta::default();
        meta.addr = "127.0.0.1:1".parse().unwrap();
        let mut msg = Vec::new();
        encode(0, &meta, b"x", &mut msg).unwrap();
        assert!(decode(&msg[..HEADER]).is_none(), "no datagram");
        assert!(decode(&msg[..10]).is_none(), "cut header");
        let mut bad = msg.clone();
        bad[0] = 9;
        assert!(decode(&bad).is_none(), "version");
        let mut bad = msg.clone();
        bad[3] = 5;
        assert!(decode(&bad).is_none(), "family");
        assert!(decode(&[]).is_none());
    }

    #[test]
    fn a_cid_goes_to_the_newest_older_generation_with_its_bits() {
        let pair = || {
            let (a, _b) = UnixDatagram::pair().unwrap();
            OwnedFd::from(a)
        };
        let out = Outbound::new(vec![(1, vec![pair()]), (9, vec![pair(), pair()])]).unwrap();
        // Generations 1 and 9 both end in 1 (mod 8): the newer takes it.
        assert!(out.to(1, 1).is_some());
        assert!(out.to(1, 2).is_none());
        assert!(out.to(2, 0).is_none());
    }
}
