//! Rate limits and stick tables (issue 15, item 4) over real loopback sockets: two clients
//! limited exactly across two worker threads and the others unaffected; `concurrent` held by
//! a slow origin; 429 with `Retry-After` on a kept connection; tarpit delays; TCP mode closes
//! (127.0.0.1 and ::1 counted apart); HTTP/2 clients in the same table as HTTP/1 ones; LRU
//! eviction counted; `ctl show table` / `clear table` through the master; bad limit configs
//! refused by `tollgate check` with file:line:col.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::http::{Response, http_origin, ok, read_response};
use common::{Proxy, echo, origin};

fn http(limits: &str, origin: SocketAddr, extra: &str) -> String {
    format!(
        "[global]\nworkers = 2\n\
         [[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"app\"\n{extra}\n{limits}\n\
         [[backend]]\nname = \"app\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n"
    )
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Unix time in milliseconds, to the microsecond.
fn unix_ms_f() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as f64 / 1000.0
}

/// A keep-alive client connection.
struct Client {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Client {
    fn open(addr: SocketAddr) -> Client {
        let c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client {
            writer: c.try_clone().unwrap(),
            reader: BufReader::new(c),
        }
    }

    /// One GET with `headers` (`Name: value\r\n` lines); `None` when the proxy closed.
    fn get(&mut self, path: &str, headers: &str) -> Option<Response> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\n{headers}\r\n");
        self.writer.write_all(req.as_bytes()).ok()?;
        read_response(&mut self.reader)
    }
}

fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
    r.1.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A limit's counters, from the process's metrics snapshot.
#[derive(Debug)]
struct Counts {
    entries: u64,
    size: u64,
    denied: u64,
    tarpitted: u64,
    evicted: u64,
}

fn limit_metrics(proxy: &Proxy, name: &str) -> Counts {
    let m = proxy.running().metrics();
    let l = m
        .limits
        .into_iter()
        .find(|l| l.name == name)
        .expect("the limit's metrics");
    Counts {
        entries: l.entries,
        size: l.size,
        denied: l.denied,
        tarpitted: l.tarpitted,
        evicted: l.evicted,
    }
}

