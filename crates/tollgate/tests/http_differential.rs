//! Differential test against HAProxy (the HTTP Garden's method): requests made by mutating
//! valid ones go through HAProxy (the distribution's package) and through tollgate, each in
//! front of its own recording origin, and the origins' framing is compared. A case fails when
//! tollgate forwards something HAProxy refused, or forwards a different framing (messages,
//! their bodies, bytes that frame as no message), unless `DELIBERATE` documents the
//! difference (mirrored in docs/http-conformance.md). tollgate refusing what HAProxy forwards
//! is allowed (stricter) and counted.
//!
//! The regression corpus (tests/data/differential/) is replayed before the generated cases.
//! Knobs (docs/http-conformance.md): TOLLGATE_DIFF_CASES, _SEED, _SECS, _SAVE (write each
//! failing class's reproducer there), _REPLAY (run one file), _HAPROXY (another binary),
//! _AGAINST_HAPROXY (a second HAProxy in tollgate's place: the harness's own check).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod differential_support;
mod master_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::Proxy;
use differential_support::haproxy::{self, Haproxy};
use differential_support::mutate::{BASES, Rng, mutate};
use differential_support::origin::Recorder;
use differential_support::{Endpoint, FAST, Lane, SLOW, Side, Verdict, escape, indent, judge};

const LANES: usize = 12;
const DEFAULT_CASES: usize = 2000;
const DEFAULT_SEED: u64 = 0x7011_6a7e;
const DEFAULT_SECS: u64 = 40;
/// Shrinking attempts per failing class (each is one case through both proxies).
const SHRINK_ATTEMPTS: usize = 120;

/// A difference tollgate makes on purpose. A differing case is put down to it only when the
/// request has the trigger and the same request with the trigger taken away (`neutralize`)
/// no longer differs, so an entry cannot hide an unrelated difference in the same request.
struct Deliberate {
    name: &'static str,
    reason: &'static str,
    applies: fn(req: &[u8]) -> bool,
    neutralize: fn(req: &[u8]) -> Vec<u8>,
}

/// Keep in step with docs/http-conformance.md (which also lists the HAProxy settings chosen to
/// avoid a difference that is policy rather than framing).
const DELIBERATE: &[Deliberate] = &[Deliberate {
    name: "websocket upgrade without Sec-WebSocket-Key",
    reason: "HAProxy refuses an `Upgrade: websocket` request without `Sec-WebSocket-Key` (400); \
             tollgate does not validate WebSocket handshakes: the request is framed like any \
             other and tollgate tunnels only after the server answers 101, so the server decides",
    applies: |req| header_lines(req).any(is_websocket_upgrade) && !has_header(req, b"sec-websocket-key"),
    neutralize: |req| {
        let mut out = Vec::with_capacity(req.len() + 64);
        for line in req.split_inclusive(|&b| b == b'\n') {
            out.extend_from_slice(line);
            if is_websocket_upgrade(line) {
                let end: &[u8] = if line.ends_with(b"\r\n") { b"\r\n" } else { b"\n" };
                out.extend_from_slice(b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==");
                out.extend_from_slice(end);
            }
        }
        out
    },
}];

fn header_lines(req: &[u8]) -> impl Iterator<Item = &[u8]> {
    req.split(|&b| b == b'\n')
}

fn has_header(req: &[u8], name: &[u8]) -> bool {
    header_lines(req)
        .any(|l| l.len() > name.len() && l[..name.len()].eq_ignore_ascii_case(name) && l[name.len()] == b':')
}

fn is_websocket_upgrade(line: &[u8]) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.starts_with(b"upgrade:") && lower.windows(9).any(|w| w == b"websocket")
}

/// The documented difference explaining why this differing case differs, if one does.
fn deliberate(lane: &Lane, req: &[u8]) -> Option<&'static Deliberate> {
    DELIBERATE.iter().find(|d| {
        (d.applies)(req) && {
            let (h, t) = lane.run(&(d.neutralize)(req), SLOW);
            !matches!(judge(&h, &t), Verdict::Differs(_))
        }
    })
}

struct Case {
    label: String,
    bytes: Vec<u8>,
}

