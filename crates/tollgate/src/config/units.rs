//! Units used in the config file: durations ("5s", "250ms") and byte sizes ("64KiB", "1GiB").
//!
//! Both refuse ambiguity: a duration needs a unit, and a size with an unknown suffix is an
//! error rather than a guess. The serde impls make toml attach the value's position to errors.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A duration written with a unit: `us`, `ms`, `s`, `m`, `h`, `d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DurationValue(pub Duration);

/// A size in bytes: an integer, or a number with `B`, `K`/`KiB`, `M`/`MiB`, `G`/`GiB` (powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByteSize(pub u64);

pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("duration `{text}` needs a unit (us, ms, s, m, h, d), e.g. \"5s\""))?;
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(format!("duration `{text}` must start with a number, e.g. \"250ms\""));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("duration `{text}` is out of range"))?;
    let micros_per_unit: u64 = match unit {
        "us" => 1,
        "ms" => 1_000,
        "s" => 1_000_000,
        "m" => 60_000_000,
        "h" => 3_600_000_000,
        "d" => 86_400_000_000,
        _ => {
            return Err(format!(
                "duration `{text}` has unknown unit `{unit}` (use us, ms, s, m, h, d)"
            ));
        }
    };
    n.checked_mul(micros_per_unit)
        .map(Duration::from_micros)
        .ok_or_else(|| format!("duration `{text}` is out of range"))
}

/// A duration as an operator reads it: its two largest units, `45s`, `3m12s`, `2h05m`,
/// `27d04h` (a log line or table says "next renewal in 59d23h", not "5183999.58s").
pub(crate) fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (days, hours, minutes, seconds) = (s / 86_400, s / 3_600 % 24, s / 60 % 60, s % 60);
    if days > 0 {
        format!("{days}d{hours:02}h")
    } else if hours > 0 {
        format!("{hours}h{minutes:02}m")
    } else if minutes > 0 {
        format!("{minutes}m{seconds:02}s")
    } else if s > 0 || d.is_zero() {
        format!("{s}s")
    } else {
        format!("{}ms", d.as_millis())
    }
}

pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(format!("size `{text}` must start with a number, e.g. \"64KiB\""));
    }
    let n: u64 = digits.parse().map_err(|_| format!("size `{text}` is out of range"))?;
    let multiplier: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "k" | "KiB" | "KB" | "kB" => 1 << 10,
        "M" | "m" | "MiB" | "MB" => 1 << 20,
        "G" | "g" | "GiB" | "GB" => 1 << 30,
        other => {
            return Err(format!(
                "size `{text}` has unknown unit `{other}` (use B, KiB, MiB, GiB)"
            ));
        }
    };
    n.checked_mul(multiplier)
        .ok_or_else(|| format!("size `{text}` is out of range"))
}

impl<'de> Deserialize<'de> for DurationValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DurationValue;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration with a unit, such as \"5s\" or \"250ms\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DurationValue, E> {
                parse_duration(v).map(DurationValue).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DurationValue, E> {
                Err(E::custom(format!(
                    "duration {v} needs a unit: write \"{v}ms\" or \"{v}s\""
                )))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as \"64KiB\" or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                parse_size(v).map(ByteSize).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_keep_two_units() {
        let h = |s| human_duration(Duration::from_secs(s));
        assert_eq!(h(0), "0s");
        assert_eq!(h(45), "45s");
        assert_eq!(h(192), "3m12s");
        assert_eq!(h(7_500), "2h05m");
        assert_eq!(h(99_826_237), "1155d09h");
        assert_eq!(human_duration(Duration::from_millis(250)), "250ms");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("10us"), Ok(Duration::from_micros(10)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("99999999999999999999s").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("16k"), Ok(16384));
        assert_eq!(parse_size("100"), Ok(100));
        assert!(parse_size("12 furlongs").is_err());
        assert!(parse_size("KiB").is_err());
    }
}
