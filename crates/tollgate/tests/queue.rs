//! Backend queues over real sockets: `maxqueue` refuses at once and counts, the queue is
//! first come first served across worker threads, a queued request is redispatched when a
//! server state changes (and fails at once when no server is left), a queue timeout
//! answers 503, and queue counts return to zero.
//!
//! Origins hold a request until the test releases it; the test waits for the proxy's
//! queue counts (bounded polls) rather than sleeping.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use common::Proxy;
use common::http::{HttpOrigin, http_origin, ok, read_response};
use master_support::{Master, TempDir, global};

/// An HTTP origin that answers `/hold` only once the test sends on the returned channel
/// (or after 20 s), anything else at once; it records requests in arrival order.
fn holding_origin(name: &'static str) -> (HttpOrigin, mpsc::Sender<()>) {
    let (release, held) = mpsc::channel::<()>();
    let held = Mutex::new(held);
    let origin = http_origin(move |req| {
        if req.target == "/hold" {
            let _ = held.lock().unwrap().recv_timeout(Duration::from_secs(20));
        }
        ok(name)
    });
    (origin, release)
}

/// A GET on its own connection, in a thread: (status, body, time to the answer).
fn request(addr: SocketAddr, path: &str) -> JoinHandle<(u16, String, Duration)> {
    let path = path.to_string();
    thread::spawn(move || {
        let began = Instant::now();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
        let (status, _, body) = read_response(&mut BufReader::new(s)).expect("a response");
        (status, String::from_utf8(body).unwrap(), began.elapsed())
    })
}

/// Waits (bounded) until `cond` holds, naming `what` if it never does.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

fn wait_requests(origin: &HttpOrigin, n: usize) {
    wait_until(&format!("{n} requests at the origin"), || origin.requests().len() >= n);
}

/// HTTP frontend `fe` → backend `be` with `backend_extra` keys and servers
/// `(name, address, server_extra)`.
fn config(global: &str, backend_extra: &str, servers: &[(&str, SocketAddr, &str)]) -> String {
    let mut text = format!(
        "{global}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\n{backend_extra}\n"
    );
    for (name, addr, extra) in servers {
        text.push_str(&format!(
            "[[backend.server]]\nname = \"{name}\"\naddress = \"{addr}\"\n{extra}\n"
        ));
    }
    text
}

/// The backend's queue length and refusals, and the sum of its servers' active slots.
fn queue_state(proxy: &Proxy) -> (u32, u64, u32) {
    let servers = proxy.running().show_servers(Some("be"));
    let first = servers.first().expect("a server");
    (
        first.backend_queued,
        first.backend_queue_full,
        servers.iter().map(|s| s.active).sum(),
    )
}

#[test]
fn maxqueue_refuses_at_once_counts_and_serves_those_admitted() {
    let (origin, release) = holding_origin("A");
    let proxy = Proxy::start(&config(
        "[global]\nworkers = 2\n[timeouts]\nqueue = \"10s\"",
        "maxqueue = 2",
        &[("a", origin.addr, "maxconn = 1")],
    ));
    let hold = request(proxy.addr, "/hold");
    wait_requests(&origin, 1);
    let queued: Vec<_> = (0..2)
        .map(|i| {
            let r = request(proxy.addr, &format!("/q{i}"));
            wait_until(&format!("{} queued", i + 1), || queue_state(&proxy).0 == i + 1);
            r
        })
        .collect();

    let (status, _, took) = request(proxy.addr, "/over").join().unwrap();
    assert_eq!(status, 503, "beyond maxqueue");
    assert!(
        took < Duration::from_secs(2),
        "refused at once, not after the 10 s queue timeout: {took:?}"
    );
    let stats = proxy.running().stats();
    assert_eq!(stats.queue_full, 1, "{stats:?}");
    assert_eq!(stats.queue_timeouts, 0);
    assert_eq!(queue_state(&proxy), (2, 1, 1), "two still queued, one refused");

    release.send(()).unwrap();
    assert_eq!(hold.join().unwrap().0, 200);
    for q in queued {
        let (status, body, _) = q.join().unwrap();
        assert_eq!((status, body.as_str()), (200, "A"), "admitted requests are served");
    }
    let targets: Vec<String> = origin.requests().iter().map(|r| r.target.clone()).collect();
    assert!(!targets.contains(&"/over".to_string()), "{targets:?}");
    wait_until("queue and slots back to zero", || queue_state(&proxy) == (0, 1, 0));
}

