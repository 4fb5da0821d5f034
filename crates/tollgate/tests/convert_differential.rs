//! Differential test of `tollgate convert`: each HAProxy config in
//! tests/convert/corpus/differential/ runs in HAProxy (the distribution's package) and,
//! converted, in tollgate, each proxy in front of its own set of recording origins; the same
//! requests go to both, and what the client got (status, fields, body) and what the origins
//! received (which origin, method, target, fields, body) are compared.
//!
//! Each config says what to send in its `#@` comment lines (see `convert_support::Script`)
//! and names every address through environment variables in double quotes
//! (`bind "${FE_HTTP}"`, `server s1 "${S1}"`), which HAProxy and the converter expand alike:
//! HAProxy gets its frontend ports and origins, `tollgate convert` the same names with
//! tollgate's. The converted file is run as written (`tollgate run --config`, master mode).
//!
//! Only the differences in `DIFFERENCES` are normalised, each with the document that says
//! so; every normalisation applied is printed. Any other difference fails the test with the
//! request, both answers and both origins' records.
//!
//! Knobs: TOLLGATE_CONVERT_DIFF_ONLY=01-,14- (the configs whose names contain one of these),
//! TOLLGATE_CONVERT_DIFF_TOML=DIR (run `DIR/<stem>.toml` in place of the converter's output,
//! e.g. the hand translations in corpus/differential/expected/, where one exists: checks the
//! harness),
//! TOLLGATE_CONVERT_DIFF_BIN (another tollgate binary), TOLLGATE_DIFF_HAPROXY (another haproxy
//! binary).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod convert_support;
mod master_support;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::ReservedPort;
use convert_support::origin::{OriginSet, Record};
use convert_support::{Answer, Echo, Proc, Req, Script, Step, echo, send};
use master_support::{BIN, TempDir};

/// The tollgate binary: `TOLLGATE_CONVERT_DIFF_BIN` if set (another build; or a copy of this
/// one, when another worktree shares the target directory and may relink it mid-run), else
/// cargo's.
fn tollgate_bin() -> PathBuf {
    std::env::var_os("TOLLGATE_CONVERT_DIFF_BIN").map_or_else(|| PathBuf::from(BIN), PathBuf::from)
}

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/convert/corpus/differential");
/// Configs run at once (each runs two proxies and their origins).
const PARALLEL: usize = 4;
/// How long a killed server may take to be left out by a proxy.
const KILL_LIMIT: Duration = Duration::from_secs(15);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The two forms mean the same in HTTP: compared as one, not counted as normalised.
    Equivalence,
    /// tollgate does this differently on purpose, and says so in its documents: a request
    /// that differs only by it counts as normalised, and the normalisation is printed.
    Deliberate,
}

struct Difference {
    id: &'static str,
    kind: Kind,
    what: &'static str,
    doc: &'static str,
}

