//! Active and passive health checks over real sockets: origins started by the test, the
//! proxy in-process, states read from `show servers` (polled with a deadline).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;
mod health_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use health_support::{Client, Origin, agent, wait_for};

/// An HTTP frontend and backend `be` with `[backend.health]` = `health` and servers
/// `(name, addr, extra server lines)`.
fn config(backend_extra: &str, health: &str, servers: &[(&str, SocketAddr, &str)]) -> String {
    let mut s = "[global]\nworkers = 2\n\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\n\
                 default_backend = \"be\"\n\n[[backend]]\nname = \"be\"\nmode = \"http\"\n"
        .to_string();
    s.push_str(backend_extra);
    s.push_str(&format!("\n[backend.health]\n{health}\n"));
    for (name, addr, extra) in servers {
        s.push_str(&format!(
            "[[backend.server]]\nname = \"{name}\"\naddress = \"{addr}\"\n{extra}\n"
        ));
    }
    s
}

/// (oper, check status, effective weight, connections) of `server`.
fn state(proxy: &common::Proxy, server: &str) -> (String, String, u32, u64) {
    let v = proxy
        .running()
        .show_servers(None)
        .into_iter()
        .find(|v| v.name == server)
        .unwrap();
    let check = v.check.map_or_else(String::new, |c| c.status);
    (
        v.oper.as_str().to_string(),
        check,
        v.effective_weight,
        v.counters.connections,
    )
}

fn wait_oper(proxy: &common::Proxy, server: &str, oper: &str, limit: Duration) -> Duration {
    let began = Instant::now();
    wait_for(limit, &format!("{server} {oper}"), || {
        (state(proxy, server).0 == oper).then_some(())
    });
    began.elapsed()
}

#[test]
fn a_killed_server_is_marked_down_within_fall_intervals_and_comes_back_after_rise() {
    let mut a = Origin::start("a");
    let b = Origin::start("b");
    let health = "type = \"http\"\npath = \"/health\"\ninterval = \"200ms\"\nrise = 2\nfall = 3";
    let proxy = common::Proxy::start(&config("", health, &[("a", a.addr, ""), ("b", b.addr, "")]));
    wait_oper(&proxy, "a", "up", Duration::from_secs(5));
    wait_oper(&proxy, "b", "up", Duration::from_secs(5));

    // A keep-alive client loops on its own thread until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let addr = proxy.addr;
    let s = stop.clone();
    let load = std::thread::spawn(move || {
        let mut c = Client::new(addr);
        let (mut ok, mut errors) = (Vec::new(), Vec::new());
        while !s.load(Ordering::SeqCst) && ok.len() + errors.len() < 200_000 {
            match c.get() {
                Ok(body) => ok.push(body),
                Err(e) => errors.push(e),
            }
        }
        (ok, errors)
    });
    wait_for(Duration::from_secs(5), "traffic on a", || {
        (a.traffic.load(Ordering::SeqCst) > 20).then_some(())
    });
    a.stop();
    let took = wait_oper(&proxy, "a", "down", Duration::from_secs(5));
    // fall × interval (+10 % jitter), one interval for the first failing check to come due,
    // and scheduling slack.
    assert!(
        took < Duration::from_millis(3 * 220 + 220 + 400),
        "marked down after {took:?}"
    );
    assert_eq!(state(&proxy, "a").1, "L4CON");
    // Down: no new connection goes to it while traffic flows to b.
    let conns = state(&proxy, "a").3;
    let served = b.traffic.load(Ordering::SeqCst);
    wait_for(Duration::from_secs(5), "traffic on b", || {
        (b.traffic.load(Ordering::SeqCst) > served + 200).then_some(())
    });
    assert_eq!(state(&proxy, "a").3, conns, "a marked down got new connections");

    // Back on the same port: up after `rise` passing checks.
    let restarted = Origin::start_on("a", a.addr, Default::default());
    let took = wait_oper(&proxy, "a", "up", Duration::from_secs(5));
    assert!(restarted.checks.load(Ordering::SeqCst) >= 2, "up before rise checks");
    assert!(
        took < Duration::from_millis(2 * 220 + 220 + 400),
        "back up after {took:?}"
    );
    wait_for(Duration::from_secs(5), "traffic on a again", || {
        (restarted.traffic.load(Ordering::SeqCst) > 10).then_some(())
    });
    stop.store(true, Ordering::SeqCst);
    let (ok, errors) = load.join().unwrap();
    // One sequential client: at most one request was in flight on a when it was killed;
    // every later one was retried (connect refused) or sent to b.
    assert!(errors.len() <= 1, "client errors: {errors:?}");
    assert!(ok.len() > 400, "only {} requests", ok.len());
}

