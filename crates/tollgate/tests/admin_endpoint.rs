//! `[admin] bind` against hostile local clients, in master mode: idle connections beyond the
//! endpoint's bound cannot keep a scraper from `/metrics`, and a stats-page action cannot
//! write a forged line into the master's log.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::http::{http_origin, ok};
use master_support::{Master, TempDir, global, logged_addr};

/// `ops:s3cret`, as a browser sends it.
const GOOD: &str = "Basic b3BzOnMzY3JldA==";

fn admin_addr(master: &Master) -> SocketAddr {
    let line = master
        .wait_log(|l| l.contains("admin endpoint ready"), Duration::from_secs(10))
        .expect("admin endpoint line");
    logged_addr(&line)
}

/// A master with the admin endpoint (`admin`: extra `[admin]` lines) in front of one origin.
fn start(tag: &str, admin: &str, origin: SocketAddr) -> Master {
    let dir = TempDir::new(tag);
    let config = format!(
        "{}\n[admin]\nbind = \"127.0.0.1:0\"\n{admin}\n\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n\
         [[backend.server]]\nname = \"a\"\naddress = \"{origin}\"\n",
        global(&dir.0, "")
    );
    Master::start(dir, &config, &[])
}

/// Sends `request` and reads to EOF within `limit`: the status (0: none in time).
fn status_within(addr: SocketAddr, request: &str, limit: Duration) -> u16 {
    let Ok(mut c) = TcpStream::connect_timeout(&addr, limit) else {
        return 0;
    };
    c.set_read_timeout(Some(limit)).unwrap();
    c.set_write_timeout(Some(limit)).unwrap();
    if c.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[test]
fn idle_connections_never_keep_a_scraper_from_metrics() {
    let origin = http_origin(|_| ok("o"));
    let master = start("admin-idle", "", origin.addr);
    let admin = admin_addr(&master);
    // Three times the endpoint's 16 connections, each connected and silent.
    let idle: Vec<TcpStream> = (0..48).map(|_| TcpStream::connect(admin).unwrap()).collect();
    let limit = Duration::from_millis(1500);
    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let began = Instant::now();
        let status = status_within(admin, "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n", limit);
        slowest = slowest.max(began.elapsed());
        assert_eq!(
            status,
            200,
            "scrape {i} with idle connections open (took {:?})",
            began.elapsed()
        );
    }
    assert!(slowest < limit, "slowest scrape {slowest:?}");
    // Idle connections were closed to make room (a closed one reads EOF or a reset).
    let closed = idle
        .iter()
        .filter(|s| {
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            match (&mut &**s).read(&mut [0u8; 1]) {
                Ok(0) => true,
                Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
                Ok(_) => false,
            }
        })
        .count();
    assert!(closed > 0, "no idle connection was closed");
    // And counted.
    let mut c = TcpStream::connect(admin).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let counted: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("tollgate_admin_idle_closed_total "))
        .and_then(|n| n.trim().parse().ok())
        .expect("tollgate_admin_idle_closed_total in the scrape");
    assert!(counted >= closed as u64, "counted {counted}, saw {closed} closed");
}

#[test]
fn a_stats_action_cannot_forge_a_log_line() {
    let origin = http_origin(|_| ok("o"));
    let master = start("admin-inject", "stats_auth = \"ops:s3cret\"", origin.addr);
    let admin = admin_addr(&master);
    let forged = "2030-01-01T00:00:00.000000Z  INFO tollgate::master::control: control: command \
                  uid=Some(0) id=1 command=\"reload\"";
    let encoded: String = format!("be\n{forged}").bytes().map(|b| format!("%{b:02X}")).collect();
    for query in [
        format!("backend={encoded}&server=a&state=drain"),
        format!("backend=be&server={encoded}&state=drain"),
        format!("backend=be&server=a&state=drain%0A{}", &encoded[..30]),
    ] {
        let request = format!(
            "POST /stats/server?{query} HTTP/1.1\r\nHost: {admin}\r\nContent-Length: 0\r\n\
             Authorization: {GOOD}\r\nX-Tollgate-Action: 1\r\n\r\n"
        );
        let status = status_within(admin, &request, Duration::from_secs(10));
        assert_eq!(status, 400, "{query}");
    }
    // A good action after them: once its line is in, every earlier one would be too.
    let request = format!(
        "POST /stats/server?backend=be&server=a&state=drain HTTP/1.1\r\nHost: {admin}\r\n\
         Content-Length: 0\r\nAuthorization: {GOOD}\r\nX-Tollgate-Action: 1\r\n\r\n"
    );
    assert_eq!(status_within(admin, &request, Duration::from_secs(10)), 200);
    master
        .wait_log(
            |l| l.contains("admin http") && l.contains("be/a"),
            Duration::from_secs(10),
        )
        .expect("the good action is logged");
    assert_eq!(
        master.log_count(|l| l.starts_with("2030-01-01") || l.contains("be\\n2030")),
        0,
        "a forged line (or the forged text) reached the log"
    );
}
