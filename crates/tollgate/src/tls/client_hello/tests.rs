//! ClientHello parser tests: real hellos from rustls, re-split into TCP segments and TLS
//! records, every truncation, hand-built edge cases and corrupted input.

use super::*;
use std::sync::Arc;

use crate::config::sni::SniMatcher;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore};

struct HelloOpts<'a> {
    server_name: &'a str,
    alpn: &'a [&'a [u8]],
    post_quantum: bool,
    tls12_only: bool,
    max_fragment_size: Option<usize>,
}

const DEFAULT_OPTS: HelloOpts<'static> = HelloOpts {
    server_name: "www.example.com",
    alpn: &[],
    post_quantum: false,
    tls12_only: false,
    max_fragment_size: None,
};

/// The client's first flight, as rustls writes it to the socket.
fn rustls_hello(opts: &HelloOpts<'_>) -> Vec<u8> {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    if opts.post_quantum {
        provider.kx_groups = vec![rustls::crypto::aws_lc_rs::kx_group::X25519MLKEM768];
    }
    let versions: &[&rustls::SupportedProtocolVersion] = if opts.tls12_only {
        &[&rustls::version::TLS12]
    } else {
        rustls::ALL_VERSIONS
    };
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    config.alpn_protocols = opts.alpn.iter().map(|p| p.to_vec()).collect();
    config.max_fragment_size = opts.max_fragment_size;
    let name = ServerName::try_from(opts.server_name.to_owned()).unwrap();
    let mut conn = ClientConnection::new(Arc::new(config), name).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

fn parse_full(buf: &[u8]) -> ClientHelloInfo {
    peek_client_hello(buf, DEFAULT_MAX_LEN)
        .unwrap()
        .expect("complete hello")
}

/// The handshake message of a single-record hello.
fn handshake_message(single_record: &[u8]) -> &[u8] {
    let len = usize::from(u16::from_be_bytes([single_record[3], single_record[4]]));
    &single_record[5..5 + len]
}

fn record(content_type: u8, version: u16, fragment: &[u8]) -> Vec<u8> {
    let mut out = vec![content_type];
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&u16::try_from(fragment.len()).unwrap().to_be_bytes());
    out.extend_from_slice(fragment);
    out
}

/// Re-frames a handshake message into records of content type 22 split at `cuts`.
fn reframe(msg: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&msg.len())) {
        out.extend(record(22, 0x0301, &msg[start..cut]));
        start = cut;
    }
    out
}

/// Every strict prefix needs more bytes; the whole buffer parses.
fn assert_prefixes_need_more(buf: &[u8]) -> ClientHelloInfo {
    for len in 0..buf.len() {
        match peek_client_hello(&buf[..len], DEFAULT_MAX_LEN) {
            Ok(None) => {}
            other => panic!("prefix of {len}/{} bytes gave {other:?}", buf.len()),
        }
    }
    parse_full(buf)
}

fn same_hello(a: &ClientHelloInfo, b: &ClientHelloInfo) {
    assert_eq!(a.sni(), b.sni());
    assert_eq!(a.alpn().collect::<Vec<_>>(), b.alpn().collect::<Vec<_>>());
    assert_eq!(a.offers_tls13(), b.offers_tls13());
    assert_eq!(a.client_version(), b.client_version());
    assert_eq!(a.handshake_len(), b.handshake_len());
}

#[test]
fn sni_alpn_and_tls13_from_rustls() {
    let buf = rustls_hello(&HelloOpts {
        alpn: &[b"h2", b"http/1.1"],
        ..DEFAULT_OPTS
    });
    let info = parse_full(&buf);
    assert_eq!(info.sni(), Some("www.example.com"));
    assert_eq!(info.alpn().collect::<Vec<_>>(), vec![&b"h2"[..], &b"http/1.1"[..]]);
    assert!(info.offers_alpn(b"h2") && info.offers_alpn(b"http/1.1"));
    assert!(!info.offers_alpn(b"h3") && !info.alpn_truncated());
    assert!(info.offers_tls13() && info.has_supported_versions());
    assert_eq!(info.client_version(), 0x0303);
    assert_eq!(info.records(), 1);
    assert_eq!(info.handshake_len() + RECORD_HEADER_LEN, buf.len());
    assert!(matches!(info.record_version(), 0x0301 | 0x0303));
}

