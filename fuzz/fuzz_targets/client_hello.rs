//! Fuzzes the TLS ClientHello parser: no input may panic it, and what it accepts must hold
//! its promises (a valid lowercase SNI, a result that does not depend on how the bytes were
//! split into reads).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tollgate::config::sni::SniMatcher;
use tollgate::tls::client_hello::{DEFAULT_MAX_LEN, peek_client_hello};

fuzz_target!(|data: &[u8]| {
    let whole = peek_client_hello(data, DEFAULT_MAX_LEN);

    // The caller peeks a growing prefix: a prefix may need more bytes, fail the same way, or
    // (when trailing bytes follow the hello) already succeed with the same result. (Past
    // the limit a prefix may say TooLarge where the whole input finds an error first.)
    let cut = data
        .first()
        .map_or(0, |&b| usize::from(b) * data.len() / 256);
    if let Some(prefix) = data.get(..cut).filter(|_| data.len() < DEFAULT_MAX_LEN) {
        match peek_client_hello(prefix, DEFAULT_MAX_LEN) {
            Ok(None) => {}
            prefix_result => assert_eq!(prefix_result, whole, "prefix of {cut} bytes"),
        }
    }

    // A small limit must never be exceeded.
    let small = usize::from(data.get(1).copied().unwrap_or(0)) * 8;
    if let Ok(Some(info)) = peek_client_hello(data, small) {
        assert!(info.handshake_len() + 5 <= small);
    }

    if let Ok(Some(info)) = whole {
        if let Some(sni) = info.sni() {
            assert!(!sni.is_empty() && sni.len() <= 253);
            assert!(
                sni.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || b == b'-'
                    || b == b'.')
            );
            let matcher = SniMatcher::new([(sni, 1), ("*.example", 2)]).expect("valid pattern");
            assert_eq!(matcher.lookup(sni), Some(1));
            assert_eq!(matcher.lookup(&sni.to_ascii_uppercase()), Some(1));
        }
        let _ = info.alpn().count();
    }
});
