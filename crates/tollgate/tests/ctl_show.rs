//! `tollgate ctl show stat|sessions|errors|budgets` against a master with two worker
//! threads: each command's table, and its `--json` parsed and checked against the traffic
//! the test sent (requests counted, a held connection listed where it is, a malformed
//! request and a malformed response captured with the offending byte, budgets per
//! thread, a TLS session with its handshake counted), and `show stat` still answering after
//! a reload.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::http::{Reply, http_origin, ok};
use common::{echo, origin};
use master_support::{Master, TempDir, global, logged_addr};
use serde_json::Value;

/// What `malformed` answers: a space in a header name, at byte 39.
const BAD_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nBad Header: x\r\n\r\nok";
/// Two different Content-Length values; the second one's value starts at byte 60.
const BAD_REQUEST: &str = "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc";

/// A gate the good origin's `/slow` requests wait at (bounded) until opened.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    fn wait(&self) {
        let (lock, cond) = &*self.0;
        let open = lock.lock().unwrap();
        let _ = cond
            .wait_timeout_while(open, Duration::from_secs(10), |open| !*open)
            .unwrap();
    }

    fn open(&self) {
        *self.0.0.lock().unwrap() = true;
        self.0.1.notify_all();
    }
}

struct Setup {
    master: Master,
    web: SocketAddr,
    raw: SocketAddr,
    edge: SocketAddr,
    gate: Gate,
    _origins: (common::http::HttpOrigin, common::Origin, common::http::HttpOrigin),
}

fn config(global: &str, good: SocketAddr, echo: SocketAddr, bad: SocketAddr) -> String {
    format!(
        "{global}\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"app\"\n\
         request_id = {{}}\n\n\
         [[frontend]]\nname = \"raw\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"echo\"\n\n\
         [[frontend]]\nname = \"edge\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"broken\"\n\
         request_id = {{}}\n\n\
         [[backend]]\nname = \"app\"\nmode = \"http\"\n\
         [[backend.server]]\nname = \"a\"\naddress = \"{good}\"\n\n\
         [[backend]]\nname = \"echo\"\n\
         [[backend.server]]\nname = \"e\"\naddress = \"{echo}\"\n\n\
         [[backend]]\nname = \"broken\"\nmode = \"http\"\n\
         [[backend.server]]\nname = \"b\"\naddress = \"{bad}\"\n"
    )
}

fn start(tag: &str) -> Setup {
    let gate = Gate::default();
    let held = gate.clone();
    let good = http_origin(move |req| {
        if req.target == "/slow" {
            held.wait();
        }
        ok("hello")
    });
    let tcp = origin(echo);
    let bad = http_origin(|_| Reply::BytesThenClose(BAD_RESPONSE.to_vec()));
    let dir = TempDir::new(tag);
    let text = config(&global(&dir.0, ""), good.addr, tcp.addr, bad.addr);
    let master = Master::start(dir, &text, &[]);
    let addr_of = |name: &str| {
        let tag = format!("frontend={name} ");
        let line = master
            .wait_log(|l| l.contains("listening") && l.contains(&tag), Duration::from_secs(10))
            .unwrap_or_else(|| panic!("no listening line for {name}"));
        logged_addr(&line)
    };
    let (web, raw, edge) = (addr_of("web"), addr_of("raw"), addr_of("edge"));
    Setup {
        master,
        web,
        raw,
        edge,
        gate,
        _origins: (good, tcp, bad),
    }
}

/// Sends `request` on a new connection and reads to EOF: the status.
fn http(addr: SocketAddr, request: &str) -> u16 {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

fn json(master: &Master, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = master.ctl_ok(&all);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["status"], "ok", "{out}");
    v["answer"].clone()
}

/// The newest generation's part of a `show` answer.
fn newest(answer: &Value) -> &Value {
    let gens = answer["generations"].as_array().unwrap();
    gens.iter().max_by_key(|g| g["generation"].as_u64().unwrap()).unwrap()
}

fn named<'a>(list: &'a Value, key: &str, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|x| x[key] == name)
        .unwrap_or_else(|| panic!("no {key}={name} in {list}"))
}

