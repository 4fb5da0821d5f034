//! JWT bearer tokens (`auth = { jwt = { … } }`): a request's `Authorization: Bearer …`
//! verified against the keys of a JWKS, and selected claims handed to the server as headers.
//!
//! - [`verify`]: sans-io. The raw header value, a [`JwtPolicy`], a [`KeySet`] and the time in;
//!   [`Verified`] (the claim headers) or a [`Refusal`] out.
//! - [`KeySet`]: a parsed JWKS (RSA, EC P-256/P-384, OKP Ed25519 signature keys).
//! - [`Jwks`]: one policy's current key set, swapped whole ([`arc_swap`]): read lock-free by
//!   every request, replaced by the refresher. A `jwks_file` is read at config load; a
//!   `jwks_url` is fetched by [`spawn_refresher`]'s thread (`fetch`).
//!
//! Invariants:
//! - only asymmetric signatures verify: `none` and HS256/384/512 are refused whatever the
//!   policy says, a JWKS's symmetric (`oct`) keys are never loaded, and a key verifies only
//!   the algorithms of its own type and curve. So the classic confusion (an HS256 token whose
//!   secret is the RSA public key's bytes) has no key to verify with.
//! - the signature is checked before any claim is read: no claim of a forged token decides
//!   anything. Keys named by the token itself (`jku`, `jwk`, `x5u`, `x5c`) are ignored: keys
//!   come from the operator's JWKS only.
//! - bounded work per request: the header value is measured before it is parsed
//!   ([`MAX_TOKEN`]); a token without `kid` is tried against at most [`MAX_KEYLESS_TRIES`]
//!   keys. A JWKS is at most [`MAX_JWKS`] bytes and [`MAX_KEYS`] keys.
//! - a request never waits on keys: an unknown `kid` is refused at once; it may ask the
//!   refresher for an early fetch, at most once per [`EARLY_REFRESH_EVERY`].
//! - nothing here logs or returns the token: a refusal is a fixed word
//!   ([`Refusal::as_str`]).

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{HeaderName, HeaderValue};
use jsonwebtoken::{AlgorithmFamily, DecodingKey};
use serde::Deserialize;
use serde_json::{Map, Value};

mod fetch;
#[cfg(test)]
pub(crate) mod tests;

pub use fetch::{FETCH_TIMEOUT, RETRY_FIRST, refresh_loop, spawn_refresher};
pub use jsonwebtoken::Algorithm;

/// The longest `Authorization` value looked at; longer is refused before any parsing (an
/// identity provider's access token is 1–2 KiB; 8 KiB is the usual header-line limit).
pub const MAX_TOKEN: usize = 8 * 1024;
/// The largest JWKS document read (a file or a fetched body).
pub const MAX_JWKS: usize = 64 * 1024;
/// The most keys a JWKS may hold (providers publish 2–4: the current one and the next).
pub const MAX_KEYS: usize = 64;
/// A token without `kid` is tried against at most this many keys of its algorithm's type:
/// each try is a signature check an unauthenticated client can make us do.
pub const MAX_KEYLESS_TRIES: usize = 4;
/// `leeway` when the config names none, and the most it may name.
pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);
pub const MAX_LEEWAY: Duration = Duration::from_secs(300);
/// How often a `jwks_url` is fetched when the config names no `refresh`.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(300);
/// Unknown `kid`s ask for an early fetch at most this often (a client sending made-up kids
/// must not turn tollgate into a load generator against the identity provider).
pub const EARLY_REFRESH_EVERY: Duration = Duration::from_secs(30);

