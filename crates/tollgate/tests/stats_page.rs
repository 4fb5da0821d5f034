//! The live stats page on `[admin] bind`, in master mode with two worker threads.
//!
//! Plain HTTP: credentials are required when `stats_auth` is set (401 with a Basic
//! challenge otherwise), the page is read-only without it (the action answers 403), an
//! action needs the anti-CSRF header and a same-origin `Origin`, `/stats.json` has the shape
//! the page reads, and the HTML loads nothing from elsewhere.
//!
//! In a real headless Chromium driven over the DevTools protocol (raw CDP over a websocket,
//! no webdriver): the page shows a server UP, turns it DOWN once its origin stops — without
//! reloading — and its drain button drains another server, as `ctl show servers` confirms.
//! Without chromium the browser test prints `skipped:` (on CI, where `.ci/run` installs it,
//! it fails instead).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod browser_support;
mod common;
mod health_support;
mod master_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use browser_support::{Browser, chromium};
use health_support::Origin;
use master_support::{Master, TempDir, global, logged_addr};
use serde_json::{Value, json};

/// `ops:s3cret`, as a browser sends it.
const GOOD: &str = "Basic b3BzOnMzY3JldA==";
/// `ops:wrong`.
const WRONG: &str = "Basic b3BzOndyb25n";

/// Sends `request`, reads to EOF: (status, head, body).
fn http(addr: SocketAddr, request: &str) -> (u16, String, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_string(), body.to_string())
}

fn get(addr: SocketAddr, path: &str, auth: Option<&str>) -> (u16, String, String) {
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    http(addr, &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}\r\n"))
}

/// `POST /stats/server?…` with `extra` header lines.
fn post(addr: SocketAddr, query: &str, extra: &str) -> (u16, String) {
    let (status, _, body) = http(
        addr,
        &format!("POST /stats/server?{query} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\n{extra}\r\n"),
    );
    (status, body)
}

fn admin_addr(master: &Master) -> SocketAddr {
    let line = master
        .wait_log(|l| l.contains("admin endpoint ready"), Duration::from_secs(10))
        .expect("admin endpoint line");
    logged_addr(&line)
}

/// A master in front of `servers`, health-checked every 100 ms (`admin` lines go to `[admin]`).
fn start(tag: &str, admin: &str, servers: &[(&str, SocketAddr)]) -> Master {
    let dir = TempDir::new(tag);
    let mut config = format!(
        "{}\n[admin]\nbind = \"127.0.0.1:0\"\n{admin}\n\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n\
         [backend.health]\ntype = \"tcp\"\ninterval = \"100ms\"\nrise = 1\nfall = 2\n",
        global(&dir.0, "")
    );
    for (name, addr) in servers {
        config.push_str(&format!(
            "[[backend.server]]\nname = \"{name}\"\naddress = \"{addr}\"\n"
        ));
    }
    Master::start(dir, &config, &[])
}

/// The `admin` state of `be/NAME` as `ctl show servers --json` reports it.
fn ctl_admin_state(master: &Master, name: &str) -> String {
    let out = master.ctl_ok(&["show", "servers", "--json"]);
    let reply: Value = serde_json::from_str(&out).unwrap();
    let servers = reply["answer"]["servers"].as_array().expect("servers").clone();
    let s = servers.iter().find(|s| s["name"] == name).expect("server");
    s["admin"].as_str().unwrap().to_string()
}

