//! A small, sans-io TLS ClientHello parser for SNI passthrough routing (the SNI matcher that
//! routes on its result is `config::sni`), whose framing half ([`client_hello_len`]) also
//! tells TLS termination when a whole ClientHello has arrived (`tls::terminate`).
//!
//! Owns: recognising the first flight of a TLS client in bytes *peeked* from a socket,
//! reassembling the ClientHello handshake message when it is split over several TLS records
//! (and, since the caller simply calls again with a longer buffer, over several TCP
//! segments), and pulling out what routing needs: the SNI host name, the ALPN list, whether
//! TLS 1.3 is offered, and the legacy versions. It never reads the socket and never decrypts.
//!
//! Rules it keeps:
//! - Nothing a peer sends can panic it: every read is length-checked, no indexing.
//! - Bounded: it never asks for more than `max_len` bytes ([`HelloError::TooLarge`]).
//! - No allocation in the common case (the ClientHello in one record): the result keeps the
//!   SNI and ALPN in inline buffers. Only a hello fragmented over several records is copied
//!   into one contiguous `Vec` before parsing.
//! - The SNI is validated as a DNS name and normalised (lowercase, one trailing dot dropped),
//!   so routing and logs never see arbitrary bytes.
//! - Duplicate `server_name`, ALPN or `supported_versions` extensions are rejected: the backend
//!   would refuse them too, and we must not route on a name the backend never sees.
//!
//! Wire format (RFC 8446 §4.1.2, RFC 5246 §7.4.1.2, RFC 6066 §3, RFC 7301):
//! ```text
//! record    := type(22) | version(3,x) | length u16 | fragment
//! handshake := msg_type(1) | length u24 | ClientHello
//! ClientHello := legacy_version u16 | random[32] | session_id<0..32> | cipher_suites<2..>
//!                | compression_methods<1..> | [extensions<..2^16-1>]
//! ```

use std::fmt;

use crate::config::sni::{MAX_SNI_LEN, normalise_host_name};

/// Length of a TLS record header.
pub const RECORD_HEADER_LEN: usize = 5;
/// Default bound on the bytes [`peek_client_hello`] may need: a 16 KiB handshake message plus
/// room for the headers of a dozen records. Post-quantum key shares make hellos ~1.8 KB.
pub const DEFAULT_MAX_LEN: usize = 16 * 1024 + 64;
/// Longest record we accept (2^14 plus the 2048 bytes the RFCs allow for expansion).
pub const MAX_RECORD_LEN: usize = (1 << 14) + 2048;
/// ALPN bytes kept inline (wire format: u8 length + name per protocol); more are dropped and
/// flagged by [`ClientHelloInfo::alpn_truncated`].
pub const ALPN_INLINE_LEN: usize = 128;

const CONTENT_TYPE_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const HANDSHAKE_HEADER_LEN: usize = 4;
const EXT_SERVER_NAME: u16 = 0;
const EXT_ALPN: u16 = 16;
const EXT_SUPPORTED_VERSIONS: u16 = 43;
const NAME_TYPE_HOST_NAME: u8 = 0;
const TLS13: u16 = 0x0304;

/// Why the peeked bytes are not a ClientHello we can route on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloError {
    /// The bytes do not start like a TLS handshake record (not 0x16, or version major != 3).
    NotTls,
    /// Completing the ClientHello would need more than `max_len` bytes.
    TooLarge,
    /// It starts like TLS but breaks the format; the text says where.
    Malformed(&'static str),
}

impl fmt::Display for HelloError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HelloError::NotTls => f.write_str("not a TLS handshake"),
            HelloError::TooLarge => f.write_str("TLS ClientHello larger than the peek limit"),
            HelloError::Malformed(what) => write!(f, "malformed TLS ClientHello: {what}"),
        }
    }
}

impl std::error::Error for HelloError {}

/// What routing needs from a ClientHello. Owns its data (inline, no heap).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientHelloInfo {
    record_version: u16,
    client_version: u16,
    sni: [u8; MAX_SNI_LEN],
    sni_len: u8,
    has_sni: bool,
    alpn: [u8; ALPN_INLINE_LEN],
    alpn_len: u8,
    alpn_truncated: bool,
    has_supported_versions: bool,
    offers_tls13: bool,
    handshake_len: usize,
    records: usize,
}

