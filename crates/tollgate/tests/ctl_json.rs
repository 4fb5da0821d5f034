//! The JSON answers of `tollgate ctl ... --json`, `tollgate status --json` and
//! `tollgate reload --json`, as docs/runtime-api.md documents them ("JSON answers"): each
//! documented example (a fenced `json ctl ARGS` block) is checked against the real answer
//! of a running master — every key the example has is in the answer, with a value of the
//! same JSON type, recursively (an array's first element against the answer's elements) —
//! so a script written against the docs reads what tollgate writes. Every command of the
//! docs' list has an example. `TOLLGATE_DUMP_JSON=DIR` writes every real answer to DIR
//! first (to write the examples from).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::http::{http_origin, ok};
use common::tls::{Ca, cert_entry};
use master_support::{BIN, Master, TempDir, global};
use serde_json::Value;

const DOC: &str = include_str!("../../../docs/runtime-api.md");

/// The documented examples: (the command's arguments, the example).
fn examples() -> Vec<(Vec<String>, Value)> {
    let mut out = Vec::new();
    let mut lines = DOC.lines();
    while let Some(line) = lines.next() {
        let Some(args) = line.strip_prefix("```json ctl ") else {
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| !l.starts_with("```")).collect();
        let example = serde_json::from_str(&body.join("\n"))
            .unwrap_or_else(|e| panic!("the example for `{args}` is not JSON: {e}"));
        out.push((args.split_whitespace().map(str::to_string).collect(), example));
    }
    out
}

/// Where `real` lacks what `doc` promises, or has another type there (paths, for the message).
fn differences(doc: &Value, real: &Value, path: &str, out: &mut Vec<String>) {
    match (doc, real) {
        (Value::Object(d), Value::Object(r)) => {
            for (k, v) in d {
                match r.get(k) {
                    Some(rv) => differences(v, rv, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k}: missing")),
                }
            }
        }
        // One element: a list, every answered element has its shape. More: a tuple
        // (`["sessions_total", 2]`), element by element.
        (Value::Array(d), Value::Array(r)) if d.len() == 1 => {
            for (i, rv) in r.iter().enumerate() {
                differences(&d[0], rv, &format!("{path}[{i}]"), out);
            }
        }
        (Value::Array(d), Value::Array(r)) => {
            if !d.is_empty() && d.len() != r.len() {
                out.push(format!(
                    "{path}: a tuple of {} documented, {} answered",
                    d.len(),
                    r.len()
                ));
            }
            for (i, (dv, rv)) in d.iter().zip(r).enumerate() {
                differences(dv, rv, &format!("{path}[{i}]"), out);
            }
        }
        // `null` in an example: the key is there, its value may be anything (or null).
        (Value::Null, _) => {}
        // A number documented as an integer may not come as a float, and the other way.
        (Value::Number(d), Value::Number(r)) if d.is_f64() != r.is_f64() => {
            out.push(format!("{path}: {} documented, {} answered", d, r));
        }
        (d, r) if std::mem::discriminant(d) == std::mem::discriminant(r) => {}
        (d, r) => out.push(format!("{path}: documented {d}, answered {r}")),
    }
}

fn run(master: &Master, args: &[String]) -> Value {
    let mut cmd = Command::new(BIN);
    match args.first().map(String::as_str) {
        Some("status") | Some("reload") => cmd.arg(&args[0]).args(["--json", "--socket"]).arg(&master.socket),
        _ => cmd.args(["ctl", "--json", "--socket"]).arg(&master.socket).args(args),
    };
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if let Ok(dir) = std::env::var("TOLLGATE_DUMP_JSON") {
        std::fs::write(
            format!("{dir}/{}.json", args.join("_").replace('/', "-")),
            text.as_bytes(),
        )
        .unwrap();
    }
    serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}): {text} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn every_documented_answer_has_the_documented_shape() {
    let origin = http_origin(|_| ok("hello"));
    let certs = common::tls::TempDir::new();
    let leaf = Ca::new("ca").leaf(&["web.example"], "web", false).write(&certs, "web");
    let dir = TempDir::new("ctl-json");
    let text = format!(
        "{}\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"app\"\n\
         [[frontend.limit]]\nname = \"per-client\"\nkey = \"source\"\nrate = \"1000/10s\"\n\
         [[frontend]]\nname = \"secure\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"app\"\n\
         [frontend.tls]\nalpn = [\"http/1.1\"]\n{}\n\
         [[backend]]\nname = \"app\"\nmode = \"http\"\n[[backend.server]]\nname = \"a\"\naddress = \"{}\"\n",
        global(&dir.0, ""),
        cert_entry(&leaf, true),
        origin.addr
    );
    let master = Master::start(dir, &text, &[]);
    // Traffic, a connection held open (a session to list), a malformed request (an error).
    let mut held = TcpStream::connect(master.addr).unwrap();
    held.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    held.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    assert!(held.read(&mut buf).unwrap() > 0);
    let mut bad = TcpStream::connect(master.addr).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    bad.write_all(b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n").unwrap();
    let _ = bad.read(&mut buf);

    let examples = examples();
    let documented: Vec<String> = examples.iter().map(|(a, _)| a.join(" ")).collect();
    let commands = [
        "status",
        "show servers",
        "show info",
        "show stat",
        "show sessions",
        "show errors",
        "show budgets",
        "show certs",
        "show table per-client",
        "explain --frontend web GET http://t/",
        "set server app/a weight 1",
        "reload",
    ];
    if std::env::var_os("TOLLGATE_DUMP_JSON").is_some() {
        // Writing the docs: every command's real answer, to its own file.
        for command in commands {
            run(
                &master,
                &command.split_whitespace().map(str::to_string).collect::<Vec<_>>(),
            );
        }
    }
    for command in commands {
        assert!(
            documented
                .iter()
                .any(|d| d == command || d.starts_with(&format!("{command} "))),
            "no documented JSON answer for `{command}`: {documented:?}"
        );
    }
    for (args, example) in &examples {
        let real = run(&master, args);
        let mut wrong = Vec::new();
        differences(example, &real, "", &mut wrong);
        assert!(wrong.is_empty(), "`{}`: {wrong:#?}\nanswered: {real:#}", args.join(" "));
    }
    drop(held);
}
