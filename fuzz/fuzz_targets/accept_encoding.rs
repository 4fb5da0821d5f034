//! Arbitrary bytes as `Accept-Encoding` field lines and as a response head's fields
//! (`http::compress`): never a panic; the coding chosen is one offered and one the field
//! names (or `*`), the same every time; the head edits leave a head that ends where a head
//! ends, with one `Content-Encoding` and no `Content-Length` when compressing, and a `Vary`
//! naming `Accept-Encoding` (or `*`) either way.
#![no_main]

use tollgate::http::compress::{Coding, Verdict, edit_h1_head, negotiate};

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn lines_named<'a>(head: &'a [u8], name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    head.split(|&b| b == b'\n').filter(move |l| {
        l.len() > name.len() && l[..name.len()].eq_ignore_ascii_case(name) && l[name.len()] == b':'
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    let offered = [Coding::Zstd, Coding::Gzip, Coding::Br];
    let got = negotiate(lines.iter().copied(), &offered);
    assert_eq!(got, negotiate(lines.iter().copied(), &offered));
    if let Some(c) = got {
        let lower = data.to_ascii_lowercase();
        assert!(
            contains(&lower, c.token().as_bytes()) || contains(&lower, b"*"),
            "{c:?} from {:?}",
            String::from_utf8_lossy(data)
        );
    }
    // The lines that look like fields (visible ASCII, a `:` after a non-empty name) as the
    // fields of a head tollgate wrote.
    let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
    for l in &lines {
        let ok = l.iter().all(|&b| b == b' ' || b.is_ascii_graphic())
            && l.iter().position(|&b| b == b':').is_some_and(|i| i > 0 && !l[..i].contains(&b' '));
        if ok {
            head.extend_from_slice(l);
            head.extend_from_slice(b"\r\n");
        }
    }
    head.extend_from_slice(b"\r\n");
    for verdict in [Verdict::Compress(Coding::Gzip), Verdict::VaryOnly] {
        let mut edited = head.clone();
        edit_h1_head(&mut edited, verdict, true);
        assert!(edited.ends_with(b"\r\n\r\n"));
        assert!(edited.starts_with(b"HTTP/1.1 200 OK\r\n"));
        let vary_ok = lines_named(&edited, b"vary").any(|l| {
            let l = l.to_ascii_lowercase();
            contains(&l, b"accept-encoding") || contains(&l, b"*")
        });
        assert!(vary_ok, "{}", String::from_utf8_lossy(&edited));
        if verdict != Verdict::VaryOnly {
            assert_eq!(lines_named(&edited, b"content-encoding").count(), 1);
            assert_eq!(lines_named(&edited, b"content-length").count(), 0);
        }
    }
});