/// Outcome of one case after confirmation.
enum Outcome {
    Same,
    Stricter,
    Documented(&'static Deliberate),
    /// Differed on the fast pass but not when re-run with more patience.
    Settled,
    Fails(Box<(String, Side, Side)>),
}

#[test]
fn mutated_requests_are_framed_as_haproxy_frames_them() {
    let Some(bin) = common::haproxy_or_skip() else {
        return;
    };
    let started = Instant::now();
    let seed = env_num("TOLLGATE_DIFF_SEED", DEFAULT_SEED);
    let count = env_num("TOLLGATE_DIFF_CASES", DEFAULT_CASES as u64) as usize;
    let budget = Duration::from_secs(env_num("TOLLGATE_DIFF_SECS", DEFAULT_SECS));

    let h_origins: Vec<Recorder> = (0..LANES).map(|_| Recorder::start()).collect();
    let t_origins: Vec<Recorder> = (0..LANES).map(|_| Recorder::start()).collect();
    let hap = Haproxy::start(&bin, &h_origins.iter().map(|o| o.addr).collect::<Vec<_>>());
    // The harness's own check: a second HAProxy in tollgate's place must differ in nothing.
    let against_itself = std::env::var_os("TOLLGATE_DIFF_AGAINST_HAPROXY").is_some();
    let t_addrs: Vec<_> = t_origins.iter().map(|o| o.addr).collect();
    let twin = against_itself.then(|| Haproxy::start(&bin, &t_addrs));
    let proxy = (!against_itself).then(|| Proxy::start(&tollgate_config(&t_origins)));
    let lanes: Vec<Lane> = h_origins
        .into_iter()
        .zip(t_origins)
        .enumerate()
        .map(|(i, (h, t))| Lane {
            haproxy: hap.sockets[i].clone(),
            haproxy_origin: h,
            tollgate: match (&twin, &proxy) {
                (Some(twin), _) => Endpoint::Unix(twin.sockets[i].clone()),
                (_, Some(p)) => Endpoint::Tcp(p.running().local_addr(&format!("fe{i}")).unwrap()),
                _ => unreachable!(),
            },
            tollgate_origin: t,
        })
        .collect();

    if let Some(file) = std::env::var_os("TOLLGATE_DIFF_REPLAY") {
        return replay(&lanes[0], Path::new(&file));
    }
    let mut cases = corpus();
    let from_corpus = cases.len();
    cases.extend(generate(seed, count));

    let outcomes = run_all(&lanes, &cases, started + budget);
    let ran = outcomes.len();
    let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
    let mut documented: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
    let mut classes: BTreeMap<String, Vec<(usize, Side, Side)>> = BTreeMap::new();
    for (i, o) in outcomes {
        let key = match o {
            Outcome::Same => "same",
            Outcome::Stricter => "tollgate stricter",
            Outcome::Documented(d) => {
                documented.entry(d.name).or_insert((0, d.reason)).0 += 1;
                "documented difference"
            }
            Outcome::Settled => "fast-pass difference gone when re-run slowly",
            Outcome::Fails(f) => {
                let (class, haproxy, tollgate) = *f;
                classes.entry(class).or_default().push((i, haproxy, tollgate));
                "DIFFERS"
            }
        };
        *tally.entry(key).or_default() += 1;
    }
    println!(
        "differential: {ran} of {} cases ({from_corpus} from the corpus, seed {seed:#x}) against {} in {:.1?}: {tally:?}; {} stray origin connection(s) set aside",
        cases.len(),
        haproxy::version(&bin),
        started.elapsed(),
        differential_support::strays()
    );
    for (name, (n, reason)) in &documented {
        println!("  documented difference, {n} case(s): {name}: {reason}");
    }
    assert!(
        ran == cases.len() || ran >= from_corpus + 200,
        "only {ran} cases ran within {budget:?}; the machine is too slow for a meaningful run"
    );
    if classes.is_empty() {
        return;
    }
    let report = report(&lanes, &cases, &classes);
    panic!(
        "{} case(s) in {} class(es) where tollgate forwards what HAProxy refuses or frames it differently:\n{report}",
        classes.values().map(Vec::len).sum::<usize>(),
        classes.len()
    );
}

/// Sends one file's bytes through both proxies and prints both outcomes in full.
fn replay(lane: &Lane, file: &Path) {
    let req = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let (h, t) = lane.run(&req, SLOW);
    let verdict = judge(&h, &t);
    println!(
        "request:\n{}\nHAProxy:  {}\ntollgate: {}\nverdict: {verdict:?}",
        indent(&escape(&req), 6),
        h.describe(),
        t.describe()
    );
    if let Verdict::Differs(class) = verdict {
        let excused = deliberate(lane, &req).map(|d| d.name);
        assert!(excused.is_some(), "{class}");
        println!("documented: {excused:?}");
    }
}

fn env_num(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("{name}={v}: not a number"))
        }
        Err(_) => default,
    }
}

