//! W3C Trace Context (`traceparent`): reading a request's trace ID for the access log, and
//! starting a trace for a request that came without one (`[frontend] trace`).
//!
//! A `traceparent` a client sent is forwarded untouched, valid or not (tollgate is not a
//! span of its own); only a frontend with `trace` replaces a missing or unreadable one, and
//! then drops the `tracestate` that went with it (W3C Trace Context §3.3.1.3: a vendor that
//! restarts a trace must not keep the old state).
//!
//! Invariant: a trace ID this module hands out is 32 lowercase hex digits, not all zero.

use super::request_id::random_u64;

/// `00-` + 32 + `-` + 16 + `-` + 2.
pub const TRACEPARENT_LEN: usize = 55;

/// The header's name, lowercase.
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";

/// The trace ID of a `traceparent` value (§3.2): a version other than `ff`, then a 32-digit
/// trace ID and a 16-digit parent ID (lowercase hex, neither all zero) and 2 flag digits;
/// a version-00 value is exactly that long, a later version may go on after a `-`. `None`
/// for anything else.
pub fn trace_id(value: &[u8]) -> Option<&[u8]> {
    let head = value.get(..TRACEPARENT_LEN)?;
    let version = head.get(..2)?;
    let (trace, parent, flags) = (head.get(3..35)?, head.get(36..52)?, head.get(53..55)?);
    let dashes = [2, 35, 52].iter().all(|&i| head.get(i) == Some(&b'-'));
    let hex = |s: &[u8]| s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let nonzero = |s: &[u8]| s.iter().any(|&b| b != b'0');
    let tail_ok = match (version, value.get(TRACEPARENT_LEN)) {
        (b"00", None) => true,
        (b"00", Some(_)) => false,
        (_, None) => true,
        (_, Some(b)) => *b == b'-',
    };
    let ok = dashes
        && hex(version)
        && version != b"ff"
        && hex(trace)
        && hex(parent)
        && hex(flags)
        && nonzero(trace)
        && nonzero(parent)
        && tail_ok;
    ok.then_some(trace)
}

/// A `traceparent` tollgate made: version 00, a random trace ID and parent ID, flags
/// `01` (sampled: the request was drawn to be traced).
#[derive(Clone, Copy)]
pub struct Traceparent([u8; TRACEPARENT_LEN]);

impl Traceparent {
    pub fn generate() -> Self {
        let mut out = *b"00-00000000000000000000000000000000-0000000000000000-01";
        let random = [random_u64() | 1, random_u64(), random_u64() | 1];
        // Trace ID: two words (the first made non-zero), parent ID: one (non-zero).
        let places: [(usize, u64); 3] = [(3, random[0]), (19, random[1]), (36, random[2])];
        for (at, word) in places {
            for (i, byte) in word.to_be_bytes().into_iter().enumerate() {
                let pos = at + 2 * i;
                if let Some(pair) = out.get_mut(pos..pos + 2) {
                    pair.copy_from_slice(&super::request_id::hex_pair(byte));
                }
            }
        }
        Traceparent(out)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn trace_id(&self) -> &[u8] {
        self.0.get(3..35).unwrap_or_default()
    }
}

impl std::fmt::Debug for Traceparent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

/// Whether a request whose `traceparent` fields are `sent` starts a trace: it has no
/// readable one (none, several, or one `trace_id` refuses), and the draw (`0..1_000_000`)
/// falls under `sample_ppm`.
pub fn starts<'v>(mut sent: impl Iterator<Item = &'v [u8]>, sample_ppm: u32, draw: impl FnOnce() -> u32) -> bool {
    let readable = match (sent.next(), sent.next()) {
        (Some(one), None) => trace_id(one).is_some(),
        _ => false,
    };
    !readable && sample_ppm > 0 && (sample_ppm >= 1_000_000 || draw() < sample_ppm)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const GOOD: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_spec_example_reads_and_bad_ones_do_not() {
        assert_eq!(trace_id(GOOD), Some(&b"4bf92f3577b34da6a3ce929d0e0e4736"[..]));
        let later = b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next";
        assert!(trace_id(later).is_some(), "a later version may carry more");
        for bad in [
            &b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"[..],
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nx: y",
            b"",
            b"\x00\xff",
        ] {
            assert_eq!(trace_id(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_started_trace_is_valid_sampled_and_new() {
        let a = Traceparent::generate();
        let b = Traceparent::generate();
        assert_eq!(trace_id(a.as_bytes()), Some(a.trace_id()));
        assert!(a.as_bytes().ends_with(b"-01"));
        assert_ne!(a.trace_id(), b.trace_id());
    }

    #[test]
    fn only_a_request_without_a_readable_one_starts_a_trace() {
        let never = || -> u32 { panic!("no draw") };
        assert!(!starts([GOOD].into_iter(), 1_000_000, never));
        assert!(starts(std::iter::empty(), 1_000_000, never));
        assert!(starts([&b"junk"[..]].into_iter(), 1_000_000, never));
        assert!(starts([GOOD, GOOD].into_iter(), 1_000_000, never), "two are none");
        assert!(!starts(std::iter::empty(), 0, never));
        assert!(starts(std::iter::empty(), 10_000, || 9_999));
        assert!(!starts(std::iter::empty(), 10_000, || 10_000));
    }
}
