//! Certificates swapped without a reload, in master mode with two worker threads: `ctl set
//! cert` under a bounded handshake load (no handshake fails, every handshake started after
//! the command sees the new certificate, an open connection keeps working on the old one),
//! bad files refused while the old certificate keeps serving, a reload reading the files
//! again, the opt-in file watch picking up a rewritten pair (and refusing a bad one), and
//! `show certs` / the metrics listing names, expiry and source.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::tls::{Ca, Leaf, client_config};
use common::{echo, origin};
use master_support::{Master, TempDir, global};
use rustls::pki_types::ServerName;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn fingerprint(der: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(der).into()
}

/// A TCP-mode TLS frontend `fe` relaying to `origin`, with `[frontend.tls]` lines `tls`
/// and one certificate.
fn config(dir: &Path, origin: SocketAddr, tls: &str, cert: &Path, key: &Path) -> String {
    format!(
        "{}[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"tcp\"\ndefault_backend = \"be\"\n\
         [frontend.tls]\n{tls}\n[[frontend.tls.cert]]\ncert = \"{}\"\nkey = \"{}\"\n\
         [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n",
        global(dir, ""),
        cert.display(),
        key.display()
    )
}

/// Writes `leaf` over `cert` and `key` (write, then rename over: what deploy tools do).
fn write_pair(leaf: &Leaf, cert: &Path, key: &Path) {
    for (path, text) in [(key, &leaf.key_pem), (cert, &leaf.cert_pem)] {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
}

/// One handshake with SNI `a.example`, a round trip through the echo origin; the leaf's
/// fingerprint.
async fn handshake(addr: SocketAddr, tls: &tokio_rustls::TlsConnector) -> std::io::Result<[u8; 32]> {
    let s = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("a.example").unwrap();
    let mut c = tokio::time::timeout(Duration::from_secs(10), tls.connect(name, s))
        .await
        .map_err(|_| std::io::Error::other("handshake timed out"))??;
    let leaf = fingerprint(&c.get_ref().1.peer_certificates().unwrap()[0]);
    c.write_all(b"ping").await?;
    c.shutdown().await?;
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut reply))
        .await
        .map_err(|_| std::io::Error::other("reply timed out"))??;
    if reply != b"ping" {
        return Err(std::io::Error::other(format!("reply {reply:?}")));
    }
    Ok(leaf)
}

/// A client trusting `ca` that never resumes: a resumed session is served no certificate
/// (rustls then reports the one the session began with), and each handshake here must be a
/// full one to see what is served now.
fn connector(ca: &Ca) -> tokio_rustls::TlsConnector {
    let mut config = (*client_config(ca)).clone();
    config.resumption = rustls::client::Resumption::disabled();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// The leaf a fresh connection is served.
fn served(addr: SocketAddr, ca: &Ca) -> [u8; 32] {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tls = connector(ca);
    rt.block_on(handshake(addr, &tls)).unwrap()
}

/// A leaf for `a.example` that expired years ago.
fn expired_leaf(ca: &Ca) -> Leaf {
    let mut params = rcgen::CertificateParams::new(vec!["a.example".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca.issuer).unwrap();
    Leaf {
        der: cert.der().clone(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        key_der: key.serialize_der(),
    }
}

/// What each load client saw: (when its handshake started, leaf fingerprint or error).
type Seen = Arc<Mutex<Vec<(Instant, Result<[u8; 32], String>)>>>;

/// `clients` threads handshaking in a loop (each at most `max` times) until `stop`.
fn load(
    addr: SocketAddr,
    ca: &Ca,
    clients: usize,
    max: usize,
    stop: &Arc<AtomicBool>,
    seen: &Seen,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..clients)
        .map(|_| {
            let (stop, seen) = (Arc::clone(stop), Arc::clone(seen));
            let tls = connector(ca);
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                for _ in 0..max {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let began = Instant::now();
                    let outcome = rt.block_on(handshake(addr, &tls)).map_err(|e| e.to_string());
                    seen.lock().unwrap().push((began, outcome));
                }
            })
        })
        .collect()
}

