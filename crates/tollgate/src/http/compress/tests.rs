use std::io::Read as _;

use super::*;

fn policy() -> Policy {
    Policy {
        codings: Coding::ALL.to_vec(),
        types: DEFAULT_TYPES.iter().map(|t| Box::from(*t)).collect(),
        min_size: DEFAULT_MIN_SIZE,
        gzip_level: DEFAULT_GZIP_LEVEL,
        br_level: DEFAULT_BR_LEVEL,
        zstd_level: DEFAULT_ZSTD_LEVEL,
    }
}

fn pick(accept: &[&str]) -> Option<Coding> {
    negotiate(accept.iter().map(|a| a.as_bytes()), &policy().codings)
}

#[test]
fn negotiation_follows_q_values_then_the_proxy_order() {
    assert_eq!(pick(&[]), None, "no Accept-Encoding: nothing");
    assert_eq!(pick(&["gzip, deflate, br, zstd"]), Some(Coding::Zstd));
    assert_eq!(
        pick(&["gzip, deflate, br"]),
        Some(Coding::Gzip),
        "gzip before br by default"
    );
    assert_eq!(pick(&["deflate, br"]), Some(Coding::Br));
    assert_eq!(pick(&["gzip"]), Some(Coding::Gzip));
    assert_eq!(pick(&["GZIP"]), Some(Coding::Gzip));
    assert_eq!(pick(&["x-gzip"]), Some(Coding::Gzip));
    assert_eq!(pick(&["gzip;q=1.0, br;q=0.5"]), Some(Coding::Gzip));
    assert_eq!(
        pick(&["gzip;q=0.5", "br;q=0.9"]),
        Some(Coding::Br),
        "several field lines"
    );
    let br_first = [Coding::Br, Coding::Gzip];
    assert_eq!(
        negotiate([&b"gzip, br"[..]], &br_first),
        Some(Coding::Br),
        "the configured order"
    );
    assert_eq!(pick(&["identity"]), None);
    assert_eq!(pick(&["identity;q=0"]), None, "nothing offered that it takes");
    assert_eq!(pick(&["*"]), Some(Coding::Zstd));
    assert_eq!(
        pick(&["*;q=0.5, zstd;q=0"]),
        Some(Coding::Gzip),
        "q=0 refuses a listed coding"
    );
    assert_eq!(pick(&["gzip;q=0"]), None);
    assert_eq!(pick(&["br;q=2"]), None, "malformed q: ignored");
    assert_eq!(pick(&["br;q=0.0001"]), None);
    assert_eq!(pick(&["br ; q=0.3 , gzip ; q=0.2"]), Some(Coding::Br));
    assert_eq!(pick(&[""]), None);
    assert_eq!(pick(&[",,,;;;==="]), None);
    let gzip_only = [Coding::Gzip];
    assert_eq!(negotiate([&b"br, zstd"[..]], &gzip_only), None);
}

#[test]
fn q_values() {
    assert_eq!(qvalue(b"0"), Some(0));
    assert_eq!(qvalue(b"1"), Some(1000));
    assert_eq!(qvalue(b"1.000"), Some(1000));
    assert_eq!(qvalue(b"0.5"), Some(500));
    assert_eq!(qvalue(b"0.123"), Some(123));
    assert_eq!(qvalue(b"1.5"), None);
    assert_eq!(qvalue(b"0.1234"), None);
    assert_eq!(qvalue(b".5"), None);
    assert_eq!(qvalue(b"0.x"), None);
}

