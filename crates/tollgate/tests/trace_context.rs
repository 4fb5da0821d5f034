//! W3C Trace Context across tollgate: a client's `traceparent` and `tracestate` reach the
//! server untouched (HTTP/1.1 and HTTP/2 clients), their trace ID is logged (`trace_id`);
//! with `[frontend] trace`, a request without a readable `traceparent` starts a trace (a
//! new, valid, sampled one to the server, its `tracestate` dropped, its ID logged), one
//! with a readable one is left alone, and `sample = 0` starts none. curl as the client.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Proxy;
use common::http::{http_origin, ok};
use common::tls::TempDir;
use serde_json::Value;

const SENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const STATE: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";

fn have_curl() -> bool {
    let there = Command::new("curl").arg("--version").output().is_ok();
    if !there {
        assert!(std::env::var_os("CI").is_none(), "curl is missing under CI");
        println!("skipped: curl is not installed");
    }
    there
}

/// An h2c-capable HTTP frontend with `frontend_extra`, JSON access log with the trace ID.
fn config(log: &Path, origin: std::net::SocketAddr, frontend_extra: &str) -> String {
    format!(
        "[log]\naccess = \"{}\"\nfields = [\"path\", \"version\", \"trace_id\"]\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\n\
         default_backend = \"be\"\n{frontend_extra}\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n",
        log.display()
    )
}

/// curl GET `path` (HTTP/2 with prior knowledge if `h2`) with `headers`; the body.
fn get(proxy: &Proxy, path: &str, h2: bool, headers: &[String]) -> String {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "10"]);
    cmd.arg(if h2 { "--http2-prior-knowledge" } else { "--http1.1" });
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.arg(format!("http://{}{path}", proxy.addr)).output().unwrap();
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn lines(log: &Path, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if lines.len() >= n {
            assert_eq!(lines.len(), n, "{text}");
            return lines;
        }
        assert!(Instant::now() < deadline, "{} lines of {n}: {text}", lines.len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The values of `name` the origin got, per request.
fn got(origin: &common::http::HttpOrigin, name: &str) -> Vec<Vec<String>> {
    origin
        .requests()
        .iter()
        .map(|r| {
            r.headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
                .collect()
        })
        .collect()
}

#[test]
fn a_clients_trace_context_reaches_the_server_untouched_and_is_logged() {
    if !have_curl() {
        return;
    }
    let origin = http_origin(|_| ok("ok"));
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let proxy = Proxy::start(&config(&log, origin.addr, ""));
    let sent = [format!("traceparent: {SENT}"), format!("tracestate: {STATE}")];
    let junk = [format!("traceparent: {}", "x".repeat(300))];
    for h2 in [false, true] {
        assert_eq!(get(&proxy, "/ctx", h2, &sent), "ok");
        // Not a traceparent: forwarded all the same (tollgate is no span), logged as none.
        assert_eq!(get(&proxy, "/junk", h2, &junk), "ok");
    }
    let parents = got(&origin, "traceparent");
    let states = got(&origin, "tracestate");
    // Requests reach the origin in order (one curl after the other); log lines may not.
    for i in [0, 2] {
        assert_eq!(
            (parents[i].as_slice(), states[i].as_slice()),
            (&[SENT.to_string()][..], &[STATE.to_string()][..])
        );
        assert_eq!(parents[i + 1], ["x".repeat(300)]);
    }
    let l = lines(&log, 4);
    for v in &l {
        let want = if v["path"] == "/ctx" {
            "4bf92f3577b34da6a3ce929d0e0e4736".into()
        } else {
            Value::Null
        };
        assert_eq!(v["trace_id"], want, "{v}");
    }
    let versions: Vec<&str> = l
        .iter()
        .filter(|v| v["path"] == "/ctx")
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert!(
        versions.contains(&"HTTP/1.1") && versions.contains(&"HTTP/2.0"),
        "{versions:?}"
    );
}

#[test]
fn trace_starts_one_only_where_none_can_be_read() {
    if !have_curl() {
        return;
    }
    let origin = http_origin(|_| ok("ok"));
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let proxy = Proxy::start(&config(&log, origin.addr, "trace = { sample = 1.0 }"));
    let kept = [format!("traceparent: {SENT}"), format!("tracestate: {STATE}")];
    let bad = [
        "traceparent: 00-00000000000000000000000000000000-00f067aa0ba902b7-01".to_string(),
        format!("tracestate: {STATE}"),
    ];
    for h2 in [false, true] {
        get(&proxy, &format!("/none/{h2}"), h2, &[]);
        get(&proxy, &format!("/kept/{h2}"), h2, &kept);
        get(&proxy, &format!("/bad/{h2}"), h2, &bad);
    }
    let parents = got(&origin, "traceparent");
    let states = got(&origin, "tracestate");
    let targets: Vec<String> = origin.requests().iter().map(|r| r.target.clone()).collect();
    // Lines of two worker threads may reach the file in either order: matched by path.
    let logged = lines(&log, 6);
    for v in &logged {
        let i = targets.iter().position(|t| *t == v["path"]).unwrap();
        let parent = &parents[i];
        assert_eq!(parent.len(), 1, "one traceparent: {parent:?}");
        let p = parent[0].as_bytes();
        match v["path"].as_str().unwrap() {
            p if p.starts_with("/kept") => {
                assert_eq!(
                    (parent[0].as_str(), states[i].as_slice()),
                    (SENT, &[STATE.to_string()][..])
                );
                assert_eq!(v["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736", "{v}");
            }
            _ => {
                // Started here: version 00, sampled, a trace ID that is not all zero; the
                // state of a trace that is not this one is gone.
                assert!(
                    p.len() == 55 && p.starts_with(b"00-") && p.ends_with(b"-01"),
                    "{parent:?}"
                );
                assert!(
                    p[3..35]
                        .iter()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                );
                assert!(p[3..35].iter().any(|&b| b != b'0'));
                assert!(states[i].is_empty(), "{:?}", states[i]);
                assert_eq!(v["trace_id"], parent[0][3..35], "the log names the trace started: {v}");
            }
        }
    }
    let ids: std::collections::BTreeSet<&str> = logged.iter().map(|v| v["trace_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 5, "a new trace each time, one kept twice: {ids:?}");
}

#[test]
fn sample_zero_starts_none_and_tcp_or_bad_samples_are_refused() {
    if !have_curl() {
        return;
    }
    let origin = http_origin(|_| ok("ok"));
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let proxy = Proxy::start(&config(&log, origin.addr, "trace = { sample = 0.0 }"));
    get(&proxy, "/", false, &[]);
    assert_eq!(got(&origin, "traceparent"), [Vec::<String>::new()]);
    assert_eq!(lines(&log, 1)[0]["trace_id"], Value::Null);
    for (extra, mode, why) in [
        ("trace = { sample = 1.5 }", "http", "from 0.0 to 1.0"),
        ("trace = { sample = 0.5 }", "tcp", "http-mode frontend"),
        ("trace = {}", "http", "sample"),
    ] {
        let text = format!(
            "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"{mode}\"\ndefault_backend = \"be\"\n{extra}\n\
             [[backend]]\nname = \"be\"\nmode = \"{mode}\"\n[[backend.server]]\nname = \"o\"\naddress = \"127.0.0.1:1\"\n"
        );
        let e = tollgate::config::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(
            e.contains("frontend[0].trace") && e.contains(why),
            "{extra} ({mode}): {e}"
        );
    }
}