impl ClientHelloInfo {
    fn empty() -> Self {
        ClientHelloInfo {
            record_version: 0,
            client_version: 0,
            sni: [0; MAX_SNI_LEN],
            sni_len: 0,
            has_sni: false,
            alpn: [0; ALPN_INLINE_LEN],
            alpn_len: 0,
            alpn_truncated: false,
            has_supported_versions: false,
            offers_tls13: false,
            handshake_len: 0,
            records: 0,
        }
    }

    /// The SNI host name, lowercase, without a trailing dot; `None` if the client sent none.
    pub fn sni(&self) -> Option<&str> {
        if !self.has_sni {
            return None;
        }
        let bytes = self.sni.get(..usize::from(self.sni_len))?;
        std::str::from_utf8(bytes).ok()
    }

    /// The ALPN protocol names offered, in the client's order (see [`Self::alpn_truncated`]).
    pub fn alpn(&self) -> AlpnIter<'_> {
        AlpnIter {
            rest: self.alpn.get(..usize::from(self.alpn_len)).unwrap_or(&[]),
        }
    }

    /// Whether the client offered the ALPN protocol `proto` (e.g. `b"h2"`).
    pub fn offers_alpn(&self, proto: &[u8]) -> bool {
        self.alpn().any(|p| p == proto)
    }

    /// True if the ALPN list did not fit in [`ALPN_INLINE_LEN`] bytes and was cut (at a
    /// protocol boundary).
    pub fn alpn_truncated(&self) -> bool {
        self.alpn_truncated
    }

    /// Whether a `supported_versions` extension was present.
    pub fn has_supported_versions(&self) -> bool {
        self.has_supported_versions
    }

    /// Whether `supported_versions` lists TLS 1.3.
    pub fn offers_tls13(&self) -> bool {
        self.offers_tls13
    }

    /// The version field of the first record header (often 0x0301 for compatibility).
    pub fn record_version(&self) -> u16 {
        self.record_version
    }

    /// The ClientHello's `legacy_version` (0x0303 for TLS 1.2 and 1.3 clients).
    pub fn client_version(&self) -> u16 {
        self.client_version
    }

    /// Length of the handshake message, including its 4-byte header.
    pub fn handshake_len(&self) -> usize {
        self.handshake_len
    }

    /// Over how many TLS records the ClientHello was spread.
    pub fn records(&self) -> usize {
        self.records
    }
}

impl fmt::Debug for ClientHelloInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let alpn: Vec<_> = self.alpn().map(String::from_utf8_lossy).collect();
        f.debug_struct("ClientHelloInfo")
            .field("record_version", &format_args!("{:#06x}", self.record_version))
            .field("client_version", &format_args!("{:#06x}", self.client_version))
            .field("sni", &self.sni())
            .field("alpn", &alpn)
            .field("alpn_truncated", &self.alpn_truncated)
            .field("offers_tls13", &self.offers_tls13)
            .field("handshake_len", &self.handshake_len)
            .field("records", &self.records)
            .finish()
    }
}

/// Iterator over ALPN protocol names kept in a [`ClientHelloInfo`].
#[derive(Clone, Debug)]
pub struct AlpnIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for AlpnIter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let (&len, tail) = self.rest.split_first()?;
        let len = usize::from(len);
        let name = tail.get(..len)?;
        self.rest = tail.get(len..).unwrap_or(&[]);
        Some(name)
    }
}

/// Looks for a complete ClientHello at the start of `buf` (bytes peeked so far).
///
/// - `Ok(None)`: so far so good, call again with more bytes.
/// - `Ok(Some(info))`: the ClientHello is complete and parsed; `buf` is left to the caller
///   (passthrough forwards it unchanged).
/// - `Err(HelloError::TooLarge)`: completing the hello would need more than `max_len` bytes.
/// - `Err(NotTls | Malformed)`: not a TLS client, or a broken one.
///
/// The handshake message may be fragmented over any number of handshake records; a record of
/// another content type before it is complete is an error.
pub fn peek_client_hello(buf: &[u8], max_len: usize) -> Result<Option<ClientHelloInfo>, HelloError> {
    let Some(framed) = frame(buf, max_len)? else {
        return Ok(None);
    };
    let mut info = if framed.records == 1 {
        let msg = buf
            .get(RECORD_HEADER_LEN..framed.end)
            .ok_or(HelloError::Malformed("internal: message bounds"))?;
        parse_handshake_message(msg)?
    } else {
        parse_handshake_message(&gather(buf, framed.handshake_len)?)?
    };
    info.record_version = framed.record_version;
    info.records = framed.records;
    Ok(Some(info))
}

