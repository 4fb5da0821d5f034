//! Access logs: one line per HTTP request (keep-alive, pipelined, retried, timed out) and per
//! TCP session, with the right fields; the text layout; a sink that blocks never stalls
//! traffic and its dropped lines are counted; SIGUSR1 reopens the file (master mode).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{BufReader, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::http::*;
use common::tls::TempDir;
use common::*;
use serde_json::Value;

/// The `[log]` table writing to `path` in `format`.
fn log_table(path: &Path, format: &str) -> String {
    format!("[log]\naccess = \"{}\"\nformat = \"{format}\"\n", path.display())
}

fn json_lines(path: &Path, n: usize) -> Vec<Value> {
    let lines = wait_lines(path, n);
    assert_eq!(lines.len(), n, "exactly one line per stream: {lines:#?}");
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn ms(v: &Value, key: &str) -> Option<f64> {
    v[key].as_f64()
}

/// The timings of a forwarded request are all there and only move forward.
fn assert_forwarded(v: &Value, path: &str) {
    assert_eq!(v["method"], "GET", "{v}");
    assert_eq!(v["path"], path, "{v}");
    assert_eq!(v["status"], 200, "{v}");
    assert_eq!(
        (&v["frontend"], &v["backend"], &v["server"]),
        (&"fe".into(), &"be".into(), &"o".into())
    );
    assert_eq!(v["termination"], "normal");
    assert_eq!(v["termination_code"], "--");
    assert_eq!(v["retries"], 0);
    assert_eq!(v["tls_version"], Value::Null);
    assert!(v["client"].as_str().unwrap().starts_with("127.0.0.1:"), "{v}");
    assert!(v["time"].as_str().unwrap().ends_with('Z'), "{v}");
    assert!(v["bytes_to_server"].as_u64().unwrap() > 0, "{v}");
    let steps: Vec<f64> = ["head_ms", "queued_ms", "connected_ms", "response_ms", "total_ms"]
        .iter()
        .map(|k| ms(v, k).unwrap_or_else(|| panic!("{k} missing: {v}")))
        .collect();
    assert!(steps.windows(2).all(|w| w[0] <= w[1]), "timings move forward: {v}");
}

#[test]
fn keep_alive_and_pipelined_requests_each_get_one_json_line_curl() {
    if Command::new("curl").arg("--version").output().is_err() {
        println!("skipped: curl is not installed");
        return;
    }
    let origin = http_origin(|r| ok(&format!("path {}", r.target)));
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let proxy = Proxy::start(&http_config(&log_table(&log, "json"), origin.addr));
    // curl: two URLs, one connection (keep-alive).
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .arg(format!("http://{}/one", proxy.addr))
        .arg(format!("http://{}/two?x=%22y%22", proxy.addr))
        .output()
        .expect("curl");
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "path /onepath /two?x=%22y%22");
    // Pipelining: two requests in one write.
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /p1 HTTP/1.1\r\nHost: t\r\n\r\nGET /p2 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    for want in ["path /p1", "path /p2"] {
        let (status, _, body) = read_response(&mut r).expect("a response");
        assert_eq!(
            (status, String::from_utf8_lossy(&body).into_owned()),
            (200, want.to_string())
        );
    }
    drop((r, c));
    proxy.wait_idle(Duration::from_secs(5));

    let lines = json_lines(&log, 4);
    let paths: Vec<&str> = lines.iter().map(|v| v["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/one", "/two?x=%22y%22", "/p1", "/p2"]);
    for v in &lines {
        assert_forwarded(v, v["path"].as_str().unwrap());
        // "path /p1" and its head: Content-Length 8.
        assert!(v["bytes_to_client"].as_u64().unwrap() > 8, "{v}");
    }
    assert_eq!(lines[0]["client"], lines[1]["client"], "one curl connection");
    assert_eq!(lines[2]["client"], lines[3]["client"], "one pipelined connection");
    assert_ne!(lines[0]["client"], lines[2]["client"]);
    assert_eq!(proxy.running().stats().log_dropped, 0);
}

