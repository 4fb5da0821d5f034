//! The park over TLS (`global.park_idle_after` on a terminating frontend): an idle HTTP/1.1
//! connection over TLS leaves its task with its rustls state and comes back where it left
//! off, its keys and sequence numbers intact — its next requests served (pipelined ones too,
//! over TLS 1.3 and 1.2, by rustls, OpenSSL's s_client and curl), a close_notify or a FIN
//! while parked a quiet close, a first request's deadline answered 408 over TLS, a
//! keep-alive deadline a quiet close, a soft stop handing it back. Half a TLS record sent
//! before a park is finished after it; half a record and then silence holds nothing past the
//! deadline and is never served, while other clients are.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::Proxy;
use common::http::{HttpOrigin, http_origin, ok};
use common::tls::{Ca, TempDir, cert_entry, path_str};
use rustls::pki_types::ServerName;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// A proxy with a TLS frontend (certificate for `park.test`) in front of an origin answering
/// `ok`, parking after 20 ms; both deadlines 400 ms.
struct Setup {
    proxy: Proxy,
    client: Arc<rustls::ClientConfig>,
    _origin: HttpOrigin,
    dir: TempDir,
    ca: Ca,
}

fn start() -> Setup {
    start_with(&[&rustls::version::TLS13, &rustls::version::TLS12])
}

fn start_with(versions: &[&'static rustls::SupportedProtocolVersion]) -> Setup {
    warnings();
    let origin = http_origin(|_| ok("ok"));
    let dir = TempDir::new();
    let ca = Ca::new("park-ca");
    let leaf = ca.leaf(&["park.test"], "park", false).write(&dir, "park");
    let config = format!(
        "[global]\nworkers = 1\npark_idle_after = \"20ms\"\n[timeouts]\nhttp_request = \"400ms\"\nhttp_keep_alive = \"400ms\"\n\
         [[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         [frontend.tls]\nalpn = [\"http/1.1\"]\n{}\n[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        cert_entry(&leaf, true),
        origin.addr
    );
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der.clone()).unwrap();
    let mut client =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    Setup {
        proxy: Proxy::start(&config),
        client: Arc::new(client),
        _origin: origin,
        dir,
        ca,
    }
}

/// A client whose connection got one response and then parked (the only one parked).
fn served_then_parked(s: &Setup) -> Client {
    let mut c = Client::connect(s.proxy.addr, &s.client);
    c.send(GET);
    assert!(c.read_responses(1).0.starts_with("HTTP/1.1 200"));
    s.proxy.wait_for("parked", |st| st.sessions_parked == 1);
    c
}

/// A blocking rustls client connection, handshake done.
struct Client {
    conn: rustls::ClientConnection,
    sock: TcpStream,
}

impl Client {
    fn connect(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> Client {
        let name = ServerName::try_from("park.test").unwrap();
        let mut conn = rustls::ClientConnection::new(Arc::clone(config), name).unwrap();
        let mut sock = TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).unwrap();
        }
        Client { conn, sock }
    }

    /// `plaintext` as the records that carry it, not sent.
    fn seal(&mut self, plaintext: &[u8]) -> Vec<u8> {
        self.conn.writer().write_all(plaintext).unwrap();
        let mut records = Vec::new();
        while self.conn.wants_write() {
            self.conn.write_tls(&mut records).unwrap();
        }
        records
    }

    fn send(&mut self, plaintext: &[u8]) {
        let records = self.seal(plaintext);
        self.sock.write_all(&records).unwrap();
    }

    /// Reads until `n` responses ending in `ok` arrived, or the connection ended; returns
    /// what came and how it ended (`None`: it did not).
    fn read_responses(&mut self, n: usize) -> (String, Option<End>) {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let mut end = None;
        while String::from_utf8_lossy(&got).matches("\r\n\r\nok").count() < n {
            match rustls::Stream::new(&mut self.conn, &mut self.sock).read(&mut buf) {
                Ok(0) => end = Some(End::CloseNotify),
                Ok(r) => got.extend_from_slice(&buf[..r]),
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => end = Some(End::Fin),
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                    end = Some(End::TimedOut);
                }
                Err(_) => end = Some(End::Error),
            }
            if end.is_some() {
                break;
            }
        }
        (String::from_utf8_lossy(&got).into_owned(), end)
    }

    /// Reads until the connection ends: what came, and how.
    fn read_to_end(&mut self) -> (String, End) {
        let (text, end) = self.read_responses(usize::MAX);
        (text, end.unwrap())
    }
}

