//! HPACK encoding of response heads, the cheap way (as HAProxy does): no dynamic table, no
//! Huffman. `:status` is an indexed field for the seven codes the static table has, else a
//! literal with the static name; other fields are literals without indexing, with a static
//! table name index when there is one.
//!
//! Invariants: the peer's decoder table is never touched (no inserts, no size updates), so
//! the peer's SETTINGS_HEADER_TABLE_SIZE never matters; names are written lowercase whatever
//! the caller passes (RFC 9113 §8.2.1).

use crate::http::h1::headers::is_named;

/// Appends an integer with an `n`-bit prefix (RFC 7541 §5.1); `flags` fill the prefix's
/// high bits.
pub fn encode_int(dst: &mut Vec<u8>, n: u8, flags: u8, value: usize) {
    let mask = (1usize << n) - 1;
    if value < mask {
        dst.push(flags | value as u8);
        return;
    }
    dst.push(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        dst.push((rest & 0x7f) as u8 | 0x80);
        rest >>= 7;
    }
    dst.push(rest as u8);
}

fn encode_raw_string(dst: &mut Vec<u8>, s: &[u8]) {
    encode_int(dst, 7, 0, s.len());
    dst.extend_from_slice(s);
}

/// `:status`.
pub fn encode_status(dst: &mut Vec<u8>, status: u16) {
    let index = match status {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => 0,
    };
    if index != 0 {
        dst.push(0x80 | index);
        return;
    }
    // Literal without indexing, name `:status` (8), three digits.
    let s = status.min(999);
    dst.extend_from_slice(&[
        0x08,
        3,
        b'0' + (s / 100) as u8,
        b'0' + (s / 10 % 10) as u8,
        b'0' + (s % 10) as u8,
    ]);
}

/// The static table index of a response field name (a token), in any case: the candidates of its
/// length only, so most names are one or two comparisons.
fn static_name(name: &[u8]) -> Option<u8> {
    let candidates: &[(&[u8], u8)] = match name.len() {
        3 => &[(b"age", 21), (b"via", 60)],
        4 => &[
            (b"date", 33),
            (b"etag", 34),
            (b"from", 37),
            (b"host", 38),
            (b"link", 45),
            (b"vary", 59),
        ],
        5 => &[(b"allow", 22), (b"range", 50)],
        6 => &[(b"accept", 19), (b"cookie", 32), (b"expect", 35), (b"server", 54)],
        7 => &[(b"expires", 36), (b"referer", 51), (b"refresh", 52)],
        8 => &[(b"if-match", 39), (b"if-range", 42), (b"location", 46)],
        10 => &[(b"set-cookie", 55), (b"user-agent", 58)],
        11 => &[(b"retry-after", 53)],
        12 => &[(b"content-type", 31), (b"max-forwards", 47)],
        13 => &[
            (b"accept-ranges", 18),
            (b"authorization", 23),
            (b"cache-control", 24),
            (b"content-range", 30),
            (b"if-none-match", 41),
            (b"last-modified", 44),
        ],
        14 => &[(b"accept-charset", 15), (b"content-length", 28)],
        15 => &[(b"accept-encoding", 16), (b"accept-language", 17)],
        16 => &[
            (b"content-encoding", 26),
            (b"content-language", 27),
            (b"content-location", 29),
            (b"www-authenticate", 61),
        ],
        17 => &[(b"if-modified-since", 40), (b"transfer-encoding", 57)],
        18 => &[(b"proxy-authenticate", 48)],
        19 => &[
            (b"content-disposition", 25),
            (b"if-unmodified-since", 43),
            (b"proxy-authorization", 49),
        ],
        25 => &[(b"strict-transport-security", 56)],
        27 => &[(b"access-control-allow-origin", 20)],
        _ => return None,
    };
    candidates
        .iter()
        .find(|(known, _)| is_named(name, known))
        .map(|&(_, index)| index)
}

/// A regular field as a literal without indexing, its name lowercased on the way.
pub fn encode_field(dst: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    match static_name(name) {
        Some(index) => encode_int(dst, 4, 0, usize::from(index)),
        None => {
            dst.push(0);
            encode_int(dst, 7, 0, name.len());
            dst.extend(name.iter().map(u8::to_ascii_lowercase));
        }
    }
    encode_raw_string(dst, value);
}

#[cfg(test)]
mod tests {
    use super::super::decoder::tests::Collect;
    use super::super::decoder::{Decoder, decode_int};
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_static_name_is_found_in_any_case() {
        for (i, (name, _)) in super::super::table::STATIC.iter().enumerate().skip(14) {
            let index = u8::try_from(i + 1).unwrap();
            assert_eq!(static_name(name), Some(index), "{}", String::from_utf8_lossy(name));
            assert_eq!(static_name(&name.to_ascii_uppercase()), Some(index));
        }
        assert_eq!(static_name(b"x-served-by"), None);
        assert_eq!(static_name(b"content-lengths"), None);
    }

    #[test]
    fn status_codes() {
        let mut d = Decoder::new(4096);
        for status in [
            100u16, 101, 103, 200, 201, 204, 206, 301, 304, 400, 404, 431, 500, 502, 503, 599,
        ] {
            let mut out = Vec::new();
            encode_status(&mut out, status);
            if [200, 204, 206, 304, 400, 404, 500].contains(&status) {
                assert_eq!(out.len(), 1, "{status} indexed");
            }
            let mut c = Collect::default();
            d.decode(&out, &mut c).unwrap();
            assert_eq!(c.0, vec![(b":status".to_vec(), status.to_string().into_bytes(), false)]);
        }
        assert_eq!(d.table().len(), 0);
    }

    #[test]
    fn integer_edges_round_trip() {
        for n in 1..=8u8 {
            for v in [
                0usize,
                1,
                (1 << n) - 2,
                (1 << n) - 1,
                1 << n,
                127,
                128,
                255,
                256,
                16383,
                16384,
                1 << 20,
                (1 << 28) - 1,
            ] {
                let mut out = Vec::new();
                encode_int(&mut out, n, 0, v);
                let mut b = &out[..];
                assert_eq!(decode_int(&mut b, n), Ok(v), "n={n} v={v}");
                assert!(b.is_empty());
            }
        }
    }

    proptest! {
        #[test]
        fn fields_round_trip(
            status in 100u16..1000,
            fields in proptest::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,30}", proptest::collection::vec(any::<u8>(), 0..300)), 0..20),
        ) {
            let mut out = Vec::new();
            encode_status(&mut out, status);
            for (n, v) in &fields {
                encode_field(&mut out, n.as_bytes(), v);
            }
            let mut d = Decoder::new(4096);
            let mut c = Collect::default();
            d.decode(&out, &mut c).unwrap();
            let mut want = vec![(b":status".to_vec(), status.to_string().into_bytes(), false)];
            want.extend(fields.iter().map(|(n, v)| (n.to_ascii_lowercase().into_bytes(), v.clone(), false)));
            prop_assert_eq!(c.0, want);
            prop_assert_eq!(d.table().len(), 0);
        }
    }
}
