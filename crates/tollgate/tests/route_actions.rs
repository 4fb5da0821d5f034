//! What a matched route does, over real sockets, for HTTP/1.1 clients (raw bytes) and HTTP/2
//! clients (curl with prior knowledge, h2c), against HTTP/1.1 and HTTP/2 origins started
//! here that record what they receive: redirects (path and query byte for byte), `return`
//! with headers and a body file, `deny`, and on the way to a server header edits both ways
//! (a header the client sent twice, a header the server sent twice), `rewrite_path` (prefix
//! and regex) and `set_host`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Proxy;
use common::http::{Reply, Req, http_origin, read_response};
use common::tls::TempDir;

/// What the HTTP/1.1 origin answers: fields the response rules act on, one of them twice.
const H1_REPLY: &[u8] = b"HTTP/1.1 200 OK\r\nServer: origin\r\nX-Resp: a\r\nX-Resp: b\r\nX-Twice: 1\r\n\
X-Twice: 2\r\nContent-Length: 2\r\n\r\nok";

const ROUTES: &str = r#"
[[frontend.route]]
path_prefix = "/old"
redirect = { scheme = "https", port = 8443, status = 301 }

[[frontend.route]]
path_prefix = "/tmpl"
redirect = { to = "https://{host}/new{path_and_query}", status = 308 }

[[frontend.route]]
path_prefix = "/maint"
return = { status = 503, body_file = "BODY_FILE", content_type = "text/html", headers = { "Retry-After" = "120", "Cache-Control" = "no-store" } }

[[frontend.route]]
path_prefix = "/legal"
deny = 451

[[frontend.route]]
path_prefix = "/private"
deny = {}

[[frontend.route]]
path_prefix = "/api"
backend = "be"
rewrite_path = { prefix = "/api", to = "/" }
set_host = "internal.example"
request_headers = { set = { "X-Set" = "one" }, add = { "X-Seen" = "{scheme}://{host}{path_and_query}" }, remove = ["X-Dup"] }
response_headers = { set = { "Strict-Transport-Security" = "max-age=63072000", "X-Twice" = "only" }, add = { "X-Resp" = "c" }, remove = ["Server"] }

[[frontend.route]]
path_prefix = "/re"
backend = "be"
rewrite_path = { regex = "^/re/(?P<id>[0-9]+)/(.*)$", replace = "/items/${id}/$2" }
"#;

const MAINTENANCE: &[u8] = b"<h1>Back soon</h1>\n";

/// A frontend (h2c: HTTP/1.1 and prior-knowledge HTTP/2 on one port) with `ROUTES` in front
/// of one server speaking `proto`.
fn start(dir: &TempDir, origin: SocketAddr, proto: &str) -> Proxy {
    let body = dir.path("maintenance.html");
    std::fs::write(&body, MAINTENANCE).unwrap();
    let routes = ROUTES.replace("BODY_FILE", &body.display().to_string());
    Proxy::start(&format!(
        "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\nh2c = true\n\
         default_backend = \"be\"\n{routes}\n[[backend]]\nname = \"be\"\nmode = \"http\"\nproto = \"{proto}\"\n\
         [[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n"
    ))
}