fn facts(status: u16, fields: &[(&str, &str)]) -> Verdict {
    let f = Facts::gather(status, false, fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
    f.verdict(&policy(), Some(Coding::Gzip))
}

#[test]
fn what_is_never_compressed() {
    let json = ("content-type", "application/json; charset=utf-8");
    assert_eq!(facts(200, &[json]), Verdict::Compress(Coding::Gzip));
    assert_eq!(
        facts(200, &[json, ("content-length", "5000")]),
        Verdict::Compress(Coding::Gzip)
    );
    assert_eq!(facts(404, &[json]), Verdict::Compress(Coding::Gzip));
    assert_eq!(
        facts(200, &[json, ("content-length", "1023")]),
        Verdict::Untouched,
        "under min_size"
    );
    assert_eq!(facts(200, &[json, ("content-encoding", "br")]), Verdict::Untouched);
    assert_eq!(
        facts(200, &[json, ("content-encoding", "identity")]),
        Verdict::Compress(Coding::Gzip)
    );
    assert_eq!(facts(206, &[json]), Verdict::Untouched);
    assert_eq!(
        facts(200, &[json, ("content-range", "bytes 0-1/2")]),
        Verdict::Untouched
    );
    assert_eq!(
        facts(200, &[json, ("cache-control", "public, No-Transform")]),
        Verdict::Untouched
    );
    for status in [101, 103, 204, 304] {
        assert_eq!(facts(status, &[json]), Verdict::Untouched, "{status}");
    }
    assert_eq!(facts(200, &[("content-type", "image/png")]), Verdict::Untouched);
    assert_eq!(facts(200, &[]), Verdict::Untouched, "no type");
    assert_eq!(
        facts(200, &[("content-type", "TEXT/HTML")]),
        Verdict::Compress(Coding::Gzip)
    );
    let head = Facts::gather(200, true, [(&b"content-type"[..], &b"text/html"[..])]);
    assert_eq!(head.verdict(&policy(), Some(Coding::Gzip)), Verdict::Untouched);
    let plain = Facts::gather(200, false, [(&b"content-type"[..], &b"text/html"[..])]);
    assert_eq!(plain.verdict(&policy(), None), Verdict::VaryOnly);
}

#[test]
fn type_ranges() {
    assert!(Policy::valid_type("text/*"));
    assert!(Policy::valid_type("application/json"));
    assert!(!Policy::valid_type("*/*"));
    assert!(!Policy::valid_type("text"));
    assert!(!Policy::valid_type("text/"));
    assert!(!Policy::valid_type("te xt/html"));
    let p = policy();
    assert!(p.compresses_type(b"text/plain"));
    assert!(p.compresses_type(b" application/json ; charset=x"));
    assert!(!p.compresses_type(b"application/jsonx"));
    assert!(!p.compresses_type(b"textual/plain"));
}

#[test]
fn h1_head_edits() {
    let mut head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5000\r\nETag: \"abc\"\r\nAccept-Ranges: bytes\r\nVary: Origin\r\nX-Other: 1\r\n\r\n".to_vec();
    edit_h1_head(&mut head, Verdict::Compress(Coding::Br), true);
    assert_eq!(
        String::from_utf8_lossy(&head),
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: W/\"abc\"\r\nVary: Origin, Accept-Encoding\r\nX-Other: 1\r\nContent-Encoding: br\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let mut head =
        b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nETag: W/\"abc\"\r\nVary: accept-encoding\r\n\r\n".to_vec();
    edit_h1_head(&mut head, Verdict::VaryOnly, true);
    assert_eq!(
        String::from_utf8_lossy(&head),
        "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nETag: W/\"abc\"\r\nVary: accept-encoding\r\n\r\n"
    );
    let mut head = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n".to_vec();
    edit_h1_head(&mut head, Verdict::VaryOnly, true);
    assert_eq!(
        String::from_utf8_lossy(&head),
        "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nVary: Accept-Encoding\r\n\r\n"
    );
    let untouched = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n".to_vec();
    let mut head = untouched.clone();
    edit_h1_head(&mut head, Verdict::Untouched, true);
    assert_eq!(head, untouched);
}

#[test]
fn h2_head_edits() {
    let mut h = http::HeaderMap::new();
    h.insert("content-length", "5000".parse().unwrap());
    h.insert("etag", "\"x\"".parse().unwrap());
    h.append("vary", "Origin".parse().unwrap());
    h.append("vary", "Cookie".parse().unwrap());
    edit_h2_head(&mut h, Verdict::Compress(Coding::Zstd));
    assert!(h.get("content-length").is_none());
    assert_eq!(h["etag"], "W/\"x\"");
    assert_eq!(h["vary"], "Origin, Cookie, Accept-Encoding");
    assert_eq!(h["content-encoding"], "zstd");
}

fn decode(coding: Coding, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        Coding::Gzip => {
            flate2::read::MultiGzDecoder::new(bytes).read_to_end(&mut out).unwrap();
        }
        Coding::Br => {
            brotli::Decompressor::new(bytes, 4096).read_to_end(&mut out).unwrap();
        }
        Coding::Zstd => {
            out = zstd::stream::decode_all(bytes).unwrap();
        }
    }
    out
}

/// A flushed prefix decodes to everything pushed so far (what makes a stream stream), and
/// the finished whole decodes to the input.
#[test]
fn every_coding_streams_and_round_trips() {
    let text: Vec<u8> = (0..20_000u32)
        .flat_map(|i| format!("{{\"id\":{i},\"name\":\"n{}\"}},", i % 97).into_bytes())
        .collect();
    for coding in Coding::ALL {
        let mut e = Encoder::new(coding, &policy()).unwrap();
        let (mut wire, mut buf) = (Vec::new(), Vec::new());
        e.push(b"event: one\n\n").unwrap();
        e.flush().unwrap();
        e.swap_output(&mut buf);
        wire.extend_from_slice(&buf);
        // The first event decodes before the stream ends.
        let partial = match coding {
            Coding::Gzip => {
                let mut out = Vec::new();
                let _ = flate2::read::GzDecoder::new(&wire[..]).read_to_end(&mut out);
                out
            }
            Coding::Br => {
                let mut out = vec![0; 64];
                let n = brotli::Decompressor::new(&wire[..], 4096).read(&mut out).unwrap();
                out.truncate(n);
                out
            }
            Coding::Zstd => {
                let mut out = vec![0; 64];
                let mut d = zstd::stream::read::Decoder::new(&wire[..]).unwrap();
                let n = d.read(&mut out).unwrap();
                out.truncate(n);
                out
            }
        };
        assert_eq!(
            partial, b"event: one\n\n",
            "{coding:?}: a flush makes the data decodable"
        );
        for piece in text.chunks(7000) {
            e.push(piece).unwrap();
            e.swap_output(&mut buf);
            wire.extend_from_slice(&buf);
        }
        e.finish().unwrap();
        e.swap_output(&mut buf);
        wire.extend_from_slice(&buf);
        let mut expected = b"event: one\n\n".to_vec();
        expected.extend_from_slice(&text);
        assert_eq!(decode(coding, &wire), expected, "{coding:?}");
        assert_eq!(e.bytes_in, expected.len() as u64);
        assert_eq!(e.bytes_out, wire.len() as u64);
        assert!(
            wire.len() * 4 < expected.len(),
            "{coding:?}: {} -> {}",
            expected.len(),
            wire.len()
        );
    }
}
