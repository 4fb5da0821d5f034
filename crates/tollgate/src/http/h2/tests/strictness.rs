//! The strictness table: bytes a client sends and the stream or connection error they earn.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::type_complexity)]

use super::super::frame::{flag, kind, setting};
use super::*;

/// What a strictness case must lead to.
#[derive(Debug, Clone, Copy)]
enum Expect {
    Reset(Reason),
    Conn(Reason),
}

#[test]
fn strictness_table() {
    use Expect::{Conn, Reset};
    use Reason as R;
    let p = R::PROTOCOL_ERROR;
    let mut connect = vec![(":method", "CONNECT"), (":authority", "a.example:443")];
    let connect_ok = connect.clone();
    connect.push((":path", "/"));
    let big_window: Vec<u8> = (0..17).flat_map(|_| data(1, &[0; 16_384], false)).collect();
    let cases: Vec<(&str, Vec<u8>, Expect)> = vec![
        (
            "pseudo after regular",
            headers(
                1,
                &[
                    (":method", "GET"),
                    ("accept", "*"),
                    (":scheme", "https"),
                    (":path", "/"),
                    (":authority", "a"),
                ],
                true,
            ),
            Reset(p),
        ),
        ("unknown pseudo", headers(1, &with(&[(":foo", "x")]), true), Reset(p)),
        (
            "duplicate pseudo",
            headers(1, &[GET, &[(":path", "/x")]].concat(), true),
            Reset(p),
        ),
        ("missing :method", headers(1, &GET[1..], true), Reset(p)),
        ("missing :path", headers(1, &GET[..3], true), Reset(p)),
        (
            "response pseudo",
            headers(1, &[GET, &[(":status", "200")]].concat(), true),
            Reset(p),
        ),
        ("uppercase name", headers(1, &with(&[("Accept", "*")]), true), Reset(p)),
        ("empty name", headers(1, &with(&[("", "x")]), true), Reset(p)),
        ("invalid name char", headers(1, &with(&[("a b", "x")]), true), Reset(p)),
        ("colon in name", headers(1, &with(&[("a:b", "x")]), true), Reset(p)),
        (
            "connection",
            headers(1, &with(&[("connection", "close")]), true),
            Reset(p),
        ),
        ("keep-alive", headers(1, &with(&[("keep-alive", "5")]), true), Reset(p)),
        (
            "proxy-connection",
            headers(1, &with(&[("proxy-connection", "x")]), true),
            Reset(p),
        ),
        (
            "transfer-encoding",
            headers(1, &with(&[("transfer-encoding", "chunked")]), true),
            Reset(p),
        ),
        ("upgrade", headers(1, &with(&[("upgrade", "h2c")]), true), Reset(p)),
        ("te gzip", headers(1, &with(&[("te", "gzip")]), true), Reset(p)),
        ("CR in value", headers(1, &with(&[("x", "a\rb")]), true), Reset(p)),
        ("LF in value", headers(1, &with(&[("x", "a\nb")]), true), Reset(p)),
        ("NUL in value", headers(1, &with(&[("x", "a\0b")]), true), Reset(p)),
        ("leading space", headers(1, &with(&[("x", " a")]), true), Reset(p)),
        ("trailing tab", headers(1, &with(&[("x", "a\t")]), true), Reset(p)),
        (
            "empty :path",
            headers(1, &[&GET[..3], &[(":path", "")]].concat(), true),
            Reset(p),
        ),
        (
            "absolute :path",
            headers(1, &[&GET[..3], &[(":path", "http://a/")]].concat(), true),
            Reset(p),
        ),
        (
            "* for GET",
            headers(1, &[&GET[..3], &[(":path", "*")]].concat(), true),
            Reset(p),
        ),
        ("CONNECT with :path", headers(1, &connect, true), Reset(p)),
        (
            "CONNECT without :authority",
            headers(1, &connect_ok[..1], true),
            Reset(p),
        ),
        (
            "extended CONNECT",
            headers(
                1,
                &[
                    &connect_ok[..],
                    &[(":protocol", "websocket"), (":scheme", "https"), (":path", "/")],
                ]
                .concat(),
                true,
            ),
            Reset(p),
        ),
        ("content-length not a number", headers(1, &post("1x"), false), Reset(p)),
        (
            "content-length disagree",
            headers(1, &[post("1"), vec![("content-length", "2")]].concat(), false),
            Reset(p),
        ),
        (
            "content-length on END_STREAM head",
            headers(1, &post("5"), true),
            Reset(p),
        ),
        (
            "content-length short",
            cat(&[headers(1, &post("5"), false), data(1, b"abc", true)]),
            Reset(p),
        ),
        (
            "content-length exceeded",
            cat(&[headers(1, &post("2"), false), data(1, b"abc", false)]),
            Reset(p),
        ),
        (
            "host disagrees",
            headers(1, &with(&[("host", "b.example")]), true),
            Reset(p),
        ),
        (
            "no authority",
            headers(1, &GET[..2].iter().chain(&GET[3..]).copied().collect::<Vec<_>>(), true),
            Reset(p),
        ),
        (
            "HEADERS after END_STREAM",
            cat(&[headers(1, GET, true), headers(1, &[("x", "1")], true)]),
            Reset(R::STREAM_CLOSED),
        ),
        (
            "DATA after the client's RST_STREAM",
            cat(&[
                headers(1, &post("9"), false),
                raw(kind::RST_STREAM, 0, 1, &[0, 0, 0, 8]),
                data(1, b"x", false),
            ]),
            Reset(R::STREAM_CLOSED),
        ),
        (
            "content-length in trailers",
            cat(&[
                headers(1, &post("0"), false),
                headers(1, &[("content-length", "0")], true),
            ]),
            Reset(p),
        ),
        (
            "space in :path",
            headers(1, &[&GET[..3], &[(":path", "/a b")]].concat(), true),
            Reset(p),
        ),
        (
            "fragment in :path",
            headers(1, &[&GET[..3], &[(":path", "/a#b")]].concat(), true),
            Reset(p),
        ),
        (
            "non-ASCII in :path",
            headers(1, &[&GET[..3], &[(":path", "/\u{e9}")]].concat(), true),
            Reset(p),
        ),
        (
            "slash in :authority",
            headers(1, &[&GET[..2], &[(":authority", "a/b"), (":path", "/")]].concat(), true),
            Reset(p),
        ),
        (
            "userinfo in :authority",
            headers(1, &[&GET[..2], &[(":authority", "u@a"), (":path", "/")]].concat(), true),
            Reset(p),
        ),
        (
            "DATA after END_STREAM",
            cat(&[headers(1, GET, true), data(1, b"x", false)]),
            Reset(R::STREAM_CLOSED),
        ),
        (
            "trailers without END_STREAM",
            cat(&[headers(1, &post("0"), false), headers(1, &[("x", "1")], false)]),
            Reset(p),
        ),
        (
            "pseudo in trailers",
            cat(&[headers(1, &post("0"), false), headers(1, &[(":path", "/")], true)]),
            Reset(p),
        ),
        (
            "PRIORITY on itself",
            raw(kind::PRIORITY, 0, 1, &[0, 0, 0, 1, 16]),
            Reset(p),
        ),
        (
            "PRIORITY wrong length",
            raw(kind::PRIORITY, 0, 1, &[0, 0, 0, 3]),
            Reset(R::FRAME_SIZE_ERROR),
        ),
        (
            "HEADERS depending on itself",
            raw(
                kind::HEADERS,
                flag::END_HEADERS | flag::PRIORITY,
                1,
                &[&[0, 0, 0, 1, 16][..], &block(GET)].concat(),
            ),
            Reset(p),
        ),
        (
            "stream window overrun",
            cat(&[headers(1, &post("999999"), false), big_window]),
            Reset(R::FLOW_CONTROL_ERROR),
        ),
        (
            "stream WINDOW_UPDATE 0",
            cat(&[headers(1, GET, false), window_update(1, 0)]),
            Reset(p),
        ),
        (
            "stream window overflow",
            cat(&[headers(1, GET, false), window_update(1, 0x7fff_ffff)]),
            Reset(R::FLOW_CONTROL_ERROR),
        ),
        ("even stream", headers(2, GET, true), Conn(p)),
        (
            "decreasing stream id",
            cat(&[headers(5, GET, true), headers(3, GET, true)]),
            Conn(p),
        ),
        (
            "reused stream id",
            cat(&[
                headers(1, GET, false),
                raw(kind::RST_STREAM, 0, 1, &[0; 4]),
                headers(3, GET, false),
                headers(1, GET, true),
            ]),
            Conn(p),
        ),
        (
            "frame too large",
            raw(kind::DATA, 0, 1, &[0; 16_385]),
            Conn(R::FRAME_SIZE_ERROR),
        ),
        ("connection WINDOW_UPDATE 0", window_update(0, 0), Conn(p)),
        (
            "connection window overflow",
            window_update(0, 0x7fff_ffff),
            Conn(R::FLOW_CONTROL_ERROR),
        ),
        ("ENABLE_PUSH 2", settings(&[(setting::ENABLE_PUSH, 2)]), Conn(p)),
        (
            "INITIAL_WINDOW_SIZE 2^31",
            settings(&[(setting::INITIAL_WINDOW_SIZE, 1 << 31)]),
            Conn(R::FLOW_CONTROL_ERROR),
        ),
        (
            "MAX_FRAME_SIZE small",
            settings(&[(setting::MAX_FRAME_SIZE, 100)]),
            Conn(p),
        ),
        (
            "MAX_FRAME_SIZE huge",
            settings(&[(setting::MAX_FRAME_SIZE, 1 << 24)]),
            Conn(p),
        ),
        (
            "SETTINGS ack with payload",
            raw(kind::SETTINGS, flag::ACK, 0, &[0; 6]),
            Conn(R::FRAME_SIZE_ERROR),
        ),
        ("SETTINGS on a stream", raw(kind::SETTINGS, 0, 1, &[]), Conn(p)),
        ("PING of 7", raw(kind::PING, 0, 0, &[0; 7]), Conn(R::FRAME_SIZE_ERROR)),
        ("PING on a stream", raw(kind::PING, 0, 1, &[0; 8]), Conn(p)),
        (
            "CONTINUATION alone",
            raw(kind::CONTINUATION, flag::END_HEADERS, 1, &block(GET)),
            Conn(p),
        ),
        (
            "HEADERS then PING",
            cat(&[raw(kind::HEADERS, 0, 1, &block(GET)), raw(kind::PING, 0, 0, &[0; 8])]),
            Conn(p),
        ),
        (
            "CONTINUATION other stream",
            cat(&[
                raw(kind::HEADERS, 0, 1, &block(GET)),
                raw(kind::CONTINUATION, flag::END_HEADERS, 3, &[]),
            ]),
            Conn(p),
        ),
        (
            "PUSH_PROMISE",
            raw(kind::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]),
            Conn(p),
        ),
        (
            "padding too long",
            cat(&[headers(1, GET, false), raw(kind::DATA, flag::PADDED, 1, &[5, 1, 2])]),
            Conn(p),
        ),
        (
            "HEADERS padding too long",
            raw(kind::HEADERS, flag::PADDED | flag::END_HEADERS, 1, &[200, 0x82]),
            Conn(p),
        ),
        ("DATA on idle stream", data(1, b"x", false), Conn(p)),
        (
            "RST_STREAM on idle stream",
            raw(kind::RST_STREAM, 0, 1, &[0; 4]),
            Conn(p),
        ),
        ("WINDOW_UPDATE on idle stream", window_update(7, 1), Conn(p)),
        (
            "GOAWAY short",
            raw(kind::GOAWAY, 0, 0, &[0; 4]),
            Conn(R::FRAME_SIZE_ERROR),
        ),
        (
            "HPACK bad index",
            raw(kind::HEADERS, flag::END_HEADERS, 1, &[0xff, 0x10]),
            Conn(R::COMPRESSION_ERROR),
        ),
        (
            "HPACK bad Huffman",
            raw(kind::HEADERS, flag::END_HEADERS, 1, &[0x04, 0x81, 0x00]),
            Conn(R::COMPRESSION_ERROR),
        ),
        (
            "HPACK table size too large",
            raw(kind::HEADERS, flag::END_HEADERS, 1, &[0x3f, 0xe2, 0x1f]),
            Conn(R::COMPRESSION_ERROR),
        ),
        (
            "HPACK size update after a field",
            raw(kind::HEADERS, flag::END_HEADERS, 1, &[0x82, 0x20]),
            Conn(R::COMPRESSION_ERROR),
        ),
        (
            "HPACK integer overflow",
            raw(
                kind::HEADERS,
                flag::END_HEADERS,
                1,
                &[0xff, 0x80, 0x80, 0x80, 0x80, 0x01],
            ),
            Conn(R::COMPRESSION_ERROR),
        ),
        (
            "HPACK truncated",
            raw(kind::HEADERS, flag::END_HEADERS, 1, &[0x04, 0x05, b'/']),
            Conn(R::COMPRESSION_ERROR),
        ),
        (
            "HPACK error on a stream reset anyway",
            cat(&[headers(1, GET, true), raw(kind::HEADERS, flag::END_HEADERS, 1, &[0x80])]),
            Conn(R::COMPRESSION_ERROR),
        ),
    ];
    assert!(cases.len() >= 30);
    for (name, bytes, expect) in cases {
        let mut c = Client::ready(Settings::default());
        let r = c.send(&bytes);
        let f = c.frames();
        let ev = c.events();
        match expect {
            Reset(code) => {
                assert!(r.is_ok(), "{name}: {r:?}");
                assert!(
                    ev.iter()
                        .any(|e| matches!(e, Event::Reset { code: c, why: Some(_), .. } if *c == code)),
                    "{name}: events {ev:?}"
                );
                assert!(
                    !ev.iter().any(|e| matches!(
                        e,
                        Event::Request {
                            id: StreamId(1),
                            end_stream: true,
                            ..
                        }
                    )) || name.contains("END_STREAM"),
                    "{name}: served {ev:?}"
                );
                let rst = f
                    .iter()
                    .find(|o| o.kind == kind::RST_STREAM)
                    .unwrap_or_else(|| panic!("{name}: no RST_STREAM"));
                assert_eq!(code_of(&rst.payload), code, "{name}");
            }
            Conn(code) => {
                let e = r.expect_err(name);
                assert_eq!(e.code, code, "{name}: {e:?}");
                let last = f.last().unwrap();
                assert_eq!((last.kind, code_of(&last.payload)), (kind::GOAWAY, code), "{name}");
            }
        }
    }
}