#[test]
fn two_clients_are_each_limited_exactly_over_two_workers() {
    // A short window, so that the run spans several and the previous one's weight counts.
    const RATE: u64 = 40;
    const PERIOD_MS: u64 = 100;
    let o = http_origin(|_| ok("x"));
    let text = http(
        &format!(
            "[[frontend.limit]]\nname = \"per_client\"\nkey = \"header:x-client\"\nrate = \"{RATE}/{PERIOD_MS}ms\""
        ),
        o.addr,
        "",
    );
    let proxy = Proxy::start(&text);
    let addr = proxy.addr;
    // Each limited client: 4 connections × 1250 requests, spread over both workers. Each
    // request is noted: when it was sent, when its answer came (unix ms), whether it passed.
    let limited: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|who| {
            let conns: Vec<_> = (0..4)
                .map(|_| {
                    std::thread::spawn(move || {
                        let mut c = Client::open(addr);
                        let mut seen = Vec::with_capacity(1250);
                        for _ in 0..1250 {
                            let sent = unix_ms_f();
                            let r = c.get("/", &format!("X-Client: {who}\r\n")).expect("an answer");
                            seen.push((sent, unix_ms_f(), r.0 == 200));
                            if r.0 != 200 {
                                assert_eq!(r.0, 429);
                                assert!(header(&r, "retry-after").is_some_and(|v| v.parse::<u64>().unwrap() >= 1));
                            }
                        }
                        seen
                    })
                })
                .collect();
            std::thread::spawn(move || conns.into_iter().flat_map(|t| t.join().unwrap()).collect::<Vec<_>>())
        })
        .collect();
    // Meanwhile: a client under its rate, and requests without the header (not counted).
    let mut light = Client::open(addr);
    for _ in 0..RATE - 5 {
        assert_eq!(light.get("/", "X-Client: c\r\n").unwrap().0, 200);
    }
    let mut bare = Client::open(addr);
    for _ in 0..300 {
        assert_eq!(bare.get("/", "").unwrap().0, 200);
    }
    let mut denied = 0;
    let p = PERIOD_MS as f64;
    for (who, t) in ["a", "b"].into_iter().zip(limited) {
        let seen: Vec<(f64, f64, bool)> = t.join().unwrap();
        assert_eq!(seen.len(), 5000);
        let passed = seen.iter().filter(|r| r.2).count() as u64;
        denied += 5000 - passed;
        let first = seen.iter().map(|r| r.0).fold(f64::MAX, f64::min);
        let last = seen.iter().map(|r| r.1).fold(0.0, f64::max);
        // Never more than the rate: the first period whole from its start (nothing was
        // counted before it), then the rate pro rata up to the last answer.
        let expected = RATE as f64 * (last / p - (first / p).floor());
        // And no less, but for capacity nobody asked for. A request is decided between its
        // sending and its answer; when the last one known decided before the end of a period
        // was sent at `t`, what the period could still admit after `t` may be lost (a thread
        // of the client or of the proxy not scheduled). The first period, fresh, admits its
        // whole rate at once: what is lost there is what did not pass before its end.
        let mut slack = 0.0;
        let mut boundary = ((first / p).floor() + 1.0) * p;
        let mut first_period = true;
        while boundary <= last {
            let answered_before = seen.iter().filter(|r| r.1 < boundary);
            if first_period {
                let passed_before = answered_before.filter(|r| r.2).count() as f64;
                slack += (RATE as f64 - passed_before).max(0.0);
                first_period = false;
            } else {
                let latest = answered_before.map(|r| r.0).fold(boundary - p, f64::max);
                slack += RATE as f64 * (boundary - latest) / p;
            }
            boundary += p;
        }
        let tolerance = (expected * 0.01).max(2.0);
        eprintln!(
            "client {who}: {passed} passed of 5000, expected {expected:.1} (slack {slack:.1}) over {:.2} windows",
            last / p - (first / p).floor()
        );
        assert!(
            passed as f64 <= expected + tolerance && passed as f64 >= expected - tolerance - slack,
            "client {who}: {passed} passed, expected {expected:.1} ± {tolerance:.1} (slack {slack:.1}), {first}..{last}"
        );
    }
    let m = limit_metrics(&proxy, "per_client");
    assert_eq!((m.denied, m.entries, m.evicted), (denied, 3, 0), "{m:?}");
    // Which thread served what (the kernel spreads connections over both listeners).
    let per_thread: Vec<u64> = proxy
        .running()
        .shared()
        .stats
        .iter()
        .map(|s| s.http_requests.get())
        .collect();
    eprintln!("requests per worker thread: {per_thread:?}");
    assert_eq!(per_thread.iter().sum::<u64>(), 10_000 + RATE - 5 + 300);
}

