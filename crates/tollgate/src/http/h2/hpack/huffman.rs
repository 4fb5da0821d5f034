//! The HPACK Huffman code (RFC 7541 §5.2 and Appendix B).
//!
//! Owns the code table (data of the RFC: code and bit length of the 256 octets and EOS) and a
//! nibble-at-a-time decoding state machine built from it at compile time (256 states, the
//! inner nodes of the code tree, × 16 nibbles). Invariants: a decoded string never contains
//! EOS, and it ends on a code boundary followed by at most 7 padding bits, all ones
//! (RFC 7541 §5.2); anything else is an error. Encoding exists for tests and length math.

/// (code, bit length) of octets 0..=255 and of EOS (256), RFC 7541 Appendix B.
const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13),
    (0x7fffd8, 23),
    (0xfffffe2, 28),
    (0xfffffe3, 28), // 0
    (0xfffffe4, 28),
    (0xfffffe5, 28),
    (0xfffffe6, 28),
    (0xfffffe7, 28), // 4
    (0xfffffe8, 28),
    (0xffffea, 24),
    (0x3ffffffc, 30),
    (0xfffffe9, 28), // 8
    (0xfffffea, 28),
    (0x3ffffffd, 30),
    (0xfffffeb, 28),
    (0xfffffec, 28), // 12
    (0xfffffed, 28),
    (0xfffffee, 28),
    (0xfffffef, 28),
    (0xffffff0, 28), // 16
    (0xffffff1, 28),
    (0xffffff2, 28),
    (0x3ffffffe, 30),
    (0xffffff3, 28), // 20
    (0xffffff4, 28),
    (0xffffff5, 28),
    (0xffffff6, 28),
    (0xffffff7, 28), // 24
    (0xffffff8, 28),
    (0xffffff9, 28),
    (0xffffffa, 28),
    (0xffffffb, 28), // 28
    (0x14, 6),
    (0x3f8, 10),
    (0x3f9, 10),
    (0xffa, 12), // 32
    (0x1ff9, 13),
    (0x15, 6),
    (0xf8, 8),
    (0x7fa, 11), // 36
    (0x3fa, 10),
    (0x3fb, 10),
    (0xf9, 8),
    (0x7fb, 11), // 40
    (0xfa, 8),
    (0x16, 6),
    (0x17, 6),
    (0x18, 6), // 44
    (0x0, 5),
    (0x1, 5),
    (0x2, 5),
    (0x19, 6), // 48
    (0x1a, 6),
    (0x1b, 6),
    (0x1c, 6),
    (0x1d, 6), // 52
    (0x1e, 6),
    (0x1f, 6),
    (0x5c, 7),
    (0xfb, 8), // 56
    (0x7ffc, 15),
    (0x20, 6),
    (0xffb, 12),
    (0x3fc, 10), // 60
    (0x1ffa, 13),
    (0x21, 6),
    (0x5d, 7),
    (0x5e, 7), // 64
    (0x5f, 7),
    (0x60, 7),
    (0x61, 7),
    (0x62, 7), // 68
    (0x63, 7),
    (0x64, 7),
    (0x65, 7),
    (0x66, 7), // 72
    (0x67, 7),
    (0x68, 7),
    (0x69, 7),
    (0x6a, 7), // 76
    (0x6b, 7),
    (0x6c, 7),
    (0x6d, 7),
    (0x6e, 7), // 80
    (0x6f, 7),
    (0x70, 7),
    (0x71, 7),
    (0x72, 7), // 84
    (0xfc, 8),
    (0x73, 7),
    (0xfd, 8),
    (0x1ffb, 13), // 88
    (0x7fff0, 19),
    (0x1ffc, 13),
    (0x3ffc, 14),
    (0x22, 6), // 92
    (0x7ffd, 15),
    (0x3, 5),
    (0x23, 6),
    (0x4, 5), // 96
    (0x24, 6),
    (0x5, 5),
    (0x25, 6),
    (0x26, 6), // 100
    (0x27, 6),
    (0x6, 5),
    (0x74, 7),
    (0x75, 7), // 104
    (0x28, 6),
    (0x29, 6),
    (0x2a, 6),
    (0x7, 5), // 108
    (0x2b, 6),
    (0x76, 7),
    (0x2c, 6),
    (0x8, 5), // 112
    (0x9, 5),
    (0x2d, 6),
    (0x77, 7),
    (0x78, 7), // 116
    (0x79, 7),
    (0x7a, 7),
    (0x7b, 7),
    (0x7ffe, 15), // 120
    (0x7fc, 11),
    (0x3ffd, 14),
    (0x1ffd, 13),
    (0xffffffc, 28), // 124
    (0xfffe6, 20),
    (0x3fffd2, 22),
    (0xfffe7, 20),
    (0xfffe8, 20), // 128
    (0x3fffd3, 22),
    (0x3fffd4, 22),
    (0x3fffd5, 22),
    (0x7fffd9, 23), // 132
    (0x3fffd6, 22),
    (0x7fffda, 23),
    (0x7fffdb, 23),
    (0x7fffdc, 23), // 136
    (0x7fffdd, 23),
    (0x7fffde, 23),
    (0xffffeb, 24),
    (0x7fffdf, 23), // 140
    (0xffffec, 24),
    (0xffffed, 24),
    (0x3fffd7, 22),
    (0x7fffe0, 23), // 144
    (0xffffee, 24),
    (0x7fffe1, 23),
    (0x7fffe2, 23),
    (0x7fffe3, 23), // 148
    (0x7fffe4, 23),
    (0x1fffdc, 21),
    (0x3fffd8, 22),
    (0x7fffe5, 23), // 152
    (0x3fffd9, 22),
    (0x7fffe6, 23),
    (0x7fffe7, 23),
    (0xffffef, 24), // 156
    (0x3fffda, 22),
    (0x1fffdd, 21),
    (0xfffe9, 20),
    (0x3fffdb, 22), // 160
    (0x3fffdc, 22),
    (0x7fffe8, 23),
    (0x7fffe9, 23),
    (0x1fffde, 21), // 164
    (0x7fffea, 23),
    (0x3fffdd, 22),
    (0x3fffde, 22),
    (0xfffff0, 24), // 168
    (0x1fffdf, 21),
    (0x3fffdf, 22),
    (0x7fffeb, 23),
    (0x7fffec, 23), // 172
    (0x1fffe0, 21),
    (0x1fffe1, 21),
    (0x3fffe0, 22),
    (0x1fffe2, 21), // 176
    (0x7fffed, 23),
    (0x3fffe1, 22),
    (0x7fffee, 23),
    (0x7fffef, 23), // 180
    (0xfffea, 20),
    (0x3fffe2, 22),
    (0x3fffe3, 22),
    (0x3fffe4, 22), // 184
    (0x7ffff0, 23),
    (0x3fffe5, 22),
    (0x3fffe6, 22),
    (0x7ffff1, 23), // 188
    (0x3ffffe0, 26),
    (0x3ffffe1, 26),
    (0xfffeb, 20),
    (0x7fff1, 19), // 192
    (0x3fffe7, 22),
    (0x7ffff2, 23),
    (0x3fffe8, 22),
    (0x1ffffec, 25), // 196
    (0x3ffffe2, 26),
    (0x3ffffe3, 26),
    (0x3ffffe4, 26),
    (0x7ffffde, 27), // 200
    (0x7ffffdf, 27),
    (0x3ffffe5, 26),
    (0xfffff1, 24),
    (0x1ffffed, 25), // 204
    (0x7fff2, 19),
    (0x1fffe3, 21),
    (0x3ffffe6, 26),
    (0x7ffffe0, 27), // 208
    (0x7ffffe1, 27),
    (0x3ffffe7, 26),
    (0x7ffffe2, 27),
    (0xfffff2, 24), // 212
    (0x1fffe4, 21),
    (0x1fffe5, 21),
    (0x3ffffe8, 26),
    (0x3ffffe9, 26), // 216
    (0xffffffd, 28),
    (0x7ffffe3, 27),
    (0x7ffffe4, 27),
    (0x7ffffe5, 27), // 220
    (0xfffec, 20),
    (0xfffff3, 24),
    (0xfffed, 20),
    (0x1fffe6, 21), // 224
    (0x3fffe9, 22),
    (0x1fffe7, 21),
    (0x1fffe8, 21),
    (0x7ffff3, 23), // 228
    (0x3fffea, 22),
    (0x3fffeb, 22),
    (0x1ffffee, 25),
    (0x1ffffef, 25), // 232
    (0xfffff4, 24),
    (0xfffff5, 24),
    (0x3ffffea, 26),
    (0x7ffff4, 23), // 236
    (0x3ffffeb, 26),
    (0x7ffffe6, 27),
    (0x3ffffec, 26),
    (0x3ffffed, 26), // 240
    (0x7ffffe7, 27),
    (0x7ffffe8, 27),
    (0x7ffffe9, 27),
    (0x7ffffea, 27), // 244
    (0x7ffffeb, 27),
    (0xffffffe, 28),
    (0x7ffffec, 27),
    (0x7ffffed, 27), // 248
    (0x7ffffee, 27),
    (0x7ffffef, 27),
    (0x7fffff0, 27),
    (0x3ffffee, 26),  // 252
    (0x3fffffff, 30), // 256
];