#[test]
fn stats_auth_guards_the_page_its_data_and_its_actions() {
    let (a, b) = (Origin::start("a"), Origin::start("b"));
    let master = start(
        "stats-auth",
        "stats_auth = \"ops:s3cret\"",
        &[("a", a.addr), ("b", b.addr)],
    );
    let admin = admin_addr(&master);

    for path in ["/", "/stats", "/stats.json"] {
        for auth in [None, Some(WRONG), Some("Bearer b3BzOnMzY3JldA==")] {
            let (status, head, _) = get(admin, path, auth);
            assert_eq!(status, 401, "{path} {auth:?}");
            assert!(head.contains("WWW-Authenticate: Basic realm="), "{head}");
        }
    }
    let (status, head, page) = get(admin, "/stats", Some(GOOD));
    assert_eq!(status, 200);
    assert!(head.contains("Content-Type: text/html") && head.contains("Content-Security-Policy"));
    assert!(page.contains("stats.json"));
    // Prometheus scrapes without credentials, as HAProxy's prometheus-exporter does.
    assert_eq!(get(admin, "/metrics", None).0, 200);

    // The JSON the page reads.
    let (status, _, body) = get(admin, "/stats.json", Some(GOOD));
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["generation"], 1);
    assert_eq!(v["actions"], true);
    assert!(v["version"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(v["time"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(v["time_ms"].as_u64().unwrap() / 1000, v["time"].as_u64().unwrap());
    assert!(v["uptime_seconds"].is_u64());
    assert_eq!(v["frontends"][0]["name"], "fe");
    assert_eq!(v["frontends"][0]["disabled"], false);
    assert!(v["frontends"][0]["streams"].is_u64());
    assert_eq!(v["backends"].as_array().unwrap().len(), 1);
    let backend = &v["backends"][0];
    assert_eq!(backend["name"], "be");
    let names: Vec<&str> = backend["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let s = &backend["servers"][0];
    for key in [
        "admin",
        "oper",
        "weight",
        "effective_weight",
        "active",
        "last_change",
        "address",
    ] {
        assert!(!s[key].is_null(), "server field {key}: {s}");
    }
    assert!(s["counters"]["requests"].is_u64() && s["counters"]["responses_5xx"].is_u64());
    assert!(s["check"]["status"].is_string(), "health checks show: {s}");

    // Actions: credentials, then the anti-CSRF header, then a same-origin Origin.
    let drain_b = "backend=be&server=b&state=drain";
    let header = "X-Tollgate-Action: 1\r\n";
    assert_eq!(post(admin, drain_b, header).0, 401);
    assert_eq!(
        post(admin, drain_b, &format!("Authorization: {WRONG}\r\n{header}")).0,
        401
    );
    let authed = format!("Authorization: {GOOD}\r\n");
    let (status, body) = post(admin, drain_b, &authed);
    assert_eq!(status, 403, "no X-Tollgate-Action: {body}");
    let (status, body) = post(
        admin,
        drain_b,
        &format!("{authed}{header}Origin: http://evil.example\r\n"),
    );
    assert_eq!(status, 403, "cross-origin: {body}");
    assert_eq!(ctl_admin_state(&master, "b"), "ready", "nothing was changed yet");
    let (status, body) = post(
        admin,
        "backend=be&server=nope&state=drain",
        &format!("{authed}{header}"),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("nope"), "{body}");
    assert_eq!(
        post(admin, "backend=be&server=b&state=sleep", &format!("{authed}{header}")).0,
        400
    );
    let same_origin = format!("{authed}{header}Origin: http://{admin}\r\n");
    let (status, body) = post(admin, drain_b, &same_origin);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("be/b state=drain"), "{body}");
    assert_eq!(ctl_admin_state(&master, "b"), "drain");
    // Logged like a ctl command, with the user instead of a uid.
    let line = master
        .wait_log(
            |l| l.contains("admin http") && l.contains("control: command"),
            Duration::from_secs(5),
        )
        .expect("the action is logged");
    assert!(line.contains("user=ops") && line.contains("set server state"), "{line}");
    let drained = master.wait_log(
        |l| l.contains("admin http") && l.contains("be/b"),
        Duration::from_secs(5),
    );
    assert!(drained.is_some_and(|l| l.contains("drain")), "the drain is logged");
    // GET is not an action.
    assert_eq!(
        get(admin, "/stats/server?backend=be&server=b&state=ready", Some(GOOD)).0,
        405
    );
}

#[test]
fn without_stats_auth_the_page_is_read_only_and_self_contained() {
    let a = Origin::start("a");
    let master = start("stats-open", "", &[("a", a.addr)]);
    let admin = admin_addr(&master);

    let (status, _, page) = get(admin, "/", None);
    assert_eq!(status, 200);
    let (_, _, same) = get(admin, "/stats", None);
    assert_eq!(page, same);
    let (status, _, body) = get(admin, "/stats.json", None);
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["actions"], false);
    let (status, body) = post(admin, "backend=be&server=a&state=drain", "X-Tollgate-Action: 1\r\n");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("stats_auth"), "{body}");
    assert_eq!(ctl_admin_state(&master, "a"), "ready");
    assert_eq!(get(admin, "/nothing", None).0, 404);

    // Nothing loads from elsewhere: no absolute or protocol-relative URL anywhere.
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "an absolute URL in the page"
    );
    for attr in ["src=", "href=", "url("] {
        for (i, _) in page.match_indices(attr) {
            let value = page[i + attr.len()..].trim_start_matches(['"', '\'', ' ']);
            assert!(!value.starts_with("//"), "protocol-relative {attr} at {i}");
        }
    }
    assert!(!page.contains("@import"));
}