#[test]
fn concurrent_requests_are_held_per_source() {
    let release = Arc::new(AtomicBool::new(false));
    let gate = Arc::clone(&release);
    let o = http_origin(move |req| {
        if req.target == "/slow" {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !gate.load(Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        ok("done")
    });
    let text = http(
        "[[frontend.limit]]\nname = \"inflight\"\nkey = \"source\"\nconcurrent = 2",
        o.addr,
        "",
    );
    let proxy = Proxy::start(&text);
    let addr = proxy.addr;
    let slow: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || Client::open(addr).get("/slow", "").unwrap().0))
        .collect();
    // Both are at the origin: two in flight.
    let deadline = Instant::now() + Duration::from_secs(10);
    while o.requests().len() < 2 {
        assert!(Instant::now() < deadline, "the slow requests never reached the origin");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut third = Client::open(addr);
    let r = third.get("/fast", "").unwrap();
    assert_eq!((r.0, header(&r, "retry-after")), (429, Some("1")));
    release.store(true, Ordering::SeqCst);
    for t in slow {
        assert_eq!(t.join().unwrap(), 200);
    }
    // Released: the same (kept) connection gets through now.
    assert_eq!(third.get("/fast", "").unwrap().0, 200);
    let m = limit_metrics(&proxy, "inflight");
    assert_eq!(m.denied, 1);
}

#[test]
fn over_the_rate_is_429_with_retry_after_until_the_next_window() {
    let o = http_origin(|_| ok("x"));
    let text = http(
        "[[frontend.limit]]\nname = \"hourly\"\nkey = \"source\"\nrate = \"2/h\"",
        o.addr,
        "",
    );
    let proxy = Proxy::start(&text);
    let mut c = Client::open(proxy.addr);
    for _ in 0..2 {
        assert_eq!(c.get("/", "").unwrap().0, 200);
    }
    for _ in 0..2 {
        let now = unix_ms();
        let r = c.get("/", "").unwrap();
        assert_eq!(r.0, 429);
        assert_eq!(r.2, b"Too many requests\n");
        // Both counted: the next request fits one ms into the next hour.
        let expected = (3_600_000 - now % 3_600_000 + 1).div_ceil(1000);
        let got: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
        assert!(got.abs_diff(expected) <= 1, "Retry-After {got}, expected {expected}");
    }
    assert_eq!(o.requests().len(), 2);
}

#[test]
fn tarpit_holds_then_answers_500_and_closes() {
    let o = http_origin(|_| ok("x"));
    let text = http(
        "[[frontend.limit]]\nname = \"slowdown\"\nkey = \"path\"\nrate = \"1/h\"\naction = \"tarpit\"\ntarpit = \"300ms\"",
        o.addr,
        "",
    );
    let proxy = Proxy::start(&text);
    let mut c = Client::open(proxy.addr);
    assert_eq!(c.get("/a?x=1", "").unwrap().0, 200);
    // Another path is another key.
    assert_eq!(c.get("/b", "").unwrap().0, 200);
    let began = Instant::now();
    // The same path, another query: the same key.
    let r = c.get("/a?x=2", "").unwrap();
    let held = began.elapsed();
    assert_eq!(r.0, 500);
    assert!(held >= Duration::from_millis(300), "answered after {held:?}");
    let mut rest = Vec::new();
    assert_eq!(c.reader.read_to_end(&mut rest).unwrap_or(0), 0, "closed after the 500");
    let m = limit_metrics(&proxy, "slowdown");
    assert_eq!((m.denied, m.tarpitted, m.entries), (1, 1, 2));
}

#[test]
fn close_action_drops_the_connection_unanswered() {
    let o = http_origin(|_| ok("x"));
    let text = http(
        "[[frontend.limit]]\nname = \"strict\"\nkey = \"source\"\nrate = \"1/h\"\naction = \"close\"",
        o.addr,
        "",
    );
    let proxy = Proxy::start(&text);
    let mut c = Client::open(proxy.addr);
    assert_eq!(c.get("/", "").unwrap().0, 200);
    assert!(c.get("/", "").is_none(), "closed without a response");
}

/// `true` when this machine has an IPv6 loopback.
fn has_v6_loopback() -> bool {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("skipped: no IPv6 loopback");
        return false;
    }
    true
}

/// A connection through the TCP proxy echoes (true) or is closed without a byte (false).
fn echoes(addr: SocketAddr) -> bool {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = c.write_all(b"ping");
    let mut back = [0u8; 4];
    match c.read_exact(&mut back) {
        Ok(()) => {
            assert_eq!(&back, b"ping");
            true
        }
        Err(_) => false,
    }
}