#[test]
fn sni_is_lowercased() {
    let info = parse_full(&rustls_hello(&HelloOpts {
        server_name: "WWW.Example.COM",
        ..DEFAULT_OPTS
    }));
    assert_eq!(info.sni(), Some("www.example.com"));
}

#[test]
fn no_sni_for_an_ip_address() {
    let info = parse_full(&rustls_hello(&HelloOpts {
        server_name: "127.0.0.1",
        ..DEFAULT_OPTS
    }));
    assert_eq!(info.sni(), None);
    assert_eq!(info.alpn().count(), 0);
}

#[test]
fn tls12_only_client() {
    let info = parse_full(&rustls_hello(&HelloOpts {
        tls12_only: true,
        ..DEFAULT_OPTS
    }));
    assert_eq!(info.sni(), Some("www.example.com"));
    // rustls still sends supported_versions, listing only TLS 1.2.
    assert!(!info.offers_tls13(), "{info:?}");
}

#[test]
fn post_quantum_hello_is_large_and_parses() {
    let buf = rustls_hello(&HelloOpts {
        post_quantum: true,
        alpn: &[b"h2", b"http/1.1"],
        ..DEFAULT_OPTS
    });
    assert!(buf.len() > 1400, "hybrid hello only {} bytes", buf.len()); // 1216-byte key share
    let info = parse_full(&buf);
    assert_eq!(info.sni(), Some("www.example.com"));
    assert!(info.offers_tls13() && info.offers_alpn(b"h2"));
    // A limit below its size is refused, not waited for.
    assert_eq!(peek_client_hello(&buf[..20], 1000), Err(HelloError::TooLarge));
    assert_eq!(peek_client_hello(&buf, buf.len() - 1), Err(HelloError::TooLarge));
    assert!(peek_client_hello(&buf, buf.len()).unwrap().is_some());
}

#[test]
fn three_tcp_segments() {
    for opts in [
        HelloOpts {
            alpn: &[b"h2", b"http/1.1"],
            ..DEFAULT_OPTS
        },
        HelloOpts {
            post_quantum: true,
            ..DEFAULT_OPTS
        },
    ] {
        let buf = rustls_hello(&opts);
        let whole = parse_full(&buf);
        let (a, b) = (buf.len() / 3, 2 * buf.len() / 3);
        assert_eq!(peek_client_hello(&buf[..a], DEFAULT_MAX_LEN), Ok(None));
        assert_eq!(peek_client_hello(&buf[..b], DEFAULT_MAX_LEN), Ok(None));
        same_hello(&parse_full(&buf), &whole);
    }
}

#[test]
fn two_records_at_many_split_points() {
    let buf = rustls_hello(&HelloOpts {
        post_quantum: true,
        alpn: &[b"h2", b"http/1.1"],
        ..DEFAULT_OPTS
    });
    let whole = parse_full(&buf);
    let msg = handshake_message(&buf);
    // Splits inside the 4-byte handshake header, inside the body and at its last byte.
    for cut in [1, 2, 3, 4, 5, 40, msg.len() / 2, msg.len() - 1] {
        let two = reframe(msg, &[cut]);
        let info = parse_full(&two);
        same_hello(&info, &whole);
        assert_eq!(info.records(), 2);
        assert_eq!(info.record_version(), 0x0301);
    }
}

#[test]
fn every_prefix_needs_more_then_parses() {
    let single = rustls_hello(&HelloOpts {
        alpn: &[b"h2", b"http/1.1"],
        ..DEFAULT_OPTS
    });
    let whole = assert_prefixes_need_more(&single);
    let msg = handshake_message(&single);
    let two = reframe(msg, &[msg.len() / 2]);
    same_hello(&assert_prefixes_need_more(&two), &whole);
    let many = reframe(msg, &[1, 2, 3, 50, 51, 200]);
    let info = assert_prefixes_need_more(&many);
    same_hello(&info, &whole);
    assert_eq!(info.records(), 7);
}

