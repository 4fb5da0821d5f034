//! ACME against a real CA: the distribution's Pebble on loopback ports, its DNS answered by
//! `pebble-challtestsrv` (every name is 127.0.0.1), tollgate in master mode answering the
//! challenges on its own listeners. Pebble validates on the ports its config names, so
//! tollgate starts first (port 0) and Pebble is configured with the ports tollgate got;
//! tollgate's first attempt meets no CA and is retried. Pebble's HTTPS listener gets a
//! certificate made here, whose CA tollgate trusts through `directory_ca`; clients trust
//! Pebble's own root, fetched from its management API.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::ReservedPort;
use common::tls::{Ca, s_client};
use master_support::{Master, TempDir, global, logged_addr};

const PEBBLE: &str = "/usr/bin/pebble";
const CHALLTESTSRV: &str = "/usr/bin/pebble-challtestsrv";

/// Whether Pebble is installed; without it the test is skipped, except in CI.
fn pebble_installed() -> bool {
    if Path::new(PEBBLE).exists() && Path::new(CHALLTESTSRV).exists() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "pebble not installed (.ci/run installs it); CI may not skip this test"
    );
    println!("skipped: pebble not installed");
    false
}

/// Pebble and its DNS, killed (by their handles) on drop. Every port they are told to listen
/// on stays reserved (`ReservedPort`) while this lives, also while the CA is down between
/// `stop_ca` and `start_ca`: a port freed before they bind could be taken by another test's
/// listener, which tollgate's ACME client would then reach instead of the CA.
struct Pebble {
    dir: PathBuf,
    config: PathBuf,
    dns_port: ReservedPort,
    /// challtestsrv's management API (`/set-txt`, `/clear-txt`).
    pub dns_management: SocketAddr,
    _dns_management: ReservedPort,
    tls: PebbleTls,
    pebble: Option<Child>,
    challtestsrv: Child,
}

/// The HTTPS identity of Pebble's listeners and their ports (made before tollgate starts:
/// tollgate's config names the CA and the directory's address).
struct PebbleTls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    listen: ReservedPort,
    management: ReservedPort,
}

impl PebbleTls {
    fn new(dir: &Path) -> PebbleTls {
        let ca = Ca::new("pebble-https-test-ca");
        let leaf = ca.leaf(&["127.0.0.1", "localhost"], "pebble", false);
        let paths = (
            dir.join("pebble-ca.pem"),
            dir.join("pebble.crt"),
            dir.join("pebble.key"),
        );
        std::fs::write(&paths.0, &ca.pem).unwrap();
        std::fs::write(&paths.1, &leaf.cert_pem).unwrap();
        std::fs::write(&paths.2, &leaf.key_pem).unwrap();
        PebbleTls {
            ca: paths.0,
            cert: paths.1,
            key: paths.2,
            listen: ReservedPort::new(),
            management: ReservedPort::new(),
        }
    }

    fn directory(&self) -> String {
        format!("https://{}/dir", self.listen.addr)
    }
}

impl Pebble {
    /// Starts challtestsrv and Pebble validating http-01 on `http_port` and tls-alpn-01 on
    /// `tls_port`; `validity` the certificates' lifetime (Pebble's default otherwise).
    fn start(dir: &Path, tls: PebbleTls, http_port: u16, tls_port: u16, validity: Option<u64>) -> Pebble {
        // The DNS port is reserved for TCP only: challtestsrv's UDP socket on it cannot
        // share a reservation (Go sets no SO_REUSEADDR there); if another socket holds that
        // UDP port, challtestsrv exits and `wait_listening` says so.
        let dns_port = ReservedPort::new();
        let dns_management = ReservedPort::new();
        let challtestsrv = Command::new(CHALLTESTSRV)
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .args(["-dns01", &dns_port.addr.to_string()])
            .args(["-management", &dns_management.addr.to_string()])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pebble-challtestsrv");
        let validity = validity.map_or(String::new(), |v| format!(",\"certificateValidityPeriod\":{v}"));
        let config = dir.join("pebble.json");
        std::fs::write(
            &config,
            format!(
                "{{\"pebble\":{{\"listenAddress\":\"{}\",\"managementListenAddress\":\"{}\",\"certificate\":\"{}\",\"privateKey\":\"{}\",\"httpPort\":{http_port},\"tlsPort\":{tls_port},\"ocspResponderURL\":\"\",\"externalAccountBindingRequired\":false{validity}}}}}",
                tls.listen.addr,
                tls.management.addr,
                tls.cert.display(),
                tls.key.display()
            ),
        )
        .unwrap();
        let mut p = Pebble {
            dir: dir.to_path_buf(),
            config,
            dns_port,
            dns_management: dns_management.addr,
            _dns_management: dns_management,
            tls,
            pebble: None,
            challtestsrv,
        };
        // The reservation refuses connections, so whatever answers is challtestsrv.
        wait_listening(p.dns_management, &mut p.challtestsrv, "pebble-challtestsrv");
        p.start_ca();
        p
    }

