//! Unit tests for the strictness table in the module doc, framing and rewriting.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use super::*;

fn parse_req(s: &[u8]) -> Result<Option<RequestHead>, H1Error> {
    parse_request_head(s, &Limits::default(), &mut HeadScratch::new())
}

fn req_ok(s: &[u8]) -> RequestHead {
    match parse_req(s) {
        Ok(Some(h)) => h,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(s)),
    }
}

fn req_err(s: &[u8]) -> H1Error {
    match parse_req(s) {
        Err(e) => e,
        other => panic!("{:?}: expected error, got {other:?}", String::from_utf8_lossy(s)),
    }
}

fn with_headers(fields: &str) -> Vec<u8> {
    format!("POST /p HTTP/1.1\r\nHost: h\r\n{fields}\r\n").into_bytes()
}

fn parse_res(s: &[u8], method: Method) -> Result<Option<ResponseHead>, H1Error> {
    parse_response_head(s, &Limits::default(), method, &mut HeadScratch::new())
}

fn res_ok(s: &[u8], method: Method) -> ResponseHead {
    match parse_res(s, method) {
        Ok(Some(h)) => h,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(s)),
    }
}

#[test]
fn simple_request() {
    let buf = b"GET /index.html?q=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\nNEXT";
    let h = req_ok(buf);
    assert_eq!(h.method, Method::Get);
    assert_eq!(h.method_span.of(buf), b"GET");
    assert_eq!(h.target.of(buf), b"/index.html?q=1");
    assert_eq!(h.target_form, TargetForm::Origin);
    assert_eq!(h.version, Version::Http11);
    assert_eq!(h.head_len, buf.len() - 4);
    assert_eq!(h.body, BodyFraming::None);
    assert!(h.keep_alive && !h.close_after_response && !h.expect_continue && !h.upgrade);
    assert_eq!(h.host.map(|s| s.of(buf)), Some(&b"example.com"[..]));
    let fields: Vec<_> = h.headers(buf).collect();
    assert_eq!(fields, vec![(&b"Host"[..], &b"example.com"[..]), (b"Accept", b"*/*")]);
    assert_eq!(h.header(buf, b"accept"), Some(&b"*/*"[..]));
}

#[test]
fn every_prefix_is_incomplete() {
    let buf = b"\r\nPOST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n";
    for i in 0..buf.len() {
        assert!(matches!(parse_req(&buf[..i]), Ok(None)), "prefix {i}");
    }
    assert_eq!(req_ok(buf).body, BodyFraming::ContentLength(3));
}

#[test]
fn bare_lf_head_accepted() {
    let h = req_ok(b"GET / HTTP/1.1\nHost: h\n\n");
    assert_eq!(h.head_len, 24);
}

#[test]
fn content_length_rules() {
    let ok: &[(&str, u64)] = &[
        ("Content-Length: 5\r\n", 5),
        ("Content-Length: 5, 5\r\n", 5),
        ("Content-Length: 5\r\nContent-Length: 5\r\n", 5),
        ("Content-Length:  007 \r\n", 7),
        ("Content-Length: 18446744073709551615\r\n", u64::MAX),
    ];
    for (f, n) in ok {
        assert_eq!(req_ok(&with_headers(f)).body, BodyFraming::ContentLength(*n), "{f}");
    }
    let bad: &[(&str, ErrorKind)] = &[
        ("Content-Length: 5, 6\r\n", ErrorKind::ConflictingContentLength),
        (
            "Content-Length: 5\r\nContent-Length: 6\r\n",
            ErrorKind::ConflictingContentLength,
        ),
        ("Content-Length: +5\r\n", ErrorKind::BadContentLength),
        ("Content-Length: -1\r\n", ErrorKind::BadContentLength),
        ("Content-Length:\r\n", ErrorKind::BadContentLength),
        ("Content-Length: 5,\r\n", ErrorKind::BadContentLength),
        ("Content-Length: abc\r\n", ErrorKind::BadContentLength),
        ("Content-Length: 0x10\r\n", ErrorKind::BadContentLength),
        ("Content-Length: 5 5\r\n", ErrorKind::BadContentLength),
        ("Content-Length: 18446744073709551616\r\n", ErrorKind::BadContentLength),
    ];
    for (f, k) in bad {
        let e = req_err(&with_headers(f));
        assert_eq!((e.kind(), e.status()), (*k, 400), "{f}");
    }
}

#[test]
fn transfer_encoding_rules() {
    for f in [
        "Transfer-Encoding: chunked\r\n",
        "Transfer-Encoding: Chunked\r\n",
        "Transfer-Encoding: chunked \r\n",
    ] {
        assert_eq!(req_ok(&with_headers(f)).body, BodyFraming::Chunked, "{f}");
    }
    // Any coding before `chunked` is refused on a request (HAProxy: 422), known or not.
    for f in [
        "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: gzip;q=1, chunked\r\n",
    ] {
        let e = req_err(&with_headers(f));
        assert_eq!((e.kind(), e.status()), (ErrorKind::UnknownTransferCoding, 501), "{f}");
    }
    let bad: &[(&str, ErrorKind, u16)] = &[
        (
            "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
            ErrorKind::TransferEncodingWithContentLength,
            400,
        ),
        (
            "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
            ErrorKind::TransferEncodingWithContentLength,
            400,
        ),
        ("Transfer-Encoding: gzip\r\n", ErrorKind::BadTransferEncoding, 400),
        (
            "Transfer-Encoding: chunked, gzip\r\n",
            ErrorKind::BadTransferEncoding,
            400,
        ),
        (
            "Transfer-Encoding: chunked, chunked\r\n",
            ErrorKind::BadTransferEncoding,
            400,
        ),
        (
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            ErrorKind::BadTransferEncoding,
            400,
        ),
        ("Transfer-Encoding:\r\n", ErrorKind::BadTransferEncoding, 400),
        ("Transfer-Encoding: ,\r\n", ErrorKind::BadTransferEncoding, 400),
        // Empty list elements: a peer that counts elements, or takes the first or the last,
        // reads another framing (HAProxy refuses them too).
        ("Transfer-Encoding: , chunked\r\n", ErrorKind::BadTransferEncoding, 400),
        ("Transfer-Encoding: ,,chunked\r\n", ErrorKind::BadTransferEncoding, 400),
        ("Transfer-Encoding: chunked, ,\r\n", ErrorKind::BadTransferEncoding, 400),
        ("Transfer-Encoding: chunked,\r\n", ErrorKind::BadTransferEncoding, 400),
        (
            "Transfer-Encoding: gzip, , chunked\r\n",
            ErrorKind::BadTransferEncoding,
            400,
        ),
        (
            "Transfer-Encoding: foo, chunked\r\n",
            ErrorKind::UnknownTransferCoding,
            501,
        ),
        // RFC 9112 6.3: a final coding other than chunked is a 400, known or not.
        ("Transfer-Encoding: identity\r\n", ErrorKind::BadTransferEncoding, 400),
        ("Transfer-Encoding: xchunked\r\n", ErrorKind::BadTransferEncoding, 400),
        ("Transfer-Encoding: foo\r\n", ErrorKind::BadTransferEncoding, 400),
        (
            "Transfer-Encoding: foo\r\nTransfer-Encoding: gzip\r\n",
            ErrorKind::BadTransferEncoding,
            400,
        ),
        (
            "Transfer-Encoding: chunked, foo\r\n",
            ErrorKind::BadTransferEncoding,
            400,
        ),
        // chunked has no parameters (RFC 9112 7).
        (
            "Transfer-Encoding: chunked; q=1\r\n",
            ErrorKind::BadTransferEncoding,
            400,
        ),
        (
            "Transfer-Encoding: chunked;q=1\r\n",
            ErrorKind::BadTransferEncoding,
            400,
        ),
        ("Transfer-Encoding: chunked;\r\n", ErrorKind::BadTransferEncoding, 400),
        (
            "Transfer-Encoding: gzip, chunked ; x\r\n",
            ErrorKind::BadTransferEncoding,
            400,
        ),
        (
            "Transfer-Encoding: \"chunked\"\r\n",
            ErrorKind::BadTransferEncoding,
            400,
        ),
    ];
    for (f, k, s) in bad {
        let e = req_err(&with_headers(f));
        assert_eq!((e.kind(), e.status()), (*k, *s), "{f}");
    }
}

