//! `tollgate convert` as a command: exit statuses (0 converted and checked, 2 malformed input
//! or `--strict` with a dropped line, 64 usage), where the TOML and the report go, the
//! userlist's htpasswd file written beside the output (mode 0600), hostile input refused with
//! `FILE:LINE` and nothing written.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Output};

use common::tls::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

const CFG: &str = "\
global
    maxconn 500
defaults
    mode http
    timeout client 10s
    timeout server 10s
userlist ops
    user alice password $2y$05$C4l2Yw0gbZV5kKq0yVMSUeN8hO1Y1mSWQ7rXo9Vzy9y0N5gVX1D0K
frontend web
    bind 127.0.0.1:18080
    http-request auth realm Ops if { path_beg /ops } !{ http_auth(ops) }
    http-request set-var(txn.x) str(y)
    default_backend app
backend app
    server a 127.0.0.1:18081 check
";

fn convert(dir: &TempDir, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("convert")
        .args(args)
        .current_dir(&dir.0)
        .env_clear()
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn writes_toml_htpasswd_and_a_report() {
    let dir = TempDir::new();
    std::fs::write(dir.0.join("haproxy.cfg"), CFG).unwrap();
    let out = convert(&dir, &["haproxy.cfg", "-o", "tollgate.toml", "--report", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["check"]["ok"], true, "{report}");
    let dropped = report["dropped"].as_array().unwrap();
    assert_eq!(dropped.len(), 1, "{report}");
    assert_eq!(dropped[0]["line"], 12);
    let toml = std::fs::read_to_string(dir.0.join("tollgate.toml")).unwrap();
    assert!(toml.contains("users_file = \"ops.htpasswd\""), "{toml}");
    assert!(
        toml.contains("# UNCONVERTED haproxy.cfg:12: http-request set-var(txn.x) str(y)"),
        "{toml}"
    );
    let users = dir.0.join("ops.htpasswd");
    assert!(std::fs::read_to_string(&users).unwrap().starts_with("alice:$2y$05$"));
    assert_eq!(std::fs::metadata(&users).unwrap().permissions().mode() & 0o777, 0o600);
    // `tollgate check` agrees with what convert said.
    let check = Command::new(BIN)
        .args(["check", "--config"])
        .arg(dir.0.join("tollgate.toml"))
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", text(&check.stderr));
}

#[test]
fn stdout_and_text_report() {
    let dir = TempDir::new();
    std::fs::write(dir.0.join("haproxy.cfg"), CFG).unwrap();
    let out = convert(&dir, &["haproxy.cfg"]);
    // Without --output the htpasswd file is not written, so the check cannot read it: 1.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("[[frontend]]"));
    let err = text(&out.stderr);
    assert!(
        err.contains("haproxy.cfg:12: dropped: http-request set-var(txn.x) str(y)"),
        "{err}"
    );
    assert!(
        err.contains("check: the output does not pass `tollgate check`"),
        "{err}"
    );
    assert!(err.contains("ops.htpasswd is not written without --output"), "{err}");
}

#[test]
fn strict_refuses_and_writes_nothing() {
    let dir = TempDir::new();
    std::fs::write(dir.0.join("haproxy.cfg"), CFG).unwrap();
    let out = convert(&dir, &["haproxy.cfg", "-o", "tollgate.toml", "--strict"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("haproxy.cfg:12: no equivalent"),
        "{}",
        text(&out.stderr)
    );
    assert!(!dir.0.join("tollgate.toml").exists());
}

#[test]
fn malformed_input_names_file_and_line() {
    let dir = TempDir::new();
    let cases = [
        (
            "global\n  maxconn 10\nfrontend f\n  bind \"127.0.0.1:1\n",
            "bad.cfg:4: unterminated double quote",
        ),
        (
            "frontend f\n.if defined(X)\n  bind :1\n",
            "bad.cfg:3: .if at line 2 has no .endif",
        ),
        ("  bind :1\n", "bad.cfg:1: `bind` is outside any section"),
        (
            "backend b\n  server s1\n",
            "bad.cfg:2: `server` needs a name and an address",
        ),
        ("global\n  user \"${A\n", "bad.cfg:2: `${A` has no closing brace"),
        (
            "global\n  x \\xZZ\n",
            "bad.cfg:2: `\\xZZ` is not a two-digit hex escape",
        ),
    ];
    for (cfg, want) in cases {
        std::fs::write(dir.0.join("bad.cfg"), cfg).unwrap();
        let out = convert(&dir, &["bad.cfg", "-o", "out.toml"]);
        assert_eq!(out.status.code(), Some(2), "{cfg:?}");
        assert!(text(&out.stderr).starts_with(want), "{cfg:?}: {}", text(&out.stderr));
        assert!(!dir.0.join("out.toml").exists());
    }
    // Not a configuration at all: binary bytes and a missing file.
    std::fs::write(dir.0.join("bin.cfg"), [0u8, 159, 146, 150, b'\n', b'{']).unwrap();
    assert_eq!(convert(&dir, &["bin.cfg", "-o", "out.toml"]).status.code(), Some(2));
    let out = convert(&dir, &["missing.cfg"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("missing.cfg: "), "{}", text(&out.stderr));
    assert_eq!(convert(&dir, &[]).status.code(), Some(64));
}

#[test]
fn files_in_order_and_environment() {
    let dir = TempDir::new();
    std::fs::create_dir(dir.0.join("conf.d")).unwrap();
    std::fs::write(
        dir.0.join("conf.d/10-backend.cfg"),
        "backend app\n  mode http\n  server a \"${APP}\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.0.join("conf.d/00-front.cfg"),
        "frontend web\n  mode http\n  bind 127.0.0.1:18082\n  default_backend app\n",
    )
    .unwrap();
    std::fs::write(dir.0.join("conf.d/notes.txt"), "not read\n").unwrap();
    let out = Command::new(BIN)
        .args(["convert", "conf.d", "-o", "out.toml"])
        .current_dir(&dir.0)
        .env_clear()
        .env("APP", "127.0.0.1:18083")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let toml = std::fs::read_to_string(dir.0.join("out.toml")).unwrap();
    assert!(toml.contains("address = \"127.0.0.1:18083\""), "{toml}");
    assert!(toml.find("conf.d/00-front.cfg").unwrap() < toml.find("conf.d/10-backend.cfg").unwrap());
}