/// The algorithms a policy may allow: the asymmetric ones jsonwebtoken verifies.
pub const ASYMMETRIC: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// What a token must satisfy (validated config: `config::jwt::policy` builds it).
#[derive(Debug, Clone)]
pub struct JwtPolicy {
    /// The `iss` the token must carry, when set.
    pub issuer: Option<String>,
    /// When set, the token's `aud` (a string or a list) must name one of these. When not
    /// set, a token that carries an `aud` is refused (RFC 7519 4.1.3: a token meant for a
    /// named audience is not meant for a proxy that names none).
    pub audience: Option<Vec<String>>,
    /// A subset of [`ASYMMETRIC`]; `verify` refuses HMAC algorithms even if listed.
    pub algorithms: Vec<Algorithm>,
    /// Clock skew allowed on `exp` and `nbf` (default [`DEFAULT_LEEWAY`], at most
    /// [`MAX_LEEWAY`]).
    pub leeway: Duration,
    /// Claim (or dotted path into nested objects) → the request header it is sent as.
    pub claims_to_headers: Vec<(String, HeaderName)>,
    /// Refuse a token without `exp` (default true).
    pub require_exp: bool,
}

impl JwtPolicy {
    /// A policy allowing `algorithms`, everything else at its default (no issuer, no
    /// audience, no claim headers).
    pub fn new(algorithms: Vec<Algorithm>) -> Self {
        JwtPolicy {
            issuer: None,
            audience: None,
            algorithms,
            leeway: DEFAULT_LEEWAY,
            claims_to_headers: Vec::new(),
            require_exp: true,
        }
    }

    /// The headers this policy sets. The proxy must remove the client's own copies of them
    /// from every request it lets through, whether or not the token carried the claim:
    /// otherwise a client could send `x-user: admin` itself.
    pub fn header_names(&self) -> impl Iterator<Item = &HeaderName> {
        self.claims_to_headers.iter().map(|(_, h)| h)
    }
}

/// Why a request's token was refused. [`Refusal::as_str`] is what logs and counters show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// No `Authorization`, or one of another scheme than `Bearer`.
    Missing,
    /// Not a compact JWS, too long, undecodable, a `crit` header, claims that are not a JSON
    /// object, an `exp`/`nbf` that is not a number, or no `exp` where one is required.
    Malformed,
    /// No key of the set verified the signature.
    BadSignature,
    /// `exp` is past, beyond the leeway.
    Expired,
    /// `nbf` is ahead, beyond the leeway.
    NotYetValid,
    WrongIssuer,
    WrongAudience,
    /// `none`, HMAC, an algorithm the policy does not list, or one that does not fit the key
    /// the `kid` names.
    AlgorithmNotAllowed,
    /// The `kid` is not in the key set (or, without `kid`, no key fits the algorithm).
    UnknownKey,
}

