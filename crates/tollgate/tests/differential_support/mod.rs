//! Support for the differential test (tests/http_differential.rs): the same request bytes go
//! through HAProxy and through tollgate, each in front of its own recording origin, and what
//! each origin framed is compared.
//!
//! A *lane* is one HAProxy frontend and one tollgate frontend, each with its own origin; a
//! lane runs one case at a time, so every origin connection belongs to the case that was
//! current when it was accepted. Lanes run in parallel.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

pub mod frame;
pub mod haproxy;
pub mod mutate;
pub mod origin;

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use frame::{Msg, Tail};
use origin::Recorder;

/// What one proxy did with a case: what its client got back and what its origin framed.
#[derive(Clone, Debug, Default)]
pub struct Side {
    /// Status codes of the responses the client received, in order.
    pub statuses: Vec<u16>,
    /// The proxy closed the client connection before the client gave up waiting.
    pub closed: bool,
    /// Origin connections opened for this case.
    pub conns: usize,
    /// Bytes that reached the origin.
    pub bytes: usize,
    /// Messages the origin framed, over all its connections in accept order.
    pub msgs: Vec<Msg>,
    /// Every connection's tail that was not clean.
    pub tails: Vec<Tail>,
    /// What each origin connection received, for the reproducer.
    pub raw: Vec<Vec<u8>>,
    /// Origin connections set aside as strays of an earlier case (see `belongs`).
    pub strays: usize,
}

impl Side {
    pub fn forwarded(&self) -> bool {
        self.bytes > 0
    }

    /// What the origin framed, without the client's view.
    pub fn framing(&self) -> (bool, &[Msg], &[Tail]) {
        (self.forwarded(), &self.msgs, &self.tails)
    }

    /// A short description, the same for outcomes that differ only in detail.
    pub fn shape(&self) -> String {
        if !self.forwarded() {
            return match self.statuses.first() {
                Some(s) => format!("refused ({s})"),
                None if self.closed => "refused (closed, no response)".to_string(),
                None => "refused (no response)".to_string(),
            };
        }
        let mut s = format!("{} message(s)", self.msgs.len());
        for t in &self.tails {
            match t {
                Tail::Clean => {}
                Tail::Incomplete => s.push_str(" + an incomplete one"),
                Tail::Invalid(why) => {
                    let _ = write!(s, " + bytes framing as no message ({why})");
                }
            }
        }
        s
    }

    pub fn describe(&self) -> String {
        let mut s = format!(
            "client got {:?}{}; origin: {} connection(s), {} byte(s): {}",
            self.statuses,
            if self.closed { " then close" } else { "" },
            self.conns,
            self.bytes,
            self.shape()
        );
        if self.strays > 0 {
            let _ = write!(s, " ({} stray connection(s) of an earlier case set aside)", self.strays);
        }
        for m in &self.msgs {
            let _ = write!(
                s,
                "\n      framed: {} {} body {:?}",
                m.method,
                m.target,
                String::from_utf8_lossy(&m.body)
            );
        }
        for (i, r) in self.raw.iter().enumerate() {
            let shown = &r[..r.len().min(400)];
            let more = if r.len() > shown.len() { " …" } else { "" };
            let _ = write!(
                s,
                "\n      connection {} received:\n{}{more}",
                i + 1,
                indent(&escape(shown), 8)
            );
        }
        s
    }
}

/// How tollgate's handling of a case compares with HAProxy's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Both refused, or both forwarded the same framing.
    Same,
    /// tollgate refused what HAProxy forwarded, or forwarded only its first messages:
    /// stricter, allowed.
    Stricter,
    /// A failure unless documented; the string names its class.
    Differs(String),
}

/// Compares the two outcomes. A difference is named by its symptom, not by the particular
/// request, so one cause found through many bases and operators is one class.
pub fn judge(h: &Side, t: &Side) -> Verdict {
    match (h.forwarded(), t.forwarded()) {
        (false, false) => Verdict::Same,
        (true, false) => Verdict::Stricter,
        (false, true) => Verdict::Differs(format!(
            "tollgate forwarded what HAProxy refused ({}): its origin saw {}",
            h.shape(),
            tails(t)
        )),
        (true, true) => {
            if h.msgs == t.msgs && h.tails == t.tails {
                return Verdict::Same;
            }
            // tollgate's origin saw a proper prefix of what HAProxy's saw: the same first
            // messages, then nothing where HAProxy forwarded more (complete or not).
            let prefix = h.msgs.starts_with(&t.msgs) && (t.msgs.len() < h.msgs.len() || !h.tails.is_empty());
            if t.tails.is_empty() && prefix {
                return Verdict::Stricter;
            }
            let what = if h.tails != t.tails {
                format!("tollgate's origin saw {}, HAProxy's {}", tails(t), tails(h))
            } else if h.msgs.len() != t.msgs.len() {
                format!(
                    "tollgate's origin framed {} message(s), HAProxy's {}",
                    t.msgs.len(),
                    h.msgs.len()
                )
            } else {
                "a message's method, target or body differs".to_string()
            };
            Verdict::Differs(format!("framing differs: {what}"))
        }
    }
}

/// The distinct non-clean tails, or that every byte framed as a message.
fn tails(s: &Side) -> String {
    let mut kinds: Vec<String> = s
        .tails
        .iter()
        .map(|t| match t {
            Tail::Clean => "clean".to_string(),
            Tail::Incomplete => "an incomplete message".to_string(),
            Tail::Invalid(why) => format!("bytes framing as no message ({why})"),
        })
        .collect();
    kinds.sort();
    kinds.dedup();
    if kinds.is_empty() {
        "only complete messages".to_string()
    } else {
        kinds.join(" and ")
    }
}

