//! A scripted client against [`ServerConn`]: frames built with `frame`'s writers, the
//! server's output parsed back and its header blocks decoded.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::type_complexity)]

use std::time::Instant;

use bytes::BytesMut;

use super::frame::{self, FrameHeader, flag, kind, setting};
use super::hpack::decoder::tests::Collect;
use super::hpack::{Decoder, encoder};
use super::*;

mod floods;
mod interop;
mod strictness;

type Fld<'a> = &'a [(&'a str, &'a str)];

/// A header block of literals without indexing, names as given (not lowercased).
fn block(fields: Fld<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, v) in fields {
        out.push(0);
        encoder::encode_int(&mut out, 7, 0, n.len());
        out.extend_from_slice(n.as_bytes());
        encoder::encode_int(&mut out, 7, 0, v.len());
        out.extend_from_slice(v.as_bytes());
    }
    out
}

fn raw(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_header(&mut out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
    out
}

fn headers(stream: u32, fields: Fld<'_>, end_stream: bool) -> Vec<u8> {
    let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
    raw(kind::HEADERS, flags, stream, &block(fields))
}

fn data(stream: u32, bytes: &[u8], end_stream: bool) -> Vec<u8> {
    raw(kind::DATA, if end_stream { flag::END_STREAM } else { 0 }, stream, bytes)
}

fn settings(params: &[(u16, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_settings(&mut out, params);
    out
}

fn window_update(stream: u32, inc: u32) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write_window_update(&mut out, stream, inc);
    out
}

const GET: Fld<'static> = &[
    (":method", "GET"),
    (":scheme", "https"),
    (":authority", "a.example"),
    (":path", "/"),
];

fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut v = GET.to_vec();
    v.extend_from_slice(extra);
    v
}

fn post(cl: &'static str) -> Vec<(&'static str, &'static str)> {
    let mut v = with(&[("content-length", cl)]);
    v[0].1 = "POST";
    v
}

/// A server frame as written.
#[derive(Debug, Clone, PartialEq)]
struct Out {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

struct Client {
    conn: ServerConn,
    now: Instant,
    decoder: Decoder,
}

impl Client {
    fn new(s: Settings) -> Self {
        let now = Instant::now();
        Client {
            conn: ServerConn::at(s, now),
            now,
            decoder: Decoder::new(4096),
        }
    }

    /// Preface, empty SETTINGS, our SETTINGS acked; the output so far dropped.
    fn ready(s: Settings) -> Self {
        let mut c = Client::new(s);
        let mut bytes = frame::PREFACE.to_vec();
        bytes.extend(settings(&[]));
        bytes.extend(raw(kind::SETTINGS, flag::ACK, 0, &[]));
        c.send(&bytes).unwrap();
        c.frames();
        c
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), ConnError> {
        let mut buf = BytesMut::from(bytes);
        let r = self.conn.receive(&mut buf, self.now);
        if r.is_ok() {
            assert!(buf.len() < 9 || buf.len() < 9 + FrameHeader::parse(&buf).unwrap().len as usize);
        }
        r
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.conn.poll_event()).collect()
    }

    /// The output as frames, consumed.
    fn frames(&mut self) -> Vec<Out> {
        let out = self.conn.output().to_vec();
        self.conn.consume_output(out.len());
        let mut at = 0;
        let mut v = Vec::new();
        while at < out.len() {
            let h = FrameHeader::parse(&out[at..]).unwrap();
            let end = at + 9 + h.len as usize;
            v.push(Out {
                kind: h.kind,
                flags: h.flags,
                stream: h.stream,
                payload: out[at + 9..end].to_vec(),
            });
            at = end;
        }
        v
    }

