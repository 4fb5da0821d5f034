//! Request paths and hosts as rules match them: RFC 3986 §6.2.2 normalisation, so that
//! `//admin`, `/./admin`, `/x/../admin`, `/%2e%2e/admin` and `/%61dmin` all read `/admin`, and
//! `ADMIN.example.` reads `admin.example`.
//!
//! Owns [`path`], [`target`], [`is_normal`], [`host`] and [`without_port`]. A path is normalised in this order:
//! percent-encoded unreserved bytes (`A-Z a-z 0-9 - . _ ~`) are decoded and the hex digits of
//! every other percent-encoding uppercased (§6.2.2.1, §6.2.2.2; `%2F` stays `%2F`: a slash
//! encoded is data, not a separator, and `%25` stays `%25`, so nothing is decoded twice), and a
//! `%` that starts no encoding is written `%25` (else `%%341` would decode to `%41`, a new
//! encoding, and normalising would not be idempotent); then,
//! segment by segment, empty segments (duplicate slashes) and `.` segments are dropped and `..`
//! drops the segment before it (§5.2.4; at the root it is dropped), a path that ended in a
//! dropped segment keeping its trailing slash. Slashes are merged before dots are resolved, as
//! servers that merge them do (`/a//../b` is `/b`).
//!
//! Invariants: the result is normal ([`is_normal`] holds: normalising it again changes
//! nothing), starts with `/` when the input did, and has no `.` or `..` segment, whatever the
//! input. Nothing allocates for a path that is already normal (the common case: it is
//! borrowed); only one that needs rewriting gets a buffer. A path that does not start with
//! `/` (`*`, or no path at all) is left as it is. The query is never touched.

use std::borrow::Cow;

/// RFC 3986 §2.3.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The byte a `%XY` at the start of `rest` encodes, if it is one.
fn percent_at(rest: &[u8]) -> Option<u8> {
    match rest {
        [b'%', h, l, ..] => Some(hex_value(*h)? << 4 | hex_value(*l)?),
        _ => None,
    }
}

/// Whether `path` is already normal: nothing to decode or uppercase, no empty, `.` or `..`
/// segment. One pass, no allocation.
pub fn is_normal(path: &[u8]) -> bool {
    if path.first() != Some(&b'/') {
        return true;
    }
    let mut i = 0;
    // Bounded: `i` grows every round.
    while let Some(&b) = path.get(i) {
        if b == b'%' {
            let Some(decoded) = percent_at(path.get(i..).unwrap_or_default()) else {
                return false;
            };
            let hex = path.get(i + 1..i + 3).unwrap_or_default();
            if unreserved(decoded) || hex.iter().any(u8::is_ascii_lowercase) {
                return false;
            }
            i += 3;
            continue;
        }
        i += 1;
    }
    // `path` starts with '/': every split after the first is a segment.
    let mut segments = path.split(|&b| b == b'/').skip(1).peekable();
    while let Some(seg) = segments.next() {
        let last = segments.peek().is_none();
        if seg == b"." || seg == b".." || (seg.is_empty() && !last) {
            return false;
        }
    }
    true
}

/// `path` (without its query) normalised: borrowed when it already is.
pub fn path(path: &[u8]) -> Cow<'_, [u8]> {
    if is_normal(path) {
        return Cow::Borrowed(path);
    }
    let mut out = Vec::with_capacity(path.len());
    write_path(path, &mut out);
    Cow::Owned(out)
}

/// A request target with its path normalised, scheme, authority and query as sent:
/// origin-form (`/p?q`) or absolute-form (`http://h/p?q`); any other form as it is.
/// Borrowed when the path already is normal.
pub fn target(target: &[u8]) -> Cow<'_, [u8]> {
    let path_at = if target.first() == Some(&b'/') {
        0
    } else {
        let Some(authority) = target.windows(3).position(|w| w == b"://").map(|i| i + 3) else {
            return Cow::Borrowed(target);
        };
        let rest = target.get(authority..).unwrap_or_default();
        authority + rest.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(rest.len())
    };
    let (prefix, rest) = target.split_at_checked(path_at).unwrap_or((&[], target));
    let (p, query) = match rest.iter().position(|&b| b == b'?') {
        Some(i) => (rest.get(..i).unwrap_or_default(), rest.get(i..)),
        None => (rest, None),
    };
    if is_normal(p) {
        return Cow::Borrowed(target);
    }
    let mut out = Vec::with_capacity(target.len());
    out.extend_from_slice(prefix);
    write_path(p, &mut out);
    out.extend_from_slice(query.unwrap_or_default());
    Cow::Owned(out)
}