#[test]
fn http_checks_mark_down_on_wrong_status_missing_body_and_timeout() {
    let origins: Vec<Origin> = ["status", "body", "slow", "fine"]
        .iter()
        .map(|n| Origin::start(n))
        .collect();
    let health = "type = \"http\"\npath = \"/health\"\ninterval = \"150ms\"\ntimeout = \"100ms\"\nrise = 1\nfall = 2\n\
                  expect_status = [\"200-299\"]\nexpect_body = \"alive\"";
    let servers: Vec<(&str, SocketAddr, &str)> = origins.iter().map(|o| (o.name.as_str(), o.addr, "")).collect();
    let proxy = common::Proxy::start(&config("", health, &servers));
    for o in &origins {
        wait_oper(&proxy, &o.name, "up", Duration::from_secs(5));
    }
    origins[0].behaviour.status.store(500, Ordering::SeqCst);
    *origins[1].behaviour.body.lock().unwrap() = "dying".into();
    origins[2].behaviour.delay_ms.store(300, Ordering::SeqCst);
    for (o, code) in origins.iter().zip(["L7STS/500", "L7RSP/200", "L7TOUT"]) {
        wait_oper(&proxy, &o.name, "down", Duration::from_secs(5));
        assert_eq!(state(&proxy, &o.name).1, code, "{}", o.name);
    }
    assert_eq!(state(&proxy, "fine").0, "up");
    // Every request now goes to the one server left.
    let mut c = Client::new(proxy.addr);
    for _ in 0..20 {
        assert_eq!(c.get().unwrap(), "fine");
    }
    // Fixed: back up.
    origins[0].behaviour.status.store(202, Ordering::SeqCst);
    wait_oper(&proxy, "status", "up", Duration::from_secs(5));
}

#[test]
fn agent_drain_and_percent_take_effect() {
    let (x, y) = (Origin::start("x"), Origin::start("y"));
    let ax = agent("up");
    let health = "type = \"tcp\"\ninterval = \"100ms\"\nagent_interval = \"100ms\"";
    let x_extra = format!("weight = 10\nagent_port = {}", ax.addr.port());
    let proxy = common::Proxy::start(&config(
        "",
        health,
        &[("x", x.addr, &x_extra), ("y", y.addr, "weight = 10")],
    ));
    wait_oper(&proxy, "x", "up", Duration::from_secs(5));
    *ax.line.lock().unwrap() = "50%".into();
    wait_for(Duration::from_secs(5), "x at 50 %", || {
        (state(&proxy, "x").2 == 5).then_some(())
    });
    // Weights 5 and 10: x gets a third of the requests.
    let mut c = Client::new(proxy.addr);
    let count = |c: &mut Client, n: usize| (0..n).filter(|_| c.get().unwrap() == "x").count();
    let on_x = count(&mut c, 300);
    assert!((80..=120).contains(&on_x), "x served {on_x} of 300 at half weight");

    *ax.line.lock().unwrap() = "drain".into();
    wait_for(Duration::from_secs(5), "x drained", || {
        (state(&proxy, "x").2 == 0).then_some(())
    });
    let view = proxy
        .running()
        .show_servers(None)
        .into_iter()
        .find(|v| v.name == "x")
        .unwrap();
    assert_eq!(view.admin.as_str(), "ready", "the agent must not touch the admin state");
    assert_eq!(view.oper.as_str(), "up");
    assert_eq!(count(&mut c, 100), 0, "a drained server got requests");

    *ax.line.lock().unwrap() = "ready 100%".into();
    wait_for(Duration::from_secs(5), "x back", || {
        (state(&proxy, "x").2 == 10).then_some(())
    });
    *ax.line.lock().unwrap() = "down".into();
    wait_oper(&proxy, "x", "down", Duration::from_secs(5));
    assert_eq!(state(&proxy, "x").1, "AGENT");
}

