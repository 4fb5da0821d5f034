//! HPACK decoding (RFC 7541 §3, §5, §6): a header block → fields handed to a [`FieldSink`].
//!
//! Owns the dynamic table the client's encoder fills and two scratch buffers (Huffman-decoded
//! values, names copied out of the dynamic table). Invariants: a block is decoded whole or the
//! connection is dead (any error is a COMPRESSION_ERROR connection error, since the tables are
//! then out of step); literal strings that are not Huffman-coded are handed over as slices of
//! the block, no copy; never-indexed fields are never inserted and keep their flag; a table
//! size update is only accepted before the block's first field and up to `max_table_size`
//! (our SETTINGS_HEADER_TABLE_SIZE).

use super::huffman;
use super::table::{DynamicTable, STATIC};

/// Where decoded fields go. The sink must take every field (a rejected request still has to
/// be decoded to keep the tables in step); it records its own verdict.
pub trait FieldSink {
    fn field(&mut self, name: &[u8], value: &[u8], never_indexed: bool);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpackError {
    Truncated,
    BadIndex,
    IntegerOverflow,
    Huffman,
    /// A dynamic table size update above our limit.
    TableSizeTooLarge,
    /// A dynamic table size update after the block's first field.
    TableSizeMisplaced,
}

impl HpackError {
    pub fn as_str(self) -> &'static str {
        match self {
            HpackError::Truncated => "truncated header block",
            HpackError::BadIndex => "header table index out of range",
            HpackError::IntegerOverflow => "HPACK integer overflow",
            HpackError::Huffman => "bad Huffman string",
            HpackError::TableSizeTooLarge => "dynamic table size update above the limit",
            HpackError::TableSizeMisplaced => "dynamic table size update after a field",
        }
    }
}

#[derive(Debug)]
pub struct Decoder {
    table: DynamicTable,
    max_table_size: usize,
    name: Vec<u8>,
    value: Vec<u8>,
}

/// Continuation bytes an integer may take: 4 × 7 bits above a prefix (< 2^28 + 2^8).
const MAX_INT_BYTES: u32 = 4;

/// Decodes an integer with an `n`-bit prefix (RFC 7541 §5.1) from the front of `buf`.
pub fn decode_int(buf: &mut &[u8], n: u8) -> Result<usize, HpackError> {
    let (&first, rest) = buf.split_first().ok_or(HpackError::Truncated)?;
    *buf = rest;
    let mask = (1usize << n) - 1;
    let mut value = usize::from(first) & mask;
    if value < mask {
        return Ok(value);
    }
    let mut shift = 0u32;
    loop {
        let (&b, rest) = buf.split_first().ok_or(HpackError::Truncated)?;
        *buf = rest;
        if shift >= 7 * MAX_INT_BYTES {
            return Err(HpackError::IntegerOverflow);
        }
        value += usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
    }
}

/// A string literal's raw bytes and whether they are Huffman-coded (RFC 7541 §5.2).
fn take_string<'a>(buf: &mut &'a [u8]) -> Result<(&'a [u8], bool), HpackError> {
    let huffman = buf.first().is_some_and(|b| b & 0x80 != 0);
    let len = decode_int(buf, 7)?;
    let s = buf.get(..len).ok_or(HpackError::Truncated)?;
    *buf = buf.get(len..).unwrap_or_default();
    Ok((s, huffman))
}

impl Decoder {
    pub fn new(max_table_size: usize) -> Self {
        Decoder {
            table: DynamicTable::new(max_table_size),
            max_table_size,
            name: Vec::new(),
            value: Vec::new(),
        }
    }

    /// The dynamic table (tests, stats).
    pub fn table(&self) -> &DynamicTable {
        &self.table
    }

    /// Decodes one complete header block.
    pub fn decode(&mut self, mut block: &[u8], sink: &mut impl FieldSink) -> Result<(), HpackError> {
        let mut first = true;
        while let Some(&b) = block.first() {
            if b & 0x80 != 0 {
                let index = decode_int(&mut block, 7)?;
                let (name, value) = self.indexed(index)?;
                sink.field(name, value, false);
            } else if b & 0xe0 == 0x20 {
                if !first {
                    return Err(HpackError::TableSizeMisplaced);
                }
                let size = decode_int(&mut block, 5)?;
                if size > self.max_table_size {
                    return Err(HpackError::TableSizeTooLarge);
                }
                self.table.set_max_size(size);
                continue;
            } else {
                let (prefix, index_it, never) = match b & 0xf0 {
                    0x40..=0x70 => (6, true, false),
                    0x10 => (4, false, true),
                    _ => (4, false, false),
                };
                self.literal(&mut block, prefix, index_it, never, sink)?;
            }
            first = false;
        }
        Ok(())
    }