#[test]
fn rustls_fragmented_hello() {
    let buf = rustls_hello(&HelloOpts {
        post_quantum: true,
        max_fragment_size: Some(256),
        alpn: &[b"h2"],
        ..DEFAULT_OPTS
    });
    let info = assert_prefixes_need_more(&buf);
    assert!(info.records() > 4, "{info:?}");
    assert_eq!(info.sni(), Some("www.example.com"));
    assert!(info.offers_tls13() && info.offers_alpn(b"h2"));
}

#[test]
fn trailing_bytes_after_the_hello_are_left_alone() {
    let mut buf = rustls_hello(&DEFAULT_OPTS);
    buf.extend(record(23, 0x0303, b"early"));
    assert_eq!(parse_full(&buf).sni(), Some("www.example.com"));
}

#[test]
fn not_tls() {
    for input in [
        &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        &b"G"[..],
        &[0x17, 3, 3, 0, 5, 1, 2, 3, 4, 5][..], // application data
        &[0x15, 3, 3, 0, 2, 2, 40][..],         // alert
        &[0x80, 0x2e, 0x01, 0x03, 0x01][..],    // SSLv2-style hello
        &[0x16, 2][..],                         // wrong version major, detected early
        &[0x16, 0x7f, 0x01, 0, 4][..],
    ] {
        assert_eq!(
            peek_client_hello(input, DEFAULT_MAX_LEN),
            Err(HelloError::NotTls),
            "{input:?}"
        );
    }
    assert_eq!(peek_client_hello(&[], DEFAULT_MAX_LEN), Ok(None));
    assert_eq!(peek_client_hello(&[0x16], DEFAULT_MAX_LEN), Ok(None));
}

#[test]
fn malformed_framing() {
    let malformed = |buf: &[u8]| match peek_client_hello(buf, DEFAULT_MAX_LEN) {
        Err(HelloError::Malformed(_)) => {}
        other => panic!("{buf:?} gave {other:?}"),
    };
    malformed(&[0x16, 3, 1, 0xff, 0xff]); // record longer than 2^14 + 2048
    malformed(&[0x16, 3, 1, 0, 0]); // empty record
    malformed(&[0x16, 3, 1, 0, 4, 2, 0, 0, 0]); // a ServerHello
    // The hello's second record is a ChangeCipherSpec.
    let msg = handshake_message(&rustls_hello(&DEFAULT_OPTS)).to_vec();
    let mut buf = record(22, 0x0301, &msg[..10]);
    buf.extend(record(20, 0x0303, &[1]));
    malformed(&buf);
    // Second record with a bad version.
    let mut buf = record(22, 0x0301, &msg[..10]);
    buf.extend(record(22, 0x0103, &msg[10..]));
    malformed(&buf);
}

#[test]
fn oversized_hello_is_refused_early() {
    // Announces a 1 MiB ClientHello: refused as soon as the handshake header is in.
    let buf = [0x16, 3, 1, 0x40, 0x00, 1, 0x10, 0x00, 0x00];
    assert_eq!(peek_client_hello(&buf[..8], DEFAULT_MAX_LEN), Ok(None));
    assert_eq!(peek_client_hello(&buf, DEFAULT_MAX_LEN), Err(HelloError::TooLarge));
    // Tiny records that never finish: refused once max_len bytes are in.
    let mut dribble = Vec::new();
    dribble.extend(record(22, 0x0301, &[1, 0, 1]));
    dribble.extend(record(22, 0x0301, &[0x2c])); // a 300-byte body, one byte per record
    while dribble.len() < 2 * 1024 {
        dribble.extend(record(22, 0x0301, &[0]));
    }
    assert_eq!(peek_client_hello(&dribble, 1024), Err(HelloError::TooLarge));
    assert_eq!(peek_client_hello(&dribble[..600], 1024), Ok(None));
}

