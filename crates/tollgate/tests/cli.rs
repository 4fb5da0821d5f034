//! The binary: the embedded default answers from both origins; `check` refuses bad configs
//! with FILE:LINE:COL and the key path, and exits 0 with a summary on good ones.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod master_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use master_support::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads a started tollgate's log (bounded) until its `listening ... addr=` line, showing
/// every line to `seen`; the process (killed on drop) and the address.
fn listening(child: std::process::Child, mut seen: impl FnMut(&str)) -> (Killed, String) {
    let mut child = Killed(child);
    let stderr = child.0.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        seen(&line);
        if line.contains("listening")
            && let Some(addr) = line.split("addr=").nth(1)
        {
            return (child, addr.trim().to_string());
        }
    }
    panic!("no `listening ... addr=` line within 20 s")
}

fn http_get(addr: &str) -> String {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    s
}

#[test]
fn embedded_default_answers_from_both_origins() {
    let dir = TempDir::new("cli-embedded");
    let child = Command::new(BIN)
        .current_dir(&dir.0) // no ./tollgate.toml here
        .env("TOLLGATE_DEMO_BIND", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    let mut said_embedded = false;
    let (_child, addr) = listening(child, |line| said_embedded |= line.contains("embedded default"));
    assert!(said_embedded, "startup did not say it runs the embedded default");
    let first = http_get(&addr);
    let second = http_get(&addr);
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let names: Vec<bool> = ["origin-a", "origin-b"]
        .iter()
        .map(|o| first.contains(&format!("Hello from {o}")) || second.contains(&format!("Hello from {o}")))
        .collect();
    assert_eq!(names, [true, true], "two requests: {first:?} / {second:?}");
}

const GOOD: &str = r#"[global]
workers = 2

[timeouts]
connect = "2s"

[[frontend]]
name = "web"
bind = ["127.0.0.1:18080"]
default_backend = "app"

[[backend]]
name = "app"

[[backend.server]]
name = "a"
address = "127.0.0.1:9001"
"#;

fn check(name: &str, text: &str) -> (i32, String, String) {
    let dir = TempDir::new("cli-check");
    let path = dir.0.join(name);
    std::fs::write(&path, text).unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("run check");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (
        out.status.code().unwrap_or(-1),
        stdout,
        format!("{}|{}", path.display(), stderr),
    )
}

#[test]
fn check_accepts_a_good_config() {
    let (code, stdout, _) = check("good.toml", GOOD);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("ok: 1 frontend(s), 1 backend(s), 1 server(s)"),
        "{stdout}"
    );
}

#[test]
fn check_refuses_bad_configs_with_position_and_key() {
    // (file name, text, line, key path, words the message must contain)
    let cases: &[(&str, String, usize, &str, &str)] = &[
        (
            "unknown-key.toml",
            GOOD.replace("workers = 2", "workers = 2\nwrokers = 3"),
            3,
            "global.wrokers",
            "unknown field",
        ),
        (
            "wrong-table.toml",
            GOOD.replace("connect = \"2s\"", "connect = \"2s\"\nmaxconn = 10"),
            6,
            "timeouts.maxconn",
            "unknown field",
        ),
        (
            "duplicate.toml",
            format!("{GOOD}\n[[backend]]\nname = \"app\"\n"),
            20,
            "backend[1].name",
            "duplicate name",
        ),
        (
            "missing-backend.toml",
            GOOD.replace("default_backend = \"app\"", "default_backend = \"api\""),
            10,
            "frontend[0].default_backend",
            "does not exist",
        ),
        (
            "bad-address.toml",
            GOOD.replace("127.0.0.1:9001", "127.0.0.1:port"),
            17,
            "backend[0].server[0].address",
            "host:port",
        ),
        (
            "bad-bind.toml",
            GOOD.replace("127.0.0.1:18080", "localhost"),
            9,
            "frontend[0].bind[0]",
            "ip:port",
        ),
        (
            "bad-duration.toml",
            GOOD.replace("\"2s\"", "\"2 seconds\""),
            5,
            "timeouts.connect",
            "unit",
        ),
        (
            "too-many-workers.toml",
            GOOD.replace("workers = 2", "workers = 1000000"),
            2,
            "global.workers",
            "at most 1024",
        ),
        (
            "too-many-streams.toml",
            format!("{GOOD}\n[http2]\nmax_concurrent_streams = 4294967295\n"),
            20,
            "http2.max_concurrent_streams",
            "at most 1024",
        ),
        (
            "bad-syntax.toml",
            GOOD.replace("[[frontend]]", "[[frontend]"),
            7,
            "",
            "expected `]`",
        ),
    ];
    for (name, text, line, key, words) in cases {
        let (code, _, stderr) = check(name, text);
        let (path, msg) = stderr.split_once('|').unwrap();
        assert_eq!(code, 2, "{name}: {msg}");
        let prefix = format!("{path}:{line}:");
        assert!(msg.starts_with(&prefix), "{name}: expected {prefix} in {msg}");
        assert!(
            msg.contains(&format!("(key `{key}`)")) || key.is_empty(),
            "{name}: key {key} not in {msg}"
        );
        assert!(msg.to_lowercase().contains(words), "{name}: {words:?} not in {msg}");
    }
}

