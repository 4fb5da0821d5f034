//! OCSP (RFC 6960), sans-io: reading a DER `OCSPResponse` far enough to decide whether it
//! may be stapled, and writing the `OCSPRequest` that asks a responder about one certificate.
//!
//! What is checked before a response is stapled: it is `successful`, of the basic type, one
//! of its single responses is about this certificate's serial and says `good`, `thisUpdate`
//! is not in the future (a minute of clock skew allowed) and `nextUpdate`, when given, has
//! not passed. What is not: the responder's signature and the issuer hashes of the CertID —
//! the client that receives the staple verifies it against the issuer it trusts, and a
//! response for another issuer's certificate with the same serial fails there.
//!
//! Invariants: bounded like `config::x509` (a malformed response is an error, never a
//! panic); the request is built only from the certificates' own DER.

use super::x509::{
    TAG_ENUMERATED, TAG_GENERALIZED_TIME, TAG_INTEGER, TAG_OCTET_STRING, TAG_OID, TAG_SEQUENCE, expect, tbs, time, tlv,
};

/// A stapleable response's validity, Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Staple {
    pub this_update: i64,
    /// `None`: the responder gives no end (the response is as fresh as the fetcher keeps it).
    pub next_update: Option<i64>,
}

/// Clock skew allowed on `thisUpdate`.
const SKEW: i64 = 60;

/// id-pkix-ocsp-basic (1.3.6.1.5.5.7.48.1.1).
const OID_OCSP_BASIC: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x30, 0x01, 0x01];
/// id-sha1 (1.3.14.3.2.26): the CertID hash every responder understands.
const OID_SHA1: &[u8] = &[0x2b, 0x0e, 0x03, 0x02, 0x1a];
const TAG_CONTEXT_0: u8 = 0xa0;
const TAG_GOOD: u8 = 0x80;
const TAG_REVOKED: u8 = 0xa1;

/// Reads `response` as a `good` answer about the certificate with `serial` (its INTEGER
/// content); times are not judged here (see `check`).
pub fn read_response(response: &[u8], serial: &[u8]) -> Result<Staple, String> {
    let bad = |what: &str| format!("not an OCSP response ({what})");
    let (outer, _) = expect(response, TAG_SEQUENCE).ok_or_else(|| bad("outer SEQUENCE"))?;
    let (status, rest) = expect(outer, TAG_ENUMERATED).ok_or_else(|| bad("responseStatus"))?;
    if status != [0] {
        let name = match status.first() {
            Some(1) => "malformedRequest",
            Some(2) => "internalError",
            Some(3) => "tryLater",
            Some(5) => "sigRequired",
            Some(6) => "unauthorized",
            _ => "unknown status",
        };
        return Err(format!("the responder answered {name}"));
    }
    let (bytes, _) = expect(rest, TAG_CONTEXT_0).ok_or_else(|| bad("responseBytes"))?;
    let (bytes, _) = expect(bytes, TAG_SEQUENCE).ok_or_else(|| bad("responseBytes"))?;
    let (kind, rest) = expect(bytes, TAG_OID).ok_or_else(|| bad("responseType"))?;
    if kind != OID_OCSP_BASIC {
        return Err("not a basic OCSP response".into());
    }
    let (basic, _) = expect(rest, TAG_OCTET_STRING).ok_or_else(|| bad("response"))?;
    let (basic, _) = expect(basic, TAG_SEQUENCE).ok_or_else(|| bad("BasicOCSPResponse"))?;
    let (data, _) = expect(basic, TAG_SEQUENCE).ok_or_else(|| bad("tbsResponseData"))?;
    let mut rest = data;
    if let Some((TAG_CONTEXT_0, _, after)) = tlv(rest) {
        rest = after;
    }
    let (_responder, _, rest) = tlv(rest).ok_or_else(|| bad("responderID"))?;
    let (_produced, rest) = expect(rest, TAG_GENERALIZED_TIME).ok_or_else(|| bad("producedAt"))?;
    let (mut singles, _) = expect(rest, TAG_SEQUENCE).ok_or_else(|| bad("responses"))?;
    while !singles.is_empty() {
        let (single, after) = expect(singles, TAG_SEQUENCE).ok_or_else(|| bad("SingleResponse"))?;
        singles = after;
        let (cert_id, rest) = expect(single, TAG_SEQUENCE).ok_or_else(|| bad("CertID"))?;
        let (_alg, id) = expect(cert_id, TAG_SEQUENCE).ok_or_else(|| bad("CertID"))?;
        let (_name_hash, id) = expect(id, TAG_OCTET_STRING).ok_or_else(|| bad("CertID"))?;
        let (_key_hash, id) = expect(id, TAG_OCTET_STRING).ok_or_else(|| bad("CertID"))?;
        let (their_serial, _) = expect(id, TAG_INTEGER).ok_or_else(|| bad("CertID"))?;
        if their_serial != serial {
            continue;
        }
        let (status, _, rest) = tlv(rest).ok_or_else(|| bad("certStatus"))?;
        match status {
            TAG_GOOD => {}
            TAG_REVOKED => return Err("the responder says the certificate is revoked".into()),
            _ => return Err("the responder does not know the certificate".into()),
        }
        let (this_update, rest) = time(rest).ok_or_else(|| bad("thisUpdate"))?;
        let next_update = match tlv(rest) {
            Some((TAG_CONTEXT_0, inner, _)) => Some(time(inner).ok_or_else(|| bad("nextUpdate"))?.0),
            _ => None,
        };
        return Ok(Staple {
            this_update,
            next_update,
        });
    }
    Err("the response is not about this certificate (no single response for its serial)".into())
}

