//! OCSP stapling in master mode: a `CERT.ocsp` file next to a certificate is stapled
//! (`openssl s_client -status` sees it; an unusable one is not, and the file watch follows
//! the response file), and with `ocsp_fetch = true` tollgate asks the
//! responder named in the certificate (a real `openssl ocsp` responder on a loopback port,
//! started only after a first fetch has failed, so the retry is exercised) and staples what
//! it answers. The CA, the certificate (with its Authority Information Access) and the
//! responder's index are made with the openssl command line.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::tls::s_client;
use common::{ReservedPort, echo, origin};
use master_support::{Master, TempDir, global};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, and a certificate for `a.example` (serial 0x1234) whose OCSP responder is
/// `http://127.0.0.1:{port}/`, written as a chain (leaf then CA) in `a.crt` with `a.key`;
/// the responder's `index.txt` says it is valid.
struct Pki {
    cert: PathBuf,
    key: PathBuf,
}

fn pki(dir: &Path, responder_port: u16) -> Pki {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(
        dir,
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-subj",
                "/CN=ocsp test CA",
                "-days",
                "30",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            ],
        ]
        .concat(),
    );
    openssl(
        dir,
        &[
            &["req", "-new"][..],
            &ec,
            &["-keyout", "a.key", "-out", "a.csr", "-subj", "/CN=a.example"],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("ext.cnf"),
        format!("subjectAltName=DNS:a.example\nauthorityInfoAccess=OCSP;URI:http://127.0.0.1:{responder_port}/\n"),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "a.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "0x1234",
            "-days",
            "30",
            "-out",
            "leaf.crt",
            "-extfile",
            "ext.cnf",
        ],
    );
    let chain = [
        std::fs::read(dir.join("leaf.crt")).unwrap(),
        std::fs::read(dir.join("ca.pem")).unwrap(),
    ]
    .concat();
    std::fs::write(dir.join("a.crt"), chain).unwrap();
    std::fs::write(
        dir.join("index.txt"),
        "V\t491231235959Z\t\t1234\tunknown\t/CN=a.example\n",
    )
    .unwrap();
    Pki {
        cert: dir.join("a.crt"),
        key: dir.join("a.key"),
    }
}

fn config(dir: &Path, origin: SocketAddr, tls: &str, pki: &Pki) -> String {
    format!(
        "{}[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"tcp\"\ndefault_backend = \"be\"\n\
         [frontend.tls]\n{tls}\n[[frontend.tls.cert]]\ncert = \"{}\"\nkey = \"{}\"\n\
         [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{origin}\"\n",
        global(dir, ""),
        pki.cert.display(),
        pki.key.display()
    )
}

/// `s_client -status` with SNI a.example: its transcript.
fn status(addr: SocketAddr) -> String {
    s_client(addr, &["-servername", "a.example", "-status"], b"")
}

fn assert_stapled(transcript: &str) {
    assert!(
        transcript.contains("OCSP Response Status: successful") && transcript.contains("Cert Status: good"),
        "no good staple in:\n{transcript}"
    );
}

/// The metric line `name{...frontend="fe"...label...}`'s value.
fn metric(master: &Master, name: &str, label: &str) -> u64 {
    let text = master.ctl_ok(&["show", "metrics"]);
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains("frontend=\"fe\"") && l.contains(label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} {label} in:\n{text}"))
}