const DIFFERENCES: &[Difference] = &[
    Difference {
        id: "field-name-case",
        kind: Kind::Equivalence,
        what: "field names compared case-insensitively (HAProxy forwards them lowercased)",
        doc: "RFC 9110 §5.1",
    },
    Difference {
        id: "field-order",
        kind: Kind::Equivalence,
        what: "fields of different names compared in name order; the lines of one name keep their order",
        doc: "RFC 9110 §5.3",
    },
    Difference {
        id: "hop-by-hop",
        kind: Kind::Equivalence,
        what: "Connection, Keep-Alive, Proxy-Connection, TE, Transfer-Encoding, Upgrade and Content-Length \
               left out: framing belongs to each connection (the decoded bodies are compared; a Content-Length \
               on a 1xx or 204 response is compared: RFC 9110 §8.6 forbids it)",
        doc: "RFC 9110 §7.6.1; docs/http-conformance.md",
    },
    Difference {
        id: "field-lines-combined",
        kind: Kind::Equivalence,
        what: "several lines of X-Forwarded-For compared as one comma-joined value (HAProxy adds a line, \
               tollgate appends to the value)",
        doc: "RFC 9110 §5.3; docs/from-haproxy.md (Forwarding headers: X-Forwarded-For appended)",
    },
    Difference {
        id: "date-server",
        kind: Kind::Deliberate,
        what: "Date and Server fields one proxy adds to a response",
        doc: "RFC 9110 §6.6.1, §10.2.4 (the origins send neither)",
    },
    Difference {
        id: "x-forwarded-proto",
        kind: Kind::Deliberate,
        what: "tollgate sets X-Forwarded-Proto along with X-Forwarded-For; HAProxy's option forwardfor does not",
        doc: "docs/migrating-from-haproxy.md#defaults-that-differ (forwarding headers); \
              docs/from-haproxy.md (Forwarding headers)",
    },
    Difference {
        id: "x-forwarded-for-default",
        kind: Kind::Deliberate,
        what: "tollgate adds X-Forwarded-For per frontend (`forwarded`: by default, or as the converter sets it \
               when one of the frontend's backends has option forwardfor); HAProxy where option forwardfor is, \
               frontend or backend",
        doc: "docs/migrating-from-haproxy.md#defaults-that-differ (forwarding headers); \
              docs/from-haproxy.md (Forwarding headers); \
              docs/config.md#frontend (`forwarded`)",
    },
    Difference {
        id: "error-page",
        kind: Kind::Deliberate,
        what: "a response the proxy makes for an error (deny, rate limit) carries each proxy's own page: \
               HAProxy's HTML errorfile (text/html, Cache-Control: no-cache), tollgate's reason phrase and a \
               newline (text/plain; a 429 with Retry-After); the status is compared",
        doc: "docs/migrating-from-haproxy.md#defaults-that-differ (deny body); \
              docs/config.md#route-actions (deny); \
              docs/config.md#rate-limits-frontendlimit (action 429)",
    },
    Difference {
        id: "return-content-type",
        kind: Kind::Deliberate,
        what: "`http-request return` without a payload: HAProxy's answer has no Content-Type, a tollgate `return` \
               always has one (text/plain by default)",
        doc: "docs/config.md#route-actions (`return`: `content_type` defaults to `text/plain`)",
    },
    Difference {
        id: "redirect-cache-control",
        kind: Kind::Deliberate,
        what: "HAProxy's 302 redirects carry `Cache-Control: no-cache`; tollgate's carry no cache field",
        doc: "docs/migrating-from-haproxy.md#defaults-that-differ (a 302 redirect)",
    },
    Difference {
        id: "scheme-redirect-port",
        kind: Kind::Deliberate,
        what: "`redirect scheme https` for a Host with a port: HAProxy keeps the port in Location, tollgate's \
               scheme switch drops it (`port = N` names one)",
        doc: "docs/migrating-from-haproxy.md#defaults-that-differ (a scheme redirect); \
              docs/config.md#route-actions (`redirect`); \
              docs/guide/08-migrating-from-haproxy.md (Running both side by side)",
    },
    Difference {
        id: "after-response-own-answers",
        kind: Kind::Deliberate,
        what: "http-after-response fields are on every HAProxy response; tollgate's response_headers (which the \
               converter writes for them, with a note) are on servers' responses only, not on its own answers",
        doc: "docs/config.md#route-actions (`response_headers` apply to responses from servers only); \
              the converter's note on the line",
    },
    Difference {
        id: "hash-function",
        kind: Kind::Deliberate,
        what: "balance source: which server one client's address lands on (tollgate places servers on its ring by \
               the xxh3 hash of their names); that one client's requests all go to one server is compared",
        doc: "docs/migrating-from-haproxy.md#defaults-that-differ (hashing: keys land on other servers); \
              docs/config.md#backend (balance hash)",
    },
    Difference {
        id: "rate-counts-refused",
        kind: Kind::Deliberate,
        what: "a rate limit's window counts only the requests tollgate admitted; HAProxy's http_req_rate counts \
               the refused ones too, so in a window after a refused burst HAProxy may admit fewer (never more)",
        doc: "docs/migrating-from-haproxy.md#defaults-that-differ (rate limits); \
              docs/guide/08-migrating-from-haproxy.md (notes on the translation); \
              docs/config.md#rate-limits-frontendlimit (The window)",
    },
];

/// Known failures (converter bugs the lead is fixing, differences awaiting a decision):
/// printed next to the failure, which still fails.
const KNOWN_FAILURES: &[(&str, &str)] = &[];

fn difference(id: &str) -> &'static Difference {
    DIFFERENCES
        .iter()
        .find(|d| d.id == id)
        .unwrap_or_else(|| panic!("{id} is not in DIFFERENCES"))
}

/// The normalisations applied to one comparison.
#[derive(Default)]
struct Norm {
    deliberate: Vec<String>,
    equivalences: BTreeSet<&'static str>,
}

/// One applied deliberate difference, as printed: `[id] detail`.
fn deliberate(id: &str, detail: String) -> String {
    assert!(
        difference(id).kind == Kind::Deliberate,
        "{id} is not a deliberate difference"
    );
    format!("[{id}] {detail}")
}

impl Norm {
    fn apply(&mut self, id: &'static str, detail: String) {
        match difference(id).kind {
            Kind::Deliberate => self.deliberate.push(deliberate(id, detail)),
            Kind::Equivalence => {
                self.equivalences.insert(difference(id).id);
            }
        }
    }
}

type Fields = Vec<(String, String)>;

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// Lowercased names, hop-by-hop fields left out, sorted by name (stable: one name's lines
/// keep their order).
fn fields(raw: &[(String, String)], norm: &mut Norm) -> Fields {
    let mut out: Fields = Vec::new();
    for (k, v) in raw {
        let lower = k.to_ascii_lowercase();
        if lower != *k {
            norm.apply("field-name-case", String::new());
        }
        if HOP_BY_HOP.contains(&lower.as_str()) {
            norm.apply("hop-by-hop", String::new());
            continue;
        }
        out.push((lower, v.clone()));
    }
    let before = out.clone();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    if before != out {
        norm.apply("field-order", String::new());
    }
    out
}

