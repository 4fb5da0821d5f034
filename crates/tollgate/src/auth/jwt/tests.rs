//! `auth::jwt` against keys generated at run time (aws-lc-rs, the provider tollgate already
//! uses), tokens signed with jsonwebtoken's `EncodingKey`, and JWKS documents built from the
//! public halves. The refresher is tested against a small HTTP server on 127.0.0.1.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use aws_lc_rs::encoding::{AsDer, Pkcs8V1Der};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, ECDSA_P384_SHA384_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair,
};
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;
use tokio::sync::oneshot;

use super::*;

/// A fixed "now" for the sans-io tests: 2023-11-14T22:13:20Z.
const NOW: u64 = 1_700_000_000;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW)
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A signing key and its public JWK.
pub(crate) struct TestKey {
    pub kid: String,
    pub alg: Algorithm,
    encoding: EncodingKey,
    jwk: Value,
}

impl TestKey {
    pub(crate) fn public_jwk(&self) -> Value {
        self.jwk.clone()
    }

    /// A token of `claims` with this key's `kid` and algorithm.
    pub(crate) fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        self.sign_with(header, claims)
    }

    fn sign_with(&self, header: Header, claims: &Value) -> String {
        jsonwebtoken::encode(&header, claims, &self.encoding).unwrap()
    }
}

/// The RSAPrivateKey (PKCS#1) inside a PKCS#8 PrivateKeyInfo: jsonwebtoken's RSA signer
/// on aws-lc reads PKCS#1 only, aws-lc writes PKCS#8 only.
fn pkcs8_to_pkcs1(pkcs8: &[u8]) -> Vec<u8> {
    /// (tag, content, rest) of the DER element at the start of `b`.
    fn element(b: &[u8]) -> (u8, &[u8], &[u8]) {
        let tag = b[0];
        let (len, head) = match b[1] {
            l if l < 0x80 => (l as usize, 2),
            0x81 => (b[2] as usize, 3),
            0x82 => (((b[2] as usize) << 8) | b[3] as usize, 4),
            other => panic!("length form {other:#x}"),
        };
        (tag, &b[head..head + len], &b[head + len..])
    }
    let (tag, info, _) = element(pkcs8);
    assert_eq!(tag, 0x30);
    let (_, _version, rest) = element(info);
    let (_, _algorithm, rest) = element(rest);
    let (tag, key, _) = element(rest);
    assert_eq!(tag, 0x04);
    key.to_vec()
}

/// One RSA key for the whole test binary (generating 2048-bit keys is the slow part).
fn rsa_material() -> &'static (Vec<u8>, Vec<u8>, Vec<u8>) {
    static KEY: OnceLock<(Vec<u8>, Vec<u8>, Vec<u8>)> = OnceLock::new();
    KEY.get_or_init(|| {
        let pair = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
        let pkcs8: Pkcs8V1Der<'static> = pair.as_der().unwrap();
        let public = aws_lc_rs::rsa::PublicKeyComponents::<Vec<u8>>::from(pair.public_key());
        (pkcs8_to_pkcs1(pkcs8.as_ref()), public.n, public.e)
    })
}

pub(crate) fn rsa_key(kid: &str, alg: Algorithm) -> TestKey {
    let (pkcs1, n, e) = rsa_material();
    TestKey {
        kid: kid.into(),
        alg,
        encoding: EncodingKey::from_rsa_der(pkcs1),
        jwk: json!({"kty": "RSA", "kid": kid, "use": "sig", "n": b64(n), "e": b64(e)}),
    }
}

pub(crate) fn ec_key(kid: &str, alg: Algorithm) -> TestKey {
    let (signing, crv, size) = match alg {
        Algorithm::ES256 => (&ECDSA_P256_SHA256_FIXED_SIGNING, "P-256", 32),
        _ => (&ECDSA_P384_SHA384_FIXED_SIGNING, "P-384", 48),
    };
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(signing, &SystemRandom::new()).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(signing, pkcs8.as_ref()).unwrap();
    let point = pair.public_key().as_ref();
    assert_eq!(point.len(), 1 + 2 * size);
    TestKey {
        kid: kid.into(),
        alg,
        encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
        jwk: json!({"kty": "EC", "kid": kid, "crv": crv, "alg": format!("{alg:?}"),
                    "x": b64(&point[1..1 + size]), "y": b64(&point[1 + size..])}),
    }
}