#[test]
fn tcp_connections_over_the_rate_are_closed_per_source_address() {
    let e = origin(echo);
    let v6 = has_v6_loopback();
    let binds = if v6 {
        "\"127.0.0.1:0\", \"[::1]:0\""
    } else {
        "\"127.0.0.1:0\""
    };
    let text = format!(
        "[global]\nworkers = 2\n[[frontend]]\nname = \"tcp\"\nbind = [{binds}]\ndefault_backend = \"echo\"\n\
         [[frontend.limit]]\nname = \"conns\"\nkey = \"source\"\nrate = \"3/h\"\n\
         [[backend]]\nname = \"echo\"\n[[backend.server]]\nname = \"e\"\naddress = \"{}\"\n",
        e.addr
    );
    let proxy = Proxy::start(&text);
    let addrs = proxy.running().local_addrs("tcp");
    for addr in &addrs {
        // Each loopback address is a client of its own: three connections each.
        let passed: Vec<bool> = (0..5).map(|_| echoes(*addr)).collect();
        assert_eq!(passed, [true, true, true, false, false], "from {addr}");
    }
    let m = limit_metrics(&proxy, "conns");
    assert_eq!((m.denied, m.entries), (2 * addrs.len() as u64, addrs.len() as u64));
}

#[test]
fn tcp_concurrent_connections_are_limited() {
    let e = origin(echo);
    let text = format!(
        "[[frontend]]\nname = \"tcp\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"echo\"\n\
         [[frontend.limit]]\nname = \"open\"\nkey = \"source\"\nconcurrent = 1\naction = \"tarpit\"\ntarpit = \"200ms\"\n\
         [[backend]]\nname = \"echo\"\n[[backend.server]]\nname = \"e\"\naddress = \"{}\"\n",
        e.addr
    );
    let proxy = Proxy::start(&text);
    let mut first = TcpStream::connect(proxy.addr).unwrap();
    first.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    first.write_all(b"ping").unwrap();
    let mut back = [0u8; 4];
    first.read_exact(&mut back).unwrap();
    let began = Instant::now();
    assert!(!echoes(proxy.addr), "a second connection while the first is open");
    assert!(began.elapsed() >= Duration::from_millis(200), "tarpitted first");
    drop(first);
    proxy.wait_idle(Duration::from_secs(10));
    assert!(echoes(proxy.addr));
}

#[test]
fn h2_clients_count_in_the_same_table_as_h1_clients() {
    let o = http_origin(|_| ok("x"));
    let text = http(
        "[[frontend.limit]]\nname = \"keyed\"\nkey = \"header:x-client\"\nrate = \"5/h\"",
        o.addr,
        "h2c = true",
    );
    let proxy = Proxy::start(&text);
    let addr = proxy.addr;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let statuses = rt.block_on(async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut client = client.ready().await.unwrap();
        let mut out = Vec::new();
        for _ in 0..7 {
            let req = http::Request::get(format!("http://{addr}/"))
                .header("x-client", "z")
                .body(())
                .unwrap();
            let (resp, _) = client.send_request(req, true).unwrap();
            let resp = resp.await.unwrap();
            let retry = resp
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
            out.push((resp.status().as_u16(), retry.is_some()));
            client = client.ready().await.unwrap();
        }
        out
    });
    let passed = statuses.iter().filter(|s| **s == (200, false)).count();
    let refused = statuses.iter().filter(|s| **s == (429, true)).count();
    assert_eq!((passed, refused), (5, 2), "{statuses:?}");
    // The same key over HTTP/1: the same entry, already full.
    assert_eq!(Client::open(addr).get("/", "X-Client: z\r\n").unwrap().0, 429);
    assert_eq!(limit_metrics(&proxy, "keyed").denied, 3);
}

