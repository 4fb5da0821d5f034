//! Arbitrary bytes as an `Authorization` value and as an htpasswd file or a JWKS (`auth`):
//! never a panic; Basic credentials that parse parse the same once written back; no token
//! verifies against an empty key set.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use tollgate::auth::basic::{Users, credentials};
use tollgate::auth::jwt::{Algorithm, JwtPolicy, KeySet, verify};

fn base64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            out.push(if i <= c.len() { A[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((user, password)) = credentials(data) {
        let mut plain = user.clone().into_bytes();
        plain.push(b':');
        plain.extend_from_slice(&password);
        let again = format!("Basic {}", base64(&plain));
        assert_eq!(credentials(again.as_bytes()), Some((user, password)));
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Users::parse(text);
    }
    let _ = KeySet::from_jwks(data);
    let policy = JwtPolicy::new(vec![Algorithm::ES256, Algorithm::RS256, Algorithm::EdDSA]);
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    assert!(verify(&policy, &KeySet::default(), Some(data), now).is_err());
});
