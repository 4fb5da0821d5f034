//! `tollgate convert` on a corpus of real HAProxy configurations: every one converts (exit
//! 0 or 1, never 2, never a crash), the TOML and the JSON report it writes match the
//! snapshots stored next to it, and the configurations that name no file outside the corpus
//! convert to TOML that `check` accepts. A second conversion of each input must give the same
//! bytes.
//!
//! The corpus is `tests/convert/corpus/` (its README says where each file comes from):
//! HAProxy's own `examples/`, configurations taken from its regression tests, and configs
//! written the way operators write them. A `*.cfg` directly in one of those directories is one
//! input; a directory below them holding `*.cfg` files (`operators/multi-file/`) is one input
//! too, passed as the directory. `X.cfg` has its snapshots in `X.toml` and `X.report.json`, a
//! directory `D` in `D.toml` and `D.report.json`; a file the converter writes beside its output
//! (a userlist's htpasswd file `F`) in `X.F`. `UPDATE_SNAPSHOTS=1` writes them (and removes the
//! snapshots of inputs that are gone) instead of comparing.
//!
//! Each input is converted in a temporary directory of its own holding a copy of its corpus
//! directory, the output written next to the input: the converter keeps a relative path (`crt
//! certs/site.pem`) as written, and tollgate resolves it against the TOML file's directory, so
//! `check` finds the corpus's test certificates. The child runs in the copy's root with relative paths, in a fixed
//! environment (nothing inherited; `APP_HOST` and `ENABLE_CANARY` set, which
//! `operators/named-defaults-env.cfg` reads), so the snapshots do not depend on the machine.
//! The one thing `check` looks up on the machine is `[global] user` / `group`: a refusal
//! saying such a name is not on this system is left out of the report before comparing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Map, Value};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// The directories of the corpus holding inputs.
const SOURCES: &[&str] = &["haproxy-examples", "haproxy-reg-tests", "operators"];

/// Inputs that name a file the corpus does not have (so `check` may refuse the output),
/// and what it is. Every other input's output must pass `check`.
const OUTSIDE_FILES: &[(&str, &str)] = &[
    ("haproxy-examples/basic-config-edge.cfg", "crt pub1.pem"),
    ("haproxy-examples/games.cfg", "lua-load lua/trisdemo.lua"),
    ("haproxy-examples/keylog-test.cfg", "crt common.pem"),
    (
        "haproxy-examples/wurfl-example.cfg",
        "wurfl-data-file /usr/share/wurfl/wurfl.zip",
    ),
    (
        "haproxy-reg-tests/http-rules_http_return.cfg",
        "return file ./1k.txt, lf-file ./lf-file.txt",
    ),
    (
        "haproxy-reg-tests/http-rules_map_redirect.cfg",
        "map_str(./map_redirect.map), map_dom(./map_redirect-be.map)",
    ),
];

/// Inputs whose output `check` refuses because of the input itself, and why: no converter
/// could make a config tollgate serves from them.
const CHECK_REFUSES: &[(&str, &str)] = &[
    ("haproxy-reg-tests/checks_agent-check.cfg", "backends only: no frontend"),
    (
        "haproxy-reg-tests/checks_http-check-expect.cfg",
        "backends only: no frontend",
    ),
    (
        "haproxy-reg-tests/checks_tcp-check_multiple_ports.cfg",
        "backends only: no frontend",
    ),
    ("haproxy-reg-tests/checks_unique_id.cfg", "backends only: no frontend"),
    (
        "haproxy-reg-tests/checks_tls_health_checks_h2.cfg",
        "backends only: no frontend",
    ),
    (
        "haproxy-reg-tests/webstats_webstats-scope-and-post-change.cfg",
        "a stats page and backends: no frontend",
    ),
    ("haproxy-examples/traces.cfg", "a traces section only: no frontend"),
    (
        "haproxy-reg-tests/ssl_ssl_client_auth.cfg",
        "HAProxy's test client certificates are X.509 v1 and its CRL v1, which rustls refuses",
    ),
];

/// The child's whole environment.
const ENV: &[(&str, &str)] = &[("LC_ALL", "C"), ("APP_HOST", "10.40.0.21"), ("ENABLE_CANARY", "1")];

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/convert/corpus")
}

/// One conversion: a `.cfg` file or a directory of them, relative to the corpus root.
struct Input {
    rel: String,
    dir: bool,
}

impl Input {
    /// The snapshot path (relative) with `ext`: `X.cfg` → `X.<ext>`, directory `D` → `D.<ext>`.
    fn snapshot(&self, ext: &str) -> String {
        let stem = self.rel.strip_suffix(".cfg").unwrap_or(&self.rel);
        format!("{stem}.{ext}")
    }