#[test]
fn a_small_table_evicts_the_least_recently_seen_and_counts_it() {
    let o = http_origin(|_| ok("x"));
    let text = http(
        "[[frontend.limit]]\nname = \"tiny\"\nkey = \"header:x-client\"\nrate = \"1/h\"\nsize = 2",
        o.addr,
        "",
    );
    let proxy = Proxy::start(&text);
    let mut c = Client::open(proxy.addr);
    let status = |c: &mut Client, who: &str| c.get("/", &format!("X-Client: {who}\r\n")).unwrap().0;
    assert_eq!((status(&mut c, "a"), status(&mut c, "b")), (200, 200));
    assert_eq!(status(&mut c, "a"), 429, "`a` is full and now the most recently seen");
    // `c` takes the place of `b`, the least recently seen.
    assert_eq!(status(&mut c, "c"), 200);
    let m = limit_metrics(&proxy, "tiny");
    assert_eq!((m.entries, m.evicted, m.size), (2, 1, 2));
    assert_eq!(status(&mut c, "a"), 429, "`a` was kept");
    assert_eq!(status(&mut c, "b"), 200, "`b` starts over");
    assert_eq!(limit_metrics(&proxy, "tiny").evicted, 2);
}

#[test]
fn ctl_shows_and_clears_a_table_through_the_master() {
    use master_support::{Master, TempDir, global};
    let o = http_origin(|_| ok("x"));
    let dir = TempDir::new("rate-limits");
    let limits = "[[frontend.limit]]\nname = \"api\"\nkey = \"source\"\nrate = \"2/h\"\nconcurrent = 10";
    let text = format!(
        "{}\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"app\"\n{limits}\n\
         [[backend]]\nname = \"app\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        global(&dir.0, ""),
        o.addr
    );
    let master = Master::start(dir, &text, &[]);
    let mut c = Client::open(master.addr);
    let statuses: Vec<u16> = (0..3).map(|_| c.get("/", "").unwrap().0).collect();
    assert_eq!(statuses, [200, 200, 429]);
    let shown = master.ctl_ok(&["show", "table", "api"]);
    assert!(
        shown.contains("key source, rate 2/h, concurrent 10, action 429"),
        "{shown}"
    );
    assert!(shown.contains("entries 1/100000 denied 1"), "{shown}");
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("127.0.0.1") && l.split_whitespace().nth(1) == Some("2")),
        "{shown}"
    );
    let json: serde_json::Value = serde_json::from_str(&master.ctl_ok(&["--json", "show", "table", "api"])).unwrap();
    let rows = &json["answer"]["rows"];
    assert_eq!(
        (rows[0]["key"].as_str(), rows[0]["rate"].as_u64()),
        (Some("127.0.0.1"), Some(2)),
        "{json}"
    );
    let metrics = master.ctl_ok(&["show", "metrics"]);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tollgate_limit_denied_total{") && l.contains("limit=\"api\"") && l.ends_with(" 1")),
        "{metrics}"
    );
    let cleared = master.ctl_ok(&["clear", "table", "api", "127.0.0.1"]);
    assert!(cleared.contains("1 entry cleared"), "{cleared}");
    assert_eq!(c.get("/", "").unwrap().0, 200, "counted afresh");
    assert!(
        master
            .ctl_ok(&["clear", "table", "api"])
            .contains("table api: 1 entry cleared")
    );
    let (code, _, err) = master.ctl(&["show", "table", "nope"]);
    assert!(code != 0 && err.contains("no limit `nope`"), "{code} {err}");
    let (code, _, err) = master.ctl(&["clear", "table", "api", "not-an-address"]);
    assert!(code != 0 && err.contains("not an IP address"), "{code} {err}");
}

#[test]
fn tollgate_check_refuses_bad_limits_with_their_position() {
    let dir = master_support::TempDir::new("limit-check");
    let cases = [
        (
            "tcp",
            "key = \"header:x\"\nrate = \"1/s\"",
            ":9:7:",
            "frontend[0].limit[0].key",
        ),
        (
            "http",
            "key = \"source\"\nrate = \"100/fortnight\"",
            ":10:8:",
            "frontend[0].limit[0].rate",
        ),
        (
            "http",
            "key = \"source\"\nrate = \"0/s\"",
            ":10:8:",
            "frontend[0].limit[0].rate",
        ),
        (
            "http",
            "key = \"sni\"\nrate = \"1/s\"",
            ":9:7:",
            "frontend[0].limit[0].key",
        ),
        (
            "http",
            "key = \"source\"\nrate = \"1/s\"\nwindow = 3",
            ":11:1:",
            "frontend[0].limit[0].window",
        ),
    ];
    for (mode, limit, at, key) in cases {
        let text = format!(
            "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"{mode}\"\ndefault_backend = \"be\"\n\n\
             [[frontend.limit]]\nname = \"l\"\n{limit}\n\n\
             [[backend]]\nname = \"be\"\nmode = \"{mode}\"\n[[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:1\"\n"
        );
        let path = dir.0.join("bad.toml");
        std::fs::write(&path, &text).unwrap();
        let (code, _, err) = master_support::check(&path);
        assert_eq!(code, Some(2), "{err}");
        let want = format!("{}{at}", path.display());
        assert!(
            err.contains(&want) && err.contains(key),
            "want {want} {key}, got: {err}\n{text}"
        );
    }
}

