//! Every stream ends with one record (issue "live model", item 8): each test reads the
//! records the worker's sink emits (trace events `tollgate::record`, captured by a layer
//! installed here) and the per-server counters the sink feeds, and compares them with the
//! traffic it made itself.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::collections::BTreeMap;
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::http::{http_origin, ok, read_response};
use common::*;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

type Record = BTreeMap<String, String>;

struct Capture(Arc<Mutex<Vec<Record>>>);

struct Fields<'a>(&'a mut Record);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() == "tollgate::record" {
            let mut r = Record::new();
            event.record(&mut Fields(&mut r));
            self.0.lock().unwrap().push(r);
        }
    }
}

/// All records so far (the layer is global: tests filter by frontend address via `client`).
fn records() -> &'static Arc<Mutex<Vec<Record>>> {
    static RECORDS: OnceLock<Arc<Mutex<Vec<Record>>>> = OnceLock::new();
    RECORDS.get_or_init(|| {
        let records = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Capture(Arc::clone(&records)));
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
        records
    })
}

/// The records of streams from `client` (a local address), waiting (bounded) for `n`.
fn records_of(client: std::net::SocketAddr, n: usize) -> Vec<Record> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mine: Vec<Record> = records()
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.get("client").map(String::as_str) == Some(client.to_string().as_str()))
            .cloned()
            .collect();
        if mine.len() >= n {
            assert_eq!(mine.len(), n, "exactly one record per stream: {mine:#?}");
            return mine;
        }
        assert!(Instant::now() < deadline, "records for {client}: {mine:#?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn num(r: &Record, key: &str) -> i64 {
    r[key].parse().unwrap_or_else(|_| panic!("{key} in {r:?}"))
}

fn two_origins_config(a: std::net::SocketAddr, b: std::net::SocketAddr, mode: &str) -> String {
    format!(
        "[global]\nworkers = 1\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"{mode}\"\ndefault_backend = \"be\"\n\
         [[backend]]\nname = \"be\"\nmode = \"{mode}\"\nretries = 1\n\
         [[backend.server]]\nname = \"a\"\naddress = \"{a}\"\n[[backend.server]]\nname = \"b\"\naddress = \"{b}\"\n"
    )
}

#[test]
fn keep_alive_requests_each_get_a_record_with_their_own_bytes_and_timings() {
    records();
    let origin = http_origin(|req| ok(&"x".repeat(req.body.len() + 3)));
    let proxy = Proxy::start(&two_origins_config(origin.addr, origin.addr, "http"));
    let conn = TcpStream::connect(proxy.addr).unwrap();
    let me = conn.local_addr().unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut conn = conn;
    let sizes = [0usize, 500, 4000];
    for n in sizes {
        write!(conn, "POST /r HTTP/1.1\r\nHost: t\r\nContent-Length: {n}\r\n\r\n").unwrap();
        conn.write_all(&vec![b'q'; n]).unwrap();
        let (status, _, body) = read_response(&mut reader).unwrap();
        assert_eq!((status, body.len()), (200, n + 3));
    }
    drop((conn, reader));
    let recs = records_of(me, 3);
    let servers = proxy.running().show_servers(None);
    for (r, n) in recs.iter().zip(sizes) {
        assert_eq!(r["termination"], "--", "{r:?}");
        assert_eq!(num(r, "status"), 200);
        assert_eq!(num(r, "retries"), 0);
        assert!(servers.iter().any(|s| i64::from(s.id.0) == num(r, "server")), "{r:?}");
        // What the origin got for this request: the rewritten head plus the body.
        assert!(
            num(r, "to_server") > n as i64 && num(r, "to_server") < n as i64 + 300,
            "{r:?}"
        );
        // What the client got: a short head plus n + 3 body bytes.
        assert!(
            num(r, "to_client") > n as i64 + 3 && num(r, "to_client") < n as i64 + 100,
            "{r:?}"
        );
        let steps = ["head_us", "chosen_us", "connected_us", "response_us", "end_us"].map(|k| num(r, k));
        assert!(steps.iter().all(|&t| t >= 0), "every step happened: {r:?}");
        assert!(steps.windows(2).all(|w| w[0] <= w[1]), "steps in order: {r:?}");
    }
    // The sink fed the server counters: 3 requests, 3 responses 2xx, the bytes of the records.
    let total = |k: &str| recs.iter().map(|r| num(r, k)).sum::<i64>() as u64;
    let requests: u64 = servers.iter().map(|s| s.counters.requests).sum();
    let ok2xx: u64 = servers.iter().map(|s| s.counters.responses_2xx).sum();
    let to_server: u64 = servers.iter().map(|s| s.counters.bytes_to_server).sum();
    let to_client: u64 = servers.iter().map(|s| s.counters.bytes_to_client).sum();
    assert_eq!((requests, ok2xx), (3, 3));
    assert_eq!((to_server, to_client), (total("to_server"), total("to_client")));
}

#[test]
fn failures_are_recorded_with_haproxy_style_causes() {
    records();
    let dead_port = ReservedPort::new(); // refuses connections while held
    let dead = dead_port.addr;
    let proxy = Proxy::start(&two_origins_config(dead, dead, "http"));
    // Both servers refuse: one retry, then a 503 ("SC": the server side, at connect).
    let conn = TcpStream::connect(proxy.addr).unwrap();
    let me = conn.local_addr().unwrap();
    let mut conn = conn;
    conn.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let (status, _, _) = read_response(&mut BufReader::new(conn.try_clone().unwrap())).unwrap();
    assert_eq!(status, 503);
    let r = &records_of(me, 1)[0];
    assert_eq!(
        (r["termination"].as_str(), num(r, "status"), num(r, "retries")),
        ("SC", 503, 1),
        "{r:?}"
    );
    assert_eq!(num(r, "connected_us"), -1, "never connected: {r:?}");
    // A malformed request: the proxy refused it while reading it ("PR"), no server involved.
    let conn = TcpStream::connect(proxy.addr).unwrap();
    let me = conn.local_addr().unwrap();
    let mut conn = conn;
    conn.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let r = &records_of(me, 1)[0];
    assert_eq!(
        (r["termination"].as_str(), num(r, "status"), num(r, "server")),
        ("PR", 400, -1),
        "{r:?}"
    );
}

#[test]
fn a_tcp_session_is_one_record_with_its_bytes_each_way() {
    records();
    let echo_origin = origin(echo);
    let proxy = Proxy::start(&two_origins_config(echo_origin.addr, echo_origin.addr, "tcp"));
    let mut conn = TcpStream::connect(proxy.addr).unwrap();
    let me = conn.local_addr().unwrap();
    conn.write_all(&[7u8; 3000]).unwrap();
    conn.shutdown(std::net::Shutdown::Write).unwrap();
    let mut back = Vec::new();
    conn.read_to_end(&mut back).unwrap();
    assert_eq!(back.len(), 3000);
    let r = &records_of(me, 1)[0];
    assert_eq!((num(r, "to_server"), num(r, "to_client")), (3000, 3000), "{r:?}");
    assert_eq!((r["termination"].as_str(), num(r, "status")), ("--", 0), "{r:?}");
    assert!(num(r, "server") >= 0 && num(r, "connected_us") >= 0, "{r:?}");
}