/// Builds a single-record ClientHello with the given extensions (type, data).
fn handmade_hello(extensions: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend([7u8; 32]); // random
    body.push(0); // session_id
    body.extend([0, 2, 0x13, 0x01]); // one cipher suite
    body.extend([1, 0]); // null compression
    let mut exts = Vec::new();
    for (ty, data) in extensions {
        exts.extend(ty.to_be_bytes());
        exts.extend(u16::try_from(data.len()).unwrap().to_be_bytes());
        exts.extend(data);
    }
    body.extend(u16::try_from(exts.len()).unwrap().to_be_bytes());
    body.extend(exts);
    let mut msg = vec![1];
    msg.extend(&u32::try_from(body.len()).unwrap().to_be_bytes()[1..]);
    msg.extend(body);
    record(22, 0x0301, &msg)
}

fn sni_ext(names: &[(u8, &[u8])]) -> Vec<u8> {
    let mut list = Vec::new();
    for (ty, name) in names {
        list.push(*ty);
        list.extend(u16::try_from(name.len()).unwrap().to_be_bytes());
        list.extend(*name);
    }
    let mut out = u16::try_from(list.len()).unwrap().to_be_bytes().to_vec();
    out.extend(list);
    out
}

fn alpn_ext(protos: &[&[u8]]) -> Vec<u8> {
    let mut list = Vec::new();
    for p in protos {
        list.push(u8::try_from(p.len()).unwrap());
        list.extend(*p);
    }
    let mut out = u16::try_from(list.len()).unwrap().to_be_bytes().to_vec();
    out.extend(list);
    out
}

#[test]
fn handmade_sni_validation() {
    let sni = |name: &[u8]| peek_client_hello(&handmade_hello(&[(0, sni_ext(&[(0, name)]))]), DEFAULT_MAX_LEN);
    assert_eq!(sni(b"Example.COM.").unwrap().unwrap().sni(), Some("example.com"));
    assert_eq!(
        sni(b"xn--bcher-kva.example").unwrap().unwrap().sni(),
        Some("xn--bcher-kva.example")
    );
    let long_ok = [b"a".repeat(63), b"b".repeat(63), b"c".repeat(63), b"d".repeat(61)].join(&b'.');
    assert_eq!(long_ok.len(), 253);
    assert!(sni(&long_ok).unwrap().unwrap().sni().is_some());
    for bad in [
        &b""[..],
        b".",
        b"a..b",
        b".a",
        b"a.b..",
        b"-a.example",
        b"a-.example",
        b"under_score.example",
        b"sp ace.example",
        b"nul\0.example",
        "ünï.example".as_bytes(),
        &b"x".repeat(64),
        &[b"a".repeat(63), b"b".repeat(63), b"c".repeat(63), b"d".repeat(62)].join(&b'.'),
    ] {
        assert!(matches!(sni(bad), Err(HelloError::Malformed(_))), "{bad:?}");
    }
}

#[test]
fn handmade_extension_rules() {
    let parse = |exts: &[(u16, Vec<u8>)]| peek_client_hello(&handmade_hello(exts), DEFAULT_MAX_LEN);
    // Unknown name types are skipped; the host_name is found after them.
    let info = parse(&[(0, sni_ext(&[(7, b"opaque"), (0, b"a.example")]))])
        .unwrap()
        .unwrap();
    assert_eq!(info.sni(), Some("a.example"));
    // Duplicates are refused.
    for exts in [
        vec![(0, sni_ext(&[(0, b"a.example")])), (0, sni_ext(&[(0, b"b.example")]))],
        vec![(0, sni_ext(&[(0, b"a.example"), (0, b"b.example")]))],
        vec![(16, alpn_ext(&[b"h2"])), (16, alpn_ext(&[b"h2"]))],
        vec![(43, vec![2, 3, 4]), (43, vec![2, 3, 4])],
    ] {
        assert!(matches!(parse(&exts), Err(HelloError::Malformed(_))), "{exts:?}");
    }
    // Empty lists and bad inner lengths.
    for exts in [
        vec![(0, vec![0, 0])],
        vec![(0, vec![0, 5, 0, 0, 9, b'a'])],
        vec![(16, vec![0, 0])],
        vec![(16, vec![0, 1, 0])],
        vec![(16, vec![0, 3, 5, b'h', b'2'])],
        vec![(43, vec![0])],
        vec![(43, vec![3, 3, 4, 3])],
        vec![(43, vec![2, 3, 4, 9])],
    ] {
        assert!(matches!(parse(&exts), Err(HelloError::Malformed(_))), "{exts:?}");
    }
    // supported_versions with GREASE and TLS 1.3.
    let info = parse(&[(43, vec![4, 0x0a, 0x0a, 3, 4])]).unwrap().unwrap();
    assert!(info.offers_tls13() && info.sni().is_none());
    // No extensions at all (an old client).
    let mut plain = handmade_hello(&[]);
    plain.truncate(plain.len() - 2);
    plain[4] -= 2;
    plain[8] -= 2;
    let info = peek_client_hello(&plain, DEFAULT_MAX_LEN).unwrap().unwrap();
    assert!(info.sni().is_none() && !info.has_supported_versions());
}