/// The framing half of [`peek_client_hello`], for a caller that only needs to know that a
/// whole ClientHello has arrived (TLS termination, which leaves the parsing to rustls):
/// `Ok(Some(n))` once the first `n` bytes of `buf` hold every record of the ClientHello
/// message; `Ok(None)` and the errors as [`peek_client_hello`]'s, except that the message's
/// contents are not looked at.
pub fn client_hello_len(buf: &[u8], max_len: usize) -> Result<Option<usize>, HelloError> {
    Ok(frame(buf, max_len)?.map(|f| f.end))
}

/// Where a complete ClientHello lies in the peeked bytes.
struct Framed {
    /// Records it spans.
    records: usize,
    record_version: u16,
    /// The handshake message's length, its 4-byte header included.
    handshake_len: usize,
    /// The end of its last byte in `buf`.
    end: usize,
}

/// Walks the records at the start of `buf` until the ClientHello message is whole.
fn frame(buf: &[u8], max_len: usize) -> Result<Option<Framed>, HelloError> {
    let mut pos = 0; // start of the current record header
    let mut records = 0; // complete records passed so far
    let mut record_version = 0;
    let mut hs_seen = 0; // handshake bytes in the records passed so far
    let mut hs_header = [0u8; HANDSHAKE_HEADER_LEN];
    let mut hs_len: Option<usize> = None; // the message's length including its header

    loop {
        let Some(header) = buf.get(pos..pos + RECORD_HEADER_LEN) else {
            check_partial_header(buf.get(pos..).unwrap_or(&[]), records == 0)?;
            let still_needed = match hs_len {
                Some(total) => total.saturating_sub(hs_seen),
                None => HANDSHAKE_HEADER_LEN.saturating_sub(hs_seen),
            };
            return need_more(pos + RECORD_HEADER_LEN + still_needed.max(1), max_len);
        };
        let record = parse_record_header(header, records == 0)?;
        if records == 0 {
            record_version = record.version;
        }
        let frag_start = pos + RECORD_HEADER_LEN;
        let frag_end = frag_start + record.len;
        let available = buf.get(frag_start..frag_end.min(buf.len())).unwrap_or(&[]);

        // The 4-byte handshake header may itself be split over records.
        if hs_len.is_none() {
            let missing = HANDSHAKE_HEADER_LEN.saturating_sub(hs_seen);
            let dst = hs_header.get_mut(hs_seen..).unwrap_or(&mut []);
            for (slot, &b) in dst.iter_mut().zip(available.iter().take(missing)) {
                *slot = b;
            }
            if available.len() >= missing {
                let [msg_type, l0, l1, l2] = hs_header;
                if msg_type != HANDSHAKE_CLIENT_HELLO {
                    return Err(HelloError::Malformed("handshake message is not a ClientHello"));
                }
                let body_len = (usize::from(l0) << 16) | (usize::from(l1) << 8) | usize::from(l2);
                hs_len = Some(HANDSHAKE_HEADER_LEN + body_len);
            }
        }

        match hs_len {
            Some(total) => {
                let remaining = total.saturating_sub(hs_seen);
                if remaining <= record.len {
                    // The message ends inside this record.
                    let needed = frag_start + remaining;
                    if needed > buf.len() || needed > max_len {
                        return need_more(needed, max_len);
                    }
                    return Ok(Some(Framed {
                        records: records + 1,
                        record_version,
                        handshake_len: total,
                        end: needed,
                    }));
                }
                // More records are needed: at least their headers and the rest of the message.
                let needed = frag_end + RECORD_HEADER_LEN + (remaining - record.len);
                if frag_end > buf.len() || needed > max_len {
                    return need_more(needed, max_len);
                }
            }
            None => {
                if frag_end > buf.len() {
                    return need_more(buf.len() + 1, max_len);
                }
            }
        }
        hs_seen += record.len;
        pos = frag_end;
        records += 1;
    }
}

fn need_more(needed: usize, max_len: usize) -> Result<Option<Framed>, HelloError> {
    if needed > max_len {
        Err(HelloError::TooLarge)
    } else {
        Ok(None)
    }
}

