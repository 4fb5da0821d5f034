//! Cookies, sans-io: one cookie's value in a `Cookie` field, a `Cookie` field rewritten
//! without one cookie, and whether a `Set-Cookie` field sets a given cookie. Used by sticky
//! sessions (the proxy's own cookie is read, then kept from the server) and by hashing on a
//! cookie.
//!
//! Invariants: nothing here allocates or fails. A field that does not follow RFC 6265 is
//! read leniently (pairs split on `;`, names and values trimmed of whitespace, a pair without
//! `=` is nobody's cookie) and whatever is not the named cookie is passed on byte for byte,
//! in order: removing our cookie never changes anyone else's.

use super::h1::headers::trim_ows;

/// The name and value of one `name=value` element of a Cookie field (trimmed), or `None`
/// for an element without `=`.
fn pair(element: &[u8]) -> Option<(&[u8], &[u8])> {
    let eq = element.iter().position(|&b| b == b'=')?;
    let (name, value) = (element.get(..eq)?, element.get(eq + 1..)?);
    Some((trim_ows(name), trim_ows(value)))
}

fn is_named(element: &[u8], name: &[u8]) -> bool {
    pair(element).is_some_and(|(n, _)| n == name)
}

/// The value of the first cookie called `name` (case-sensitive, as cookie names are) in a
/// Cookie field value (`a=1; b=2`), without the optional double quotes around it.
pub fn find<'a>(field: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    field.split(|&b| b == b';').find_map(|element| {
        let (n, v) = pair(element)?;
        (n == name).then(|| unquote(v))
    })
}

fn unquote(v: &[u8]) -> &[u8] {
    match v {
        [b'"', inner @ .., b'"'] => inner,
        _ => v,
    }
}

/// Whether a Cookie field value holds a cookie called `name`.
pub fn contains(field: &[u8], name: &[u8]) -> bool {
    field.split(|&b| b == b';').any(|element| is_named(element, name))
}

/// Appends the Cookie field value `field` without its `name` cookies to `out`: every other
/// element byte for byte, in order, each with the separator that preceded it (the first one
/// without its leading whitespace). Returns false, having appended nothing, when no other
/// element is left (the field should then be dropped).
pub fn push_without(field: &[u8], name: &[u8], out: &mut Vec<u8>) -> bool {
    let mut first = true;
    for element in field.split(|&b| b == b';') {
        if is_named(element, name) {
            continue;
        }
        if first {
            out.extend_from_slice(trim_start(element));
            first = false;
        } else {
            out.push(b';');
            out.extend_from_slice(element);
        }
    }
    !first
}

fn trim_start(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    s
}

/// Whether a Set-Cookie field value (`name=value; Path=/; ...`) sets the cookie `name`.
pub fn sets(set_cookie: &[u8], name: &[u8]) -> bool {
    let first = set_cookie.split(|&b| b == b';').next().unwrap_or_default();
    is_named(first, name)
}