#[test]
fn long_alpn_list_is_truncated_at_a_protocol_boundary() {
    let protos: Vec<Vec<u8>> = (0..40).map(|i| format!("proto-{i:02}").into_bytes()).collect();
    let refs: Vec<&[u8]> = protos.iter().map(Vec::as_slice).collect();
    let info = peek_client_hello(&handmade_hello(&[(16, alpn_ext(&refs))]), DEFAULT_MAX_LEN)
        .unwrap()
        .unwrap();
    assert!(info.alpn_truncated());
    let kept: Vec<&[u8]> = info.alpn().collect();
    assert_eq!(kept.len(), ALPN_INLINE_LEN / 9); // 1 length byte + 8 name bytes each
    assert_eq!(kept, refs[..kept.len()]);
}

/// A poor man's fuzzer that runs in every `cargo test`: corrupt each byte of real hellos
/// (single record and fragmented) and truncate the inner lengths; nothing may panic, and a
/// result other than "need more" must be an error or a parse.
#[test]
fn corrupted_hellos_never_panic() {
    let single = rustls_hello(&HelloOpts {
        alpn: &[b"h2", b"http/1.1"],
        ..DEFAULT_OPTS
    });
    let msg = handshake_message(&single).to_vec();
    let fragmented = reframe(&msg, &[3, 100]);
    for original in [single, fragmented] {
        for i in 0..original.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut buf = original.clone();
                buf[i] ^= flip;
                let _ = peek_client_hello(&buf, DEFAULT_MAX_LEN);
                let _ = peek_client_hello(&buf[..i], DEFAULT_MAX_LEN);
            }
        }
    }
}

#[test]
fn matcher_routes_a_parsed_hello() {
    let m = SniMatcher::new([("*.example.com", 5)]).unwrap();
    let info = parse_full(&rustls_hello(&DEFAULT_OPTS));
    assert_eq!(info.sni().and_then(|sni| m.lookup(sni)), Some(5));
}

#[test]
fn framing_only_says_where_the_hello_ends() {
    let single = rustls_hello(&HelloOpts {
        post_quantum: true,
        ..DEFAULT_OPTS
    });
    let msg = handshake_message(&single);
    let many = reframe(msg, &[1, 3, 100, msg.len() - 1]);
    for buf in [&single[..], &many[..]] {
        for n in 0..buf.len() {
            assert_eq!(client_hello_len(&buf[..n], DEFAULT_MAX_LEN), Ok(None), "prefix {n}");
        }
        // Bytes after the hello (the client's next flight) are not part of it.
        let mut more = buf.to_vec();
        more.extend_from_slice(&[0x14, 0x03, 0x03, 0x00, 0x01, 0x01]);
        assert_eq!(client_hello_len(&more, DEFAULT_MAX_LEN), Ok(Some(buf.len())));
    }
    // The framing refuses what parsing would, without waiting for the rest.
    assert_eq!(
        client_hello_len(b"GET / HTTP/1.1\r\n", DEFAULT_MAX_LEN),
        Err(HelloError::NotTls)
    );
    assert_eq!(
        client_hello_len(&[0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0xff, 0xff], DEFAULT_MAX_LEN),
        Err(HelloError::TooLarge)
    );
}
