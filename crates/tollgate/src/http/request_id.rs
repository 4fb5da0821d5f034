//! Request IDs: generating one (a UUIDv7, RFC 9562 §5.7) and judging one a client sent.
//!
//! Why UUIDv7 and not 128 random bits in hex (nginx's `$request_id`): its first 48 bits are
//! the time in milliseconds, so IDs sort by time and a log search can start from the right
//! moment; it is the shape log pipelines, databases and Envoy's `x-request-id` tooling
//! already parse; and its 74 random bits make two equal IDs in the same millisecond about as
//! likely as in 128 random bits over a day. An ID is no secret (it is logged and sent to
//! servers and clients), so the random bits come from a fast per-thread generator seeded
//! once from the system's cryptographic one, not from that generator per request.
//!
//! Invariants: generating writes into a fixed array (no allocation); an ID this module
//! accepts from a client is 1 to [`MAX_LEN`] bytes of a conservative character set that
//! cannot break a header, a log line, JSON or a shell word.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

/// Longest ID kept from a client (HAProxy's `unique-id` header is free-form; this bounds
/// what reaches logs and servers).
pub const MAX_LEN: usize = 128;

/// Bytes of a UUID in its text form (8-4-4-4-12 hex digits).
pub const UUID_LEN: usize = 36;

/// A generated ID: its text, in place.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RequestId([u8; UUID_LEN]);

impl RequestId {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits and '-' are ever written.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request's ID as it is sent and logged, generated or kept from the client: bytes in
/// place, reused from request to request (one per connection, made at its first request).
pub struct IdSlot {
    len: u8,
    buf: [u8; MAX_LEN],
}

impl Default for IdSlot {
    fn default() -> Self {
        IdSlot {
            len: 0,
            buf: [0; MAX_LEN],
        }
    }
}

impl IdSlot {
    /// Keeps `value` (a client's, judged by [`is_acceptable`]); `false`, and nothing kept,
    /// if it is not.
    pub fn keep(&mut self, value: &[u8]) -> bool {
        if !is_acceptable(value) {
            return false;
        }
        let Some(dst) = self.buf.get_mut(..value.len()) else {
            return false;
        };
        dst.copy_from_slice(value);
        self.len = u8::try_from(value.len()).unwrap_or(0);
        true
    }

    /// The request's ID: the client's own when it is `trusted`, `sent` holds exactly one
    /// value of the ID field and that value is acceptable; else a new one.
    pub fn assign<'v>(&mut self, trusted: bool, mut sent: impl Iterator<Item = &'v [u8]>, now: SystemTime) {
        let kept = trusted
            && match (sent.next(), sent.next()) {
                (Some(value), None) => self.keep(value),
                _ => false,
            };
        if !kept {
            self.generate(now);
        }
    }

    /// Writes a new ID for a request that began at `now`.
    pub fn generate(&mut self, now: SystemTime) {
        let id = generate(now);
        if let Some(dst) = self.buf.get_mut(..UUID_LEN) {
            dst.copy_from_slice(id.as_bytes());
            self.len = UUID_LEN as u8;
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..usize::from(self.len)).unwrap_or_default()
    }

    /// The same ID as `other` (copied: `show sessions` reads its own copy).
    pub fn copy_from(&mut self, other: &IdSlot) {
        let n = usize::from(other.len);
        if let (Some(dst), Some(src)) = (self.buf.get_mut(..n), other.buf.get(..n)) {
            dst.copy_from_slice(src);
            self.len = other.len;
        }
    }

    /// No ID (a stream refused before its head was read has none).
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

impl std::fmt::Debug for IdSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

thread_local! {
    /// wyrand's state, seeded at the thread's first ID.
    static STATE: Cell<u64> = const { Cell::new(0) };
}

/// wyrand (Wang Yi): one multiply per 64 bits, passes BigCrush and PractRand; the state
/// only walks an odd-increment sequence, so any seed works.
fn next_u64() -> u64 {
    STATE.with(|s| {
        let mut state = s.get();
        if state == 0 {
            state = seed();
        }
        state = state.wrapping_add(0xa076_1d64_78bd_642f);
        s.set(state);
        let t = u128::from(state).wrapping_mul(u128::from(state ^ 0xe703_7ed1_a0b4_28db));
        // wyrand folds the 128-bit product into 64 bits: the truncations are the point.
        ((t >> 64) as u64) ^ (t as u64)
    })
}

/// 64 bits from the thread's generator (`next_u64`): unique, not unguessable.
pub fn random_u64() -> u64 {
    next_u64()
}

/// A uniform draw in `0..1_000_000`, for sampling (`[log] sample`): the thread's generator,
/// not the cryptographic one (a sample needs to be fair, not unguessable).
pub fn sample_draw() -> u32 {
    // The high 32 bits scaled: bias below one part in 4,000.
    (((next_u64() >> 32) * 1_000_000) >> 32) as u32
}

/// A seed from the cryptographic generator; the time and a stack address if that fails
/// (IDs need to be unique, not unguessable).
fn seed() -> u64 {
    let mut bytes = [0u8; 8];
    if aws_lc_rs::rand::fill(&mut bytes).is_ok() {
        return u64::from_le_bytes(bytes) | 1;
    }
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()) as u64;
    let local = 0u8;
    let addr = std::ptr::from_ref(&local) as usize as u64;
    (nanos ^ addr.rotate_left(32)) | 1
}