/// The state word and `data-state` of the row of `be/NAME` (`null` while it is not drawn).
fn row_state(name: &str) -> String {
    format!(
        "(() => {{ const r = document.querySelector('tr[data-server=\"be/{name}\"]'); \
         return r ? r.dataset.state + ' ' + r.querySelector('.state').textContent : null; }})()"
    )
}

#[test]
fn in_a_browser_a_server_turns_down_and_the_drain_button_drains() {
    let binary = match chromium() {
        Ok(b) => b,
        Err(why) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{why}: .ci/run installs chromium; CI may not skip this test"
            );
            println!("skipped: {why}");
            return;
        }
    };
    let mut a = Origin::start("a");
    let b = Origin::start("b");
    let master = start(
        "stats-browser",
        "stats_auth = \"ops:s3cret\"",
        &[("a", a.addr), ("b", b.addr)],
    );
    let admin = admin_addr(&master);

    let mut browser = Browser::launch(&binary);
    browser.call("Network.enable", json!({}));
    browser.call(
        "Network.setExtraHTTPHeaders",
        json!({"headers": {"Authorization": GOOD}}),
    );
    browser.call("Page.enable", json!({}));
    browser.call("Page.navigate", json!({"url": format!("http://{admin}/stats")}));
    let long = Duration::from_secs(20);
    browser.wait_value(&row_state("a"), &json!("up UP"), long);
    browser.wait_value(&row_state("b"), &json!("up UP"), long);
    let frontend = browser.eval("document.querySelector('tr[data-frontend=\"fe\"]').textContent");
    assert!(frontend.as_str().unwrap().starts_with("feOPEN"), "{frontend}");
    // A mark on this document: a reload would make a new one without it.
    browser.eval("window.__mark = 'same page'; 'ok'");
    let refreshes = browser
        .eval("Number(document.body.dataset.refreshes)")
        .as_u64()
        .unwrap();

    a.stop();
    browser.wait_value(&row_state("a"), &json!("down DOWN"), long);
    assert_eq!(
        browser.eval("window.__mark"),
        json!("same page"),
        "the page was not reloaded"
    );
    let now = browser
        .eval("Number(document.body.dataset.refreshes)")
        .as_u64()
        .unwrap();
    assert!(now > refreshes, "redrawn in place ({refreshes} -> {now})");
    // The check column says why.
    let check = browser.eval("document.querySelector('tr[data-server=\"be/a\"] td.check').textContent");
    assert!(check.as_str().unwrap().contains("L4"), "{check}");

    // Drain b with its button.
    let clicked = browser.eval(
        "(() => { const b = document.querySelector('tr[data-server=\"be/b\"] button[data-state=\"drain\"]'); \
         if (!b) return false; b.click(); return true; })()",
    );
    assert_eq!(clicked, json!(true), "b has a drain button");
    browser.wait_value(&row_state("b"), &json!("drain DRAIN"), long);
    assert_eq!(ctl_admin_state(&master, "b"), "drain");
    let message = browser.eval("document.getElementById('message').textContent");
    assert!(message.as_str().unwrap().contains("be/b state=drain"), "{message}");
    assert_eq!(browser.eval("window.__mark"), json!("same page"));
    assert!(
        master
            .wait_log(
                |l| l.contains("admin http") && l.contains("ops"),
                Duration::from_secs(5)
            )
            .is_some()
    );
}