const EOS: u16 = 256;
/// A tree child that is a symbol (else an inner node's index).
const LEAF: u16 = 0x8000;
/// Inner nodes of a full binary tree with 257 leaves.
const NODES: usize = 256;

/// The code tree: `[node][bit]` → inner node index or `LEAF | symbol`. Node 0 is the root,
/// never a child, so 0 means "not yet built". Compile-time only: a bad table fails the build.
#[allow(clippy::indexing_slicing)]
const fn build_tree() -> [[u16; 2]; NODES] {
    let mut tree = [[0u16; 2]; NODES];
    let mut next = 1usize;
    let mut sym = 0usize;
    while sym < CODES.len() {
        let (code, len) = CODES[sym];
        let mut node = 0usize;
        let mut bit = len;
        while bit > 1 {
            bit -= 1;
            let b = ((code >> bit) & 1) as usize;
            if tree[node][b] == 0 {
                tree[node][b] = next as u16;
                next += 1;
            }
            assert!(tree[node][b] & LEAF == 0, "a code is the prefix of another");
            node = tree[node][b] as usize;
        }
        assert!(tree[node][(code & 1) as usize] == 0, "two symbols share a code");
        tree[node][(code & 1) as usize] = LEAF | sym as u16;
        sym += 1;
    }
    assert!(next == NODES, "the code is not complete");
    tree
}