#[derive(Debug, PartialEq, Eq)]
enum End {
    CloseNotify,
    /// A FIN without close_notify.
    Fin,
    TimedOut,
    Error,
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: park.test\r\n\r\n";

/// Warn (and error) events, with their `peer` field, captured by a layer installed here.
fn warnings() -> &'static Arc<Mutex<Vec<String>>> {
    static WARNINGS: OnceLock<Arc<Mutex<Vec<String>>>> = OnceLock::new();
    WARNINGS.get_or_init(|| {
        let warnings = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Capture(Arc::clone(&warnings)));
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
        warnings
    })
}

struct Capture(Arc<Mutex<Vec<String>>>);

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() <= tracing::Level::WARN {
            let mut line = Line(String::new());
            event.record(&mut line);
            self.0.lock().unwrap().push(line.0);
        }
    }
}

/// The warnings logged about the client at `addr` (tests share the layer).
fn warnings_about(addr: SocketAddr) -> Vec<String> {
    let needle = format!("peer={addr}");
    warnings()
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(&needle))
        .cloned()
        .collect()
}

#[test]
fn a_parked_tls_connection_serves_its_next_requests_pipelined_or_not() {
    let s = start();
    let mut c = Client::connect(s.proxy.addr, &s.client);
    c.send(GET);
    assert!(c.read_responses(1).0.starts_with("HTTP/1.1 200"));
    s.proxy
        .wait_for("parked after its response", |st| st.sessions_parked == 1);
    c.send(GET);
    let (text, end) = c.read_responses(1);
    assert!(text.starts_with("HTTP/1.1 200"), "{text:?} {end:?}");
    s.proxy
        .wait_for("parked again", |st| st.sessions_parked == 1 && st.park_entered == 2);
    // Two requests in one write (one record): both answered, in order.
    c.send(&[GET, GET].concat());
    let (text, end) = c.read_responses(2);
    assert_eq!(text.matches("HTTP/1.1 200").count(), 2, "{text:?} {end:?}");
    s.proxy.wait_for("parked a third time", |st| st.park_entered == 3);
    let st = s.proxy.running().stats();
    assert_eq!(
        (
            st.sessions_total,
            st.sessions_active,
            st.tls_handshakes_full,
            st.http_requests
        ),
        (1, 1, 1, 4),
        "one session, one handshake: {st:?}"
    );
    assert_eq!(st.park_resumed, 2, "{st:?}");
}

#[test]
fn a_parked_tls12_connection_keeps_its_sequence_numbers() {
    // TLS 1.2: explicit nonces and sequence numbers in the record layer's state.
    let s = start_with(&[&rustls::version::TLS12]);
    let mut c = Client::connect(s.proxy.addr, &s.client);
    assert_eq!(c.conn.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_2));
    for n in 1..=3u64 {
        c.send(GET);
        let (text, end) = c.read_responses(1);
        assert!(text.starts_with("HTTP/1.1 200"), "request {n}: {text:?} {end:?}");
        s.proxy
            .wait_for("parked", |st| st.sessions_parked == 1 && st.park_entered == n);
    }
    assert_eq!(s.proxy.running().stats().tls_handshakes_full, 1);
}

