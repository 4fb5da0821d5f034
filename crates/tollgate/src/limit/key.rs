//! A stick table's key: bytes, kept inline up to [`INLINE`] (every source address, most
//! host names and short header values), boxed once when longer. Looking a key up never
//! allocates: lookups take `&[u8]`.
//!
//! Encodings: a source address is its 4 (IPv4, also an IPv4-mapped IPv6 address) or 16
//! bytes; an SNI is lowercased; header values are the bytes as sent, paths as routes read
//! them (normalised by the caller, `http::normalize`). Every key
//! is cut to `config::limit::MAX_KEY_LEN` bytes.

use std::net::IpAddr;

use crate::config::limit::{LimitKey, MAX_KEY_LEN};

/// Bytes kept inside the key itself.
pub(crate) const INLINE: usize = 22;

#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Key {
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<[u8]>),
}

impl Key {
    pub(crate) fn new(bytes: &[u8]) -> Key {
        let bytes = bytes.get(..MAX_KEY_LEN).unwrap_or(bytes);
        if bytes.len() <= INLINE {
            let mut inline = [0u8; INLINE];
            if let Some(dst) = inline.get_mut(..bytes.len()) {
                dst.copy_from_slice(bytes);
            }
            Key::Inline {
                len: bytes.len() as u8,
                bytes: inline,
            }
        } else {
            Key::Boxed(bytes.into())
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or_default(),
            Key::Boxed(b) => b,
        }
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// Room for the longest key on the stack (a lowercased SNI, an address).
pub(crate) type KeyBuf = [u8; MAX_KEY_LEN];

/// The bytes of a source address key.
pub(crate) fn source(ip: IpAddr, buf: &mut KeyBuf) -> &[u8] {
    match ip.to_canonical() {
        IpAddr::V4(v4) => copy(&v4.octets(), buf),
        IpAddr::V6(v6) => copy(&v6.octets(), buf),
    }
}

/// An SNI's key: lowercase ASCII, cut to the key length.
pub(crate) fn sni<'b>(name: &str, buf: &'b mut KeyBuf) -> &'b [u8] {
    let n = name.len().min(buf.len());
    for (dst, src) in buf.iter_mut().zip(name.bytes()) {
        *dst = src.to_ascii_lowercase();
    }
    buf.get(..n).unwrap_or_default()
}

/// A value used as sent (header, path), cut to the key length.
pub(crate) fn cut(value: &[u8]) -> &[u8] {
    value.get(..MAX_KEY_LEN).unwrap_or(value)
}

fn copy<'b>(bytes: &[u8], buf: &'b mut KeyBuf) -> &'b [u8] {
    let n = bytes.len().min(buf.len());
    if let (Some(dst), Some(src)) = (buf.get_mut(..n), bytes.get(..n)) {
        dst.copy_from_slice(src);
    }
    buf.get(..n).unwrap_or_default()
}

/// A key as `show table` prints it: an address for `source`, else the bytes with anything
/// not printable ASCII escaped (`\xHH`).
pub(crate) fn display(kind: &LimitKey, bytes: &[u8]) -> String {
    if *kind == LimitKey::Source {
        if let Ok(b) = <[u8; 4]>::try_from(bytes) {
            return IpAddr::from(b).to_string();
        }
        if let Ok(b) = <[u8; 16]>::try_from(bytes) {
            return IpAddr::from(b).to_string();
        }
    }
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_graphic() && b != b'\\' || b == b' ' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The key bytes an operator means by `text` (`clear table LIMIT KEY`): an address for
/// `source`, a lowercased name for `sni`, the text itself otherwise.
pub(crate) fn parse(kind: &LimitKey, text: &str) -> Result<Vec<u8>, String> {
    let mut buf = [0u8; MAX_KEY_LEN];
    match kind {
        LimitKey::Source => text
            .parse::<IpAddr>()
            .map(|ip| source(ip, &mut buf).to_vec())
            .map_err(|_| format!("`{text}` is not an IP address (the table is keyed by source)")),
        LimitKey::Sni => Ok(sni(text, &mut buf).to_vec()),
        LimitKey::Header(_) | LimitKey::Path => Ok(cut(text.as_bytes()).to_vec()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn short_keys_stay_inline_and_long_ones_are_cut() {
        let k = Key::new(b"10.1.2.3");
        assert!(matches!(k, Key::Inline { .. }));
        assert_eq!(k.as_bytes(), b"10.1.2.3");
        let long = vec![b'a'; 500];
        let k = Key::new(&long);
        assert!(matches!(k, Key::Boxed(_)));
        assert_eq!(k.as_bytes().len(), MAX_KEY_LEN);
        assert!(std::mem::size_of::<Key>() <= 24);
    }

    #[test]
    fn addresses_and_names_round_trip_through_text() {
        let mut buf = [0u8; MAX_KEY_LEN];
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(source(mapped, &mut buf), &[192, 0, 2, 1]);
        for text in ["192.0.2.1", "2001:db8::1"] {
            let bytes = parse(&LimitKey::Source, text).unwrap();
            assert_eq!(display(&LimitKey::Source, &bytes), text);
        }
        assert_eq!(parse(&LimitKey::Sni, "A.Example").unwrap(), b"a.example");
        assert_eq!(display(&LimitKey::Path, b"/a b\n\\"), "/a b\\x0a\\x5c");
        assert!(parse(&LimitKey::Source, "nope").is_err());
    }
}
