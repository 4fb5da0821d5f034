//! A small, bounded DER reader for the few X.509 facts tollgate needs: the names a
//! certificate serves, its validity and serial, the issuer and subject names (a chain's
//! order), its key bits and its OCSP responder (Authority Information Access).
//!
//! Invariants: nothing here panics or allocates more than the input; anything unexpected
//! reads as "not there" (`None`, no names), never as a guess. Signatures are not checked:
//! the certificates come from the operator's own files, and clients verify them.

/// The parts of a certificate's `TBSCertificate` the rest of the crate reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tbs<'a> {
    /// The serial's INTEGER content (DER, as the issuer wrote it).
    pub serial: &'a [u8],
    /// The issuer's and subject's `Name`, whole TLVs (what OCSP hashes, what a chain links).
    pub issuer: &'a [u8],
    pub subject: &'a [u8],
    /// Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    /// The subjectPublicKey BIT STRING's bits (without the unused-bits byte).
    pub key_bits: &'a [u8],
    /// The extensions' SEQUENCE content (empty when there are none).
    pub extensions: &'a [u8],
}

pub(crate) const TAG_INTEGER: u8 = 0x02;
const TAG_BIT_STRING: u8 = 0x03;
pub(crate) const TAG_OCTET_STRING: u8 = 0x04;
pub(crate) const TAG_OID: u8 = 0x06;
pub(crate) const TAG_ENUMERATED: u8 = 0x0a;
pub(crate) const TAG_SEQUENCE: u8 = 0x30;
const TAG_SET: u8 = 0x31;
const TAG_UTC_TIME: u8 = 0x17;
pub(crate) const TAG_GENERALIZED_TIME: u8 = 0x18;
const TAG_VERSION: u8 = 0xa0;
const TAG_EXTENSIONS: u8 = 0xa3;
const TAG_DNS_NAME: u8 = 0x82;
const TAG_URI: u8 = 0x86;
const OID_SAN: &[u8] = &[0x55, 0x1d, 0x11];
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
/// id-pe-authorityInfoAccess (1.3.6.1.5.5.7.1.1).
const OID_AIA: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x01];
/// id-ad-ocsp (1.3.6.1.5.5.7.48.1).
const OID_AD_OCSP: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x30, 0x01];

/// One DER TLV: `(tag, content, rest)`. Lengths over 4 bytes are refused.
pub(crate) fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let (bytes, after) = rest.split_at_checked(n)?;
        rest = after;
        bytes.iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
    };
    let (content, rest) = rest.split_at_checked(len)?;
    Some((tag, content, rest))
}

/// The TLV at the start of `input` if its tag is `tag`: `(content, rest)`.
pub(crate) fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, content, rest) = tlv(input)?;
    (t == tag).then_some((content, rest))
}

/// The whole TLV (tag and length included) at the start of `input`, and the rest.
fn whole(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let (_, _, rest) = tlv(input)?;
    let used = input.len() - rest.len();
    Some((input.get(..used)?, rest))
}

/// Reads a certificate's `TBSCertificate`.
pub(crate) fn tbs(cert: &[u8]) -> Option<Tbs<'_>> {
    let (certificate, _) = expect(cert, TAG_SEQUENCE)?;
    let (tbs, _) = expect(certificate, TAG_SEQUENCE)?;
    let mut rest = tbs;
    if let Some((TAG_VERSION, _, after)) = tlv(rest) {
        rest = after;
    }
    let (serial, rest) = expect(rest, TAG_INTEGER)?;
    let (_signature, rest) = expect(rest, TAG_SEQUENCE)?;
    let (issuer, rest) = whole(rest)?;
    let (validity, rest) = expect(rest, TAG_SEQUENCE)?;
    let (subject, rest) = whole(rest)?;
    let (spki, mut rest) = expect(rest, TAG_SEQUENCE)?;
    let (not_before, after) = time(validity)?;
    let (not_after, _) = time(after)?;
    let (_algorithm, spki) = expect(spki, TAG_SEQUENCE)?;
    let (bits, _) = expect(spki, TAG_BIT_STRING)?;
    let key_bits = bits.get(1..)?;
    let mut extensions: &[u8] = &[];
    while !rest.is_empty() {
        let (tag, content, after) = tlv(rest)?;
        rest = after;
        if tag == TAG_EXTENSIONS {
            extensions = expect(content, TAG_SEQUENCE)?.0;
        }
    }
    Some(Tbs {
        serial,
        issuer,
        subject,
        not_before,
        not_after,
        key_bits,
        extensions,
    })
}

/// A UTCTime or GeneralizedTime TLV as Unix seconds, and the rest.
pub(crate) fn time(input: &[u8]) -> Option<(i64, &[u8])> {
    let (tag, content, rest) = tlv(input)?;
    let text = std::str::from_utf8(content).ok()?;
    let (year, rest_text) = match tag {
        TAG_UTC_TIME => {
            let yy: i64 = text.get(..2)?.parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, text.get(2..)?)
        }
        TAG_GENERALIZED_TIME => (text.get(..4)?.parse().ok()?, text.get(4..)?),
        _ => return None,
    };
    // MMDDHHMMSS, then (GeneralizedTime) optional fractional seconds, then Z.
    let digits = rest_text.get(..10)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) || !rest_text.ends_with('Z') {
        return None;
    }
    let field = |i: usize| digits.get(i..i + 2).and_then(|s| s.parse::<i64>().ok());
    let (month, day, hour, minute, second) = (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3600 + minute * 60 + second, rest))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The DNS names a certificate serves: its subjectAltName dNSNames, else its subject CN.