#[test]
fn transfer_encoding_on_http10_closes() {
    let h = req_ok(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n");
    assert_eq!(h.body, BodyFraming::Chunked);
    assert!(h.close_after_response && !h.keep_alive);
}

#[test]
fn header_syntax_rules() {
    let bad: &[(&[u8], ErrorKind)] = &[
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n b\r\n\r\n",
            ErrorKind::BadHeaderName,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\n\tb\r\n\r\n",
            ErrorKind::BadHeaderName,
        ),
        (b"GET / HTTP/1.1\r\nHost : h\r\n\r\n", ErrorKind::BadHeaderName),
        (b"GET / HTTP/1.1\r\nHost\t: h\r\n\r\n", ErrorKind::BadHeaderName),
        (b"GET / HTTP/1.1\r\nHost: h\r\n: x\r\n\r\n", ErrorKind::BadHeaderName),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nX(a): x\r\n\r\n",
            ErrorKind::BadHeaderName,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nX\x00a: x\r\n\r\n",
            ErrorKind::BadHeaderName,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n",
            ErrorKind::BadHeaderName,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x00b\r\n\r\n",
            ErrorKind::BadHeaderValue,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x01b\r\n\r\n",
            ErrorKind::BadHeaderValue,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x7fb\r\n\r\n",
            ErrorKind::BadHeaderValue,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\rb\r\n\r\n",
            ErrorKind::BadHeaderValue,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: h\r\n\x01X: a\r\n\r\n",
            ErrorKind::BadHeaderName,
        ),
    ];
    for (buf, k) in bad {
        let e = req_err(buf);
        assert_eq!((e.kind(), e.status()), (*k, 400), "{:?}", String::from_utf8_lossy(buf));
    }
    // HTAB and obs-text are fine in values.
    let buf = b"GET / HTTP/1.1\r\nHost: h\r\nX-A: a\tb \xe9\r\n\r\n";
    assert_eq!(req_ok(buf).header(buf, b"x-a"), Some(&b"a\tb \xe9"[..]));
}

#[test]
fn target_bytes() {
    for t in [
        &b"/a\"b"[..],
        b"/a<b",
        b"/a>b",
        b"/a\\b",
        b"/a^b",
        b"/a`b",
        b"/a{b",
        b"/a|b",
        b"/a}b",
        b"/a\x80b",
        b"/a\xffb",
        b"/a#frag",
        b"/a\x7fb",
        b"/a\x01b",
    ] {
        let mut buf = b"GET ".to_vec();
        buf.extend_from_slice(t);
        buf.extend_from_slice(b" HTTP/1.1\r\nHost: h\r\n\r\n");
        let e = req_err(&buf);
        assert_eq!(
            (e.kind(), e.status()),
            (ErrorKind::BadTarget, 400),
            "{:?}",
            String::from_utf8_lossy(t)
        );
    }
    let buf = b"GET /a-._~:/?[]@!$&'()*+,;=%20%zz HTTP/1.1\r\nHost: h\r\n\r\n";
    assert_eq!(req_ok(buf).target_form, TargetForm::Origin);
}

#[test]
fn target_forms() {
    let cases: &[(&[u8], Option<TargetForm>)] = &[
        (b"OPTIONS * HTTP/1.1", Some(TargetForm::Asterisk)),
        (b"GET * HTTP/1.1", None),
        (b"OPTIONS /x HTTP/1.1", Some(TargetForm::Origin)),
        (b"CONNECT example.com:443 HTTP/1.1", Some(TargetForm::Authority)),
        (b"CONNECT [::1]:443 HTTP/1.1", Some(TargetForm::Authority)),
        (b"CONNECT /x HTTP/1.1", None),
        (b"CONNECT http://a/ HTTP/1.1", None),
        (b"CONNECT example.com HTTP/1.1", None),
        (b"CONNECT example.com:https HTTP/1.1", None),
        (b"GET example.com:443 HTTP/1.1", None),
        (b"GET http://example.com/x?y HTTP/1.1", Some(TargetForm::Absolute)),
        (b"GET https://example.com HTTP/1.1", Some(TargetForm::Absolute)),
        (b"GET http:// HTTP/1.1", None),
        (b"GET http:///x HTTP/1.1", None),
        (b"GET foo HTTP/1.1", None),
    ];
    for (line, form) in cases {
        let mut buf = line.to_vec();
        buf.extend_from_slice(b"\r\nHost: example.com\r\n\r\n");
        match form {
            Some(f) => assert_eq!(req_ok(&buf).target_form, *f),
            None => assert_eq!(
                req_err(&buf).kind(),
                ErrorKind::BadTarget,
                "{:?}",
                String::from_utf8_lossy(line)
            ),
        }
    }
}

