//! Test inputs by mutation (the HTTP Garden's method): a few valid requests, each case one to
//! three mutation operators applied at positions drawn from a seeded PRNG. The same seed
//! gives the same cases on every machine.

/// xorshift64*: small, seedable, good enough to spread positions and choices.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// The valid requests every case starts from.
pub const BASES: &[(&str, &[u8])] = &[
    ("get", b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
    (
        "get-headers",
        b"GET /p?q=1 HTTP/1.1\r\nHost: a\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n",
    ),
    (
        "post-cl",
        b"POST /cl HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    ),
    (
        "post-chunked",
        b"POST /ch HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    ),
    (
        "post-trailers",
        b"POST /tr HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n3\r\nxyz\r\n0\r\nX-T: 1\r\n\r\n",
    ),
    (
        "post-chunk-ext",
        b"POST /ext HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n4;a=b\r\nwxyz\r\n0\r\n\r\n",
    ),
    ("get-1.0", b"GET /old HTTP/1.0\r\nHost: a\r\n\r\n"),
    (
        "post-1.0",
        b"POST /old HTTP/1.0\r\nHost: a\r\nContent-Length: 3\r\n\r\nxyz",
    ),
    (
        "pipelined-get-post",
        b"GET /1 HTTP/1.1\r\nHost: a\r\n\r\nPOST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi",
    ),
    (
        "pipelined-chunked-get",
        b"POST /1 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
    ),
    (
        "upgrade-with-body",
        b"POST /up HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 3\r\n\r\nxyz",
    ),
];

/// Bytes that parsers disagree about.
const ALPHABET: &[u8] = b" \t\r\n\0:;,\"=\x80\xff0123456789abcdefABCDEF";

const FRAMING_HEADERS: &[&str] = &[
    "Content-Length: 0",
    "Content-Length: 1",
    "Content-Length: 5",
    "Content-Length: 05",
    "Content-Length: 5, 5",
    "Transfer-Encoding: chunked",
    "Transfer-Encoding: Chunked",
    "Transfer-Encoding:chunked",
    "Transfer-Encoding: chunked ",
    "Transfer-Encoding: chunked, chunked",
    "Transfer-Encoding: gzip, chunked",
    "Transfer-Encoding: chunked, gzip",
    "Transfer-Encoding: identity",
    "Transfer-Encoding: xchunked",
    "Transfer-Encoding: chunked;q=1",
    "Transfer-Encoding: \"chunked\"",
    "Connection: close",
    "Connection: keep-alive",
    "Connection: Upgrade\r\nUpgrade: websocket",
    "Expect: 100-continue",
    "Host: b",
];

const CHUNK_SIZES: &[&str] = &[
    "0",
    "1",
    "4",
    "6",
    "00005",
    "A",
    "a",
    "ffffffffffffffff",
    "1ffffffffffffffff",
    "0x5",
    "+5",
    "-5",
    " 5",
    "5 ",
    "5\t",
    "",
];

const CHUNK_EXTS: &[&str] = &[
    ";a=b",
    ";a",
    "; a=b",
    " ;a",
    "\t;a=b",
    ";a=\"b c\"",
    ";a=\"b",
    ";",
    ";a=b;c",
    ";a=b c",
    ";a = b",
    ";\x00",
];

const LENGTHS: &[&str] = &[
    "0",
    "1",
    "4",
    "6",
    "+5",
    "-1",
    " 5",
    "5 ",
    "05",
    "5, 5",
    "5,6",
    "5 5",
    "0x5",
    "99999999999999999999",
    "",
];

const VERSIONS: &[&str] = &[
    "HTTP/1.0",
    "HTTP/1.1",
    "HTTP/1.2",
    "HTTP/2.0",
    "http/1.1",
    "HTTP/1.1 ",
    "HTTP/01.1",
    "HTTP/1",
    "HTTP/1.10",
];

const LINE_ENDS: &[&[u8]] = &[b"\n", b"\r", b"\r\r\n", b"\n\r", b"\r\n\r\n", b""];

/// Every operator has this one signature (some grow or shrink the input, so `Vec`).
type Op = fn(&mut Rng, &mut Vec<u8>) -> bool;

/// Every operator: its name (shown in a reproducer) and what it does; it returns false when
/// the input has nothing it applies to.
pub const OPS: &[(&str, Op)] = &[
    ("insert byte", insert_byte),
    ("delete byte", delete_byte),
    ("replace byte", replace_byte),
    ("duplicate header line", duplicate_header),
    ("change case", change_case),
    ("whitespace before colon", space_before_colon),
    ("obs-fold", obs_fold),
    ("chunk size", chunk_size),
    ("chunk extension", chunk_ext),
    ("add framing header", add_framing_header),
    ("content-length value", content_length),
    ("line ending", line_ending),
    ("version", version),
    ("truncate", truncate),
    ("copy a span", copy_span),
];

/// One to three operators on `base`; returns the result and the operators' names.
pub fn mutate(rng: &mut Rng, base: &[u8]) -> (Vec<u8>, Vec<&'static str>) {
    let mut out = base.to_vec();
    let mut applied = Vec::new();
    let n = match rng.below(10) {
        0..=4 => 1,
        5..=7 => 2,
        _ => 3,
    };
    let mut tries = 0;
    while applied.len() < n && tries < 20 {
        tries += 1;
        let (name, op) = rng.pick(OPS);
        if op(rng, &mut out) {
            applied.push(*name);
        }
    }
    (out, applied)
}

/// A line: `[start, end)` without its terminator; `next` is where the following line starts.
#[derive(Clone, Copy)]
struct Line {
    start: usize,
    end: usize,
    next: usize,
}

fn lines(buf: &[u8]) -> Vec<Line> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < buf.len() {
        let nl = buf[start..].iter().position(|&b| b == b'\n').map(|p| start + p);
        let (end, next) = match nl {
            Some(p) => (if p > start && buf[p - 1] == b'\r' { p - 1 } else { p }, p + 1),
            None => (buf.len(), buf.len()),
        };
        out.push(Line { start, end, next });
        start = next;
    }
    out
}

fn is_request_line(s: &[u8]) -> bool {
    s.windows(6).any(|w| w == b" HTTP/")
}

fn is_header_line(s: &[u8]) -> bool {
    s.first().is_some_and(u8::is_ascii_alphabetic) && s.contains(&b':') && !is_request_line(s)
}

fn is_chunk_line(s: &[u8]) -> bool {
    let size = s.split(|&b| b == b';').next().unwrap_or_default();
    !size.is_empty() && size.iter().all(u8::is_ascii_hexdigit)
}

fn pick_line(rng: &mut Rng, buf: &[u8], f: fn(&[u8]) -> bool) -> Option<Line> {
    let ls: Vec<Line> = lines(buf).into_iter().filter(|l| f(&buf[l.start..l.end])).collect();
    (!ls.is_empty()).then(|| *rng.pick(&ls))
}

fn insert_byte(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    let at = rng.below(b.len() + 1);
    b.insert(at, *rng.pick(ALPHABET));
    true
}

fn delete_byte(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    if b.is_empty() {
        return false;
    }
    let at = rng.below(b.len());
    b.remove(at);
    true
}

#[allow(clippy::ptr_arg)] // the shared `Op` signature
fn replace_byte(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    if b.is_empty() {
        return false;
    }
    let at = rng.below(b.len());
    b[at] = *rng.pick(ALPHABET);
    true
}

fn duplicate_header(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    let Some(l) = pick_line(rng, b, is_header_line) else {
        return false;
    };
    let copy = b[l.start..l.next].to_vec();
    b.splice(l.next..l.next, copy);
    true
}

#[allow(clippy::ptr_arg)] // the shared `Op` signature
fn change_case(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    if b.is_empty() {
        return false;
    }
    let at = rng.below(b.len());
    let end = (at + 1 + rng.below(8)).min(b.len());
    for c in &mut b[at..end] {
        *c = if c.is_ascii_lowercase() {
            c.to_ascii_uppercase()
        } else {
            c.to_ascii_lowercase()
        };
    }
    true
}

fn space_before_colon(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    let Some(l) = pick_line(rng, b, is_header_line) else {
        return false;
    };
    let Some(colon) = b[l.start..l.end].iter().position(|&c| c == b':') else {
        return false;
    };
    let ws = if rng.below(2) == 0 { b' ' } else { b'\t' };
    b.insert(l.start + colon, ws);
    true
}

fn obs_fold(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    let Some(l) = pick_line(rng, b, is_header_line) else {
        return false;
    };
    let Some(colon) = b[l.start..l.end].iter().position(|&c| c == b':') else {
        return false;
    };
    // Fold right after the colon or somewhere in the value.
    let from = l.start + colon + 1;
    let at = from + rng.below(l.end - from + 1);
    let fold: &[u8] = if rng.below(2) == 0 { b"\r\n " } else { b"\r\n\t" };
    b.splice(at..at, fold.iter().copied());
    true
}

/// Half the time another size, half the time the same size written differently (so the body
/// still matches and only the size line's syntax is on trial).
fn chunk_size(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    let Some(l) = pick_line(rng, b, is_chunk_line) else {
        return false;
    };
    let digits = b[l.start..l.end].iter().take_while(|c| c.is_ascii_hexdigit()).count();
    let old = String::from_utf8_lossy(&b[l.start..l.start + digits]).into_owned();
    let new = match rng.below(8) {
        0 => format!("{old} "),
        1 => format!("{old}\t"),
        2 => format!("{}{old}", "0".repeat(1 + rng.below(18))),
        3 => old.to_ascii_uppercase(),
        _ => rng.pick(CHUNK_SIZES).to_string(),
    };
    b.splice(l.start..l.start + digits, new.bytes());
    true
}

fn chunk_ext(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    let Some(l) = pick_line(rng, b, is_chunk_line) else {
        return false;
    };
    let ext = rng.pick(CHUNK_EXTS).as_bytes();
    b.splice(l.end..l.end, ext.iter().copied());
    true
}

fn add_framing_header(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    let Some(l) = pick_line(rng, b, |s| is_request_line(s) || is_header_line(s)) else {
        return false;
    };
    let line = format!("{}\r\n", rng.pick(FRAMING_HEADERS));
    b.splice(l.next..l.next, line.bytes());
    true
}

fn content_length(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    let Some(l) = pick_line(rng, b, |s| {
        s.len() > 15 && s[..15].eq_ignore_ascii_case(b"content-length:")
    }) else {
        return false;
    };
    let value = rng.pick(LENGTHS).as_bytes();
    b.splice(l.start + 15..l.end, b" ".iter().chain(value).copied());
    true
}

fn line_ending(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    let ends: Vec<usize> = b
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w == b"\r\n")
        .map(|(i, _)| i)
        .collect();
    if ends.is_empty() {
        return false;
    }
    let at = *rng.pick(&ends);
    b.splice(at..at + 2, rng.pick(LINE_ENDS).iter().copied());
    true
}

fn version(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    let Some(l) = pick_line(rng, b, is_request_line) else {
        return false;
    };
    let Some(at) = b[l.start..l.end].windows(6).position(|w| w == b" HTTP/") else {
        return false;
    };
    let v = rng.pick(VERSIONS).as_bytes();
    b.splice(l.start + at + 1..l.end, v.iter().copied());
    true
}

fn truncate(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    if b.len() < 2 {
        return false;
    }
    let at = 1 + rng.below(b.len() - 1);
    b.truncate(at);
    true
}

fn copy_span(rng: &mut Rng, b: &mut Vec<u8>) -> bool {
    if b.is_empty() {
        return false;
    }
    let from = rng.below(b.len());
    let end = (from + 1 + rng.below(16)).min(b.len());
    let span = b[from..end].to_vec();
    let to = rng.below(b.len() + 1);
    b.splice(to..to, span);
    true
}