fn has(f: &Fields, name: &str) -> bool {
    f.iter().any(|(k, _)| k == name)
}

fn remove(f: &mut Fields, name: &str) -> Vec<String> {
    let gone = f.iter().filter(|(k, _)| k == name).map(|(_, v)| v.clone()).collect();
    f.retain(|(k, _)| k != name);
    gone
}

/// Joins the lines of `name` into one comma-separated value (in place of the first).
fn combine(f: &mut Fields, name: &str) -> bool {
    let values: Vec<String> = f.iter().filter(|(k, _)| k == name).map(|(_, v)| v.clone()).collect();
    if values.len() < 2 {
        return false;
    }
    let at = f.iter().position(|(k, _)| k == name).unwrap();
    f.retain(|(k, _)| k != name);
    f.insert(at, (name.to_string(), values.join(", ")));
    true
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct AnswerView {
    status: u16,
    fields: Fields,
    body: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct RecordView {
    origin: String,
    method: String,
    target: String,
    fields: Fields,
    body: String,
}

fn answer_view(a: &Result<Answer, String>, norm: &mut Norm) -> Result<AnswerView, String> {
    let a = a.as_ref().map_err(Clone::clone)?;
    let mut view = AnswerView {
        status: a.status,
        fields: fields(&a.headers, norm),
        body: String::from_utf8_lossy(&a.body).into_owned(),
    };
    // Not framing there: a 1xx or 204 response must not carry Content-Length at all
    // (RFC 9110 §8.6), so it stays in the comparison.
    if a.status < 200 || a.status == 204 {
        for (k, v) in &a.headers {
            if k.eq_ignore_ascii_case("content-length") {
                view.fields.push(("content-length".into(), v.clone()));
            }
        }
    }
    Ok(view)
}

fn record_view(r: &Record, norm: &mut Norm) -> RecordView {
    RecordView {
        origin: r.origin.clone(),
        method: r.method.clone(),
        target: r.target.clone(),
        fields: fields(&r.headers, norm),
        body: String::from_utf8_lossy(&r.body).into_owned(),
    }
}

/// What one proxy did with one request.
struct Side {
    answer: Result<Answer, String>,
    records: Vec<Record>,
}

enum Verdict {
    Identical,
    Normalised(Vec<String>),
    Differs(String),
}

/// What the config says that a comparison needs to know.
#[derive(Default)]
struct ConfigFacts {
    /// Field names `http-after-response set-header/add-header` write (lowercase).
    after_response: Vec<String>,
}

impl ConfigFacts {
    fn read(cfg_text: &str) -> ConfigFacts {
        let after_response = cfg_text
            .lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                match w[..] {
                    ["http-after-response", "set-header" | "add-header", name, ..] => Some(name.to_ascii_lowercase()),
                    _ => None,
                }
            })
            .collect();
        ConfigFacts { after_response }
    }
}

