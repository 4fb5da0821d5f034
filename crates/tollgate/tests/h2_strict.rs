//! The malformed-request matrix of issue 13, item 4: each request, sent by a raw-frame
//! client (hand-made HPACK), is refused — RST_STREAM, a non-200 answer or GOAWAY — and never
//! reaches the origin as a complete request. Some of these h2 itself rejects; all are
//! tested regardless.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
#[path = "h2_support/origin.rs"]
mod origin;
#[path = "h2_support/raw.rs"]
mod raw;

use std::time::Duration;

use common::Proxy;
use raw::{Conn, DATA, END_STREAM, frame, headers_frame};

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fn f(n: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
    (n.as_bytes().to_vec(), v.as_bytes().to_vec())
}

fn get_with(extra: &[(&str, &str)]) -> Fields {
    let mut fields = raw::get("example.com", "/x");
    fields.extend(extra.iter().map(|(n, v)| f(n, v)));
    fields
}

fn replace(name: &str, value: &[u8]) -> Fields {
    raw::get("example.com", "/x")
        .into_iter()
        .map(|(n, v)| {
            if n == name.as_bytes() {
                (n, value.to_vec())
            } else {
                (n, v)
            }
        })
        .collect()
}

fn without(name: &str) -> Fields {
    raw::get("example.com", "/x")
        .into_iter()
        .filter(|(n, _)| n != name.as_bytes())
        .collect()
}

fn post(cl: &str) -> Fields {
    vec![
        f(":method", "POST"),
        f(":scheme", "http"),
        f(":authority", "example.com"),
        f(":path", "/up"),
        f("content-length", cl),
    ]
}

/// A case: the head, and DATA payloads sent after it (the last one ends the stream).
struct Case {
    name: &'static str,
    fields: Fields,
    data: Vec<&'static [u8]>,
}

fn case(name: &'static str, fields: Fields) -> Case {
    Case {
        name,
        fields,
        data: vec![],
    }
}

fn matrix() -> Vec<Case> {
    let mut pseudo_after = raw::get("example.com", "/x");
    pseudo_after.insert(0, f("accept", "*/*"));
    let mut dup_path = raw::get("example.com", "/x");
    dup_path.push(f(":path", "/y"));
    vec![
        case("uppercase name", get_with(&[("X-Upper", "1")])),
        case("missing :method", without(":method")),
        case("missing :path", without(":path")),
        case("missing :scheme", without(":scheme")),
        case("no :authority and no host", without(":authority")),
        case("duplicate :path", dup_path),
        case("unknown pseudo-header", get_with(&[(":foo", "bar")])),
        case("pseudo-header after a regular field", pseudo_after),
        case("connection", get_with(&[("connection", "keep-alive")])),
        case("keep-alive", get_with(&[("keep-alive", "5")])),
        case("proxy-connection", get_with(&[("proxy-connection", "close")])),
        case("transfer-encoding", get_with(&[("transfer-encoding", "chunked")])),
        case("upgrade", get_with(&[("upgrade", "h2c")])),
        case("te other than trailers", get_with(&[("te", "gzip")])),
        case(":path not origin form", replace(":path", b"x/y")),
        case(":path absolute form", replace(":path", b"http://example.com/x")),
        case("empty :path", replace(":path", b"")),
        case("space in :path", replace(":path", b"/a b")),
        case("host disagrees with :authority", get_with(&[("host", "other.example")])),
        case("two host fields", {
            let mut v = without(":authority");
            v.push(f("host", "a.example"));
            v.push(f("host", "b.example"));
            v
        }),
        case("CR in a value", get_with(&[("x-a", "a\rb")])),
        case("LF in a value", get_with(&[("x-a", "a\nb: c")])),
        case("NUL in a value", get_with(&[("x-a", "a\0b")])),
        case("CR LF in :path", replace(":path", b"/x HTTP/1.1\r\nx-smuggled: 1")),
        case(
            "CR LF in :authority",
            replace(":authority", b"example.com\r\nx-smuggled: 1"),
        ),
        case("CR LF in :method", replace(":method", b"GET /a HTTP/1.1\r\n\r\nGET")),
        case("CONNECT", replace(":method", b"CONNECT")),
        case("userinfo in :authority", replace(":authority", b"user@example.com")),
        // The HTTP/1 Host grammar (`http::host`), issue 27 item 2.
        case(
            "port not a number in :authority",
            replace(":authority", b"example.com:notaport"),
        ),
        case(
            "port above 65535 in :authority",
            replace(":authority", b"example.com:65536"),
        ),
        case("path in host", {
            let mut v = without(":authority");
            v.push(f("host", "evil.example/x?"));
            v
        }),
        case(":scheme not http(s)", replace(":scheme", b"ftp")),
        case("whitespace around a value", get_with(&[("x-a", " padded")])),
        case("bad content-length", {
            let mut v = post("12x");
            v.truncate(5);
            v
        }),
        Case {
            name: "content-length larger than the DATA",
            fields: post("10"),
            data: vec![b"abc"],
        },
        Case {
            name: "content-length smaller than the DATA",
            fields: post("2"),
            data: vec![b"abcdef"],
        },
        Case {
            name: "content-length disagreeing values",
            fields: {
                let mut v = post("3");
                v.push(f("content-length", "4"));
                v
            },
            data: vec![b"abc"],
        },
    ]
}

