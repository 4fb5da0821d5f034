//! The live model over real sockets, in master mode: runtime commands reach every worker
//! thread before `tollgate ctl` returns, drain and maintenance behave as operators expect,
//! runtime changes survive reloads unless the file changes that server, servers removed by
//! a reload finish their requests, and the control socket refuses what it cannot parse.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::http::{http_origin, ok};
use common::{origin, tcp_config};
use master_support::{Master, TempDir, global, read_greeting};

/// An origin that says its name on connect and closes.
fn named(name: &'static str) -> common::Origin {
    origin(move |s| {
        let _ = s.write_all(name.as_bytes());
    })
}

/// Greetings of `n` fresh connections, counted by name.
fn shares(addr: SocketAddr, n: usize) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..n {
        *counts.entry(read_greeting(addr).unwrap()).or_insert(0) += 1;
    }
    counts
}

#[test]
fn state_and_weight_are_in_effect_on_every_thread_when_ctl_returns() {
    let (a, b) = (named("A"), named("B"));
    let dir = TempDir::new("live-ctl");
    let config = tcp_config(&global(&dir.0, ""), &[("a", a.addr, 1), ("b", b.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    let before = shares(master.addr, 40);
    assert_eq!(before.get("B").copied(), Some(20), "even split first: {before:?}");

    let began = Instant::now();
    let out = master.ctl_ok(&["set", "server", "be/b", "state", "maint"]);
    let took = began.elapsed();
    assert!(out.contains("be/b state=maint"), "{out}");
    // The master's own measure: sent to the worker until every thread acknowledged.
    let applied_ms: u64 = out
        .split(" in ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no timing in {out:?}"));
    assert!(
        applied_ms < 100,
        "in effect on every worker thread within 100 ms: {out}"
    );
    // Both worker threads pick: 40 connections land on both of them.
    let during = shares(master.addr, 40);
    assert_eq!(during.get("B"), None, "b in maintenance still picked: {during:?}");
    eprintln!("ctl set state took {took:?} (process start + round trip)");

    master.ctl_ok(&["set", "server", "be/b", "state", "ready"]);
    master.ctl_ok(&["set", "server", "be/b", "weight", "3"]);
    let weighted = shares(master.addr, 200);
    let b_share = weighted.get("B").copied().unwrap_or(0);
    // 1:3 on each thread; each thread's cycle may be cut anywhere: at most 3 off per thread.
    assert!(
        (144..=156).contains(&b_share),
        "weight 3 vs 1 gives b ~150 of 200: {weighted:?}"
    );

    let table = master.ctl_ok(&["show", "servers"]);
    let b_line = table
        .lines()
        .find(|l| l.starts_with("be ") && l.contains(" b "))
        .expect("b's row");
    assert!(b_line.contains("ready") && b_line.contains(" 3 "), "{table}");
    let json = master.ctl_ok(&["--json", "show", "servers", "be"]);
    assert!(
        json.contains("\"name\": \"b\"") && json.contains("\"weight\": 3"),
        "{json}"
    );

    let (code, _, err) = master.ctl(&["set", "server", "be/zz", "weight", "2"]);
    assert_eq!(code, 2, "unknown server refused");
    assert!(err.contains("no server `zz`"), "{err}");
    let (code, _, err) = master.ctl(&["set", "server", "be/a", "state", "drain", "--kill"]);
    assert_eq!(code, 64, "usage error: {err}");
}

/// An HTTP origin that answers `/slow` only once `release` fires, others at once.
fn slow_origin(name: &'static str, release: mpsc::Receiver<()>) -> common::http::HttpOrigin {
    let release = std::sync::Mutex::new(release);
    http_origin(move |req| {
        if req.target == "/slow" {
            let _ = release.lock().unwrap().recv_timeout(Duration::from_secs(20));
        }
        ok(name)
    })
}

fn http_two(global: &str, a: SocketAddr, b: SocketAddr) -> String {
    format!(
        "{global}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n\
         [[backend.server]]\nname = \"a\"\naddress = \"{a}\"\n\
         [[backend.server]]\nname = \"b\"\naddress = \"{b}\"\n"
    )
}

/// Sends a GET on a keep-alive connection and reads the response body.
fn get(conn: &mut BufReader<TcpStream>, path: &str) -> String {
    write!(conn.get_mut(), "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let resp = common::http::read_response(conn).expect("a response");
    String::from_utf8(resp.2).unwrap()
}

/// Waits (bounded) until `origin` has received `n` requests.
fn wait_requests(origin: &common::http::HttpOrigin, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while origin.requests().len() < n {
        assert!(
            Instant::now() < deadline,
            "origin got {} requests, want {n}",
            origin.requests().len()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn keep_alive(addr: SocketAddr) -> BufReader<TcpStream> {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    BufReader::new(s)
}

#[test]
fn drain_finishes_what_is_established_and_sends_nothing_new() {
    let (release, released) = mpsc::channel();
    let a = http_origin(|_| ok("A"));
    let b = slow_origin("B", released);
    let dir = TempDir::new("live-drain");
    let config = http_two(&global(&dir.0, ""), a.addr, b.addr);
    let master = Master::start(dir, &config, &[]);

    // A request in flight on b (a is in maintenance meanwhile, so b gets it).
    master.ctl_ok(&["set", "server", "be/a", "state", "maint"]);
    let mut established = keep_alive(master.addr);
    let in_flight = std::thread::spawn(move || {
        let body = get(&mut established, "/slow");
        (body, established)
    });
    wait_requests(&b, 1);
    master.ctl_ok(&["set", "server", "be/a", "state", "ready"]);
    master.ctl_ok(&["set", "server", "be/b", "state", "drain"]);

    // Nothing new reaches b: fresh connections and a second keep-alive connection.
    let mut other = keep_alive(master.addr);
    for _ in 0..20 {
        assert_eq!(get(&mut other, "/"), "A");
        assert_eq!(get(&mut keep_alive(master.addr), "/"), "A");
    }
    assert_eq!(b.requests().len(), 1, "a drained server got new requests");
    // The established request finishes, and its connection carries on (to a).
    release.send(()).unwrap();
    let (body, mut established) = in_flight.join().unwrap();
    assert_eq!(body, "B", "the request in flight on the drained server finished");
    assert_eq!(get(&mut established, "/"), "A");
    let table = master.ctl_ok(&["show", "servers", "be"]);
    assert!(
        table.lines().any(|l| l.contains(" b ") && l.contains("drain")),
        "{table}"
    );
}

#[test]
fn maint_kill_closes_established_connections() {
    let (a, b) = (origin(common::echo), origin(common::echo));
    let dir = TempDir::new("live-kill");
    let config = tcp_config(&global(&dir.0, ""), &[("a", a.addr, 1), ("b", b.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    master.ctl_ok(&["set", "server", "be/a", "state", "maint"]);
    let mut on_b = TcpStream::connect(master.addr).unwrap();
    on_b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    on_b.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    on_b.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");
    assert_eq!(b.current.load(std::sync::atomic::Ordering::SeqCst), 1);

    // Plain maintenance leaves it open…
    master.ctl_ok(&["set", "server", "be/a", "state", "ready"]);
    master.ctl_ok(&["set", "server", "be/b", "state", "maint"]);
    on_b.write_all(b"pong").unwrap();
    on_b.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"pong", "maint without --kill keeps established connections");
    // …--kill closes it.
    let killed_at = Instant::now();
    master.ctl_ok(&["set", "server", "be/b", "state", "maint", "--kill"]);
    let mut rest = Vec::new();
    let end = on_b.read_to_end(&mut rest);
    assert!(
        matches!(end, Ok(0))
            || end
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "killed connection should end, got {end:?} {rest:?}"
    );
    assert!(
        killed_at.elapsed() < Duration::from_secs(2),
        "closed promptly: {:?}",
        killed_at.elapsed()
    );
    // New connections go to a.
    let mut fresh = TcpStream::connect(master.addr).unwrap();
    fresh.write_all(b"new!").unwrap();
    fresh.read_exact(&mut buf).unwrap();
    assert_eq!(a.total.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn runtime_changes_survive_reloads_unless_the_file_changes_the_server() {
    let (a, b) = (named("A"), named("B"));
    let dir = TempDir::new("live-reload");
    let config = tcp_config(&global(&dir.0, ""), &[("a", a.addr, 1), ("b", b.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    master.ctl_ok(&["set", "server", "be/b", "state", "maint"]);
    master.ctl_ok(&["set", "server", "be/a", "weight", "5"]);

    // Same file: both changes kept, and in force in the new generation from its first request.
    let out = master.reload_ok();
    assert!(out.contains("kept runtime change: be/b state=maint"), "{out}");
    assert!(out.contains("kept runtime change: be/a weight=5"), "{out}");
    let after = shares(master.addr, 20);
    assert_eq!(after.get("B"), None, "{after:?}");
    let table = master.ctl_ok(&["show", "servers"]);
    assert!(
        table.lines().any(|l| l.contains(" b ") && l.contains("maint")),
        "{table}"
    );

    // The file now changes b: the file wins for b, a's change stays.
    let changed = tcp_config(&global(&master.dir.0, ""), &[("a", a.addr, 1), ("b", b.addr, 2)]);
    master.write_config(&changed);
    let out = master.reload_ok();
    assert!(
        out.contains("dropped runtime change: be/b state=maint (the file changes be/b)"),
        "{out}"
    );
    assert!(out.contains("kept runtime change: be/a weight=5"), "{out}");
    let after = shares(master.addr, 70);
    // a weight 5 (runtime), b weight 2 (file): b ~20 of 70.
    let b_share = after.get("B").copied().unwrap_or(0);
    assert!((14..=26).contains(&b_share), "{after:?}");
    assert!(master.log_count(|l| l.contains("reload dropped runtime change be/b")) >= 1);
}

#[test]
fn a_server_removed_by_reload_finishes_its_requests_and_is_never_picked_again() {
    let (release, released) = mpsc::channel();
    let a = http_origin(|_| ok("A"));
    let b = slow_origin("B", released);
    let dir = TempDir::new("live-remove");
    let only = |name: &str, addr: SocketAddr, g: &str| {
        format!(
            "{g}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\n\
             [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"{name}\"\naddress = \"{addr}\"\n"
        )
    };
    let g = global(&dir.0, "");
    let master = Master::start(dir, &only("b", b.addr, &g), &[]);
    let mut established = keep_alive(master.addr);
    let in_flight = std::thread::spawn(move || get(&mut established, "/slow"));
    wait_requests(&b, 1);
    master.write_config(&only("a", a.addr, &g));
    master.reload_ok();
    for _ in 0..20 {
        assert_eq!(get(&mut keep_alive(master.addr), "/"), "A");
    }
    assert_eq!(b.requests().len(), 1, "the removed server was picked again");
    release.send(()).unwrap();
    assert_eq!(in_flight.join().unwrap(), "B", "the in-flight request finished");
    let table = master.ctl_ok(&["show", "servers"]);
    assert!(!table.lines().any(|l| l.contains(" b ")), "{table}");
}

#[test]
fn the_control_socket_answers_garbage_with_an_error_and_keeps_working() {
    let a = named("A");
    let dir = TempDir::new("live-garbage");
    let config = tcp_config(&global(&dir.0, ""), &[("a", a.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    for garbage in [
        &b"reload\n"[..],
        &[4, 0, 0, 0, b'{', b'}', b'x', b'y'][..],
        &[0xff; 64][..],
    ] {
        let mut s = std::os::unix::net::UnixStream::connect(&master.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(garbage).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        let text = String::from_utf8_lossy(&answer);
        assert!(text.contains("\"status\":\"error\""), "garbage {garbage:?} got {text}");
    }
    // A well-formed frame with an unknown command: a clear error.
    let body = br#"{"v":1,"id":3,"command":{"type":"explode"}}"#;
    let mut s = std::os::unix::net::UnixStream::connect(&master.socket).unwrap();
    s.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.contains("unknown variant `explode`"), "{text}");
    assert_eq!(master.generations().len(), 1, "the master still answers");
    assert_eq!(read_greeting(master.addr).unwrap(), "A");
}

/// `n` servers named s0.. in backend "be", weights and addresses from `spec(i)`.
fn many_servers(global: &str, retries: u32, n: usize, spec: impl Fn(usize) -> (SocketAddr, u32)) -> String {
    let mut s = format!(
        "{global}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\n\
         [[backend]]\nname = \"be\"\nretries = {retries}\n"
    );
    for i in 0..n {
        let (addr, weight) = spec(i);
        s.push_str(&format!(
            "[[backend.server]]\nname = \"s{i}\"\naddress = \"{addr}\"\nweight = {weight}\n"
        ));
    }
    s
}

fn connections_by_server(proxy: &common::Proxy) -> Vec<(String, u64, u64)> {
    proxy
        .running()
        .show_servers(None)
        .into_iter()
        .map(|v| (v.name, v.counters.connections, v.counters.connect_failures))
        .collect()
}

#[test]
fn a_thousand_servers_share_connections_evenly() {
    let a = named("A");
    let proxy = common::Proxy::start(&many_servers("[global]\nworkers = 2\n", 3, 1000, |_| (a.addr, 1)));
    for _ in 0..3000 {
        assert_eq!(read_greeting(proxy.addr).unwrap(), "A");
    }
    let counts = connections_by_server(&proxy);
    assert_eq!(counts.len(), 1000);
    assert_eq!(counts.iter().map(|c| c.1).sum::<u64>(), 3000);
    // Two threads each rotate through all 1000: every server gets 3, give or take one
    // per thread where its rotation stopped.
    assert!(
        counts.iter().all(|c| (1..=5).contains(&c.1)),
        "uneven: {:?}",
        counts.iter().map(|c| c.1).collect::<Vec<_>>()
    );
}

#[test]
fn retries_never_go_back_to_a_failed_server_in_a_thousand() {
    let a = named("A");
    // A refused address: bound, then closed.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    // 900 live servers of weight 1, then 100 dead ones of weight 256 (positions 900..999,
    // far past 64): the weighted rotation keeps offering the heavy dead ones.
    let config = many_servers("[global]\nworkers = 1\n", 150, 1000, |i| {
        if i >= 900 { (dead, 256) } else { (a.addr, 1) }
    });
    let proxy = common::Proxy::start(&config);
    let mut before = connections_by_server(&proxy);
    for round in 0..20 {
        assert_eq!(read_greeting(proxy.addr).unwrap(), "A", "connection {round} failed");
        proxy.wait_idle(Duration::from_secs(5));
        let now = connections_by_server(&proxy);
        for (old, new) in before.iter().zip(&now) {
            assert!(
                new.2 - old.2 <= 1,
                "{} failed {} times for one connection",
                new.0,
                new.2 - old.2
            );
        }
        before = now;
    }
    let failures: u64 = before.iter().map(|c| c.2).sum();
    assert!(failures >= 100, "the dead servers were offered: {failures} failures");
}

/// `shutdown sessions server` closes the server's established sessions and changes nothing
/// else: it stays ready, new connections still reach it, and a reload has nothing to keep.
#[test]
fn shutdown_sessions_closes_a_servers_sessions_and_leaves_its_state() {
    let b = origin(common::echo);
    let dir = TempDir::new("live-shutdown");
    let config = tcp_config(&global(&dir.0, ""), &[("b", b.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    let mut held = TcpStream::connect(master.addr).unwrap();
    held.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    held.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    held.read_exact(&mut buf).unwrap();

    let began = Instant::now();
    let out = master.ctl_ok(&["shutdown", "sessions", "server", "be/b"]);
    assert!(out.contains("be/b") && out.contains("sessions killed"), "{out}");
    let mut rest = Vec::new();
    let end = held.read_to_end(&mut rest);
    assert!(
        matches!(end, Ok(0))
            || end
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the session should end, got {end:?} {rest:?}"
    );
    assert!(began.elapsed() < Duration::from_secs(2), "{:?}", began.elapsed());

    let table = master.ctl_ok(&["show", "servers"]);
    assert!(
        table.lines().any(|l| l.contains(" b ") && l.contains("ready")),
        "{table}"
    );
    let mut fresh = TcpStream::connect(master.addr).unwrap();
    fresh.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    fresh.write_all(b"new!").unwrap();
    fresh.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"new!", "new connections still reach the server");
    let report = master.reload_ok();
    assert!(!report.contains("kept runtime change"), "{report}");

    let (code, _, err) = master.ctl(&["shutdown", "sessions", "server", "be/zz"]);
    assert_ne!(code, 0);
    assert!(err.contains("no server `zz`"), "{err}");
}

/// `disable frontend` stops accepting (a new connection waits in the backlog, unserved)
/// while established connections keep being served; a reload keeps it disabled; `enable
/// frontend` serves the waiting connection.
#[test]
fn a_disabled_frontend_accepts_nothing_serves_what_it_has_and_stays_disabled_across_a_reload() {
    let b = origin(common::echo);
    let dir = TempDir::new("live-frontend");
    let config = tcp_config(&global(&dir.0, ""), &[("b", b.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    let echo = |s: &mut TcpStream, what: &[u8; 4]| {
        s.write_all(what).unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).map(|()| buf)
    };
    let mut held = TcpStream::connect(master.addr).unwrap();
    held.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(&echo(&mut held, b"one!").unwrap(), b"one!");

    let out = master.ctl_ok(&["disable", "frontend", "fe"]);
    assert!(out.contains("frontend fe disabled"), "{out}");
    assert_eq!(
        &echo(&mut held, b"two!").unwrap(),
        b"two!",
        "established connections are served"
    );
    // The kernel completes the handshake (the socket is still listening) but nothing
    // accepts it: no echo within a bound far above a served round trip (under 10 ms here).
    let mut waiting = TcpStream::connect(master.addr).unwrap();
    waiting.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let err = echo(&mut waiting, b"wait").unwrap_err();
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{err:?}"
    );

    let report = master.reload_ok();
    assert!(
        report.contains("frontend fe disabled"),
        "kept across the reload: {report}"
    );
    let mut after_reload = TcpStream::connect(master.addr).unwrap();
    after_reload.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    assert!(
        echo(&mut after_reload, b"new?").is_err(),
        "the new generation does not accept either"
    );

    master.ctl_ok(&["enable", "frontend", "fe"]);
    waiting.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 4];
    waiting.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"wait", "the connection that waited in the backlog is served");
    let mut fresh = TcpStream::connect(master.addr).unwrap();
    fresh.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(&echo(&mut fresh, b"new!").unwrap(), b"new!");

    let (code, _, err) = master.ctl(&["disable", "frontend", "nope"]);
    assert_ne!(code, 0);
    assert!(err.contains("no frontend `nope`"), "{err}");
}