/// Compares one request's outcome on both sides, normalising only `DIFFERENCES`.
fn compare(req: &Req, h: &Side, t: &Side, facts: &ConfigFacts, equivalences: &mut BTreeSet<&'static str>) -> Verdict {
    let mut norm = Norm::default();
    let mut ha = answer_view(&h.answer, &mut norm);
    let mut ta = answer_view(&t.answer, &mut norm);
    if let (Ok(ha), Ok(ta)) = (&mut ha, &mut ta) {
        for name in ["date", "server"] {
            let (in_h, in_t) = (has(&ha.fields, name), has(&ta.fields, name));
            if in_h != in_t {
                let who = if in_h { "HAProxy" } else { "tollgate" };
                norm.apply("date-server", format!("{who} added {name} to the response"));
                remove(&mut ha.fields, name);
                remove(&mut ta.fields, name);
            }
        }
        let proxy_made = !has(&ha.fields, "x-origin") && !has(&ta.fields, "x-origin");
        if proxy_made {
            for name in &facts.after_response {
                if has(&ha.fields, name) && !has(&ta.fields, name) {
                    let v = remove(&mut ha.fields, name);
                    norm.apply(
                        "after-response-own-answers",
                        format!("HAProxy's own {} answer has {name}: {}", ha.status, v.join(", ")),
                    );
                }
            }
        }
        if proxy_made
            && ha.status == 302
            && ta.status == 302
            && ha.fields.iter().any(|(k, v)| k == "cache-control" && v == "no-cache")
            && !has(&ta.fields, "cache-control")
        {
            remove(&mut ha.fields, "cache-control");
            norm.apply(
                "redirect-cache-control",
                "HAProxy's 302 says Cache-Control: no-cache".to_string(),
            );
        }
        if proxy_made && ha.status == ta.status && (300..400).contains(&ha.status) {
            let location = |f: &Fields| f.iter().find(|(k, _)| k == "location").map(|(_, v)| v.clone());
            if let (Some(hl), Some(tl)) = (location(&ha.fields), location(&ta.fields))
                && hl != tl
                && without_port(&hl) == tl
            {
                norm.apply("scheme-redirect-port", format!("HAProxy {hl}, tollgate {tl}"));
                for (k, v) in ha.fields.iter_mut() {
                    if k == "location" {
                        *v = tl.clone();
                    }
                }
            }
        }
        if proxy_made
            && ha.status == ta.status
            && ha.body.is_empty()
            && ta.body.is_empty()
            && !has(&ha.fields, "content-type")
            && ta.fields.iter().any(|(k, v)| k == "content-type" && v == "text/plain")
        {
            norm.apply(
                "return-content-type",
                format!("{}: tollgate's empty answer says Content-Type: text/plain", ta.status),
            );
            remove(&mut ta.fields, "content-type");
        }
        let haproxy_page =
            ha.fields.iter().any(|(k, v)| k == "content-type" && v == "text/html") && ha.body.starts_with("<html>");
        if proxy_made && ha.status == ta.status && ha.status >= 400 && haproxy_page && ha != ta {
            norm.apply(
                "error-page",
                format!(
                    "{}: HAProxy's page ({} bytes of HTML), tollgate's {:?} {:?}",
                    ha.status,
                    ha.body.len(),
                    ta.fields,
                    ta.body
                ),
            );
            for name in ["content-type", "cache-control"] {
                remove(&mut ha.fields, name);
                remove(&mut ta.fields, name);
            }
            if ta.status == 429 {
                remove(&mut ta.fields, "retry-after");
            }
            ha.body.clear();
            ta.body.clear();
        }
    }
    let mut hr: Vec<RecordView> = h.records.iter().map(|r| record_view(r, &mut norm)).collect();
    let mut tr: Vec<RecordView> = t.records.iter().map(|r| record_view(r, &mut norm)).collect();
    for (hv, tv) in hr.iter_mut().zip(tr.iter_mut()) {
        if !has(&hv.fields, "x-forwarded-proto") && has(&tv.fields, "x-forwarded-proto") {
            let v = remove(&mut tv.fields, "x-forwarded-proto");
            norm.apply(
                "x-forwarded-proto",
                format!("origin got X-Forwarded-Proto: {}", v.join(", ")),
            );
        }
        if !has(&hv.fields, "x-forwarded-for") && has(&tv.fields, "x-forwarded-for") {
            let v = remove(&mut tv.fields, "x-forwarded-for");
            norm.apply(
                "x-forwarded-for-default",
                format!("origin got X-Forwarded-For: {}", v.join(", ")),
            );
        }
        let joined_h = combine(&mut hv.fields, "x-forwarded-for");
        let joined_t = combine(&mut tv.fields, "x-forwarded-for");
        if joined_h != joined_t {
            norm.apply("field-lines-combined", String::new());
        }
    }
    equivalences.extend(norm.equivalences.iter().copied());
    if ha == ta && hr == tr {
        if norm.deliberate.is_empty() {
            Verdict::Identical
        } else {
            Verdict::Normalised(norm.deliberate)
        }
    } else {
        let mut s = format!("request: {}\n", req.describe());
        let _ = writeln!(s, "  request bytes: {:?}", String::from_utf8_lossy(&req.bytes()));
        let _ = writeln!(s, "  HAProxy answer:  {}", show_answer(&h.answer));
        let _ = writeln!(s, "  tollgate answer: {}", show_answer(&t.answer));
        let _ = writeln!(s, "  HAProxy origins:  {}", show_records(&h.records));
        let _ = writeln!(s, "  tollgate origins: {}", show_records(&t.records));
        if ha != ta {
            let _ = writeln!(
                s,
                "  answers compared: HAProxy {ha:?}\n                    tollgate {ta:?}"
            );
        }
        if hr != tr {
            let _ = writeln!(
                s,
                "  records compared: HAProxy {hr:?}\n                    tollgate {tr:?}"
            );
        }
        for n in &norm.deliberate {
            let _ = writeln!(s, "  normalised on the way: {n}");
        }
        Verdict::Differs(s)
    }
}

/// `scheme://host:port/rest` without `:port`.
fn without_port(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    };
    format!("{scheme}://{host}{path}")
}

fn show_answer(a: &Result<Answer, String>) -> String {
    match a {
        Err(e) => format!("error: {e}"),
        Ok(a) => format!(
            "{} {:?} body {:?}",
            a.status,
            a.headers,
            String::from_utf8_lossy(&a.body)
        ),
    }
}

fn show_records(r: &[Record]) -> String {
    if r.is_empty() {
        return "none".into();
    }
    r.iter()
        .map(|r| {
            format!(
                "{}: {} {} {} {:?} body {:?}",
                r.origin,
                r.method,
                r.target,
                r.version,
                r.headers,
                String::from_utf8_lossy(&r.body)
            )
        })
        .collect::<Vec<_>>()
        .join("\n                    ")
}

/// One proxy under test, with its origins.
struct Lane {
    name: &'static str,
    origins: OriginSet,
    frontends: BTreeMap<String, SocketAddr>,
}