#[test]
fn a_tls_client_that_closes_while_parked_is_counted_out_quietly() {
    let s = start();
    // close_notify, then FIN.
    let mut c = served_then_parked(&s);
    let local = c.sock.local_addr().unwrap();
    c.conn.send_close_notify();
    let records = c.seal(b"");
    c.sock.write_all(&records).unwrap();
    c.sock.shutdown(std::net::Shutdown::Write).unwrap();
    s.proxy
        .wait_for("counted out", |st| st.sessions_active == 0 && st.sessions_parked == 0);
    // A FIN alone.
    let mut d = Client::connect(s.proxy.addr, &s.client);
    d.send(GET);
    assert!(d.read_responses(1).0.starts_with("HTTP/1.1 200"));
    s.proxy
        .wait_for("parked", |st| st.sessions_parked == 1 && st.park_entered == 2);
    let local_d = d.sock.local_addr().unwrap();
    drop(d);
    s.proxy
        .wait_for("counted out", |st| st.sessions_active == 0 && st.sessions_parked == 0);
    assert_eq!(s.proxy.running().stats().park_resumed, 2);
    for addr in [local, local_d] {
        assert!(warnings_about(addr).is_empty(), "{:?}", warnings_about(addr));
    }
    // Served meanwhile and after.
    let mut e = Client::connect(s.proxy.addr, &s.client);
    e.send(GET);
    assert!(e.read_responses(1).0.starts_with("HTTP/1.1 200"));
}

#[test]
fn a_silent_tls_connection_is_parked_then_answered_408_over_tls() {
    let s = start();
    let mut c = Client::connect(s.proxy.addr, &s.client);
    s.proxy
        .wait_for("parked before its first request", |st| st.sessions_parked == 1);
    let (text, end) = c.read_to_end();
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?} {end:?}");
    assert_eq!(end, End::CloseNotify, "{text:?}");
    s.proxy
        .wait_for("closed", |st| st.sessions_active == 0 && st.sessions_parked == 0);
    assert_eq!(
        s.proxy.running().stats().park_expired,
        0,
        "answered, not closed quietly"
    );
}

#[test]
fn a_parked_tls_keep_alive_connection_closes_quietly_at_its_deadline() {
    let s = start();
    let mut c = served_then_parked(&s);
    let local = c.sock.local_addr().unwrap();
    let (text, end) = c.read_to_end();
    assert_eq!((text.as_str(), end), ("", End::Fin), "a quiet close: no bytes");
    s.proxy.wait_for("counted out", |st| {
        st.sessions_active == 0 && st.sessions_parked == 0 && st.park_expired == 1
    });
    assert!(warnings_about(local).is_empty(), "{:?}", warnings_about(local));
}

#[test]
fn half_a_record_sent_before_a_park_is_finished_after_it() {
    let s = start();
    let mut c = served_then_parked(&s);
    let records = c.seal(GET);
    let (first, rest) = records.split_at(records.len() / 2);
    c.sock.write_all(first).unwrap();
    // Woken by the half record, its bytes in the TLS layer's deframer, parked again.
    s.proxy.wait_for("parked with half a record", |st| {
        st.park_resumed == 1 && st.sessions_parked == 1 && st.park_entered == 2 && st.buffers_in_use == 0
    });
    c.sock.write_all(rest).unwrap();
    let (text, end) = c.read_responses(1);
    assert!(text.starts_with("HTTP/1.1 200"), "{text:?} {end:?}");
    assert_eq!(s.proxy.running().stats().http_requests, 2);
}

#[test]
fn half_a_record_then_silence_is_never_served_and_holds_nothing_past_its_deadline() {
    let s = start();
    // After a response: half a record, then nothing. Its keep-alive deadline (kept across
    // the parks) closes it.
    let mut c = served_then_parked(&s);
    let records = c.seal(GET);
    c.sock.write_all(&records[..records.len() / 2]).unwrap();
    s.proxy.wait_for("parked with half a record", |st| {
        st.park_entered == 2 && st.sessions_parked == 1
    });
    // Before any request: a half record, and a first request's deadline answers 408.
    let mut d = Client::connect(s.proxy.addr, &s.client);
    let records = d.seal(GET);
    d.sock.write_all(&records[..records.len() / 2]).unwrap();
    // A normal client is served meanwhile.
    let mut e = Client::connect(s.proxy.addr, &s.client);
    e.send(GET);
    assert!(e.read_responses(1).0.starts_with("HTTP/1.1 200"));
    let (text, end) = c.read_to_end();
    assert_eq!((text.as_str(), end), ("", End::Fin), "a quiet close: no bytes");
    let (text, end) = d.read_to_end();
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?} {end:?}");
    drop(e);
    s.proxy
        .wait_for("all closed", |st| st.sessions_active == 0 && st.sessions_parked == 0);
    assert_eq!(
        s.proxy.running().stats().http_requests,
        2,
        "the halves were never served"
    );
}

