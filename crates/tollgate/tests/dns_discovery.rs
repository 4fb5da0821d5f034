//! Servers from DNS, against a real DNS server: dnsmasq on a loopback port, started by each
//! test, whose records the test changes (A records: the `--addn-hosts` file, re-read on
//! SIGHUP; SRV records: a restart on the same port). Host names resolve to 127.0.0.x only.
//!
//! - a host-named server follows its A record within two resolve intervals, without reusing
//!   pooled connections to the old address, and `show servers` shows the name and address;
//! - SRV: lowest priority primary, others backup, weights honoured; records added and
//!   removed reach traffic within two intervals;
//! - in master mode, `ctl show servers` shows the host name and the address in use, and a
//!   reload's new generation resolves at its start;
//! - a failed resolution (dnsmasq stopped, or the name removed: NXDOMAIN) keeps the last
//!   good address serving, is counted, and is logged once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;
mod master_support;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::Proxy;
use common::tls::TempDir;

const DNSMASQ: &str = "/usr/sbin/dnsmasq";
const INTERVAL: Duration = Duration::from_millis(200);

/// Prints why and returns true when dnsmasq is missing (CI installs it: there a missing
/// dnsmasq is a failure).
fn skip() -> bool {
    if std::path::Path::new(DNSMASQ).exists() {
        return false;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "dnsmasq is missing on CI (.ci/run installs dnsmasq-base)"
    );
    println!("skipped: dnsmasq not installed");
    true
}

/// A dnsmasq answering from `hosts` (A records) and `srv` (`--srv-host` values) on a
/// loopback port; killed on drop.
struct Dnsmasq {
    child: Child,
    port: u16,
    hosts: std::path::PathBuf,
}

impl Dnsmasq {
    fn start(dir: &TempDir, hosts: &str, srv: &[String]) -> Dnsmasq {
        let path = dir.path("hosts");
        std::fs::write(&path, hosts).unwrap();
        // A port free for UDP and TCP; another process may take it meanwhile: retried.
        for _ in 0..20 {
            let port = free_port();
            if let Some(d) = Dnsmasq::spawn(port, &path, srv) {
                return d;
            }
        }
        panic!("dnsmasq did not start");
    }