impl Refusal {
    pub const ALL: [Refusal; 9] = [
        Refusal::Missing,
        Refusal::Malformed,
        Refusal::BadSignature,
        Refusal::Expired,
        Refusal::NotYetValid,
        Refusal::WrongIssuer,
        Refusal::WrongAudience,
        Refusal::AlgorithmNotAllowed,
        Refusal::UnknownKey,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Missing => "missing",
            Refusal::Malformed => "malformed",
            Refusal::BadSignature => "bad_signature",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::WrongIssuer => "wrong_issuer",
            Refusal::WrongAudience => "wrong_audience",
            Refusal::AlgorithmNotAllowed => "algorithm_not_allowed",
            Refusal::UnknownKey => "unknown_key",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A token that passed: the headers to set on the request (each replacing any the client
/// sent, see [`JwtPolicy::header_names`]), in the policy's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// A key's type, which decides the algorithms it verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    EcP256,
    EcP384,
    Ed25519,
}

/// One verification key of a JWKS.
#[derive(Debug)]
struct Key {
    kid: Option<String>,
    kind: KeyKind,
    /// The JWK's `alg`, when it names one: the key then verifies that algorithm only.
    alg: Option<Algorithm>,
    decoding: DecodingKey,
}

impl Key {
    /// Whether this key may verify a token signed with `alg`: same type and curve, and the
    /// JWK's own `alg` when it has one. HMAC never fits.
    fn fits(&self, alg: Algorithm) -> bool {
        if self.alg.is_some_and(|a| a != alg) {
            return false;
        }
        match self.kind {
            KeyKind::Rsa => alg.family() == AlgorithmFamily::Rsa,
            KeyKind::EcP256 => alg == Algorithm::ES256,
            KeyKind::EcP384 => alg == Algorithm::ES384,
            KeyKind::Ed25519 => alg == Algorithm::EdDSA,
        }
    }
}

/// A parsed JWKS: its signature keys, in document order.
#[derive(Debug, Default)]
pub struct KeySet {
    keys: Vec<Key>,
    /// Keys of the document that are not for us (encryption keys, symmetric keys, curves
    /// jsonwebtoken does not verify), for the log line.
    skipped: usize,
}

/// A JWK as written. Parsed by hand rather than through `jsonwebtoken::jwk::Jwk`: its
/// untagged key-type enum turns any mistake into "did not match any variant", and a refused
/// JWKS should say which key and which member is wrong.
#[derive(Deserialize)]
struct RawJwk {
    kty: String,
    #[serde(rename = "use", default)]
    use_: Option<String>,
    #[serde(default)]
    key_ops: Option<Vec<String>>,
    #[serde(default)]
    alg: Option<String>,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

#[derive(Deserialize)]
struct RawJwks {
    keys: Vec<Value>,
}

impl KeySet {
    /// Parses a JWKS document (`{"keys": [ … ]}`, RFC 7517 5). Keys that are not for
    /// signature verification with a supported algorithm are skipped; a key of a supported
    /// type that is broken, a document over [`MAX_JWKS`] bytes or [`MAX_KEYS`] keys, or one
    /// with no usable key, is refused: the error says why (and which key).
    pub fn from_jwks(bytes: &[u8]) -> Result<KeySet, String> {
        if bytes.len() > MAX_JWKS {
            return Err(format!(
                "the JWKS is {} bytes, more than the {MAX_JWKS}-byte limit",
                bytes.len()
            ));
        }
        let doc: RawJwks = serde_json::from_slice(bytes)
            .map_err(|e| format!("not a JWKS (a JSON object with a `keys` array): {e}"))?;
        if doc.keys.len() > MAX_KEYS {
            return Err(format!(
                "the JWKS has {} keys, more than the limit of {MAX_KEYS}",
                doc.keys.len()
            ));
        }
        let mut set = KeySet::default();
        for (i, value) in doc.keys.into_iter().enumerate() {
            let raw: RawJwk = serde_json::from_value(value).map_err(|e| format!("keys[{i}] is not a JWK: {e}"))?;
            let name = match &raw.kid {
                Some(kid) => format!("keys[{i}] (kid {kid:?})"),
                None => format!("keys[{i}]"),
            };
            match parse_key(raw) {
                Ok(Some(key)) => set.keys.push(key),
                Ok(None) => set.skipped += 1,
                Err(why) => return Err(format!("{name}: {why}")),
            }
        }
        if set.keys.is_empty() {
            return Err(format!(
                "no signature key tollgate can use (RSA, EC P-256 or P-384, OKP Ed25519){}",
                if set.skipped > 0 {
                    format!("; {} other key(s) skipped", set.skipped)
                } else {
                    String::new()
                }
            ));
        }
        Ok(set)
    }

    /// How many keys verify tokens.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// How many keys of the document were not for us (encryption, symmetric, other curves).
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// The keys' `kid`s in document order (a key without one is `None`), for logs.
    pub fn kids(&self) -> Vec<Option<&str>> {
        self.keys.iter().map(|k| k.kid.as_deref()).collect()
    }
}

/// One JWK into a key: `Ok(None)` when it is not a signature key we verify with.
fn parse_key(raw: RawJwk) -> Result<Option<Key>, String> {
    if raw.use_.as_deref().is_some_and(|u| u != "sig") {
        return Ok(None);
    }
    if raw
        .key_ops
        .as_ref()
        .is_some_and(|ops| !ops.iter().any(|op| op == "verify"))
    {
        return Ok(None);
    }
    // A JWK whose `alg` is not an asymmetric signature algorithm (HS256, RSA-OAEP, …) is
    // never used, whatever its type.
    let alg = match raw.alg.as_deref() {
        None => None,
        Some(name) => match Algorithm::from_str(name) {
            Ok(a) if ASYMMETRIC.contains(&a) => Some(a),
            _ => return Ok(None),
        },
    };
    let member = |v: &Option<String>, what: &str| -> Result<Vec<u8>, String> {
        let text = v.as_deref().ok_or_else(|| format!("no `{what}`"))?;
        URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|_| format!("`{what}` is not base64url (no padding)"))
    };
    let (kind, decoding) = match (raw.kty.as_str(), raw.crv.as_deref()) {
        ("RSA", _) => {
            let n = member(&raw.n, "n")?;
            let e = member(&raw.e, "e")?;
            let bits = significant_bits(&n);
            // aws-lc verifies 2048- to 8192-bit moduli: say so at load rather than fail
            // every token later.
            if !(2048..=8192).contains(&bits) {
                return Err(format!("an RSA modulus of {bits} bits (2048 to 8192 are verified)"));
            }
            if e.is_empty() || e.len() > 8 {
                return Err("an RSA exponent that is empty or longer than 8 bytes".into());
            }
            (KeyKind::Rsa, DecodingKey::from_rsa_raw_components(&n, &e))
        }
        ("EC", Some(crv @ ("P-256" | "P-384"))) => {
            let (kind, size) = if crv == "P-256" {
                (KeyKind::EcP256, 32)
            } else {
                (KeyKind::EcP384, 48)
            };
            let x = member(&raw.x, "x")?;
            let y = member(&raw.y, "y")?;
            if x.len() != size || y.len() != size {
                return Err(format!("{crv} coordinates are {size} bytes each"));
            }
            // The uncompressed SEC1 point, what `DecodingKey::from_ec_components` builds.
            let mut point = Vec::with_capacity(1 + 2 * size);
            point.push(0x04);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            (kind, DecodingKey::from_ec_der(&point))
        }
        ("OKP", Some("Ed25519")) => {
            let x = member(&raw.x, "x")?;
            if x.len() != 32 {
                return Err("an Ed25519 public key is 32 bytes".into());
            }
            (KeyKind::Ed25519, DecodingKey::from_ed_der(&x))
        }
        // `oct` (a shared secret: HS is never verified), P-521, Ed448, X25519, unknown types.
        _ => return Ok(None),
    };
    let key = Key {
        kid: raw.kid,
        kind,
        alg,
        decoding,
    };
    // A JWK whose `alg` does not match its own type (`"kty": "EC", "alg": "RS256"`) is
    // broken, not merely foreign.
    if let Some(a) = alg
        && !key.fits(a)
    {
        return Err(format!("`alg` {a:?} does not fit a key of type {:?}", kind));
    }
    Ok(Some(key))
}

/// Bits of a big-endian unsigned integer, leading zero bytes and bits not counted.
fn significant_bits(n: &[u8]) -> usize {
    let Some(first) = n.iter().position(|&b| b != 0) else {
        return 0;
    };
    let top = n.get(first).copied().unwrap_or(0);
    (n.len() - first - 1) * 8 + (8 - top.leading_zeros() as usize)
}

/// The JOSE header members we read; unknown ones are ignored (RFC 7515 4), except that a
/// `crit` list is refused: we implement no extension it could name.
#[derive(Deserialize)]
struct JoseHeader {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    crit: Option<serde::de::IgnoredAny>,
}

/// Checks the `Authorization` value `authorization` (`Bearer <JWS compact>`, the scheme in
/// any case) against `policy` with the keys of `keys`, at time `now`.
///
/// Order: bounds and shape, the header's algorithm (policy and key type), the signature,
/// then `exp`, `nbf`, `iss`, `aud`, and the claim headers.
pub fn verify(
    policy: &JwtPolicy,
    keys: &KeySet,
    authorization: Option<&[u8]>,
    now: SystemTime,
) -> Result<Verified, Refusal> {
    let token = bearer(authorization.ok_or(Refusal::Missing)?)?;
    let Segments {
        header: header_b64,
        payload: payload_b64,
        signature: signature_b64,
    } = segments(token)?;
    let header_json = decode_segment(header_b64)?;
    let header: JoseHeader = serde_json::from_slice(&header_json).map_err(|_| Refusal::Malformed)?;
    if header.crit.is_some() {
        return Err(Refusal::Malformed);
    }
    // `none`, names jsonwebtoken does not know, HMAC (even if a policy was built with it)
    // and anything the policy does not list.
    let alg = Algorithm::from_str(&header.alg).map_err(|_| Refusal::AlgorithmNotAllowed)?;
    if alg.family() == AlgorithmFamily::Hmac || !policy.algorithms.contains(&alg) {
        return Err(Refusal::AlgorithmNotAllowed);
    }
    if signature_b64.is_empty() {
        return Err(Refusal::Malformed);
    }
    // The signed bytes: `header.payload` as sent.
    let message = token
        .get(..header_b64.len() + 1 + payload_b64.len())
        .ok_or(Refusal::Malformed)?;
    let signature = std::str::from_utf8(signature_b64).map_err(|_| Refusal::Malformed)?;
    let mut candidates: Vec<&Key> = match &header.kid {
        Some(kid) => {
            let named: Vec<&Key> = keys.keys.iter().filter(|k| k.kid.as_ref() == Some(kid)).collect();
            if named.is_empty() {
                return Err(Refusal::UnknownKey);
            }
            named
        }
        None => keys.keys.iter().collect(),
    };
    candidates.retain(|k| k.fits(alg));
    if candidates.is_empty() {
        // A named key of another type: the token asks for an algorithm that key does not
        // do (an RSA key for ES256). No kid and nothing of that type: no key to try.
        return Err(if header.kid.is_some() {
            Refusal::AlgorithmNotAllowed
        } else {
            Refusal::UnknownKey
        });
    }
    let good = candidates
        .iter()
        .take(MAX_KEYLESS_TRIES)
        .any(|k| jsonwebtoken::crypto::verify(signature, message, &k.decoding, alg).unwrap_or(false));
    if !good {
        return Err(Refusal::BadSignature);
    }
    // Signed by a key of ours: now the claims may be read.
    let payload = decode_segment(payload_b64)?;
    let claims: Map<String, Value> = serde_json::from_slice(&payload).map_err(|_| Refusal::Malformed)?;
    check_claims(policy, &claims, now)?;
    Ok(Verified {
        headers: claim_headers(policy, &claims),
    })
}

/// The token of a `Bearer` credential, bounded before anything else is looked at.
fn bearer(value: &[u8]) -> Result<&[u8], Refusal> {
    // "Bearer" and the spaces around it take a few bytes more than the token.
    if value.len() > MAX_TOKEN + 32 {
        return Err(Refusal::Malformed);
    }
    let value = value.trim_ascii();
    let Some(end) = value.iter().position(|&b| b == b' ' || b == b'\t') else {
        return Err(if value.eq_ignore_ascii_case(b"bearer") {
            Refusal::Malformed
        } else {
            Refusal::Missing
        });
    };
    let (scheme, rest) = value.split_at(end);
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return Err(Refusal::Missing);
    }
    let token = rest.trim_ascii_start();
    if token.is_empty() || token.len() > MAX_TOKEN {
        return Err(Refusal::Malformed);
    }
    Ok(token)
}

/// The three base64url segments of a JWS compact serialization.
struct Segments<'a> {
    header: &'a [u8],
    payload: &'a [u8],
    signature: &'a [u8],
}

