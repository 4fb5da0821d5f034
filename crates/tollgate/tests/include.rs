//! A config split across files, values from the environment, secrets from files, with the
//! real binary: `check` lists the files it read and positions every error in the file it is
//! in; `${VAR}` comes from the process environment (and cannot add structure); a reload
//! reads every included file again, refuses one with an error (FILE:LINE:COL of the included
//! file) while the old generation serves, and a restarted worker runs the text the master
//! read without reading any file; the stats page takes its credentials from
//! `stats_auth_file`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::origin;
use master_support::{BIN, Master, TempDir, global, logged_addr, read_greeting};

/// Writes `text` to `name` under `dir` (directories made), replacing it in one rename as an
/// operator's tooling would.
fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
}

/// `tollgate check --config PATH` with `env` added: (exit code, stdout, stderr).
fn check(path: &Path, env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(["check", "--config"]).arg(path);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn frontend(name: &str, port: u16, backend: &str) -> String {
    format!("[[frontend]]\nname = \"{name}\"\nbind = [\"127.0.0.1:{port}\"]\ndefault_backend = \"{backend}\"\n")
}

fn backend(name: &str, address: &str) -> String {
    format!("[[backend]]\nname = \"{name}\"\n[[backend.server]]\nname = \"s\"\naddress = \"{address}\"\n")
}

#[test]
fn check_lists_the_files_read_nested_and_globbed_in_order() {
    let dir = TempDir::new("inc-check");
    let d = &dir.0;
    write(
        d,
        "tollgate.toml",
        &format!("include = [\"conf.d/*.toml\"]\n{}", frontend("web", 18101, "web")),
    );
    write(d, "conf.d/20-web.toml", &backend("web", "127.0.0.1:9001"));
    write(
        d,
        "conf.d/10-api.toml",
        &format!("include = [\"api/*.toml\"]\n{}", frontend("api", 18102, "api")),
    );
    write(d, "conf.d/api/backend.toml", &backend("api", "127.0.0.1:9002"));
    write(d, "conf.d/README", "not a config");
    let main = d.join("tollgate.toml");
    let (code, out, err) = check(&main, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let read: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("read ")).collect();
    let shown = |name: &str| d.join(name).display().to_string();
    assert_eq!(
        read,
        [
            shown("tollgate.toml"),
            shown("conf.d/10-api.toml"),
            shown("conf.d/api/backend.toml"),
            shown("conf.d/20-web.toml"),
        ],
        "{out}"
    );
    assert!(out.contains("ok: 2 frontend(s), 2 backend(s), 2 server(s)"), "{out}");
}

#[test]
fn check_positions_errors_in_the_included_file_and_names_both_files_of_a_duplicate() {
    let dir = TempDir::new("inc-errors");
    let d = &dir.0;
    write(
        d,
        "tollgate.toml",
        &format!(
            "include = [\"conf.d/*.toml\"]\n{}{}",
            frontend("web", 18111, "web"),
            backend("web", "127.0.0.1:9001")
        ),
    );
    let main = d.join("tollgate.toml");
    let site = d.join("conf.d/site.toml").display().to_string();
    // Line 5, column 11 of the included file: the address.
    write(d, "conf.d/site.toml", &backend("api", "127.0.0.1:0"));
    let (code, _, err) = check(&main, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{site}:5:11: address `127.0.0.1:0` needs a non-zero port")),
        "{err}"
    );
    // An unknown key in the included file.
    write(
        d,
        "conf.d/site.toml",
        &format!("\n{}bnid = 1\n", frontend("api", 18112, "web")),
    );
    let (code, _, err) = check(&main, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("{site}:6:1: unknown field `bnid`")), "{err}");
    // The same backend name in two files: both named, each with its position.
    write(
        d,
        "conf.d/site.toml",
        &format!("# again\n{}", backend("web", "127.0.0.1:9002")),
    );
    let (code, _, err) = check(&main, &[]);
    assert_eq!(code, 2, "{err}");
    let first = format!("{}:7:8", main.display());
    assert!(
        err.contains(&format!("{site}:3:8: duplicate name `web`: also defined at {first}")),
        "{err}"
    );
    // A cycle.
    write(d, "conf.d/site.toml", "include = [\"../tollgate.toml\"]\n");
    let (code, _, err) = check(&main, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{site}:1:12: include cycle: {}", main.display())),
        "{err}"
    );
}

#[test]
fn values_come_from_the_environment_and_cannot_add_structure() {
    let dir = TempDir::new("inc-env");
    let d = &dir.0;
    write(
        d,
        "tollgate.toml",
        "[[frontend]]\nname = \"web\"\nbind = [\"${TG_BIND:-127.0.0.1:18121}\"]\ndefault_backend = \"app\"\n\
         [[backend]]\nname = \"app\"\n[[backend.server]]\nname = \"s\"\naddress = \"${TG_SERVER}\"\n",
    );
    let main = d.join("tollgate.toml");
    let (code, out, err) = check(&main, &[("TG_SERVER", "127.0.0.1:9001")]);
    assert_eq!(code, 0, "{out}{err}");
    // Unset without a default: the variable is named, at the value.
    let (code, _, err) = check(&main, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "{}:9:11: environment variable `TG_SERVER` is not set",
            main.display()
        )),
        "{err}"
    );
    // A value holding a quote, a newline and a table header stays one string.
    let hostile = "127.0.0.1:9001\"\n[global]\nworkers = \"x";
    let (code, _, err) = check(&main, &[("TG_SERVER", hostile)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(":9:11: address `127.0.0.1:9001\""), "{err}");
    assert!(!err.contains("global.workers"), "{err}");
}