#[test]
fn backups_take_the_traffic_once_checks_mark_every_primary_down() {
    let (p1, p2, bk) = (Origin::start("p1"), Origin::start("p2"), Origin::start("bk"));
    let health = "type = \"http\"\npath = \"/health\"\ninterval = \"100ms\"\nrise = 1\nfall = 1";
    let proxy = common::Proxy::start(&config(
        "",
        health,
        &[
            ("p1", p1.addr, ""),
            ("p2", p2.addr, ""),
            ("bk", bk.addr, "backup = true"),
        ],
    ));
    for s in ["p1", "p2", "bk"] {
        wait_oper(&proxy, s, "up", Duration::from_secs(5));
    }
    let mut c = Client::new(proxy.addr);
    assert!(
        (0..20).all(|_| c.get().unwrap() != "bk"),
        "backup used while primaries are up"
    );
    // The primaries still serve traffic; only their checks fail.
    p1.behaviour.status.store(503, Ordering::SeqCst);
    p2.behaviour.status.store(503, Ordering::SeqCst);
    wait_oper(&proxy, "p1", "down", Duration::from_secs(5));
    wait_oper(&proxy, "p2", "down", Duration::from_secs(5));
    assert!(
        (0..20).all(|_| c.get().unwrap() == "bk"),
        "traffic must go to the backup"
    );
    p2.behaviour.status.store(200, Ordering::SeqCst);
    wait_oper(&proxy, "p2", "up", Duration::from_secs(5));
    assert!((0..20).all(|_| c.get().unwrap() == "p2"));
}

#[test]
fn error_limit_marks_down_on_consecutive_errors_until_checks_bring_it_back() {
    let (good, bad) = (Origin::start("good"), Origin::start("bad"));
    // Checks every 2 s with rise 2: the passive mark-down holds for at least 4 s before
    // passing checks can lift it, room enough for the requests below on a loaded machine.
    let health = "type = \"http\"\npath = \"/health\"\ninterval = \"2s\"\nrise = 2\nfall = 3";
    let proxy = common::Proxy::start(&config(
        "error_limit = 3\nretries = 0",
        health,
        &[("good", good.addr, ""), ("bad", bad.addr, "")],
    ));
    wait_oper(&proxy, "bad", "up", Duration::from_secs(10));
    bad.behaviour.garbage.store(true, Ordering::SeqCst);
    let mut c = Client::new(proxy.addr);
    let mut errors = 0;
    // Round robin: every other request reaches `bad` until its third invalid response.
    for _ in 0..40 {
        if c.get().is_err() {
            errors += 1;
        }
    }
    assert_eq!(errors, 3, "exactly error_limit requests failed before the mark-down");
    let (oper, check, _, _) = state(&proxy, "bad");
    assert_eq!((oper.as_str(), check.as_str()), ("down", "PASSIVE"));
    // The checks still pass (only traffic is broken): they bring it back after `rise`.
    wait_oper(&proxy, "bad", "up", Duration::from_secs(10));
}

/// A TCP backend whose server is checked on a separate port: closing that port marks it
/// down, and `shutdown-sessions` closes the connection the client holds.
#[test]
fn shutdown_sessions_closes_established_connections() {
    let echo = common::origin(common::echo);
    let check = TcpListener::bind("127.0.0.1:0").unwrap();
    let check_port = check.local_addr().unwrap().port();
    let accept = std::thread::spawn(move || {
        // Accept until dropped by the test's signal (a connection from the test itself).
        for s in check.incoming() {
            let Ok(mut s) = s else { continue };
            let mut b = [0u8; 1];
            if s.read(&mut b).unwrap_or(0) == 1 && b[0] == b'!' {
                return;
            }
        }
    });
    let text = format!(
        "[global]\nworkers = 2\n\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\n\
         [[backend]]\nname = \"be\"\n[backend.health]\ntype = \"tcp\"\ninterval = \"100ms\"\nfall = 2\nrise = 1\n\
         on_marked_down = \"shutdown-sessions\"\n\
         [[backend.server]]\nname = \"e\"\naddress = \"{}\"\ncheck_port = {check_port}\n",
        echo.addr
    );
    let proxy = common::Proxy::start(&text);
    wait_oper(&proxy, "e", "up", Duration::from_secs(5));
    let mut client = TcpStream::connect(proxy.addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    client.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    client.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"ping");
    // Close the check port (the echo port stays open).
    TcpStream::connect(("127.0.0.1", check_port))
        .unwrap()
        .write_all(b"!")
        .unwrap();
    accept.join().unwrap();
    wait_oper(&proxy, "e", "down", Duration::from_secs(5));
    // Closed by the proxy (EOF or reset), not by the 5 s read timeout.
    let began = Instant::now();
    let mut rest = Vec::new();
    let closed = client.read_to_end(&mut rest);
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "session not closed: {closed:?}"
    );
    assert!(rest.is_empty());
}