/// Splits a JWS compact serialization (a JWE has five segments: refused).
fn segments(token: &[u8]) -> Result<Segments<'_>, Refusal> {
    if !token
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        return Err(Refusal::Malformed);
    }
    let mut parts = token.split(|&b| b == b'.');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(header), Some(payload), Some(signature), None) if !header.is_empty() && !payload.is_empty() => {
            Ok(Segments {
                header,
                payload,
                signature,
            })
        }
        _ => Err(Refusal::Malformed),
    }
}

/// A segment's bytes: base64url without padding, canonical (no stray trailing bits).
fn decode_segment(segment: &[u8]) -> Result<Vec<u8>, Refusal> {
    URL_SAFE_NO_PAD.decode(segment).map_err(|_| Refusal::Malformed)
}

/// `exp`, `nbf`, `iss` and `aud` of a verified token.
fn check_claims(policy: &JwtPolicy, claims: &Map<String, Value>, now: SystemTime) -> Result<(), Refusal> {
    let now = now.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let leeway = policy.leeway.as_secs_f64();
    // NumericDate (RFC 7519 2) may have a fraction; anything but a number is malformed.
    let date = |name: &str| -> Result<Option<f64>, Refusal> {
        match claims.get(name) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or(Refusal::Malformed),
        }
    };
    match date("exp")? {
        // Valid strictly before `exp` (RFC 7519 4.1.4), plus the leeway.
        Some(exp) if now >= exp + leeway => return Err(Refusal::Expired),
        Some(_) => {}
        None if policy.require_exp => return Err(Refusal::Malformed),
        None => {}
    }
    if let Some(nbf) = date("nbf")?
        && now + leeway < nbf
    {
        return Err(Refusal::NotYetValid);
    }
    if let Some(issuer) = &policy.issuer
        && claims.get("iss").and_then(Value::as_str) != Some(issuer.as_str())
    {
        return Err(Refusal::WrongIssuer);
    }
    let aud = claims.get("aud");
    match (&policy.audience, aud) {
        (None, None) => {}
        (None, Some(_)) => return Err(Refusal::WrongAudience),
        (Some(want), Some(aud)) => {
            let named = |v: &Value| v.as_str().is_some_and(|s| want.iter().any(|w| w == s));
            let ok = match aud {
                Value::Array(list) => list.iter().any(named),
                one => named(one),
            };
            if !ok {
                return Err(Refusal::WrongAudience);
            }
        }
        (Some(_), None) => return Err(Refusal::WrongAudience),
    }
    Ok(())
}