#[test]
fn request_line_and_version() {
    let cases: &[(&[u8], ErrorKind, u16)] = &[
        (b"GET / HTTP/1.2\r\nHost: h\r\n\r\n", ErrorKind::UnsupportedVersion, 505),
        (b"GET / HTTP/2.0\r\nHost: h\r\n\r\n", ErrorKind::UnsupportedVersion, 505),
        (b"GET / HTTP/0.9\r\nHost: h\r\n\r\n", ErrorKind::UnsupportedVersion, 505),
        (b"GET / HTTP/1.2", ErrorKind::UnsupportedVersion, 505),
        (b"GET / HTTP/1.1x\r\nHost: h\r\n\r\n", ErrorKind::BadVersion, 400),
        (b"GET / http/1.1\r\nHost: h\r\n\r\n", ErrorKind::BadVersion, 400),
        (b"GET / HTTP/11\r\nHost: h\r\n\r\n", ErrorKind::BadVersion, 400),
        (b"GET / \r\nHost: h\r\n\r\n", ErrorKind::BadVersion, 400),
        (b"GET /\r\n\r\n", ErrorKind::BadRequestLine, 400),
        (b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", ErrorKind::BadTarget, 400),
        (b"GET / HTTP/1.1 \r\nHost: h\r\n\r\n", ErrorKind::BadRequestLine, 400),
        (b"G(T / HTTP/1.1\r\nHost: h\r\n\r\n", ErrorKind::BadMethod, 400),
        (b"GE\x01T / HTTP/1.1\r\nHost: h\r\n\r\n", ErrorKind::BadMethod, 400),
        (b" GET / HTTP/1.1\r\nHost: h\r\n\r\n", ErrorKind::BadMethod, 400),
        (b"GET / HTTP/1.1\rHost: h\r\n\r\n", ErrorKind::BadLineEnding, 400),
    ];
    for (buf, k, s) in cases {
        let e = req_err(buf);
        assert_eq!((e.kind(), e.status()), (*k, *s), "{:?}", String::from_utf8_lossy(buf));
    }
}

#[test]
fn methods() {
    let h = req_ok(b"PURGE /x HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(h.method, Method::Other);
    assert_eq!(req_ok(b"get / HTTP/1.1\r\nHost: h\r\n\r\n").method, Method::Other);
    assert_eq!(req_ok(b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n").method, Method::Head);
    assert_eq!(req_ok(b"M-SEARCH! / HTTP/1.1\r\nHost: h\r\n\r\n").method, Method::Other);
}

#[test]
fn host_rules() {
    assert_eq!(req_err(b"GET / HTTP/1.1\r\n\r\n").kind(), ErrorKind::MissingHost);
    let e = req_err(b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n");
    assert_eq!((e.kind(), e.status()), (ErrorKind::DuplicateHost, 400));
    let h = req_ok(b"GET / HTTP/1.0\r\n\r\n");
    assert!(h.host.is_none() && h.version == Version::Http10);
    // RFC 9112 3.2: an invalid Host is a 400.
    for host in [
        "a b",
        "evil.example/x?",
        "a@b.example",
        "x:notaport",
        "x:65536",
        ":80",
        "[::1",
        "a,b\"",
    ] {
        let e = req_err(format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
        assert_eq!((e.kind(), e.status()), (ErrorKind::BadHost, 400), "{host}");
        let e = req_err(format!("GET / HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes());
        assert_eq!(e.kind(), ErrorKind::BadHost, "1.0: {host}");
    }
    for host in ["", "a.example:8080", "[::1]:443", "127.0.0.1", "a:"] {
        req_ok(format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
    }
    // Absolute form: the authority must be valid and agree with Host (default port = none).
    for (line, host) in [
        ("GET http://public.example/x HTTP/1.1", "public.example"),
        ("GET http://Public.Example/x HTTP/1.1", "public.example:80"),
        ("GET https://public.example:443/x HTTP/1.1", "public.example"),
        ("GET http://public.example:8080 HTTP/1.1", "public.example:8080"),
        ("GET http://[::1]:8080/ HTTP/1.1", "[::1]:8080"),
    ] {
        req_ok(format!("{line}\r\nHost: {host}\r\n\r\n").as_bytes());
    }
    req_ok(b"GET http://public.example/x HTTP/1.0\r\n\r\n");
    for (line, host) in [
        ("GET http://public.example/x HTTP/1.1", "admin.example"),
        ("GET http://public.example/x HTTP/1.1", "public.example:8080"),
        ("GET https://public.example/x HTTP/1.1", "public.example:80"),
        ("GET http://public.example:81/x HTTP/1.1", "public.example"),
    ] {
        let e = req_err(format!("{line}\r\nHost: {host}\r\n\r\n").as_bytes());
        assert_eq!(
            (e.kind(), e.status()),
            (ErrorKind::HostMismatch, 400),
            "{line} / {host}"
        );
    }
    for line in [
        "GET http://user@public.example/x HTTP/1.1",
        "GET http://public.example:x/ HTTP/1.1",
        "GET http://public.example:99999/ HTTP/1.1",
        "CONNECT a@b:443 HTTP/1.1",
    ] {
        let e = req_err(format!("{line}\r\nHost: public.example\r\n\r\n").as_bytes());
        assert_eq!(e.kind(), ErrorKind::BadTarget, "{line}");
    }
}

#[test]
fn limits() {
    let small = Limits {
        max_header_size: 64,
        max_request_line: 16,
        max_headers: 2,
    };
    let mut s = HeadScratch::new();
    let p = |b: &[u8], s: &mut HeadScratch| parse_request_head(b, &small, s).map(|o| o.is_some());
    // Request line: 16 bytes exactly is fine, 17 is not, terminated or not.
    assert_eq!(
        p(b"GET /23456 HTTP/1.1\r\nHost: h\r\n\r\n", &mut s).map_err(|e| e.status()),
        Err(414)
    );
    assert_eq!(p(b"GET /23 HTTP/1.0\r\n\r\n", &mut s), Ok(true));
    assert_eq!(p(b"GET /23 HTTP/1.0\r", &mut s), Ok(false));
    assert_eq!(p(b"GET /234567890123456789", &mut s).map_err(|e| e.status()), Err(414));
    // Head size, complete or not.
    let big = b"GET / HTTP/1.1\r\nHost: h\r\nX-Long: 0123456789012345678901234567890123456789\r\n\r\n";
    assert_eq!(p(big, &mut s).map_err(|e| e.kind()), Err(ErrorKind::HeadTooLarge));
    assert_eq!(p(&big[..big.len() - 2], &mut s).map_err(|e| e.status()), Err(431));
    // Header count.
    let many = b"GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n\r\n";
    assert_eq!(
        p(many, &mut s).map_err(|e| (e.kind(), e.status())),
        Err((ErrorKind::TooManyHeaders, 431))
    );
}

#[test]
fn connection_semantics() {
    let ka = |b: &[u8]| req_ok(b).keep_alive;
    assert!(ka(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"));
    assert!(!ka(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"));
    assert!(!ka(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, Close\r\n\r\n"));
    assert!(!ka(b"GET / HTTP/1.0\r\n\r\n"));
    assert!(ka(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    let h = req_ok(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n");
    assert!(h.expect_continue);
    assert!(!req_ok(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").expect_continue);
    let up = b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
    assert!(req_ok(up).upgrade);
    assert!(!req_ok(b"GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n").upgrade);
    assert!(
        req_ok(b"POST /ws HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: x\r\nContent-Length: 0\r\n\r\n")
            .upgrade
    );
}

#[test]
fn upgrade_with_a_body_is_dropped() {
    for framing in ["Content-Length: 5\r\n", "Transfer-Encoding: chunked\r\n"] {
        let buf = format!("POST /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n{framing}\r\n");
        let h = req_ok(buf.as_bytes());
        assert!(!h.upgrade, "{framing}");
        // Forwarded as a plain request: neither `Upgrade` nor `Connection: upgrade`.
        let edits = HeadEdits {
            connection: ConnectionOut::Omit,
            ..HeadEdits::default()
        };
        let out = out_req(buf.as_bytes(), &edits);
        assert_eq!(out, format!("POST /ws HTTP/1.1\r\nHost: h\r\n{framing}\r\n"));
    }
}

#[test]
fn scratch_is_reused() {
    let mut s = HeadScratch::new();
    let buf = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n";
    let h = parse_request_head(buf, &Limits::default(), &mut s).unwrap().unwrap();
    assert!(s.headers.capacity() == 0);
    h.reclaim(&mut s);
    assert!(s.headers.capacity() >= 32);
}

// ---- responses ----

#[test]
fn response_framing() {
    let cases: &[(&[u8], Method, BodyFraming, bool)] = &[
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
            Method::Get,
            BodyFraming::ContentLength(3),
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            Method::Get,
            BodyFraming::Chunked,
            true,
        ),
        (
            b"HTTP/1.1 200 OK\r\n\r\n",
            Method::Get,
            BodyFraming::CloseDelimited,
            false,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
            Method::Head,
            BodyFraming::None,
            true,
        ),
        (b"HTTP/1.1 204 No Content\r\n\r\n", Method::Get, BodyFraming::None, true),
        (
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
            Method::Get,
            BodyFraming::None,
            true,
        ),
        (b"HTTP/1.1 100 Continue\r\n\r\n", Method::Post, BodyFraming::None, true),
        (
            b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n",
            Method::Get,
            BodyFraming::ContentLength(3),
            false,
        ),
        (
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 3\r\n\r\n",
            Method::Get,
            BodyFraming::ContentLength(3),
            true,
        ),
        (
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
            Method::Get,
            BodyFraming::Chunked,
            false,
        ),
        (
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\n",
            Method::Get,
            BodyFraming::ContentLength(3),
            false,
        ),
        (
            b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
            Method::Get,
            BodyFraming::ContentLength(0),
            true,
        ),
    ];
    for (buf, m, body, ka) in cases {
        let h = res_ok(buf, *m);
        assert_eq!(
            (h.body, h.keep_alive),
            (*body, *ka),
            "{:?}",
            String::from_utf8_lossy(buf)
        );
        assert_eq!(h.head_len, buf.len());
    }
}

#[test]
fn response_flags() {
    let h = res_ok(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
        Method::Get,
    );
    assert!(h.switching_protocols && !h.informational);
    let h = res_ok(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", Method::Get);
    assert!(h.informational && h.body == BodyFraming::None);
    assert!(res_ok(b"HTTP/1.1 100 Continue\r\n\r\n", Method::Post).informational);
    let h = res_ok(b"HTTP/1.1 200 Connection established\r\n\r\n", Method::Connect);
    assert!(h.tunnel && h.body == BodyFraming::None);
    let h = res_ok(b"HTTP/1.1 407 Auth\r\nContent-Length: 0\r\n\r\n", Method::Connect);
    assert!(!h.tunnel);
    let buf = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
    assert_eq!(res_ok(buf, Method::Get).reason.of(buf), b"Not Found");
}

#[test]
fn response_errors_are_502() {
    let cases: &[(&[u8], ErrorKind)] = &[
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            ErrorKind::TransferEncodingWithContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            ErrorKind::BadTransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
            ErrorKind::BadTransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: , chunked\r\n\r\n",
            ErrorKind::BadTransferEncoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: br, chunked\r\n\r\n",
            ErrorKind::UnknownTransferCoding,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            ErrorKind::ConflictingContentLength,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n",
            ErrorKind::BadContentLength,
        ),
        (b"HTTP/1.1 099 Low\r\n\r\n", ErrorKind::BadStatus),
        (b"HTTP/1.1 600 High\r\n\r\n", ErrorKind::BadStatus),
        (b"HTTP/1.1 20 OK\r\n\r\n", ErrorKind::BadStatus),
        (b"HTTP/2.0 200 OK\r\n\r\n", ErrorKind::UnsupportedVersion),
        (b"HTTP/1.1x 200 OK\r\n\r\n", ErrorKind::BadVersion),
        (b"HTTP/1.1 200 OK\r\nX: a\x01\r\n\r\n", ErrorKind::BadHeaderValue),
        (b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", ErrorKind::BadHeaderName),
        (b"HTTP/1.1 200 OK\r\nX : a\r\n\r\n", ErrorKind::BadHeaderName),
    ];
    for (buf, k) in cases {
        match parse_res(buf, Method::Get) {
            Err(e) => assert_eq!(
                (e.kind(), e.status(), e.side()),
                (*k, 502, Side::Response),
                "{:?}",
                String::from_utf8_lossy(buf)
            ),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }
    let small = Limits {
        max_header_size: 32,
        ..Limits::default()
    };
    let e = parse_response_head(
        b"HTTP/1.1 200 OK\r\nServer: 0123456789abcdef",
        &small,
        Method::Get,
        &mut HeadScratch::new(),
    );
    assert_eq!(
        e.map(|_| ()).map_err(|e| (e.kind(), e.status())),
        Err((ErrorKind::HeadTooLarge, 502))
    );
}

// ---- bodies ----

fn track_all(framing: BodyFraming, input: &[u8]) -> Result<Progress, H1Error> {
    BodyTracker::new(framing, Side::Request).advance(input)
}

#[test]
fn content_length_body() {
    let mut t = BodyTracker::new(BodyFraming::ContentLength(5), Side::Request);
    assert_eq!(
        t.advance(b"abc"),
        Ok(Progress {
            consumed: 3,
            done: false
        })
    );
    assert_eq!(
        t.advance(b"deGET"),
        Ok(Progress {
            consumed: 2,
            done: true
        })
    );
    assert_eq!(
        t.advance(b"more"),
        Ok(Progress {
            consumed: 0,
            done: true
        })
    );
    assert_eq!(
        track_all(BodyFraming::ContentLength(0), b"x"),
        Ok(Progress {
            consumed: 0,
            done: true
        })
    );
    assert_eq!(
        track_all(BodyFraming::None, b"x"),
        Ok(Progress {
            consumed: 0,
            done: true
        })
    );
    let mut t = BodyTracker::new(BodyFraming::ContentLength(5), Side::Response);
    assert_eq!(t.advance(b"ab").map(|p| p.done), Ok(false));
    assert_eq!(
        t.on_eof().map_err(|e| (e.kind(), e.status())),
        Err((ErrorKind::TruncatedBody, 502))
    );
}

/// A Content-Length body's rest forwarded unseen (spliced): `length_left` says how much,
/// `skip_length` counts it, and the tracker ends exactly where `advance` would have.
#[test]
fn content_length_skipped_bytes() {
    let mut t = BodyTracker::new(BodyFraming::ContentLength(10), Side::Response);
    assert_eq!(t.advance(b"abc").map(|p| p.consumed), Ok(3));
    assert_eq!(t.length_left(), Some(7));
    t.skip_length(4);
    assert_eq!((t.length_left(), t.is_done()), (Some(3), false));
    assert_eq!(
        t.on_eof().map_err(|e| e.kind()),
        Err(ErrorKind::TruncatedBody),
        "a body cut short while spliced is truncated"
    );
    t.skip_length(3);
    assert!(t.is_done());
    assert_eq!(t.length_left(), None);
    assert_eq!(
        t.advance(b"GET").map(|p| p.consumed),
        Ok(0),
        "what follows is not the body's"
    );
    for framing in [BodyFraming::Chunked, BodyFraming::CloseDelimited, BodyFraming::None] {
        let mut t = BodyTracker::new(framing, Side::Response);
        t.skip_length(5);
        assert_eq!(t.length_left(), None, "{framing:?}");
        assert_eq!(t.as_str(), BodyTracker::new(framing, Side::Response).as_str());
    }
}
#[test]
fn close_delimited_body() {
    let mut t = BodyTracker::new(BodyFraming::CloseDelimited, Side::Response);
    assert_eq!(
        t.advance(b"anything"),
        Ok(Progress {
            consumed: 8,
            done: false
        })
    );
    assert_eq!(t.on_eof(), Ok(()));
    assert!(t.is_done());
}

#[test]
fn chunked_valid() {
    let cases: &[&[u8]] = &[
        b"5\r\nhello\r\n0\r\n\r\n",
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        b"A\r\n0123456789\r\na\r\n0123456789\r\n0\r\n\r\n",
        b"5;name=value;flag\r\nhello\r\n0;last\r\n\r\n",
        b"5 ;name = \"quoted \\\" \xe9\"\r\nhello\r\n0\r\n\r\n",
        b"5\t \r\nhello\r\n0\r\n\r\n",
        b"0005\r\nhello\r\n0000\r\n\r\n",
        b"5\r\nhello\r\n0\r\nX-Trailer: v\r\nX-Empty:\r\n\r\n",
        b"0\r\n\r\n",
    ];
    for c in cases {
        let mut input = c.to_vec();
        input.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(
            track_all(BodyFraming::Chunked, &input),
            Ok(Progress {
                consumed: c.len(),
                done: true
            }),
            "{:?}",
            String::from_utf8_lossy(c)
        );
    }
}

#[test]
fn chunked_invalid() {
    let cases: &[(&[u8], ErrorKind)] = &[
        (b"fffffffffffffffff\r\n", ErrorKind::BadChunkSize),
        (b"ffffffffffffffff\r\n", ErrorKind::BadChunkSize),
        (b"10000000000000\r\n", ErrorKind::BadChunkSize),
        (b"5 ;\x01\r\n", ErrorKind::BadChunkExtension),
        (b"g\r\n", ErrorKind::BadChunkSize),
        (b"\r\n", ErrorKind::BadChunkSize),
        (b";ext\r\n", ErrorKind::BadChunkSize),
        (b"-1\r\n", ErrorKind::BadChunkSize),
        (b"0x5\r\n", ErrorKind::BadChunkSize),
        (b"5 5\r\n", ErrorKind::BadChunkSize),
        (b"5\rX", ErrorKind::BadChunkSize),
        (b"5;a\x01b\r\n", ErrorKind::BadChunkExtension),
        (b"5;a\"\x00\"\r\n", ErrorKind::BadChunkExtension),
        (b"5;a@b\r\n", ErrorKind::BadChunkExtension),
        (b"5\r\nhelloX\r\n", ErrorKind::MissingChunkCrlf),
        (b"5\r\nhello\rX", ErrorKind::MissingChunkCrlf),
        (b"5\nhello\r\n", ErrorKind::BareLf),
        (b"5;e\nhello\r\n", ErrorKind::BareLf),
        (b"5\r\nhello\n0\r\n\r\n", ErrorKind::BareLf),
        (b"0\r\n\n", ErrorKind::BareLf),
        (b"0\r\nX: a\n\r\n", ErrorKind::BareLf),
        (b"0\r\n\rX", ErrorKind::BadTrailer),
        (b"0\r\nX : a\r\n\r\n", ErrorKind::BadTrailer),
        (b"0\r\n: a\r\n\r\n", ErrorKind::BadTrailer),
        (b"0\r\nX: a\x00\r\n\r\n", ErrorKind::BadTrailer),
        (b"0\r\nX: a\r\n b\r\n\r\n", ErrorKind::ObsFold),
        (b"0\r\nTransfer-Encoding: gzip\r\n\r\n", ErrorKind::ForbiddenTrailer),
        (b"0\r\ncontent-LENGTH: 5\r\n\r\n", ErrorKind::ForbiddenTrailer),
        (b"0\r\nX: a\r\nHost: b\r\n\r\n", ErrorKind::ForbiddenTrailer),
    ];
    for (c, k) in cases {
        let e = track_all(BodyFraming::Chunked, c).map_err(|e| (e.kind(), e.status()));
        assert_eq!(e, Err((*k, 400)), "{:?}", String::from_utf8_lossy(c));
        // The same input on the response side is a 502.
        let e = BodyTracker::new(BodyFraming::Chunked, Side::Response).advance(c);
        assert_eq!(e.map_err(|e| e.status()), Err(502));
    }
}

#[test]
fn chunk_limits() {
    let mut line = b"5;".to_vec();
    line.resize(body::MAX_CHUNK_LINE + 8, b'a');
    assert_eq!(
        track_all(BodyFraming::Chunked, &line).map_err(|e| e.kind()),
        Err(ErrorKind::BadChunkExtension)
    );
    let mut t = BodyTracker::new(BodyFraming::Chunked, Side::Request).with_trailer_limit(8);
    let e = t
        .advance(b"0\r\nX-Long: 0123456789\r\n\r\n")
        .map_err(|e| (e.kind(), e.status()));
    assert_eq!(e, Err((ErrorKind::TrailersTooLarge, 431)));
    // 2^52 - 1 is the largest size (HAProxy's bound); leading zeros do not count.
    let p = track_all(BodyFraming::Chunked, b"fffffffffffff\r\nabc");
    assert_eq!(
        p,
        Ok(Progress {
            consumed: 18,
            done: false
        })
    );
    assert_eq!(body::MAX_CHUNK_SIZE, 0xf_ffff_ffff_ffff);
    let p = track_all(BodyFraming::Chunked, b"00000000000000000001\r\nx\r\n0\r\n\r\n");
    assert_eq!(p.map(|p| p.done), Ok(true));
    for big in [
        &b"10000000000000\r\n"[..],
        b"ffffffffffffffff\r\n",
        b"0010000000000000\r\n",
    ] {
        assert_eq!(
            track_all(BodyFraming::Chunked, big).map_err(|e| (e.kind(), e.status())),
            Err((ErrorKind::BadChunkSize, 400)),
            "{:?}",
            String::from_utf8_lossy(big)
        );
    }
}

#[test]
fn chunked_max_body() {
    let tracker = || BodyTracker::new(BodyFraming::Chunked, Side::Request).with_max_body(10);
    let ok = b"5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n";
    assert_eq!(tracker().advance(ok).map(|p| p.done), Ok(true));
    // Refused at the size line that goes past the limit, before its data.
    let over = b"5\r\nhello\r\n6\r\n";
    let e = tracker().advance(over).map_err(|e| (e.kind(), e.status()));
    assert_eq!(e, Err((ErrorKind::BodyTooLarge, 413)));
    let mut t = tracker();
    assert!(t.advance(b"b\r").is_ok());
    assert_eq!(t.advance(b"\n").map_err(|e| e.kind()), Err(ErrorKind::BodyTooLarge));
    // Content-Length bodies are judged from the head, not here.
    let mut t = BodyTracker::new(BodyFraming::ContentLength(20), Side::Request).with_max_body(10);
    assert_eq!(t.advance(&[b'x'; 20]).map(|p| p.done), Ok(true));
}

/// Re-frames `input` cut into `step`-byte pieces (each re-framed in its own buffer); the
/// concatenated output and whether the body ended.
fn reframe_split(input: &[u8], step: usize) -> Result<(Vec<u8>, usize, bool), ErrorKind> {
    let mut t = BodyTracker::new(BodyFraming::Chunked, Side::Request);
    let mut out = Vec::new();
    let mut consumed = 0;
    for piece in input.chunks(step) {
        let mut buf = piece.to_vec();
        let r = t.reframe(&mut buf).map_err(|e| e.kind())?;
        assert!(r.out <= r.consumed && r.consumed <= piece.len());
        out.extend_from_slice(r.lead());
        out.extend_from_slice(&buf[..r.out]);
        consumed += r.consumed;
        if r.done {
            return Ok((out, consumed, true));
        }
    }
    Ok((out, consumed, false))
}

#[test]
fn reframe_makes_size_lines_canonical() {
    let cases: &[(&[u8], &[u8])] = &[
        (b"5\r\nhello\r\n0\r\n\r\n", b"5\r\nhello\r\n0\r\n\r\n"),
        (b"5 \r\nhello\r\n0\t\r\n\r\n", b"5\r\nhello\r\n0\r\n\r\n"),
        (b"5;a=b;c=\"d e\"\r\nhello\r\n0;z\r\n\r\n", b"5\r\nhello\r\n0\r\n\r\n"),
        (b"0005\r\nhello\r\n000\r\n\r\n", b"5\r\nhello\r\n0\r\n\r\n"),
        (b"A\r\n0123456789\r\n0\r\n\r\n", b"a\r\n0123456789\r\n0\r\n\r\n"),
        (
            b"1b ; x\r\n0123456789abcdef0123456789a\r\n0\r\nT: v\r\nU:\r\n\r\n",
            b"1b\r\n0123456789abcdef0123456789a\r\n0\r\nT: v\r\nU:\r\n\r\n",
        ),
        (b"fffffffffffff \r\nab", b"fffffffffffff\r\nab"),
    ];
    for (input, want) in cases {
        let mut with_next = input.to_vec();
        let complete = want.ends_with(b"\r\n\r\n");
        if complete {
            with_next.extend_from_slice(b"GET / HTTP/1.1\r\n");
        }
        for step in 1..=with_next.len() {
            let (out, consumed, done) = reframe_split(&with_next, step).unwrap();
            assert_eq!(done, complete);
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(want),
                "step {step} of {:?}",
                String::from_utf8_lossy(input)
            );
            assert_eq!(consumed, input.len(), "step {step}");
        }
        // Canonical framing is a fixed point, and agrees with `advance`.
        let (again, _, _) = reframe_split(want, want.len()).unwrap();
        assert_eq!(&again[..], *want);
        let p = track_all(BodyFraming::Chunked, &with_next).unwrap();
        assert_eq!(p.consumed, input.len());
    }
}

#[test]
fn reframe_lead_only_for_a_line_split_across_calls() {
    let mut t = BodyTracker::new(BodyFraming::Chunked, Side::Request);
    let mut a = b"1".to_vec();
    let r = t.reframe(&mut a).unwrap();
    assert_eq!((r.consumed, r.out, r.lead()), (1, 0, &b""[..]));
    // "a\r\n" completes "1a\r\n": 4 bytes of output from 3 of input.
    let mut b = b"a\r\nxy".to_vec();
    let r = t.reframe(&mut b).unwrap();
    assert_eq!(r.lead(), b"1a\r\n");
    assert_eq!((r.consumed, r.out, &b[..r.out]), (5, 2, &b"xy"[..]));
    // Room enough: written in place.
    let mut t = BodyTracker::new(BodyFraming::Chunked, Side::Request);
    let mut a = b"0".to_vec();
    t.reframe(&mut a).unwrap();
    let mut b = b"01;ext=1\r\nz".to_vec();
    let r = t.reframe(&mut b).unwrap();
    assert_eq!((r.lead(), &b[..r.out]), (&b""[..], &b"1\r\nz"[..]));
}

#[test]
fn reframe_other_framings_copy_through() {
    let mut t = BodyTracker::new(BodyFraming::ContentLength(3), Side::Request);
    let mut buf = b"abcdef".to_vec();
    let r = t.reframe(&mut buf).unwrap();
    assert_eq!((r.consumed, r.out, r.done), (3, 3, true));
    let mut t = BodyTracker::new(BodyFraming::CloseDelimited, Side::Response);
    let mut buf = b"abcdef".to_vec();
    let r = t.reframe(&mut buf).unwrap();
    assert_eq!((r.consumed, r.out, r.done), (6, 6, false));
    // Errors are the tracker's.
    let mut t = BodyTracker::new(BodyFraming::Chunked, Side::Request);
    let e = t.reframe(&mut b"5\nhello".to_vec()).map_err(|e| e.kind());
    assert_eq!(e, Err(ErrorKind::BareLf));
}

#[test]
fn chunked_byte_by_byte() {
    let body = b"5;x=y\r\nhello\r\n0\r\nT: v\r\n\r\n";
    let mut t = BodyTracker::new(BodyFraming::Chunked, Side::Request);
    for (i, b) in body.iter().enumerate() {
        let p = t.advance(std::slice::from_ref(b)).unwrap();
        assert_eq!(
            p,
            Progress {
                consumed: 1,
                done: i == body.len() - 1
            },
            "byte {i} {}",
            t.as_str()
        );
    }
}

// ---- writing ----

fn out_req(buf: &[u8], edits: &HeadEdits) -> String {
    let h = req_ok(buf);
    let mut out = Vec::new();
    write_request_head(&h, buf, edits, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn drops_hop_by_hop() {
    let buf = b"GET /x HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Hop, content-length\r\nX-Hop: 1\r\n\
Keep-Alive: timeout=5\r\nTE: trailers\r\nUpgrade: h2c\r\nProxy-Connection: keep-alive\r\n\
Proxy-Authorization: Basic x\r\nContent-Length: 0\r\nX-End: 2\r\n\r\n";
    let out = out_req(
        buf,
        &HeadEdits {
            connection: ConnectionOut::KeepAlive,
            ..HeadEdits::default()
        },
    );
    assert_eq!(
        out,
        "GET /x HTTP/1.1\r\nHost: h\r\nProxy-Authorization: Basic x\r\nContent-Length: 0\r\nX-End: 2\r\n\
Connection: keep-alive\r\n\r\n"
    );
}

/// curl `--http2` on cleartext offers `Upgrade: h2c` with `HTTP2-Settings`: not an upgrade
/// the proxy passes on. The request goes as plain HTTP/1.1; other protocols still upgrade.
#[test]
fn an_h2c_offer_is_dropped() {
    let buf = b"GET /x HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\
HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\nX-End: 2\r\n\r\n";
    assert!(!req_ok(buf).upgrade);
    assert_eq!(
        out_req(buf, &HeadEdits::default()),
        "GET /x HTTP/1.1\r\nHost: h\r\nX-End: 2\r\n\r\n"
    );
    // Not named by Connection: dropped all the same.
    let buf = b"GET /x HTTP/1.1\r\nHost: h\r\nHTTP2-Settings: AAMA\r\n\r\n";
    assert_eq!(
        out_req(buf, &HeadEdits::default()),
        "GET /x HTTP/1.1\r\nHost: h\r\n\r\n"
    );
    let upgrade = HeadEdits {
        connection: ConnectionOut::Upgrade,
        ..HeadEdits::default()
    };
    for (offer, kept) in [
        ("websocket, h2c", "websocket"),
        ("H2C, foo/2, bar", "foo/2, bar"),
        ("websocket", "websocket"),
    ] {
        let buf = format!("GET /x HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: {offer}\r\n\r\n");
        assert!(req_ok(buf.as_bytes()).upgrade, "{offer}");
        let want = format!("GET /x HTTP/1.1\r\nHost: h\r\nUpgrade: {kept}\r\nConnection: upgrade\r\n\r\n");
        assert_eq!(out_req(buf.as_bytes(), &upgrade), want, "{offer}");
    }
    // Two fields, one of them only `h2c`: that one goes.
    let buf = b"GET /x HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: h2c\r\nUpgrade: websocket\r\n\r\n";
    assert!(req_ok(buf).upgrade);
    assert_eq!(
        out_req(buf, &upgrade),
        "GET /x HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
    );
    for offer in ["h2c", "h2c, h2c", " h2c ,"] {
        let buf = format!("GET /x HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: {offer}\r\n\r\n");
        assert!(!req_ok(buf.as_bytes()).upgrade, "{offer}");
    }
}

#[test]
fn forwarding_fields() {
    let buf = b"GET /x HTTP/1.0\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-Proto: ftp\r\n\
X-Forwarded-For: 2.2.2.2\r\nForwarded: for=3.3.3.3\r\n\r\n";
    let edits = HeadEdits {
        connection: ConnectionOut::Close,
        x_forwarded_for: Some("10.0.0.1".parse().unwrap()),
        x_forwarded_proto: Some(Proto::Https),
        forwarded: Some(("::1".parse().unwrap(), Some(Proto::Https))),
        http10: false,
        ..HeadEdits::default()
    };
    assert_eq!(
        out_req(buf, &edits),
        "GET /x HTTP/1.1\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2, 10.0.0.1\r\nX-Forwarded-Proto: https\r\n\
Forwarded: for=3.3.3.3, for=\"[::1]\";proto=https\r\nConnection: close\r\n\r\n"
    );
    let edits = HeadEdits {
        forwarded: Some(("192.0.2.7".parse().unwrap(), None)),
        ..edits
    };
    let out = out_req(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", &edits);
    assert!(out.contains("\r\nForwarded: for=192.0.2.7\r\n"), "{out}");
    // Without edits, forwarding fields pass through untouched.
    let out = out_req(buf, &HeadEdits::default());
    assert!(
        out.contains("X-Forwarded-For: 1.1.1.1\r\nX-Forwarded-Proto: ftp\r\n"),
        "{out}"
    );
}

#[test]
fn upgrade_kept_only_for_upgrade() {
    let buf = b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
    let out = out_req(
        buf,
        &HeadEdits {
            connection: ConnectionOut::Upgrade,
            ..HeadEdits::default()
        },
    );
    assert_eq!(
        out,
        "GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
    );
    let out = out_req(buf, &HeadEdits::default());
    assert_eq!(out, "GET /ws HTTP/1.1\r\nHost: h\r\n\r\n");
}

#[test]
fn rewrite_response() {
    let buf = b"HTTP/1.0 200 Fine\r\nConnection: keep-alive\r\nKeep-Alive: timeout=3\r\nContent-Length: 2\r\n\r\n";
    let h = res_ok(buf, Method::Get);
    let mut out = Vec::new();
    write_response_head(
        &h,
        buf,
        &HeadEdits {
            connection: ConnectionOut::Close,
            ..HeadEdits::default()
        },
        &mut out,
    );
    assert_eq!(
        out,
        b"HTTP/1.1 200 Fine\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"
    );
    let buf = b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n";
    let h = res_ok(buf, Method::Get);
    out.clear();
    write_response_head(
        &h,
        buf,
        &HeadEdits {
            connection: ConnectionOut::Upgrade,
            ..HeadEdits::default()
        },
        &mut out,
    );
    assert_eq!(
        out,
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
    );
}

#[test]
fn rewritten_head_parses_back() {
    let buf = b"POST /x HTTP/1.1\nHost: h\nTransfer-Encoding: chunked\nX-A:  v \n\n";
    let out = out_req(
        buf,
        &HeadEdits {
            x_forwarded_for: Some("::1".parse().unwrap()),
            ..HeadEdits::default()
        },
    );
    let h2 = req_ok(out.as_bytes());
    assert_eq!(h2.body, BodyFraming::Chunked);
    assert_eq!(h2.header(out.as_bytes(), b"x-a"), Some(&b"v"[..]));
    assert_eq!(h2.header(out.as_bytes(), b"x-forwarded-for"), Some(&b"::1"[..]));
}

#[test]
fn error_responses() {
    for status in [400u16, 408, 413, 414, 431, 501, 502, 503, 504, 505, 999] {
        let mut out = Vec::new();
        write_error_response(status, &mut out);
        let h = res_ok(&out, Method::Get);
        assert_eq!(h.status, if status == 999 { 500 } else { status });
        assert!(!h.keep_alive);
        assert_eq!(h.header(&out, b"cache-control"), Some(&b"no-cache"[..]));
        assert_eq!(h.header(&out, b"content-type"), Some(&b"text/plain"[..]));
        let BodyFraming::ContentLength(n) = h.body else {
            panic!("{:?}", h.body)
        };
        assert_eq!(out.len() - h.head_len, n as usize);
    }
}

#[test]
fn error_display() {
    let e = H1Error::new(ErrorKind::BadChunkSize, Side::Response);
    assert_eq!(e.to_string(), "invalid HTTP/1 response: bad chunk size");
    assert_eq!(e.as_str(), "bad chunk size");
}

#[test]
fn control_bytes_rejected_at_any_position_of_long_values() {
    // Long values go through httparse's SIMD paths: check they reject what the scalar path does.
    for ctl in [0x00u8, 0x01, 0x08, 0x0b, 0x0c, 0x1f, 0x7f, b'\r'] {
        for pos in 0..70 {
            let mut value = vec![b'a'; 70];
            value[pos] = ctl;
            let mut buf = b"GET / HTTP/1.1\r\nHost: h\r\nX-Long: ".to_vec();
            buf.extend_from_slice(&value);
            buf.extend_from_slice(b"\r\n\r\n");
            let e = req_err(&buf);
            assert_eq!(e.status(), 400, "ctl {ctl:#x} at {pos}");
            let mut buf = b"HTTP/1.1 200 OK\r\nX-Long: ".to_vec();
            buf.extend_from_slice(&value);
            buf.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
            assert!(parse_res(&buf, Method::Get).is_err(), "ctl {ctl:#x} at {pos}");
        }
    }
}

#[test]
fn ipv4_text_form() {
    for ip in ["0.0.0.0", "255.100.9.10", "1.22.133.4"] {
        let edits = HeadEdits {
            x_forwarded_for: Some(ip.parse().unwrap()),
            ..HeadEdits::default()
        };
        let out = out_req(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", &edits);
        assert!(out.contains(&format!("\r\nX-Forwarded-For: {ip}\r\n")), "{out}");
    }
}

#[test]
fn version_verdict_waits_for_the_whole_token() {
    for (prefix, full) in [
        (&b"GET / HTTP/0"[..], &b"GET / HTTP/0.5\r\n"[..]),
        (b"GET / HTTP/2", b"GET / HTTP/2.0\r\n"),
    ] {
        assert!(matches!(parse_req(prefix), Ok(None)));
        assert_eq!(req_err(full).kind(), ErrorKind::UnsupportedVersion);
    }
    assert!(matches!(parse_res(b"HTTP/0", Method::Get), Ok(None)));
    assert_eq!(
        parse_res(b"HTTP/0.5 200 OK\r\n", Method::Get)
            .map(|_| ())
            .map_err(|e| e.kind()),
        Err(ErrorKind::UnsupportedVersion)
    );
}

#[test]
fn a_proxy_cookie_is_stripped_from_requests_and_kept_from_responses() {
    let edits = HeadEdits {
        cookie: Some(b"SRV"),
        ..HeadEdits::default()
    };
    let buf = b"GET / HTTP/1.1\r\nHost: h\r\nCookie: a=1; SRV=00ff; b=2\r\nCookie: SRV=1\r\ncookie: c=3\r\n\r\n";
    assert_eq!(
        out_req(buf, &edits),
        "GET / HTTP/1.1\r\nHost: h\r\nCookie: a=1; b=2\r\ncookie: c=3\r\n\r\n"
    );
    // Without the edit, cookies pass untouched.
    assert!(out_req(buf, &HeadEdits::default()).contains("Cookie: SRV=1\r\n"));

    let buf = b"HTTP/1.1 200 OK\r\nSet-Cookie: SRV=x; Path=/\r\nSet-Cookie: SID=1\r\nContent-Length: 0\r\n\r\n";
    let mut scratch = HeadScratch::new();
    let head = parse_response_head(buf, &Limits::default(), Method::Get, &mut scratch)
        .unwrap()
        .unwrap();
    let mut out = Vec::new();
    let edits = HeadEdits {
        append: b"Set-Cookie: SRV=y\r\n",
        ..edits
    };
    write_response_head(&head, buf, &edits, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 200 OK\r\nSet-Cookie: SID=1\r\nContent-Length: 0\r\nSet-Cookie: SRV=y\r\n\r\n"
    );
}

#[test]
fn decode_keeps_only_the_content_however_split() {
    let body = b"5;ext=1\r\nhello\r\n006\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
    for split in 1..body.len() {
        let mut t = BodyTracker::new(BodyFraming::Chunked, Side::Request);
        let (mut out, mut used) = (Vec::new(), 0);
        for part in [&body[..split], &body[split..]] {
            let mut buf = part.to_vec();
            let r = t.decode(&mut buf).expect("valid");
            out.extend_from_slice(&buf[..r.out]);
            used += r.consumed;
            if r.done {
                break;
            }
        }
        assert_eq!(out, b"hello world", "split at {split}");
        assert_eq!(used, body.len() - 4, "split at {split}: the next message is left");
    }
    let mut t = BodyTracker::new(BodyFraming::ContentLength(3), Side::Request);
    let mut buf = b"abcdef".to_vec();
    let r = t.decode(&mut buf).expect("valid");
    assert_eq!((r.consumed, r.out, r.done), (3, 3, true));
    let mut bad = b"zz\r\n".to_vec();
    assert!(
        BodyTracker::new(BodyFraming::Chunked, Side::Request)
            .decode(&mut bad)
            .is_err()
    );
}