#[test]
fn malformed_requests_are_refused_and_never_reach_the_origin() {
    let o = origin::start();
    let config = format!(
        "[global]\nworkers = 1\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\ndefault_backend = \"be\"\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        o.addr
    );
    let proxy = Proxy::start(&config);
    let cases = matrix();
    assert!(cases.len() >= 20);
    let mut failures = Vec::new();
    for c in &cases {
        let mut conn = Conn::open(proxy.addr, &[]);
        let end = c.data.is_empty();
        conn.send(&headers_frame(1, &c.fields, end));
        for (i, d) in c.data.iter().enumerate() {
            let flags = if i + 1 == c.data.len() { END_STREAM } else { 0 };
            conn.send(&frame(DATA, flags, 1, d));
        }
        let outcome = conn.outcome(1, Duration::from_secs(5));
        // Which layer refused each case (h2's reset or tollgate's 400 = 0x8c): the log of
        // what the codec covers and what `h2front::check` adds.
        eprintln!("{}: {outcome:?}", c.name);
        if !outcome.refused() {
            failures.push(format!("{}: {outcome:?}", c.name));
        }
    }
    // A well-formed request on the same proxy goes through (the matrix is not vacuous).
    let mut conn = Conn::open(proxy.addr, &[]);
    conn.send(&headers_frame(1, &raw::get("example.com", "/fine"), true));
    assert_eq!(conn.outcome(1, Duration::from_secs(5)), raw::Outcome::Head(0x88));
    let seen = o.seen();
    let reached: Vec<_> = seen
        .iter()
        .filter(|s| s.target != "/fine")
        .map(|s| s.target.clone())
        .collect();
    assert!(failures.is_empty(), "not refused: {failures:#?}");
    assert!(reached.is_empty(), "reached the origin: {reached:?}");
    assert_eq!(seen.len(), 1);
}

/// A client that never answers the PING of a graceful GOAWAY still gets the final GOAWAY
/// (its last stream) and the close: an idle connection does not stay open on the proxy.
#[test]
fn graceful_goaway_ends_even_without_the_ping_answer() {
    let o = origin::start();
    let config = format!(
        "[global]\nworkers = 1\n[timeouts]\nhttp_keep_alive = \"200ms\"\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\ndefault_backend = \"be\"\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        o.addr
    );
    let proxy = Proxy::start(&config);
    let mut conn = Conn::open(proxy.addr, &[]);
    conn.send(&headers_frame(1, &raw::get("example.com", "/size/3"), true));
    let mut goaways = Vec::new();
    let mut answered = false;
    let t = std::time::Instant::now();
    // Bounded: frames until the proxy closes, or 5 s.
    let closed = loop {
        let Some(f) = conn.next(Duration::from_secs(5).saturating_sub(t.elapsed())) else {
            break t.elapsed() < Duration::from_secs(5);
        };
        match f.kind {
            raw::HEADERS if f.stream == 1 => answered = true,
            raw::GOAWAY => goaways.push(u32::from_be_bytes(f.payload[..4].try_into().unwrap()) & 0x7fff_ffff),
            // PINGs are read and never answered.
            _ => {}
        }
    };
    assert!(answered, "stream 1 answered");
    assert_eq!(goaways, vec![0x7fff_ffff, 1], "GOAWAY(max), then GOAWAY(last stream)");
    assert!(closed, "closed within 5 s");
}

/// Issue 27, item 11: HEADERS and a DATA frame that contradicts their `content-length`, in
/// one write (so in one read of the proxy), are refused with RST_STREAM PROTOCOL_ERROR and
/// the server is never contacted — neither a complete POST (`content-length: 0` plus
/// bytes) nor a head whose body never comes whole. A valid POST then reaches it (the check
/// is not vacuous).
#[test]
fn a_body_contradicting_content_length_in_the_heads_read_never_reaches_the_server() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::{Arc, Mutex};
    let heads: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = heads.clone();
    // Records each request head (and reads its body) and answers 200.
    let o = common::origin(move |s| {
        let mut r = BufReader::new(s.try_clone().unwrap());
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // Bounded: one request per round, ends when the proxy closes or the read times out.
        loop {
            let mut head = String::new();
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                head.push_str(&line);
                if line == "\r\n" {
                    break;
                }
            }
            let cl = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            log.lock().unwrap().push(head);
            let mut body = vec![0u8; cl];
            if r.read_exact(&mut body).is_err() {
                return;
            }
            if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_err() {
                return;
            }
        }
    });
    let config = format!(
        "[global]\nworkers = 1\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\ndefault_backend = \"be\"\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        o.addr
    );
    let proxy = Proxy::start(&config);
    let cases: [(&str, &str, &[u8]); 3] = [
        ("content-length 0 plus DATA", "0", b"abc"),
        ("content-length larger than the DATA", "10", b"abc"),
        ("content-length smaller than the DATA", "2", b"abcdef"),
    ];
    for (name, cl, body) in cases {
        let mut conn = Conn::open(proxy.addr, &[]);
        let mut bytes = headers_frame(1, &post(cl), false);
        bytes.extend(frame(DATA, END_STREAM, 1, body));
        assert!(conn.send(&bytes), "{name}: sent in one write");
        assert_eq!(
            conn.outcome(1, Duration::from_secs(5)),
            raw::Outcome::Reset(1),
            "{name}: RST_STREAM PROTOCOL_ERROR"
        );
    }
    // Long enough for a stream started anyway to have connected and sent its head.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        o.total.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the server was contacted: {:?}",
        heads.lock().unwrap()
    );
    let mut conn = Conn::open(proxy.addr, &[]);
    let mut bytes = headers_frame(1, &post("3"), false);
    bytes.extend(frame(DATA, END_STREAM, 1, b"abc"));
    conn.send(&bytes);
    assert_eq!(conn.outcome(1, Duration::from_secs(5)), raw::Outcome::Head(0x88));
    let heads = heads.lock().unwrap();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(heads[0].starts_with("POST /up HTTP/1.1\r\n"), "{heads:?}");
}
