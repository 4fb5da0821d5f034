//! Health across a reload (master mode): each server keeps its state — never `unknown`, no
//! flap — and the new generation spreads its first checks instead of checking every
//! server at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;
mod health_support;
mod master_support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use health_support::{Origin, wait_for};
use master_support::{Master, TempDir, global};

/// Servers `up0..up{n}` on one healthy origin, `down` on a failing one.
fn config(
    dir: &std::path::Path,
    healthy: std::net::SocketAddr,
    failing: std::net::SocketAddr,
    n: usize,
    extra: &str,
) -> String {
    let mut s = global(dir, "");
    s.push_str(
        "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n",
    );
    s.push_str(extra);
    s.push_str("\n[backend.health]\ntype = \"http\"\npath = \"/health\"\ninterval = \"1s\"\nrise = 2\nfall = 2\n");
    for i in 0..n {
        s.push_str(&format!(
            "[[backend.server]]\nname = \"up{i}\"\naddress = \"{healthy}\"\n"
        ));
    }
    s.push_str(&format!(
        "[[backend.server]]\nname = \"down\"\naddress = \"{failing}\"\n"
    ));
    s
}

/// (name, oper) of every server, from `ctl --json show servers`.
fn opers(master: &Master) -> Vec<(String, String)> {
    let json: serde_json::Value = serde_json::from_str(&master.ctl_ok(&["--json", "show", "servers"])).unwrap();
    json["answer"]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["oper"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_reload_keeps_every_state_and_spreads_the_checks() {
    const N: usize = 40;
    let healthy = Origin::start("ok");
    let failing = Origin::start("ko");
    failing.behaviour.status.store(500, Ordering::SeqCst);
    let dir = TempDir::new("health-reload");
    let text = config(&dir.0, healthy.addr, failing.addr, N, "");
    let master = Master::start(dir, &text, &[]);
    wait_for(Duration::from_secs(10), "every state settled", || {
        opers(&master)
            .iter()
            .all(|(n, o)| o == if n == "down" { "down" } else { "up" })
            .then_some(())
    });
    let downs = |m: &Master| m.log_count(|l| l.contains("server be/down is DOWN"));
    assert_eq!(downs(&master), 1);

    // A change elsewhere in the file, so that the reload really starts a new generation on
    // a different config; no server's check definition changes.
    let began = Instant::now();
    master.write_config(&config(&master.dir.0, healthy.addr, failing.addr, N, "retries = 2"));
    std::thread::scope(|scope| {
        let reload = scope.spawn(|| master.reload_ok());
        // Watch every state through the reload and for two intervals after it.
        let mut after: Option<Instant> = None;
        let mut polls = 0;
        while after.is_none_or(|t| t.elapsed() < Duration::from_secs(2)) {
            for (name, oper) in opers(&master) {
                let want = if name == "down" { "down" } else { "up" };
                assert_eq!(oper, want, "{name} flapped across the reload (poll {polls})");
            }
            polls += 1;
            if after.is_none() && reload.is_finished() {
                after = Some(Instant::now());
            }
            assert!(began.elapsed() < Duration::from_secs(30), "reload took too long");
        }
        reload.join().unwrap();
        assert!(polls > 5, "only {polls} polls");
    });
    let window = began.elapsed();
    assert_eq!(
        downs(&master),
        1,
        "the down server was marked down again after the reload"
    );
    assert_eq!(master.log_count(|l| l.contains("is UP")), N, "an up server flapped");

    // Rate: N servers every second (±10 %), the two generations overlapping briefly.
    let times: Vec<Instant> = healthy
        .behaviour
        .check_times
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|t| *t >= began)
        .collect();
    let expected = N as f64 * window.as_secs_f64();
    assert!(
        (times.len() as f64) < expected * 1.4 + N as f64 * 0.5,
        "{} checks in {window:?}, expected about {expected:.0}",
        times.len()
    );
    // No burst: a generation checking all N servers at once would put N checks within a few
    // milliseconds; spread, 50 ms hold about N/20 (twice that while both generations check).
    let busiest = times
        .iter()
        .map(|t| {
            times
                .iter()
                .filter(|u| **u >= *t && **u < *t + Duration::from_millis(50))
                .count()
        })
        .max()
        .unwrap_or(0);
    assert!(busiest <= N / 3, "{busiest} checks within 50 ms");
}
