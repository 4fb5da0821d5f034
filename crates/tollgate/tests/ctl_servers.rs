//! Servers changed at run time, in master mode with two worker threads: `ctl add server`
//! (in maint until told otherwise, then taking traffic, kept by a reload), `ctl set server
//! address` (new connections go to the new address), `ctl del server` (refused while a
//! connection is open through the server, done once it is drained), and the control socket
//! answering every kind of garbage with an error while the proxy keeps serving.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::{origin, tcp_config};
use master_support::{Master, TempDir, global};

/// An origin that says its one-letter name on connect, then holds the connection until
/// the client closes it.
fn named(name: &'static str) -> common::Origin {
    origin(move |s| {
        if s.write_all(name.as_bytes()).is_ok() {
            let _ = s.read(&mut [0u8; 1]);
        }
    })
}

/// A connection through the proxy, and the name of the origin it reached.
fn connect(addr: SocketAddr) -> (TcpStream, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut name = [0u8; 1];
    c.read_exact(&mut name).unwrap();
    (c, String::from_utf8_lossy(&name).into_owned())
}

/// Origins reached by `n` fresh connections, counted by name.
fn shares(addr: SocketAddr, n: usize) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..n {
        *counts.entry(connect(addr).1).or_insert(0) += 1;
    }
    counts
}

/// About half of 40 connections (each of the two worker threads alternates between the
/// two servers, starting wherever its rotation was).
fn even(split: &std::collections::BTreeMap<String, usize>, name: &str) -> bool {
    split.get(name).is_some_and(|n| (18..=22).contains(n))
}

/// `show servers --json`: the servers of backend `be`.
fn servers(master: &Master) -> Vec<serde_json::Value> {
    let out = master.ctl_ok(&["--json", "show", "servers", "be"]);
    let reply: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(reply["status"], "ok", "{out}");
    reply["answer"]["servers"].as_array().unwrap().clone()
}

fn server(master: &Master, name: &str) -> Option<serde_json::Value> {
    servers(master).into_iter().find(|s| s["name"] == name)
}

/// `ctl` that must fail with the master's refusal (exit 2); its stderr.
fn refused(master: &Master, args: &[&str]) -> String {
    let (code, out, err) = master.ctl(args);
    assert_eq!(code, 2, "ctl {args:?} should be refused: {out} {err}");
    err
}