/// The policy's claim headers that the token yields a valid value for.
fn claim_headers(policy: &JwtPolicy, claims: &Map<String, Value>) -> Vec<(HeaderName, HeaderValue)> {
    policy
        .claims_to_headers
        .iter()
        .filter_map(|(claim, name)| {
            let text = render(claim_value(claims, claim)?)?;
            // CR, LF, NUL and other controls make no header value: the claim is skipped.
            let value = HeaderValue::from_str(&text).ok()?;
            Some((name.clone(), value))
        })
        .collect()
}

/// A claim by its name, or else by a dotted path into nested objects (`realm_access.roles`).
/// The whole name is tried first: namespaced claims are URLs full of dots.
fn claim_value<'a>(claims: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    if let Some(v) = claims.get(path) {
        return Some(v);
    }
    let mut parts = path.split('.');
    let mut value = claims.get(parts.next()?)?;
    for part in parts {
        value = value.as_object()?.get(part)?;
    }
    Some(value)
}

/// A claim as header text: strings as they are, numbers and booleans as JSON writes them,
/// an array of those joined by `,`. Objects, nulls and nested arrays make none, and neither
/// does an array with an element holding a `,` (the server could not tell `["a,b"]` from
/// `["a","b"]`: a user-chosen group name must not add a role).
fn render(value: &Value) -> Option<String> {
    fn scalar(v: &Value) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }
    match value {
        Value::Array(items) => {
            let mut out = String::new();
            for (i, item) in items.iter().enumerate() {
                let text = scalar(item)?;
                if text.contains(',') {
                    return None;
                }
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&text);
            }
            Some(out)
        }
        other => scalar(other),
    }
}

