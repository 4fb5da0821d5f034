//! Fuzzes the sans-io HTTP/2 server connection: client bytes after the preface. The first
//! input byte picks the piece size (1..=32) the rest is fed in, and with its high bit set
//! the rest is read as operations that build frames around valid header blocks (so the
//! request rules, bodies and HPACK's dynamic table are reached). Nothing may panic;
//! with an idle app, the split changes neither the events nor the output (whole-buffer run
//! vs pieces), and the output stays within a bound of the input (no amplification); an
//! active app (answering, consuming, resetting as the input's bytes say) must not panic
//! either, and never sees more output pending than its windows allow.
#![no_main]

use std::time::{Duration, Instant};

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tollgate::http::h2::frame::{self, PREFACE, flag, kind};
use tollgate::http::h2::hpack::{encoder, huffman};
use tollgate::http::h2::{Event, Reason, ServerConn, Settings};

fn settings() -> Settings {
    Settings {
        max_concurrent_streams: 8,
        initial_stream_window: 4096,
        initial_connection_window: 65_535,
        max_header_list_size: 2048,
        max_header_block_size: 4096,
        max_header_block_frames: 8,
        flood_window: Duration::from_secs(10),
        max_client_resets: 20,
        max_server_resets: 20,
        max_pings: 20,
        max_settings: 20,
        max_empty_data: 20,
        max_priority: 50,
        max_window_updates: 100,
        ..Settings::default()
    }
}

/// Feeds `data` in pieces of `piece` bytes; the events (as text), the output, the error.
fn idle(data: &[u8], piece: usize, now: Instant) -> (String, Vec<u8>, Option<String>) {
    let mut conn = ServerConn::at(settings(), now);
    let mut buf = BytesMut::from(&PREFACE[..]);
    let mut events = String::new();
    let mut out = conn.output().to_vec();
    conn.consume_output(out.len());
    let mut error = None;
    for chunk in data.chunks(piece) {
        buf.extend_from_slice(chunk);
        let r = conn.receive(&mut buf, now);
        while let Some(e) = conn.poll_event() {
            events.push_str(&format!("{e:?}\n"));
        }
        out.extend_from_slice(conn.output());
        let n = conn.output().len();
        conn.consume_output(n);
        if let Err(e) = r {
            error = Some(format!("{e:?}"));
            break;
        }
    }
    (events, out, error)
}

fn active(data: &[u8], piece: usize, now: Instant) {
    let mut conn = ServerConn::at(settings(), now);
    let mut buf = BytesMut::from(&PREFACE[..]);
    let body = [b'r'; 5000];
    for (i, chunk) in data.chunks(piece).enumerate() {
        buf.extend_from_slice(chunk);
        let r = conn.receive(&mut buf, now);
        let choice = chunk.first().copied().unwrap_or(0);
        while let Some(e) = conn.poll_event() {
            match e {
                Event::Request { id, head, end_stream } => {
                    let _ = head.content_length();
                    let _ = head.fields().iter().count();
                    conn.recycle(head);
                    match choice % 4 {
                        0 => {
                            let _ = conn.send_headers(id, 100, std::iter::empty(), false);
                            let _ = conn.send_headers(id, 200, std::iter::empty(), false);
                            let _ = conn.send_data(id, &body, end_stream);
                        }
                        1 => conn.reset(id, Reason::CANCEL),
                        2 => {
                            let f: [(&[u8], &[u8]); 1] = [(b"X-A", b"b")];
                            let _ = conn.send_headers(id, 204, f.into_iter(), true);
                        }
                        _ => {}
                    }
                }
                Event::HeadTooLarge { id, .. } => {
                    let _ = conn.send_headers(id, 431, std::iter::empty(), true);
                }
                Event::Data { id, data, end_stream } => {
                    conn.release_data(id, data.len());
                    if end_stream {
                        let _ = conn.send_data(id, b"", true);
                    }
                }
                Event::Trailers { id, fields } => {
                    conn.recycle_fields(fields);
                    let t: [(&[u8], &[u8]); 1] = [(b"grpc-status", b"0")];
                    let _ = conn.send_trailers(id, t.into_iter());
                }
                Event::SendWindow { id: Some(id) } => {
                    let _ = conn.send_data(id, &body, false);
                }
                Event::Reset { .. } | Event::SendWindow { id: None } => {}
            }
        }
        if i % 3 == 0 {
            let n = conn.output().len();
            conn.consume_output(n / 2 + 1);
        }
        if choice == 0xff {
            conn.goaway_graceful();
        }
        if r.is_err() {
            assert!(conn.is_done());
            break;
        }
    }
}