struct RecordHeader {
    version: u16,
    len: usize,
}

/// Checks the bytes of a record header that have arrived so far, so that non-TLS traffic is
/// refused on its first byte instead of after five.
fn check_partial_header(partial: &[u8], first: bool) -> Result<(), HelloError> {
    if let Some(&content_type) = partial.first() {
        check_content_type(content_type, first)?;
    }
    if let Some(&major) = partial.get(1) {
        check_version_major(major, first)?;
    }
    Ok(())
}

fn check_content_type(content_type: u8, first: bool) -> Result<(), HelloError> {
    match (content_type == CONTENT_TYPE_HANDSHAKE, first) {
        (true, _) => Ok(()),
        (false, true) => Err(HelloError::NotTls),
        (false, false) => Err(HelloError::Malformed("non-handshake record inside the ClientHello")),
    }
}

fn check_version_major(major: u8, first: bool) -> Result<(), HelloError> {
    match (major == 3, first) {
        (true, _) => Ok(()),
        (false, true) => Err(HelloError::NotTls),
        (false, false) => Err(HelloError::Malformed("record version major is not 3")),
    }
}

fn parse_record_header(header: &[u8], first: bool) -> Result<RecordHeader, HelloError> {
    let &[content_type, major, minor, l0, l1] = header else {
        return Err(HelloError::Malformed("internal: record header length"));
    };
    check_content_type(content_type, first)?;
    check_version_major(major, first)?;
    let len = usize::from(u16::from_be_bytes([l0, l1]));
    if len > MAX_RECORD_LEN {
        return Err(HelloError::Malformed("record longer than 2^14 + 2048"));
    }
    if len == 0 {
        return Err(HelloError::Malformed("empty handshake record"));
    }
    Ok(RecordHeader {
        version: u16::from_be_bytes([major, minor]),
        len,
    })
}

/// Copies the first `total` handshake bytes out of the records at the start of `buf`
/// (already validated by the caller) into one contiguous buffer.
fn gather(buf: &[u8], total: usize) -> Result<Vec<u8>, HelloError> {
    let mut msg = Vec::with_capacity(total);
    let mut pos = 0;
    while msg.len() < total {
        let header = buf
            .get(pos..pos + RECORD_HEADER_LEN)
            .ok_or(HelloError::Malformed("internal: record missing"))?;
        let record = parse_record_header(header, pos == 0)?;
        let frag_start = pos + RECORD_HEADER_LEN;
        let take = record.len.min(total - msg.len());
        let fragment = buf
            .get(frag_start..frag_start + take)
            .ok_or(HelloError::Malformed("internal: fragment missing"))?;
        msg.extend_from_slice(fragment);
        pos = frag_start + record.len;
    }
    Ok(msg)
}