#[test]
fn a_retry_is_counted_in_the_line() {
    let live = http_origin(|_| ok("live"));
    // A port nobody listens on: connecting is refused, and another server is tried.
    let dead_port = ReservedPort::new(); // refuses connections while held
    let dead = dead_port.addr;
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let toml = format!(
        "[global]\nworkers = 1\n{}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n\
         [[backend.server]]\nname = \"dead\"\naddress = \"{dead}\"\n\
         [[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        log_table(&log, "json"),
        live.addr
    );
    let proxy = Proxy::start(&toml);
    for _ in 0..4 {
        let reply = raw_exchange(proxy.addr, b"GET /r HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    }
    proxy.wait_idle(Duration::from_secs(5));
    let lines = json_lines(&log, 4);
    let retries: u64 = lines.iter().map(|v| v["retries"].as_u64().unwrap()).sum();
    assert!(
        retries >= 1,
        "the dead server was tried first at least once: {lines:#?}"
    );
    assert_eq!(retries, proxy.running().stats().connect_retries);
    for v in &lines {
        assert_eq!((&v["server"], &v["status"]), (&"o".into(), &200.into()), "{v}");
    }
}

#[test]
fn a_server_timeout_is_a_504_line() {
    let origin = http_origin(|_| {
        std::thread::sleep(Duration::from_secs(3));
        ok("late")
    });
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let proxy = Proxy::start(&http_config(
        &format!("{}[timeouts]\nserver = \"300ms\"\n", log_table(&log, "json")),
        origin.addr,
    ));
    let reply = raw_exchange(proxy.addr, b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.1 504"), "{reply}");
    let v = &json_lines(&log, 1)[0];
    assert_eq!(
        (&v["status"], &v["path"], &v["server"]),
        (&504.into(), &"/slow".into(), &"o".into())
    );
    assert_eq!(v["termination_code"], "sH");
    assert_eq!(v["termination"], "server timeout while waiting for the response head");
    assert_eq!(v["response_ms"], Value::Null, "no response head came");
    assert!(ms(v, "connected_ms").is_some());
    assert!(ms(v, "total_ms").unwrap() >= 300.0, "{v}");
}

#[test]
fn a_tcp_session_gets_one_line_with_its_bytes() {
    let origin = origin(echo);
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let proxy = Proxy::start(&tcp_config(&log_table(&log, "json"), &[("echo", origin.addr, 1)]));
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let payload = payload_block(7, 10_000);
    c.write_all(&payload).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut back = Vec::new();
    c.read_to_end(&mut back).unwrap();
    assert_eq!(back, payload);
    drop(c);
    proxy.wait_idle(Duration::from_secs(5));
    let v = &json_lines(&log, 1)[0];
    assert_eq!(
        (&v["method"], &v["path"], &v["status"]),
        (&Value::Null, &Value::Null, &0.into())
    );
    assert_eq!(
        (v["bytes_to_server"].as_u64(), v["bytes_to_client"].as_u64()),
        (Some(10_000), Some(10_000))
    );
    assert_eq!(v["server"], "echo");
    assert_eq!(v["termination"], "normal");
    assert_eq!(v["head_ms"], Value::Null, "no HTTP head in TCP mode");
    assert!(ms(v, "connected_ms").is_some(), "{v}");
}

#[test]
fn text_lines_follow_the_documented_layout() {
    let origin = http_origin(|_| ok("hello"));
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let proxy = Proxy::start(&http_config(&log_table(&log, "text"), origin.addr));
    let reply = raw_exchange(
        proxy.addr,
        b"GET /a%20b?q=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let line = wait_lines(&log, 1).remove(0);
    // TIME CLIENT FRONTEND BACKEND/SERVER "METHOD PATH" STATUS TO_SERVER TO_CLIENT
    // HEAD/QUEUED/CONNECTED/RESPONSE/TOTAL RETRIES CODE "WORDS" TLS SNI (the quoted words
    // of a normal end have no space).
    let f: Vec<&str> = line.split(' ').collect();
    assert_eq!(f.len(), 15, "{line}");
    assert!(
        f[0].len() == 24 && f[0].ends_with('Z') && f[0].as_bytes()[10] == b'T',
        "{line}"
    );
    assert!(f[1].starts_with("127.0.0.1:"), "{line}");
    assert_eq!(
        (f[2], f[3], f[4], f[5]),
        ("fe", "be/o", "\"GET", "/a%20b?q=1\""),
        "{line}"
    );
    assert_eq!(f[6], "200");
    let to_client: u64 = f[8].parse().unwrap();
    assert_eq!(to_client as usize, reply.len(), "{line}");
    let timings: Vec<f64> = f[9].split('/').map(|t| t.parse().unwrap()).collect();
    assert_eq!(timings.len(), 5, "{line}");
    assert!(timings.windows(2).all(|w| w[0] <= w[1]), "{line}");
    assert_eq!((f[10], f[11], f[12], f[13]), ("0", "--", "\"normal\"", "-"), "{line}");
    assert_eq!(f[14], "-", "no SNI: {line}");
}

/// A template of the operator's: the line as written, with hostile header bytes (quotes,
/// backslashes, a tab, a header whose value looks like a JSON line; bytes outside ASCII:
/// the unit tests, as the test origin reads text)
/// escaped so they neither break out of the template's quotes nor start another line; a
/// normal client is served alongside.
#[test]
fn a_template_lays_out_the_line_and_escapes_what_a_client_sent() {
    let origin =
        http_origin(|_| Reply::Bytes(b"HTTP/1.1 200 OK\r\nX-Cache: HIT\r\nContent-Length: 2\r\n\r\nok".to_vec()));
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let table = format!(
        "[log]\naccess = \"{}\"\nformat = \"text\"\n\
         template = '{{client_ip}} {{host}} \"{{method}} {{path}}\" {{status}} \"{{user_agent}}\" \"{{header.x-note}}\" \
         {{cookie.sid}} {{response_header.x-cache}} {{query}} {{version}} {{{{end}}}}'\n",
        log.display()
    );
    let proxy = Proxy::start(&http_config(&table, origin.addr));
    let hostile = b"GET /h?x=1 HTTP/1.1\r\nHost: t.example\r\nUser-Agent: ua\" \\ \t\"\r\n\
        X-Note: {\"status\":200}\"\r\nCookie: sid=\"s\"\r\nConnection: close\r\n\r\n";
    let reply = raw_exchange(proxy.addr, hostile);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let reply = raw_exchange(
        proxy.addr,
        b"GET /plain HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(reply.starts_with("HTTP/1.1 200"), "a normal client is served: {reply}");
    let mut lines = wait_lines(&log, 2);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    // Two connections, maybe two worker threads: the lines may reach the file in either order.
    lines.sort_by_key(|l| l.contains("/plain"));
    assert_eq!(
        lines[0],
        "127.0.0.1 t.example \"GET /h?x=1\" 200 \"ua\\x22 \\x5c \\x09\\x22\" \"{\\x22status\\x22:200}\\x22\" \
         \\x22s\\x22 HIT x=1 HTTP/1.1 {end}"
    );
    assert_eq!(
        lines[1],
        "127.0.0.1 t \"GET /plain\" 200 \"-\" \"-\" - HIT - HTTP/1.1 {end}"
    );
}

/// `sample = 0` with `slow`: a normal quick request leaves no line; one the server answered
/// 404, one the proxy refused itself (no route: 503) and one slower than `slow` each do.
/// A frontend's `[frontend.log]` keeps every line of its own, in its own fields.
#[test]
fn sampling_keeps_errors_and_slow_requests_and_a_frontend_can_override_it() {
    let origin = http_origin(|r| match r.target.as_str() {
        "/missing" => Reply::Bytes(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec()),
        "/slow" => {
            std::thread::sleep(Duration::from_millis(300));
            ok("slow")
        }
        _ => ok("fast"),
    });
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let config = format!(
        "[global]\nworkers = 1\n[log]\naccess = \"{}\"\nfields = [\"frontend\", \"path\", \"status\", \"route\"]\n\
         sample = 0.0\nslow = \"200ms\"\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\n\
         [[frontend.route]]\nname = \"app\"\npath_prefix = [\"/fast\", \"/missing\", \"/slow\"]\nbackend = \"be\"\n\
         [[frontend]]\nname = \"all\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         [frontend.log]\nsample = 1.0\nfields = [\"frontend\", \"path\", \"client_port\"]\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        log.display(),
        origin.addr
    );
    let proxy = Proxy::start(&config);
    let get = |addr, path: &str| {
        raw_exchange(
            addr,
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        )
    };
    for _ in 0..20 {
        assert!(get(proxy.addr, "/fast").starts_with("HTTP/1.1 200"));
    }
    assert!(get(proxy.addr, "/missing").starts_with("HTTP/1.1 404"));
    assert!(get(proxy.addr, "/nowhere").starts_with("HTTP/1.1 503"));
    assert!(get(proxy.addr, "/slow").starts_with("HTTP/1.1 200"));
    let all = proxy.running().local_addr("all").unwrap();
    assert!(get(all, "/fast").starts_with("HTTP/1.1 200"));
    let lines = json_lines(&log, 4);
    let seen: Vec<(&str, &str)> = lines
        .iter()
        .map(|v| (v["frontend"].as_str().unwrap(), v["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("fe", "/missing"),
            ("fe", "/nowhere"),
            ("fe", "/slow"),
            ("all", "/fast")
        ],
        "{lines:#?}"
    );
    assert_eq!((&lines[0]["status"], &lines[0]["route"]), (&404.into(), &"app".into()));
    assert_eq!(
        (&lines[1]["status"], &lines[1]["route"]),
        (&503.into(), &Value::Null),
        "no route matched"
    );
    assert!(lines[3]["client_port"].as_u64().unwrap() > 0 && lines[3].get("status").is_none());
    assert_eq!(proxy.running().stats().log_dropped, 0, "sampled out is not dropped");
}

#[test]
fn syslog_gets_one_rfc5424_datagram_per_line() {
    let origin = http_origin(|_| ok("x"));
    let syslog = UdpSocket::bind("127.0.0.1:0").unwrap();
    syslog.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let toml = http_config(
        &format!("[log]\naccess = \"syslog://{}\"\n", syslog.local_addr().unwrap()),
        origin.addr,
    );
    let proxy = Proxy::start(&toml);
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /s1 HTTP/1.1\r\nHost: t\r\n\r\nGET /s2 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    read_response(&mut r).unwrap();
    read_response(&mut r).unwrap();
    let mut buf = [0u8; 8192];
    for want in ["/s1", "/s2"] {
        let n = syslog.recv(&mut buf).expect("a datagram");
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(text.starts_with("<134>1 "), "{text}");
        let parts: Vec<&str> = text.splitn(8, ' ').collect();
        assert_eq!(
            (parts[3], parts[4], parts[5], parts[6]),
            ("tollgate", &*std::process::id().to_string(), "-", "-")
        );
        let v: Value = serde_json::from_str(parts[7]).unwrap();
        assert_eq!(v["path"], want);
    }
}

#[test]
fn a_blocked_sink_never_stalls_traffic_and_counts_drops() {
    let dir = TempDir::new();
    let fifo = dir.path("blocked.fifo");
    match Command::new("mkfifo").arg(&fifo).status() {
        Ok(s) if s.success() => {}
        other => {
            println!("skipped: mkfifo failed ({other:?})");
            return;
        }
    }
    // Held open read-write and never read: the proxy's open does not block, its writes do
    // once the pipe is full.
    let _held = std::fs::OpenOptions::new().read(true).write(true).open(&fifo).unwrap();
    let origin = http_origin(|_| ok("ok"));
    let proxy = Proxy::start(&http_config(
        &format!("[global]\nworkers = 1\n{}", log_table(&fifo, "json")),
        origin.addr,
    ));
    let long = format!("/{}", "x".repeat(900));
    let request = format!("GET {long} HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sent = 0u64;
    let mut slowest = Duration::ZERO;
    // Far more lines than the pipe and the writer's queue hold; stop once drops are seen
    // and a few hundred requests were served after that.
    let mut after_drops = 0;
    while after_drops < 300 {
        assert!(
            Instant::now() < deadline,
            "{sent} requests, no drops: {:?}",
            proxy.running().stats()
        );
        let t = Instant::now();
        c.write_all(request.as_bytes()).unwrap();
        let (status, _, _) = read_response(&mut r).expect("traffic keeps flowing");
        assert_eq!(status, 200);
        slowest = slowest.max(t.elapsed());
        sent += 1;
        if proxy.running().stats().log_dropped > 0 {
            after_drops += 1;
        }
    }
    let dropped = proxy.running().stats().log_dropped;
    println!("{sent} requests, {dropped} lines dropped, slowest request {slowest:?}");
    assert!(dropped > 0);
    assert!(dropped < sent, "lines before the pipe filled were written");
    assert!(
        slowest < Duration::from_secs(3),
        "a request waited on the log: {slowest:?}"
    );
}

/// A master-mode config: one HTTP frontend logging JSON lines to `log`, one server.
fn master_config(dir: &std::path::Path, log: &std::path::Path, server: std::net::SocketAddr) -> String {
    format!(
        "{}{}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{server}\"\n",
        master_support::global(dir, ""),
        log_table(log, "json"),
    )
}

#[test]
fn sigusr1_reopens_the_file_in_master_mode() {
    use master_support::{Master, TempDir};
    let origin = http_origin(|_| ok("ok"));
    let dir = TempDir::new("accesslog");
    let log = dir.0.join("access.log");
    let config = master_config(&dir.0, &log, origin.addr);
    let master = Master::start(dir, &config, &[]);
    let get = |path: &str| {
        let reply = raw_exchange(
            master.addr,
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    };
    get("/before");
    assert!(wait_lines(&log, 1)[0].contains("\"/before\""));
    let rotated = log.with_extension("log.1");
    std::fs::rename(&log, &rotated).unwrap();
    let from = master.log_len();
    master.signal(master.pid(), rustix::process::Signal::USR1);
    master
        .wait_log_from(from, |l| l.contains("access log reopened"), Duration::from_secs(10))
        .expect("the worker reopened its log");
    get("/after");
    let now = wait_lines(&log, 1);
    assert_eq!(now.len(), 1);
    assert!(now[0].contains("\"/after\""), "{now:?}");
    let old = std::fs::read_to_string(&rotated).unwrap();
    assert_eq!(old.lines().count(), 1, "{old}");
    assert!(old.contains("\"/before\""));
}

/// `shutdown sessions` while a request waits for its response head: the line says so
/// (`KH`), not "killed while relaying" (`KT`), which is for a tunnel.
#[test]
fn a_kill_before_the_response_head_is_logged_in_that_phase() {
    use master_support::{Master, TempDir};
    use std::sync::Mutex;
    use std::sync::mpsc;
    let (arrived, heads) = mpsc::channel::<()>();
    let (release, hold) = mpsc::channel::<()>();
    let (arrived, hold) = (Mutex::new(arrived), Mutex::new(hold));
    let origin = http_origin(move |r| {
        if r.target == "/held" {
            arrived.lock().unwrap().send(()).unwrap();
            // Until the test is done with it (bounded: the test's own limits are shorter).
            let _ = hold.lock().unwrap().recv_timeout(Duration::from_secs(10));
        }
        ok("ok")
    });
    let dir = TempDir::new("accesslog-kill");
    let log = dir.0.join("access.log");
    let config = master_config(&dir.0, &log, origin.addr);
    let master = Master::start(dir, &config, &[]);
    let mut c = TcpStream::connect(master.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /held HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    heads
        .recv_timeout(Duration::from_secs(10))
        .expect("the request reached the origin");
    master.ctl_ok(&["shutdown", "sessions", "server", "be/o"]);
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    let _ = release.send(());
    let v = &json_lines(&log, 1)[0];
    assert_eq!(v["path"], "/held", "{v}");
    assert_eq!(v["termination_code"], "KH", "{v}");
    assert_eq!(
        v["termination"], "killed by an operator while waiting for the response head",
        "{v}"
    );
}

#[test]
fn https_lines_carry_the_tls_version_and_sni_curl() {
    if Command::new("curl").arg("--version").output().is_err() {
        println!("skipped: curl is not installed");
        return;
    }
    use common::tls::{Ca, cert_entry, path_str};
    let origin = http_origin(|_| ok("secure"));
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let ca = Ca::new("ca");
    let leaf = ca.leaf(&["web.example"], "web", false).write(&dir, "web");
    let ca_path = ca.write(&dir, "ca.pem");
    let config = format!(
        "{}[global]\nworkers = 1\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         [frontend.tls]\nalpn = [\"http/1.1\"]\n{}\n[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        log_table(&log, "json"),
        cert_entry(&leaf, true),
        origin.addr
    );
    let proxy = Proxy::start(&config);
    let port = proxy.addr.port();
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "--tlsv1.3",
            "--cacert",
            &path_str(&ca_path),
            "--resolve",
        ])
        .arg(format!("web.example:{port}:127.0.0.1"))
        .arg(format!("https://web.example:{port}/tls"))
        .output()
        .expect("curl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "secure",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = &json_lines(&log, 1)[0];
    assert_eq!(
        (&v["path"], &v["tls_version"], &v["sni"]),
        (&"/tls".into(), &"TLSv1.3".into(), &"web.example".into()),
        "{v}"
    );
}

#[test]
fn a_passthrough_session_logs_the_peeked_sni() {
    use common::tls::{Ca, client_config, tls_origin, tls_request};
    let ca = Ca::new("ca");
    let leaf = ca.leaf(&["b.example"], "origin-b", false);
    let origin = tls_origin(leaf.server_config(), |req, _| req);
    let dir = TempDir::new();
    let log = dir.path("access.log");
    let toml = format!(
        "{}[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\n\
         [frontend.log]\nfields = [\"sni\", \"tls_version\", \"server\", \"bytes_to_server\", \"route\", \"server_address\"]\n\
         [[frontend.route]]\nname = \"to-b\"\nsni = \"b.example\"\nbackend = \"be_b\"\n\
         [[backend]]\nname = \"be_b\"\n[[backend.server]]\nname = \"b\"\naddress = \"{origin}\"\n",
        log_table(&log, "json")
    );
    let proxy = Proxy::start(&toml);
    let (reply, _) = tls_request(proxy.addr, client_config(&ca), "b.example", b"ping").unwrap();
    assert_eq!(reply, b"ping");
    proxy.wait_idle(Duration::from_secs(5));
    let v = &json_lines(&log, 1)[0];
    assert_eq!(
        (&v["sni"], &v["tls_version"], &v["server"]),
        (&"b.example".into(), &Value::Null, &"b".into()),
        "{v}"
    );
    assert_eq!(
        (&v["route"], &v["server_address"]),
        (&"to-b".into(), &origin.to_string().into()),
        "a TCP route's name, in the frontend's own fields: {v}"
    );
    assert!(
        v["bytes_to_server"].as_u64().unwrap() > 4,
        "the ClientHello and the request: {v}"
    );
}
