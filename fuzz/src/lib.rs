//! Shared checks for the HTTP/1 fuzz targets.
//!
//! The first input byte picks the piece size (1..=16) used to feed the rest as a stream and, for
//! responses, the request method. For each input: the head parsed from the whole buffer equals the
//! head parsed incrementally (grown buffer, re-parsed after each piece), body tracking agrees
//! whatever the split, nothing panics, and a rewritten HTTP/1.1 head parses back with the same
//! framing. A chunked tracker is also run over the raw bytes to exercise the chunk parser, and
//! so is the re-framer: whole vs split give the same output (or the same error), and a finished
//! re-framed body is canonical (re-framing it again changes nothing).

use tollgate::http::h1::{
    BodyFraming, BodyTracker, ErrorKind, HeadEdits, HeadScratch, Limits, Method, Side, Version, parse_request_head,
    parse_response_head, write_request_head, write_response_head,
};

/// Which parser to drive.
#[derive(Clone, Copy)]
pub enum Target {
    Request,
    Response,
}

const LIMITS: Limits = Limits { max_header_size: 2048, max_request_line: 512, max_headers: 16 };

/// Outcome of a head parse: debug text of the head, its length and framing, or the error kind.
type HeadOutcome = Result<Option<(String, usize, BodyFraming)>, ErrorKind>;

fn parse_head(buf: &[u8], target: Target, method: Method, out: &mut Vec<u8>) -> HeadOutcome {
    let mut scratch = HeadScratch::new();
    out.clear();
    let edits = HeadEdits { x_forwarded_for: Some([10, 0, 0, 1].into()), ..HeadEdits::default() };
    match target {
        Target::Request => match parse_request_head(buf, &LIMITS, &mut scratch) {
            Ok(Some(h)) => {
                if h.version == Version::Http11 {
                    write_request_head(&h, buf, &edits, out);
                }
                Ok(Some((format!("{h:?}"), h.head_len, h.body)))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(e.kind()),
        },
        Target::Response => match parse_response_head(buf, &LIMITS, method, &mut scratch) {
            Ok(Some(h)) => {
                write_response_head(&h, buf, &edits, out);
                Ok(Some((format!("{h:?}"), h.head_len, h.body)))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(e.kind()),
        },
    }
}

/// Track a body over `data` cut into pieces of `step` bytes: (consumed, done) or the error kind.
fn track(framing: BodyFraming, side: Side, data: &[u8], step: usize) -> Result<(usize, bool), ErrorKind> {
    let mut t = BodyTracker::new(framing, side).with_trailer_limit(256);
    let mut consumed = 0;
    for piece in data.chunks(step.max(1)) {
        let p = t.advance(piece).map_err(|e| e.kind())?;
        assert!(p.consumed <= piece.len());
        assert!(p.done || p.consumed == piece.len());
        consumed += p.consumed;
        if p.done {
            return Ok((consumed, true));
        }
    }
    if data.is_empty() {
        let p = t.advance(&[]).map_err(|e| e.kind())?;
        return Ok((p.consumed, p.done));
    }
    Ok((consumed, false))
}

/// Run every check on one input.
pub fn check(data: &[u8], target: Target) {
    let Some((&seed, data)) = data.split_first() else { return };
    let step = usize::from(seed % 16) + 1;
    let method = match seed / 16 % 4 {
        0 => Method::Head,
        1 => Method::Connect,
        _ => Method::Get,
    };
    let side = match target {
        Target::Request => Side::Request,
        Target::Response => Side::Response,
    };
    let mut written = Vec::new();
    let whole = parse_head(data, target, method, &mut written);

    // Incremental: grow the buffer piece by piece until the head completes or fails.
    let mut incremental: HeadOutcome = Ok(None);
    let mut scratch_out = Vec::new();
    let mut len = 0;
    while len < data.len() {
        len = (len + step).min(data.len());
        incremental = parse_head(data.get(..len).unwrap_or_default(), target, method, &mut scratch_out);
        if !matches!(incremental, Ok(None)) {
            break;
        }
    }
    assert_eq!(whole, incremental, "head: whole vs split");

    if let Ok(Some((_, head_len, framing))) = &whole {
        let body = data.get(*head_len..).unwrap_or_default();
        let a = track(*framing, side, body, body.len());
        let b = track(*framing, side, body, step);
        assert_eq!(a, b, "body: whole vs split");
        if !written.is_empty() {
            // The rewritten head is valid HTTP/1.1 with the same framing.
            let again = parse_head(&written, target, method, &mut Vec::new());
            let big = Limits { max_header_size: 1 << 20, max_request_line: 1 << 20, max_headers: 256 };
            let again = match again {
                Err(ErrorKind::HeadTooLarge | ErrorKind::RequestLineTooLong | ErrorKind::TooManyHeaders) => {
                    let mut s = HeadScratch::new();
                    match target {
                        Target::Request => parse_request_head(&written, &big, &mut s).map(|h| h.map(|h| h.body)),
                        Target::Response => {
                            parse_response_head(&written, &big, method, &mut s).map(|h| h.map(|h| h.body))
                        }
                    }
                    .map_err(|e| e.kind())
                }
                other => other.map(|h| h.map(|(_, _, b)| b)),
            };
            assert_eq!(again, Ok(Some(*framing)), "rewritten head");
        }
    }

    // The chunk parser on raw bytes, whole vs split.
    let a = track(BodyFraming::Chunked, side, data, data.len());
    let b = track(BodyFraming::Chunked, side, data, step);
    assert_eq!(a, b, "chunked: whole vs split");

    // The re-framer on raw bytes, whole vs split, and canonical output is a fixed point.
    let a = reframe(side, data, data.len());
    let b = reframe(side, data, step);
    assert_eq!(a, b, "reframe: whole vs split");
    if let Ok((out, consumed, true)) = &a {
        assert!(out.len() <= *consumed, "re-framed body grew");
        assert_eq!(reframe(side, out, out.len()), Ok((out.clone(), out.len(), true)), "reframe: not canonical");
    }
}

/// Re-frame a chunked body over `data` cut into pieces of `step` bytes: (output, consumed,
/// done) or the error kind.
fn reframe(side: Side, data: &[u8], step: usize) -> Result<(Vec<u8>, usize, bool), ErrorKind> {
    let mut t = BodyTracker::new(BodyFraming::Chunked, side).with_trailer_limit(256);
    let (mut out, mut consumed) = (Vec::new(), 0);
    for piece in data.chunks(step.max(1)) {
        let mut buf = piece.to_vec();
        let r = t.reframe(&mut buf).map_err(|e| e.kind())?;
        assert!(r.out <= r.consumed && r.consumed <= piece.len());
        assert!(r.done || r.consumed == piece.len());
        out.extend_from_slice(r.lead());
        out.extend_from_slice(buf.get(..r.out).unwrap_or_default());
        consumed += r.consumed;
        if r.done {
            return Ok((out, consumed, true));
        }
    }
    Ok((out, consumed, false))
}
