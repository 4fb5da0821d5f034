//! Connection IDs that name their owner (the QUIC-LB idea, RFC 9000 §5.1 leaves the layout to
//! the server): every CID a worker thread issues says which generation and thread own the
//! connection, so a datagram read on any socket of the group can be sent to its owner, and
//! the kernel's steering program (`tollgate_sys::reuseport`) can pick the owner's socket by
//! itself.
//!
//! Layout, `LEN` = 12 bytes: byte 0 = `[generation mod 8: 3 bits][thread: 5 bits]`, bytes
//! 1..8 random, bytes 8..12 a keyed tag over bytes 0..8. The tag tells a CID we issued from
//! one a client chose (an Initial's first destination CID) without any shared table, and
//! lets the endpoint drop short-header packets for CIDs nobody here issued before it would
//! answer them with a stateless reset.

use std::hash::Hasher;
use std::time::Duration;

/// The length of every connection ID tollgate issues (quinn parses short headers with it).
pub(crate) const LEN: usize = 12;

/// Threads byte 0 can name (5 bits); a worker beyond them issues CIDs with no owner bits
/// and relies on the kernel's hash alone (`check` refuses quic with more workers).
pub(crate) const MAX_THREADS: usize = 32;

/// The tag key: the master makes one and gives it to every generation, so any generation
/// can tell a CID of another (`TagKey::random` where there is no master).
#[derive(Debug, Clone)]
pub(crate) struct TagKey([u8; 16]);

impl TagKey {
    pub(crate) fn random() -> std::io::Result<Self> {
        let mut k = [0u8; 16];
        aws_lc_rs::rand::fill(&mut k).map_err(|_| std::io::Error::other("no random source"))?;
        Ok(TagKey(k))
    }

    pub(crate) fn from_bytes(k: [u8; 16]) -> Self {
        TagKey(k)
    }

    fn tag(&self, head: &[u8]) -> [u8; 4] {
        let mut h = siphasher::sip::SipHasher13::new_with_key(&self.0);
        h.write(head);
        let [a, b, c, d, ..] = h.finish().to_le_bytes();
        [a, b, c, d]
    }

    /// `(generation mod 8, thread)` of a CID this process issued; `None` for any other.
    pub(crate) fn owner(&self, cid: &[u8]) -> Option<(u8, usize)> {
        let (head, tag) = (cid.get(..8)?, cid.get(8..LEN)?);
        if cid.len() != LEN || self.tag(head) != tag {
            return None;
        }
        let first = *head.first()?;
        Some((first >> 5, usize::from(first & 0x1f)))
    }
}

/// The destination connection ID of a QUIC packet (RFC 9000 §17): a long header carries its
/// length; a short header carries one of ours, `LEN` bytes.
pub(crate) fn destination(packet: &[u8]) -> Option<&[u8]> {
    let first = *packet.first()?;
    if first & 0x80 != 0 {
        let len = usize::from(*packet.get(5)?);
        packet.get(6..6 + len)
    } else {
        packet.get(1..1 + LEN)
    }
}

/// One worker thread's CID generator (quinn asks it for every CID it issues).
pub(crate) struct Generator {
    first: u8,
    key: TagKey,
}

impl Generator {
    pub(crate) fn new(generation: u64, thread: usize, key: TagKey) -> Self {
        let thread = u8::try_from(thread % MAX_THREADS).unwrap_or(0);
        let generation = u8::try_from(generation % 8).unwrap_or(0);
        Generator {
            first: (generation << 5) | thread,
            key,
        }
    }
}

impl quinn::ConnectionIdGenerator for Generator {
    fn generate_cid(&mut self) -> quinn::ConnectionId {
        let mut b = [0u8; LEN];
        b[0] = self.first;
        // 56 random bits: unlinkable CIDs (RFC 9000 §5.1). aws-lc's generator cannot fail
        // once initialised; should it, the CID is still unique enough with a counter-free
        // zero tail, and the tag still proves it ours.
        let _ = aws_lc_rs::rand::fill(&mut b[1..8]);
        let tag = self.key.tag(&b[..8]);
        b[8..LEN].copy_from_slice(&tag);
        quinn::ConnectionId::new(&b)
    }

    /// Only this generation's: a CID of another generation reaching this endpoint (read
    /// before a reload's handover) is dropped quietly, never answered with a stateless
    /// reset that would end a connection the other generation serves.
    fn validate(&self, cid: &quinn::ConnectionId) -> Result<(), quinn_proto::InvalidCid> {
        match self.key.owner(cid) {
            Some((generation, _)) if generation == self.first >> 5 => Ok(()),
            _ => Err(quinn_proto::InvalidCid),
        }
    }

    fn cid_len(&self) -> usize {
        LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use quinn::ConnectionIdGenerator as _;

    #[test]
    fn a_cid_names_its_generation_and_thread_and_only_ours_pass() {
        let key = TagKey::random().unwrap();
        let mut g = Generator::new(9, 5, key.clone());
        let cid = g.generate_cid();
        assert_eq!(cid.len(), LEN);
        assert_eq!(key.owner(&cid), Some((1, 5)));
        assert!(g.validate(&cid).is_ok());
        // Another generation's CID under the same key: not valid here.
        let other = Generator::new(10, 5, key.clone()).generate_cid();
        assert_eq!(key.owner(&other), Some((2, 5)));
        assert!(g.validate(&other).is_err());
        // Another process's key, a flipped byte, a client's own CID: not ours.
        assert_eq!(TagKey::random().unwrap().owner(&cid), None);
        let mut bent = cid.to_vec();
        bent[3] ^= 1;
        assert_eq!(key.owner(&bent), None);
        assert_eq!(key.owner(&[0u8; 8]), None);
        assert_eq!(key.owner(&[]), None);
    }

    #[test]
    fn destination_reads_long_and_short_headers_and_refuses_short_packets() {
        let mut long = vec![0xc0, 0, 0, 0, 1, 4, 9, 9, 9, 9, 0];
        assert_eq!(destination(&long), Some(&[9u8, 9, 9, 9][..]));
        long.truncate(8);
        assert_eq!(destination(&long), None);
        let mut short = vec![0x40];
        short.extend_from_slice(&[7u8; LEN]);
        assert_eq!(destination(&short), Some(&[7u8; LEN][..]));
        assert_eq!(destination(&short[..5]), None);
        assert_eq!(destination(&[]), None);
    }
}