/// Appends `path` normalised (it starts with `/`, else it goes as it is).
fn write_path(path: &[u8], out: &mut Vec<u8>) {
    if path.first() != Some(&b'/') {
        out.extend_from_slice(path);
        return;
    }
    // Pass 1: percent-decoding of unreserved bytes, uppercase hex for the rest.
    let mut decoded = Vec::with_capacity(path.len());
    let mut i = 0;
    // Bounded: `i` grows every round.
    while let Some(&b) = path.get(i) {
        if b == b'%' {
            let Some(byte) = percent_at(path.get(i..).unwrap_or_default()) else {
                decoded.extend_from_slice(b"%25");
                i += 1;
                continue;
            };
            if unreserved(byte) {
                decoded.push(byte);
            } else {
                decoded.push(b'%');
                let hex = path.get(i + 1..i + 3).unwrap_or_default();
                decoded.extend(hex.iter().map(u8::to_ascii_uppercase));
            }
            i += 3;
            continue;
        }
        decoded.push(b);
        i += 1;
    }
    // Pass 2: segments. `out` holds "/seg" pieces only, so `..` truncates to its last '/'.
    let start = out.len();
    let mut trailing = false;
    for seg in decoded.split(|&b| b == b'/').skip(1) {
        trailing = false;
        match seg {
            b"" | b"." => trailing = true,
            b".." => {
                let piece = out.get(start..).unwrap_or_default();
                let cut = piece.iter().rposition(|&b| b == b'/').map_or(start, |p| start + p);
                out.truncate(cut);
                trailing = true;
            }
            _ => {
                out.push(b'/');
                out.extend_from_slice(seg);
            }
        }
    }
    if trailing || out.len() == start {
        out.push(b'/');
    }
}

/// An authority as rules match it: without port, lowercase, one trailing dot dropped
/// (`Admin.Example.:8080` is `admin.example`), written into `out`; `None` if it does not fit
/// or is not UTF-8.
pub fn host<'b>(raw: &[u8], out: &'b mut [u8; 256]) -> Option<&'b str> {
    let without_port = without_port(raw);
    let name = without_port.strip_suffix(b".").unwrap_or(without_port);
    let dst = out.get_mut(..name.len())?;
    for (d, s) in dst.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    std::str::from_utf8(dst).ok()
}