/// Polls `show stat --json` (bounded) until `done` holds on the newest generation's stat:
/// a stream is counted when it ends, which may be just after the client read its response.
fn stat_until(master: &Master, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let answer = json(master, &["show", "stat"]);
        let stat = newest(&answer)["stat"].clone();
        if done(&stat) || Instant::now() > deadline {
            return stat;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn show_stat_counts_the_traffic_sent_and_answers_after_a_reload() {
    let s = start("show-stat");
    for _ in 0..5 {
        assert_eq!(
            http(s.web, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
            200
        );
    }
    assert_eq!(http(s.web, BAD_REQUEST), 400);
    let stat = stat_until(&s.master, |st| named(&st["frontends"], "name", "web")["requests"] == 6);

    let web = named(&stat["frontends"], "name", "web");
    assert_eq!(web["state"], "OPEN");
    assert_eq!(web["requests"], 6, "{web}");
    assert_eq!(web["sessions_total"], 6, "{web}");
    assert_eq!(web["sessions_current"], 0, "{web}");
    assert!(web["session_rate_max"].as_u64().unwrap() >= 1, "{web}");
    assert_eq!(web["denied_4xx"], 1, "{web}");
    assert_eq!(web["malformed"], 1, "{web}");
    assert!(web["bytes_out"].as_u64().unwrap() > 0, "{web}");
    assert!(web["tls_handshakes"].is_null(), "{web}");
    let app = named(&stat["backends"], "name", "app");
    assert_eq!(app["state"], "UP");
    assert_eq!(app["requests"], 5, "{app}");
    assert_eq!(app["responses_5xx"], 0, "{app}");
    assert!(app["session_rate_max"].as_u64().unwrap() >= 1, "{app}");
    let a = named(&stat["servers"], "name", "a");
    assert_eq!(
        (a["backend"].as_str(), a["counters"]["requests"].as_u64()),
        (Some("app"), Some(5))
    );
    assert!(a["session_rate_max"].as_u64().unwrap() >= 1, "{a}");

    // The table, and the filters.
    let table = s.master.ctl_ok(&["show", "stat"]);
    assert!(
        table.lines().next().unwrap().starts_with("GEN  FRONTEND  STATE"),
        "{table}"
    );
    let web_row = table
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("web"))
        .unwrap();
    assert!(web_row.contains(" OPEN "), "{table}");
    let only_app = json(&s.master, &["show", "stat", "backend", "app"]);
    let st = &newest(&only_app)["stat"];
    assert_eq!(st["frontends"].as_array().unwrap().len(), 0, "{st}");
    assert_eq!(st["backends"].as_array().unwrap().len(), 1, "{st}");
    assert!(
        st["servers"].as_array().unwrap().iter().all(|s| s["backend"] == "app"),
        "{st}"
    );
    let (code, _, err) = s.master.ctl(&["show", "stat", "frontend", "nope"]);
    assert!(code != 0 && err.contains("no frontend `nope`"), "{err}");

    // A disabled frontend shows STOPPED.
    s.master.ctl_ok(&["disable", "frontend", "edge"]);
    let stat = stat_until(&s.master, |st| {
        named(&st["frontends"], "name", "edge")["state"] == "STOPPED"
    });
    assert_eq!(named(&stat["frontends"], "name", "edge")["state"], "STOPPED");
    s.master.ctl_ok(&["enable", "frontend", "edge"]);

    // A reload: the new generation answers, with its own counters.
    let before = newest(&json(&s.master, &["show", "stat"]))["generation"]
        .as_u64()
        .unwrap();
    s.master.reload_ok();
    let (generation, _, _) = s.master.wait_single_generation(Duration::from_secs(10));
    assert!(generation > before);
    let after = json(&s.master, &["show", "stat"]);
    let gens = after["generations"].as_array().unwrap();
    assert_eq!(gens.len(), 1, "{after}");
    assert_eq!(gens[0]["generation"], generation);
    assert_eq!(named(&gens[0]["stat"]["frontends"], "name", "web")["requests"], 0);
    assert_eq!(
        http(s.web, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
        200
    );
    let stat = stat_until(&s.master, |st| named(&st["frontends"], "name", "web")["requests"] == 1);
    assert_eq!(named(&stat["frontends"], "name", "web")["requests"], 1);
}

#[test]
fn show_sessions_lists_live_connections_where_they_are() {
    let s = start("show-sessions");
    // An HTTP request the origin holds, and a TCP session that echoed 5 bytes.
    let mut slow = TcpStream::connect(s.web).unwrap();
    slow.write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut tcp = TcpStream::connect(s.raw).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp.write_all(b"hello").unwrap();
    let mut back = [0u8; 5];
    tcp.read_exact(&mut back).unwrap();

    let deadline = Instant::now() + Duration::from_secs(5);
    let rows = loop {
        let answer = json(&s.master, &["show", "sessions"]);
        let rows: Vec<Value> = answer["generations"][0]["sessions"].as_array().unwrap().clone();
        let forwarding = rows.iter().filter(|r| r["state"] == "forwarding").count();
        if forwarding == 2 || Instant::now() > deadline {
            break rows;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(rows.len(), 2, "{rows:?}");
    let web = named(&Value::Array(rows.clone()), "frontend", "web").clone();
    assert_eq!(
        (web["backend"].as_str(), web["server"].as_str()),
        (Some("app"), Some("a")),
        "{web}"
    );
    assert_eq!(web["state"], "forwarding", "{web}");
    assert_eq!(web["client"], slow.local_addr().unwrap().to_string());
    // The request in flight shows its ID (`request_id = {}`): a UUIDv7.
    let id = web["request_id"]
        .as_str()
        .unwrap_or_else(|| panic!("an ID in flight: {web}"));
    assert_eq!((id.len(), &id[14..15]), (36, "7"), "{web}");
    let raw = named(&Value::Array(rows), "frontend", "raw").clone();
    assert_eq!(
        (raw["backend"].as_str(), raw["server"].as_str()),
        (Some("echo"), Some("e")),
        "{raw}"
    );
    assert_eq!(
        (raw["bytes_in"].as_u64(), raw["bytes_out"].as_u64()),
        (Some(5), Some(5)),
        "{raw}"
    );
    assert!(raw["worker"].as_u64().unwrap() < 2);
    assert_eq!(raw["request_id"], Value::Null, "a TCP session has no request: {raw}");

    // Filters: a backend, a server, a server with no session.
    let on = |filter: &str| -> Vec<String> {
        let answer = json(&s.master, &["show", "sessions", filter]);
        let rows = answer["generations"][0]["sessions"].as_array().unwrap().clone();
        rows.iter()
            .map(|r| r["frontend"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(on("app"), ["web"]);
    assert_eq!(on("echo/e"), ["raw"]);
    assert!(on("app/zzz").is_empty());
    let (code, _, err) = s.master.ctl(&["show", "sessions", "nope"]);
    assert!(code != 0 && err.contains("no backend `nope`"), "{err}");

    let table = s.master.ctl_ok(&["show", "sessions"]);
    assert!(table.starts_with("GEN  WORKER  ID  AGE"), "{table}");
    assert!(
        table.lines().any(|l| l.contains(" web ") && l.contains(" forwarding")),
        "{table}"
    );
    assert!(table.trim_end().ends_with("2 session(s)"), "{table}");

    // Released, the HTTP connection goes back to waiting for its next request.
    s.gate.open();
    slow.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = [0u8; 12];
    slow.read_exact(&mut head).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let answer = json(&s.master, &["show", "sessions", "app"]);
        let rows = answer["generations"][0]["sessions"].as_array().unwrap().clone();
        let idle = json(&s.master, &["show", "sessions"])["generations"][0]["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| {
                r["frontend"] == "web"
                    && r["state"] == "idle-keepalive"
                    && r["server"].is_null()
                    && r["request_id"].is_null()
            });
        if rows.is_empty() && idle {
            break;
        }
        assert!(Instant::now() < deadline, "still on app after the response: {rows:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn show_errors_keeps_malformed_requests_and_responses_with_the_offending_byte() {
    let s = start("show-errors");
    let none = json(&s.master, &["show", "errors"]);
    assert_eq!(
        (none["what"].as_str(), none["errors"].as_array().map(Vec::len)),
        (Some("errors"), Some(0))
    );
    assert_eq!(s.master.ctl_ok(&["show", "errors"]).trim(), "no capture");
    assert_eq!(http(s.web, BAD_REQUEST), 400);
    assert_eq!(
        http(s.edge, "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
        502
    );

    let answer = json(&s.master, &["show", "errors"]);
    let errors = answer["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2, "{answer}");
    let request = named(&answer["errors"], "side", "request");
    assert_eq!(request["frontend"], "web");
    assert_eq!(request["error"], "conflicting content-length");
    assert_eq!(request["offset"], 60, "{request}");
    assert_eq!(request["length"].as_u64(), Some(BAD_REQUEST.len() as u64));
    let escaped = request["escaped"].as_str().unwrap();
    let at = request["escaped_offset"].as_u64().unwrap() as usize;
    assert!(escaped.starts_with("POST / HTTP/1.1\\r\\nHost: t\\r\\n"), "{escaped}");
    assert!(escaped[at..].starts_with(" 4\\r\\n"), "{escaped}");
    let response = named(&answer["errors"], "side", "response");
    assert_eq!(
        (
            response["frontend"].as_str(),
            response["backend"].as_str(),
            response["server"].as_str()
        ),
        (Some("edge"), Some("broken"), Some("b")),
        "{response}"
    );
    assert_eq!(response["error"], "bad header name");
    // The response's request had its ID; the refused request never got one.
    let id = response["request_id"].as_str().unwrap_or_else(|| panic!("{response}"));
    assert_eq!(id.len(), 36, "{response}");
    assert_eq!(request["request_id"], Value::Null, "{request}");
    assert_eq!(response["offset"], 39, "{response}");
    assert_eq!(BAD_RESPONSE[39], b' ');
    assert!(errors[0]["time_ms"].as_u64() <= errors[1]["time_ms"].as_u64());

    // Per-frontend and per-backend malformed counters agree.
    let stat = newest(&json(&s.master, &["show", "stat"]))["stat"].clone();
    assert_eq!(named(&stat["frontends"], "name", "web")["malformed"], 1);
    assert_eq!(named(&stat["backends"], "name", "broken")["malformed_responses"], 1);

    let text = s.master.ctl_ok(&["show", "errors"]);
    assert!(text.contains("invalid request from 127.0.0.1:"), "{text}");
    assert!(text.contains("conflicting content-length at offset 60"), "{text}");
    assert!(
        text.contains(&format!(
            "backend broken server b request {id}: bad header name at offset 39"
        )),
        "{text}"
    );
    // The caret sits under the space in `Bad Header`.
    let lines: Vec<&str> = text.lines().collect();
    let fact = lines.iter().position(|l| l.contains("bad header name")).unwrap();
    let caret = fact + lines[fact..].iter().position(|l| l.trim() == "^").unwrap();
    let col = lines[caret].find('^').unwrap();
    assert_eq!(&lines[caret - 1][col - 3..col + 1], "Bad ", "{text}");
}

#[test]
fn show_budgets_lists_every_thread_with_a_held_connection_counted() {
    let s = start("show-budgets");
    let mut tcp = TcpStream::connect(s.raw).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp.write_all(b"x").unwrap();
    let mut back = [0u8; 1];
    tcp.read_exact(&mut back).unwrap();

    let answer = json(&s.master, &["show", "budgets"]);
    let threads = newest(&answer)["budgets"].as_array().unwrap().clone();
    assert_eq!(threads.len(), 2, "{answer}");
    let workers: Vec<u64> = threads.iter().map(|t| t["worker"].as_u64().unwrap()).collect();
    assert_eq!(workers, [0, 1]);
    let in_use = |name: &str| -> u64 {
        threads
            .iter()
            .map(|t| named(&t["budgets"], "name", name)["in_use"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(in_use("maxconn"), 1, "{answer}");
    for t in &threads {
        let buffers = named(&t["budgets"], "name", "buffers");
        assert!(buffers["limit"].as_u64().unwrap() > 0, "{buffers}");
    }
    let table = s.master.ctl_ok(&["show", "budgets"]);
    assert!(table.starts_with("GEN  WORKER  BUDGET"), "{table}");
    assert_eq!(table.lines().filter(|l| l.contains(" maxconn ")).count(), 2, "{table}");
    drop(tcp);
}

#[test]
fn a_tls_session_shows_its_handshake_and_where_it_is() {
    use common::tls::{Ca, cert_entry, client_config};
    let gate = Gate::default();
    let held = gate.clone();
    let good = http_origin(move |req| {
        if req.target == "/slow" {
            held.wait();
        }
        ok("hello")
    });
    let certs = common::tls::TempDir::new();
    let ca = Ca::new("ca");
    let leaf = ca.leaf(&["web.example"], "web", false).write(&certs, "web");
    let dir = TempDir::new("show-tls");
    let text = format!(
        "{}\n[[frontend]]\nname = \"secure\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"app\"\n\
         [frontend.tls]\nalpn = [\"http/1.1\"]\n{}\n\
         [[backend]]\nname = \"app\"\nmode = \"http\"\n[[backend.server]]\nname = \"a\"\naddress = \"{}\"\n",
        global(&dir.0, ""),
        cert_entry(&leaf, true),
        good.addr
    );
    let master = Master::start(dir, &text, &[]);

    let name = rustls::pki_types::ServerName::try_from("web.example").unwrap();
    let conn = rustls::ClientConnection::new(client_config(&ca), name).unwrap();
    let tcp = TcpStream::connect(master.addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    // The write completes the handshake first; the origin holds the request.
    tls.write_all(b"GET /slow HTTP/1.1\r\nHost: web.example\r\n\r\n")
        .unwrap();
    tls.flush().unwrap();

    let deadline = Instant::now() + Duration::from_secs(5);
    let row = loop {
        let answer = json(&master, &["show", "sessions", "app/a"]);
        let rows = answer["generations"][0]["sessions"].as_array().unwrap().clone();
        if let Some(r) = rows.into_iter().find(|r| r["state"] == "forwarding") {
            break r;
        }
        assert!(Instant::now() < deadline, "no forwarding TLS session: {answer}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        (row["frontend"].as_str(), row["tls"].as_bool()),
        (Some("secure"), Some(true)),
        "{row}"
    );
    let stat = newest(&json(&master, &["show", "stat", "frontend", "secure"]))["stat"].clone();
    let secure = named(&stat["frontends"], "name", "secure");
    assert_eq!(secure["tls_handshakes"], 1, "{secure}");
    assert_eq!(secure["sessions_current"], 1, "{secure}");
    gate.open();
    let mut head = [0u8; 12];
    tls.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
}