/// `tollgate check` on `text` in a fresh directory, bounded by `limit`: (exit code, stderr),
/// or `None` if it had not finished by then (it is killed). `prepare` makes files there.
fn check_within(text: &str, prepare: impl FnOnce(&std::path::Path), limit: Duration) -> Option<(i32, String)> {
    let dir = TempDir::new("cli-files");
    prepare(&dir.0);
    let path = dir.0.join("t.toml");
    std::fs::write(&path, text).unwrap();
    let mut child = Killed(
        Command::new(BIN)
            .args(["check", "--config"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Read as it comes: thousands of errors fill a pipe before the process exits.
    let mut stderr = child.0.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        err
    });
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.0.try_wait().unwrap() {
            return Some((status.code().unwrap_or(-1), reader.join().unwrap()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// Every file a config names is read bounded, regular files only: a device (whose reported
/// size is 0), a FIFO (no writer: a plain open would wait forever) and a file past its
/// limit are each refused at once, saying what they are.
#[test]
fn check_refuses_devices_fifos_and_oversized_files_at_once() {
    let tls = |cert: &str, key: &str| {
        GOOD.replace(
            "default_backend = \"app\"",
            &format!(
                "default_backend = \"app\"\n[frontend.tls]\n[[frontend.tls.cert]]\ncert = \"{cert}\"\nkey = \"{key}\"\n"
            ),
        )
    };
    let fifo = |dir: &std::path::Path| {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dir.join("fifo.pem"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    };
    let big = |dir: &std::path::Path| std::fs::write(dir.join("big.pem"), vec![b'x'; (1 << 20) + 1]).unwrap();
    let body = |file: &str| {
        format!(
            "{GOOD}\n[[frontend]]\nname = \"h\"\nbind = [\"127.0.0.1:18081\"]\nmode = \"http\"\ndefault_backend = \"app\"\n\
             [[frontend.route]]\nreturn = {{ status = 503, body_file = \"{file}\" }}\n"
        )
    };
    type Prepare = Box<dyn FnOnce(&std::path::Path)>;
    let cases: Vec<(&str, String, Prepare, &str)> = vec![
        (
            "cert /dev/zero",
            tls("/dev/zero", "/dev/zero"),
            Box::new(|_| {}),
            "not a regular file (a device)",
        ),
        (
            "cert FIFO",
            tls("fifo.pem", "fifo.pem"),
            Box::new(fifo),
            "not a regular file (a FIFO)",
        ),
        (
            "cert too big",
            tls("big.pem", "big.pem"),
            Box::new(big),
            "larger than the 1048576-byte limit",
        ),
        (
            "body_file /dev/zero",
            body("/dev/zero"),
            Box::new(|_| {}),
            "not a regular file (a device)",
        ),
        (
            "body_file FIFO",
            body("fifo.pem"),
            Box::new(fifo),
            "not a regular file (a FIFO)",
        ),
    ];
    for (what, text, prepare, words) in cases {
        let began = Instant::now();
        let (code, err) = check_within(&text, prepare, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{what}: check still running after 10 s"));
        assert_eq!(code, 2, "{what}: {err}");
        assert!(err.contains(words), "{what}: {words:?} not in {err}");
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{what}: took {:?}",
            began.elapsed()
        );
    }
    // The config file itself.
    let out = Command::new(BIN)
        .args(["check", "--config", "/dev/zero"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = Killed(out);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = out.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "check --config /dev/zero still running");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    out.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("not a regular file"), "{err}");
}

/// Errors are positioned in one pass over the file: 11,000 of them (one per backend with a
/// bad name) are reported well within a bound that a scan of the file per error (what it
/// was: quadratic, 20 s in a release build) cannot meet.
#[test]
fn check_reports_eleven_thousand_errors_quickly() {
    let mut text = GOOD.to_string();
    for i in 0..11_000 {
        text.push_str(&format!(
            "\n[[backend]]\nname = \"bad name {i}\"\n[[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:9001\"\n"
        ));
    }
    let began = Instant::now();
    let (code, err) = check_within(&text, |_| {}, Duration::from_secs(30)).expect("check finished within 30 s");
    let took = began.elapsed();
    assert_eq!(code, 2);
    let errors = err.lines().filter(|l| l.contains("must be non-empty")).count();
    assert_eq!(errors, 11_000, "{}", err.lines().next().unwrap_or_default());
    let last = err.lines().rfind(|l| l.contains("bad name 10999")).unwrap();
    assert!(last.contains(&format!(":{}:", 17 + 11_000 * 6 - 3)), "{last}");
    eprintln!("11,000 errors in {took:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

#[test]
fn help_and_version() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("Examples:") && help.contains("tollgate check --config"),
        "{help}"
    );
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("tollgate 0."));
}

fn tollgate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).output().expect("run tollgate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn usage_errors_exit_64() {
    for args in [
        &["--bogus"][..],
        &["run", "--bogus"],
        &["check", "--config"],
        &["reload", "extra"],
        &["frobnicate"],
    ] {
        let (code, _, stderr) = tollgate(args);
        assert_eq!(code, 64, "{args:?}: {stderr}");
        assert!(stderr.contains("error:"), "{args:?}: {stderr}");
    }
    for args in [&["--help"][..], &["run", "--help"], &["--version"]] {
        assert_eq!(tollgate(args).0, 0, "{args:?}");
    }
}

#[test]
fn refused_configs_exit_2_from_run_and_check() {
    let dir = TempDir::new("cli-refused");
    let (missing, empty, bad) = (
        dir.0.join("missing.toml"),
        dir.0.join("empty.toml"),
        dir.0.join("bad.toml"),
    );
    std::fs::write(&empty, "[global]\nworkers = 1\n").unwrap();
    std::fs::write(&bad, GOOD.replace("workers = 2", "workers = 0")).unwrap();
    let shown = |p: &PathBuf| p.display().to_string();
    // (file, what its one line of stderr starts with)
    let cases = [
        (
            shown(&missing),
            format!("cannot read {}: No such file or directory\n", shown(&missing)),
        ),
        (shown(&empty), format!("{}:1:1: no [[frontend]]", shown(&empty))),
        (shown(&bad), format!("{}:2:11: must be at least 1", shown(&bad))),
    ];
    for (path, start) in &cases {
        for args in [vec!["check", "-c", path], vec!["run", "-c", path], vec!["-c", path]] {
            let (code, _, stderr) = tollgate(&args);
            assert_eq!(code, 2, "{args:?}: {stderr}");
            assert!(stderr.starts_with(start.as_str()), "{args:?}: {start:?} vs {stderr:?}");
            assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        }
    }
}

/// `tollgate -c FILE` is `tollgate run -c FILE`: it serves.
#[test]
fn dash_c_without_a_command_runs() {
    let origin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin_addr = origin.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in origin.incoming() {
            let Ok(mut s) = s else { continue };
            let _ = s.write_all(b"hi from origin");
        }
    });
    let dir = TempDir::new("cli-dash-c");
    let path = dir.0.join("run.toml");
    let text = GOOD
        .replace("127.0.0.1:18080", "127.0.0.1:0")
        .replace("127.0.0.1:9001", &origin_addr.to_string());
    std::fs::write(&path, text).unwrap();
    let child = Command::new(BIN)
        .arg("-c")
        .arg(&path)
        .arg("--no-master")
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    let (_child, addr) = listening(child, |_| {});
    let mut c = TcpStream::connect(&addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = String::new();
    c.read_to_string(&mut got).unwrap();
    assert_eq!(got, "hi from origin");
}

/// Every option of every command says what it does in `--help`.
#[test]
fn every_option_has_a_help_line() {
    for command in [
        &[][..],
        &["run"],
        &["check"],
        &["reload"],
        &["status"],
        &["ctl"],
        &["ctl", "show", "servers"],
        &["ctl", "set", "server"],
        &["ctl", "set", "server", "app/a", "state"],
        &["ctl", "set", "server", "app/a", "weight"],
        &["explain"],
    ] {
        let mut args = command.to_vec();
        args.push("--help");
        let (code, help, _) = tollgate(&args);
        assert_eq!(code, 0, "{args:?}");
        let options: Vec<&str> = help
            .lines()
            .skip_while(|l| !l.starts_with("Options:"))
            .skip(1)
            .take_while(|l| !l.is_empty())
            .filter(|l| l.trim_start().starts_with('-'))
            .collect();
        assert!(options.len() >= 2, "{args:?}: no options found in\n{help}");
        for line in options {
            // `  -c, --config <CONFIG>  Config file ...`: the flag, two spaces, the help.
            let spec_end = line.trim_start().find("  ");
            let text = spec_end.map(|at| line.trim_start()[at..].trim()).unwrap_or("");
            assert!(!text.is_empty(), "{args:?}: option without help: {line:?}");
        }
    }
}

/// `h2` offered on an http-mode frontend would be negotiated and then read as HTTP/1
/// (clients get an empty reply): `check` refuses it at its position; a tcp-mode frontend
/// relays h2 to a server that speaks it, so there it passes.
#[test]
fn check_refuses_alpn_http_mode_does_not_speak() {
    let dir = TempDir::new("cli-alpn");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["a.example".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (c, k) = (dir.0.join("a.crt"), dir.0.join("a.key"));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    let config = |mode: &str, second: &str| {
        format!(
            "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:18443\"]\nmode = \"{mode}\"\ndefault_backend = \"app\"\n\
             [frontend.tls]\nalpn = [\"http/1.1\", \"{second}\"]\n[[frontend.tls.cert]]\ncert = \"{}\"\nkey = \"{}\"\n\
             [[backend]]\nname = \"app\"\nmode = \"{mode}\"\n[[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:9001\"\n",
            c.display(),
            k.display(),
        )
    };
    let (code, _, stderr) = check("alpn-http.toml", &config("http", "spdy/3"));
    let (path, msg) = stderr.split_once('|').unwrap();
    assert_eq!(code, 2, "{msg}");
    assert!(msg.starts_with(&format!("{path}:7:21:")), "{msg}");
    assert!(
        msg.contains("(key `frontend[0].tls.alpn[1]`)") && msg.contains("`spdy/3`"),
        "{msg}"
    );
    // HTTP mode speaks h2 (proxy::h2front); TCP mode relays whatever the client speaks.
    let (code, stdout, stderr) = check("alpn-h2.toml", &config("http", "h2"));
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (code, stdout, stderr) = check("alpn-tcp.toml", &config("tcp", "h2"));
    assert_eq!(code, 0, "{stdout}{stderr}");
}

const EXPLAIN: &str = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:18080"]
mode = "http"
default_backend = "app"

[[frontend.route]]
host = "www.example"
backend = "app"

[[frontend.route]]
path_prefix = "/v1/"
header = { name = "x-tenant", value = "blue" }
backend = "blue"

[[frontend.route]]
path_prefix = "/ping"
return = { status = 200, body = "pong" }

[[frontend]]
name = "tls"
bind = ["127.0.0.1:18443"]
default_backend = "raw"

[[frontend.route]]
sni = "a.example"
backend = "raw"

[[backend]]
name = "app"
mode = "http"

[[backend.server]]
name = "a"
address = "127.0.0.1:9001"
weight = 3

[[backend.server]]
name = "spare"
address = "127.0.0.1:9002"
backup = true

[[backend]]
name = "blue"
mode = "http"
balance = "hash"
hash_key = "header:x-tenant"

[[backend.server]]
name = "b1"
address = "127.0.0.1:9011"

[[backend]]
name = "raw"

[[backend.server]]
name = "r1"
address = "127.0.0.1:9021"
"#;

/// A reader that stops early (`tollgate explain ... | head -1`) ends the output quietly: no
/// panic about a broken pipe, the command's own exit status.
#[test]
fn a_reader_that_goes_away_is_not_a_panic() {
    let dir = TempDir::new("cli-pipe");
    let path = dir.0.join("explain.toml");
    std::fs::write(&path, EXPLAIN).unwrap();
    let mut child = Command::new(BIN)
        .args([
            "explain",
            "--config",
            path.to_str().unwrap(),
            "GET",
            "http://api.example:18080/v1/x",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The read end closes before the answer is written: every write meets EPIPE.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

/// `explain` runs the binary against a config: it names the frontend by port, each skipped
/// route with what differed, the backend and the server a pick chooses (the primary, with
/// its state and weight); a fixed response; SNI routing on a TCP frontend; `--json`.
#[test]
fn explain_names_frontend_routes_backend_and_server() {
    let dir = TempDir::new("cli-explain");
    let path = dir.0.join("explain.toml");
    std::fs::write(&path, EXPLAIN).unwrap();
    let config = path.to_str().unwrap();

    let (code, out, err) = tollgate(&["explain", "--config", config, "GET", "http://api.example:18080/v1/x"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "frontend web (http): binds port 18080", "{out}");
    assert_eq!(
        lines[1], "route[0] skipped: host api.example does not match www.example",
        "{out}"
    );
    assert_eq!(
        lines[2], "route[1] skipped: header x-tenant is absent, not \"blue\"",
        "{out}"
    );
    assert_eq!(
        lines[3], "route[2] skipped: path /v1/x does not start with /ping",
        "{out}"
    );
    assert_eq!(
        lines[4], "route: no route matched: the frontend's default backend",
        "{out}"
    );
    assert_eq!(lines[5], "backend app", "{out}");
    assert_eq!(lines[6], "balance roundrobin", "{out}");
    assert!(
        out.contains(
            "server a 127.0.0.1:9001: admin ready, oper unknown, weight 3 (effective 3), primary, load 0, usable"
        ),
        "{out}"
    );
    assert!(
        out.contains("server spare 127.0.0.1:9002: admin ready, oper unknown, weight 1 (effective 1), backup,"),
        "{out}"
    );
    assert!(
        out.contains("pick: a: roundrobin picks it among the usable servers; it is a usable primary"),
        "{out}"
    );

    let (code, out, err) = tollgate(&[
        "explain",
        "--config",
        config,
        "http://api.example:18080/v1/x",
        "-H",
        "X-Tenant: blue",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("route[1] matched: every condition holds"), "{out}");
    assert!(out.contains("backend blue"), "{out}");
    assert!(out.contains("hash key: header x-tenant = \"blue\""), "{out}");
    assert!(out.contains("pick: b1:"), "{out}");

    let (code, out, _) = tollgate(&["explain", "--config", config, "http://x:18080/ping"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("route[2] matched") && out.contains("return 200 (text/plain"),
        "{out}"
    );
    assert!(!out.contains("pick:"), "a fixed response picks no server: {out}");

    let (code, out, err) = tollgate(&[
        "explain",
        "--config",
        config,
        "--port",
        "18443",
        "--sni",
        "a.example",
        "x",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("frontend tls (tcp): binds port 18443"), "{out}");
    assert!(
        out.contains("route[0] matched: its sni pattern matches") && out.contains("pick: r1:"),
        "{out}"
    );

    let (code, out, _) = tollgate(&["explain", "--config", config, "--json", "http://api.example:18080/"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["frontend"], "web");
    assert_eq!(v["target"]["kind"], "backend");
    assert_eq!(v["pick"]["server"], "a");
    assert_eq!(v["pick"]["servers"][1]["backup"], true);

    let (code, _, err) = tollgate(&["explain", "--config", config, "--frontend", "nope", "http://x/"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("no frontend named"), "{err}");
}

const EXPLAIN_STICKY: &str = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:18081"]
mode = "http"
default_backend = "app"

[[frontend.route]]
method = ["DELETE"]
return = { status = 405, body = "no deletes" }

[[backend]]
name = "app"
mode = "http"

[backend.sticky]
cookie = "SRV"

[[backend.server]]
name = "a"
address = "127.0.0.1:9001"

[[backend.server]]
name = "b"
address = "127.0.0.1:9002"
"#;

/// The documented one-string form `explain 'DELETE http://x/v1/items'` is a method and a
/// URL, not a URL with method GET; junk after the path is refused, not explained; a sticky
/// cookie in `-H` decides the pick as it does in the proxy.
#[test]
fn explain_reads_the_one_string_form_refuses_junk_and_follows_the_sticky_cookie() {
    let dir = TempDir::new("cli-explain-sticky");
    let path = dir.0.join("explain.toml");
    std::fs::write(&path, EXPLAIN_STICKY).unwrap();
    let config = path.to_str().unwrap();

    let (code, out, err) = tollgate(&["explain", "--config", config, "DELETE http://x:18081/v1/items"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("route[0] matched") && out.contains("return 405"),
        "the method of the one-string form was not used: {out}"
    );
    let (code, out, _) = tollgate(&["explain", "--config", config, "GET http://x:18081/v1/items"]);
    assert_eq!(code, 0);
    assert!(out.contains("backend app"), "{out}");

    for junk in [
        "GET http://x:18081/v1/items junk",
        "http://x:18081/v1 items",
        "DELETE http://x:18081/v1/items HTTP/1.1 extra",
    ] {
        let (code, out, err) = tollgate(&["explain", "--config", config, junk]);
        assert_eq!(code, 64, "{junk:?} explained: {out}");
        assert!(
            err.contains("URL") || err.contains("is not an HTTP method"),
            "{junk:?}: {err}"
        );
    }
    let (code, _, err) = tollgate(&["explain", "--config", config, "G(T", "http://x:18081/"]);
    assert_eq!(code, 64);
    assert!(err.contains("not an HTTP method"), "{err}");

    // The value the proxy gives server b (ctx/sticky.rs): xxh3 of a domain string, the
    // backend's and the server's names.
    let b = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(b"tollgate sticky v1\0app\0b"));
    let (code, out, err) = tollgate(&[
        "explain",
        "--config",
        config,
        "http://x:18081/",
        "-H",
        &format!("Cookie: theme=dark; SRV={b}"),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("pick: b: the sticky cookie SRV={b} names it")),
        "{out}"
    );
    let (_, out, _) = tollgate(&[
        "explain",
        "--config",
        config,
        "http://x:18081/",
        "-H",
        "Cookie: SRV=0123456789abcdef",
    ]);
    assert!(out.contains("names no server of the backend: balanced"), "{out}");
    assert!(out.contains("pick: a:"), "{out}");
}

/// `tollgate man` is one page: no `tollgate-run(1)`-style references to pages that are never
/// produced, every command listed (nested ones by their full invocation), the examples one
/// per tagged paragraph (not reflowed), and the exit status, signals and files sections.
#[test]
fn the_man_page_lists_commands_signals_and_files() {
    let (code, page, err) = tollgate(&["man"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        !page.contains("(1)") && !page.contains("tollgate\\-run"),
        "references a page that is never produced: {page}"
    );
    for section in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH COMMANDS",
        ".SH EXAMPLES",
        ".SH EXIT STATUS",
        ".SH SIGNALS",
        ".SH FILES",
    ] {
        assert!(page.contains(section), "no {section}: {page}");
    }
    for command in [
        "tollgate run",
        "tollgate check",
        "tollgate reload",
        "tollgate ctl show servers",
        "tollgate ctl set server",
        "tollgate explain",
    ] {
        assert!(page.contains(&format!(".B {command}")), "{command} not listed: {page}");
    }
    assert!(
        !page.contains(".B tollgate worker"),
        "the hidden worker command is listed"
    );
    for signal in ["SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1"] {
        assert!(page.contains(&format!(".B {signal}")), "{signal}");
    }
    assert!(page.contains(".B /etc/tollgate/tollgate.toml"));
    // Each example is its own tagged paragraph: a line starting with the command.
    assert!(
        page.contains(".B tollgate check \\-\\-config tollgate.toml\n"),
        "{page}"
    );
}

/// `check` finds its config as `run` does: ./tollgate.toml first; with none anywhere it says
/// where it looked (exit 64) instead of demanding `--config`.
#[test]
fn check_without_config_reads_the_file_run_would() {
    let dir = TempDir::new("cli-check-default");
    std::fs::write(dir.0.join("tollgate.toml"), EXPLAIN_STICKY).unwrap();
    let out = Command::new(BIN).arg("check").current_dir(&dir.0).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("tollgate.toml: ok"), "{stdout}");

    let empty = TempDir::new("cli-check-none");
    if !std::path::Path::new("/etc/tollgate/tollgate.toml").exists() {
        let out = Command::new(BIN).arg("check").current_dir(&empty.0).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{stderr}");
        assert!(stderr.contains("no config file to check"), "{stderr}");
    }
}

/// `--kill` goes with `maint` only: said before the master is asked, as a usage error (64,
/// as documented), whatever the socket.
#[test]
fn kill_without_maint_is_a_usage_error() {
    let (code, _, err) = tollgate(&[
        "ctl",
        "--socket",
        "/nonexistent/tollgate.sock",
        "set",
        "server",
        "app/a",
        "state",
        "ready",
        "--kill",
    ]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--kill goes with state maint"), "{err}");
}

/// An expired certificate loads (an operator may be about to swap one in), but `check`
/// says so, and so does every start and reload (in the log).
#[test]
fn check_warns_about_an_expired_certificate() {
    let dir = TempDir::new("cli-expired");
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["old.example".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let cert = params.self_signed(&key).unwrap();
    let (cert_path, key_path) = (dir.0.join("old.crt"), dir.0.join("old.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    let config = dir.0.join("t.toml");
    std::fs::write(
        &config,
        format!(
            "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:18443\"]\ndefault_backend = \"be\"\n\
             [frontend.tls]\n[[frontend.tls.cert]]\ncert = \"{}\"\nkey = \"{}\"\n\
             [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:9001\"\n",
            cert_path.display(),
            key_path.display()
        ),
    )
    .unwrap();
    let (code, out, err) = tollgate(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(": ok:"), "{out}");
    assert!(
        err.contains("warning: frontend web: the certificate") && err.contains("for old.example expired"),
        "{err}"
    );
}
