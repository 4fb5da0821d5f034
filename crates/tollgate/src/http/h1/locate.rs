//! Where a refused head went wrong: the offset of the offending byte, for `show errors`.
//!
//! The parser says *what* is wrong (`H1Error`) and stays fast; this looks again, only on
//! the error path, at the bytes it refused and finds *where*, as HAProxy's error captures
//! show it. Sans-io and total: any input gives an offset within `buf` (or `buf.len()`), a
//! kind this cannot place gives the start of the line most likely at fault, else 0.

use super::error::{ErrorKind, H1Error};
use super::headers::is_tchar;

/// The offset in `buf` (a message from its first byte) of the byte `err` is about.
pub fn offending_byte(buf: &[u8], err: &H1Error) -> usize {
    let head = head_of(buf);
    let found = match err.kind() {
        ErrorKind::BadMethod => first_line_part(head, 0).and_then(|(s, p)| first(p, |b| !is_tchar(b)).map(|i| s + i)),
        ErrorKind::BadTarget => first_line_part(head, 1).map(|(s, p)| s + first(p, bad_target_byte).unwrap_or(0)),
        ErrorKind::BadVersion | ErrorKind::UnsupportedVersion => first_line_part(head, 2).map(|(s, _)| s),
        ErrorKind::BadStatus => first_line_part(head, 1).map(|(s, _)| s),
        ErrorKind::BadRequestLine | ErrorKind::RequestLineTooLong => Some(line_end(head, 0)),
        // httparse reports an obs-fold line as a bad name too.
        ErrorKind::BadHeaderName => header_lines(head)
            .find_map(|(s, l)| bad_name(l).map(|i| s + i))
            .or_else(|| fold(head)),
        ErrorKind::BadHeaderValue => header_lines(head).find_map(|(s, l)| bad_value(l).map(|i| s + i)),
        ErrorKind::ObsFold => fold(head),
        ErrorKind::BadLineEnding => {
            bare_cr(head).or_else(|| header_lines(head).find(|(_, l)| !l.contains(&b':')).map(|(s, _)| s))
        }
        ErrorKind::DuplicateHost => named(head, b"host").nth(1).map(|(s, _)| s),
        ErrorKind::BadHost | ErrorKind::HostMismatch => named(head, b"host").next().map(|(s, _)| s),
        ErrorKind::ConflictingContentLength => conflicting_length(head),
        ErrorKind::BadContentLength => named(head, b"content-length")
            .find(|(_, v)| !trimmed(v).iter().all(u8::is_ascii_digit) || trimmed(v).is_empty())
            .map(|(s, _)| s),
        ErrorKind::TransferEncodingWithContentLength => {
            let te = named(head, b"transfer-encoding").map(|(s, _)| s).next();
            let cl = named(head, b"content-length").map(|(s, _)| s).next();
            te.zip(cl).map(|(a, b)| a.max(b))
        }
        ErrorKind::BadTransferEncoding | ErrorKind::UnknownTransferCoding => {
            named(head, b"transfer-encoding").map(|(s, _)| s).next()
        }
        ErrorKind::MissingHost | ErrorKind::HeadTooLarge | ErrorKind::TooManyHeaders => Some(head.len()),
        _ => None,
    };
    found.unwrap_or(0).min(buf.len())
}

/// The head: up to and including its blank line, or all of `buf`.
fn head_of(buf: &[u8]) -> &[u8] {
    match buf.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => buf.get(..i + 2).unwrap_or(buf),
        None => buf,
    }
}

fn first(bytes: &[u8], pred: impl Fn(u8) -> bool) -> Option<usize> {
    bytes.iter().position(|&b| pred(b))
}

/// Where the line starting at `start` ends (its CR, LF, or the end).
fn line_end(buf: &[u8], start: usize) -> usize {
    let rest = buf.get(start..).unwrap_or_default();
    start
        + first(rest, |b| b == b'\n').map_or(rest.len(), |i| {
            if i > 0 && rest.get(i - 1) == Some(&b'\r') {
                i - 1
            } else {
                i
            }
        })
}

/// The `n`th space-separated part of the first line: (offset, bytes).
fn first_line_part(head: &[u8], n: usize) -> Option<(usize, &[u8])> {
    let line = head.get(..line_end(head, 0))?;
    let mut start = 0;
    for (i, part) in line.split(|&b| b == b' ').enumerate() {
        if i == n {
            return Some((start, part));
        }
        start += part.len() + 1;
    }
    None
}

fn bad_target_byte(b: u8) -> bool {
    b <= b' ' || b == 0x7f || b >= 0x80 || b == b'#'
}