/// Whether a response's fields already keep it out of shared caches: a `Cache-Control`
/// directive `private`, `no-cache` or `no-store` (with or without an argument), or
/// `Pragma: no-cache`. A response that gets a sticky cookie and is not so marked is made
/// `private` (HAProxy's `nocache`): a shared cache would hand one client's cookie to all.
pub fn kept_from_shared_caches<'a>(mut fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> bool {
    fields.any(|(name, value)| {
        let directive = |d: &[u8]| {
            let d = d.split(|&b| b == b'=').next().unwrap_or_default();
            let d = trim_ows(d);
            [&b"private"[..], b"no-cache", b"no-store"]
                .iter()
                .any(|x| d.eq_ignore_ascii_case(x))
        };
        if name.eq_ignore_ascii_case(b"cache-control") {
            value.split(|&b| b == b',').any(directive)
        } else {
            name.eq_ignore_ascii_case(b"pragma")
                && value
                    .split(|&b| b == b',')
                    .any(|d| trim_ows(d).eq_ignore_ascii_case(b"no-cache"))
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

    use proptest::prelude::*;

    use super::*;

    fn without(field: &str, name: &str) -> Option<String> {
        let mut out = Vec::new();
        push_without(field.as_bytes(), name.as_bytes(), &mut out).then(|| String::from_utf8(out).expect("utf8"))
    }

    #[test]
    fn finds_the_first_value_in_any_position() {
        assert_eq!(find(b"a=1; SRV=ab12; b=2", b"SRV"), Some(&b"ab12"[..]));
        assert_eq!(find(b"SRV=x;SRV=y", b"SRV"), Some(&b"x"[..]));
        assert_eq!(find(b"SRV=\"q\"", b"SRV"), Some(&b"q"[..]));
        assert_eq!(find(b"SRV = v ", b"SRV"), Some(&b"v"[..]));
        assert_eq!(
            find(b"srv=1; XSRV=2; SRV", b"SRV"),
            None,
            "names are case-sensitive and whole"
        );
        assert_eq!(find(b"", b"SRV"), None);
        assert_eq!(find(b";;==;", b"SRV"), None);
    }

    #[test]
    fn stripping_keeps_the_other_cookies_as_they_were() {
        assert_eq!(without("a=1; SRV=x; b=2", "SRV").as_deref(), Some("a=1; b=2"));
        assert_eq!(without("SRV=x; a=1", "SRV").as_deref(), Some("a=1"));
        assert_eq!(without("a=1;SRV=x", "SRV").as_deref(), Some("a=1"));
        assert_eq!(without("a=\"q;\"; SRV=x;b", "SRV").as_deref(), Some("a=\"q;\";b"));
        assert_eq!(without("a=1;  b=2", "SRV").as_deref(), Some("a=1;  b=2"));
        assert_eq!(without("SRV=x", "SRV"), None);
        assert_eq!(without("SRV=x; SRV=y", "SRV"), None);
        // Malformed elements are not ours: passed on as they came.
        assert_eq!(without("junk; SRV=x; =; ;", "SRV").as_deref(), Some("junk; =; ;"));
        assert!(contains(b"a=1; SRV=", b"SRV") && !contains(b"a=SRV", b"SRV"));
    }

    #[test]
    fn set_cookie_is_recognised_by_its_first_pair_only() {
        assert!(sets(b"SRV=1; Path=/", b"SRV"));
        assert!(sets(b"SRV=", b"SRV"));
        assert!(!sets(b"other=1; SRV=2", b"SRV"));
        assert!(!sets(b"SRVX=1", b"SRV"));
        assert!(!sets(b"", b"SRV"));
    }

    #[test]
    fn responses_already_kept_from_shared_caches_are_recognised() {
        let kept =
            |fields: &[(&str, &str)]| kept_from_shared_caches(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
        assert!(kept(&[("Cache-Control", "max-age=60, private")]));
        assert!(kept(&[("cache-control", "no-cache=\"set-cookie\"")]));
        assert!(kept(&[("X", "1"), ("Cache-Control", "No-Store")]));
        assert!(kept(&[("Pragma", "no-cache")]));
        assert!(!kept(&[("Cache-Control", "public, max-age=60")]));
        assert!(!kept(&[("Cache-Control", "privateish")]));
        assert!(!kept(&[("X-Private", "private")]));
        assert!(!kept(&[]));
    }

    fn name() -> impl Strategy<Value = String> {
        "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,8}"
    }

    fn value() -> impl Strategy<Value = String> {
        "[!#-+--:<-\\[\\]-~]{0,10}"
    }

    proptest! {
        /// Whatever the other cookies and wherever ours sits (once or more), stripping ours
        /// leaves exactly the others, byte for byte, in order.
        #[test]
        fn stripping_keeps_other_cookies_byte_exact(
            others in proptest::collection::vec((name(), value()), 0..6),
            ours in proptest::collection::vec((0usize..7, value()), 0..3),
            tight in any::<bool>(),
        ) {
            let others: Vec<String> = others
                .into_iter()
                .filter(|(n, _)| n != "SRV")
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            let mut all = others.clone();
            for (at, v) in &ours {
                all.insert((*at).min(all.len()), format!("SRV={v}"));
            }
            prop_assume!(!all.is_empty());
            let sep = if tight { ";" } else { "; " };
            let expected = (!others.is_empty()).then(|| others.join(sep));
            prop_assert_eq!(without(&all.join(sep), "SRV"), expected);
            prop_assert_eq!(contains(all.join(sep).as_bytes(), b"SRV"), !ours.is_empty());
        }

        /// Any bytes at all: no panic, and what is kept is the input's non-SRV elements.
        #[test]
        fn any_field_is_handled(field in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut out = Vec::new();
            let kept = push_without(&field, b"SRV", &mut out);
            let _ = find(&field, b"SRV");
            let expect: Vec<&[u8]> = field
                .split(|&b| b == b';')
                .filter(|e| !is_named(e, b"SRV"))
                .map(trim_ows)
                .collect();
            let got: Vec<&[u8]> = if kept { out.split(|&b| b == b';').map(trim_ows).collect() } else { Vec::new() };
            prop_assert_eq!(got, expect);
        }
    }
}