/// An authority without its port (`[v6]:port` keeps its brackets).
pub fn without_port(raw: &[u8]) -> &[u8] {
    match raw.iter().rposition(|&b| b == b':') {
        Some(i) if !raw.starts_with(b"[") || raw.get(i.saturating_sub(1)) == Some(&b']') => raw.get(..i).unwrap_or(raw),
        _ => raw,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn norm(p: &str) -> String {
        String::from_utf8(path(p.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn each_bypass_reads_as_the_plain_path() {
        for p in [
            "/admin",
            "//admin",
            "///admin",
            "/./admin",
            "/x/../admin",
            "/x/y/../../admin",
            "/%2e%2e/admin",
            "/%2E%2E/admin",
            "/.%2e/admin",
            "/x/%2e%2e/admin",
            "/x/%2E./admin",
            "/%2e/admin",
            "/%61dmin",
            "/%61%64%6d%69%6e",
            "/../admin",
            "/../../admin",
            "/x//..//admin",
        ] {
            assert_eq!(norm(p), "/admin", "{p}");
        }
    }

    #[test]
    fn rfc_3986_examples_and_edges() {
        // RFC 3986 §5.2.4's own examples (absolute paths).
        assert_eq!(norm("/a/b/c/./../../g"), "/a/g");
        assert_eq!(norm("/mid/content=5/../6"), "/mid/6");
        for (p, want) in [
            ("/", "/"),
            ("//", "/"),
            ("/.", "/"),
            ("/..", "/"),
            ("/a/", "/a/"),
            ("/a//", "/a/"),
            ("/a/.", "/a/"),
            ("/a/b/..", "/a/"),
            ("/a/..", "/"),
            ("/a/../", "/"),
            ("/...", "/..."),
            ("/a/.b/..c", "/a/.b/..c"),
            // Percent-encodings other than unreserved bytes stay, uppercased.
            ("/a%2fb", "/a%2Fb"),
            ("/a%2F..%2Fb", "/a%2F..%2Fb"),
            ("/%2f%2e%2e", "/%2F.."),
            ("/%25%32%65", "/%252e"),
            ("/%7e%7E%5f", "/~~_"),
            ("/caf%c3%a9", "/caf%C3%A9"),
            // A '%' that starts no encoding is encoded itself.
            ("/100%", "/100%25"),
            ("/a%zz", "/a%25zz"),
            ("/a%4", "/a%254"),
            ("/%%3441", "/%25441"),
            // Case of the path is the server's business.
            ("/Admin", "/Admin"),
            // Not a path to normalise.
            ("*", "*"),
            ("", ""),
        ] {
            assert_eq!(norm(p), want, "{p}");
        }
    }

    #[test]
    fn a_normal_path_is_borrowed_and_queries_are_kept() {
        for p in ["/", "/admin", "/a/b/", "/a%2Fb", "/~user/x.y", "/a..b/.c"] {
            assert!(matches!(path(p.as_bytes()), Cow::Borrowed(_)), "{p}");
        }
        let t = target(b"/a/b?x=/../y&z=%2e");
        assert!(matches!(t, Cow::Borrowed(_)));
        assert_eq!(&*target(b"//a/./b/../c?q=//..%2e"), b"/a/c?q=//..%2e");
        assert_eq!(&*target(b"/%2e%2e?"), b"/?");
        assert_eq!(&*target(b"http://a.example//x/../admin?q"), b"http://a.example/admin?q");
        assert!(matches!(target(b"http://a.example?q"), Cow::Borrowed(_)));
        assert!(matches!(target(b"a.example:443"), Cow::Borrowed(_)));
        assert!(matches!(target(b"*"), Cow::Borrowed(_)));
    }

    #[test]
    fn hosts_lose_port_case_and_one_trailing_dot() {
        let mut buf = [0u8; 256];
        for (raw, want) in [
            ("admin.example.", "admin.example"),
            ("ADMIN.Example.:8080", "admin.example"),
            ("admin.example", "admin.example"),
            ("admin.example..", "admin.example."),
            ("[::1]:443", "[::1]"),
            ("[::1]", "[::1]"),
            (".", ""),
        ] {
            assert_eq!(host(raw.as_bytes(), &mut buf), Some(want), "{raw}");
        }
        assert_eq!(host(&[b'a'; 300], &mut buf), None);
    }

    /// Paths made of the pieces that matter: separators, dots, their encodings, other bytes.
    fn pieces() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "/", "/", ".", "..", "a", "b", "%2e", "%2E", "%2f", "%2F", "%41", "%7e", "%25", "%", "%zz", "~", "-", "?",
            "%c3%a9",
        ]);
        prop::collection::vec(piece, 0..24).prop_map(|v| format!("/{}", v.concat()))
    }

    proptest! {
        #[test]
        fn normalising_is_idempotent_and_leaves_no_dot_segment(p in pieces()) {
            let once = path(p.as_bytes()).into_owned();
            prop_assert!(is_normal(&once), "{p} -> {:?}", String::from_utf8_lossy(&once));
            let twice = path(&once);
            prop_assert!(matches!(twice, Cow::Borrowed(_)));
            prop_assert_eq!(&*twice, &once[..]);
            prop_assert!(once.starts_with(b"/"));
            for seg in once.split(|&b| b == b'/') {
                prop_assert!(seg != b".." && seg != b".", "{} -> {:?}", p, String::from_utf8_lossy(&once));
            }
            // Never a separator made from an encoded one: each '/' out was one in.
            let slashes = |s: &[u8]| s.iter().filter(|&&b| b == b'/').count();
            prop_assert!(slashes(&once) <= slashes(p.as_bytes()));
        }

        #[test]
        fn any_bytes_normalise_without_panicking(p in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut with_slash = vec![b'/'];
            with_slash.extend(&p);
            let once = path(&with_slash).into_owned();
            prop_assert!(is_normal(&once));
            prop_assert_eq!(&*path(&once), &once[..]);
        }
    }
}