    /// Static or dynamic entry `index` (1-based, RFC 7541 §2.3.3).
    fn indexed(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError::BadIndex),
            1..=61 => STATIC.get(index - 1).copied().ok_or(HpackError::BadIndex),
            _ => self.table.get(index - 62).ok_or(HpackError::BadIndex),
        }
    }

    fn literal(
        &mut self,
        block: &mut &[u8],
        prefix: u8,
        index_it: bool,
        never_indexed: bool,
        sink: &mut impl FieldSink,
    ) -> Result<(), HpackError> {
        let index = decode_int(block, prefix)?;
        // The name: a static one as is, a dynamic one copied (the insert below may evict it),
        // a literal one as a slice of the block or Huffman-decoded into `self.name`.
        let mut static_name: &[u8] = &[];
        let mut literal_name: &[u8] = &[];
        let name_in_scratch = match index {
            0 => {
                let (raw, huffman) = take_string(block)?;
                if huffman {
                    self.name.clear();
                    huffman::decode(raw, &mut self.name).map_err(|_| HpackError::Huffman)?;
                    true
                } else {
                    literal_name = raw;
                    false
                }
            }
            1..=61 => {
                static_name = STATIC.get(index - 1).map(|e| e.0).ok_or(HpackError::BadIndex)?;
                false
            }
            _ => {
                let (name, _) = self.table.get(index - 62).ok_or(HpackError::BadIndex)?;
                self.name.clear();
                self.name.extend_from_slice(name);
                true
            }
        };
        let name: &[u8] = if name_in_scratch {
            &self.name
        } else if index == 0 {
            literal_name
        } else {
            static_name
        };
        let (raw, huffman) = take_string(block)?;
        let value: &[u8] = if huffman {
            self.value.clear();
            huffman::decode(raw, &mut self.value).map_err(|_| HpackError::Huffman)?;
            &self.value
        } else {
            raw
        };
        sink.field(name, value, never_indexed);
        if index_it {
            self.table.insert(name, value);
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[derive(Default)]
    pub(crate) struct Collect(pub Vec<(Vec<u8>, Vec<u8>, bool)>);
    impl FieldSink for Collect {
        fn field(&mut self, name: &[u8], value: &[u8], never_indexed: bool) {
            self.0.push((name.to_vec(), value.to_vec(), never_indexed));
        }
    }

    fn fields(d: &mut Decoder, block: &str) -> Vec<(String, String)> {
        let mut c = Collect::default();
        d.decode(&hex(block), &mut c).unwrap();
        c.0.into_iter()
            .map(|(n, v, _)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
            .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }

    fn entries(d: &Decoder) -> Vec<(String, String)> {
        (0..d.table().len())
            .map(|i| {
                let (n, v) = d.table().get(i).unwrap();
                (
                    String::from_utf8(n.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn integers() {
        // RFC 7541 C.1: 10 in a 5-bit prefix, 1337 in a 5-bit prefix, 42 in 8 bits.
        let cases: [(&[u8], u8, usize); 5] = [
            (&[0x0a], 5, 10),
            (&[0x1f, 0x9a, 0x0a], 5, 1337),
            (&[0x2a], 8, 42),
            (&[0x1f, 0x00], 5, 31),
            (&[0xff, 0x80, 0x80, 0x80, 0x7f], 8, 255 + (0x7f << 21)),
        ];
        for (bytes, n, v) in cases {
            let mut b = bytes;
            assert_eq!(decode_int(&mut b, n), Ok(v));
            assert!(b.is_empty());
        }
        let mut b: &[u8] = &[0x1f, 0x80, 0x80, 0x80, 0x80, 0x01];
        assert_eq!(decode_int(&mut b, 5), Err(HpackError::IntegerOverflow));
        let mut b: &[u8] = &[0x1f, 0x80];
        assert_eq!(decode_int(&mut b, 5), Err(HpackError::Truncated));
        let mut b: &[u8] = &[];
        assert_eq!(decode_int(&mut b, 5), Err(HpackError::Truncated));
    }

    #[test]
    fn rfc7541_c2_literals_and_indexed() {
        let mut d = Decoder::new(4096);
        // C.2.1: literal with indexing.
        assert_eq!(
            fields(
                &mut d,
                "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"
            ),
            pairs(&[("custom-key", "custom-header")])
        );
        assert_eq!(d.table().size(), 55);
        // C.2.2: without indexing.
        let mut d = Decoder::new(4096);
        assert_eq!(
            fields(&mut d, "040c 2f73 616d 706c 652f 7061 7468"),
            pairs(&[(":path", "/sample/path")])
        );
        assert_eq!(d.table().len(), 0);
        // C.2.3: never indexed, flag kept.
        let mut c = Collect::default();
        d.decode(&hex("1008 7061 7373 776f 7264 0673 6563 7265 74"), &mut c)
            .unwrap();
        assert_eq!(c.0, vec![(b"password".to_vec(), b"secret".to_vec(), true)]);
        assert_eq!(d.table().len(), 0);
        // C.2.4: indexed.
        assert_eq!(fields(&mut d, "82"), pairs(&[(":method", "GET")]));
    }

    fn c3_c4(d: &mut Decoder, blocks: [&str; 3]) {
        assert_eq!(
            fields(d, blocks[0]),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ])
        );
        assert_eq!(d.table().size(), 57);
        assert_eq!(
            fields(d, blocks[1]),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache")
            ])
        );
        assert_eq!(d.table().size(), 110);
        assert_eq!(
            fields(d, blocks[2]),
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value")
            ])
        );
        assert_eq!(d.table().size(), 164);
        assert_eq!(
            entries(d),
            pairs(&[
                ("custom-key", "custom-value"),
                ("cache-control", "no-cache"),
                (":authority", "www.example.com")
            ])
        );
    }

    #[test]
    fn rfc7541_c3_requests() {
        c3_c4(
            &mut Decoder::new(4096),
            [
                "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "8286 84be 5808 6e6f 2d63 6163 6865",
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
            ],
        );
    }

    #[test]
    fn rfc7541_c4_requests_huffman() {
        c3_c4(
            &mut Decoder::new(4096),
            [
                "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
                "8286 84be 5886 a8eb 1064 9cbf",
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            ],
        );
    }

    fn c5_c6(d: &mut Decoder, blocks: [&str; 3]) {
        let date1 = "Mon, 21 Oct 2013 20:13:21 GMT";
        let date2 = "Mon, 21 Oct 2013 20:13:22 GMT";
        let loc = "https://www.example.com";
        assert_eq!(
            fields(d, blocks[0]),
            pairs(&[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", date1),
                ("location", loc)
            ])
        );
        assert_eq!(d.table().size(), 222);
        assert_eq!(
            fields(d, blocks[1]),
            pairs(&[
                (":status", "307"),
                ("cache-control", "private"),
                ("date", date1),
                ("location", loc)
            ])
        );
        assert_eq!(d.table().size(), 222);
        let cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
        assert_eq!(
            fields(d, blocks[2]),
            pairs(&[
                (":status", "200"),
                ("cache-control", "private"),
                ("date", date2),
                ("location", loc),
                ("content-encoding", "gzip"),
                ("set-cookie", cookie)
            ])
        );
        assert_eq!(d.table().size(), 215);
        assert_eq!(
            entries(d),
            pairs(&[("set-cookie", cookie), ("content-encoding", "gzip"), ("date", date2)])
        );
    }

    #[test]
    fn rfc7541_c5_responses() {
        c5_c6(
            &mut Decoder::new(256),
            [
                "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "4803 3330 37c1 c0bf",
                "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
            ],
        );
    }

    #[test]
    fn rfc7541_c6_responses_huffman() {
        c5_c6(
            &mut Decoder::new(256),
            [
                "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
                "4883 640e ff c1 c0 bf",
                "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            ],
        );
    }

    #[test]
    fn errors() {
        let mut d = Decoder::new(4096);
        let bad = |d: &mut Decoder, b: &[u8]| d.decode(b, &mut Collect::default()).unwrap_err();
        assert_eq!(bad(&mut d, &[0x80]), HpackError::BadIndex);
        assert_eq!(bad(&mut d, &[0xbe]), HpackError::BadIndex); // 62: empty dynamic table
        assert_eq!(bad(&mut d, &[0x7f, 0x00]), HpackError::BadIndex); // literal, name index 63
        assert_eq!(bad(&mut d, &[0x3f, 0xe2, 0x1f]), HpackError::TableSizeTooLarge); // 4097
        assert_eq!(bad(&mut d, &[0x82, 0x20]), HpackError::TableSizeMisplaced);
        assert_eq!(bad(&mut d, &[0x04, 0x85, 0x00]), HpackError::Truncated);
        assert_eq!(bad(&mut d, &[0x04, 0x81, 0x00]), HpackError::Huffman);
        assert_eq!(bad(&mut d, &[0x40]), HpackError::Truncated);
        // Size updates at the block start (several) are fine, then evict.
        d.decode(&hex("4003 6b65 7903 7661 6c"), &mut Collect::default())
            .unwrap();
        assert_eq!(d.table().len(), 1);
        d.decode(&[0x20, 0x3f, 0xe1, 0x1f, 0x82], &mut Collect::default())
            .unwrap();
        assert_eq!(d.table().len(), 0);
    }
}