/// Waits (bounded) until the load clients have made `n` more handshakes than `from`.
fn wait_handshakes(seen: &Seen, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.lock().unwrap().len() < n {
        assert!(
            Instant::now() < deadline,
            "the load clients made fewer than {n} handshakes"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn set_cert_swaps_under_handshake_load_without_a_failure() {
    let ca = Ca::new("swap CA");
    let origin = origin(echo);
    let dir = TempDir::new("cert-swap");
    let (cert, key) = (dir.0.join("a.crt"), dir.0.join("a.key"));
    let (old, new) = (
        ca.leaf(&["a.example"], "old", false),
        ca.leaf(&["a.example"], "new", false),
    );
    write_pair(&old, &cert, &key);
    let text = config(&dir.0, origin.addr, "", &cert, &key);
    let master = Master::start(dir, &text, &[]);
    let addr = master.addr;
    let (old_fp, new_fp) = (fingerprint(&old.der), fingerprint(&new.der));
    assert_eq!(served(addr, &ca), old_fp);

    // A connection opened before the swap, kept open across it.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tls = connector(&ca);
    let mut open = rt.block_on(async {
        let s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut c = tls
            .connect(ServerName::try_from("a.example").unwrap(), s)
            .await
            .unwrap();
        c.write_all(b"before").await.unwrap();
        let mut buf = [0u8; 6];
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"before");
        c
    });

    let stop = Arc::new(AtomicBool::new(false));
    let seen: Seen = Arc::default();
    let clients = load(addr, &ca, 6, 400, &stop, &seen);
    wait_handshakes(&seen, 60);

    // The operator's flow: the new files first, then `set cert` (the key: the configured one).
    write_pair(&new, &cert, &key);
    let out = master.ctl_ok(&["set", "cert", "fe", cert.to_str().unwrap()]);
    let swapped = Instant::now();
    assert!(out.contains("a.example") && out.contains("replaced"), "{out}");
    let before_more = seen.lock().unwrap().len();
    wait_handshakes(&seen, before_more + 60);
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }

    let seen = seen.lock().unwrap();
    let failed: Vec<&String> = seen.iter().filter_map(|(_, r)| r.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} handshakes failed: {:?}",
        failed.len(),
        seen.len(),
        &failed[..failed.len().min(5)]
    );
    let after: Vec<[u8; 32]> = seen
        .iter()
        .filter(|(began, _)| *began > swapped)
        .map(|(_, r)| *r.as_ref().unwrap())
        .collect();
    assert!(after.len() >= 60, "{}", after.len());
    assert!(
        after.iter().all(|fp| *fp == new_fp),
        "a handshake after the swap got the old certificate"
    );
    assert!(
        seen.iter().any(|(_, r)| r.as_ref().unwrap() == &old_fp),
        "the load began on the old one"
    );

    // The connection opened before still works, on the certificate it was made with.
    rt.block_on(async {
        assert_eq!(fingerprint(&open.get_ref().1.peer_certificates().unwrap()[0]), old_fp);
        open.write_all(b"after!").await.unwrap();
        let mut buf = [0u8; 6];
        open.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"after!");
    });

    // `show certs`: the runtime certificate, its names, expiry and fingerprint.
    let out = master.ctl_ok(&["show", "certs"]);
    assert!(
        out.contains("NOT AFTER") && out.contains("a.example") && out.contains("runtime"),
        "{out}"
    );
    let json: serde_json::Value = serde_json::from_str(&master.ctl_ok(&["--json", "show", "certs"])).unwrap();
    let certs = json["answer"]["generations"][0]["certs"].as_array().unwrap().clone();
    assert_eq!(certs.len(), 1, "{json}");
    let hex: Vec<String> = new_fp.iter().map(|b| format!("{b:02X}")).collect();
    assert_eq!(certs[0]["sha256"], hex.join(":"));
    assert_eq!(certs[0]["source"], "runtime");
    assert_eq!(certs[0]["names"], serde_json::json!(["a.example"]));
    let not_after = certs[0]["not_after"].as_i64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        not_after > now + 300 * 86_400,
        "rcgen's default validity runs to 4096: {not_after}"
    );
    let metrics = master.ctl_ok(&["show", "metrics"]);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("tollgate_tls_cert_expiry_seconds{")
                && l.contains("name=\"a.example\"")
                && l.contains("source=\"runtime\"")),
        "{metrics}"
    );
}