/// Every header line (the first line and the blank line left out): (offset, line without
/// its line ending).
fn header_lines(head: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut at = match first(head, |b| b == b'\n') {
        Some(i) => i + 1,
        None => head.len(),
    };
    std::iter::from_fn(move || {
        if at >= head.len() {
            return None;
        }
        let start = at;
        let end = line_end(head, start);
        let next = head
            .get(end..)
            .and_then(|r| first(r, |b| b == b'\n'))
            .map_or(head.len(), |i| end + i + 1);
        at = next;
        let line = head.get(start..end)?;
        (!line.is_empty()).then_some((start, line))
    })
}

/// The first byte of a header line's name that is not a token byte (or its colon, when
/// the name is empty).
fn bad_name(line: &[u8]) -> Option<usize> {
    if matches!(line.first(), Some(b' ' | b'\t')) {
        return None;
    }
    let colon = first(line, |b| b == b':');
    let name = line.get(..colon.unwrap_or(line.len()))?;
    match first(name, |b| !is_tchar(b)) {
        Some(i) => Some(i),
        None if name.is_empty() => colon,
        None => None,
    }
}

/// The first control byte of a header line's value.
fn bad_value(line: &[u8]) -> Option<usize> {
    let colon = first(line, |b| b == b':')?;
    let value = line.get(colon + 1..)?;
    first(value, |b| (b < b' ' && b != b'\t') || b == 0x7f).map(|i| colon + 1 + i)
}

/// The first continuation line (obs-fold).
fn fold(head: &[u8]) -> Option<usize> {
    header_lines(head)
        .find(|(_, l)| matches!(l.first(), Some(b' ' | b'\t')))
        .map(|(s, _)| s)
}

fn bare_cr(head: &[u8]) -> Option<usize> {
    head.iter()
        .enumerate()
        .position(|(i, &b)| b == b'\r' && head.get(i + 1) != Some(&b'\n'))
}

/// Header lines named `name` (any case): (offset of the value, value).
fn named<'a>(head: &'a [u8], name: &'a [u8]) -> impl Iterator<Item = (usize, &'a [u8])> + 'a {
    header_lines(head).filter_map(move |(s, l)| {
        let colon = first(l, |b| b == b':')?;
        let n = l.get(..colon)?;
        n.eq_ignore_ascii_case(name)
            .then(|| (s + colon + 1, l.get(colon + 1..).unwrap_or_default()))
    })
}

fn trimmed(v: &[u8]) -> &[u8] {
    super::headers::trim_ows(v)
}

/// The first Content-Length value (or list element) that differs from the first one.
fn conflicting_length(head: &[u8]) -> Option<usize> {
    let mut seen: Option<&[u8]> = None;
    for (s, v) in named(head, b"content-length") {
        for element in v.split(|&b| b == b',') {
            let e = trimmed(element);
            match seen {
                None => seen = Some(e),
                Some(first) if first != e => return Some(s),
                Some(_) => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::h1::error::Side;

    fn at(buf: &[u8], kind: ErrorKind) -> usize {
        offending_byte(buf, &H1Error::new(kind, Side::Request))
    }

    #[test]
    fn the_offending_byte_of_each_kind() {
        let bad_name = b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n";
        assert_eq!(at(bad_name, ErrorKind::BadHeaderName), 28);
        assert_eq!(bad_name[28], b' ');
        let two = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc";
        let off = at(two, ErrorKind::ConflictingContentLength);
        assert_eq!(&two[off..off + 2], b" 4");
        assert_eq!(at(b"G@T / HTTP/1.1\r\n\r\n", ErrorKind::BadMethod), 1);
        assert_eq!(at(b"GET /a\x01b HTTP/1.1\r\n\r\n", ErrorKind::BadTarget), 6);
        assert_eq!(at(b"GET / HTTP/9.1\r\n\r\n", ErrorKind::UnsupportedVersion), 6);
        assert_eq!(at(b"HTTP/1.1 2x0 OK\r\n\r\n", ErrorKind::BadStatus), 9);
        let value = b"GET / HTTP/1.1\r\nX: a\x01\r\n\r\n";
        assert_eq!(at(value, ErrorKind::BadHeaderValue), 20);
        let fold = b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n";
        assert_eq!(at(fold, ErrorKind::ObsFold), 22);
        let hosts = b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n";
        assert_eq!(at(hosts, ErrorKind::DuplicateHost), 30);
        assert_eq!(at(b"GET / HTTP/1.1\r\n\r\n", ErrorKind::MissingHost), 16);
        // Whatever comes in, the offset stays inside the buffer.
        for kind in [
            ErrorKind::BadHeaderName,
            ErrorKind::BadLineEnding,
            ErrorKind::TruncatedBody,
        ] {
            assert!(at(b"", kind) == 0 && at(b"\r", kind) <= 1 && at(b"a:b\n\n", kind) <= 5);
        }
    }
}