/// A new UUIDv7 for a request that began at `now`: 48 bits of Unix milliseconds, the
/// version (7), 12 random bits, the variant (`10`), 62 random bits.
pub fn generate(now: SystemTime) -> RequestId {
    let millis = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis()) & 0xffff_ffff_ffff;
    let random = (u128::from(next_u64()) << 64 | u128::from(next_u64())) & ((1 << 80) - 1);
    let mut v = millis << 80 | random;
    v = (v & !(0xf << 76)) | (0x7 << 76);
    v = (v & !(0x3 << 62)) | (0x2 << 62);
    RequestId(text(v))
}

/// `v` as 8-4-4-4-12 lowercase hex digits (a byte at a time: a u128 shift per digit
/// costs more than the rest of the ID).
fn text(v: u128) -> [u8; UUID_LEN] {
    let mut out = [b'-'; UUID_LEN];
    let mut at = 0;
    for (i, byte) in v.to_be_bytes().into_iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        if let Some(pair) = out.get_mut(at..at + 2) {
            pair.copy_from_slice(&hex_pair(byte));
        }
        at += 2;
    }
    out
}

/// A byte as two lowercase hex digits.
pub fn hex_pair(byte: u8) -> [u8; 2] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digit = |n: u8| HEX.get(usize::from(n & 0xf)).copied().unwrap_or(b'0');
    [digit(byte >> 4), digit(byte)]
}

/// Writes the ID field (name, value) in `headers`, replacing any field of that name; a
/// name or value the `http` types refuse (none this module makes) writes nothing.
pub fn set_field(headers: &mut ::http::HeaderMap, field: Option<(&[u8], &[u8])>) {
    if let Some((name, value)) = field
        && let (Ok(name), Ok(value)) = (
            ::http::HeaderName::from_bytes(name),
            ::http::HeaderValue::from_bytes(value),
        )
    {
        headers.insert(name, value);
    }
}

/// Whether `value`, sent by a client, may be kept as its request's ID: 1 to [`MAX_LEN`]
/// bytes of letters, digits and `-._:+/=@` (UUIDs, hex, base64, trace-style IDs); nothing
/// that quotes, separates, escapes or controls.
pub fn is_acceptable(value: &[u8]) -> bool {
    !value.is_empty()
        && value.len() <= MAX_LEN
        && value
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':' | b'+' | b'/' | b'=' | b'@'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::time::Duration;

    #[test]
    fn a_generated_id_is_a_uuid_v7_carrying_its_millisecond() {
        let when = UNIX_EPOCH + Duration::from_millis(0x0190_1234_5678);
        let id = generate(when);
        let s = id.as_str();
        assert_eq!(s.len(), 36, "{s}");
        assert_eq!(s.as_bytes()[8], b'-');
        assert_eq!(&s[..8], "01901234");
        assert_eq!(&s[9..13], "5678");
        assert_eq!(&s[14..15], "7", "version 7: {s}");
        assert!(matches!(&s[19..20], "8" | "9" | "a" | "b"), "variant 10: {s}");
        assert!(s.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()), "{s}");
        assert!(is_acceptable(id.as_bytes()));
    }

    #[test]
    fn ids_differ_and_sort_by_time() {
        let t = SystemTime::now();
        let ids: HashSet<String> = (0..10_000).map(|_| generate(t).as_str().to_string()).collect();
        assert_eq!(ids.len(), 10_000, "no repeat within one millisecond");
        let earlier = generate(t);
        let later = generate(t + Duration::from_millis(1));
        assert!(earlier.as_str() < later.as_str());
    }

    #[test]
    fn a_slot_keeps_an_acceptable_id_and_refuses_the_rest() {
        let mut slot = IdSlot::default();
        assert_eq!(slot.as_bytes(), b"");
        assert!(slot.keep(b"abc-123"));
        assert_eq!(slot.as_bytes(), b"abc-123");
        assert!(!slot.keep(b"a\r\nb"));
        assert_eq!(slot.as_bytes(), b"abc-123", "a refused ID leaves the slot as it was");
        slot.generate(SystemTime::now());
        assert_eq!(slot.as_bytes().len(), UUID_LEN);
        assert!(slot.keep(&[b'z'; MAX_LEN]));
        assert_eq!(slot.as_bytes(), &[b'z'; MAX_LEN][..]);
    }

    #[test]
    fn assign_keeps_only_a_trusted_single_acceptable_id() {
        let now = SystemTime::now();
        let mut slot = IdSlot::default();
        slot.assign(true, [&b"mine"[..]].into_iter(), now);
        assert_eq!(slot.as_bytes(), b"mine");
        for (trusted, sent) in [
            (false, vec![&b"mine"[..]]),
            (true, vec![&b"a"[..], &b"b"[..]]),
            (true, vec![&b"no good"[..]]),
            (true, vec![]),
        ] {
            slot.assign(trusted, sent.into_iter(), now);
            assert_eq!(slot.as_bytes().len(), UUID_LEN, "{trusted} replaced by a new ID");
        }
    }

    #[test]
    fn a_client_id_is_judged_by_length_and_characters() {
        for good in [
            &b"3f2a"[..],
            b"01901234-5678-7abc-8def-0123456789ab",
            b"a.b_c:d+e/f=@g",
            &[b'x'; MAX_LEN],
        ] {
            assert!(is_acceptable(good), "{:?}", String::from_utf8_lossy(good));
        }
        for bad in [
            &b""[..],
            &[b'x'; MAX_LEN + 1],
            b"a b",
            b"a\"b",
            b"a\\b",
            b"a,b",
            b"a;b",
            b"a\r\nb",
            b"a\x00b",
            b"a\x7fb",
            b"caf\xc3\xa9",
            b"{x}",
            b"<script>",
        ] {
            assert!(!is_acceptable(bad), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