/// Where a policy's keys come from (validated config).
#[derive(Debug)]
pub enum JwksSource {
    /// `jwks_file`: read and parsed at config load (a reload reads it again).
    File { path: PathBuf, keys: KeySet },
    /// `jwks_url`: fetched in the background ([`spawn_refresher`]).
    Url(JwksUrl),
}

/// `jwks_url` and how often it is fetched.
#[derive(Debug, Clone)]
pub struct JwksUrl {
    /// `http://` or `https://`.
    pub url: http::Uri,
    /// The wait between two successful fetches (a failure retries sooner).
    pub refresh: Duration,
}

/// What the refresher did, for metrics.
#[derive(Debug, Default)]
pub struct JwksStats {
    pub fetches_ok: AtomicU64,
    pub fetches_failed: AtomicU64,
    /// Early fetches asked for by tokens with an unknown `kid`.
    pub early_requests: AtomicU64,
    /// Unix seconds of the last successful fetch (0: none yet).
    pub last_ok_unix: AtomicU64,
}

/// One policy's keys: the current [`KeySet`], replaced whole by the refresher.
///
/// Until a `jwks_url`'s first fetch succeeds the set is empty and every token is refused
/// with [`Refusal::UnknownKey`]: requests never wait for it.
#[derive(Debug)]
pub struct Jwks {
    current: ArcSwap<KeySet>,
    url: Option<JwksUrl>,
    /// Wakes the refresher for an early fetch (a permit is kept if it is busy).
    early: tokio::sync::Notify,
    /// Unix seconds of the last early fetch asked for (0: never).
    last_early: AtomicU64,
    stats: JwksStats,
}