/// A transition: the next state in bits 0..8, an emitted octet in bits 8..16 when `EMIT`.
const EMIT: u32 = 1 << 16;
/// The nibble completes EOS: the string is invalid.
const FAIL: u32 = 1 << 17;

/// `[state * 16 + nibble]` → transition. At most one octet per nibble (the shortest code
/// has 5 bits).
#[allow(clippy::indexing_slicing)]
const fn build_decode() -> [u32; NODES * 16] {
    let tree = build_tree();
    let mut table = [0u32; NODES * 16];
    let mut state = 0usize;
    while state < NODES {
        let mut nibble = 0usize;
        while nibble < 16 {
            let mut node = state;
            let mut entry = 0u32;
            let mut i = 0;
            while i < 4 {
                let child = tree[node][(nibble >> (3 - i)) & 1];
                if child & LEAF != 0 {
                    let sym = child & !LEAF;
                    if sym == EOS {
                        entry |= FAIL;
                    } else {
                        entry |= EMIT | ((sym as u32) << 8);
                    }
                    node = 0;
                } else {
                    node = child as usize;
                }
                i += 1;
            }
            table[state * 16 + nibble] = entry | node as u32;
            nibble += 1;
        }
        state += 1;
    }
    table
}

/// States a string may end in: the root, or up to 7 one-bits below it (EOS's prefix).
#[allow(clippy::indexing_slicing)]
const fn build_accept() -> [bool; NODES] {
    let tree = build_tree();
    let mut accept = [false; NODES];
    let mut node = 0usize;
    let mut depth = 0;
    accept[0] = true;
    while depth < 7 {
        node = tree[node][1] as usize;
        accept[node] = true;
        depth += 1;
    }
    accept
}

static DECODE: [u32; NODES * 16] = build_decode();
static ACCEPT: [bool; NODES] = build_accept();

/// A Huffman-coded string that is not one (RFC 7541 §5.2: EOS inside, bad padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HuffmanError;