    fn decode(&mut self, block: &[u8]) -> Vec<(String, String)> {
        let mut c = Collect::default();
        self.decoder.decode(block, &mut c).unwrap();
        c.0.into_iter()
            .map(|(n, v, _)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
            .collect()
    }
}

fn small() -> Settings {
    Settings {
        initial_stream_window: 1000,
        initial_connection_window: 65_535,
        ..Settings::default()
    }
}

fn code_of(payload: &[u8]) -> Reason {
    Reason(u32::from_be_bytes(payload[payload.len() - 4..].try_into().unwrap()))
}

fn u32_of(payload: &[u8]) -> u32 {
    u32::from_be_bytes(payload[..4].try_into().unwrap())
}

#[test]
fn handshake_settings_and_ack() {
    let mut c = Client::new(Settings::default());
    let f = c.frames();
    assert_eq!(f[0].kind, kind::SETTINGS);
    let ours: Vec<_> = frame::settings(&f[0].payload).collect();
    assert!(ours.contains(&(setting::INITIAL_WINDOW_SIZE, 256 * 1024)));
    assert!(ours.contains(&(setting::MAX_CONCURRENT_STREAMS, 100)));
    assert!(ours.contains(&(setting::ENABLE_PUSH, 0)));
    assert_eq!(
        (f[1].kind, f[1].stream, u32_of(&f[1].payload)),
        (kind::WINDOW_UPDATE, 0, 1024 * 1024 - 65_535)
    );
    // The preface in two pieces, SETTINGS with an unknown setting, an unknown frame type.
    c.send(&frame::PREFACE[..10]).unwrap();
    let mut rest = frame::PREFACE[..].to_vec();
    rest.extend(settings(&[(0x99, 7), (setting::MAX_FRAME_SIZE, 20_000)]));
    rest.extend(raw(0xee, 0xff, 0, b"ignored"));
    c.send(&rest).unwrap();
    let f = c.frames();
    assert_eq!(
        f,
        [Out {
            kind: kind::SETTINGS,
            flags: flag::ACK,
            stream: 0,
            payload: vec![]
        }]
    );
    assert!(c.events().is_empty());
}

#[test]
fn bad_preface_and_first_frame() {
    let mut c = Client::new(Settings::default());
    c.frames();
    assert_eq!(
        c.send(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap_err().code,
        Reason::PROTOCOL_ERROR
    );
    let f = c.frames();
    assert_eq!(
        (f[0].kind, code_of(&f[0].payload)),
        (kind::GOAWAY, Reason::PROTOCOL_ERROR)
    );
    let mut c = Client::new(Settings::default());
    let mut b = frame::PREFACE.to_vec();
    b.extend(raw(kind::PING, 0, 0, &[0; 8]));
    assert_eq!(c.send(&b).unwrap_err().code, Reason::PROTOCOL_ERROR);
    // After a connection error, the same error again and nothing more queued.
    let before = c.conn.output().len();
    assert_eq!(c.send(&settings(&[])).unwrap_err().code, Reason::PROTOCOL_ERROR);
    assert_eq!(c.conn.output().len(), before);
    assert!(c.conn.is_done());
}

#[test]
fn get_then_response() {
    let mut c = Client::ready(Settings::default());
    c.send(&headers(
        1,
        &with(&[("accept", "*/*"), ("cookie", "a=1"), ("cookie", "b=2")]),
        true,
    ))
    .unwrap();
    let mut ev = c.events();
    let Some(Event::Request {
        id,
        head,
        end_stream: true,
    }) = ev.pop()
    else {
        panic!()
    };
    assert_eq!(id, StreamId(1));
    assert_eq!(
        (head.method(), head.scheme(), head.path()),
        (&b"GET"[..], Some(&b"https"[..]), Some(&b"/"[..]))
    );
    assert_eq!(head.authority(), Some(&b"a.example"[..]));
    assert_eq!(head.fields().iter().count(), 3);
    assert_eq!(head.get(b"accept"), Some(&b"*/*"[..]));
    assert_eq!(c.conn.open_streams(), 1);
    c.conn.recycle(head);
    let fields: [(&[u8], &[u8]); 3] = [
        (b"Content-Type", b"text/plain"),
        (b"connection", b"close"),
        (b"x-custom", b"1"),
    ];
    c.conn.send_headers(id, 200, fields.into_iter(), false).unwrap();
    assert_eq!(c.conn.send_data(id, b"hello", true), Ok(5));
    assert_eq!(c.conn.open_streams(), 0);
    assert_eq!(c.conn.send_data(id, b"more", true), Err(StreamGone));
    let f = c.frames();
    assert_eq!(
        (f[0].kind, f[0].flags, f[0].stream),
        (kind::HEADERS, flag::END_HEADERS, 1)
    );
    let fields = c.decode(&f[0].payload);
    let want: Vec<(String, String)> = [(":status", "200"), ("content-type", "text/plain"), ("x-custom", "1")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(fields, want);
    assert_eq!(
        f[1],
        Out {
            kind: kind::DATA,
            flags: flag::END_STREAM,
            stream: 1,
            payload: b"hello".to_vec()
        }
    );
    assert_eq!(f.len(), 2);
    // The recycled head serves the next request.
    c.send(&headers(3, GET, true)).unwrap();
    assert!(matches!(c.events()[..], [Event::Request { .. }]));
}

#[test]
fn post_body_and_window_updates() {
    let s = Settings {
        initial_stream_window: 40_000,
        initial_connection_window: 65_535,
        ..Settings::default()
    };
    let mut c = Client::ready(s);
    c.send(&headers(1, &post("32669"), false)).unwrap();
    assert!(matches!(c.events()[..], [Event::Request { end_stream: false, .. }]));
    c.send(&data(1, &[b'a'; 16_384], false)).unwrap();
    // A padded frame: 16_384 - 1 - 100 data bytes.
    let mut padded = vec![100u8];
    padded.extend([b'b'; 16_283]);
    padded.extend([0u8; 100]);
    c.send(&raw(kind::DATA, flag::PADDED, 1, &padded)).unwrap();
    let ev = c.events();
    let sizes: Vec<usize> = ev
        .iter()
        .map(|e| {
            if let Event::Data { data, .. } = e {
                data.len()
            } else {
                0
            }
        })
        .collect();
    assert_eq!(sizes, [16_384, 16_283]);
    assert!(c.frames().is_empty(), "nothing released yet");
    c.conn.release_data(StreamId(1), 16_384);
    assert!(c.frames().is_empty(), "under half a window");
    c.conn.release_data(StreamId(1), 16_283);
    let f = c.frames();
    let wu: Vec<(u32, u32)> = f
        .iter()
        .filter(|o| o.kind == kind::WINDOW_UPDATE)
        .map(|o| (o.stream, u32_of(&o.payload)))
        .collect();
    assert_eq!(wu, [(1, 32_768), (0, 32_768)]);
    c.send(&data(1, b"zz", false)).unwrap();
    c.send(&data(1, b"", true)).unwrap();
    let ev = c.events();
    assert!(
        matches!(&ev[..], [Event::Data { end_stream: false, .. }, Event::Data { end_stream: true, data, .. }] if data.is_empty())
    );
}

#[test]
fn a_reset_stream_gives_its_unreleased_data_back_to_the_connection() {
    let s = Settings {
        initial_stream_window: 65_535,
        initial_connection_window: 65_535,
        ..Settings::default()
    };
    let mut c = Client::ready(s);
    c.send(&headers(1, &post("100000"), false)).unwrap();
    c.send(&data(1, &[0; 16_384], false)).unwrap();
    c.send(&data(1, &[0; 16_384], false)).unwrap();
    assert!(c.frames().is_empty(), "the app released nothing");
    c.send(&raw(kind::RST_STREAM, 0, 1, &[0, 0, 0, 8])).unwrap();
    let wu: Vec<(u32, u32)> = c
        .frames()
        .iter()
        .filter(|o| o.kind == kind::WINDOW_UPDATE)
        .map(|o| (o.stream, u32_of(&o.payload)))
        .collect();
    assert_eq!(wu, [(0, 32_768)]);
    // The app releasing it late changes nothing.
    c.conn.release_data(StreamId(1), 32_768);
    assert!(c.frames().is_empty());
    // The connection window is whole again: a full window on another stream is fine.
    c.send(&headers(3, &post("65535"), false)).unwrap();
    for n in [16_384, 16_384, 16_384, 16_383] {
        c.send(&data(3, &vec![0; n], n == 16_383)).unwrap();
    }
    assert!(
        !c.events()
            .iter()
            .any(|e| matches!(e, Event::Reset { id: StreamId(3), .. }))
    );
}

#[test]
fn data_is_a_slice_of_the_input() {
    let mut c = Client::ready(Settings::default());
    c.send(&headers(1, &post("5"), false)).unwrap();
    let mut buf = BytesMut::from(&data(1, b"hello", true)[..]);
    let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
    c.conn.receive(&mut buf, c.now).unwrap();
    let ev = c.events();
    let Some(Event::Data {
        data, end_stream: true, ..
    }) = ev.last()
    else {
        panic!("{ev:?}")
    };
    assert_eq!(&data[..], b"hello");
    assert!(range.contains(&(data.as_ptr() as usize)), "copied");
}

#[test]
fn data_past_the_stream_window_then_connection_window() {
    // Before the client acks our SETTINGS it may use the default 65_535 window.
    let mut c = Client::new(small());
    let mut b = frame::PREFACE.to_vec();
    b.extend(settings(&[]));
    b.extend(headers(1, &post("100000"), false));
    c.send(&b).unwrap();
    c.send(&data(1, &[0; 16_000], false)).unwrap();
    assert!(!c.events().iter().any(|e| matches!(e, Event::Reset { .. })));
    // Once acked, its window is 1000 less what it already sent: overrun.
    c.send(&raw(kind::SETTINGS, flag::ACK, 0, &[])).unwrap();
    c.send(&data(1, &[0; 10], false)).unwrap();
    assert!(matches!(
        c.events()[..],
        [Event::Reset {
            code: Reason::FLOW_CONTROL_ERROR,
            ..
        }]
    ));
}

#[test]
fn trailers_both_ways() {
    let mut c = Client::ready(Settings::default());
    c.send(&headers(1, &post("3"), false)).unwrap();
    c.send(&data(1, b"abc", false)).unwrap();
    c.send(&headers(1, &[("x-checksum", "42")], true)).unwrap();
    let ev = c.events();
    let Some(Event::Trailers { id, fields }) = ev.last() else {
        panic!("{ev:?}")
    };
    assert_eq!((*id, fields.get(b"x-checksum")), (StreamId(1), Some(&b"42"[..])));
    c.conn
        .send_headers(StreamId(1), 200, std::iter::empty(), false)
        .unwrap();
    c.conn.send_data(StreamId(1), b"ok", false).unwrap();
    let t: [(&[u8], &[u8]); 1] = [(b"grpc-status", b"0")];
    c.conn.send_trailers(StreamId(1), t.into_iter()).unwrap();
    let f = c.frames();
    assert_eq!(f.len(), 3);
    assert_eq!(
        (f[2].kind, f[2].flags),
        (kind::HEADERS, flag::END_HEADERS | flag::END_STREAM)
    );
    assert_eq!(c.decode(&f[2].payload), [("grpc-status".to_string(), "0".to_string())]);
    assert_eq!(c.conn.open_streams(), 0);
}

#[test]
fn interim_then_final_split_over_continuation() {
    let mut c = Client::ready(Settings::default());
    c.send(&headers(1, &with(&[("expect", "100-continue")]), false))
        .unwrap();
    c.events();
    c.conn.send_headers(StreamId(1), 100, std::iter::empty(), true).unwrap();
    c.conn
        .send_headers(StreamId(1), 103, std::iter::empty(), false)
        .unwrap();
    assert_eq!(
        c.conn.send_data(StreamId(1), b"x", false),
        Err(StreamGone),
        "no final head yet"
    );
    let big = vec![b'v'; 40_000];
    let fields: [(&[u8], &[u8]); 1] = [(b"x-big", &big)];
    c.conn.send_headers(StreamId(1), 200, fields.into_iter(), true).unwrap();
    let f = c.frames();
    let kinds: Vec<(u8, u8)> = f.iter().map(|o| (o.kind, o.flags)).collect();
    assert_eq!(
        kinds,
        [
            (kind::HEADERS, flag::END_HEADERS),
            (kind::HEADERS, flag::END_HEADERS),
            (kind::HEADERS, flag::END_STREAM),
            (kind::CONTINUATION, 0),
            (kind::CONTINUATION, flag::END_HEADERS),
            (kind::RST_STREAM, 0),
        ]
    );
    assert_eq!(c.decode(&f[0].payload)[0].1, "100");
    let block: Vec<u8> = f[2..5].iter().flat_map(|o| o.payload.clone()).collect();
    assert_eq!(c.decode(&block)[1].1.len(), 40_000);
    // The request was still open: RST_STREAM(NO_ERROR) after the complete response.
    assert_eq!(code_of(&f[5].payload), Reason::NO_ERROR);
}

#[test]
fn send_window_limits_then_resumes() {
    let mut c = Client::ready(Settings::default());
    c.send(&settings(&[(setting::INITIAL_WINDOW_SIZE, 10)])).unwrap();
    c.send(&headers(1, GET, true)).unwrap();
    c.events();
    c.conn
        .send_headers(StreamId(1), 200, std::iter::empty(), false)
        .unwrap();
    assert_eq!(c.conn.send_capacity(StreamId(1)), 10);
    assert_eq!(c.conn.send_data(StreamId(1), &[1; 25], true), Ok(10));
    assert_eq!(c.conn.send_capacity(StreamId(1)), 0);
    assert_eq!(c.conn.send_data(StreamId(1), &[1; 15], true), Ok(0));
    c.send(&window_update(1, 5)).unwrap();
    assert!(matches!(c.events()[..], [Event::SendWindow { id: Some(StreamId(1)) }]));
    assert_eq!(c.conn.send_data(StreamId(1), &[1; 15], true), Ok(5));
    let f = c.frames();
    let data: Vec<(usize, u8)> = f
        .iter()
        .filter(|o| o.kind == kind::DATA)
        .map(|o| (o.payload.len(), o.flags))
        .collect();
    assert_eq!(data, [(10, 0), (5, 0)]);
    c.send(&window_update(1, 100)).unwrap();
    assert_eq!(c.conn.send_data(StreamId(1), &[1; 10], true), Ok(10));
    assert_eq!(c.frames().last().unwrap().flags, flag::END_STREAM);
    assert_eq!(c.conn.send_capacity(StreamId(1)), 0);
}

#[test]
fn initial_window_change_applies_to_open_streams() {
    let mut c = Client::ready(Settings::default());
    c.send(&settings(&[(setting::INITIAL_WINDOW_SIZE, 100)])).unwrap();
    c.send(&headers(1, GET, true)).unwrap();
    c.conn
        .send_headers(StreamId(1), 200, std::iter::empty(), false)
        .unwrap();
    assert_eq!(c.conn.send_data(StreamId(1), &[0; 60], false), Ok(60));
    c.events();
    c.send(&settings(&[(setting::INITIAL_WINDOW_SIZE, 10)])).unwrap();
    assert!(c.events().is_empty(), "no capacity grew");
    assert_eq!(c.conn.send_capacity(StreamId(1)), 0, "window is -50");
    c.send(&window_update(1, 60)).unwrap();
    assert_eq!(c.conn.send_capacity(StreamId(1)), 10);
    c.send(&settings(&[(setting::INITIAL_WINDOW_SIZE, 1000)])).unwrap();
    assert!(matches!(
        c.events()[..],
        [Event::SendWindow { id: Some(_) }, Event::SendWindow { id: None }]
    ));
    assert_eq!(c.conn.send_capacity(StreamId(1)), 1000);
    c.send(&window_update(1, 1000)).unwrap();
    let e = c
        .send(&settings(&[(setting::INITIAL_WINDOW_SIZE, 0x7fff_ffff)]))
        .unwrap_err();
    assert_eq!(e.code, Reason::FLOW_CONTROL_ERROR);
}

#[test]
fn connection_send_window() {
    let mut c = Client::ready(Settings::default());
    c.send(&settings(&[(setting::INITIAL_WINDOW_SIZE, 100_000)])).unwrap();
    c.send(&headers(1, GET, true)).unwrap();
    c.conn
        .send_headers(StreamId(1), 200, std::iter::empty(), false)
        .unwrap();
    assert_eq!(c.conn.send_data(StreamId(1), &[0; 70_000], false), Ok(65_535));
    let f = c.frames();
    assert!(
        f.iter()
            .filter(|o| o.kind == kind::DATA)
            .all(|o| o.payload.len() <= 16_384)
    );
    c.events();
    c.send(&window_update(0, 10)).unwrap();
    assert!(matches!(c.events()[..], [Event::SendWindow { id: None }]));
    assert_eq!(c.conn.send_capacity(StreamId(1)), 10);
    assert_eq!(
        c.send(&window_update(0, 0x7fff_ffff)).unwrap_err().code,
        Reason::FLOW_CONTROL_ERROR
    );
}

#[test]
fn concurrency_limit_refuses() {
    let mut c = Client::ready(Settings {
        max_concurrent_streams: 1,
        ..Settings::default()
    });
    c.send(&headers(1, GET, false)).unwrap();
    c.send(&headers(3, GET, true)).unwrap();
    let ev = c.events();
    assert!(matches!(
        ev[..],
        [
            Event::Request { .. },
            Event::Reset {
                id: StreamId(3),
                code: Reason::REFUSED_STREAM,
                why: Some("past max_concurrent_streams"),
            }
        ]
    ));
    let f = c.frames();
    assert_eq!(
        (f[0].kind, f[0].stream, code_of(&f[0].payload)),
        (kind::RST_STREAM, 3, Reason::REFUSED_STREAM)
    );
    // Late frames of the refused stream are ignored.
    c.send(&data(3, b"x", true)).unwrap();
    assert!(c.events().is_empty());
    c.send(&raw(kind::RST_STREAM, 0, 1, &[0, 0, 0, 8])).unwrap();
    assert!(matches!(
        c.events()[..],
        [Event::Reset {
            id: StreamId(1),
            code: Reason::CANCEL,
            why: None,
        }]
    ));
    c.send(&headers(5, GET, true)).unwrap();
    assert!(matches!(c.events()[..], [Event::Request { .. }]));
}

#[test]
fn graceful_goaway() {
    let mut c = Client::ready(Settings::default());
    c.send(&headers(1, GET, true)).unwrap();
    c.conn.goaway_graceful();
    let f = c.frames();
    assert_eq!((f[0].kind, u32_of(&f[0].payload)), (kind::GOAWAY, 0x7fff_ffff));
    assert_eq!(f[1].kind, kind::PING);
    c.send(&headers(3, GET, true)).unwrap(); // raced the GOAWAY: still served
    assert!(!c.conn.is_done());
    c.send(&raw(kind::PING, flag::ACK, 0, &f[1].payload)).unwrap();
    let f = c.frames();
    assert_eq!(
        (f[0].kind, u32_of(&f[0].payload), code_of(&f[0].payload)),
        (kind::GOAWAY, 3, Reason::NO_ERROR)
    );
    c.send(&headers(5, GET, true)).unwrap(); // after the last id: ignored
    let ev = c.events();
    assert_eq!(ev.iter().filter(|e| matches!(e, Event::Request { .. })).count(), 2);
    assert_eq!(c.conn.open_streams(), 2);
    for id in [1, 3] {
        assert!(!c.conn.is_done());
        c.conn
            .send_headers(StreamId(id), 204, std::iter::empty(), true)
            .unwrap();
    }
    assert!(c.conn.is_done());
}

#[test]
fn hpack_dynamic_table_across_requests() {
    let mut c = Client::ready(Settings::default());
    use super::hpack::decoder::tests::hex;
    for (id, b) in [
        (1, "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
        (3, "8286 84be 5808 6e6f 2d63 6163 6865"),
        (
            5,
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ),
    ] {
        c.send(&raw(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, id, &hex(b)))
            .unwrap();
    }
    let ev = c.events();
    let Event::Request { head, .. } = &ev[2] else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (head.path(), head.authority()),
        (Some(&b"/index.html"[..]), Some(&b"www.example.com"[..]))
    );
    assert_eq!(head.get(b"custom-key"), Some(&b"custom-value"[..]));
}

fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn head_over_the_list_size_is_surfaced_not_stored() {
    let mut c = Client::ready(Settings {
        max_header_list_size: 200,
        ..Settings::default()
    });
    let v: &'static str = "x".repeat(150).leak();
    c.send(&headers(1, &with(&[("x-big", v)]), true)).unwrap();
    assert!(matches!(
        c.events()[..],
        [Event::HeadTooLarge {
            id: StreamId(1),
            end_stream: true
        }]
    ));
    c.conn.send_headers(StreamId(1), 431, std::iter::empty(), true).unwrap();
    assert_eq!(c.conn.open_streams(), 0);
    // The table stays in step: the next request decodes.
    c.send(&headers(3, GET, true)).unwrap();
    assert!(matches!(c.events()[..], [Event::Request { .. }]));
}

/// A conversation touching most frame kinds.
fn conversation() -> Vec<u8> {
    use super::hpack::decoder::tests::hex;
    let mut b = frame::PREFACE.to_vec();
    b.extend(settings(&[
        (setting::INITIAL_WINDOW_SIZE, 100),
        (setting::MAX_FRAME_SIZE, 16_384),
    ]));
    b.extend(raw(kind::SETTINGS, flag::ACK, 0, &[]));
    b.extend(raw(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        &hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
    ));
    b.extend(raw(
        kind::HEADERS,
        flag::PADDED,
        3,
        &[&[3][..], &block(&post("6")), &[0, 0, 0]].concat(),
    ));
    b.extend(raw(kind::CONTINUATION, flag::END_HEADERS, 3, &block(&[("x-a", "1")])));
    b.extend(data(3, b"abc", false));
    b.extend(raw(kind::PING, 0, 0, b"12345678"));
    b.extend(raw(kind::DATA, flag::PADDED, 3, &[2, b'd', b'e', b'f', 0, 0]));
    b.extend(headers(3, &[("x-trailer", "t")], true));
    b.extend(window_update(0, 1000));
    b.extend(window_update(1, 50));
    b.extend(raw(kind::PRIORITY, 0, 9, &[0, 0, 0, 1, 8]));
    b.extend(headers(5, &with(&[("te", "trailers")]), false));
    b.extend(raw(kind::RST_STREAM, 0, 5, &[0, 0, 0, 8]));
    b.extend(headers(7, &with(&[("Bad", "x")]), true));
    b.extend(raw(0x42, 0, 0, b"extension"));
    b.extend(raw(kind::GOAWAY, 0, 0, &[0; 8]));
    b
}

/// Feeds `pieces` to an idle app; the events as text, the output, and the connection error
/// that stopped it.
fn run(pieces: &[&[u8]]) -> (String, Vec<u8>, Option<ConnError>) {
    let now = Instant::now();
    let mut conn = ServerConn::at(Settings::default(), now);
    let mut buf = BytesMut::new();
    let mut events = String::new();
    let mut out = Vec::new();
    let mut error = None;
    for piece in pieces {
        buf.extend_from_slice(piece);
        let r = conn.receive(&mut buf, now);
        // The app stays idle: what it would do depends on when it is woken.
        while let Some(e) = conn.poll_event() {
            events.push_str(&format!("{e:?}\n"));
        }
        out.extend_from_slice(conn.output());
        let n = conn.output().len();
        conn.consume_output(n);
        if let Err(e) = r {
            error = Some(e);
            break;
        }
    }
    (events, out, error)
}

#[test]
fn any_split_gives_the_same_events_and_output() {
    let conv = conversation();
    let whole = run(&[&conv]);
    assert_eq!(whole.2, None);
    assert!(whole.0.contains("Trailers"), "{}", whole.0);
    assert!(
        whole.0.contains("Reset { id: StreamId(7), code: PROTOCOL_ERROR"),
        "{}",
        whole.0
    );
    let bytewise: Vec<&[u8]> = conv.chunks(1).collect();
    assert_eq!(run(&bytewise), whole);
    for size in [2, 3, 7, 9, 10, 64] {
        let pieces: Vec<&[u8]> = conv.chunks(size).collect();
        assert_eq!(run(&pieces), whole, "pieces of {size}");
    }
}

proptest::proptest! {
    /// Random frames (valid headers, random kinds, flags, streams and payloads; some header
    /// blocks well-formed): no panic, and the split changes nothing.
    #[test]
    fn random_frames_any_split(
        frames in proptest::collection::vec((0u8..11, proptest::prelude::any::<u8>(), 0u32..8, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), proptest::prelude::any::<bool>()), 0..40),
        piece in 1usize..20,
    ) {
        let mut conv = frame::PREFACE.to_vec();
        conv.extend(settings(&[]));
        for (kind, flags, stream, payload, good_block) in frames {
            if kind == kind::HEADERS && good_block {
                conv.extend(raw(kind, flags & !flag::PADDED & !flag::PRIORITY, stream, &block(&post("3"))));
            } else {
                conv.extend(raw(kind, flags, stream, &payload));
            }
        }
        let whole = run(&[&conv]);
        let pieces: Vec<&[u8]> = conv.chunks(piece).collect();
        proptest::prop_assert_eq!(run(&pieces), whole);
    }
}