#[test]
fn added_server_takes_traffic_survives_a_reload_moves_and_is_deleted_once_drained() {
    let (a, c, d) = (named("A"), named("C"), named("D"));
    let dir = TempDir::new("ctl-servers");
    let config = tcp_config(&global(&dir.0, ""), &[("a", a.addr, 1)]);
    let master = Master::start(dir, &config, &[]);

    // Added in maint (HAProxy's default): listed as a runtime server, no traffic yet.
    let out = master.ctl_ok(&["add", "server", "be/n", &format!("address={}", c.addr), "weight=1"]);
    assert!(out.contains("be/n") && out.contains("added"), "{out}");
    let n = server(&master, "n").expect("n listed");
    assert_eq!(
        (n["source"].as_str(), n["admin"].as_str()),
        (Some("runtime"), Some("maint"))
    );
    assert_eq!(n["address"], c.addr.to_string());
    let a_row = server(&master, "a").unwrap();
    assert_eq!(a_row["source"], "file");
    assert!(n["id"].as_u64() != a_row["id"].as_u64(), "a new id");
    assert_eq!(shares(master.addr, 10).get("C"), None, "a server in maint got traffic");
    let table = master.ctl_ok(&["show", "servers"]);
    assert!(table.lines().next().unwrap().contains(" SRC "), "{table}");
    assert!(
        table.lines().any(|l| l.contains(" n ") && l.contains(" runtime ")),
        "{table}"
    );

    // Names in use and bad definitions are refused, with the reason.
    let err = refused(&master, &["add", "server", "be/n", "address=127.0.0.1:9"]);
    assert!(err.contains("already has a server `n`"), "{err}");
    let err = refused(&master, &["add", "server", "be/a", "address=127.0.0.1:9"]);
    assert!(err.contains("already has a server `a`"), "{err}");
    let err = refused(&master, &["add", "server", "nope/x", "address=127.0.0.1:9"]);
    assert!(err.contains("no backend `nope`"), "{err}");
    let err = refused(&master, &["add", "server", "be/x", "address=127.0.0.1:9", "weight=999"]);
    assert!(err.contains("out of range"), "{err}");
    let err = refused(&master, &["add", "server", "be/x", "address=localhost"]);
    assert!(err.contains("not an address"), "{err}");

    // Ready: it takes its share on both worker threads.
    master.ctl_ok(&["set", "server", "be/n", "state", "ready"]);
    let split = shares(master.addr, 40);
    assert!(even(&split, "C"), "1:1 with a: {split:?}");

    // A reload keeps it, says so, and it still takes traffic.
    let out = master.reload_ok();
    assert!(out.contains("kept runtime change: be/n added"), "{out}");
    let n = server(&master, "n").expect("n kept by the reload");
    assert_eq!(
        (n["source"].as_str(), n["admin"].as_str()),
        (Some("runtime"), Some("ready"))
    );
    let split = shares(master.addr, 40);
    assert!(even(&split, "C"), "after the reload: {split:?}");

    // Moved: new connections go to the new address, the old one gets none.
    let on_c = connect_to(&master, "C");
    let out = master.ctl_ok(&["set", "server", "be/n", "address", &d.addr.to_string()]);
    assert!(out.contains(&format!("address={}", d.addr)), "{out}");
    let c_before = c.total.load(std::sync::atomic::Ordering::SeqCst);
    let split = shares(master.addr, 40);
    assert!(!split.contains_key("C") && even(&split, "D"), "{split:?}");
    assert_eq!(c.total.load(std::sync::atomic::Ordering::SeqCst), c_before);
    assert_eq!(server(&master, "n").unwrap()["address"], d.addr.to_string());
    // The connection established before the move is still open to the old address.
    let mut on_c = on_c;
    on_c.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let still = on_c.read(&mut [0u8; 1]);
    assert!(
        matches!(&still, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
        "the established connection was closed by the move: {still:?}"
    );
    let err = refused(&master, &["set", "server", "be/n", "address", "127.0.0.1:0"]);
    assert!(err.contains("0"), "{err}");

    // Busy (one connection at its address, one still at its former one): deleting is
    // refused, and says why.
    let held = connect_to(&master, "D");
    let err = refused(&master, &["del", "server", "be/n"]);
    assert!(
        err.contains("be/n has 2 active connection(s); set it to maint and wait for them to finish"),
        "{err}"
    );
    master.ctl_ok(&["set", "server", "be/n", "state", "maint"]);
    drop(held);
    wait_for(|| server(&master, "n").is_some_and(|n| n["active"] == 0));
    let err = refused(&master, &["del", "server", "be/n"]);
    assert!(
        err.contains("1 active connection(s)"),
        "the one at the former address: {err}"
    );
    assert!(server(&master, "n").is_some(), "a refused del removes nothing");
    // Closed: the slot is given back, the delete goes through.
    drop(on_c);
    let mut out = String::new();
    wait_for(|| {
        let (code, stdout, _) = master.ctl(&["del", "server", "be/n"]);
        out = stdout;
        code == 0
    });
    assert!(out.contains("be/n deleted"), "{out}");
    assert!(server(&master, "n").is_none(), "deleted server still listed");
    let d_before = d.total.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(shares(master.addr, 20).get("A"), Some(&20));
    assert_eq!(d.total.load(std::sync::atomic::Ordering::SeqCst), d_before);
    let err = refused(&master, &["del", "server", "be/n"]);
    assert!(err.contains("no server `n`"), "{err}");

    // A reload does not bring it back.
    let out = master.reload_ok();
    assert!(!out.contains("be/n"), "{out}");
    assert!(server(&master, "n").is_none());
}

/// A connection through the proxy that reached `want` (the other servers set to maint
/// meanwhile would change the test's subject; instead, retry a bounded number of times).
fn connect_to(master: &Master, want: &str) -> TcpStream {
    for _ in 0..20 {
        let (conn, name) = connect(master.addr);
        if name == want {
            return conn;
        }
    }
    panic!("no connection reached {want} in 20 tries");
}

/// Polls `cond` (bounded: 10 s).
fn wait_for(mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "condition not met within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_file_wins_over_a_runtime_server_of_the_same_name() {
    let (a, c) = (named("A"), named("C"));
    let dir = TempDir::new("ctl-servers-file");
    let config = tcp_config(&global(&dir.0, ""), &[("a", a.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    master.ctl_ok(&["add", "server", "be/n", &format!("address={}", c.addr), "enabled"]);
    assert_eq!(
        server(&master, "n").unwrap()["admin"],
        "ready",
        "`enabled` starts it ready"
    );
    // The file now defines `n` itself (at a's origin): the runtime one is dropped.
    master.write_config(&tcp_config(
        &global(&master.dir.0, ""),
        &[("a", a.addr, 1), ("n", a.addr, 1)],
    ));
    let out = master.reload_ok();
    assert!(
        out.contains("dropped runtime change: be/n added") && out.contains("the file defines be/n"),
        "{out}"
    );
    let n = server(&master, "n").unwrap();
    assert_eq!(
        (n["source"].as_str(), n["address"].as_str()),
        (Some("file"), Some(a.addr.to_string().as_str()))
    );
    assert_eq!(shares(master.addr, 20).get("A"), Some(&20));
}

// ---- the control socket under garbage ----

/// Sends `bytes` on a fresh control connection (then half-closes unless `keep_open`) and
/// returns what the master answered before closing: `None` for a close without an answer.
fn send_raw(master: &Master, bytes: &[u8]) -> Option<serde_json::Value> {
    let mut s = UnixStream::connect(&master.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    // The master may answer and close before reading everything (an oversized frame).
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    read_reply(&mut s)
}

fn read_reply(s: &mut UnixStream) -> Option<serde_json::Value> {
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let len = u32::from_le_bytes(answer.get(..4)?.try_into().ok()?) as usize;
    let body = answer.get(4..4 + len)?;
    Some(serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {answer:?}")))
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn assert_error(reply: Option<serde_json::Value>, what: &str, says: &str) {
    let reply = reply.unwrap_or_else(|| panic!("{what}: no answer"));
    assert_eq!(reply["status"], "error", "{what}: {reply}");
    let message = reply["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "{what}: {message:?} should say {says:?}");
}

#[test]
fn garbage_on_the_control_socket_gets_an_error_and_the_proxy_keeps_serving() {
    let a = named("A");
    let dir = TempDir::new("ctl-garbage");
    let config = tcp_config(&global(&dir.0, ""), &[("a", a.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    // A client that connects and says nothing: answered once the master stops waiting
    // (5 s), meanwhile everything else goes on.
    let mut silent = UnixStream::connect(&master.socket).unwrap();
    silent.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let silent = std::thread::spawn(move || read_reply(&mut silent));

    let cases: [(&str, Vec<u8>, &str); 7] = [
        ("malformed JSON", frame(b"{\"v\":1,\"id\":"), "malformed"),
        (
            "unknown command",
            frame(br#"{"v":1,"id":2,"command":{"type":"explode"}}"#),
            "unknown variant `explode`",
        ),
        (
            "wrong version",
            frame(br#"{"v":99,"id":3,"command":{"type":"status"}}"#),
            "version 99",
        ),
        (
            "add server with a wrong type",
            frame(
                br#"{"v":1,"id":4,"command":{"type":"add_server","backend":"be","server":"x","spec":{"address":7}}}"#,
            ),
            "invalid type",
        ),
        (
            "truncated body",
            [&[100u8, 0, 0, 0][..], b"{\"v\":1"].concat(),
            "truncated",
        ),
        ("truncated header", vec![9, 0], "truncated"),
        ("nothing at all", Vec::new(), "no request"),
    ];
    for (what, bytes, says) in &cases {
        assert_error(send_raw(&master, bytes), what, says);
    }
    // Over 16 MiB announced: an error or a close, never a 16 MiB allocation wait.
    if let Some(reply) = send_raw(&master, &((17u32 << 20).to_le_bytes())) {
        assert_error(Some(reply), "oversized frame", "limit");
    }
    // Random bytes, framed and not: always an error (or a close, for a header announcing
    // more than the limit), never a crash.
    for seed in 1..=16u64 {
        let bytes = common::payload_block(seed, 1 + (seed as usize * 37) % 300);
        assert_error(send_raw(&master, &frame(&bytes)), "random framed bytes", "");
        if let Some(reply) = send_raw(&master, &bytes) {
            assert_eq!(reply["status"], "error", "random bytes: {reply}");
        }
    }

    // Still serving, still answering.
    assert_eq!(connect(master.addr).1, "A");
    assert_eq!(master.generations().len(), 1);
    master.ctl_ok(&["show", "servers"]);
    assert_error(silent.join().unwrap(), "silent client", "no request within");
    assert_eq!(connect(master.addr).1, "A");
}

#[test]
fn an_added_server_is_health_checked_and_a_move_restarts_its_checks() {
    let (a, c) = (named("A"), named("C"));
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = TempDir::new("ctl-servers-health");
    let config = format!(
        "{}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\n\
         [[backend]]\nname = \"be\"\n[backend.health]\ntype = \"tcp\"\ninterval = \"100ms\"\nfall = 1\nrise = 1\n\
         [[backend.server]]\nname = \"a\"\naddress = \"{}\"\n",
        global(&dir.0, ""),
        a.addr
    );
    let master = Master::start(dir, &config, &[]);
    // Nothing listens at `closed`: checks fail, the server is marked down, no traffic.
    master.ctl_ok(&[
        "add",
        "server",
        "be/h",
        &format!("address={closed}"),
        "check",
        "enabled",
    ]);
    wait_for(|| server(&master, "h").is_some_and(|h| h["oper"] == "down" && h["check"]["checks"].as_u64() >= Some(3)));
    let before = server(&master, "h").unwrap()["check"]["checks"].as_u64().unwrap();
    assert_eq!(shares(master.addr, 10).get("A"), Some(&10));

    // Moved to a live origin: its checks start over (no history, state unknown, so it
    // takes traffic at once) and pass.
    master.ctl_ok(&["set", "server", "be/h", "address", &c.addr.to_string()]);
    let h = server(&master, "h").unwrap();
    assert!(
        h["check"]["checks"].as_u64().unwrap() < before && h["oper"] != "down",
        "checks restart at the new address: {h}"
    );
    wait_for(|| server(&master, "h").is_some_and(|h| h["oper"] == "up"));
    assert!(shares(master.addr, 20).contains_key("C"));
}

/// A keep-alive HTTP/1.1 origin answering every request with its one-letter name; its
/// `current` counts the connections it holds open (the proxy's pooled ones among them).
fn http_named(name: &'static str) -> common::Origin {
    origin(move |s| {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while let Ok(1) = s.read(&mut byte) {
            head.push(byte[0]);
            if head.ends_with(b"\r\n\r\n") {
                head.clear();
                let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n{name}");
                if s.write_all(reply.as_bytes()).is_err() {
                    return;
                }
            }
        }
    })
}

/// One GET on a fresh keep-alive connection, dropped after the response; the body (one
/// byte, as `http_named` answers).
fn get(addr: SocketAddr) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        c.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    c.read_exact(&mut byte).unwrap();
    String::from_utf8_lossy(&byte).into_owned()
}

#[test]
fn a_move_drops_idle_pooled_connections_to_the_old_address() {
    let (b, c) = (http_named("B"), http_named("C"));
    let dir = TempDir::new("ctl-servers-pool");
    let config = format!(
        "{}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"s\"\naddress = \"{}\"\n",
        global(&dir.0, ""),
        b.addr
    );
    let master = Master::start(dir, &config, &[]);
    // Each of the two worker threads opens at most one connection to b and reuses it: the
    // clients are gone, the proxy keeps those connections idle in its pools.
    for _ in 0..4 {
        assert_eq!(get(master.addr), "B");
    }
    let opened = b.total.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        opened <= 2,
        "4 requests, {opened} connections to b: the pool reuses them"
    );
    wait_for(|| b.current.load(std::sync::atomic::Ordering::SeqCst) == opened);
    master.ctl_ok(&["set", "server", "be/s", "address", &c.addr.to_string()]);
    wait_for(|| b.current.load(std::sync::atomic::Ordering::SeqCst) == 0);
    for _ in 0..6 {
        assert_eq!(get(master.addr), "C");
    }
}

#[test]
fn a_worker_restarted_after_a_crash_gets_the_runtime_servers() {
    let (a, c) = (named("A"), named("C"));
    let dir = TempDir::new("ctl-servers-crash");
    let config = tcp_config(&global(&dir.0, ""), &[("a", a.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    master.ctl_ok(&["add", "server", "be/n", &format!("address={}", c.addr), "enabled"]);
    master.ctl_ok(&["set", "server", "be/a", "state", "maint"]);
    let (generation, pid, _) = master.wait_single_generation(Duration::from_secs(5));
    master.signal(pid, rustix::process::Signal::KILL);
    wait_for(|| {
        master
            .generations()
            .iter()
            .any(|g| g.0 > generation && g.2 == "serving")
    });
    let n = server(&master, "n").expect("n re-added by the new worker");
    assert_eq!(
        (n["source"].as_str(), n["admin"].as_str()),
        (Some("runtime"), Some("ready"))
    );
    assert_eq!(
        shares(master.addr, 10).get("C"),
        Some(&10),
        "a in maint, n takes everything"
    );
}