/// A response as a client saw it: status, fields in order (names lowercase), body.
#[derive(Debug)]
struct Seen {
    status: u16,
    fields: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn all(&self, name: &str) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
    fn one(&self, name: &str) -> Option<&str> {
        let all = self.all(name);
        assert!(all.len() <= 1, "{name} more than once: {self:?}");
        all.first().copied()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Client {
    H1,
    H2,
}

/// GET `target` with `fields` (`Name: value`), one request on its own connection.
fn get(client: Client, addr: SocketAddr, target: &str, fields: &[&str]) -> Seen {
    match client {
        Client::H1 => {
            let mut c = TcpStream::connect(addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut req = format!("GET {target} HTTP/1.1\r\n");
            for f in fields {
                req.push_str(f);
                req.push_str("\r\n");
            }
            req.push_str("Connection: close\r\n\r\n");
            c.write_all(req.as_bytes()).unwrap();
            let (status, fields, body) = read_response(&mut BufReader::new(c)).expect("a response");
            let fields = fields.into_iter().map(|(n, v)| (n.to_ascii_lowercase(), v)).collect();
            Seen { status, fields, body }
        }
        Client::H2 => {
            let mut cmd = Command::new("curl");
            cmd.args([
                "-sS",
                "-i",
                "--max-time",
                "20",
                "--http2-prior-knowledge",
                "--path-as-is",
            ]);
            for f in fields {
                cmd.args(["-H", f]);
            }
            let out = cmd.arg(format!("http://{addr}{target}")).output().expect("curl");
            assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
            let text = out.stdout;
            let split = text.windows(4).position(|w| w == b"\r\n\r\n").expect("a head");
            let head = String::from_utf8_lossy(&text[..split]).into_owned();
            let mut lines = head.lines();
            let status_line = lines.next().unwrap();
            assert!(status_line.starts_with("HTTP/2 "), "{status_line}");
            let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
            let fields = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_string()))
                .collect();
            Seen {
                status,
                fields,
                body: text[split + 4..].to_vec(),
            }
        }
    }
}

fn have_curl() -> bool {
    if Command::new("curl").arg("--version").output().is_err() {
        println!("skipped: curl is not installed");
        return false;
    }
    true
}

fn clients() -> Vec<Client> {
    if have_curl() {
        vec![Client::H1, Client::H2]
    } else {
        vec![Client::H1]
    }
}

fn h1_origin() -> common::http::HttpOrigin {
    http_origin(|_: &Req| Reply::Bytes(H1_REPLY.to_vec()))
}

#[test]
fn redirects_keep_path_and_query_byte_for_byte() {
    let dir = TempDir::new();
    let origin = h1_origin();
    let proxy = start(&dir, origin.addr, "h1");
    for client in clients() {
        let r = get(client, proxy.addr, "/old/a%2Fb?x=%20&y", &["Host: Example.com:8080"]);
        assert_eq!(r.status, 301, "{client:?}: {r:?}");
        assert_eq!(
            r.one("location"),
            Some("https://Example.com:8443/old/a%2Fb?x=%20&y"),
            "{client:?}: the scheme switch keeps host, path and query exactly"
        );
        assert!(r.body.is_empty(), "{client:?}");
        let r = get(client, proxy.addr, "/tmpl/%7Euser/?q=a%26b&&", &["Host: example.com"]);
        assert_eq!(r.status, 308, "{client:?}: {r:?}");
        assert_eq!(
            r.one("location"),
            Some("https://example.com/new/tmpl/%7Euser/?q=a%26b&&"),
            "{client:?}"
        );
    }
    assert!(origin.requests().is_empty(), "a redirect never reaches a server");
}

#[test]
fn return_and_deny_are_answered_by_the_proxy() {
    let dir = TempDir::new();
    let origin = h1_origin();
    let proxy = start(&dir, origin.addr, "h1");
    for client in clients() {
        let r = get(client, proxy.addr, "/maint", &["Host: t"]);
        assert_eq!(r.status, 503, "{client:?}: {r:?}");
        assert_eq!(r.body, MAINTENANCE, "{client:?}: the body file, read at load");
        assert_eq!(r.one("content-type"), Some("text/html"), "{client:?}");
        assert_eq!(r.one("retry-after"), Some("120"), "{client:?}");
        assert_eq!(r.one("cache-control"), Some("no-store"), "{client:?}");
        let r = get(client, proxy.addr, "/legal/x", &["Host: t"]);
        assert_eq!(
            (r.status, r.body.as_slice()),
            (451, &b"Unavailable For Legal Reasons\n"[..]),
            "{client:?}"
        );
        let r = get(client, proxy.addr, "/private", &["Host: t"]);
        assert_eq!((r.status, r.body.as_slice()), (403, &b"Forbidden\n"[..]), "{client:?}");
        assert_eq!(r.one("content-type"), Some("text/plain"), "{client:?}");
    }
    // A HEAD request gets the head only, with the length the body would have.
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"HEAD /maint HTTP/1.1\r\nHost: t\r\n\r\nGET /private HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut r = BufReader::new(c);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut r, &mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 503"), "{line}");
    let mut head = String::new();
    while line != "\r\n" {
        line.clear();
        std::io::BufRead::read_line(&mut r, &mut line).unwrap();
        head.push_str(&line);
    }
    assert!(
        head.contains(&format!("Content-Length: {}\r\n", MAINTENANCE.len())),
        "{head}"
    );
    assert_eq!(
        read_response(&mut r).unwrap().0,
        403,
        "the next response follows the head at once"
    );
    if have_curl() {
        let out = Command::new("curl")
            .args(["-sS", "-I", "--max-time", "20", "--http2-prior-knowledge"])
            .arg(format!("http://{}/maint", proxy.addr))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(text.starts_with("HTTP/2 503"), "{text}");
        assert!(
            text.contains(&format!("content-length: {}", MAINTENANCE.len())),
            "{text}"
        );
    }
    // A body sent with a denied request is read and dropped: the connection goes on.
    let mut c = TcpStream::connect(proxy.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"POST /private HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
        .unwrap();
    c.write_all(b"GET /legal HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut r = BufReader::new(c);
    assert_eq!(read_response(&mut r).unwrap().0, 403);
    assert_eq!(read_response(&mut r).unwrap().0, 451);
    assert!(origin.requests().is_empty(), "answered without a server");
}

/// What a server received, whichever protocol it speaks.
#[derive(Debug, Clone)]
struct Received {
    target: String,
    host: String,
    fields: Vec<(String, String)>,
}

impl Received {
    fn all(&self, name: &str) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// The client's request to `/api`: a header sent twice that the route removes, one sent
/// twice that it replaces, one it leaves alone.
const CLIENT_FIELDS: &[&str] = &[
    "Host: public.example",
    "X-Dup: a",
    "X-Dup: b",
    "X-Set: old1",
    "X-Set: old2",
    "X-Keep: k",
];

fn check_edits(client: Client, seen: &Seen, got: &Received, proto: &str) {
    let what = format!("{client:?} client, {proto} server");
    assert_eq!(seen.status, 200, "{what}: {seen:?}");
    assert_eq!(seen.body, b"ok", "{what}");
    // Request: path rewritten, query kept byte for byte, Host set, fields edited.
    assert_eq!(got.target, "/users/a%2Fb?q=%20&r", "{what}: {got:?}");
    assert_eq!(got.host, "internal.example", "{what}: {got:?}");
    assert!(got.all("x-dup").is_empty(), "{what}: every X-Dup removed: {got:?}");
    assert_eq!(got.all("x-set"), ["one"], "{what}: set replaces both with one: {got:?}");
    assert_eq!(got.all("x-keep"), ["k"], "{what}: {got:?}");
    assert_eq!(
        got.all("x-seen"),
        ["http://public.example/api/users/a%2Fb?q=%20&r"],
        "{what}: a template renders the request as the client sent it: {got:?}"
    );
    // Response: Server removed, the server's two X-Twice replaced by one, X-Resp added to.
    assert!(seen.all("server").is_empty(), "{what}: {seen:?}");
    assert_eq!(seen.all("x-twice"), ["only"], "{what}: {seen:?}");
    assert_eq!(seen.all("x-resp"), ["a", "b", "c"], "{what}: {seen:?}");
    assert_eq!(
        seen.one("strict-transport-security"),
        Some("max-age=63072000"),
        "{what}"
    );
}

#[test]
fn header_edits_path_and_host_reach_an_http1_server() {
    let dir = TempDir::new();
    let origin = h1_origin();
    let proxy = start(&dir, origin.addr, "h1");
    for client in clients() {
        let before = origin.requests().len();
        let seen = get(client, proxy.addr, "/api/users/a%2Fb?q=%20&r", CLIENT_FIELDS);
        let reqs = origin.requests();
        assert_eq!(reqs.len(), before + 1, "{client:?}");
        let r = &reqs[before];
        let got = Received {
            target: r.target.clone(),
            host: r.header("host").unwrap_or_default().to_string(),
            fields: r.headers.clone(),
        };
        assert_eq!(got.all("host").len(), 1, "{got:?}");
        check_edits(client, &seen, &got, "h1");
        // A regex rewrite with named and numbered groups; the query follows unchanged.
        let seen = get(client, proxy.addr, "/re/42/x%2Fy?z=%41", &["Host: t"]);
        assert_eq!(seen.status, 200, "{client:?}");
        let reqs = origin.requests();
        assert_eq!(reqs.last().unwrap().target, "/items/42/x%2Fy?z=%41", "{client:?}");
        // A request no rewrite route matched goes as it came.
        get(client, proxy.addr, "/plain?x=%20", &["Host: t", "X-Dup: a", "X-Dup: b"]);
        let last = origin.requests().last().cloned().unwrap();
        assert_eq!(last.target, "/plain?x=%20");
        assert_eq!(
            last.headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("x-dup"))
                .count(),
            2,
            "{client:?}: {last:?}"
        );
    }
}

/// An HTTP/2 origin (h2c, prior knowledge) that records each request and answers `ok` with
/// the same fields as `H1_REPLY`.
fn h2_origin() -> (SocketAddr, Arc<Mutex<Vec<Received>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&log);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((sock, _)) = listener.accept().await {
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(sock).await else {
                        return;
                    };
                    while let Some(Ok((req, respond))) = conn.accept().await {
                        tokio::spawn(answer(req, respond, Arc::clone(&seen)));
                    }
                });
            }
        });
    });
    (addr, log)
}