/// Whether a response read by `read_response` may be stapled at `now`.
pub fn check(staple: &Staple, now: i64) -> Result<(), String> {
    if staple.this_update > now + SKEW {
        return Err("the response's thisUpdate is in the future".into());
    }
    if let Some(next) = staple.next_update
        && next <= now
    {
        return Err("the response has expired (nextUpdate passed)".into());
    }
    Ok(())
}

/// `read_response` and `check` at once: why `response` may not be stapled to the
/// certificate with `serial`, if it may not.
pub fn validate(response: &[u8], serial: &[u8], now: i64) -> Result<Staple, String> {
    let staple = read_response(response, serial)?;
    check(&staple, now)?;
    Ok(staple)
}

/// When to fetch again: halfway through what is left of the response's life (at most
/// `max_wait` from now, at least a minute).
pub fn refresh_at(staple: &Staple, now: i64, max_wait: i64) -> i64 {
    let wait = match staple.next_update {
        Some(next) => (next - now) / 2,
        None => max_wait,
    };
    now + wait.clamp(60, max_wait.max(60))
}

/// A DER TLV.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 6);
    out.push(tag);
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        let significant = bytes.get(skip..).unwrap_or_default();
        out.push(0x80 | significant.len() as u8);
        out.extend_from_slice(significant);
    }
    out.extend_from_slice(content);
    out
}