    /// Where the output goes, relative: next to the input (inside it for a directory).
    fn output(&self) -> String {
        let name = Path::new(&self.rel).file_stem().unwrap().to_str().unwrap();
        if self.dir {
            format!("{}/{name}.out.toml", self.rel)
        } else {
            let parent = Path::new(&self.rel).parent().unwrap().to_str().unwrap();
            format!("{parent}/{name}.out.toml")
        }
    }

    fn check_must_pass(&self) -> bool {
        let listed = |list: &[(&str, &str)]| list.iter().any(|(p, _)| *p == self.rel);
        self.rel.starts_with("operators/") || !(listed(OUTSIDE_FILES) || listed(CHECK_REFUSES))
    }

    /// The directory of the corpus it is in (`operators`), copied for its conversion.
    fn source(&self) -> &str {
        self.rel.split('/').next().unwrap()
    }

    /// The snapshot of a file the converter wrote beside its output (`rel` relative to the
    /// output's directory): `X.<rel with / as _>`.
    fn extra_snapshot(&self, rel: &str) -> String {
        self.snapshot(&rel.replace('/', "_"))
    }
}

fn sorted_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn has_cfg(dir: &Path) -> bool {
    sorted_names(dir).iter().any(|n| n.ends_with(".cfg"))
}

/// Every input, in a stable order.
fn inputs(root: &Path) -> Vec<Input> {
    let mut out = Vec::new();
    for source in SOURCES {
        for name in sorted_names(&root.join(source)) {
            let path = root.join(source).join(&name);
            let rel = format!("{source}/{name}");
            if path.is_dir() {
                if has_cfg(&path) {
                    out.push(Input { rel, dir: true });
                }
            } else if name.ends_with(".cfg") {
                out.push(Input { rel, dir: false });
            }
        }
    }
    out
}

/// Snapshot files (relative paths): every file directly in a source directory that is not
/// a `.cfg`, to find those whose input is gone.
fn snapshots(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for source in SOURCES {
        for name in sorted_names(&root.join(source)) {
            if root.join(source).join(&name).is_file() && !name.ends_with(".cfg") {
                out.push(format!("{source}/{name}"));
            }
        }
    }
    out
}

/// Copies a source directory under `to`, its snapshots left out.
fn copy_tree(from: &Path, to: &Path, top: bool) {
    std::fs::create_dir_all(to).unwrap();
    for name in sorted_names(from) {
        let (src, dst) = (from.join(&name), to.join(&name));
        if src.is_dir() {
            copy_tree(&src, &dst, false);
        } else if !top || name.ends_with(".cfg") {
            std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
        }
    }
}

/// Every file under `dir`, relative to it.
fn files_under(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    for name in sorted_names(dir) {
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        if dir.join(&name).is_dir() {
            files_under(&dir.join(&name), &rel, out);
        } else {
            out.push(rel);
        }
    }
}

/// A directory under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let dir = std::env::temp_dir().join(format!("tollgate-convert-corpus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Replaces the temporary directory's path (as given and canonical) by `$TMP`.
fn scrub(text: &str, tmp: &[String]) -> String {
    let mut text = text.to_string();
    for t in tmp {
        text = text.replace(t.as_str(), "$TMP");
    }
    text
}

/// The value with every object's keys in order.
fn sort_keys(v: Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let mut sorted = Map::new();
            for (k, v) in entries {
                sorted.insert(k, sort_keys(v));
            }
            Value::Object(sorted)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sort_keys).collect()),
        other => other,
    }
}

/// Whether a `check` error is only about a user or group this machine does not have.
fn machine_dependent(error: &str) -> bool {
    (error.contains("no user `") || error.contains("no group `")) && error.contains("on this system")
}

/// Drops the machine-dependent `check` errors; `ok` follows when nothing else is left.
fn normalize_check(report: &mut Value) {
    let Some(check) = report.get_mut("check").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(errors) = check.get_mut("errors").and_then(Value::as_array_mut) else {
        return;
    };
    let before = errors.len();
    errors.retain(|e| !e.as_str().is_some_and(machine_dependent));
    if errors.len() < before && errors.is_empty() {
        check.insert("ok".into(), Value::Bool(true));
    }
}

/// What one conversion gave.
struct Outcome {
    /// The snapshots this input has (relative), written or compared.
    snapshots: Vec<String>,
    failures: Vec<String>,
    check_failure: Option<String>,
    dropped: usize,
    notes: usize,
    summary: String,
}

/// The first line where `want` and `got` differ, for a mismatch message.
fn first_difference(want: &str, got: &str) -> String {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    for i in 0..w.len().max(g.len()) {
        let (a, b) = (w.get(i).copied(), g.get(i).copied());
        if a != b {
            return format!(
                "line {}: snapshot {:?}, now {:?}",
                i + 1,
                a.unwrap_or("<end>"),
                b.unwrap_or("<end>")
            );
        }
    }
    "trailing newline".into()
}

