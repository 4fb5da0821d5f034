//! Slow start in master mode: a server set to maintenance and back to ready with
//! `slowstart` takes a clearly smaller share of new connections at first, its share grows,
//! and `show servers` shows its effective weight ramping up to the configured one. A server
//! that never went down does not ramp, and the key is checked at load.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{origin, tcp_config};
use master_support::{Master, TempDir, global, read_greeting};

/// An origin that says its name on connect and closes.
fn named(name: &'static str) -> common::Origin {
    origin(move |s| {
        let _ = s.write_all(name.as_bytes());
    })
}

/// Server `name`'s (effective, configured) weight from `show servers --json`.
fn weights(master: &Master, name: &str) -> (u64, u64) {
    let json = master.ctl_ok(&["--json", "show", "servers", "be"]);
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let rows = rows["answer"]["servers"].as_array().cloned().unwrap_or_default();
    let row = rows
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no row for {name}: {json}"));
    (
        row["effective_weight"].as_u64().unwrap(),
        row["weight"].as_u64().unwrap(),
    )
}

/// How many of `n` fresh connections reached `b`.
fn b_share(master: &Master, n: usize) -> usize {
    (0..n).filter(|_| read_greeting(master.addr).unwrap() == "B").count()
}

const BATCH: usize = 20;

#[test]
fn a_server_back_from_maintenance_ramps_its_share_up() {
    let (a, b) = (named("A"), named("B"));
    let dir = TempDir::new("slowstart");
    let config = tcp_config(&global(&dir.0, ""), &[("a", a.addr, 100), ("b", b.addr, 100)])
        .replace("name = \"be\"\n", "name = \"be\"\nslowstart = \"4s\"\n");
    let master = Master::start(dir, &config, &[]);
    // Up since the start: no ramp, an even split.
    assert_eq!(weights(&master, "b"), (100, 100), "nothing ramps at process start");
    let even = b_share(&master, 2 * BATCH);
    assert_eq!(even, BATCH, "even split before");

    master.ctl_ok(&["set", "server", "be/b", "state", "maint"]);
    master.ctl_ok(&["set", "server", "be/b", "state", "ready"]);
    let came_up = Instant::now();
    let (first_weight, _) = weights(&master, "b");
    assert!(
        first_weight < 50,
        "b starts low after maint -> ready (shown {first_weight}/100)"
    );

    // Batches until b is back at full weight (bounded): its share and the effective weight
    // shown after each batch.
    let mut batches: Vec<(usize, u64)> = Vec::new();
    loop {
        let share = b_share(&master, BATCH);
        let (effective, _) = weights(&master, "b");
        batches.push((share, effective));
        if batches.len() == 1 {
            // The table shows effective/configured while they differ.
            let table = master.ctl_ok(&["show", "servers", "be"]);
            assert!(table.contains("/100"), "b's ramping weight in the table:\n{table}");
        }
        if effective == 100 {
            break;
        }
        assert!(
            came_up.elapsed() < Duration::from_secs(20),
            "never back at full weight: {batches:?}"
        );
    }
    // Per effective weight seen: (weight, batches, connections to b of BATCH each).
    let mut by_weight: Vec<(u64, usize, usize)> = Vec::new();
    for &(share, weight) in &batches {
        match by_weight.last_mut() {
            Some(last) if last.0 == weight => {
                last.1 += 1;
                last.2 += share;
            }
            _ => by_weight.push((weight, 1, share)),
        }
    }
    eprintln!(
        "ramp in {:?} (weight, batches of {BATCH}, to b): {by_weight:?}",
        came_up.elapsed()
    );
    assert!(
        came_up.elapsed() >= Duration::from_millis(3500),
        "full weight before slowstart elapsed: {batches:?}"
    );
    // The weight only goes up, through values in between.
    assert!(batches.windows(2).all(|w| w[0].1 <= w[1].1), "{batches:?}");
    let between = batches.iter().filter(|(_, e)| *e > first_weight && *e < 100).count();
    assert!(between >= 2, "ramped in steps: {batches:?}");
    // The share: clearly below half at first, growing (first half of the ramp's batches
    // against the second), and back to half once at full weight.
    let early = batches[0].0;
    assert!(early * 4 <= BATCH, "b took {early} of the first {BATCH}: {batches:?}");
    let half = batches.len() / 2;
    let (first, second): (usize, usize) = (
        batches[..half].iter().map(|b| b.0).sum(),
        batches[half..].iter().map(|b| b.0).sum(),
    );
    assert!(
        batches.len() < 4 || second > first,
        "share grows over the ramp: {batches:?}"
    );
    let after = b_share(&master, 2 * BATCH);
    assert!(
        (BATCH - 2..=BATCH + 2).contains(&after),
        "even again at full weight: {after} of {}",
        2 * BATCH
    );
}

#[test]
fn slowstart_out_of_range_is_refused_with_its_position() {
    let base = tcp_config("", &[("a", "127.0.0.1:1".parse().unwrap(), 1)]);
    let bad = base.replace("name = \"a\"\n", "name = \"a\"\nslowstart = \"10ms\"\n");
    let err = tollgate::config::parse(&bad, "t.toml").unwrap_err().to_string();
    assert!(
        err.contains("backend[0].server[0].slowstart") && err.contains("t.toml:"),
        "{err}"
    );
    let off = base.replace("name = \"be\"\n", "name = \"be\"\nslowstart = \"0s\"\n");
    let config = tollgate::config::parse(&off, "t.toml").unwrap();
    assert!(config.backends[0].servers[0].slowstart.is_zero());
    let per_server = base
        .replace("name = \"be\"\n", "name = \"be\"\nslowstart = \"30s\"\n")
        .replace("name = \"a\"\n", "name = \"a\"\nslowstart = \"5s\"\n");
    let config = tollgate::config::parse(&per_server, "t.toml").unwrap();
    assert_eq!(config.backends[0].slowstart, Duration::from_secs(30));
    assert_eq!(config.backends[0].servers[0].slowstart, Duration::from_secs(5));
}