#[test]
fn an_ocsp_file_next_to_the_certificate_is_stapled() {
    let origin = origin(echo);
    let dir = TempDir::new("ocsp-file");
    // Named in the certificate only: nothing fetches from it here.
    let port = ReservedPort::new();
    let pki = pki(&dir.0, port.port());
    openssl(
        &dir.0,
        &[
            "ocsp",
            "-issuer",
            "ca.pem",
            "-cert",
            "leaf.crt",
            "-no_nonce",
            "-reqout",
            "req.der",
        ],
    );
    openssl(
        &dir.0,
        &[
            "ocsp",
            "-index",
            "index.txt",
            "-rsigner",
            "ca.pem",
            "-rkey",
            "ca.key",
            "-CA",
            "ca.pem",
            "-reqin",
            "req.der",
            "-respout",
            "a.crt.ocsp",
            "-ndays",
            "1",
        ],
    );
    let text = config(&dir.0, origin.addr, "watch = true", &pki);
    let master = Master::start(dir, &text, &[]);
    let good = std::fs::read(master.dir.0.join("a.crt.ocsp")).unwrap();
    assert_stapled(&status(master.addr));
    assert!(metric(&master, "tollgate_tls_ocsp_staples_total", "") >= 1);
    let certs = master.ctl_ok(&["show", "certs"]);
    assert!(certs.contains("until "), "the staple's nextUpdate is listed: {certs}");

    // An unusable response (here: a bare `unauthorized`) is not stapled, with a warning; the
    // certificate still serves.
    std::fs::write(master.dir.0.join("a.crt.ocsp"), b"\x30\x03\x0a\x01\x06").unwrap();
    let from = master.log_len();
    master.reload_ok();
    master
        .wait_log_from(from, |l| l.contains("a.crt.ocsp: not stapled"), Duration::from_secs(10))
        .expect("a warning about the unusable response");
    let transcript = status(master.addr);
    assert!(transcript.contains("OCSP response: no response sent"), "{transcript}");
    assert!(
        transcript.contains("CN = a.example") || transcript.contains("CN=a.example"),
        "{transcript}"
    );

    // The file watch follows the response file too: a good one written back is stapled.
    master.wait_single_generation(Duration::from_secs(10));
    let from = master.log_len();
    std::fs::write(master.dir.0.join("a.crt.ocsp"), good).unwrap();
    master
        .wait_log_from(
            from,
            |l| l.contains("certificate file watch") && l.contains("swapped in"),
            Duration::from_secs(10),
        )
        .expect("the watch re-read the pair and its response");
    assert_stapled(&status(master.addr));
}

/// The responder, on `port` (all its addresses: `openssl ocsp -port` takes no host).
fn responder(dir: &Path, port: u16) -> Child {
    Command::new("openssl")
        .args([
            "ocsp",
            "-index",
            "index.txt",
            "-CA",
            "ca.pem",
            "-rsigner",
            "ca.pem",
            "-rkey",
            "ca.key",
            "-nmin",
            "10",
            "-nrequest",
            "20",
            "-port",
        ])
        .arg(port.to_string())
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl ocsp responder")
}

#[test]
fn ocsp_fetch_asks_the_responder_retries_and_staples_its_answer() {
    let origin = origin(echo);
    let dir = TempDir::new("ocsp-fetch");
    // The certificate names the responder's port before the responder runs: held (connects
    // refused, so the first fetch fails) until the responder binds it; a port merely free
    // now could meanwhile be another test's listener, which the fetch would reach.
    let port = ReservedPort::new();
    let pki = pki(&dir.0, port.port());
    let text = config(&dir.0, origin.addr, "ocsp_fetch = true", &pki);
    let master = Master::start(dir, &text, &[]);
    // No responder yet: the first fetch fails and is retried later.
    master
        .wait_log(
            |l| l.contains("ocsp_fetch") && l.contains("retry in"),
            Duration::from_secs(10),
        )
        .expect("a failed first fetch");
    assert!(status(master.addr).contains("OCSP response: no response sent"));
    let mut responder = responder(&master.dir.0, port.port());
    let stapled = master.wait_log(
        |l| l.contains("ocsp_fetch") && l.contains("stapled a fresh response"),
        Duration::from_secs(20),
    );
    let transcript = status(master.addr);
    let _ = responder.kill();
    let _ = responder.wait();
    stapled.expect("the retry stapled the responder's answer");
    assert_stapled(&transcript);
    assert!(metric(&master, "tollgate_tls_ocsp_fetches_total", "outcome=\"ok\"") >= 1);
    assert!(metric(&master, "tollgate_tls_ocsp_fetches_total", "outcome=\"failed\"") >= 1);
    assert!(metric(&master, "tollgate_tls_ocsp_staples_total", "") >= 1);
}