/// One HAProxy frontend and one tollgate frontend with their origins.
pub struct Lane {
    pub haproxy: PathBuf,
    pub haproxy_origin: Recorder,
    /// tollgate's frontend; a unix socket only when a second HAProxy stands in for tollgate
    /// (the harness's own check, `TOLLGATE_DIFF_AGAINST_HAPROXY`).
    pub tollgate: Endpoint,
    pub tollgate_origin: Recorder,
}

pub enum Endpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

static CASE_ID: AtomicU64 = AtomicU64::new(1);
static STRAYS: AtomicU64 = AtomicU64::new(0);

/// Origin connections set aside as strays so far (see `belongs`), for the summary.
pub fn strays() -> u64 {
    STRAYS.load(Ordering::SeqCst)
}

/// How long to wait for things to settle: the client for more response bytes, the origin
/// for its connections to close once the client is gone.
#[derive(Clone, Copy)]
pub struct Patience {
    pub idle: Duration,
    pub drain: Duration,
}

pub const FAST: Patience = Patience {
    idle: Duration::from_millis(150),
    drain: Duration::from_secs(2),
};

/// For confirming a difference: long enough that a loaded machine cannot fake one.
pub const SLOW: Patience = Patience {
    idle: Duration::from_millis(1500),
    drain: Duration::from_secs(5),
};

impl Lane {
    /// Lets both origins go quiet before a run that must not see an earlier run's stragglers.
    pub fn settle(&self) {
        let (quiet, limit) = (Duration::from_millis(300), Duration::from_secs(3));
        self.haproxy_origin.settle(quiet, limit);
        self.tollgate_origin.settle(quiet, limit);
    }

    /// Sends `req` through both proxies at once.
    pub fn run(&self, req: &[u8], p: Patience) -> (Side, Side) {
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                let c = UnixStream::connect(&self.haproxy).unwrap();
                c.set_read_timeout(Some(p.idle)).unwrap();
                side(c, &self.haproxy_origin, req, p)
            });
            let t = match &self.tollgate {
                Endpoint::Tcp(addr) => {
                    let c = TcpStream::connect(addr).unwrap();
                    c.set_read_timeout(Some(p.idle)).unwrap();
                    side(c, &self.tollgate_origin, req, p)
                }
                Endpoint::Unix(path) => {
                    let c = UnixStream::connect(path).unwrap();
                    c.set_read_timeout(Some(p.idle)).unwrap();
                    side(c, &self.tollgate_origin, req, p)
                }
            };
            (h.join().unwrap(), t)
        })
    }
}

fn side<S: Read + Write>(mut c: S, origin: &Recorder, req: &[u8], p: Patience) -> Side {
    let case = CASE_ID.fetch_add(1, Ordering::SeqCst);
    origin.begin(case);
    // A proxy may answer and close before reading everything: a failed write is an outcome.
    let _ = c.write_all(req);
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    // Bounded even against a proxy that never stops sending.
    let deadline = std::time::Instant::now() + p.idle * 20;
    let closed = loop {
        if got.len() > 1 << 20 || std::time::Instant::now() > deadline {
            break false;
        }
        match c.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break false,
            Err(_) => break true,
        }
    };
    drop(c);
    let mut conns = origin.finish(case, p.drain);
    let before = conns.len();
    conns.retain(|c| belongs(c, req));
    STRAYS.fetch_add((before - conns.len()) as u64, Ordering::SeqCst);
    let mut out = Side {
        strays: before - conns.len(),
        statuses: statuses(&got),
        closed,
        conns: conns.len(),
        bytes: conns.iter().map(Vec::len).sum(),
        ..Side::default()
    };
    for bytes in &conns {
        let (msgs, tail) = frame::frame(bytes);
        out.msgs.extend(msgs);
        if tail != Tail::Clean {
            out.tails.push(tail);
        }
    }
    out.raw = conns;
    out
}

/// Whether an origin connection carries this case's request: its method and target occur in
/// the bytes the client sent. A proxy still forwarding a pipelined request of an earlier case
/// after that case's client gave up connects during a later case; such a connection is set
/// aside rather than counted against the later case. (A target common to both, like `/`,
/// cannot be told apart; the patient re-run of a difference, after `settle`, covers that.)
fn belongs(conn: &[u8], req: &[u8]) -> bool {
    let line = conn.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    match (parts.next(), parts.next()) {
        (Some(method), Some(target)) if !method.is_empty() && !target.is_empty() => {
            contains(req, method) && contains(req, target)
        }
        _ => true,
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Status codes of the responses in `got` (status lines at the start of a line).
fn statuses(got: &[u8]) -> Vec<u16> {
    let mut out = Vec::new();
    for (i, w) in got.windows(13).enumerate() {
        let at_line_start = i == 0 || got[i - 1] == b'\n';
        if at_line_start
            && w.starts_with(b"HTTP/1.")
            && w[8] == b' '
            && let Some(code) = std::str::from_utf8(&w[9..12]).ok().and_then(|s| s.parse().ok())
        {
            out.push(code);
        }
    }
    out
}

/// The bytes, escaped, with a line break after each LF so the request reads as it is framed.
pub fn escape(bytes: &[u8]) -> String {
    let mut s = String::new();
    for &b in bytes {
        match b {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n\n"),
            b'\t' => s.push_str("\\t"),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(b as char),
            _ => {
                let _ = write!(s, "\\x{b:02x}");
            }
        }
    }
    s
}

pub fn indent(s: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    s.lines().map(|l| format!("{pad}{l}")).collect::<Vec<_>>().join("\n")
}