impl Lane {
    fn addr(&self, fe: &str) -> SocketAddr {
        *self
            .frontends
            .get(fe)
            .unwrap_or_else(|| panic!("frontend {fe} is not in `#@ frontends`"))
    }

    fn request(&self, req: &Req) -> Side {
        let before = self.origins.records_len();
        let answer = send(self.addr(&req.fe), req);
        Side {
            answer,
            records: self.origins.records_since(before),
        }
    }

    /// Sends `req` `n` times; per origin, how many answers named it (2xx) and how many
    /// requests it recorded; other statuses and errors by name.
    fn spread(&self, req: &Req, n: usize) -> Spread {
        let before = self.origins.records_len();
        let mut s = Spread::default();
        for _ in 0..n {
            match send(self.addr(&req.fe), req) {
                Ok(a) if (200..300).contains(&a.status) => {
                    *s.answered
                        .entry(a.header("x-origin").unwrap_or("?").to_string())
                        .or_default() += 1;
                }
                Ok(a) => *s.other.entry(a.status.to_string()).or_default() += 1,
                Err(e) => *s.other.entry(e).or_default() += 1,
            }
        }
        for r in self.origins.records_since(before) {
            *s.recorded.entry(r.origin).or_default() += 1;
        }
        s
    }
}

#[derive(Default, Debug)]
struct Spread {
    answered: BTreeMap<String, usize>,
    recorded: BTreeMap<String, usize>,
    other: BTreeMap<String, usize>,
}

impl Spread {
    fn share(&self, origin: &str, n: usize) -> f64 {
        100.0 * *self.answered.get(origin).unwrap_or(&0) as f64 / n as f64
    }
}

#[derive(Default)]
struct Outcome {
    config: String,
    requests: usize,
    identical: usize,
    normalised: usize,
    differing: Vec<String>,
    log: Vec<String>,
    equivalences: BTreeSet<&'static str>,
    /// The TOML tollgate ran, shown with the differences.
    converted: String,
    /// Bursts sent so far (a rate limit's later windows remember the earlier ones).
    bursts: usize,
}

impl Outcome {
    fn verdict(&mut self, what: &str, v: Verdict) {
        match v {
            Verdict::Identical => self.identical += 1,
            Verdict::Normalised(notes) => {
                self.normalised += 1;
                for n in notes {
                    self.log.push(format!("normalised {what}: {n}"));
                }
            }
            Verdict::Differs(d) => self.differing.push(d),
        }
    }

    fn fail(&mut self, what: String) {
        self.differing.push(what);
    }
}

fn run_config(haproxy: &Path, cfg: &Path) -> Outcome {
    let mut out = Outcome {
        config: cfg.file_name().unwrap().to_string_lossy().into_owned(),
        ..Default::default()
    };
    let text = std::fs::read_to_string(cfg).unwrap();
    let script = match Script::parse(&text) {
        Ok(s) => s,
        Err(e) => {
            out.fail(format!("the config's #@ script: {e}"));
            return out;
        }
    };
    let dir = TempDir::new("convert-diff");
    let reserved: Vec<(String, ReservedPort, ReservedPort)> = script
        .frontends
        .iter()
        .map(|fe| (fe.clone(), ReservedPort::new(), ReservedPort::new()))
        .collect();
    let h = Lane {
        name: "HAProxy",
        origins: OriginSet::start(&script.origins, &script.echo),
        frontends: reserved.iter().map(|(fe, p, _)| (fe.clone(), p.addr)).collect(),
    };
    let t = Lane {
        name: "tollgate",
        origins: OriginSet::start(&script.origins, &script.echo),
        frontends: reserved.iter().map(|(fe, _, p)| (fe.clone(), p.addr)).collect(),
    };
    let env = |lane: &Lane, sock: &str| -> Vec<(String, String)> {
        let mut env = lane.origins.env();
        env.extend(lane.frontends.iter().map(|(k, a)| (k.clone(), a.to_string())));
        env.push(("SOCK".into(), dir.0.join(sock).display().to_string()));
        env
    };

    let mut haproxy_proc = match Proc::spawn(
        "haproxy",
        Command::new(haproxy)
            .arg("-f")
            .arg(cfg)
            .arg("-db")
            .envs(env(&h, "haproxy.sock")),
        &dir.0.join("haproxy.log"),
    ) {
        Ok(p) => p,
        Err(e) => {
            out.fail(e);
            return out;
        }
    };
    let h_addrs: Vec<SocketAddr> = h.frontends.values().copied().collect();
    if let Err(e) = haproxy_proc.wait_listening(&h_addrs, Duration::from_secs(20)) {
        out.fail(format!("HAProxy did not start: {e}"));
        return out;
    }

    let toml = dir.0.join("out.toml");
    // A hand-written translation instead of the converter's (to check the harness, or to
    // see what an expected output does): `DIR/<config stem>.toml` where there is one, its
    // `${VAR}`s filled in from the same environment.
    let stem = cfg.file_stem().unwrap().to_string_lossy().into_owned();
    let hand = std::env::var_os("TOLLGATE_CONVERT_DIFF_TOML")
        .map(|d| Path::new(&d).join(format!("{stem}.toml")))
        .filter(|p| p.is_file());
    let converted = match hand {
        Some(hand) => {
            let text = std::fs::read_to_string(hand).unwrap();
            let mut vars = env(&t, "tollgate.sock");
            vars.sort_by_key(|v| std::cmp::Reverse(v.0.len()));
            let expanded = vars
                .iter()
                .fold(text, |acc, (k, v)| acc.replace(&format!("${{{k}}}"), v));
            std::fs::write(&toml, &expanded).unwrap();
            expanded
        }
        None => match convert(cfg, &toml, &env(&t, "tollgate.sock"), &dir.0, &mut out) {
            Ok(c) => c,
            Err(e) => {
                out.fail(e);
                return out;
            }
        },
    };

    let mut tollgate_proc = match Proc::spawn(
        "tollgate",
        Command::new(tollgate_bin())
            .args(["run", "--config"])
            .arg(&toml)
            .current_dir(&dir.0),
        &dir.0.join("tollgate.log"),
    ) {
        Ok(p) => p,
        Err(e) => {
            out.fail(e);
            return out;
        }
    };
    let t_addrs: Vec<SocketAddr> = t.frontends.values().copied().collect();
    if let Err(e) = tollgate_proc.wait_listening(&t_addrs, Duration::from_secs(20)) {
        out.fail(format!(
            "converter bug? tollgate did not start on the converted config: {e}\n{converted}"
        ));
        return out;
    }
    drop(reserved);

    let facts = ConfigFacts::read(&text);
    for step in &script.steps {
        run_step(step, &h, &t, &facts, &mut out);
    }
    out.converted = converted;
    drop(tollgate_proc);
    drop(haproxy_proc);
    out
}

