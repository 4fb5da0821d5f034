//! A verified client certificate as servers are told about it: its subject as an RFC 4514
//! string and the SHA-256 of its DER. Read once per connection, with `config::x509`'s
//! bounded DER reader.
//!
//! Invariant: the subject text is printable ASCII only. The certificate is the client's (a
//! CA vouched for it, not for its bytes being harmless): RFC 4514's specials are escaped
//! with `\`, and every other byte outside 0x20..0x7e (controls, DEL, UTF-8) as `\XX`, so no
//! CR, LF or NUL can reach a header line.

use std::fmt::Write;

use sha2::{Digest, Sha256};

use crate::config::x509::{TAG_OID, TAG_SEQUENCE, expect, tbs, tlv};

const TAG_SET: u8 = 0x31;

/// Short names of RFC 4514 (and OpenSSL's `emailAddress`), by DER OID content.
const NAMES: [(&[u8], &str); 10] = [
    (&[0x55, 0x04, 0x03], "CN"),
    (&[0x55, 0x04, 0x06], "C"),
    (&[0x55, 0x04, 0x07], "L"),
    (&[0x55, 0x04, 0x08], "ST"),
    (&[0x55, 0x04, 0x09], "STREET"),
    (&[0x55, 0x04, 0x0a], "O"),
    (&[0x55, 0x04, 0x0b], "OU"),
    (&[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19], "DC"),
    (&[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01], "UID"),
    (&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01], "emailAddress"),
];

/// The SHA-256 of `der`, lowercase hex.
pub(crate) fn fingerprint(der: &[u8]) -> String {
    crate::config::cert_store::hex(&Sha256::digest(der))
}

/// The subject as RFC 4514 writes it (last RDN first, `,` between RDNs, `+` inside one);
/// empty when the DER is not a certificate this walk understands.
pub(crate) fn subject(cert: &[u8]) -> String {
    let mut out = String::new();
    subject_into(cert, &mut out);
    out
}

/// `subject`, written into `out` (cleared first; storage reused from request to request).
pub(crate) fn subject_into(cert: &[u8], out: &mut String) {
    out.clear();
    if subject_rdns(cert).and_then(|rdns| write_rdns(rdns, out)).is_none() {
        out.clear();
    }
}

/// The content of the subject Name.
fn subject_rdns(cert: &[u8]) -> Option<&[u8]> {
    expect(tbs(cert)?.subject, TAG_SEQUENCE).map(|(rdns, _)| rdns)
}

fn write_rdns(mut rdns: &[u8], out: &mut String) -> Option<()> {
    let mut sets = Vec::new();
    while !rdns.is_empty() {
        let (set, after) = expect(rdns, TAG_SET)?;
        sets.push(set);
        rdns = after;
    }
    for (i, mut set) in sets.into_iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let mut first = true;
        while !set.is_empty() {
            let (attr, after) = expect(set, TAG_SEQUENCE)?;
            set = after;
            if !first {
                out.push('+');
            }
            first = false;
            let (oid, value) = expect(attr, TAG_OID)?;
            write_attribute(oid, value, out)?;
        }
    }
    Some(())
}

fn write_attribute(oid: &[u8], value: &[u8], out: &mut String) -> Option<()> {
    let (tag, content, _) = tlv(value)?;
    let known = NAMES.iter().find(|(o, _)| *o == oid).map(|(_, n)| *n);
    match known {
        Some(name) => out.push_str(name),
        None => write_oid(oid, out)?,
    }
    out.push('=');
    match (known, string_bytes(tag, content)) {
        (Some(_), Some(text)) => escape(&text, out),
        // RFC 4514 2.4: an unknown type (or a value not a string) as `#` and its DER in hex.
        _ => {
            out.push('#');
            let whole = value.len() - tlv(value)?.2.len();
            for b in value.get(..whole)? {
                let _ = write!(out, "{b:02X}");
            }
        }
    }
    Some(())
}

/// A directory string's characters as UTF-8 bytes (BMPString decoded from UTF-16).
fn string_bytes(tag: u8, content: &[u8]) -> Option<Vec<u8>> {
    match tag {
        // UTF8String, PrintableString, TeletexString, IA5String
        0x0c | 0x13 | 0x14 | 0x16 => Some(content.to_vec()),
        // BMPString
        0x1e => {
            let units: Vec<u16> = content
                .chunks_exact(2)
                .map(|p| u16::from_be_bytes([p.first().copied().unwrap_or(0), p.get(1).copied().unwrap_or(0)]))
                .collect();
            Some(String::from_utf16_lossy(&units).into_bytes())
        }
        _ => None,
    }
}

/// RFC 4514 2.4 escaping, and `\XX` for every byte that is not printable ASCII.
fn escape(value: &[u8], out: &mut String) {
    let last = value.len().saturating_sub(1);
    for (i, &b) in value.iter().enumerate() {
        let special = matches!(b, b'"' | b'+' | b',' | b';' | b'<' | b'>' | b'\\')
            || (i == 0 && (b == b'#' || b == b' '))
            || (i == last && b == b' ');
        if special {
            out.push('\\');
            out.push(char::from(b));
        } else if (0x20..0x7f).contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "\\{b:02X}");
        }
    }
}

/// An OID's dotted-decimal form.
fn write_oid(oid: &[u8], out: &mut String) -> Option<()> {
    let mut arcs = Vec::new();
    let mut acc: u64 = 0;
    for &b in oid {
        acc = acc.checked_mul(128)?.checked_add(u64::from(b & 0x7f))?;
        if b & 0x80 == 0 {
            arcs.push(acc);
            acc = 0;
        }
    }
    let first = *arcs.first()?;
    let (a, b) = if first < 80 {
        (first / 40, first % 40)
    } else {
        (2, first - 80)
    };
    let _ = write!(out, "{a}.{b}");
    for arc in arcs.get(1..).unwrap_or_default() {
        let _ = write!(out, ".{arc}");
    }
    Some(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cert_with(dn: &[(rcgen::DnType, &str)]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["c.example".into()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in dn {
            params.distinguished_name.push(t.clone(), *v);
        }
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn subject_reads_as_rfc4514() {
        let der = cert_with(&[
            (rcgen::DnType::CountryName, "FR"),
            (rcgen::DnType::OrganizationName, "Example, Inc."),
            (rcgen::DnType::CommonName, "client-1"),
        ]);
        assert_eq!(subject(&der), "CN=client-1,O=Example\\, Inc.,C=FR");
        let der = cert_with(&[(rcgen::DnType::CustomDnType(vec![1, 2, 3, 4]), "x")]);
        assert_eq!(subject(&der), "1.2.3.4=#0C0178");
    }

    #[test]
    fn nothing_unprintable_gets_through() {
        let der = cert_with(&[(rcgen::DnType::CommonName, "evil\r\nX-Injected: 1\u{0}é #")]);
        let s = subject(&der);
        assert_eq!(s, "CN=evil\\0D\\0AX-Injected: 1\\00\\C3\\A9 #");
        assert!(s.bytes().all(|b| (0x20..0x7f).contains(&b)), "{s}");
        let der = cert_with(&[(rcgen::DnType::CommonName, " lead and trail ")]);
        assert_eq!(subject(&der), "CN=\\ lead and trail\\ ");
    }

    #[test]
    fn garbage_has_no_subject_and_fingerprints_are_sha256() {
        for bad in [&b""[..], b"\x30", b"\x30\x03\x30\x01\x00", &[0x30; 40]] {
            assert_eq!(subject(bad), "");
        }
        assert_eq!(
            fingerprint(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