#[test]
fn bad_files_are_refused_and_a_reload_reads_the_files_again() {
    let ca = Ca::new("refuse CA");
    let origin = origin(echo);
    let dir = TempDir::new("cert-refuse");
    let (cert, key) = (dir.0.join("a.crt"), dir.0.join("a.key"));
    let good = ca.leaf(&["a.example"], "good", false);
    write_pair(&good, &cert, &key);
    let text = config(&dir.0, origin.addr, "", &cert, &key);
    let master = Master::start(dir, &text, &[]);
    let good_fp = fingerprint(&good.der);
    let other = |name: &str| master.dir.0.join(name);

    // A key that is not the certificate's, an expired certificate, not PEM at all, an
    // unknown frontend, a missing file: each refused with its reason.
    let (c1, k1) = (other("b.crt"), other("b.key"));
    let (b, mismatched) = (ca.leaf(&["a.example"], "b", false), ca.leaf(&["a.example"], "c", false));
    std::fs::write(&c1, &b.cert_pem).unwrap();
    std::fs::write(&k1, &mismatched.key_pem).unwrap();
    let expired = expired_leaf(&ca);
    let (c2, k2) = (other("old.crt"), other("old.key"));
    write_pair(&expired, &c2, &k2);
    let junk = other("junk.crt");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let cases: [(&[&str], &str); 5] = [
        (
            &["fe", c1.to_str().unwrap(), k1.to_str().unwrap()],
            "the private key does not belong to the certificate",
        ),
        (&["fe", c2.to_str().unwrap(), k2.to_str().unwrap()], "expired"),
        (&["fe", junk.to_str().unwrap(), k1.to_str().unwrap()], "no certificate"),
        (&["nope", c1.to_str().unwrap()], "no frontend `nope`"),
        (&["fe", "/nonexistent/x.crt"], "cannot read /nonexistent/x.crt"),
    ];
    for (args, reason) in cases {
        let (code, out, err) = master.ctl(&[&["set", "cert"][..], args].concat());
        assert_ne!(code, 0, "{args:?} was accepted: {out}");
        assert!(
            format!("{out}{err}").contains(reason),
            "{args:?}: expected `{reason}` in: {out} {err}"
        );
        assert_eq!(served(master.addr, &ca), good_fp, "after {args:?}");
    }

    // A good pair from other files (the key given) is added over the same names ...
    let (c3, k3) = (other("c3.crt"), other("c3.key"));
    let third = ca.leaf(&["a.example"], "third", false);
    write_pair(&third, &c3, &k3);
    master.ctl_ok(&["set", "cert", "fe", c3.to_str().unwrap(), k3.to_str().unwrap()]);
    assert_eq!(served(master.addr, &ca), fingerprint(&third.der));
    // ... a worker restarted after a crash installs it again before it serves ...
    let (_, pid, _) = master.wait_single_generation(Duration::from_secs(5));
    let from = master.log_len();
    master.signal(pid, rustix::process::Signal::KILL);
    master
        .wait_log_from(from, |l| l.contains("worker ready"), Duration::from_secs(10))
        .expect("the worker restarted");
    assert_eq!(served(master.addr, &ca), fingerprint(&third.der));
    // One PEM holding chain and key: the key defaults to the same file.
    let both = other("both.pem");
    let fourth = ca.leaf(&["a.example"], "fourth", false);
    std::fs::write(&both, format!("{}{}", fourth.cert_pem, fourth.key_pem)).unwrap();
    master.ctl_ok(&["set", "cert", "fe", both.to_str().unwrap()]);
    assert_eq!(served(master.addr, &ca), fingerprint(&fourth.der));
    master.ctl_ok(&["set", "cert", "fe", c3.to_str().unwrap(), k3.to_str().unwrap()]);
    // ... until a reload, which reads the configured files again and says so.
    let out = master.reload_ok();
    assert!(out.contains("c3.crt"), "{out}");
    assert_eq!(served(master.addr, &ca), good_fp);
    let out = master.ctl_ok(&["show", "certs"]);
    assert!(out.contains(" file ") && !out.contains("runtime"), "{out}");
}