    /// (Re)starts the CA itself (a new root each time, and no memory of accounts), and waits
    /// until both its listeners answer over TLS with the certificate made for it. Its log
    /// line "ACME directory available" is no signal: Pebble writes it before it binds, and
    /// exits when the bind fails.
    fn start_ca(&mut self) {
        let mut child = Command::new(PEBBLE)
            .arg("-config")
            .arg(&self.config)
            .args(["-dnsserver", &self.dns_port.addr.to_string()])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start pebble");
        let (stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        // Held here at once: killed on drop if it never answers.
        let child = self.pebble.insert(child);
        let lines = Arc::new(Mutex::new(Vec::new()));
        for output in [Box::new(stdout) as Box<dyn std::io::Read + Send>, Box::new(stderr)] {
            let sink = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(output).lines() {
                    let Ok(line) = line else { break };
                    eprintln!("[pebble] {line}");
                    sink.lock().unwrap().push(line);
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        let urls = [
            self.tls.directory(),
            format!("https://{}/roots/0", self.tls.management.addr),
        ];
        for url in urls {
            while !answers_https(&url, &self.tls.ca) {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("pebble exited ({status}): {:?}", lines.lock().unwrap());
                }
                assert!(
                    Instant::now() < deadline,
                    "pebble did not answer on {url}: {:?}",
                    lines.lock().unwrap()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    fn stop_ca(&mut self) {
        if let Some(mut c) = self.pebble.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Pebble's issuing root (PEM), written to a file.
    fn root(&self) -> PathBuf {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", "--cacert"])
            .arg(&self.tls.ca)
            .arg(format!("https://{}/roots/0", self.tls.management.addr))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let path = self.dir.join("pebble-root.pem");
        std::fs::write(&path, &out.stdout).unwrap();
        path
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        self.stop_ca();
        let _ = self.challtestsrv.kill();
        let _ = self.challtestsrv.wait();
    }
}

/// Whether `url` answers over TLS, its certificate verified against `ca` (any HTTP status).
fn answers_https(url: &str, ca: &Path) -> bool {
    Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "2", "--cacert"])
        .arg(ca)
        .arg(url)
        .stdin(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// Waits (bounded) until `child` listens on `addr` (challtestsrv logs nothing to wait on);
/// fails at once if it exited.
fn wait_listening(addr: SocketAddr, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{what} exited ({status}) before listening on {addr}");
        }
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The address frontend `name` listens on, from the master's log.
fn frontend_addr(master: &Master, name: &str) -> SocketAddr {
    let pattern = format!("frontend={name} ");
    let line = master
        .wait_log(
            |l| l.contains("listening") && l.contains(&pattern),
            Duration::from_secs(10),
        )
        .unwrap_or_else(|| panic!("no listening line for {name}"));
    logged_addr(&line)
}

/// The first PEM certificate of an s_client transcript (the server's leaf).
fn leaf_pem(transcript: &str) -> String {
    let start = transcript
        .find("-----BEGIN CERTIFICATE-----")
        .unwrap_or_else(|| panic!("no certificate in:\n{transcript}"));
    let end = transcript[start..].find("-----END CERTIFICATE-----").unwrap() + start;
    transcript[start..end].to_string()
}

/// An s_client handshake for `name` verified against `root`: its transcript, which must
/// say the chain verified.
fn verified_handshake(addr: SocketAddr, name: &str, root: &Path) -> String {
    let root = root.display().to_string();
    let out = s_client(
        addr,
        &[
            "-servername",
            name,
            "-CAfile",
            &root,
            "-verify_return_error",
            "-verify_hostname",
            name,
        ],
        b"",
    );
    assert!(
        out.contains("Verify return code: 0 (ok)"),
        "{name} not verified:\n{out}"
    );
    out
}

fn wait_installed(master: &Master, from: usize, names: &str, limit: Duration) -> usize {
    let pattern = format!("names=\"{names}\"");
    master
        .wait_log_from(
            from,
            |l| l.contains("acme: certificate installed") && l.contains(&pattern),
            limit,
        )
        .unwrap_or_else(|| panic!("no certificate installed for {names}"))
        .0
}

/// `[global]` for the tests: master mode, ACME state in `dir/state`.
fn acme_global(dir: &Path) -> String {
    global(dir, &format!("state_dir = \"{}\"", dir.join("state").display()))
}

fn origin_backend(mode: &str, origin: SocketAddr) -> String {
    format!("[[backend]]\nname = \"be\"\nmode = \"{mode}\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n")
}

fn ok_origin() -> common::http::HttpOrigin {
    common::http::http_origin(|_| common::http::ok("from-origin"))
}

#[test]
fn tls_alpn_01_fallback_first_then_the_issued_certificate_kept_across_a_reload() {
    if !pebble_installed() {
        return;
    }
    let origin = ok_origin();
    let dir = TempDir::new("acme-alpn");
    let base = dir.0.clone();
    let tls = PebbleTls::new(&base);
    let config = format!(
        "{}\n[[frontend]]\nname = \"web\"\nmode = \"http\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
         [frontend.tls]\nalpn = [\"http/1.1\"]\n[[frontend.tls.acme]]\ndomains = [\"a.test\"]\ndirectory = \"{}\"\n\
         email = \"ops@a.test\"\nchallenge = \"tls-alpn-01\"\ndirectory_ca = \"{}\"\n\n{}",
        acme_global(&base),
        tls.directory(),
        tls.ca.display(),
        origin_backend("http", origin.addr)
    );
    let master = Master::start(dir, &config, &[]);
    let web = frontend_addr(&master, "web");
    assert!(
        master
            .wait_log(
                |l| l.contains("serving a self-signed certificate"),
                Duration::from_secs(10)
            )
            .is_some()
    );
    // No CA yet: the self-signed fallback serves the name.
    let before = s_client(web, &["-servername", "a.test"], b"");
    assert!(before.contains("tollgate self-signed"), "{before}");

    let pebble = Pebble::start(&base, tls, 1, web.port(), None);
    wait_installed(&master, 0, "a.test", Duration::from_secs(30));
    let root = pebble.root();
    let issued = verified_handshake(web, "a.test", &root);
    assert!(issued.contains("Pebble Intermediate"), "{issued}");
    let reply = common::tls::s_client(
        web,
        &["-servername", "a.test", "-quiet"],
        b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    );
    assert!(reply.contains("from-origin"), "{reply}");

    // The state: a private directory, private files (account, chain, key).
    let state = base.join("state");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&state), 0o700);
    let files: Vec<PathBuf> = std::fs::read_dir(&state).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 3, "{files:?}");
    for f in &files {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }

    // A reload loads the stored certificate and orders nothing.
    let from = master.log_len();
    master.reload_ok();
    master
        .wait_log_from(
            from,
            |l| l.contains("acme: stored certificate valid"),
            Duration::from_secs(20),
        )
        .expect("the new generation found the stored certificate");
    let again = verified_handshake(web, "a.test", &root);
    assert_eq!(leaf_pem(&again), leaf_pem(&issued));
    assert_eq!(
        master.log_count(|l| l.contains("acme: certificate installed")),
        1,
        "ordered again after the reload"
    );
}

#[test]
fn http_01_answered_on_the_plain_frontend_and_the_certificate_seen_by_curl() {
    if !pebble_installed() {
        return;
    }
    let origin = ok_origin();
    let dir = TempDir::new("acme-http");
    let base = dir.0.clone();
    let tls = PebbleTls::new(&base);
    let config = format!(
        "{}\n[[frontend]]\nname = \"plain\"\nmode = \"http\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\n\
         [[frontend]]\nname = \"secure\"\nmode = \"http\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
         [frontend.tls]\n[[frontend.tls.acme]]\ndomains = [\"b.test\", \"www.b.test\"]\ndirectory = \"{}\"\n\
         challenge = \"http-01\"\ndirectory_ca = \"{}\"\n\n{}",
        acme_global(&base),
        tls.directory(),
        tls.ca.display(),
        origin_backend("http", origin.addr)
    );
    let master = Master::start(dir, &config, &[]);
    let plain = frontend_addr(&master, "plain");
    let secure = frontend_addr(&master, "secure");
    let pebble = Pebble::start(&base, tls, plain.port(), 1, None);
    wait_installed(&master, 0, "b.test,www.b.test", Duration::from_secs(30));
    let root = pebble.root();
    for name in ["b.test", "www.b.test"] {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", "--cacert"])
            .arg(&root)
            .arg("--resolve")
            .arg(format!("{name}:{}:127.0.0.1", secure.port()))
            .arg(format!("https://{name}:{}/", secure.port()))
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "from-origin");
    }
    // The answers were withdrawn: a challenge path now goes to the routes like any other.
    let reply = common::http::raw_exchange(
        plain,
        b"GET /.well-known/acme-challenge/x HTTP/1.1\r\nHost: b.test\r\nConnection: close\r\n\r\n",
    );
    assert!(reply.contains("from-origin"), "{reply}");
}

#[test]
fn short_lived_certificate_renewed_and_kept_serving_while_the_ca_is_down() {
    if !pebble_installed() {
        return;
    }
    let origin = ok_origin();
    let dir = TempDir::new("acme-renew");
    let base = dir.0.clone();
    let tls = PebbleTls::new(&base);
    let config = format!(
        "{}\n[admin]\nbind = \"127.0.0.1:0\"\n\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
         [frontend.tls]\n[[frontend.tls.acme]]\ndomains = [\"r.test\"]\ndirectory = \"{}\"\n\
         directory_ca = \"{}\"\n\n{}",
        acme_global(&base),
        tls.directory(),
        tls.ca.display(),
        origin_backend("tcp", origin.addr)
    );
    let master = Master::start(dir, &config, &[]);
    let web = frontend_addr(&master, "web");
    // Certificates for 15 s: renewed at two thirds, about 10 s after issuance.
    let mut pebble = Pebble::start(&base, tls, 1, web.port(), Some(15));
    let first = wait_installed(&master, 0, "r.test", Duration::from_secs(30));
    let root = pebble.root();
    let issued = leaf_pem(&verified_handshake(web, "r.test", &root));
    let renewed_at = master
        .wait_log_from(
            first + 1,
            |l| l.contains("acme: certificate installed") && l.contains("renewal=true"),
            Duration::from_secs(25),
        )
        .expect("renewed")
        .0;
    let renewed = leaf_pem(&verified_handshake(web, "r.test", &root));
    assert_ne!(renewed, issued, "the renewal did not swap the certificate");

    // The CA goes away before the next renewal: attempts fail, the certificate stays.
    pebble.stop_ca();
    let failed = master
        .wait_log_from(
            renewed_at + 1,
            |l| l.contains("acme:") && l.contains("failed") && l.contains("retry in"),
            Duration::from_secs(25),
        )
        .expect("a failed renewal")
        .0;
    let during = s_client(web, &["-servername", "r.test"], b"");
    assert_eq!(leaf_pem(&during), renewed, "the old certificate must keep serving");

    // Back (a new CA: it knows no account, so one is created), and a retry succeeds.
    pebble.start_ca();
    wait_installed(&master, failed + 1, "r.test", Duration::from_secs(30));
    let root = pebble.root();
    let after = leaf_pem(&verified_handshake(web, "r.test", &root));
    assert_ne!(after, renewed);

    // `show certs` names the source; the counters saw the orders, the renewals, the failures.
    let json: serde_json::Value = serde_json::from_str(&master.ctl_ok(&["--json", "show", "certs"])).unwrap();
    let certs = json["answer"]["generations"][0]["certs"].as_array().unwrap().clone();
    assert_eq!(certs.len(), 1, "{json}");
    assert_eq!(certs[0]["source"], "acme");
    assert_eq!(certs[0]["names"], serde_json::json!(["r.test"]));
    let admin = logged_addr(
        &master
            .wait_log(|l| l.contains("admin endpoint ready"), Duration::from_secs(5))
            .unwrap(),
    );
    let metrics = common::http::raw_exchange(admin, b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let value = |family: &str| -> u64 {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(family))
            .unwrap_or_else(|| panic!("no {family} in\n{metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(value("tollgate_acme_orders_ok_total") >= 3);
    assert!(value("tollgate_acme_renewals_total") >= 2);
    assert!(value("tollgate_acme_orders_failed_total") >= 2);
}

#[test]
fn wildcard_through_dns_01_and_the_hook() {
    if !pebble_installed() {
        return;
    }
    let origin = ok_origin();
    let dir = TempDir::new("acme-dns");
    let base = dir.0.clone();
    let tls = PebbleTls::new(&base);
    // challtestsrv's port is known only once it runs, and the hook reads it from a file.
    let port_file = base.join("dns-management");
    let hook = base.join("dns-hook.sh");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\n# dns_hook: ACTION NAME VALUE\nset -e\nm=$(cat {})\n\
             case \"$1\" in\n\
             set) curl -sSf --max-time 5 -d \"{{\\\"host\\\":\\\"$2.\\\",\\\"value\\\":\\\"$3\\\"}}\" \"http://$m/set-txt\" ;;\n\
             clear) curl -sSf --max-time 5 -d \"{{\\\"host\\\":\\\"$2.\\\"}}\" \"http://$m/clear-txt\" ;;\n\
             esac\necho \"$1 $2\" >> {}\n",
            port_file.display(),
            base.join("hook.log").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = format!(
        "{}\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
         [frontend.tls]\n[[frontend.tls.acme]]\ndomains = [\"c.test\", \"*.c.test\"]\ndirectory = \"{}\"\n\
         challenge = \"dns-01\"\ndns_hook = [\"{}\"]\ndirectory_ca = \"{}\"\n\n{}",
        acme_global(&base),
        tls.directory(),
        hook.display(),
        tls.ca.display(),
        origin_backend("tcp", origin.addr)
    );
    let master = Master::start(dir, &config, &[]);
    let web = frontend_addr(&master, "web");
    let pebble = Pebble::start(&base, tls, 1, 1, None);
    std::fs::write(&port_file, pebble.dns_management.to_string()).unwrap();
    wait_installed(&master, 0, "c.test,*.c.test", Duration::from_secs(40));
    let root = pebble.root();
    for name in ["c.test", "x.c.test"] {
        let out = verified_handshake(web, name, &root);
        assert!(out.contains("Pebble Intermediate"), "{out}");
    }
    // Every record set was cleared again.
    let log = std::fs::read_to_string(base.join("hook.log")).unwrap();
    let set = log
        .lines()
        .filter(|l| l.starts_with("set _acme-challenge.c.test"))
        .count();
    let cleared = log
        .lines()
        .filter(|l| l.starts_with("clear _acme-challenge.c.test"))
        .count();
    assert!(set >= 1 && set == cleared, "{log}");
}