#[test]
fn burst_lets_a_quiet_client_go_above_its_rate_once() {
    let o = http_origin(|_| ok("x"));
    let text = http(
        "[[frontend.limit]]\nname = \"bursty\"\nkey = \"source\"\nrate = \"2/h\"\nburst = 3",
        o.addr,
        "",
    );
    let proxy = Proxy::start(&text);
    let mut c = Client::open(proxy.addr);
    let statuses: Vec<u16> = (0..7).map(|_| c.get("/", "").unwrap().0).collect();
    // The rate's 2, the bucket's 3 (it refills over an hour: none back yet).
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429]);
}

#[test]
fn sni_keys_count_per_server_name_on_a_tls_frontend() {
    use common::tls::{Ca, TempDir, cert_entry, client_config};
    let o = http_origin(|_| ok("x"));
    let dir = TempDir::new();
    let ca = Ca::new("limits-ca");
    let leaf = ca
        .leaf(&["a.example", "b.example"], "limits", false)
        .write(&dir, "leaf");
    let text = http(
        &format!(
            "[frontend.tls]\n{}\n[[frontend.limit]]\nname = \"names\"\nkey = \"sni\"\nrate = \"2/h\"",
            cert_entry(&leaf, true)
        ),
        o.addr,
        "",
    );
    let proxy = Proxy::start(&text);
    let client = client_config(&ca);
    let status = |name: &str| {
        let req = format!("GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n");
        let (reply, _) = common::tls::tls_request(proxy.addr, client.clone(), name, req.as_bytes()).unwrap();
        String::from_utf8_lossy(&reply)
            .split(' ')
            .nth(1)
            .unwrap()
            .parse::<u16>()
            .unwrap()
    };
    let a: Vec<u16> = (0..3).map(|_| status("a.example")).collect();
    assert_eq!(a, [200, 200, 429]);
    assert_eq!(status("b.example"), 200, "another name, another entry");
    assert_eq!(limit_metrics(&proxy, "names").entries, 2);
}

#[test]
fn sni_keys_count_peeked_names_in_tcp_passthrough() {
    use common::tls::{Ca, client_config, tls_origin, tls_request};
    let ca = Ca::new("passthrough-ca");
    let leaf = ca.leaf(&["a.example", "b.example"], "origin", false);
    let origin = tls_origin(leaf.server_config(), |_, sni| sni.unwrap_or_default().into_bytes());
    let text = format!(
        "[[frontend]]\nname = \"pass\"\nbind = [\"127.0.0.1:0\"]\n\
         [[frontend.route]]\nsni = \"*.example\"\nbackend = \"tls\"\n\
         [[frontend.limit]]\nname = \"hellos\"\nkey = \"sni\"\nrate = \"1/h\"\n\
         [[backend]]\nname = \"tls\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n"
    );
    let proxy = Proxy::start(&text);
    let client = client_config(&ca);
    let through = |name: &str| tls_request(proxy.addr, client.clone(), name, b"hi").map(|(r, _)| r);
    assert_eq!(through("a.example").unwrap(), b"a.example");
    assert!(
        through("a.example").is_err(),
        "the second hello for a.example is closed"
    );
    assert_eq!(through("b.example").unwrap(), b"b.example");
    assert_eq!(limit_metrics(&proxy, "hellos").denied, 1);
}