#[test]
fn the_file_watch_swaps_a_rewritten_pair_and_refuses_a_bad_one() {
    let ca = Ca::new("watch CA");
    let origin = origin(echo);
    let dir = TempDir::new("cert-watch");
    let (cert, key) = (dir.0.join("a.crt"), dir.0.join("a.key"));
    let first = ca.leaf(&["a.example"], "first", false);
    write_pair(&first, &cert, &key);
    let text = config(&dir.0, origin.addr, "watch = true", &cert, &key);
    let master = Master::start(dir, &text, &[]);
    assert_eq!(served(master.addr, &ca), fingerprint(&first.der));

    let second = ca.leaf(&["a.example"], "second", false);
    let from = master.log_len();
    write_pair(&second, &cert, &key);
    // The worker process's watch thread says so.
    master
        .wait_log_from(
            from,
            |l| l.contains("certificate file watch") && l.contains("swapped in"),
            Duration::from_secs(10),
        )
        .expect("the watch swapped the pair in");
    assert_eq!(served(master.addr, &ca), fingerprint(&second.der));

    // A certificate without its key: refused, the previous one keeps serving.
    let third = ca.leaf(&["a.example"], "third", false);
    let from = master.log_len();
    std::fs::write(&cert, &third.cert_pem).unwrap();
    master
        .wait_log_from(
            from,
            |l| l.contains("certificate file watch") && l.contains("refused"),
            Duration::from_secs(10),
        )
        .expect("the watch refused the pair");
    assert_eq!(served(master.addr, &ca), fingerprint(&second.der));
    let out = master.ctl_ok(&["show", "certs"]);
    assert!(out.contains("a.example") && out.contains(" file "), "{out}");
    // Its key arrives: the pair is whole again and swapped in.
    let from = master.log_len();
    std::fs::write(&key, &third.key_pem).unwrap();
    master
        .wait_log_from(
            from,
            |l| l.contains("certificate file watch") && l.contains("swapped in"),
            Duration::from_secs(10),
        )
        .expect("the watch swapped the completed pair in");
    assert_eq!(served(master.addr, &ca), fingerprint(&third.der));
}

/// `tollgate ctl --socket SOCKET ARGS…` as `uid` (root: the test's own), bounded by
/// `limit`: (exit code, stdout + stderr), or `None` if it had not finished by then.
fn ctl_within(master: &Master, uid: Option<u32>, args: &[&str], limit: Duration) -> Option<(i32, String)> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(master_support::BIN);
    cmd.args(["ctl", "--socket"])
        .arg(&master.socket)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            return Some((status.code().unwrap_or(-1), text));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// One request frame on the control socket, bounded by `limit`: the reply's JSON text.
fn raw_request(socket: &Path, command: serde_json::Value, limit: Duration) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(limit)).unwrap();
    let body = serde_json::to_vec(&serde_json::json!({ "v": 1, "id": 7, "command": command })).unwrap();
    s.write_all(&(body.len() as u32).to_le_bytes()).ok()?;
    s.write_all(&body).ok()?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut reply = vec![0u8; u32::from_le_bytes(len) as usize];
    s.read_exact(&mut reply).ok()?;
    Some(String::from_utf8(reply).unwrap())
}

