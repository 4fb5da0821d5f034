//! The converter on small configurations: `FILE:LINE` errors for malformed input, nothing
//! dropped silently, and the output tollgate's own parser accepts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use super::{IssueKind, convert_text};

fn err(text: &str) -> String {
    convert_text(text, "h.cfg")
        .expect_err("malformed input must be refused")
        .to_string()
}

/// Converts and checks the output parses as a tollgate config.
fn ok(text: &str) -> super::Conversion {
    let c = convert_text(text, "h.cfg").unwrap();
    if let Err(e) = crate::config::parse(&c.toml, "out.toml") {
        panic!("the output does not parse: {e}\n{}", c.toml);
    }
    c
}

#[test]
fn malformed_lines_name_file_and_line() {
    assert_eq!(err("global\n  maxconn \"10\n"), "h.cfg:2: unterminated double quote");
    assert_eq!(err("global\n.endif\n"), "h.cfg:2: .endif without .if");
    assert_eq!(
        err("  mode http\n"),
        "h.cfg:1: `mode` is outside any section (global, defaults, frontend, backend, listen, ...)"
    );
    assert_eq!(
        err("backend b\n  server s1\n"),
        "h.cfg:2: `server` needs a name and an address"
    );
    assert_eq!(err("frontend\n"), "h.cfg:1: `frontend` needs a name");
    assert_eq!(
        err("global\n.if nope(1)\n.endif\n"),
        "h.cfg:2: unknown condition predicate `nope`"
    );
    assert_eq!(
        err("frontend f from missing\n"),
        "h.cfg:1: no defaults section named `missing` before this line"
    );
    assert_eq!(err("global\n  maxconn many\n"), "h.cfg:2: `maxconn` needs a number");
    assert_eq!(
        err("backend b\n  server s 1.2.3.4:80 weight x\n"),
        "h.cfg:2: `weight` needs a number, not `x`"
    );
}

#[test]
fn routes_from_acls_and_rules() {
    let c = ok("defaults\n  mode http\n  timeout client 5s\n  timeout server 5s\n\
        frontend f\n  bind 127.0.0.1:8080\n  acl api path_beg /api/\n  acl get method GET HEAD\n\
        http-request deny if { src 192.0.2.0/24 }\n  use_backend api if api get || { path /x }\n\
        use_backend api unless api\n  default_backend web\n\
        backend api\n  server a 127.0.0.1:1\nbackend web\n  server w 127.0.0.1:2\n");
    let t = &c.toml;
    assert!(t.contains("source = \"192.0.2.0/24\"\ndeny = 403"), "{t}");
    assert!(
        t.contains("path_prefix = \"/api/\"\nmethod = [\"GET\", \"HEAD\"]\nbackend = \"api\""),
        "{t}"
    );
    assert!(t.contains("path = \"/x\"\nbackend = \"api\""), "{t}");
    assert!(
        t.contains("not = { path_prefix = \"/api/\" }\nbackend = \"api\""),
        "{t}"
    );
    assert!(t.contains("default_backend = \"web\""), "{t}");
    assert!(t.contains("forwarded = \"none\""), "no option forwardfor: {t}");
    assert_eq!(c.dropped().count(), 0, "{:?}", c.issues);
}

#[test]
fn named_defaults_env_and_conditionals() {
    let text = "defaults base\n  mode http\n  timeout connect 3s\n\
        defaults web from base\n  option forwardfor\n\
        .if defined(NOT_SET_ANYWHERE)\nfrontend hidden\n  bind :1\n.else\n\
        frontend f from web\n  bind \"${NOT_SET_ANYWHERE-127.0.0.1:8081}\"\n  default_backend b\n.endif\n\
        backend b from web\n  server s 127.0.0.1:2\n";
    let c = ok(text);
    assert!(c.toml.contains("bind = [\"127.0.0.1:8081\"]"), "{}", c.toml);
    assert!(c.toml.contains("forwarded = \"x-forwarded-for\""));
    assert!(c.toml.contains("connect = \"3s\""));
    assert!(!c.toml.contains("hidden"));
}