#[test]
fn queued_requests_are_served_first_come_first_served_across_worker_threads() {
    const N: u32 = 12;
    let (origin, release) = holding_origin("A");
    let proxy = Proxy::start(&config(
        "[global]\nworkers = 2\n[timeouts]\nqueue = \"20s\"",
        "",
        &[("a", origin.addr, "maxconn = 1")],
    ));
    let hold = request(proxy.addr, "/hold");
    wait_requests(&origin, 1);
    // One connection each, joined one after another: arrival order is known.
    let clients: Vec<_> = (0..N)
        .map(|i| {
            let r = request(proxy.addr, &format!("/{i}"));
            wait_until(&format!("{} queued", i + 1), || queue_state(&proxy).0 == i + 1);
            r
        })
        .collect();
    let per_worker: Vec<u64> = proxy
        .running()
        .shared()
        .stats
        .iter()
        .map(|w| w.server_queued.get())
        .collect();
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "both worker threads have queued requests: {per_worker:?}"
    );

    release.send(()).unwrap();
    assert_eq!(hold.join().unwrap().0, 200);
    for c in clients {
        assert_eq!(c.join().unwrap().0, 200);
    }
    let order: Vec<String> = origin.requests().iter().skip(1).map(|r| r.target.clone()).collect();
    let expected: Vec<String> = (0..N).map(|i| format!("/{i}")).collect();
    assert_eq!(order, expected, "served in arrival order");
    // The last slot is released just after its response left.
    wait_until("queue and slots back to zero", || queue_state(&proxy) == (0, 0, 0));
}

#[test]
fn queue_timeout_answers_503_and_leaves_nothing_queued() {
    let (origin, release) = holding_origin("A");
    let proxy = Proxy::start(&config(
        "[global]\nworkers = 2\n[timeouts]\nqueue = \"300ms\"",
        "",
        &[("a", origin.addr, "maxconn = 1")],
    ));
    let hold = request(proxy.addr, "/hold");
    wait_requests(&origin, 1);
    let (status, _, took) = request(proxy.addr, "/late").join().unwrap();
    assert_eq!(status, 503);
    assert!(took >= Duration::from_millis(300), "waited its queue timeout: {took:?}");
    let stats = proxy.running().stats();
    assert_eq!((stats.queue_timeouts, stats.queue_full), (1, 0), "{stats:?}");
    assert_eq!(queue_state(&proxy), (0, 0, 1), "nothing left queued");
    release.send(()).unwrap();
    assert_eq!(hold.join().unwrap().0, 200);
    wait_until("slots back to zero", || queue_state(&proxy) == (0, 0, 0));
    assert_eq!(
        origin.requests().len(),
        1,
        "the timed-out request never reached a server"
    );
}

/// Polls `show servers` until the footer says `n` requests wait in `be`'s queue.
fn wait_queued_ctl(master: &Master, n: u32) {
    let want = format!("backend be: {n} queued");
    wait_until(&want, || master.ctl_ok(&["show", "servers", "be"]).contains(&want));
}

#[test]
fn a_state_change_redispatches_queued_requests_at_once() {
    let (a, release_a) = holding_origin("A");
    let (b, release_b) = holding_origin("B");
    let dir = TempDir::new("queue-redispatch");
    let text = config(
        &format!("{}\n[timeouts]\nqueue = \"20s\"", global(&dir.0, "")),
        "",
        &[("a", a.addr, "maxconn = 1"), ("b", b.addr, "maxconn = 1")],
    );
    let master = Master::start(dir, &text, &[]);
    master.ctl_ok(&["set", "server", "be/b", "state", "maint"]);

    // a busy, b in maintenance: the request queues; b readied takes it at once.
    let hold = request(master.addr, "/hold");
    wait_requests(&a, 1);
    let queued = request(master.addr, "/moved");
    wait_queued_ctl(&master, 1);
    master.ctl_ok(&["set", "server", "be/b", "state", "ready"]);
    let (status, body, took) = queued.join().unwrap();
    assert_eq!((status, body.as_str()), (200, "B"), "moved to b");
    assert!(took < Duration::from_secs(10), "not after its queue timeout: {took:?}");

    // a busy and b busy: the request queues; a drained and b put in maintenance leave it
    // no server: 503 at once, not after the queue timeout.
    let hold_b = request(master.addr, "/hold");
    wait_requests(&b, 2);
    let stranded = request(master.addr, "/stranded");
    wait_queued_ctl(&master, 1);
    master.ctl_ok(&["set", "server", "be/b", "state", "maint"]);
    let table = master.ctl_ok(&["show", "servers", "be"]);
    assert!(
        table.contains("backend be: 1 queued"),
        "a still usable: it waits\n{table}"
    );
    let began = Instant::now();
    master.ctl_ok(&["set", "server", "be/a", "state", "drain"]);
    let (status, _, _) = stranded.join().unwrap();
    assert_eq!(status, 503, "no usable server left");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "failed at once: {:?}",
        began.elapsed()
    );
    let table = master.ctl_ok(&["show", "servers", "be"]);
    assert!(!table.contains("queued,"), "queue empty again\n{table}");

    release_a.send(()).unwrap();
    release_b.send(()).unwrap();
    assert_eq!(hold.join().unwrap().0, 200);
    assert_eq!(hold_b.join().unwrap().0, 200);
    assert!(
        !a.requests()
            .iter()
            .chain(b.requests().iter())
            .any(|r| r.target == "/stranded"),
        "the stranded request reached no server"
    );
}