/// Appends the decoding of `src` to `dst`.
pub fn decode(src: &[u8], dst: &mut Vec<u8>) -> Result<(), HuffmanError> {
    dst.reserve(src.len() + src.len() / 2);
    let mut state = 0usize;
    for &byte in src {
        for nibble in [byte >> 4, byte & 0xf] {
            let entry = DECODE.get(state << 4 | usize::from(nibble)).copied().unwrap_or(FAIL);
            if entry & FAIL != 0 {
                return Err(HuffmanError);
            }
            if entry & EMIT != 0 {
                dst.push((entry >> 8) as u8);
            }
            state = (entry & 0xff) as usize;
        }
    }
    if ACCEPT.get(state).copied().unwrap_or(false) {
        Ok(())
    } else {
        Err(HuffmanError)
    }
}

/// Bytes `src` takes Huffman-coded.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src
        .iter()
        .map(|&b| CODES.get(usize::from(b)).map_or(0, |c| usize::from(c.1)))
        .sum();
    bits.div_ceil(8)
}

/// Appends the Huffman coding of `src` to `dst`, padded with ones.
pub fn encode(src: &[u8], dst: &mut Vec<u8>) {
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in src {
        let (code, len) = CODES.get(usize::from(b)).copied().unwrap_or((0, 0));
        acc = acc << len | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            dst.push((acc >> bits) as u8);
        }
        acc &= (1u64 << bits) - 1;
    }
    if bits > 0 {
        dst.push((acc << (8 - bits) | (0xff >> bits)) as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn every_octet_round_trips_alone_and_together() {
        let mut all = Vec::new();
        for b in 0..=255u8 {
            let mut enc = Vec::new();
            encode(&[b], &mut enc);
            assert_eq!(enc.len(), encoded_len(&[b]));
            let mut dec = Vec::new();
            decode(&enc, &mut dec).unwrap();
            assert_eq!(dec, [b], "octet {b}");
            all.push(b);
        }
        all.extend((0..=255u8).rev());
        let mut enc = Vec::new();
        encode(&all, &mut enc);
        let mut dec = Vec::new();
        decode(&enc, &mut dec).unwrap();
        assert_eq!(dec, all);
    }

    #[test]
    fn rfc7541_c4_strings() {
        for (coded, plain) in [
            ("f1e3 c2e5 f23a 6ba0 ab90 f4ff", "www.example.com"),
            ("a8eb 1064 9cbf", "no-cache"),
            ("25a8 49e9 5ba9 7d7f", "custom-key"),
            ("25a8 49e9 5bb8 e8b4 bf", "custom-value"),
            ("6402", "302"),
            ("aec3 771a 4b", "private"),
            (
                "d07a be94 1054 d444 a820 0595 040b 8166 e082 a62d 1bff",
                "Mon, 21 Oct 2013 20:13:21 GMT",
            ),
            ("9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3", "https://www.example.com"),
        ] {
            let mut dec = Vec::new();
            decode(&hex(coded), &mut dec).unwrap();
            assert_eq!(dec, plain.as_bytes());
            let mut enc = Vec::new();
            encode(plain.as_bytes(), &mut enc);
            assert_eq!(enc, hex(coded), "{plain}");
        }
    }

    #[test]
    fn padding_and_eos_are_checked() {
        // "0" is 00000 (5 bits): padding 111 is fine, 000 is not.
        let mut dec = Vec::new();
        assert_eq!(decode(&[0b0000_0111], &mut dec), Ok(()));
        assert_eq!(dec, b"0");
        assert_eq!(decode(&[0b0000_0000], &mut Vec::new()), Err(HuffmanError));
        assert_eq!(decode(&[0b0000_0101], &mut Vec::new()), Err(HuffmanError));
        // A whole byte of padding (8 ones) is too long.
        assert_eq!(decode(&[0b0000_0111, 0xff], &mut Vec::new()), Err(HuffmanError));
        assert_eq!(decode(&[0xff], &mut Vec::new()), Err(HuffmanError));
        // EOS (30 ones) inside the string.
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0xff], &mut Vec::new()), Err(HuffmanError));
        assert_eq!(decode(&[], &mut Vec::new()), Ok(()));
    }
}
