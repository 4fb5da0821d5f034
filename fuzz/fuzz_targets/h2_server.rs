//! Fuzzes the sans-io HTTP/2 server connection: arbitrary client bytes after the preface.
//! The first input byte picks the piece size (1..=32) the rest is fed in. Nothing may panic;
//! with an idle app, the split changes neither the events nor the output (whole-buffer run
//! vs pieces), and the output stays within a bound of the input (no amplification); an
//! active app (answering, consuming, resetting as the input's bytes say) must not panic
//! either, and never sees more output pending than its windows allow.
#![no_main]

use std::time::{Duration, Instant};

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tollgate::http::h2::frame::PREFACE;
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

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let piece = usize::from(first % 32) + 1;
    let now = Instant::now();
    let whole = idle(rest, rest.len().max(1), now);
    let split = idle(rest, piece, now);
    assert_eq!(whole, split, "pieces of {piece}");
    // Our SETTINGS + WINDOW_UPDATE, then at most two bytes out per byte in, and a GOAWAY.
    assert!(whole.1.len() <= 64 + 2 * rest.len(), "output {} for input {}", whole.1.len(), rest.len());
    active(rest, piece, now);
});
