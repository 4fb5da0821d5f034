//! Property: parsing and tracking any split of a valid message gives the same result as the whole.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::type_complexity
)]

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum GenBody {
    None,
    Length(Vec<u8>),
    Chunked(Vec<(Vec<u8>, bool)>, Vec<(String, String)>),
}

fn field() -> impl Strategy<Value = (String, String)> {
    ("X-[A-Za-z0-9-]{0,10}", "[!-~]([ -~]{0,18}[!-~])?")
}

fn body() -> impl Strategy<Value = GenBody> {
    prop_oneof![
        Just(GenBody::None),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(GenBody::Length),
        (
            proptest::collection::vec((proptest::collection::vec(any::<u8>(), 1..40), any::<bool>()), 0..5),
            proptest::collection::vec(field(), 0..3),
        )
            .prop_map(|(c, t)| GenBody::Chunked(c, t)),
    ]
}

/// Framing fields and body bytes.
fn encode_body(b: &GenBody) -> (String, Vec<u8>) {
    match b {
        GenBody::None => (String::new(), Vec::new()),
        GenBody::Length(v) => (format!("Content-Length: {}\r\n", v.len()), v.clone()),
        GenBody::Chunked(chunks, trailers) => {
            let mut out = Vec::new();
            for (data, ext) in chunks {
                let ext = if *ext { ";a=b;c=\"d e\"" } else { "" };
                out.extend_from_slice(format!("{:x}{ext}\r\n", data.len()).as_bytes());
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n");
            for (n, v) in trailers {
                out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
            }
            out.extend_from_slice(b"\r\n");
            ("Transfer-Encoding: chunked\r\n".to_owned(), out)
        }
    }
}

fn request() -> impl Strategy<Value = (Vec<u8>, usize)> {
    (
        prop_oneof![Just("GET"), Just("POST"), Just("PUT"), Just("DELETE"), Just("PURGE")],
        "/[a-zA-Z0-9/._~%-]{0,20}(\\?[a-z0-9=&]{0,10})?",
        any::<bool>(),
        proptest::collection::vec(field(), 0..9),
        body(),
    )
        .prop_map(|(m, path, v10, fields, b)| {
            let (framing, body) = encode_body(&b);
            let mut s = format!("{m} {path} HTTP/1.{}\r\nHost: example.com\r\n", if v10 { 0 } else { 1 });
            for (n, v) in fields {
                s.push_str(&format!("{n}: {v}\r\n"));
            }
            s.push_str(&framing);
            s.push_str("\r\n");
            let mut bytes = s.into_bytes();
            bytes.extend_from_slice(&body);
            let len = bytes.len();
            bytes.extend_from_slice(b"GET /next HTTP/1.1\r\n");
            (bytes, len)
        })
}

fn response() -> impl Strategy<Value = (Vec<u8>, usize)> {
    (
        prop_oneof![Just(200u16), Just(201), Just(404), Just(500)],
        proptest::collection::vec(field(), 0..9),
        body().prop_filter("responses need framing", |b| !matches!(b, GenBody::None)),
    )
        .prop_map(|(status, fields, b)| {
            let (framing, body) = encode_body(&b);
            let mut s = format!("HTTP/1.1 {status} Reason\r\n");
            for (n, v) in fields {
                s.push_str(&format!("{n}: {v}\r\n"));
            }
            s.push_str(&framing);
            s.push_str("\r\n");
            let mut bytes = s.into_bytes();
            bytes.extend_from_slice(&body);
            let len = bytes.len();
            bytes.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
            (bytes, len)
        })
}

/// Parse head then track the body, feeding `bytes` cut at `cuts`; returns (head debug, rewritten
/// head, body bytes consumed, done).
fn run<H: std::fmt::Debug>(
    bytes: &[u8],
    cuts: &[usize],
    parse: &dyn Fn(&[u8]) -> Result<Option<H>, H1Error>,
    info: &dyn Fn(&H, &[u8]) -> (usize, BodyFraming, Vec<u8>),
    side: Side,
) -> (String, Vec<u8>, usize, bool) {
    let mut ends: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    ends.push(bytes.len());
    ends.sort_unstable();
    ends.dedup();
    let mut acc: Vec<u8> = Vec::new();
    let mut head: Option<(String, Vec<u8>, BodyTracker)> = None;
    let mut consumed = 0usize;
    let mut done = false;
    let mut start = 0;
    for end in ends {
        let piece = &bytes[start..end];
        start = end;
        let piece: &[u8] = match head {
            Some(_) => piece,
            None => {
                acc.extend_from_slice(piece);
                match parse(&acc).unwrap() {
                    None => continue,
                    Some(h) => {
                        let (head_len, framing, written) = info(&h, &acc);
                        head = Some((format!("{h:?}"), written, BodyTracker::new(framing, side)));
                        &acc[head_len..]
                    }
                }
            }
        };
        let tracker = &mut head.as_mut().unwrap().2;
        if !done {
            let p = tracker.advance(piece).unwrap();
            consumed += p.consumed;
            done = p.done;
        }
    }
    let (dbg, written, _) = head.expect("head never completed");
    (dbg, written, consumed, done)
}

fn run_request(bytes: &[u8], cuts: &[usize]) -> (String, Vec<u8>, usize, bool) {
    let parse = |b: &[u8]| parse_request_head(b, &Limits::default(), &mut HeadScratch::new());
    let info = |h: &RequestHead, b: &[u8]| {
        let mut out = Vec::new();
        let edits = HeadEdits {
            x_forwarded_for: Some([127, 0, 0, 1].into()),
            ..HeadEdits::default()
        };
        write_request_head(h, b, &edits, &mut out);
        (h.head_len, h.body, out)
    };
    run(bytes, cuts, &parse, &info, Side::Request)
}

fn run_response(bytes: &[u8], cuts: &[usize]) -> (String, Vec<u8>, usize, bool) {
    let parse = |b: &[u8]| parse_response_head(b, &Limits::default(), Method::Get, &mut HeadScratch::new());
    let info = |h: &ResponseHead, b: &[u8]| {
        let mut out = Vec::new();
        write_response_head(h, b, &HeadEdits::default(), &mut out);
        (h.head_len, h.body, out)
    };
    run(bytes, cuts, &parse, &info, Side::Response)
}

/// One chunk as a sender may write it: data, leading zeros, uppercase hex, whitespace before
/// the line end, an extension.
type LooseChunk = (Vec<u8>, usize, bool, usize, bool);

fn loose_chunk() -> impl Strategy<Value = LooseChunk> {
    (
        proptest::collection::vec(any::<u8>(), 1..300),
        0..4usize,
        any::<bool>(),
        0..3usize,
        any::<bool>(),
    )
}

/// (the body as sent, the body as it must be forwarded).
fn loose_and_canonical(chunks: &[LooseChunk], last: &LooseChunk, trailers: &[(String, String)]) -> (Vec<u8>, Vec<u8>) {
    let (mut sent, mut canon) = (Vec::new(), Vec::new());
    let line = |size: usize, (_, zeros, upper, ws, ext): &LooseChunk| {
        let hex = if *upper {
            format!("{size:X}")
        } else {
            format!("{size:x}")
        };
        let ext = if *ext { ";n=\"v;x\";flag" } else { "" };
        format!("{}{hex}{}{ext}\r\n", "0".repeat(*zeros), " \t".get(..*ws).unwrap_or(""))
    };
    for c in chunks {
        sent.extend_from_slice(line(c.0.len(), c).as_bytes());
        canon.extend_from_slice(format!("{:x}\r\n", c.0.len()).as_bytes());
        for out in [&mut sent, &mut canon] {
            out.extend_from_slice(&c.0);
            out.extend_from_slice(b"\r\n");
        }
    }
    sent.extend_from_slice(line(0, last).as_bytes());
    canon.extend_from_slice(b"0\r\n");
    for out in [&mut sent, &mut canon] {
        for (n, v) in trailers {
            out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    }
    (sent, canon)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn reframe_is_canonical_whatever_the_split(
        chunks in proptest::collection::vec(loose_chunk(), 0..5),
        last in loose_chunk(),
        trailers in proptest::collection::vec(field(), 0..3),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let (sent, canon) = loose_and_canonical(&chunks, &last, &trailers);
        let mut input = sent.clone();
        input.extend_from_slice(b"GET /next HTTP/1.1\r\n");
        let mut ends: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        ends.push(input.len());
        ends.sort_unstable();
        ends.dedup();
        let mut t = BodyTracker::new(BodyFraming::Chunked, Side::Request);
        let (mut out, mut consumed, mut done, mut start) = (Vec::new(), 0, false, 0);
        for end in ends {
            let mut piece = input[start..end].to_vec();
            start = end;
            let r = t.reframe(&mut piece).unwrap();
            prop_assert!(r.out <= r.consumed);
            out.extend_from_slice(r.lead());
            out.extend_from_slice(&piece[..r.out]);
            consumed += r.consumed;
            if r.done {
                done = true;
                break;
            }
        }
        prop_assert!(done);
        prop_assert_eq!(consumed, sent.len());
        prop_assert_eq!(out, canon);
    }

    #[test]
    fn request_split_invariant((bytes, msg_len) in request(), cuts in proptest::collection::vec(any::<usize>(), 0..12)) {
        let whole = run_request(&bytes, &[]);
        prop_assert!(whole.3, "body not done");
        let head_len = bytes.len() - 20 - whole.2;
        prop_assert_eq!(head_len + whole.2, msg_len);
        let split = run_request(&bytes, &cuts);
        prop_assert_eq!(whole, split);
    }

    #[test]
    fn response_split_invariant((bytes, msg_len) in response(), cuts in proptest::collection::vec(any::<usize>(), 0..12)) {
        let whole = run_response(&bytes, &[]);
        prop_assert!(whole.3, "body not done");
        prop_assert_eq!(bytes.len() - 17, msg_len);
        let split = run_response(&bytes, &cuts);
        prop_assert_eq!(whole, split);
    }

    #[test]
    fn every_byte_split_of_a_chunked_body(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..30), 0..4)) {
        let (_, body) = encode_body(&GenBody::Chunked(chunks.into_iter().map(|c| (c, true)).collect(), vec![("T".into(), "v".into())]));
        let mut t = BodyTracker::new(BodyFraming::Chunked, Side::Request);
        for (i, b) in body.iter().enumerate() {
            let p = t.advance(std::slice::from_ref(b)).unwrap();
            prop_assert_eq!(p, Progress { consumed: 1, done: i + 1 == body.len() });
        }
    }
}