#[test]
fn close_on_http2_resets_the_stream_and_keeps_the_connection() {
    let o = http_origin(|_| ok("x"));
    let text = http(
        "[[frontend.limit]]\nname = \"h2close\"\nkey = \"source\"\nrate = \"1/h\"\naction = \"close\"",
        o.addr,
        "h2c = true",
    );
    let proxy = Proxy::start(&text);
    let addr = proxy.addr;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcomes = rt.block_on(async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut client = client.ready().await.unwrap();
        let mut out = Vec::new();
        for _ in 0..3 {
            let req = http::Request::get(format!("http://{addr}/")).body(()).unwrap();
            let (resp, _) = client.send_request(req, true).unwrap();
            out.push(match resp.await {
                Ok(r) => Ok(r.status().as_u16()),
                Err(e) => Err(e.reason()),
            });
            // The connection carries on: the next stream can be opened.
            client = client.ready().await.unwrap();
        }
        out
    });
    let calm = Err(Some(h2::Reason::ENHANCE_YOUR_CALM));
    assert_eq!(outcomes, [Ok(200), calm, calm], "{outcomes:?}");
}

#[test]
fn source_keys_are_the_address_a_proxy_header_carries() {
    let o = http_origin(|_| ok("x"));
    let text = http(
        "[[frontend.limit]]\nname = \"behind_lb\"\nkey = \"source\"\nrate = \"1/h\"",
        o.addr,
        "accept_proxy = \"v1\"\ntrusted_proxies = [\"127.0.0.1\"]",
    );
    let proxy = Proxy::start(&text);
    let status = |client: &str| {
        let mut c = Client::open(proxy.addr);
        let header = format!("PROXY TCP4 {client} 127.0.0.1 40000 80\r\n");
        c.writer.write_all(header.as_bytes()).unwrap();
        c.get("/", "").unwrap().0
    };
    // One balancer (127.0.0.1), two clients behind it: counted apart.
    assert_eq!(status("192.0.2.1"), 200);
    assert_eq!(status("192.0.2.1"), 429);
    assert_eq!(status("192.0.2.2"), 200);
    let rows = proxy
        .running()
        .table(&tollgate::command::table::TableOp::Show {
            limit: "behind_lb".into(),
        })
        .unwrap();
    let tollgate::command::Answer::Table(report) = rows else {
        panic!("{rows:?}")
    };
    let mut keys: Vec<&str> = report.rows.iter().map(|r| r.key.as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["192.0.2.1", "192.0.2.2"]);
}

#[test]
fn a_route_names_the_limits_that_count_its_requests() {
    let o = http_origin(|_| ok("x"));
    let text = http(
        "[[frontend.limit]]\nname = \"api\"\nkey = \"source\"\nrate = \"2/h\"\n\
         [[frontend.limit]]\nname = \"everything\"\nkey = \"source\"\nrate = \"6/h\"\n\
         [[frontend.route]]\npath_prefix = \"/api\"\nbackend = \"app\"\nlimits = [\"api\"]",
        o.addr,
        "",
    );
    let proxy = Proxy::start(&text);
    let mut c = Client::open(proxy.addr);
    let api: Vec<u16> = (0..3).map(|_| c.get("/api/x", "").unwrap().0).collect();
    assert_eq!(api, [200, 200, 429], "`api` counts the /api route");
    // Other requests: not counted by `api`, counted by `everything` (named by no route),
    // which has seen the three above too (the refused one went no further: not counted).
    let rest: Vec<u16> = (0..5).map(|_| c.get("/other", "").unwrap().0).collect();
    assert_eq!(rest, [200, 200, 200, 200, 429]);
    let (api, everything) = (limit_metrics(&proxy, "api"), limit_metrics(&proxy, "everything"));
    assert_eq!((api.denied, everything.denied), (1, 1));
}