#[test]
fn set_cert_never_makes_the_master_open_what_the_caller_names() {
    let ca = Ca::new("named CA");
    let origin = origin(echo);
    let dir = TempDir::new("cert-named");
    let (cert, key) = (dir.0.join("a.crt"), dir.0.join("a.key"));
    let good = ca.leaf(&["a.example"], "good", false);
    write_pair(&good, &cert, &key);
    // Operators in a group may run `ctl` (here: anyone, so an unprivileged uid can).
    let text = config(&dir.0, origin.addr, "", &cert, &key)
        .replace("[global]\n", "[global]\ncontrol_socket_mode = \"0666\"\n");
    let master = Master::start(dir, &text, &[]);
    let good_fp = fingerprint(&good.der);
    let path = |name: &str| master.dir.0.join(name);

    // A FIFO named as the certificate, the key, or (by a client of its own) as the path
    // that goes with PEM contents: refused at once, and the master never waits on it.
    let fifo = path("cert.fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o666),
        0,
    )
    .unwrap();
    let other = ca.leaf(&["a.example"], "other", false);
    let (c2, k2) = (path("b.crt"), path("b.key"));
    write_pair(&other, &c2, &k2);
    let limit = Duration::from_secs(5);
    for args in [
        vec!["set", "cert", "fe", fifo.to_str().unwrap()],
        vec!["set", "cert", "fe", c2.to_str().unwrap(), fifo.to_str().unwrap()],
    ] {
        let (code, out) = ctl_within(&master, None, &args, limit).expect("ctl came back");
        assert_ne!(code, 0, "{args:?}: {out}");
        assert!(out.contains("not a regular file (a FIFO)"), "{args:?}: {out}");
    }
    let both = format!("{}{}", other.cert_pem, other.key_pem);
    let reply = raw_request(
        &master.socket,
        serde_json::json!({"type": "set_cert", "frontend": "fe", "cert": fifo.to_str().unwrap(), "cert_pem": both}),
        limit,
    )
    .expect("the master answered a set cert naming a FIFO");
    assert!(reply.contains("a.example"), "{reply}");
    assert_eq!(served(master.addr, &ca), fingerprint(&other.der));
    // The master's loop still runs: it answers, and restarts a worker that dies.
    let (code, out) = ctl_within(&master, None, &["show", "servers"], limit).expect("show servers answered");
    assert_eq!(code, 0, "{out}");
    let (_, pid, _) = master.wait_single_generation(Duration::from_secs(5));
    let from = master.log_len();
    master.signal(pid, rustix::process::Signal::KILL);
    master
        .wait_log_from(from, |l| l.contains("worker ready"), Duration::from_secs(10))
        .expect("the killed worker was restarted");
    master.ctl_ok(&["set", "cert", "fe", cert.to_str().unwrap()]);
    assert_eq!(served(master.addr, &ca), good_fp);

    // A caller without root's rights names a key in a root-only directory: the files are
    // read with the caller's rights, so it is not served, and a file there that exists and
    // one that does not get the same answer.
    if !rustix::process::geteuid().is_root() {
        eprintln!("not root: the unprivileged-caller half is skipped");
        return;
    }
    let secret = path("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::fs::write(secret.join("b.key"), &other.key_pem).unwrap();
    let nobody = 65534;
    let mut answers = Vec::new();
    for name in ["b.key", "missing.key"] {
        let named = secret.join(name);
        let args = ["set", "cert", "fe", c2.to_str().unwrap(), named.to_str().unwrap()];
        let (code, out) = ctl_within(&master, Some(nobody), &args, limit).expect("ctl came back");
        assert_ne!(code, 0, "the root-only key was served to uid {nobody}: {out}");
        answers.push(out.replace(named.to_str().unwrap(), "KEY"));
    }
    assert_eq!(answers[0], answers[1], "what exists in a root-only directory shows");
    assert!(!answers[0].contains("No such file"), "{}", answers[0]);
    assert_eq!(served(master.addr, &ca), good_fp);
}