/// The checker thread's CPU time (user + system) in clock ticks, from /proc.
fn checker_ticks() -> Option<u64> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() == "tollgate-health" {
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
            let rest = stat.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let (user, system) = (f.get(11)?.parse::<u64>().ok()?, f.get(12)?.parse::<u64>().ok()?);
            println!("checker thread: user {user} ticks, system {system} ticks");
            return Some(user + system);
        }
    }
    None
}

/// Measurement, not a test (`cargo nextest run -p tollgate --test health_checks --run-ignored
/// only checker_cpu --no-capture`): 100 servers checked every second, over TCP and then over
/// HTTP, 15 s each; prints the checker thread's CPU as a share of one core (target: < 1 %).
#[test]
#[ignore = "a measurement: run explicitly"]
fn checker_cpu_with_100_servers_at_1s() {
    for kind in ["tcp", "http"] {
        let origin = Origin::start("o");
        let servers: Vec<String> = (0..100).map(|i| format!("s{i}")).collect();
        let list: Vec<(&str, SocketAddr, &str)> = servers.iter().map(|n| (n.as_str(), origin.addr, "")).collect();
        let health = match kind {
            "tcp" => "type = \"tcp\"\ninterval = \"1s\"",
            _ => "type = \"http\"\npath = \"/health\"\ninterval = \"1s\"",
        };
        let proxy = common::Proxy::start(&config("", health, &list));
        // Past the first (spread) round, then measure.
        std::thread::sleep(Duration::from_secs(2));
        let (t0, c0, n0) = (
            Instant::now(),
            checker_ticks().unwrap(),
            origin.checks.load(Ordering::SeqCst),
        );
        let conns0 = state(&proxy, "s0").3;
        std::thread::sleep(Duration::from_secs(15));
        let (t1, c1, n1) = (
            Instant::now(),
            checker_ticks().unwrap(),
            origin.checks.load(Ordering::SeqCst),
        );
        let hz = 100.0; // USER_HZ on Linux
        let cpu = (c1 - c0) as f64 / hz / (t1 - t0).as_secs_f64();
        println!(
            "{kind} checks: checker CPU {:.2} % of a core over {:?} ({} ticks; {} HTTP checks answered)",
            cpu * 100.0,
            t1 - t0,
            c1 - c0,
            n1 - n0
        );
        assert_eq!(conns0, state(&proxy, "s0").3, "checks are not traffic");
        drop(proxy);
    }
}

/// `tls = true` servers are checked over TLS with their own verifier: a handshake that
/// verifies passes, one against the wrong CA fails (`L6RSP`).
#[test]
fn tls_servers_are_checked_with_their_own_verifier() {
    use common::tls::{Ca, TempDir, tls_origin};
    let dir = TempDir::new();
    let (ca, other) = (Ca::new("health ca"), Ca::new("someone else"));
    let leaf = ca.leaf(&["origin.test"], "origin.test", false);
    let origin = tls_origin(leaf.server_config(), |_, _| Vec::new());
    let (good, bad) = (ca.write(&dir, "ca.pem"), other.write(&dir, "other.pem"));
    let server = |ca: &std::path::Path| format!("tls = true\nsni = \"origin.test\"\nca_file = \"{}\"", ca.display());
    let text = config(
        "",
        "type = \"tcp\"\ninterval = \"100ms\"\nrise = 1\nfall = 1",
        &[("good", origin, &server(&good)), ("bad", origin, &server(&bad))],
    );
    let proxy = common::Proxy::start(&text);
    wait_oper(&proxy, "good", "up", Duration::from_secs(5));
    wait_oper(&proxy, "bad", "down", Duration::from_secs(5));
    assert_eq!(state(&proxy, "good").1, "L4OK");
    assert_eq!(state(&proxy, "bad").1, "L6RSP");
}