/// The `OCSPRequest` for `leaf`, issued by `issuer` (both DER): one request, a SHA-1
/// CertID, no nonce (responses can then be cached by the responder, as for stapling).
pub fn request(leaf: &[u8], issuer: &[u8]) -> Option<Vec<u8>> {
    use sha1::Digest;
    let leaf = tbs(leaf)?;
    let issuer = tbs(issuer)?;
    if leaf.issuer != issuer.subject {
        return None;
    }
    let algorithm = der(TAG_SEQUENCE, &[der(TAG_OID, OID_SHA1), vec![0x05, 0x00]].concat());
    let cert_id = der(
        TAG_SEQUENCE,
        &[
            algorithm,
            der(TAG_OCTET_STRING, &sha1::Sha1::digest(leaf.issuer)),
            der(TAG_OCTET_STRING, &sha1::Sha1::digest(issuer.key_bits)),
            der(TAG_INTEGER, leaf.serial),
        ]
        .concat(),
    );
    let one = der(TAG_SEQUENCE, &cert_id);
    let list = der(TAG_SEQUENCE, &one);
    let tbs_request = der(TAG_SEQUENCE, &list);
    Some(der(TAG_SEQUENCE, &tbs_request))
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A basic response with one single response, built by hand (what a responder sends).
    pub(crate) fn response(status: u8, serial: &[u8], cert_status: &[u8], this: &str, next: Option<&str>) -> Vec<u8> {
        let gt = |s: &str| der(TAG_GENERALIZED_TIME, s.as_bytes());
        let alg = der(TAG_SEQUENCE, &[der(TAG_OID, OID_SHA1), vec![5, 0]].concat());
        let cert_id = der(
            TAG_SEQUENCE,
            &[
                alg.clone(),
                der(TAG_OCTET_STRING, &[1; 20]),
                der(TAG_OCTET_STRING, &[2; 20]),
                der(TAG_INTEGER, serial),
            ]
            .concat(),
        );
        let mut single = [cert_id, cert_status.to_vec(), gt(this)].concat();
        if let Some(n) = next {
            single.extend(der(TAG_CONTEXT_0, &gt(n)));
        }
        let data = der(
            TAG_SEQUENCE,
            &[
                der(0xa2, &der(TAG_OCTET_STRING, &[3; 20])),
                gt(this),
                der(TAG_SEQUENCE, &der(TAG_SEQUENCE, &single)),
            ]
            .concat(),
        );
        let basic = der(TAG_SEQUENCE, &[data, alg, der(0x03, &[0, 9, 9])].concat());
        let bytes = der(
            TAG_SEQUENCE,
            &[der(TAG_OID, OID_OCSP_BASIC), der(TAG_OCTET_STRING, &basic)].concat(),
        );
        der(
            TAG_SEQUENCE,
            &[der(TAG_ENUMERATED, &[status]), der(TAG_CONTEXT_0, &bytes)].concat(),
        )
    }

    const GOOD: &[u8] = &[0x80, 0x00];

    #[test]
    fn good_responses_for_the_serial_are_read() {
        let r = response(0, &[0x12, 0x34], GOOD, "20300101000000Z", Some("20300108000000Z"));
        let s = read_response(&r, &[0x12, 0x34]).unwrap();
        assert_eq!(s.this_update, 1_893_456_000);
        assert_eq!(s.next_update, Some(1_893_456_000 + 7 * 86_400));
        assert!(check(&s, s.this_update).is_ok());
        assert!(check(&s, s.this_update - 3600).unwrap_err().contains("future"));
        assert!(check(&s, s.this_update + 7 * 86_400).unwrap_err().contains("expired"));
        assert_eq!(
            refresh_at(&s, s.this_update, 86_400 * 30),
            s.this_update + 7 * 86_400 / 2
        );
        let open = response(0, &[7], GOOD, "20300101000000Z", None);
        assert_eq!(read_response(&open, &[7]).unwrap().next_update, None);
    }

    #[test]
    fn other_answers_are_refused_with_a_reason() {
        let r = response(0, &[0x12, 0x34], GOOD, "20300101000000Z", None);
        assert!(read_response(&r, &[0x12]).unwrap_err().contains("serial"));
        let revoked = der(TAG_REVOKED, &der(TAG_GENERALIZED_TIME, b"20290101000000Z"));
        let r = response(0, &[1], &revoked, "20300101000000Z", None);
        assert!(read_response(&r, &[1]).unwrap_err().contains("revoked"));
        let r = response(0, &[1], &[0x82, 0x00], "20300101000000Z", None);
        assert!(read_response(&r, &[1]).unwrap_err().contains("does not know"));
        let try_later = der(TAG_SEQUENCE, &der(TAG_ENUMERATED, &[3]));
        assert!(read_response(&try_later, &[1]).unwrap_err().contains("tryLater"));
        let full = response(0, &[1], GOOD, "20300101000000Z", None);
        for cut in 0..full.len() {
            assert!(read_response(&full[..cut], &[1]).is_err(), "cut at {cut}");
        }
        assert!(read_response(b"garbage", &[1]).is_err());
    }

    #[test]
    fn requests_name_the_issuer_and_serial() {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name.push(rcgen::DnType::CommonName, "test CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let mut leaf = rcgen::CertificateParams::new(vec!["a.example".into()]).unwrap();
        leaf.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x42]));
        let leaf = leaf.signed_by(&leaf_key, &issuer).unwrap();
        let req = request(leaf.der(), ca_cert.der()).unwrap();
        // SEQ { SEQ { SEQ { SEQ { CertID } } } }
        let (a, _) = expect(&req, TAG_SEQUENCE).unwrap();
        let (b, _) = expect(a, TAG_SEQUENCE).unwrap();
        let (c, _) = expect(b, TAG_SEQUENCE).unwrap();
        let (d, _) = expect(c, TAG_SEQUENCE).unwrap();
        let (cert_id, _) = expect(d, TAG_SEQUENCE).unwrap();
        let (_, rest) = expect(cert_id, TAG_SEQUENCE).unwrap();
        let (name_hash, rest) = expect(rest, TAG_OCTET_STRING).unwrap();
        let (key_hash, rest) = expect(rest, TAG_OCTET_STRING).unwrap();
        let (serial, _) = expect(rest, TAG_INTEGER).unwrap();
        assert_eq!((name_hash.len(), key_hash.len(), serial), (20, 20, &[0x42][..]));
        assert!(request(leaf.der(), leaf.der()).is_none(), "not its issuer");
        assert_eq!(der(0x04, &[0; 300])[..4], [0x04, 0x82, 0x01, 0x2c]);
    }
}