/// An origin that says `name` on connect and closes.
fn named(name: &'static str) -> common::Origin {
    origin(move |s| {
        let _ = s.write_all(name.as_bytes());
    })
}

#[test]
fn a_reload_reads_every_included_file_again() {
    let (a, b) = (named("A"), named("B"));
    let dir = TempDir::new("inc-reload");
    let d = dir.0.clone();
    let server = |addr: &str| {
        format!("[[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"s\"\naddress = \"{addr}\"\nweight = 1\n")
    };
    // The server's address comes from the master's environment.
    write(&d, "conf.d/be.toml", &server("${TG_ORIGIN}"));
    let main = format!(
        "include = [\"conf.d/*.toml\"]\n{}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n",
        global(&d, "")
    );
    let a_addr = a.addr.to_string();
    let master = Master::start(dir, &main, &[("TG_ORIGIN", &a_addr)]);
    assert_eq!(read_greeting(master.addr).unwrap(), "A");

    // A change in the included file takes effect at the reload.
    write(&d, "conf.d/be.toml", &server(&b.addr.to_string()));
    master.reload_ok();
    for _ in 0..4 {
        assert_eq!(read_greeting(master.addr).unwrap(), "B");
    }

    // An error in the included file: refused with its FILE:LINE:COL, the old one serves.
    let serving = master.wait_single_generation(Duration::from_secs(10));
    let bad = server(&b.addr.to_string()).replace("weight = 1", "weight = 999");
    write(&d, "conf.d/be.toml", &bad);
    let (code, out, err) = master.reload();
    assert_eq!(code, 2, "{out}{err}");
    let want = format!("{}:6:10:", d.join("conf.d/be.toml").display());
    assert!(
        err.contains(&want) && err.contains("must be between 0 and 256"),
        "{want} in {err}"
    );
    assert_eq!(master.wait_single_generation(Duration::from_secs(10)), serving);
    for _ in 0..4 {
        assert_eq!(read_greeting(master.addr).unwrap(), "B");
    }

    // A new included file is read at the next reload: a second frontend on the same backend.
    write(&d, "conf.d/be.toml", &server(&b.addr.to_string()));
    write(
        &d,
        "conf.d/more.toml",
        "[[frontend]]\nname = \"more\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n",
    );
    let from = master.log_len();
    master.reload_ok();
    let (_, line) = master
        .wait_log_from(
            from,
            |l| l.contains("listening") && l.contains("~1"),
            Duration::from_secs(5),
        )
        .expect("the included frontend listens");
    assert_eq!(read_greeting(logged_addr(&line)).unwrap(), "B");

    // A restarted worker runs the text the master read: no included file is read again.
    std::fs::remove_dir_all(d.join("conf.d")).unwrap();
    let (generation, pid, _) = master.wait_single_generation(Duration::from_secs(10));
    master.signal(pid, rustix::process::Signal::KILL);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let gens = master.generations();
        if gens.iter().any(|g| g.0 > generation && g.2 == "serving") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no restarted worker: {gens:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    for _ in 0..4 {
        assert_eq!(read_greeting(master.addr).unwrap(), "B");
    }
    assert_eq!(a.total.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// Sends a GET for `/` with `auth` (an `Authorization` value): the status.
fn stats_status(addr: SocketAddr, auth: Option<&str>) -> u16 {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    c.write_all(format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\r\n").as_bytes())
        .unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    out.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[test]
fn the_stats_page_takes_its_credentials_from_a_file() {
    let o = named("O");
    let dir = TempDir::new("inc-stats");
    let d = dir.0.clone();
    // `ops:s3cret` and the line break an editor leaves.
    std::fs::write(d.join("stats.auth"), "ops:s3cret\n").unwrap();
    let config = format!(
        "{}\n[admin]\nbind = \"127.0.0.1:0\"\nstats_auth_file = \"stats.auth\"\n\n{}{}",
        global(&d, ""),
        "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n",
        backend("be", &o.addr.to_string())
    );
    let master = Master::start(dir, &config, &[]);
    let line = master
        .wait_log(|l| l.contains("admin endpoint ready"), Duration::from_secs(10))
        .expect("admin endpoint line");
    let admin = logged_addr(&line);
    assert_eq!(stats_status(admin, None), 401);
    assert_eq!(stats_status(admin, Some("Basic b3BzOndyb25n")), 401); // ops:wrong
    assert_eq!(stats_status(admin, Some("Basic b3BzOnMzY3JldA==")), 200); // ops:s3cret

    // A missing file is a clear error at the key, naming the file.
    let other = TempDir::new("inc-stats-missing");
    write(&other.0, "t.toml", &config.replace("stats.auth", "nope.auth"));
    let (code, _, err) = check(&other.0.join("t.toml"), &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot read")
            && err.contains(&other.0.join("nope.auth").display().to_string())
            && err.contains("(key `admin.stats_auth_file`)"),
        "{err}"
    );
}
