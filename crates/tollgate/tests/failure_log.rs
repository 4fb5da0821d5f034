//! Failures tollgate makes are visible at the default log level: one warn line per failure
//! naming frontend, backend, server and cause, at most a few per second per worker, and a
//! line counting what was suppressed. The real binary in master mode (the worker process
//! logs), with `RUST_LOG=info`, the level it uses when RUST_LOG is not set.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::ReservedPort;
use common::http::{Reply, http_origin};
use master_support::{Master, TempDir, global};

/// Lines admitted per second per worker (`ctx::loglimit::BURST`), and the test's workers.
const BURST: u64 = 10;
const WORKERS: u64 = 2;

/// One frontend `fe` routing `/dead` to backend `gone` (server `nobody` on `dead`, a port that refuses connections) and
/// everything else to backend `be` (server `o`, which closes without answering).
fn config(dir: &TempDir, closing_origin: SocketAddr, dead: SocketAddr) -> String {
    format!(
        "{}
[[frontend]]
name = \"fe\"
bind = [\"127.0.0.1:0\"]
mode = \"http\"
default_backend = \"be\"

[[frontend.route]]
path_prefix = \"/dead\"
backend = \"gone\"

[[backend]]
name = \"be\"
mode = \"http\"
[[backend.server]]
name = \"o\"
address = \"{closing_origin}\"

[[backend]]
name = \"gone\"
mode = \"http\"
retries = 0
[[backend.server]]
name = \"nobody\"
address = \"{dead}\"
",
        global(&dir.0, "")
    )
}

/// Sends one request on a new connection; returns the status the proxy answered.
fn status_of(addr: SocketAddr, request: &[u8]) -> u16 {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The log lines from index `from` on that match `pred`.
fn matching(master: &Master, from: usize, pred: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = from;
    while let Some((i, line)) = master.wait_log_from(next, &pred, Duration::ZERO) {
        out.push(line);
        next = i + 1;
    }
    out
}

fn suppressed_in(line: &str) -> Option<u64> {
    line.contains("similar lines")
        .then(|| {
            line.split(" suppressed=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .flatten()
}

#[test]
fn each_failure_is_one_warn_line_and_a_storm_is_rate_limited() {
    let origin = http_origin(|_| Reply::Close);
    let dir = TempDir::new("failure-log");
    let dead = ReservedPort::new(); // refuses connections while held
    let text = config(&dir, origin.addr, dead.addr);
    let master = Master::start(dir, &text, &[]);
    let failed = |l: &str| l.contains("request failed");

    // 503: the server's port is closed.
    assert_eq!(status_of(master.addr, b"GET /dead HTTP/1.1\r\nHost: t\r\n\r\n"), 503);
    let line = master
        .wait_log(failed, Duration::from_secs(10))
        .expect("a warn line for the 503");
    for want in [
        "WARN",
        "frontend=fe",
        "backend=gone",
        "server=nobody",
        "status=503",
        "cause=connect gone/nobody",
    ] {
        assert!(line.contains(want), "{want:?} missing in {line}");
    }
    // 502: the server closed without a response.
    assert_eq!(status_of(master.addr, b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"), 502);
    let (_, line) = master
        .wait_log_from(0, |l| failed(l) && l.contains("status=502"), Duration::from_secs(10))
        .expect("a warn line for the 502");
    for want in [
        "WARN",
        "frontend=fe",
        "backend=be",
        "server=o",
        "cause=server closed before responding",
    ] {
        assert!(line.contains(want), "{want:?} missing in {line}");
    }
    // 400: no backend involved.
    assert_eq!(status_of(master.addr, b"GET /\0 HTTP/1.1\r\nHost: t\r\n\r\n"), 400);
    let (_, line) = master
        .wait_log_from(0, |l| failed(l) && l.contains("status=400"), Duration::from_secs(10))
        .expect("a warn line for the 400");
    assert!(line.contains("frontend=fe backend=- server=-"), "{line}");
    assert_eq!(master.log_count(failed), 3, "one line per failure");

    // A storm: 500 failures. At most BURST lines per second per worker, and the rest counted.
    let from = master.log_len();
    let start = Instant::now();
    for _ in 0..500 {
        assert_eq!(status_of(master.addr, b"GET /dead HTTP/1.1\r\nHost: t\r\n\r\n"), 503);
    }
    let elapsed = start.elapsed();
    // The last window's count is reported once it ends (within a second): wait for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (logged, suppressed, reports) = loop {
        let logged = matching(&master, from, failed).len() as u64;
        let reports: Vec<u64> = matching(&master, from, |l| suppressed_in(l).is_some())
            .iter()
            .filter_map(|l| suppressed_in(l))
            .collect();
        let suppressed: u64 = reports.iter().sum();
        if logged + suppressed >= 500 || Instant::now() > deadline {
            break (logged, suppressed, reports.len() as u64);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        logged + suppressed,
        500,
        "every failure is logged or counted as suppressed, once"
    );
    let windows = elapsed.as_secs() + 2;
    assert!(
        logged <= BURST * WORKERS * windows,
        "{logged} lines in {elapsed:?}: not rate-limited"
    );
    assert!(
        reports >= 1 && reports <= WORKERS * windows,
        "{reports} suppressed-count lines"
    );
    eprintln!("500 failures in {elapsed:?}: {logged} lines, {suppressed} suppressed in {reports} lines");
}

/// A failed TLS handshake is a warn line; a client that hangs up mid-handshake is not.
#[test]
fn tls_handshake_failures_are_warned_but_hang_ups_are_not() {
    let origin = common::origin(common::echo);
    let dir = TempDir::new("failure-log-tls");
    let certs = common::tls::TempDir::new();
    let ca = common::tls::Ca::new("test-ca");
    let leaf = ca.leaf(&["a.example"], "cert-a", false).write(&certs, "a");
    // One worker: the connections below are served in the order they were made.
    let text = format!(
        "[global]\nworkers = 1\ncontrol_socket = \"{}\"\n\
         [[frontend]]\nname = \"tls\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n[frontend.tls]\n{}\n\
         [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        dir.0.join("ctl.sock").display(),
        common::tls::cert_entry(&leaf, true),
        origin.addr,
    );
    let master = Master::start(dir, &text, &[]);
    let failed = |l: &str| l.contains("session failed");
    // Hang-up before any ClientHello: routine.
    drop(TcpStream::connect(master.addr).unwrap());
    // Plain HTTP to the TLS port, twice: a protocol error each time.
    for _ in 0..2 {
        let mut c = TcpStream::connect(master.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n").unwrap();
        let _ = c.read_to_end(&mut Vec::new());
    }
    let (i, _) = master
        .wait_log_from(0, failed, Duration::from_secs(10))
        .expect("a warn line");
    master
        .wait_log_from(i + 1, failed, Duration::from_secs(10))
        .expect("a second warn line");
    let lines = matching(&master, 0, failed);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    for line in &lines {
        for want in [
            "WARN",
            "frontend=tls",
            "backend=- server=-",
            // Plain bytes are refused while waiting for the ClientHello, before any
            // handshake slot is taken.
            "cause=TLS ClientHello: protocol",
        ] {
            assert!(line.contains(want), "{want:?} missing in {line}");
        }
    }
}
