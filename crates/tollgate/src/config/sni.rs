//! SNI host names in the config: the validation and normalisation every host name goes
//! through (patterns at config load, the SNI of a ClientHello at run time), and
//! [`SniMatcher`], which maps a name to a route or a certificate.
//!
//! Invariants: a name is lowercase ASCII without its trailing dot, labels of 1 to 63
//! letters, digits and hyphens, at most `MAX_SNI_LEN` bytes; a lookup never allocates.

use std::collections::HashMap;
use std::fmt;

/// Longest host name kept (RFC 1035 limit without the trailing dot).
pub(crate) const MAX_SNI_LEN: usize = 253;

/// Validates `name` as a DNS host name and writes it lowercased into `out`, dropping one
/// trailing dot. Returns the length written, or `None` if it is not a host name: labels of 1
/// to 63 ASCII letters, digits and hyphens, not starting or ending with a hyphen, at most
/// [`MAX_SNI_LEN`] bytes in all.
pub(crate) fn normalise_host_name(name: &[u8], out: &mut [u8; MAX_SNI_LEN]) -> Option<usize> {
    let name = name.strip_suffix(b".").unwrap_or(name);
    if name.is_empty() || name.len() > MAX_SNI_LEN {
        return None;
    }
    for label in name.split(|&b| b == b'.') {
        let valid = !label.is_empty()
            && label.len() <= 63
            && label.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-')
            && label.first() != Some(&b'-')
            && label.last() != Some(&b'-');
        if !valid {
            return None;
        }
    }
    let dst = out.get_mut(..name.len())?;
    for (d, s) in dst.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    Some(name.len())
}

/// Maps an SNI host name to a target index (a route, a backend pool).
///
/// Patterns, case-insensitive, a trailing dot ignored:
/// - exact `a.example`: matches `a.example` only;
/// - wildcard `*.example`: matches a name with exactly **one** more label: `x.example` yes,
///   `a.b.example` no, `example` no (as in certificates, RFC 6125 §6.4.3).
///
/// An exact pattern wins over a wildcard. Since a wildcard covers exactly one label, at most
/// one wildcard can match a name: the longest suffix wins trivially (`a.b.example` is matched
/// by `*.b.example`, never by `*.example`). [`SniMatcher::lookup`] does not allocate.
#[derive(Clone, Debug, Default)]
pub struct SniMatcher {
    exact: HashMap<Box<str>, usize>,
    /// Keyed by the suffix after `*.`.
    wildcard: HashMap<Box<str>, usize>,
}

/// A pattern [`SniMatcher::new`] refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SniPatternError {
    pub pattern: String,
    pub reason: &'static str,
}

impl fmt::Display for SniPatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SNI pattern {:?}: {}", self.pattern, self.reason)
    }
}

impl std::error::Error for SniPatternError {}

impl SniMatcher {
    /// Builds the matcher from `(pattern, target)` pairs. Invalid or duplicate patterns
    /// (after lowercasing) are errors.
    pub fn new<S: AsRef<str>>(patterns: impl IntoIterator<Item = (S, usize)>) -> Result<SniMatcher, SniPatternError> {
        let mut matcher = SniMatcher::default();
        for (pattern, target) in patterns {
            let pattern = pattern.as_ref();
            let error = |reason| SniPatternError {
                pattern: pattern.to_owned(),
                reason,
            };
            let (map, name) = match pattern.strip_prefix("*.") {
                Some(suffix) => (&mut matcher.wildcard, suffix),
                None => (&mut matcher.exact, pattern),
            };
            let mut buf = [0u8; MAX_SNI_LEN];
            let len = normalise_host_name(name.as_bytes(), &mut buf)
                .ok_or_else(|| error("not a DNS name or `*.` followed by one"))?;
            let key = buf
                .get(..len)
                .and_then(|b| std::str::from_utf8(b).ok())
                .ok_or_else(|| error("not a DNS name"))?;
            if map.insert(key.into(), target).is_some() {
                return Err(error("duplicate pattern"));
            }
        }
        Ok(matcher)
    }

    /// The target for `sni`, if any pattern matches.
    pub fn lookup(&self, sni: &str) -> Option<usize> {
        let sni = sni.strip_suffix('.').unwrap_or(sni);
        let mut buf = [0u8; MAX_SNI_LEN];
        let dst = buf.get_mut(..sni.len())?;
        for (d, s) in dst.iter_mut().zip(sni.as_bytes()) {
            *d = s.to_ascii_lowercase();
        }
        let name = std::str::from_utf8(dst).ok()?;
        if let Some(&target) = self.exact.get(name) {
            return Some(target);
        }
        let (first, rest) = name.split_once('.')?;
        if first.is_empty() || rest.is_empty() {
            return None;
        }
        self.wildcard.get(rest).copied()
    }

    /// Whether no pattern was given.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcard.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matcher_exact_and_wildcards() {
        let m = SniMatcher::new([
            ("a.example", 0),
            ("*.example", 1),
            ("*.b.example", 2),
            ("B.Example.", 3),
            ("example", 4),
        ])
        .unwrap();
        assert_eq!(m.lookup("a.example"), Some(0)); // exact beats wildcard
        assert_eq!(m.lookup("A.EXAMPLE"), Some(0));
        assert_eq!(m.lookup("a.example."), Some(0));
        assert_eq!(m.lookup("x.example"), Some(1));
        assert_eq!(m.lookup("b.example"), Some(3));
        assert_eq!(m.lookup("c.b.example"), Some(2)); // the longer suffix
        assert_eq!(m.lookup("x.y.b.example"), None); // two extra labels
        assert_eq!(m.lookup("a.b.c.example"), None);
        assert_eq!(m.lookup("example"), Some(4));
        assert_eq!(m.lookup(".example"), None);
        assert_eq!(m.lookup("other"), None);
        assert_eq!(m.lookup(""), None);
        assert_eq!(m.lookup(&"x".repeat(300)), None);

        let only_wild = SniMatcher::new([("*.example", 9)]).unwrap();
        assert_eq!(only_wild.lookup("x.example"), Some(9));
        assert_eq!(only_wild.lookup("a.b.example"), None);
        assert_eq!(only_wild.lookup("example"), None);
        assert!(SniMatcher::new(Vec::<(&str, usize)>::new()).unwrap().is_empty());
    }

    #[test]
    fn matcher_rejects_bad_patterns() {
        for bad in [
            "",
            "*",
            "*.",
            "a.*.example",
            "**.example",
            "*example",
            "x_y.example",
            "a..b",
        ] {
            let err = SniMatcher::new([(bad, 0)]).unwrap_err();
            assert_eq!(err.pattern, bad);
        }
        let dup = SniMatcher::new([("A.example", 0), ("a.example.", 1)]).unwrap_err();
        assert_eq!(dup.reason, "duplicate pattern");
    }
}