impl Jwks {
    pub fn new(source: JwksSource) -> Jwks {
        let (keys, url) = match source {
            JwksSource::File { keys, .. } => (keys, None),
            JwksSource::Url(url) => (KeySet::default(), Some(url)),
        };
        Jwks {
            current: ArcSwap::from_pointee(keys),
            url,
            early: tokio::sync::Notify::new(),
            last_early: AtomicU64::new(0),
            stats: JwksStats::default(),
        }
    }

    /// The current key set (lock-free; hold it for one request, not across awaits).
    pub fn load(&self) -> arc_swap::Guard<Arc<KeySet>> {
        self.current.load()
    }

    /// The URL the refresher fetches, if the keys come from one.
    pub fn url(&self) -> Option<&JwksUrl> {
        self.url.as_ref()
    }

    pub fn stats(&self) -> &JwksStats {
        &self.stats
    }

    /// [`verify`] with the current keys; an unknown `kid` also asks the refresher for an
    /// early fetch (rate-limited, see [`Jwks::ask_early_refresh`]). The request is refused
    /// either way: it never waits for the fetch.
    pub fn verify(
        &self,
        policy: &JwtPolicy,
        authorization: Option<&[u8]>,
        now: SystemTime,
    ) -> Result<Verified, Refusal> {
        let outcome = verify(policy, &self.load(), authorization, now);
        if outcome == Err(Refusal::UnknownKey) {
            self.ask_early_refresh(now);
        }
        outcome
    }

    /// Wakes the refresher for an early fetch, unless one was asked for less than
    /// [`EARLY_REFRESH_EVERY`] before `now` (or the keys come from a file). Whether it did.
    pub fn ask_early_refresh(&self, now: SystemTime) -> bool {
        if self.url.is_none() {
            return false;
        }
        let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()).max(1);
        let last = self.last_early.load(Ordering::Relaxed);
        if last != 0 && now < last.saturating_add(EARLY_REFRESH_EVERY.as_secs()) {
            return false;
        }
        // One winner among the worker threads that saw unknown kids at once.
        if self
            .last_early
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        self.stats.early_requests.fetch_add(1, Ordering::Relaxed);
        self.early.notify_one();
        true
    }

    /// Installs a newly fetched set (requests already holding the old one finish with it).
    fn store(&self, keys: KeySet) {
        self.current.store(Arc::new(keys));
    }
}