    fn spawn(port: u16, hosts: &std::path::Path, srv: &[String]) -> Option<Dnsmasq> {
        let mut cmd = Command::new(DNSMASQ);
        cmd.args([
            "--keep-in-foreground",
            "--listen-address=127.0.0.1",
            "--bind-interfaces",
            "--no-resolv",
            "--no-hosts",
            "--pid-file=",
            "--log-facility=-",
            "--conf-file=/dev/null",
            "--user=root",
            // Authoritative for `.test`: an unknown name there is NXDOMAIN (without it,
            // dnsmasq with no upstream answers REFUSED).
            "--local=/test/",
        ])
        .arg(format!("--port={port}"))
        .arg(format!("--addn-hosts={}", hosts.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        for s in srv {
            cmd.arg(format!("--srv-host={s}"));
        }
        let d = Dnsmasq {
            child: cmd.spawn().expect("spawn dnsmasq"),
            port,
            hosts: hosts.to_path_buf(),
        };
        // Serving once it answers a query (any answer, NXDOMAIN included); one that exited
        // could not bind the port. Dropping `d` kills it.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut d = d;
        while Instant::now() < deadline {
            if query_a(d.addr(), "probe.invalid").is_some() {
                return Some(d);
            }
            if d.child.try_wait().ok().flatten().is_some() {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Rewrites the A records and waits (bounded) until dnsmasq answers `name` with `expect`
    /// (`None`: no address).
    fn set_hosts(&self, hosts: &str, name: &str, expect: Option<Ipv4Addr>) {
        std::fs::write(&self.hosts, hosts).unwrap();
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-HUP", &pid]).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(5);
        while query_a(self.addr(), name) != Some(expect) {
            assert!(Instant::now() < deadline, "dnsmasq did not take the new hosts file");
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Restarts on the same port with other SRV records.
    fn restart(&mut self, srv: &[String]) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(d) = Dnsmasq::spawn(self.port, &self.hosts, srv) {
                *self = d;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "dnsmasq did not restart on port {}",
                self.port
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> u16 {
    loop {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// One A query over UDP: `None` = no answer at all; `Some(None)` = answered without an
/// address (NXDOMAIN, no data); `Some(Some(ip))` = the first address.
fn query_a(server: SocketAddr, name: &str) -> Option<Option<Ipv4Addr>> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    let s = UdpSocket::bind("127.0.0.1:0").ok()?;
    s.set_read_timeout(Some(Duration::from_millis(200))).ok()?;
    s.send_to(&q, server).ok()?;
    let mut buf = [0u8; 512];
    let n = s.recv(&mut buf).ok()?;
    let r = &buf[..n];
    let answers = u16::from_be_bytes([r[6], r[7]]);
    if answers == 0 {
        return Some(None);
    }
    // The first answer is an A record at the end of a one-answer response.
    Some(Some(Ipv4Addr::new(r[n - 4], r[n - 3], r[n - 2], r[n - 1])))
}

/// An HTTP/1.1 keep-alive origin on `addr` answering every request with `name`.
fn named_origin(addr: SocketAddr, name: &'static str) -> Option<SocketAddr> {
    let listener = TcpListener::bind(addr).ok()?;
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                loop {
                    let mut line = String::new();
                    // The head, up to its empty line (no bodies in these tests).
                    loop {
                        line.clear();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{name}", name.len());
                    if writer.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    Some(addr)
}

/// Origins named `names` on 127.0.0.1, 127.0.0.2, ... all on one port.
fn origins_on_one_port(names: &[&'static str]) -> u16 {
    'retry: for _ in 0..50 {
        let first = named_origin(SocketAddr::from(([127, 0, 0, 1], 0)), names[0]).unwrap();
        for (i, name) in names.iter().enumerate().skip(1) {
            let ip = IpAddr::from([127, 0, 0, 1 + i as u8]);
            if named_origin(SocketAddr::new(ip, first.port()), name).is_none() {
                continue 'retry;
            }
        }
        return first.port();
    }
    panic!("no port free on every loopback address");
}

/// One request on a fresh client connection: the origin's name.
fn get(proxy: SocketAddr) -> String {
    let mut c = TcpStream::connect(proxy).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    match out.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => body.to_string(),
        _ => format!("error: {}", out.lines().next().unwrap_or("no response")),
    }
}

/// Sends requests until one is answered by `name`; the time it took (panics past `limit`).
fn until_served_by(proxy: SocketAddr, name: &str, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if get(proxy) == name {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "{name} not serving after {limit:?}");
        thread::sleep(Duration::from_millis(5));
    }
}

fn shares(proxy: SocketAddr, n: usize) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for _ in 0..n {
        *out.entry(get(proxy)).or_insert(0) += 1;
    }
    out
}

fn resolvers(dns: &Dnsmasq) -> String {
    format!(
        "[global]\nworkers = 1\n\n[resolvers]\nnameservers = [\"{}\"]\nresolve_interval = \"{}ms\"\ntimeout = \"200ms\"\nattempts = 1\n",
        dns.addr(),
        INTERVAL.as_millis()
    )
}

fn frontend() -> &'static str {
    "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\n"
}

/// Two intervals, plus what a loaded test machine adds to a request and a thread wake-up.
fn two_intervals() -> Duration {
    2 * INTERVAL + Duration::from_millis(600)
}

/// Log lines of this process, for "logged once" (a global subscriber: one test per process
/// under nextest).
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn install() -> Lines {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
        lines
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    fn count(&self, needle: &str) -> usize {
        let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
        text.lines().filter(|l| l.contains(needle)).count()
    }
}

#[test]
fn host_name_change_reaches_traffic_within_two_intervals() {
    if skip() {
        return;
    }
    let dir = TempDir::new();
    let port = origins_on_one_port(&["A", "B"]);
    let dns = Dnsmasq::start(&dir, "127.0.0.1 app.test\n", &[]);
    let config = format!(
        "{}{}[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"app\"\naddress = \"app.test:{port}\"\n",
        resolvers(&dns),
        frontend()
    );
    let proxy = Proxy::start(&config);
    // Resolved before serving: the very first request goes through.
    assert_eq!(get(proxy.addr), "A");
    let view = &proxy.running().show_servers(Some("be"))[0];
    assert_eq!(view.host.as_deref(), Some("app.test"));
    assert_eq!(view.address, SocketAddr::from(([127, 0, 0, 1], port)));
    let id = view.id;
    // Leaves an idle pooled connection to A: it must not carry requests after the move.
    assert_eq!(get(proxy.addr), "A");

    dns.set_hosts("127.0.0.2 app.test\n", "app.test", Some(Ipv4Addr::new(127, 0, 0, 2)));
    let took = until_served_by(proxy.addr, "B", two_intervals());
    eprintln!("address change reached traffic after {took:?} (interval {INTERVAL:?})");
    let after = shares(proxy.addr, 20);
    assert_eq!(
        after.get("B"),
        Some(&20),
        "every request after the change goes to B: {after:?}"
    );

    let view = &proxy.running().show_servers(Some("be"))[0];
    assert_eq!(view.id, id, "same server, same id");
    assert_eq!(view.address, SocketAddr::from(([127, 0, 0, 2], port)));
    assert!(view.resolved);
    assert!(
        view.counters.requests >= 23,
        "counters carried over the readdress: {view:?}"
    );
    assert!(
        proxy.running().stats().dns_updates >= 2,
        "initial resolution + the change"
    );
}

#[test]
fn srv_records_fill_the_backend_and_follow_changes() {
    if skip() {
        return;
    }
    let dir = TempDir::new();
    let (a, b, c, d) = (
        named_origin(SocketAddr::from(([127, 0, 0, 1], 0)), "A").unwrap(),
        named_origin(SocketAddr::from(([127, 0, 0, 1], 0)), "B").unwrap(),
        named_origin(SocketAddr::from(([127, 0, 0, 1], 0)), "C").unwrap(),
        named_origin(SocketAddr::from(([127, 0, 0, 1], 0)), "D").unwrap(),
    );
    let hosts = "127.0.0.1 a.app.test b.app.test c.app.test d.app.test\n";
    let srv = |target: &str, port: u16, priority: u16, weight: u16| {
        format!("_http._tcp.app.test,{target}.app.test,{port},{priority},{weight}")
    };
    let mut dns = Dnsmasq::start(
        &dir,
        hosts,
        &[
            srv("a", a.port(), 0, 10),
            srv("b", b.port(), 0, 30),
            srv("c", c.port(), 10, 50),
        ],
    );
    // Only `discover`, no static server: a valid config.
    let config = format!(
        "{}{}[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.discover]]\nsrv = \"_http._tcp.app.test\"\n",
        resolvers(&dns),
        frontend()
    );
    tollgate::config::parse(&config, "t.toml").expect("a discover-only backend passes check");
    let proxy = Proxy::start(&config);

    let servers = proxy.running().show_servers(Some("be"));
    let mut names: Vec<(String, bool, u32)> = servers.iter().map(|s| (s.name.clone(), s.backup, s.weight)).collect();
    names.sort();
    assert_eq!(
        names,
        [
            (format!("a.app.test:{}", a.port()), false, 10),
            (format!("b.app.test:{}", b.port()), false, 30),
            (format!("c.app.test:{}", c.port()), true, 50),
        ]
    );
    assert!(servers.iter().all(|s| s.host.is_some() && s.resolved));
    // `show servers` marks them as discovered (`SRC dns`).
    assert!(servers.iter().all(|s| s.source.as_str() == "dns"));
    let split = shares(proxy.addr, 200);
    let (sa, sb) = (
        split.get("A").copied().unwrap_or(0),
        split.get("B").copied().unwrap_or(0),
    );
    assert_eq!(sa + sb, 200, "the backup (priority 10) gets nothing: {split:?}");
    assert!((35..=65).contains(&sa), "weights 10:30 give A ~50 of 200: {split:?}");

    // b leaves, d (priority 0) arrives.
    dns.restart(&[
        srv("a", a.port(), 0, 10),
        srv("c", c.port(), 10, 50),
        srv("d", d.port(), 0, 10),
    ]);
    let took = until_served_by(proxy.addr, "D", two_intervals());
    eprintln!("SRV add reached traffic after {took:?}");
    let split = shares(proxy.addr, 40);
    assert_eq!(split.get("B"), None, "b's record is gone: {split:?}");
    assert!(split.contains_key("A") && split.contains_key("D"), "{split:?}");

    // Only the priority-10 record left: it is the lowest priority now, so primary.
    dns.restart(&[srv("c", c.port(), 10, 50)]);
    let took = until_served_by(proxy.addr, "C", two_intervals());
    eprintln!("SRV removal reached traffic after {took:?}");
    assert_eq!(shares(proxy.addr, 20).get("C"), Some(&20));
    let servers = proxy.running().show_servers(Some("be"));
    assert_eq!(servers.len(), 1, "{servers:?}");
    assert!(!servers[0].backup);

    // d comes back: same name, same id as before.
    let d_id = |p: &Proxy| {
        p.running()
            .show_servers(Some("be"))
            .iter()
            .find(|s| s.name.starts_with("d.app.test"))
            .map(|s| s.id)
    };
    dns.restart(&[srv("c", c.port(), 10, 50), srv("d", d.port(), 0, 10)]);
    until_served_by(proxy.addr, "D", two_intervals());
    assert!(
        d_id(&proxy).is_some_and(|id| id.0 >= 1 << 31),
        "a discovered id is in the reserved range"
    );
}

#[test]
fn resolution_failure_keeps_the_last_good_address() {
    if skip() {
        return;
    }
    let lines = Lines::install();
    let dir = TempDir::new();
    let port = origins_on_one_port(&["A", "B"]);
    let mut dns = Dnsmasq::start(&dir, "127.0.0.1 app.test\n", &[]);
    let config = format!(
        "{}{}[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"app\"\naddress = \"app.test:{port}\"\n",
        resolvers(&dns),
        frontend()
    );
    let proxy = Proxy::start(&config);
    assert_eq!(get(proxy.addr), "A");
    assert_eq!(proxy.running().stats().dns_failures, 0);

    // The name removed: NXDOMAIN at every interval, A keeps serving.
    dns.set_hosts("127.0.0.9 other.test\n", "app.test", None);
    let failures_after = |n: u64, limit: Duration| {
        let deadline = Instant::now() + limit;
        while proxy.running().stats().dns_failures < n {
            assert!(Instant::now() < deadline, "fewer than {n} failures counted");
            thread::sleep(Duration::from_millis(10));
        }
    };
    failures_after(3, 5 * INTERVAL + Duration::from_secs(2));
    assert_eq!(
        shares(proxy.addr, 10).get("A"),
        Some(&10),
        "last good address still serves"
    );

    // dnsmasq gone: timeouts / refused, still A.
    dns.stop();
    let before = proxy.running().stats().dns_failures;
    failures_after(
        before + 3,
        5 * (INTERVAL + Duration::from_millis(200)) + Duration::from_secs(2),
    );
    assert_eq!(
        shares(proxy.addr, 10).get("A"),
        Some(&10),
        "last good address still serves"
    );
    let view = &proxy.running().show_servers(Some("be"))[0];
    assert_eq!(view.address, SocketAddr::from(([127, 0, 0, 1], port)));

    // One more line for the change of outcome (NXDOMAIN, then the nameserver gone); one
    // when it resolves again.
    assert_eq!(
        lines.count("DNS resolution failed"),
        2,
        "for {} failures:\n{}",
        proxy.running().stats().dns_failures,
        lines.text()
    );
    dns.restart(&[]);
    dns.set_hosts("127.0.0.2 app.test\n", "app.test", Some(Ipv4Addr::new(127, 0, 0, 2)));
    until_served_by(proxy.addr, "B", two_intervals());
    assert_eq!(lines.count("DNS resolution works again"), 1);
}

#[test]
fn unresolvable_name_at_start_starts_unresolved_then_resolves() {
    if skip() {
        return;
    }
    let dir = TempDir::new();
    let port = origins_on_one_port(&["A"]);
    let dns = Dnsmasq::start(&dir, "127.0.0.9 other.test\n", &[]);
    let config = format!(
        "{}{}[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"app\"\naddress = \"app.test:{port}\"\n",
        resolvers(&dns),
        frontend()
    );
    let proxy = Proxy::start(&config);
    let view = &proxy.running().show_servers(Some("be"))[0];
    assert!(!view.resolved, "{view:?}");
    assert!(
        get(proxy.addr).starts_with("error: HTTP/1.1 503"),
        "an unresolved server takes nothing"
    );
    dns.set_hosts("127.0.0.1 app.test\n", "app.test", Some(Ipv4Addr::new(127, 0, 0, 1)));
    until_served_by(proxy.addr, "A", two_intervals());
}

#[test]
fn master_mode_shows_host_names_and_follows_changes_across_a_reload() {
    if skip() {
        return;
    }
    let dir = TempDir::new();
    let port = origins_on_one_port(&["A", "B"]);
    let dns = Dnsmasq::start(&dir, "127.0.0.1 app.test\n", &[]);
    let mdir = master_support::TempDir::new("dns-master");
    let config = format!(
        "{}\n[resolvers]\nnameservers = [\"{}\"]\nresolve_interval = \"{}ms\"\n\n{}[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"app\"\naddress = \"app.test:{port}\"\n",
        master_support::global(&mdir.0, ""),
        dns.addr(),
        INTERVAL.as_millis(),
        frontend()
    );
    let master = master_support::Master::start(mdir, &config, &[]);
    assert_eq!(get(master.addr), "A");
    let table = master.ctl_ok(&["show", "servers", "be"]);
    let row = table.lines().find(|l| l.starts_with("be ")).expect("a row");
    assert!(
        row.contains(&format!("127.0.0.1:{port}")) && row.trim_end().ends_with("app.test"),
        "{table}"
    );

    dns.set_hosts("127.0.0.2 app.test\n", "app.test", Some(Ipv4Addr::new(127, 0, 0, 2)));
    until_served_by(master.addr, "B", two_intervals());
    let table = master.ctl_ok(&["show", "servers", "be"]);
    assert!(table.contains(&format!("127.0.0.2:{port}")), "{table}");

    // The next generation resolves before it serves: B from its first request.
    master.reload_ok();
    master.wait_single_generation(Duration::from_secs(10));
    assert_eq!(shares(master.addr, 10).get("B"), Some(&10));
}