/// Anything unexpected in the DER yields no names (the certificate can still be a default).
pub(crate) fn dns_names(cert: &[u8]) -> Vec<String> {
    let Some(t) = tbs(cert) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let _ = san_names(t.extensions, &mut names);
    if names.is_empty()
        && let Some(cn) = expect(t.subject, TAG_SEQUENCE).and_then(|(rdns, _)| subject_cn(rdns))
    {
        names.push(cn);
    }
    names
}

fn subject_cn(mut rdns: &[u8]) -> Option<String> {
    while !rdns.is_empty() {
        let (set, after) = expect(rdns, TAG_SET)?;
        rdns = after;
        let (attr, _) = expect(set, TAG_SEQUENCE)?;
        let (oid, value) = expect(attr, TAG_OID)?;
        if oid == OID_CN {
            let (_, text, _) = tlv(value)?;
            return std::str::from_utf8(text).ok().map(str::to_string);
        }
    }
    None
}

/// The value (OCTET STRING content) of the extension `oid`.
fn extension<'a>(mut exts: &'a [u8], oid: &[u8]) -> Option<&'a [u8]> {
    while !exts.is_empty() {
        let (ext, after) = expect(exts, TAG_SEQUENCE)?;
        exts = after;
        let (id, mut rest) = expect(ext, TAG_OID)?;
        if id != oid {
            continue;
        }
        // critical BOOLEAN is optional
        if let Some((0x01, _, after)) = tlv(rest) {
            rest = after;
        }
        return expect(rest, TAG_OCTET_STRING).map(|(value, _)| value);
    }
    None
}

fn san_names(exts: &[u8], names: &mut Vec<String>) -> Option<()> {
    let value = extension(exts, OID_SAN)?;
    let (mut general_names, _) = expect(value, TAG_SEQUENCE)?;
    while !general_names.is_empty() {
        let (tag, content, after) = tlv(general_names)?;
        general_names = after;
        if tag == TAG_DNS_NAME
            && let Ok(name) = std::str::from_utf8(content)
        {
            names.push(name.to_string());
        }
    }
    Some(())
}

/// The first OCSP responder URL of the certificate's Authority Information Access.
pub(crate) fn ocsp_url(t: &Tbs<'_>) -> Option<String> {
    let value = extension(t.extensions, OID_AIA)?;
    let (mut descriptions, _) = expect(value, TAG_SEQUENCE)?;
    while !descriptions.is_empty() {
        let (description, after) = expect(descriptions, TAG_SEQUENCE)?;
        descriptions = after;
        let (method, location) = expect(description, TAG_OID)?;
        if method == OID_AD_OCSP
            && let Some((uri, _)) = expect(location, TAG_URI)
        {
            return std::str::from_utf8(uri).ok().map(str::to_string);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_come_from_san_then_cn() {
        let mut params = rcgen::CertificateParams::new(vec!["a.example".into(), "*.b.example".into()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, "cn.example");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(dns_names(cert.der()), vec!["a.example", "*.b.example"]);

        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "only-cn.example");
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(dns_names(cert.der()), vec!["only-cn.example"]);
    }

    #[test]
    fn garbage_has_no_names() {
        for bad in [
            &b""[..],
            b"\x30",
            b"\x30\x84\xff\xff\xff\xff",
            b"\x30\x03\x30\x01",
            &[0x30; 64],
        ] {
            assert!(dns_names(bad).is_empty());
            assert!(tbs(bad).is_none());
        }
    }

    #[test]
    fn validity_serial_and_responder_are_read() {
        let mut params = rcgen::CertificateParams::new(vec!["a.example".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2024, 2, 29);
        params.not_after = rcgen::date_time_ymd(2051, 1, 1);
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x01, 0x02, 0x03]));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let t = tbs(cert.der()).unwrap();
        // 2024-02-29T00:00:00Z (UTCTime) and 2051-01-01T00:00:00Z (GeneralizedTime).
        assert_eq!(t.not_before, 1_709_164_800);
        assert_eq!(t.not_after, 2_556_144_000);
        assert_eq!(t.serial, &[0x01, 0x02, 0x03]);
        assert_eq!(t.issuer, t.subject, "self-signed");
        assert!(ocsp_url(&t).is_none());
    }

    #[test]
    fn times_are_strict() {
        let utc = |s: &str| [&[TAG_UTC_TIME, s.len() as u8][..], s.as_bytes()].concat();
        let gen_time = |s: &str| [&[TAG_GENERALIZED_TIME, s.len() as u8][..], s.as_bytes()].concat();
        assert_eq!(time(&utc("700101000000Z")).unwrap().0, 0);
        assert_eq!(time(&gen_time("20380119031408Z")).unwrap().0, 2_147_483_648);
        assert_eq!(time(&gen_time("20380119031408.5Z")).unwrap().0, 2_147_483_648);
        for bad in ["701301000000Z", "70010100000Z", "7001010000000", "7a0101000000Z"] {
            assert!(time(&utc(bad)).is_none(), "{bad}");
        }
    }
}
