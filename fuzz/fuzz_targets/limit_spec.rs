//! Arbitrary text as a limit's `rate` and `key` (`config::limit`): never a panic; a rate
//! parsed is within bounds and, written back as `COUNT/<ms>ms`, parses to the same rate; a
//! key parsed, described, parses to the same key.
#![no_main]

use std::time::Duration;

use tollgate::config::limit::{parse_key, parse_rate};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(rate) = parse_rate(text) {
        assert!(rate.count >= 1 && rate.count <= 1 << 32);
        assert!(rate.period >= Duration::from_millis(1) && rate.period <= Duration::from_secs(86_400));
        let again = format!("{}/{}ms", rate.count, rate.period.as_millis());
        assert_eq!(parse_rate(&again), Ok(rate), "{again}");
    }
    if let Ok(key) = parse_key(text) {
        assert_eq!(parse_key(&key.describe()), Ok(key));
    }
});