async fn answer(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<bytes::Bytes>,
    seen: Arc<Mutex<Vec<Received>>>,
) {
    let (parts, mut body) = req.into_parts();
    seen.lock().unwrap().push(Received {
        target: parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
        host: parts.uri.authority().map_or("", |a| a.as_str()).to_string(),
        fields: parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or("?").to_string()))
            .collect(),
    });
    while let Some(Ok(d)) = body.data().await {
        let _ = body.flow_control().release_capacity(d.len());
    }
    let head = http::Response::builder()
        .status(200)
        .header("server", "origin")
        .header("x-resp", "a")
        .header("x-resp", "b")
        .header("x-twice", "1")
        .header("x-twice", "2")
        .header("content-length", "2")
        .body(())
        .unwrap();
    if let Ok(mut send) = respond.send_response(head, false) {
        let _ = send.send_data(bytes::Bytes::from_static(b"ok"), true);
    }
}

#[test]
fn header_edits_path_and_host_reach_an_http2_server() {
    let dir = TempDir::new();
    let (addr, log) = h2_origin();
    let proxy = start(&dir, addr, "h2");
    for client in clients() {
        let before = log.lock().unwrap().len();
        let seen = get(client, proxy.addr, "/api/users/a%2Fb?q=%20&r", CLIENT_FIELDS);
        let got = log
            .lock()
            .unwrap()
            .get(before)
            .cloned()
            .expect("the server got the request");
        assert!(got.all("host").is_empty(), "HTTP/2: the host is :authority: {got:?}");
        check_edits(client, &seen, &got, "h2");
        let seen = get(client, proxy.addr, "/re/7/a?b", &["Host: t"]);
        assert_eq!(seen.status, 200, "{client:?}");
        assert_eq!(log.lock().unwrap().last().unwrap().target, "/items/7/a?b", "{client:?}");
    }
}
