//! HPACK header tables (RFC 7541 §2.3): the static table and the decoder's dynamic table.
//!
//! Owns [`DynamicTable`]: entries' bytes live in one `Vec<u8>`, appended in insertion order,
//! with a queue of spans (oldest first). Invariants: the entries' bytes are contiguous and in
//! queue order, so evicting the oldest entry only moves the dead-prefix mark; the dead prefix
//! is dropped once it outweighs the live bytes. `size` is the RFC size (name + value + 32 per
//! entry) and never exceeds `max_size`. No allocation once the table has reached its size.

use std::collections::VecDeque;

/// RFC 7541 Appendix A; index 1 is `STATIC[0]`.
pub const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// RFC 7541 §4.1: an entry's size counts 32 octets of overhead.
pub const ENTRY_OVERHEAD: usize = 32;

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Offset in `bytes` plus `base` (so that dropping the dead prefix rewrites no entry).
    start: usize,
    name_len: usize,
    value_len: usize,
}

#[derive(Debug)]
pub struct DynamicTable {
    bytes: Vec<u8>,
    /// Logical offset of `bytes[0]`.
    base: usize,
    /// Bytes at the front of `bytes` no entry uses any more.
    dead: usize,
    entries: VecDeque<Entry>,
    size: usize,
    max_size: usize,
}

impl DynamicTable {
    pub fn new(max_size: usize) -> Self {
        DynamicTable {
            bytes: Vec::new(),
            base: 0,
            dead: 0,
            entries: VecDeque::new(),
            size: 0,
            max_size,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// RFC size of the entries.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Entry `index` (0 = newest).
    pub fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        let e = self
            .entries
            .len()
            .checked_sub(index + 1)
            .and_then(|i| self.entries.get(i))?;
        let at = e.start - self.base;
        let name = self.bytes.get(at..at + e.name_len)?;
        let value = self.bytes.get(at + e.name_len..at + e.name_len + e.value_len)?;
        Some((name, value))
    }

    pub fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    pub fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            // RFC 7541 §4.4: an entry larger than the table empties it and is not added.
            self.evict_to(0);
            return;
        }
        self.evict_to(self.max_size - size);
        if self.dead > 0 && self.dead >= self.bytes.len() - self.dead {
            self.bytes.drain(..self.dead);
            self.base += self.dead;
            self.dead = 0;
        }
        let start = self.base + self.bytes.len();
        self.bytes.extend_from_slice(name);
        self.bytes.extend_from_slice(value);
        self.entries.push_back(Entry {
            start,
            name_len: name.len(),
            value_len: value.len(),
        });
        self.size += size;
    }

    fn evict_to(&mut self, target: usize) {
        while self.size > target {
            let Some(e) = self.entries.pop_front() else { break };
            self.size -= e.name_len + e.value_len + ENTRY_OVERHEAD;
            self.dead += e.name_len + e.value_len;
        }
        if self.entries.is_empty() {
            self.bytes.clear();
            self.base = 0;
            self.dead = 0;
            self.size = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_oldest_and_keeps_bytes_bounded() {
        let mut t = DynamicTable::new(100);
        t.insert(b"aaaa", b"1111"); // 40
        t.insert(b"bbbb", b"2222"); // 80
        assert_eq!(t.get(0), Some((&b"bbbb"[..], &b"2222"[..])));
        assert_eq!(t.get(1), Some((&b"aaaa"[..], &b"1111"[..])));
        t.insert(b"cccc", b"3333");
        assert_eq!(t.len(), 2);
        assert_eq!(t.size(), 80);
        assert_eq!(t.get(1), Some((&b"bbbb"[..], &b"2222"[..])));
        assert_eq!(t.get(2), None);
        for i in 0..1000u32 {
            t.insert(b"k", i.to_string().as_bytes());
            assert!(t.bytes.len() <= 200, "{}", t.bytes.len());
        }
        assert_eq!(t.get(0), Some((&b"k"[..], &b"999"[..])));
        t.insert(&[b'x'; 100], b"");
        assert_eq!(t.len(), 0);
        t.insert(b"a", b"b");
        t.set_max_size(0);
        assert_eq!((t.len(), t.size()), (0, 0));
    }
}