/// Runs `tollgate convert CFG -o TOML --report json` with `env`; logs what it dropped and
/// noted; the converted text, or the failure (a converter bug: its output must pass check).
fn convert(cfg: &Path, toml: &Path, env: &[(String, String)], dir: &Path, out: &mut Outcome) -> Result<String, String> {
    let run = Command::new(tollgate_bin())
        .arg("convert")
        .arg(cfg)
        .arg("-o")
        .arg(toml)
        .args(["--report", "json"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    let report: Option<serde_json::Value> = serde_json::from_str(&stdout).ok();
    if let Some(r) = &report {
        for d in r["dropped"].as_array().into_iter().flatten() {
            out.log.push(format!(
                "convert dropped line {}: {} ({})",
                d["line"],
                d["text"].as_str().unwrap_or(""),
                d["reason"].as_str().unwrap_or("")
            ));
        }
        for n in r["notes"].as_array().into_iter().flatten() {
            out.log.push(format!(
                "convert note line {}: {} ({})",
                n["line"],
                n["text"].as_str().unwrap_or(""),
                n["reason"].as_str().or(n["note"].as_str()).unwrap_or("")
            ));
        }
    }
    let converted = std::fs::read_to_string(toml).unwrap_or_default();
    if run.status.code() != Some(0) {
        return Err(format!(
            "converter bug: `tollgate convert` exited {:?}\nstdout: {stdout}\nstderr: {stderr}\noutput:\n{converted}",
            run.status.code()
        ));
    }
    if report
        .as_ref()
        .is_some_and(|r| r["check"]["ok"] != serde_json::Value::Bool(true))
    {
        return Err(format!(
            "converter bug: the report's check is not ok\n{stdout}\noutput:\n{converted}"
        ));
    }
    Ok(converted)
}

fn both<R: Send>(h: &Lane, t: &Lane, f: impl Fn(&Lane) -> R + Sync) -> (R, R) {
    std::thread::scope(|s| {
        let th = s.spawn(|| f(h));
        let tt = f(t);
        (th.join().unwrap(), tt)
    })
}

fn run_step(step: &Step, h: &Lane, t: &Lane, facts: &ConfigFacts, out: &mut Outcome) {
    match step {
        Step::Req(req) => {
            out.requests += 1;
            let hs = h.request(req);
            let ts = t.request(req);
            let v = compare(req, &hs, &ts, facts, &mut out.equivalences);
            out.verdict(&req.describe(), v);
        }
        Step::Spread { req, n, tol } => {
            out.requests += n;
            let (hs, ts) = both(h, t, |l| l.spread(req, *n));
            compare_spread(&format!("{} x{n}", req.describe()), &hs, &ts, *n, *tol, out);
        }
        Step::Single { req, n } => {
            out.requests += n;
            let (hs, ts) = both(h, t, |l| l.spread(req, *n));
            let what = format!("{} x{n}", req.describe());
            let one = |s: &Spread| s.other.is_empty() && s.answered.len() == 1 && s.recorded == s.answered;
            if !one(&hs) || !one(&ts) {
                out.fail(format!(
                    "{what}: every request should go to one origin\n  HAProxy:  {hs:?}\n  tollgate: {ts:?}"
                ));
            } else if hs.answered == ts.answered {
                out.identical += 1;
            } else {
                out.verdict(
                    &what,
                    Verdict::Normalised(vec![deliberate(
                        "hash-function",
                        format!(
                            "all to one origin: HAProxy {:?}, tollgate {:?}",
                            hs.answered.keys().collect::<Vec<_>>(),
                            ts.answered.keys().collect::<Vec<_>>()
                        ),
                    )]),
                );
            }
        }
        Step::Kill { req, origin } => {
            h.origins.kill(origin);
            t.origins.kill(origin);
            let (hk, tk) = both(h, t, |l| converge(l, req, origin));
            out.requests += hk.0.max(tk.0);
            out.log.push(format!(
                "killed {origin}: HAProxy left it out after {} requests ({} failed), tollgate after {} ({} failed)",
                hk.0, hk.1, tk.0, tk.1
            ));
            match (&hk.2, &tk.2) {
                (None, None) => out.identical += 1,
                _ => out.fail(format!(
                    "killed {origin}: HAProxy {:?}, tollgate {:?}",
                    hk.2.as_deref().unwrap_or("left it out"),
                    tk.2.as_deref().unwrap_or("left it out")
                )),
            }
        }
        Step::Burst { req, n, window } => {
            out.requests += n;
            out.bursts += 1;
            if let Some(w) = window {
                away_from_window_end(*w);
            }
            let (hs, ts) = both(h, t, |l| {
                (0..*n)
                    .map(|_| match send(l.addr(&req.fe), req) {
                        Ok(a) => a.status.to_string(),
                        Err(e) => e,
                    })
                    .collect::<Vec<_>>()
            });
            let what = format!("{} x{n}", req.describe());
            out.log.push(format!(
                "burst {what}: HAProxy {}, tollgate {}",
                hs.join(" "),
                ts.join(" ")
            ));
            let only = |v: &[String]| v.iter().all(|s| s == "200" || s == "429");
            let admitted = |v: &[String]| v.iter().filter(|s| *s == "200").count();
            if hs == ts {
                out.identical += 1;
            } else if out.bursts > 1 && only(&hs) && only(&ts) && admitted(&hs) < admitted(&ts) {
                out.verdict(
                    &what,
                    Verdict::Normalised(vec![deliberate(
                        "rate-counts-refused",
                        format!(
                            "after an earlier burst HAProxy admitted {}, tollgate {}",
                            admitted(&hs),
                            admitted(&ts)
                        ),
                    )]),
                );
            } else {
                out.fail(format!(
                    "{what}: statuses differ\n  HAProxy:  {}\n  tollgate: {}",
                    hs.join(" "),
                    ts.join(" ")
                ));
            }
        }
        Step::Wait { ms } => std::thread::sleep(Duration::from_millis(*ms)),
        Step::Echo { fe, data, from } => {
            out.requests += 1;
            // And which echo origin the bytes went through.
            let (he, te) = both(h, t, |l| (echo(l.addr(fe), *from, data), l.origins.echoed_by(data)));
            let ((he, h_took), (te, t_took)) = (he, te);
            let kind = |e: &Echo| match e {
                Echo::Refused(_) => Echo::Refused(String::new()),
                other => other.clone(),
            };
            let what = format!("tcp {fe} {:?} from {from:?}", String::from_utf8_lossy(data));
            let (hs, ts) = (
                format!("{} via {h_took:?}", show_echo(&he)),
                format!("{} via {t_took:?}", show_echo(&te)),
            );
            if kind(&he) == kind(&te) && h_took == t_took {
                out.identical += 1;
                out.log.push(format!("{what}: HAProxy {hs}, tollgate {ts}"));
            } else {
                out.fail(format!("{what}\n  HAProxy:  {hs}\n  tollgate: {ts}"));
            }
        }
    }
}

/// Waits, if the wall clock is within a second of the end of a `window_ms` period (as
/// tollgate cuts rate windows: unix time / period), until the next period has begun: a burst
/// then starts and ends in one period. What is waited for is the time itself.
fn away_from_window_end(window_ms: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let left = window_ms - now % window_ms;
    if left < 1000.min(window_ms / 2) {
        std::thread::sleep(Duration::from_millis(left + 20));
    }
}

fn show_echo(e: &Echo) -> String {
    match e {
        Echo::Echoed(b) => format!("echoed {:?}", String::from_utf8_lossy(b)),
        Echo::Partial(b) => format!("closed after {:?}", String::from_utf8_lossy(b)),
        Echo::Refused(why) => format!("refused ({why})"),
    }
}

fn compare_spread(what: &str, hs: &Spread, ts: &Spread, n: usize, tol: f64, out: &mut Outcome) {
    let origins: BTreeSet<&String> = hs
        .answered
        .keys()
        .chain(ts.answered.keys())
        .chain(hs.recorded.keys())
        .chain(ts.recorded.keys())
        .collect();
    let mut bad = Vec::new();
    for o in &origins {
        let (hp, tp) = (hs.share(o, n), ts.share(o, n));
        if (hp - tp).abs() > tol {
            bad.push(format!(
                "{o}: HAProxy {hp:.1}%, tollgate {tp:.1}% (tolerance {tol} points)"
            ));
        }
    }
    if hs.other != ts.other {
        bad.push(format!(
            "other answers: HAProxy {:?}, tollgate {:?}",
            hs.other, ts.other
        ));
    }
    for (side, s) in [("HAProxy", hs), ("tollgate", ts)] {
        if s.recorded != s.answered {
            bad.push(format!(
                "{side}: answers {:?} but origins recorded {:?}",
                s.answered, s.recorded
            ));
        }
    }
    out.log.push(format!(
        "spread {what}: HAProxy {:?}, tollgate {:?}",
        hs.answered, ts.answered
    ));
    if bad.is_empty() {
        out.identical += 1;
    } else {
        out.fail(format!("{what}:\n  {}", bad.join("\n  ")));
    }
}

/// Sends `req` until 10 answers in a row are 2xx from an origin other than `killed`
/// (bounded by KILL_LIMIT). Returns (requests sent, requests that failed, error if it never
/// left the origin out).
fn converge(l: &Lane, req: &Req, killed: &str) -> (usize, usize, Option<String>) {
    let deadline = Instant::now() + KILL_LIMIT;
    let (mut sent, mut failed, mut streak) = (0, 0, 0);
    let mut last = String::new();
    while streak < 10 {
        if Instant::now() >= deadline {
            return (
                sent,
                failed,
                Some(format!(
                    "{} still sent to {killed} (or failed) after {KILL_LIMIT:?}: last {last}",
                    l.name
                )),
            );
        }
        sent += 1;
        match send(l.addr(&req.fe), req) {
            Ok(a) if (200..300).contains(&a.status) && a.header("x-origin") != Some(killed) => streak += 1,
            other => {
                streak = 0;
                failed += 1;
                last = show_answer(&other);
                // A pause between polls, not a synchronisation: the condition is re-checked.
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    (sent, failed, None)
}

fn corpus() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(CORPUS)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cfg"))
        .collect();
    v.sort();
    v
}

#[test]
fn converted_haproxy_configs_behave_like_haproxy() {
    let Some(haproxy) = common::haproxy_or_skip() else {
        return;
    };
    let started = Instant::now();
    let configs = corpus();
    assert!(configs.len() >= 16, "{} configs in {CORPUS}", configs.len());
    let only = std::env::var("TOLLGATE_CONVERT_DIFF_ONLY").ok();
    let configs: Vec<PathBuf> = configs
        .into_iter()
        .filter(|p| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|o| p.to_string_lossy().contains(o)))
        })
        .collect();

    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Outcome>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..PARALLEL {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(cfg) = configs.get(i) else { break };
                    let o = run_config(&haproxy, cfg);
                    results.lock().unwrap().push(o);
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| a.config.cmp(&b.config));

    println!("{}", convert_support_version(&haproxy));
    let mut equivalences = BTreeSet::new();
    for r in &results {
        for l in &r.log {
            println!("{}: {l}", r.config);
        }
        equivalences.extend(r.equivalences.iter().copied());
    }
    println!("\nequivalences used (compared as one, not counted as normalised):");
    for id in &equivalences {
        let d = difference(id);
        println!("  [{}] {} — {}", d.id, d.what, d.doc);
    }
    println!("deliberate differences (DIFFERENCES), with the number of comparisons each normalised:");
    for d in DIFFERENCES.iter().filter(|d| d.kind == Kind::Deliberate) {
        let tag = format!(": [{}] ", d.id);
        let n: usize = results
            .iter()
            .map(|r| r.log.iter().filter(|l| l.contains(&tag)).count())
            .sum();
        println!("  [{}] x{n} {} — {}", d.id, d.what, d.doc);
    }
    println!(
        "\n{:<26} {:>8} {:>9} {:>10} {:>9}",
        "config", "requests", "identical", "normalised", "differing"
    );
    let mut failures = String::new();
    for r in &results {
        println!(
            "{:<26} {:>8} {:>9} {:>10} {:>9}",
            r.config,
            r.requests,
            r.identical,
            r.normalised,
            r.differing.len()
        );
        if !r.differing.is_empty() {
            let _ = writeln!(failures, "\n===== {} =====", r.config);
            if let Some((_, known)) = KNOWN_FAILURES.iter().find(|(c, _)| *c == r.config) {
                let _ = writeln!(failures, "known: {known}");
            }
            for d in &r.differing {
                let _ = writeln!(failures, "{d}");
            }
            if !r.converted.is_empty() {
                let _ = writeln!(failures, "converted config:\n{}", r.converted);
            }
        }
    }
    println!("({} configs in {:.1?})", results.len(), started.elapsed());
    assert!(failures.is_empty(), "differences not in DIFFERENCES:{failures}");
}

fn convert_support_version(haproxy: &Path) -> String {
    Command::new(haproxy)
        .arg("-v")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(str::to_string))
        .unwrap_or_default()
}