fn tollgate_config(origins: &[Recorder]) -> String {
    let mut s = String::from(
        "[timeouts]\nclient = \"10s\"\nserver = \"10s\"\nhttp_request = \"5s\"\nhttp_keep_alive = \"5s\"\n",
    );
    for (i, o) in origins.iter().enumerate() {
        s.push_str(&format!(
            "\n[[frontend]]\nname = \"fe{i}\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nforwarded = \"none\"\ndefault_backend = \"be{i}\"\n\n[[backend]]\nname = \"be{i}\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
            o.addr
        ));
    }
    s
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/differential")
}

/// Every file of the regression corpus, in name order: one request's exact bytes each.
fn corpus() -> Vec<Case> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "http"));
    assert!(!files.is_empty(), "no *.http in {}", corpus_dir().display());
    files.sort();
    files
        .into_iter()
        .map(|p| Case {
            label: format!("corpus {}", p.file_name().unwrap().to_string_lossy()),
            bytes: std::fs::read(&p).unwrap(),
        })
        .collect()
}

fn generate(seed: u64, count: usize) -> Vec<Case> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|_| {
            let (name, base) = BASES[rng.below(BASES.len())];
            let (bytes, ops) = mutate(&mut rng, base);
            Case {
                label: format!("{name} + {}", ops.join(" + ")),
                bytes,
            }
        })
        .collect()
}

/// Runs the cases on every lane at once until done or `deadline`; a difference is re-run
/// with more patience before it counts.
fn run_all(lanes: &[Lane], cases: &[Case], deadline: Instant) -> Vec<(usize, Outcome)> {
    let next = AtomicUsize::new(0);
    let out = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for lane in lanes {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= cases.len() || Instant::now() >= deadline {
                        return;
                    }
                    let o = run_case(lane, &cases[i].bytes);
                    out.lock().unwrap().push((i, o));
                }
            });
        }
    });
    let mut out = out.into_inner().unwrap();
    out.sort_by_key(|(i, _)| *i);
    out
}

/// A fast-pass difference is re-run with patience. It stands if the patient run differs too,
/// or if tollgate forwarded in the fast run and nothing in the patient one while HAProxy did
/// the same both times: impatience can make a proxy forward less, never more, so that is
/// tollgate sometimes forwarding (a race), not the test giving up early.
fn run_case(lane: &Lane, req: &[u8]) -> Outcome {
    let (h, t) = lane.run(req, FAST);
    let fast_class = match judge(&h, &t) {
        Verdict::Same => return Outcome::Same,
        Verdict::Stricter => return Outcome::Stricter,
        Verdict::Differs(class) => class,
    };
    lane.settle();
    let (h2, t2) = lane.run(req, SLOW);
    let (class, h, t) = match judge(&h2, &t2) {
        Verdict::Differs(class) => (class, h2, t2),
        _ if h.framing() == h2.framing() && t.forwarded() && !t2.forwarded() => (fast_class, h, t),
        _ => return Outcome::Settled,
    };
    match deliberate(lane, req) {
        Some(d) => Outcome::Documented(d),
        None => Outcome::Fails(Box::new((class, h, t))),
    }
}

/// One reproducer per class: its first case shrunk (lines, then byte spans) while it still
/// fails the same way, run once more slowly, and printed escaped with both outcomes.
fn report(lanes: &[Lane], cases: &[Case], classes: &BTreeMap<String, Vec<(usize, Side, Side)>>) -> String {
    let save = std::env::var_os("TOLLGATE_DIFF_SAVE").map(PathBuf::from);
    let work: Vec<(&String, usize)> = classes.iter().map(|(c, v)| (c, v[0].0)).collect();
    type Shrunk = Option<(Vec<u8>, Side, Side)>;
    let done: Vec<Mutex<Shrunk>> = work.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for lane in lanes {
            s.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::SeqCst);
                    let Some((class, i)) = work.get(k) else { return };
                    let min = shrink(lane, &cases[*i].bytes, class);
                    let (h, t) = lane.run(&min, SLOW);
                    let still = matches!(judge(&h, &t), Verdict::Differs(ref c) if c == *class);
                    *done[k].lock().unwrap() = still.then_some((min, h, t));
                }
            });
        }
    });
    let mut out = String::new();
    for (k, (class, i)) in work.iter().enumerate() {
        // The shrunk request if it still fails the same way when re-run slowly, else the
        // request as generated with its recorded outcomes.
        let shrunk = done[k].lock().unwrap().take();
        let (shown, h, t) = match &shrunk {
            Some((min, h, t)) => (min, h, t),
            None => {
                let (_, h, t) = &classes[*class][0];
                (&cases[*i].bytes, h, t)
            }
        };
        out.push_str(&format!(
            "\n== {class}\n   {} case(s), first: #{i} {}\n   request ({} bytes{}):\n{}\n   HAProxy:  {}\n   tollgate: {}\n",
            classes[*class].len(),
            cases[*i].label,
            shown.len(),
            if shrunk.is_some() { ", shrunk" } else { ", as generated" },
            indent(&escape(shown), 6),
            h.describe(),
            t.describe()
        ));
        if let Some(dir) = &save {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(format!("{}.http", slug(class))), shown).unwrap();
        }
    }
    out
}