/// A header field: Huffman-coded and indexed (`index`), or a plain literal.
fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8], index: bool) {
    if index {
        out.push(0x40);
        let mut h = Vec::new();
        huffman::encode(name, &mut h);
        encoder::encode_int(out, 7, 0x80, h.len());
        out.extend_from_slice(&h);
        h.clear();
        huffman::encode(value, &mut h);
        encoder::encode_int(out, 7, 0x80, h.len());
        out.extend_from_slice(&h);
    } else {
        out.push(0);
        encoder::encode_int(out, 7, 0, name.len());
        out.extend_from_slice(name);
        encoder::encode_int(out, 7, 0, value.len());
        out.extend_from_slice(value);
    }
}

const NAMES: [&[u8]; 12] = [
    b":method", b":path", b":scheme", b":authority", b"content-length", b"te", b"host", b"cookie",
    b"x-a", b"Upper", b":protocol", b"connection",
];
const VALUES: [&[u8]; 12] = [
    b"GET", b"POST", b"/", b"https", b"a.example", b"0", b"5", b"trailers", b"*", b"CONNECT",
    b" x", b"",
];

/// Frames built from `(op, arg, bytes)` triples of the input.
fn build(mut ops: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_settings(&mut out, &[]);
    let mut block = Vec::new();
    while let [op, arg, rest @ ..] = ops {
        let (op, arg) = (*op, *arg);
        let n = usize::from(arg & 0x1f).min(rest.len());
        let (bytes, tail) = rest.split_at(n);
        ops = tail;
        let stream = u32::from(arg >> 5) * 2 + 1;
        match op % 8 {
            // A request head: the basics, then fields picked by `bytes`.
            0 | 1 => {
                block.clear();
                let index = op & 0x10 != 0;
                field(&mut block, b":method", if op % 8 == 0 { b"GET" } else { b"POST" }, index);
                field(&mut block, b":scheme", b"https", index);
                field(&mut block, b":authority", b"a.example", index);
                field(&mut block, b":path", b"/", index);
                for pair in bytes.chunks(2) {
                    let name = NAMES[usize::from(pair[0]) % NAMES.len()];
                    let value = VALUES[usize::from(*pair.get(1).unwrap_or(&0)) % VALUES.len()];
                    field(&mut block, name, value, pair[0] & 0x80 != 0);
                }
                let end_stream = if op & 0x20 != 0 { flag::END_STREAM } else { 0 };
                if op & 0x40 != 0 && block.len() > 1 {
                    // Split in HEADERS + CONTINUATION.
                    let (a, b) = block.split_at(block.len() / 2);
                    frame::write_header(&mut out, a.len(), kind::HEADERS, end_stream, stream);
                    out.extend_from_slice(a);
                    frame::write_header(&mut out, b.len(), kind::CONTINUATION, flag::END_HEADERS, stream);
                    out.extend_from_slice(b);
                } else {
                    frame::write_header(&mut out, block.len(), kind::HEADERS, end_stream | flag::END_HEADERS, stream);
                    out.extend_from_slice(&block);
                }
            }
            2 => frame::write_data(&mut out, stream, bytes, op & 0x20 != 0),
            3 => {
                block.clear();
                field(&mut block, b"x-trailer", bytes, op & 0x10 != 0);
                frame::write_header(&mut out, block.len(), kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, stream);
                out.extend_from_slice(&block);
            }
            4 => frame::write_window_update(&mut out, if op & 0x10 != 0 { 0 } else { stream }, u32::from(arg) * 997),
            5 => frame::write_rst_stream(&mut out, stream, frame::Reason(u32::from(op >> 4))),
            6 => frame::write_settings(&mut out, &[(u16::from(op >> 4), u32::from(arg) * 4099)]),
            _ => {
                frame::write_header(&mut out, bytes.len(), op >> 4, arg, stream);
                out.extend_from_slice(bytes);
            }
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let piece = usize::from(first % 32) + 1;
    let built;
    let rest = if first & 0x80 != 0 {
        built = build(rest);
        &built[..]
    } else {
        rest
    };
    let now = Instant::now();
    let whole = idle(rest, rest.len().max(1), now);
    let split = idle(rest, piece, now);
    assert_eq!(whole, split, "pieces of {piece}");
    // Our SETTINGS + WINDOW_UPDATE, then at most two bytes out per byte in, and a GOAWAY.
    assert!(whole.1.len() <= 64 + 2 * rest.len(), "output {} for input {}", whole.1.len(), rest.len());
    active(rest, piece, now);
});