pub(crate) fn ed25519_key(kid: &str) -> TestKey {
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
    TestKey {
        kid: kid.into(),
        alg: Algorithm::EdDSA,
        encoding: EncodingKey::from_ed_der(pkcs8.as_ref()),
        jwk: json!({"kty": "OKP", "kid": kid, "crv": "Ed25519", "x": b64(pair.public_key().as_ref())}),
    }
}

pub(crate) fn jwks_of(keys: &[Value]) -> String {
    json!({ "keys": keys }).to_string()
}

fn set_of(keys: &[&TestKey]) -> KeySet {
    let jwks = jwks_of(&keys.iter().map(|k| k.public_jwk()).collect::<Vec<_>>());
    KeySet::from_jwks(jwks.as_bytes()).unwrap()
}

fn policy() -> JwtPolicy {
    JwtPolicy {
        issuer: Some("https://idp.example/".into()),
        audience: Some(vec!["api".into(), "web".into()]),
        algorithms: ASYMMETRIC.to_vec(),
        leeway: Duration::from_secs(30),
        claims_to_headers: vec![
            ("sub".into(), HeaderName::from_static("x-user")),
            ("realm_access.roles".into(), HeaderName::from_static("x-roles")),
            ("https://idp.example/tenant".into(), HeaderName::from_static("x-tenant")),
            ("admin".into(), HeaderName::from_static("x-admin")),
            ("level".into(), HeaderName::from_static("x-level")),
        ],
        require_exp: true,
    }
}

fn claims() -> Value {
    json!({
        "iss": "https://idp.example/",
        "aud": ["other", "api"],
        "sub": "alice",
        "exp": NOW + 600,
        "nbf": NOW - 10,
        "iat": NOW - 10,
        "realm_access": {"roles": ["reader", "writer"]},
        "https://idp.example/tenant": "acme",
        "admin": false,
        "level": 3,
    })
}

fn bearer(token: &str) -> Vec<u8> {
    format!("Bearer {token}").into_bytes()
}

fn check(keys: &KeySet, token: &str) -> Result<Verified, Refusal> {
    verify(&policy(), keys, Some(&bearer(token)), now())
}

fn header_map(v: &Verified) -> Vec<(String, String)> {
    v.headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
        .collect()
}