/// Length-checked reader over a byte slice.
#[derive(Clone, Copy)]
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HelloError> {
        let head = self.rest.get(..n).ok_or(HelloError::Malformed(what))?;
        self.rest = self.rest.get(n..).unwrap_or(&[]);
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, HelloError> {
        let (&b, tail) = self.rest.split_first().ok_or(HelloError::Malformed(what))?;
        self.rest = tail;
        Ok(b)
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, HelloError> {
        match self.bytes(2, what)? {
            &[a, b] => Ok(u16::from_be_bytes([a, b])),
            _ => Err(HelloError::Malformed(what)),
        }
    }

    /// A sub-reader over a vector with a u8 length prefix.
    fn vec8(&mut self, what: &'static str) -> Result<Reader<'a>, HelloError> {
        let len = usize::from(self.u8(what)?);
        Ok(Reader::new(self.bytes(len, what)?))
    }

    /// A sub-reader over a vector with a u16 length prefix.
    fn vec16(&mut self, what: &'static str) -> Result<Reader<'a>, HelloError> {
        let len = usize::from(self.u16(what)?);
        Ok(Reader::new(self.bytes(len, what)?))
    }
}

/// Parses one complete handshake message (4-byte header included) that must be a ClientHello.
fn parse_handshake_message(msg: &[u8]) -> Result<ClientHelloInfo, HelloError> {
    let mut r = Reader::new(msg);
    if r.u8("handshake header")? != HANDSHAKE_CLIENT_HELLO {
        return Err(HelloError::Malformed("handshake message is not a ClientHello"));
    }
    r.bytes(3, "handshake header")?;
    let mut info = ClientHelloInfo::empty();
    info.handshake_len = msg.len();

    info.client_version = r.u16("legacy_version")?;
    if info.client_version >> 8 != 3 {
        return Err(HelloError::Malformed("legacy_version major is not 3"));
    }
    r.bytes(32, "random")?;
    if r.vec8("session_id")?.rest.len() > 32 {
        return Err(HelloError::Malformed("session_id longer than 32 bytes"));
    }
    let suites = r.vec16("cipher_suites")?;
    if suites.is_empty() || suites.rest.len() % 2 != 0 {
        return Err(HelloError::Malformed("cipher_suites length"));
    }
    if r.vec8("compression_methods")?.is_empty() {
        return Err(HelloError::Malformed("no compression methods"));
    }
    if r.is_empty() {
        return Ok(info); // no extensions: a TLS 1.0-1.2 client may omit them
    }
    let mut extensions = r.vec16("extensions")?;
    if !r.is_empty() {
        return Err(HelloError::Malformed("bytes after the extensions"));
    }
    let (mut seen_sni, mut seen_alpn) = (false, false);
    while !extensions.is_empty() {
        let ext_type = extensions.u16("extension type")?;
        let mut data = extensions.vec16("extension data")?;
        match ext_type {
            EXT_SERVER_NAME => {
                if std::mem::replace(&mut seen_sni, true) {
                    return Err(HelloError::Malformed("duplicate server_name extension"));
                }
                parse_server_name(&mut data, &mut info)?;
            }
            EXT_ALPN => {
                if std::mem::replace(&mut seen_alpn, true) {
                    return Err(HelloError::Malformed("duplicate ALPN extension"));
                }
                parse_alpn(&mut data, &mut info)?;
            }
            EXT_SUPPORTED_VERSIONS => {
                if std::mem::replace(&mut info.has_supported_versions, true) {
                    return Err(HelloError::Malformed("duplicate supported_versions extension"));
                }
                let mut versions = data.vec8("supported_versions")?;
                if versions.is_empty() || versions.rest.len() % 2 != 0 || !data.is_empty() {
                    return Err(HelloError::Malformed("supported_versions length"));
                }
                while !versions.is_empty() {
                    if versions.u16("supported_versions")? == TLS13 {
                        info.offers_tls13 = true;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(info)
}

fn parse_server_name(data: &mut Reader<'_>, info: &mut ClientHelloInfo) -> Result<(), HelloError> {
    let mut list = data.vec16("server_name list")?;
    if list.is_empty() || !data.is_empty() {
        return Err(HelloError::Malformed("server_name list length"));
    }
    while !list.is_empty() {
        let name_type = list.u8("server_name type")?;
        let name = list.vec16("server_name")?.rest;
        if name_type != NAME_TYPE_HOST_NAME {
            continue; // no other name type is defined; skip it as RFC 6066 allows
        }
        if info.has_sni {
            return Err(HelloError::Malformed("more than one host_name"));
        }
        let len = normalise_host_name(name, &mut info.sni)
            .ok_or(HelloError::Malformed("SNI host_name is not a valid DNS name"))?;
        info.sni_len = u8::try_from(len).map_err(|_| HelloError::Malformed("SNI too long"))?;
        info.has_sni = true;
    }
    Ok(())
}

fn parse_alpn(data: &mut Reader<'_>, info: &mut ClientHelloInfo) -> Result<(), HelloError> {
    let mut list = data.vec16("ALPN list")?;
    if list.is_empty() || !data.is_empty() {
        return Err(HelloError::Malformed("ALPN list length"));
    }
    let mut kept = 0;
    while !list.is_empty() {
        let proto = list.vec8("ALPN protocol")?.rest;
        if proto.is_empty() {
            return Err(HelloError::Malformed("empty ALPN protocol name"));
        }
        let end = kept + 1 + proto.len();
        match (info.alpn_truncated, info.alpn.get_mut(kept..end)) {
            (false, Some(dst)) => {
                if let Some((len_slot, name_slot)) = dst.split_first_mut() {
                    *len_slot = u8::try_from(proto.len()).unwrap_or(0);
                    name_slot.copy_from_slice(proto);
                }
                kept = end;
            }
            _ => info.alpn_truncated = true,
        }
    }
    info.alpn_len = u8::try_from(kept).unwrap_or(0);
    Ok(())
}

#[cfg(test)]
mod tests;
