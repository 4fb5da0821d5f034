//! What a reload does with the config: a bad one is refused with FILE:LINE:COL and the old
//! generation keeps serving; a changed backend takes effect for new connections; binds
//! added by a reload listen, binds removed are closed once no generation uses them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{origin, tcp_config};
use master_support::{Master, TempDir, global, logged_addr, read_greeting};

/// An origin that says its name on connect and closes.
fn named(name: &'static str) -> common::Origin {
    origin(move |s| {
        let _ = s.write_all(name.as_bytes());
    })
}

#[test]
fn bad_config_is_refused_and_the_old_generation_keeps_serving() {
    let a = named("A");
    let dir = TempDir::new("reload-bad");
    let good = tcp_config(&global(&dir.0, ""), &[("a", a.addr, 1)]);
    let master = Master::start(dir, &good, &[]);
    assert_eq!(read_greeting(master.addr).unwrap(), "A");

    // Line 3 gets an unknown key.
    let bad = good.replacen("workers = 2", "workers = 2\nwrokers = 3", 1);
    assert_eq!(bad.lines().nth(2), Some("wrokers = 3"));
    master.write_config(&bad);
    let (code, out, err) = master.reload();
    assert_eq!(code, 2, "refused reload exits 2: {out} {err}");
    let want = format!("{}:3:1:", master.config.display());
    assert!(err.contains(&want) && err.contains("global.wrokers"), "{want} in {err}");
    assert!(
        master
            .wait_log(
                |l| l.contains("reload refused") && l.contains(&want),
                Duration::from_secs(5)
            )
            .is_some(),
        "the refusal is logged"
    );
    let gens = master.generations();
    assert_eq!(gens.len(), 1, "{gens:?}");
    assert_eq!((gens[0].0, gens[0].2.as_str()), (1, "serving"));
    for _ in 0..5 {
        assert_eq!(read_greeting(master.addr).unwrap(), "A");
    }
    // Fixed: the next reload goes through.
    master.write_config(&good);
    master.reload_ok();
    assert_eq!(read_greeting(master.addr).unwrap(), "A");
}

#[test]
fn reload_changes_the_backend_servers_for_new_connections() {
    let (a, b) = (named("A"), named("B"));
    let dir = TempDir::new("reload-be");
    let config = tcp_config(&global(&dir.0, ""), &[("a", a.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    for _ in 0..4 {
        assert_eq!(read_greeting(master.addr).unwrap(), "A");
    }
    let config = tcp_config(&global(&master.dir.0, ""), &[("b", b.addr, 1)]);
    master.write_config(&config);
    master.reload_ok();
    let answers: Vec<String> = (0..8).map(|_| read_greeting(master.addr).unwrap()).collect();
    assert!(answers.iter().all(|a| a == "B"), "{answers:?}");
    assert_eq!(b.total.load(std::sync::atomic::Ordering::SeqCst), 8);
}

#[test]
fn binds_added_listen_and_binds_removed_close() {
    let a = named("A");
    let dir = TempDir::new("reload-binds");
    let one = tcp_config(&global(&dir.0, ""), &[("a", a.addr, 1)]);
    let master = Master::start(dir, &one, &[]);
    let two = format!("{one}\n[[frontend]]\nname = \"fe2\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n");
    let from = master.log_len();
    master.write_config(&two);
    master.reload_ok();
    let (_, line) = master
        .wait_log_from(
            from,
            |l| l.contains("listening") && l.contains("~1"),
            Duration::from_secs(5),
        )
        .expect("the new bind is logged");
    let added = logged_addr(&line);
    assert_ne!(added, master.addr);
    assert_eq!(read_greeting(added).unwrap(), "A");
    assert_eq!(read_greeting(master.addr).unwrap(), "A");

    master.write_config(&one);
    master.reload_ok();
    master.wait_single_generation(Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(added).is_ok() {
        assert!(Instant::now() < deadline, "the removed bind still accepts");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(read_greeting(master.addr).unwrap(), "A");
}

#[test]
fn reload_without_a_master_says_so_and_a_second_master_is_refused() {
    let dir = TempDir::new("reload-none");
    let out = std::process::Command::new(master_support::BIN)
        .args(["reload", "--socket"])
        .arg(dir.0.join("nobody.sock"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("connect to the master"));

    // A second master on the same control socket refuses to start.
    let a = named("A");
    let config = tcp_config(&global(&dir.0, ""), &[("a", a.addr, 1)]);
    let master = Master::start(dir, &config, &[]);
    let second = std::process::Command::new(master_support::BIN)
        .args(["run", "--config"])
        .arg(&master.config)
        .output()
        .unwrap();
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("in use by another master"));
    assert_eq!(read_greeting(master.addr).unwrap(), "A");
}

/// `control_socket = "ctl.sock"` lives next to the config file whatever the master's working
/// directory, and `tollgate reload --config FILE` run from anywhere finds it.
#[test]
fn a_relative_control_socket_is_relative_to_the_config_file() {
    let a = named("A");
    let dir = TempDir::new("reload-relative");
    let elsewhere = TempDir::new("reload-relative-cwd");
    let config = tcp_config(
        "[global]\nworkers = 2\ncontrol_socket = \"ctl.sock\"\n",
        &[("a", a.addr, 1)],
    );
    let bin = std::path::Path::new(master_support::BIN);
    let master = Master::start_in(bin, &elsewhere.0, dir, &config, &[]);
    assert!(master.socket.exists(), "{} missing", master.socket.display());
    assert!(
        !elsewhere.0.join("ctl.sock").exists(),
        "bound relative to the working directory"
    );
    let out = std::process::Command::new(bin)
        .args(["reload", "--config"])
        .arg(&master.config)
        .current_dir("/")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("reloaded: generation 2"));
    assert_eq!(read_greeting(master.addr).unwrap(), "A");
}