fn shrink(lane: &Lane, bytes: &[u8], class: &str) -> Vec<u8> {
    let attempts = std::cell::Cell::new(0usize);
    let fails = |cand: &[u8]| {
        attempts.set(attempts.get() + 1);
        let (h, t) = lane.run(cand, FAST);
        matches!(judge(&h, &t), Verdict::Differs(c) if c == class) && deliberate(lane, cand).is_none()
    };
    let mut cur = bytes.to_vec();
    // Whole lines first (last to first), then spans of 8, 4, 2 and 1 bytes.
    let mut ends: Vec<usize> = cur
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
        .collect();
    ends.insert(0, 0);
    for w in ends.windows(2).rev() {
        let cand = [&cur[..w[0]], &cur[w[1]..]].concat();
        if fails(&cand) {
            cur = cand;
        }
    }
    for span in [8usize, 4, 2, 1] {
        let mut at = cur.len().saturating_sub(span);
        loop {
            if attempts.get() >= SHRINK_ATTEMPTS {
                return cur;
            }
            let end = (at + span).min(cur.len());
            // Never split a CRLF: bare LFs would make the reproducer harder to read.
            let splits_crlf = (cur[end - 1] == b'\r' && cur.get(end) == Some(&b'\n'))
                || (cur[at] == b'\n' && at > 0 && cur[at - 1] == b'\r');
            let cand = [&cur[..at], &cur[end..]].concat();
            if !splits_crlf && !cand.is_empty() && fails(&cand) {
                cur = cand;
            }
            if at == 0 {
                break;
            }
            at = at.saturating_sub(span);
        }
    }
    cur
}

fn slug(class: &str) -> String {
    let mut s = String::new();
    for c in class.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') {
            s.push('-');
        }
    }
    s.trim_matches('-').chars().take(90).collect()
}

/// The origin's parser is what every verdict rests on: it frames the valid bases completely and
/// reads the syntax the differences are about as no message.
#[test]
fn origin_parser_frames_valid_requests_and_refuses_ambiguous_ones() {
    use differential_support::frame::{Tail, frame};
    for (name, base) in BASES {
        let (msgs, tail) = frame(base);
        assert_eq!(tail, Tail::Clean, "{name}");
        let expect = if name.starts_with("pipelined") { 2 } else { 1 };
        assert_eq!(msgs.len(), expect, "{name}");
    }
    let (msgs, _) = frame(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2;a=\"b c\"\r\nhi\r\n0\r\nX: y\r\n\r\n",
    );
    assert_eq!(msgs[0].body, b"hi");
    let (msgs, tail) = frame(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi");
    assert_eq!((msgs.len(), tail), (1, Tail::Clean), "identical Content-Length repeats");
    let te = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
    let invalid: &[(&str, String)] = &[
        ("whitespace after chunk size", format!("{te}2 \r\nhi\r\n0\r\n\r\n")),
        ("chunk ext name", format!("{te}2;\r\nhi\r\n0\r\n\r\n")),
        ("chunk size followed by junk", format!("{te}2\r\nhi\r\n0;a b\r\n\r\n")),
        (
            "chunk size over 16 hex digits",
            format!("{te}00000000000000002\r\nhi\r\n0\r\n\r\n"),
        ),
        ("chunk data not followed by CRLF", format!("{te}2\r\nhi\n0\r\n\r\n")),
        ("chunk size line without CR", format!("{te}2\nhi\r\n0\r\n\r\n")),
        (
            "final coding not chunked",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;q=1\r\n\r\n0\r\n\r\n".into(),
        ),
        (
            "transfer-encoding with content-length",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n0\r\n\r\n".into(),
        ),
        (
            "content-length values differ",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 2\r\n\r\nhi".into(),
        ),
        ("bare CR or LF in head", "GET / HTTP/1.1\nHost: a\r\n\r\n".into()),
        ("request head", "GET / HTTP/1.1\r\nHost : a\r\n\r\n".into()),
        (
            "empty line before a request",
            "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n".into(),
        ),
    ];
    for (why, req) in invalid {
        assert_eq!(frame(req.as_bytes()).1, Tail::Invalid(why), "{req:?}");
    }
    let (msgs, tail) = frame(format!("{te}5\r\nhe").as_bytes());
    assert_eq!((msgs.len(), tail), (0, Tail::Incomplete));
}