fn expected_headers() -> Vec<(String, String)> {
    [
        ("x-user", "alice"),
        ("x-roles", "reader,writer"),
        ("x-tenant", "acme"),
        ("x-admin", "false"),
        ("x-level", "3"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect()
}

#[test]
fn valid_tokens_of_each_key_type_pass_and_yield_the_claim_headers() {
    let keys = [
        rsa_key("rsa", Algorithm::RS256),
        rsa_key("rsa", Algorithm::PS256),
        ec_key("p256", Algorithm::ES256),
        ec_key("p384", Algorithm::ES384),
        ed25519_key("ed"),
    ];
    // The RSA key is one JWK verifying both RS256 and PS256.
    let set = set_of(&[&keys[0], &keys[2], &keys[3], &keys[4]]);
    assert_eq!(set.len(), 4);
    for key in &keys {
        let verified = check(&set, &key.sign(&claims())).unwrap_or_else(|r| panic!("{:?}: {r}", key.alg));
        assert_eq!(header_map(&verified), expected_headers(), "{:?}", key.alg);
    }
}

#[test]
fn the_scheme_is_case_insensitive_and_other_schemes_are_missing() {
    let key = ed25519_key("ed");
    let set = set_of(&[&key]);
    let token = key.sign(&claims());
    for value in [
        format!("bearer {token}"),
        format!("BEARER   {token} "),
        format!("  Bearer\t{token}"),
    ] {
        assert!(
            verify(&policy(), &set, Some(value.as_bytes()), now()).is_ok(),
            "{value}"
        );
    }
    assert_eq!(verify(&policy(), &set, None, now()), Err(Refusal::Missing));
    assert_eq!(
        verify(&policy(), &set, Some(b"Basic YTpi"), now()),
        Err(Refusal::Missing)
    );
    assert_eq!(verify(&policy(), &set, Some(b""), now()), Err(Refusal::Missing));
    assert_eq!(verify(&policy(), &set, Some(b"Bearer"), now()), Err(Refusal::Malformed));
    assert_eq!(
        verify(&policy(), &set, Some(b"Bearer a.b"), now()),
        Err(Refusal::Malformed)
    );
    assert_eq!(
        verify(&policy(), &set, Some(b"Bearer a.b.c.d.e"), now()),
        Err(Refusal::Malformed)
    );
    assert_eq!(
        verify(&policy(), &set, Some(b"Bearer a b.c"), now()),
        Err(Refusal::Malformed)
    );
}

#[test]
fn expiry_and_not_before_honour_the_leeway() {
    let key = ec_key("p256", Algorithm::ES256);
    let set = set_of(&[&key]);
    let with = |changes: Value| {
        let mut c = claims();
        for (k, v) in changes.as_object().unwrap() {
            c[k] = v.clone();
        }
        check(&set, &key.sign(&c))
    };
    // Expired 20 s ago: within the 30 s leeway.
    assert!(with(json!({"exp": NOW - 20})).is_ok());
    // Expired 31 s ago, and exactly at the leeway's end: refused.
    assert_eq!(with(json!({"exp": NOW - 31})), Err(Refusal::Expired));
    assert_eq!(with(json!({"exp": NOW - 30})), Err(Refusal::Expired));
    // Valid from 20 s ahead: within the leeway; 60 s ahead: not yet.
    assert!(with(json!({"nbf": NOW + 20})).is_ok());
    assert_eq!(with(json!({"nbf": NOW + 60})), Err(Refusal::NotYetValid));
    // NumericDate may carry a fraction; a string is no date.
    assert!(with(json!({"exp": (NOW + 5) as f64 + 0.5})).is_ok());
    assert_eq!(with(json!({"exp": "tomorrow"})), Err(Refusal::Malformed));
    // With no leeway, expired means expired.
    let mut strict = policy();
    strict.leeway = Duration::ZERO;
    let mut c = claims();
    c["exp"] = json!(NOW - 1);
    assert_eq!(
        verify(&strict, &set, Some(&bearer(&key.sign(&c))), now()),
        Err(Refusal::Expired)
    );
    // No `exp`: refused unless the policy does not require one.
    let mut c = claims();
    c.as_object_mut().unwrap().remove("exp");
    let token = key.sign(&c);
    assert_eq!(check(&set, &token), Err(Refusal::Malformed));
    let mut lax = policy();
    lax.require_exp = false;
    assert!(verify(&lax, &set, Some(&bearer(&token)), now()).is_ok());
}

#[test]
fn issuer_and_audience_are_checked() {
    let key = ed25519_key("ed");
    let set = set_of(&[&key]);
    let mut c = claims();
    c["iss"] = json!("https://evil.example/");
    assert_eq!(check(&set, &key.sign(&c)), Err(Refusal::WrongIssuer));
    c.as_object_mut().unwrap().remove("iss");
    assert_eq!(check(&set, &key.sign(&c)), Err(Refusal::WrongIssuer));

    let mut c = claims();
    c["aud"] = json!("other");
    assert_eq!(check(&set, &key.sign(&c)), Err(Refusal::WrongAudience));
    c["aud"] = json!(["x", "y"]);
    assert_eq!(check(&set, &key.sign(&c)), Err(Refusal::WrongAudience));
    c["aud"] = json!("web");
    assert!(check(&set, &key.sign(&c)).is_ok());
    c.as_object_mut().unwrap().remove("aud");
    assert_eq!(check(&set, &key.sign(&c)), Err(Refusal::WrongAudience));

    // No audience configured: a token without `aud` passes, one naming an audience does not.
    let mut open = policy();
    open.audience = None;
    assert!(verify(&open, &set, Some(&bearer(&key.sign(&c))), now()).is_ok());
    assert_eq!(
        verify(&open, &set, Some(&bearer(&key.sign(&claims()))), now()),
        Err(Refusal::WrongAudience)
    );
}

#[test]
fn an_algorithm_outside_the_policy_is_refused() {
    let key = ec_key("p256", Algorithm::ES256);
    let set = set_of(&[&key]);
    let mut only_rsa = policy();
    only_rsa.algorithms = vec![Algorithm::RS256];
    assert_eq!(
        verify(&only_rsa, &set, Some(&bearer(&key.sign(&claims()))), now()),
        Err(Refusal::AlgorithmNotAllowed)
    );
}

#[test]
fn a_key_verifies_only_its_own_type() {
    // The token says RS256 but names the EC key: refused before any signature check.
    let rsa = rsa_key("rsa", Algorithm::RS256);
    let ec = ec_key("p256", Algorithm::ES256);
    let set = set_of(&[&ec]);
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("p256".into());
    assert_eq!(
        check(&set, &rsa.sign_with(header, &claims())),
        Err(Refusal::AlgorithmNotAllowed)
    );
    // An ES384 token naming a P-256 key (the JWK says ES256).
    let p384 = ec_key("p256", Algorithm::ES384);
    assert_eq!(check(&set, &p384.sign(&claims())), Err(Refusal::AlgorithmNotAllowed));
}

#[test]
fn alg_none_is_refused() {
    let key = ed25519_key("ed");
    let set = set_of(&[&key]);
    let header = b64(br#"{"alg":"none","typ":"JWT","kid":"ed"}"#);
    let payload = b64(claims().to_string().as_bytes());
    for token in [format!("{header}.{payload}."), format!("{header}.{payload}.c2ln")] {
        assert_eq!(check(&set, &token), Err(Refusal::AlgorithmNotAllowed), "{token}");
    }
    let header = b64(br#"{"alg":"None"}"#);
    assert_eq!(
        check(&set, &format!("{header}.{payload}.")),
        Err(Refusal::AlgorithmNotAllowed)
    );
}

#[test]
fn hs256_signed_with_the_public_key_is_refused() {
    // The classic confusion: the attacker signs HS256 with the RSA public key's bytes (its
    // JWK `n`, its DER) as the HMAC secret.
    let rsa = rsa_key("rsa", Algorithm::RS256);
    let set = set_of(&[&rsa]);
    let (_, n, _) = rsa_material();
    let jwk_text = rsa.public_jwk().to_string();
    for secret in [n.as_slice(), jwk_text.as_bytes(), b64(n).as_bytes()] {
        let forger = TestKey {
            kid: "rsa".into(),
            alg: Algorithm::HS256,
            encoding: EncodingKey::from_secret(secret).unwrap(),
            jwk: Value::Null,
        };
        let token = forger.sign(&claims());
        assert_eq!(check(&set, &token), Err(Refusal::AlgorithmNotAllowed));
        // Even a policy built (wrongly) with HS256 in it refuses.
        let mut careless = policy();
        careless.algorithms.push(Algorithm::HS256);
        assert_eq!(
            verify(&careless, &set, Some(&bearer(&token)), now()),
            Err(Refusal::AlgorithmNotAllowed)
        );
    }
    // And a JWKS's symmetric keys are never loaded.
    let jwks = jwks_of(&[
        json!({"kty": "oct", "kid": "s", "k": b64(b"secret"), "alg": "HS256"}),
        rsa.public_jwk(),
    ]);
    let set = KeySet::from_jwks(jwks.as_bytes()).unwrap();
    assert_eq!((set.len(), set.skipped()), (1, 1));
}

#[test]
fn a_tampered_token_is_refused() {
    let key = rsa_key("rsa", Algorithm::RS256);
    let set = set_of(&[&key]);
    let token = key.sign(&claims());
    let parts: Vec<&str> = token.split('.').collect();
    // The payload swapped for another (sub = admin), the signature kept.
    let mut c = claims();
    c["sub"] = json!("admin");
    let forged = format!("{}.{}.{}", parts[0], b64(c.to_string().as_bytes()), parts[2]);
    assert_eq!(check(&set, &forged), Err(Refusal::BadSignature));
    // One signature byte flipped.
    let mut sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
    sig[10] ^= 1;
    let flipped = format!("{}.{}.{}", parts[0], parts[1], b64(&sig));
    assert_eq!(check(&set, &flipped), Err(Refusal::BadSignature));
    // Another key of ours, same kid: its signature does not verify with the published one.
    let other = ec_key("p256", Algorithm::ES256);
    let impostor = ec_key("p256", Algorithm::ES256);
    let set = set_of(&[&other]);
    assert_eq!(check(&set, &impostor.sign(&claims())), Err(Refusal::BadSignature));
}

#[test]
fn an_unknown_kid_is_refused_and_keyless_tokens_try_the_keys_that_fit() {
    let a = ed25519_key("a");
    let b = ed25519_key("b");
    let set = set_of(&[&a]);
    assert_eq!(check(&set, &b.sign(&claims())), Err(Refusal::UnknownKey));
    // Without `kid`: the keys of the token's type are tried.
    let set = set_of(&[&b, &a]);
    let token = a.sign_with(Header::new(Algorithm::EdDSA), &claims());
    assert!(check(&set, &token).is_ok());
    // No key of that type at all.
    let ec = ec_key("p256", Algorithm::ES256);
    let token = ec.sign_with(Header::new(Algorithm::ES256), &claims());
    assert_eq!(check(&set, &token), Err(Refusal::UnknownKey));
    // Tries are bounded: the right key as the fifth of its type is not reached.
    let decoys: Vec<TestKey> = (0..MAX_KEYLESS_TRIES).map(|i| ed25519_key(&format!("d{i}"))).collect();
    let mut all: Vec<&TestKey> = decoys.iter().collect();
    all.push(&a);
    let set = set_of(&all);
    let token = a.sign_with(Header::new(Algorithm::EdDSA), &claims());
    assert_eq!(check(&set, &token), Err(Refusal::BadSignature));
}

#[test]
fn an_oversized_or_odd_token_is_refused_before_parsing() {
    let key = ed25519_key("ed");
    let set = set_of(&[&key]);
    let mut c = claims();
    c["padding"] = json!("x".repeat(MAX_TOKEN));
    let big = key.sign(&c);
    assert!(big.len() > MAX_TOKEN);
    assert_eq!(check(&set, &big), Err(Refusal::Malformed));
    let huge = vec![b'a'; 1 << 20];
    assert_eq!(verify(&policy(), &set, Some(&huge), now()), Err(Refusal::Malformed));
    // Padding, spaces or other characters in the token.
    let token = key.sign(&claims());
    assert_eq!(check(&set, &format!("{token}=")), Err(Refusal::Malformed));
    assert_eq!(check(&set, &token.replacen('.', "+", 1)), Err(Refusal::Malformed));
    // A header that is not JSON, or has `crit`.
    let payload = b64(claims().to_string().as_bytes());
    assert_eq!(
        check(&set, &format!("{}.{payload}.c2ln", b64(b"[1]"))),
        Err(Refusal::Malformed)
    );
    let crit = b64(br#"{"alg":"EdDSA","kid":"ed","crit":["exp"]}"#);
    assert_eq!(check(&set, &format!("{crit}.{payload}.c2ln")), Err(Refusal::Malformed));
}

#[test]
fn claim_values_that_make_no_header_are_skipped() {
    let key = ed25519_key("ed");
    let set = set_of(&[&key]);
    let mut c = claims();
    c["sub"] = json!("alice\r\nx-admin: true");
    c["realm_access"] = json!({"roles": ["user,admin", "reader"]});
    c["https://idp.example/tenant"] = json!({"nested": "object"});
    c["admin"] = Value::Null;
    c["level"] = json!([1, [2]]);
    let verified = check(&set, &key.sign(&c)).unwrap();
    assert!(verified.headers.is_empty(), "{:?}", header_map(&verified));
}

#[test]
fn malformed_jwks_are_refused_with_a_reason() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"not json".to_vec(), "not a JWKS"),
        (br#"{"keys": {}}"#.to_vec(), "not a JWKS"),
        (br#"{"keys": []}"#.to_vec(), "no signature key"),
        (br#"{"keys": [3]}"#.to_vec(), "keys[0] is not a JWK"),
        (
            br#"{"keys": [{"kty": "EC", "kid": "k", "crv": "P-256", "x": "AAAA", "y": "AAAA"}]}"#.to_vec(),
            "keys[0] (kid \"k\"): P-256 coordinates are 32 bytes each",
        ),
        (
            br#"{"keys": [{"kty": "RSA", "n": "AQAB", "e": "AQAB"}]}"#.to_vec(),
            "an RSA modulus of 17 bits",
        ),
        (br#"{"keys": [{"kty": "OKP", "crv": "Ed25519"}]}"#.to_vec(), "no `x`"),
        (
            br#"{"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "a+b/"}]}"#.to_vec(),
            "not base64url",
        ),
        (
            br#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}, {"kty": "EC", "crv": "P-521", "x": "", "y": ""}]}"#.to_vec(),
            "2 other key(s) skipped",
        ),
        (vec![b' '; MAX_JWKS + 1], "more than the 65536-byte limit"),
    ];
    for (doc, want) in cases {
        let e = KeySet::from_jwks(&doc).unwrap_err();
        assert!(e.contains(want), "{e}");
    }
    // A JWK whose `alg` contradicts its type.
    let mut jwk = ed25519_key("ed").public_jwk();
    jwk["alg"] = json!("ES256");
    let e = KeySet::from_jwks(jwks_of(&[jwk]).as_bytes()).unwrap_err();
    assert!(e.contains("does not fit"), "{e}");
    // Encryption keys and unusable `alg`s are skipped, not refused.
    let mut enc = ec_key("enc", Algorithm::ES256).public_jwk();
    enc["use"] = json!("enc");
    let mut oaep = rsa_key("oaep", Algorithm::RS256).public_jwk();
    oaep["alg"] = json!("RSA-OAEP");
    let set = KeySet::from_jwks(jwks_of(&[enc, oaep, ed25519_key("ed").public_jwk()]).as_bytes()).unwrap();
    assert_eq!((set.len(), set.skipped(), set.kids()), (1, 2, vec![Some("ed")]));
}

#[test]
fn a_jwks_with_more_than_64_keys_is_refused() {
    let jwk = ed25519_key("ed").public_jwk();
    let keys: Vec<Value> = (0..=MAX_KEYS).map(|_| jwk.clone()).collect();
    let e = KeySet::from_jwks(jwks_of(&keys).as_bytes()).unwrap_err();
    assert!(e.contains("65 keys, more than the limit of 64"), "{e}");
    let set = KeySet::from_jwks(jwks_of(&keys[..MAX_KEYS]).as_bytes()).unwrap();
    assert_eq!(set.len(), MAX_KEYS);
}

#[test]
fn refusal_words_are_distinct() {
    let words: std::collections::BTreeSet<_> = Refusal::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(words.len(), Refusal::ALL.len());
}

#[test]
fn unknown_kids_ask_for_an_early_fetch_at_most_every_30s() {
    let key = ed25519_key("new");
    let jwks = Jwks::new(JwksSource::Url(JwksUrl {
        url: http::Uri::from_static("http://127.0.0.1:1/jwks"),
        refresh: DEFAULT_REFRESH,
    }));
    let token = bearer(&key.sign(&claims()));
    assert_eq!(jwks.verify(&policy(), Some(&token), now()), Err(Refusal::UnknownKey));
    assert_eq!(jwks.stats().early_requests.load(Ordering::Relaxed), 1);
    // Within 30 s: refused, no new fetch asked for.
    let later = now() + Duration::from_secs(29);
    assert_eq!(jwks.verify(&policy(), Some(&token), later), Err(Refusal::UnknownKey));
    assert_eq!(jwks.stats().early_requests.load(Ordering::Relaxed), 1);
    assert!(jwks.ask_early_refresh(now() + Duration::from_secs(30)));
    assert_eq!(jwks.stats().early_requests.load(Ordering::Relaxed), 2);
    // Keys from a file are never fetched.
    let file = Jwks::new(JwksSource::File {
        path: "k.json".into(),
        keys: set_of(&[&ed25519_key("old")]),
    });
    assert_eq!(file.verify(&policy(), Some(&token), now()), Err(Refusal::UnknownKey));
    assert_eq!(file.stats().early_requests.load(Ordering::Relaxed), 0);
}

#[test]
fn backoff_doubles_up_to_the_refresh_interval() {
    let refresh = Duration::from_secs(300);
    let waits: Vec<u64> = (1..=8).map(|f| fetch::backoff(f, refresh).as_secs()).collect();
    assert_eq!(waits, vec![5, 10, 20, 40, 80, 160, 300, 300]);
    assert_eq!(fetch::backoff(u32::MAX, refresh), refresh);
}

/// A one-thread HTTP/1.1 server on 127.0.0.1 answering each request with the next of
/// `answers` (the last one repeated), `Connection: close`. Stops when dropped.
/// Status and body of each answer, in order.
type Answers = Arc<Mutex<Vec<(u16, Vec<u8>)>>>;

struct JwksServer {
    port: u16,
    answers: Answers,
    served: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl JwksServer {
    fn start(answers: Vec<(u16, Vec<u8>)>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let answers = Arc::new(Mutex::new(answers));
        let served = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s, st) = (Arc::clone(&answers), Arc::clone(&served), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !st.load(Ordering::Relaxed) && Instant::now() < deadline {
                let Ok((mut conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                conn.set_nonblocking(false).unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let (status, body) = {
                    let mut list = a.lock().unwrap();
                    if list.len() > 1 {
                        list.remove(0)
                    } else {
                        list[0].clone()
                    }
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(&body);
                s.fetch_add(1, Ordering::Relaxed);
            }
        });
        JwksServer {
            port,
            answers,
            served,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self) -> http::Uri {
        format!("http://127.0.0.1:{}/.well-known/jwks.json", self.port)
            .parse()
            .unwrap()
    }
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Polls `done` every 10 ms for up to 10 s.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_refresher_fetches_keeps_the_last_good_set_and_refetches_early() {
    let first = ed25519_key("first");
    let second = ed25519_key("second");
    let good = jwks_of(&[first.public_jwk()]).into_bytes();
    let server = JwksServer::start(vec![
        (200, good.clone()),
        (500, b"oops".to_vec()),
        (200, b"{\"keys\": []}".to_vec()),
        (200, vec![b' '; MAX_JWKS + 10]),
        (200, good),
    ]);
    let jwks = Arc::new(Jwks::new(JwksSource::Url(JwksUrl {
        url: server.url(),
        // Short, so the failures' retries (capped at `refresh`) come quickly.
        refresh: Duration::from_millis(50),
    })));
    let (stop, stopped) = oneshot::channel();
    let thread = spawn_refresher(vec![Arc::clone(&jwks)], stopped).unwrap().unwrap();
    wait_for("the first set", || !jwks.load().is_empty());
    let token = bearer(&first.sign(&claims()));
    assert!(jwks.verify(&policy(), Some(&token), now()).is_ok());
    // The three bad answers are counted and change nothing.
    wait_for("three failures", || {
        jwks.stats().fetches_failed.load(Ordering::Relaxed) >= 3
    });
    assert_eq!(jwks.load().kids(), vec![Some("first")]);
    wait_for("a good fetch again", || {
        jwks.stats().fetches_ok.load(Ordering::Relaxed) >= 2
    });
    assert!(jwks.stats().last_ok_unix.load(Ordering::Relaxed) > 0);
    drop(stop);
    thread.join().unwrap();

    // Rotation: a token with the new kid asks for an early fetch, which loads it.
    *server.answers.lock().unwrap() = vec![(200, jwks_of(&[first.public_jwk(), second.public_jwk()]).into_bytes())];
    let jwks = Arc::new(Jwks::new(JwksSource::Url(JwksUrl {
        url: server.url(),
        refresh: Duration::from_secs(3600),
    })));
    jwks.store(set_of(&[&first]));
    let (stop, stopped) = oneshot::channel();
    let served = server.served.load(Ordering::Relaxed);
    let thread = spawn_refresher(vec![Arc::clone(&jwks)], stopped).unwrap().unwrap();
    wait_for("the start-up fetch", || server.served.load(Ordering::Relaxed) > served);
    // Pretend the start-up fetch saw only the old key (the IdP had not rotated yet).
    wait_for("the start-up fetch to land", || {
        jwks.stats().fetches_ok.load(Ordering::Relaxed) == 1
    });
    jwks.store(set_of(&[&first]));
    let token = bearer(&second.sign(&claims()));
    assert_eq!(jwks.verify(&policy(), Some(&token), now()), Err(Refusal::UnknownKey));
    wait_for("the early fetch", || {
        jwks.stats().fetches_ok.load(Ordering::Relaxed) == 2
    });
    assert!(jwks.verify(&policy(), Some(&token), now()).is_ok());
    drop(stop);
    thread.join().unwrap();
}

#[test]
fn the_refresher_reports_an_unreachable_url_and_sets_without_urls_start_nothing() {
    // A port nothing listens on: connection refused, counted, the empty set stays.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let jwks = Arc::new(Jwks::new(JwksSource::Url(JwksUrl {
        url: format!("http://127.0.0.1:{port}/jwks").parse().unwrap(),
        refresh: Duration::from_millis(20),
    })));
    let (stop, stopped) = oneshot::channel();
    let thread = spawn_refresher(vec![Arc::clone(&jwks)], stopped).unwrap().unwrap();
    wait_for("two failures", || {
        jwks.stats().fetches_failed.load(Ordering::Relaxed) >= 2
    });
    assert!(jwks.load().is_empty());
    drop(stop);
    thread.join().unwrap();

    let file = Arc::new(Jwks::new(JwksSource::File {
        path: "k.json".into(),
        keys: set_of(&[&ed25519_key("k")]),
    }));
    let (_stop, stopped) = oneshot::channel();
    assert!(spawn_refresher(vec![file], stopped).unwrap().is_none());
}