/// Compares `got` with the snapshot at `rel` (or writes it); a failure message if it differs.
fn snapshot(root: &Path, rel: &str, got: &str, update: bool) -> Option<String> {
    let path = root.join(rel);
    if update {
        std::fs::write(&path, got).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return None;
    }
    match std::fs::read_to_string(&path) {
        Err(_) => Some(format!(
            "{rel}: no snapshot; create it with `UPDATE_SNAPSHOTS=1 cargo test -p tollgate --test convert_corpus`"
        )),
        Ok(want) if want == got => None,
        Ok(want) => Some(format!(
            "{rel}: differs from the snapshot ({}); if the change is intended, rerun with UPDATE_SNAPSHOTS=1 and review the diff",
            first_difference(&want, got)
        )),
    }
}

/// `tollgate convert INPUT -o OUTPUT --report json` in `work`, in the fixed environment.
fn run(work: &Path, input: &Input, output: &str) -> std::process::Output {
    Command::new(BIN)
        .current_dir(work)
        .env_clear()
        .envs(ENV.iter().copied())
        .args(["convert", &input.rel, "-o", output, "--report", "json"])
        .output()
        .unwrap_or_else(|e| panic!("{BIN}: {e}"))
}

/// Converts `input` in `work`, a directory of its own holding a copy of its source directory,
/// and compares (or writes) its snapshots.
fn convert(root: &Path, work: &Path, tmp: &[String], input: &Input, update: bool) -> Outcome {
    copy_tree(&root.join(input.source()), &work.join(input.source()), true);
    let mut before = Vec::new();
    files_under(work, "", &mut before);
    let mut outcome = Outcome {
        snapshots: vec![input.snapshot("toml"), input.snapshot("report.json")],
        failures: Vec::new(),
        check_failure: None,
        dropped: 0,
        notes: 0,
        summary: String::new(),
    };
    let output = input.output();
    let result = run(work, input, &output);
    let stderr = String::from_utf8_lossy(&result.stderr);
    let first_stderr = stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(3)
        .collect::<Vec<_>>()
        .join(" | ");
    let status = match result.status.code() {
        Some(code @ (0 | 1)) => code,
        Some(code) => {
            outcome
                .failures
                .push(format!("{}: exit {code} (want 0 or 1): {first_stderr}", input.rel));
            return outcome;
        }
        None => {
            outcome.failures.push(format!(
                "{}: killed by a signal ({}): {first_stderr}",
                input.rel, result.status
            ));
            return outcome;
        }
    };

    let toml = match std::fs::read_to_string(work.join(&output)) {
        Ok(text) => scrub(&text, tmp),
        Err(e) => {
            outcome
                .failures
                .push(format!("{}: exit {status} but no output {output}: {e}", input.rel));
            return outcome;
        }
    };
    // Files the converter wrote beside its output (a userlist's htpasswd file): snapshots too.
    let mut after = Vec::new();
    files_under(work, "", &mut after);
    let out_dir = Path::new(&output).parent().unwrap().to_str().unwrap().to_string();
    let extras: Vec<(String, &String, Vec<u8>)> = after
        .iter()
        .filter(|f| **f != output && !before.contains(f))
        .map(|f| {
            let rel = f.strip_prefix(&format!("{out_dir}/")).unwrap_or(f);
            (input.extra_snapshot(rel), f, std::fs::read(work.join(f)).unwrap())
        })
        .collect();
    for (snap, _, bytes) in &extras {
        outcome.snapshots.push(snap.clone());
        if let Some(f) = snapshot(root, snap, &scrub(&String::from_utf8_lossy(bytes), tmp), update) {
            outcome.failures.push(f);
        }
    }

    // The same input gives the same bytes: a second run must write what the first did.
    let again = run(work, input, &output);
    let toml_again = std::fs::read_to_string(work.join(&output)).map(|t| scrub(&t, tmp));
    let extras_again = extras
        .iter()
        .all(|(_, path, bytes)| std::fs::read(work.join(path)).ok().as_ref() == Some(bytes));
    if again.stdout != result.stdout || toml_again.as_ref().ok() != Some(&toml) || !extras_again {
        outcome.failures.push(format!(
            "{}: a second conversion gave a different output or report (not deterministic)",
            input.rel
        ));
    }
    if let Some(f) = snapshot(root, &input.snapshot("toml"), &toml, update) {
        outcome.failures.push(f);
    }

    let stdout = scrub(&String::from_utf8_lossy(&result.stdout), tmp);
    let mut report: Value = match serde_json::from_str(&stdout) {
        Ok(v) => v,
        Err(e) => {
            outcome.failures.push(format!(
                "{}: the report on stdout is not one JSON object ({e}): {:?}",
                input.rel,
                stdout.chars().take(200).collect::<String>()
            ));
            return outcome;
        }
    };
    normalize_check(&mut report);
    let report = sort_keys(report);
    let mut pretty = serde_json::to_string_pretty(&report).unwrap();
    pretty.push('\n');
    if let Some(f) = snapshot(root, &input.snapshot("report.json"), &pretty, update) {
        outcome.failures.push(f);
    }

    let count = |key: &str| report.get(key).and_then(Value::as_array).map(Vec::len);
    match (count("dropped"), count("notes")) {
        (Some(d), Some(n)) => (outcome.dropped, outcome.notes) = (d, n),
        _ => outcome
            .failures
            .push(format!("{}: the report has no `dropped` or `notes` array", input.rel)),
    }
    let check = &report["check"];
    let ok = check["ok"].as_bool();
    if ok.is_none() {
        outcome
            .failures
            .push(format!("{}: the report has no `check.ok`", input.rel));
    }
    let errors: Vec<&str> = check["errors"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if ok == Some(false) && input.check_must_pass() {
        outcome.check_failure = Some(format!(
            "{}: check refused the output: {}",
            input.rel,
            errors.join("; ")
        ));
    }
    outcome.summary = format!(
        "{}: exit {status}, {} line(s), {} dropped, {} note(s), check {}",
        input.rel,
        report["lines"],
        outcome.dropped,
        outcome.notes,
        match ok {
            Some(true) => "ok".to_string(),
            _ => format!("refused ({} error(s))", errors.len()),
        }
    );
    outcome
}

#[test]
fn every_corpus_config_converts_as_in_its_snapshot() {
    let root = corpus_root();
    let update = std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| v == "1");
    let inputs = inputs(&root);
    assert!(inputs.len() > 40, "the corpus has only {} inputs", inputs.len());
    for (path, _) in OUTSIDE_FILES {
        assert!(
            root.join(path).is_file(),
            "OUTSIDE_FILES names {path}, not in the corpus"
        );
    }

    let tmp = TempDir::new();
    let mut tmp_names = vec![tmp.0.to_str().unwrap().to_string()];
    if let Ok(canonical) = tmp.0.canonicalize()
        && canonical != tmp.0
    {
        tmp_names.push(canonical.to_str().unwrap().to_string());
    }

    // The conversions in parallel, each thread taking the next input.
    let next = AtomicUsize::new(0);
    let outcomes: Mutex<Vec<(usize, Outcome)>> = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(4, |n| n.get()).min(16);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(input) = inputs.get(i) else { break };
                    let work = tmp.0.join(i.to_string());
                    let outcome = convert(&root, &work, &tmp_names, input, update);
                    outcomes.lock().unwrap().push((i, outcome));
                }
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap();
    outcomes.sort_by_key(|(i, _)| *i);

    let mut failures = Vec::new();
    let mut check_failures = Vec::new();
    let (mut dropped, mut notes) = (0, 0);
    for (_, o) in &outcomes {
        if !o.summary.is_empty() {
            println!("{}", o.summary);
        }
        failures.extend(o.failures.iter().cloned());
        check_failures.extend(o.check_failure.iter().cloned());
        dropped += o.dropped;
        notes += o.notes;
    }

    // Snapshots whose input is gone (or whose extra file the converter no longer writes).
    let wanted: Vec<String> = outcomes.iter().flat_map(|(_, o)| o.snapshots.iter().cloned()).collect();
    for stale in snapshots(&root).into_iter().filter(|s| !wanted.contains(s)) {
        if update {
            std::fs::remove_file(root.join(&stale)).unwrap();
        } else {
            failures.push(format!(
                "{stale}: a snapshot with no input; UPDATE_SNAPSHOTS=1 removes it"
            ));
        }
    }

    println!(
        "convert corpus: {} inputs, {dropped} dropped line(s), {notes} note(s), {} refused by check where it must pass{}",
        outcomes.len(),
        check_failures.len(),
        if update { " (snapshots written)" } else { "" }
    );
    let mut message = String::new();
    if !failures.is_empty() {
        writeln!(message, "{} failure(s):", failures.len()).unwrap();
        for f in &failures {
            writeln!(message, "  {f}").unwrap();
        }
    }
    if !check_failures.is_empty() {
        writeln!(message, "{} output(s) refused by check:", check_failures.len()).unwrap();
        for f in &check_failures {
            writeln!(message, "  {f}").unwrap();
        }
    }
    assert!(message.is_empty(), "{message}");
}
