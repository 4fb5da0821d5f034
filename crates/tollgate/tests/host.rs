//! Fitting the host: systemd's readiness protocol (a `NOTIFY_SOCKET` listener stands in for
//! systemd: READY once serving, RELOADING then READY around a reload, STOPPING at SIGTERM,
//! STATUS lines), shell completions and the man page generated from the CLI definition.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::Duration;

use common::{echo, origin, tcp_config};
use master_support::{BIN, Master, TempDir, global};

/// The next notification that is more than a `STATUS=` update (those come whenever a
/// generation starts serving or exits), as text.
fn next(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    for _ in 0..100 {
        let n = sock.recv(&mut buf).expect("a notification within the timeout");
        let text = String::from_utf8(buf[..n].to_vec()).unwrap();
        if text.lines().any(|l| !l.starts_with("STATUS=")) {
            return text;
        }
        assert!(text.starts_with("STATUS=serving generation"), "{text:?}");
    }
    panic!("only STATUS updates");
}

fn field<'a>(message: &'a str, key: &str) -> Option<&'a str> {
    message.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn ready_reloading_ready_stopping_reach_the_notify_socket() {
    let o = origin(echo);
    let dir = TempDir::new("notify");
    let path = dir.0.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let config = tcp_config(&global(&dir.0, ""), &[("a", o.addr, 1)]);
    let mut master = Master::start(dir, &config, &[("NOTIFY_SOCKET", path.to_str().unwrap())]);

    let ready = next(&sock);
    assert_eq!(field(&ready, "READY"), Some("1"), "{ready:?}");
    let status = field(&ready, "STATUS").unwrap();
    assert!(
        status.contains("serving generation 1") && status.contains("2 worker threads"),
        "{status}"
    );

    // Workers do not inherit the socket: only the master speaks for the service.
    let (_, worker_pid, _) = master.wait_single_generation(Duration::from_secs(10));
    let environ = std::fs::read(format!("/proc/{worker_pid}/environ")).unwrap();
    assert!(!String::from_utf8_lossy(&environ).contains("NOTIFY_SOCKET"));

    master.reload_ok();
    let reloading = next(&sock);
    assert_eq!(field(&reloading, "RELOADING"), Some("1"), "{reloading:?}");
    let usec: u64 = field(&reloading, "MONOTONIC_USEC").unwrap().parse().unwrap();
    assert!(usec > 0);
    let ready = next(&sock);
    assert_eq!(field(&ready, "READY"), Some("1"), "{ready:?}");
    assert!(
        field(&ready, "STATUS").unwrap().contains("serving generation 2"),
        "{ready:?}"
    );

    // A refused reload is over too: READY again, the old generation still serving.
    std::fs::write(&master.config, "[global\n").unwrap();
    let (code, _, _) = master.reload();
    assert_eq!(code, 2);
    assert_eq!(field(&next(&sock), "RELOADING"), Some("1"));
    let ready = next(&sock);
    assert!(
        field(&ready, "STATUS").unwrap().contains("serving generation 2"),
        "{ready:?}"
    );

    master.signal(master.pid(), rustix::process::Signal::TERM);
    let stopping = next(&sock);
    assert_eq!(field(&stopping, "STOPPING"), Some("1"), "{stopping:?}");
    assert!(master.wait_exit(Duration::from_secs(20)).is_some());
}

fn run(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn completions_for_each_shell_know_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let script = run(&["completions", shell]);
        for word in ["reload", "ctl", "check", "completions"] {
            assert!(script.contains(word), "{shell} completions lack `{word}`");
        }
        // clap_complete also lists hidden subcommands (the internal `worker`): harmless.
    }
    let out = Command::new(BIN).args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "an unknown shell is a usage error");
}

#[test]
fn the_man_page_renders_from_the_cli_definition() {
    let page = run(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH"),
        "roff: {}",
        &page[..page.len().min(200)]
    );
    // One page: every command listed in COMMANDS by its full invocation, none referred to
    // a `tollgate-run(1)` page that is never produced (tests/cli.rs checks the rest).
    for section in ["NAME", "SYNOPSIS", "COMMANDS"] {
        assert!(page.contains(&format!(".SH {section}")), "no {section} section");
    }
    for sub in ["tollgate reload", "tollgate ctl", "tollgate check", "tollgate run"] {
        assert!(page.contains(&format!(".B {sub}")), "no {sub}");
    }
    assert!(!page.contains("tollgate\\-run(1)"), "refers to a page never produced");
}