#[test]
fn a_record_completed_with_garbage_after_a_park_is_refused_not_served() {
    let s = start();
    let mut c = served_then_parked(&s);
    let records = c.seal(GET);
    let half = records.len() / 2;
    c.sock.write_all(&records[..half]).unwrap();
    s.proxy.wait_for("parked with half a record", |st| {
        st.park_entered == 2 && st.sessions_parked == 1
    });
    let garbage: Vec<u8> = records[half..].iter().map(|b| b ^ 0x5a).collect();
    c.sock.write_all(&garbage).unwrap();
    // rustls answers a bad_record_mac alert and the connection ends; no response.
    let mut raw = Vec::new();
    let _ = c.sock.read_to_end(&mut raw);
    assert!(!String::from_utf8_lossy(&raw).contains("HTTP/1.1"), "{raw:?}");
    s.proxy
        .wait_for("closed", |st| st.sessions_active == 0 && st.sessions_parked == 0);
    assert_eq!(s.proxy.running().stats().http_requests, 1);
}

#[test]
fn a_soft_stop_hands_a_parked_tls_connection_back() {
    let s = start();
    let mut c = served_then_parked(&s);
    s.proxy.running().soft_stop();
    s.proxy.wait_for("handed back", |st| st.sessions_parked == 0);
    assert_eq!(s.proxy.running().stats().sessions_active, 1);
    // Its TLS state came back with it: the next request is served, then it closes.
    c.send(GET);
    let (text, end) = c.read_responses(1);
    assert!(text.starts_with("HTTP/1.1 200"), "{text:?} {end:?}");
    assert!(text.to_ascii_lowercase().contains("connection: close"), "{text:?}");
    s.proxy.wait_for("closed", |st| st.sessions_active == 0);
}

#[test]
fn openssl_s_client_is_served_across_parks() {
    let s = start();
    let ca_path = s.ca.write(&s.dir, "ca.pem");
    let mut child = Command::new("openssl")
        .args([
            "s_client",
            "-quiet",
            "-no_ign_eof",
            "-servername",
            "park.test",
            "-CAfile",
        ])
        .arg(path_str(&ca_path))
        .args(["-verify_return_error", "-connect"])
        .arg(s.proxy.addr.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client");
    let mut stdin = child.stdin.take().unwrap();
    s.proxy.wait_for("parked before its first request", |st| {
        st.tls_handshakes_full == 1 && st.sessions_parked == 1
    });
    for n in 1..=2u64 {
        stdin.write_all(GET).unwrap();
        stdin.flush().unwrap();
        s.proxy.wait_for("answered and parked", |st| {
            st.http_requests == n && st.park_entered == n + 1 && st.sessions_parked == 1
        });
    }
    // Closing stdin makes s_client end the connection.
    drop(stdin);
    let out = common::tls::wait_bounded(child, Duration::from_secs(10));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.matches("HTTP/1.1 200").count(),
        2,
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s.proxy.wait_for("closed", |st| st.sessions_active == 0);
    assert_eq!(s.proxy.running().stats().tls_handshakes_full, 1);
}

#[test]
fn curl_reuses_its_tls_connection_across_a_park() {
    let s = start();
    let ca_path = s.ca.write(&s.dir, "ca.pem");
    let port = s.proxy.addr.port();
    let url = format!("https://park.test:{port}/");
    // `--rate 4/s`: a quarter second between the two requests, long enough to park
    // (20 ms), short of the keep-alive deadline (400 ms).
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--rate", "4/s", "--cacert"])
        .arg(path_str(&ca_path))
        .arg("--resolve")
        .arg(format!("park.test:{port}:127.0.0.1"))
        .args([&url, &url])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout, "okok", "{}", String::from_utf8_lossy(&out.stderr));
    let st = s.proxy.running().stats();
    assert_eq!(st.tls_handshakes_full, 1, "curl reused its TLS connection: {st:?}");
    assert!(st.park_resumed >= 1, "the connection went through the park: {st:?}");
    assert_eq!(st.http_requests, 2);
}