#[test]
fn nothing_is_dropped_silently() {
    let c = ok(
        "frontend f\n  bind 127.0.0.1:1\n  mode http\n  frobnicate now\n  http-request set-var(txn.x) str(y)\n  default_backend b\n\
        backend b\n  mode http\n  server s 127.0.0.1:2 frob 3\n  http-reuse always\n",
    );
    let dropped: Vec<u32> = c.dropped().map(|i| i.line).collect();
    assert_eq!(dropped, [4, 5, 9, 10], "{:?}", c.issues);
    for line in ["frobnicate now", "http-reuse always", "set-var(txn.x)"] {
        assert!(
            c.toml.contains("UNCONVERTED h.cfg") && c.toml.contains(line),
            "{line} not kept: {}",
            c.toml
        );
    }
    assert!(
        c.issues
            .iter()
            .all(|i| i.kind == IssueKind::Dropped || !i.reason.is_empty())
    );
}

#[test]
fn servers_checks_and_limits() {
    let c = ok("defaults\n  mode http\nfrontend f\n  bind 127.0.0.1:1\n\
        stick-table type ip size 10k expire 1m store http_req_rate(10s)\n  http-request track-sc0 src\n\
        http-request deny deny_status 429 if { sc_http_req_rate(0) gt 20 }\n  default_backend b\n\
        backend b\n  balance source\n  option httpchk GET /health\n  http-check expect status 204\n\
        server s1 127.0.0.1:2 check inter 500ms fall 5 weight 3\n  server s2 127.0.0.1:3 backup\n");
    let t = &c.toml;
    assert!(t.contains("rate = \"20/10s\""), "{t}");
    assert!(t.contains("size = 10240"), "{t}");
    assert!(t.contains("balance = \"hash\""), "{t}");
    assert!(t.contains("hash_balance_factor = 0"), "{t}");
    assert!(t.contains("expect_status = 204"), "{t}");
    assert!(t.contains("interval = \"500ms\""), "{t}");
    assert!(
        t.contains("check = false"),
        "a server without `check` is not checked: {t}"
    );
}

#[test]
fn hostile_input_is_bounded() {
    // A condition whose expansion would explode is dropped, not expanded.
    let terms = "{ src 10.0.0.1 } { src 10.0.0.2 } ".repeat(40);
    let c = ok(&format!(
        "frontend f\n  bind 127.0.0.1:1\n  mode http\n  http-request deny unless {terms}\n  default_backend b\nbackend b\n  mode http\n  server s 127.0.0.1:2\n"
    ));
    assert_eq!(c.dropped().count(), 1, "{:?}", c.issues);
    // Nesting beyond HAProxy's limit, and a runaway line.
    assert!(err(&".if 1\n".repeat(11)).contains("nested"));
    assert!(err(&format!("global\n  description {}\n", "x".repeat(70_000))).starts_with("h.cfg:2: line longer"));
    // Control bytes never leave a TOML string or a comment.
    let c = ok(
        "frontend f\n  bind 127.0.0.1:1\n  mode http\n  http-request return status 200 string \"a\\nb\\x01\" if { path /x }\n  weird\\nkeyword\n  default_backend b\nbackend b\n  mode http\n  server s 127.0.0.1:2\n",
    );
    assert!(c.toml.contains("body = \"a\\nb\\u0001\""), "{}", c.toml);
}

#[test]
fn allow_skips_the_rules_after_it() {
    let c = ok(
        "frontend f\n  bind 127.0.0.1:1\n  mode http\n  http-request allow if { src 10.0.0.0/8 }\n\
        http-request deny\n  http-request set-header X-Outside 1\n  default_backend b\nbackend b\n  mode http\n  server s 127.0.0.1:2\n",
    );
    let t = &c.toml;
    assert!(t.contains("not = { source = \"10.0.0.0/8\" }\ndeny = 403"), "{t}");
    assert_eq!(c.dropped().count(), 0, "{:?}", c.issues);
    let c = ok(
        "frontend f\n  bind 127.0.0.1:1\n  mode http\n  http-request allow\n  http-request deny\n  default_backend b\nbackend b\n  mode http\n  server s 127.0.0.1:2\n",
    );
    assert!(!c.toml.contains("deny = 403"), "{}", c.toml);
    assert!(c.notes().any(|i| i.line == 5 && i.reason.starts_with("never reached")));
}
