//! Arbitrary bytes as a request path and target (`http::normalize`): never a panic; the
//! result is normal (normalising it again borrows it unchanged), starts with `/` when the
//! input did, has no `.` or `..` segment, and has no more `/` than the input (an encoded
//! slash never becomes a separator).
#![no_main]

use std::borrow::Cow;

use tollgate::http::normalize::{is_normal, path, target};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let once = path(data).into_owned();
    assert!(is_normal(&once));
    assert!(matches!(path(&once), Cow::Borrowed(_)));
    if data.first() == Some(&b'/') {
        assert!(once.starts_with(b"/"));
        assert!(once.split(|&b| b == b'/').all(|seg| seg != b"." && seg != b".."));
        let slashes = |s: &[u8]| s.iter().filter(|&&b| b == b'/').count();
        assert!(slashes(&once) <= slashes(data));
    }
    let t = target(data).into_owned();
    assert!(matches!(target(&t), Cow::Borrowed(_)));
});
