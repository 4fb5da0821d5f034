//! TLS session tickets survive `tollgate reload`: the master owns the ticket keys and hands
//! them to every worker generation, so a session whose ticket was issued by one generation
//! resumes on the next (TLS 1.3 and TLS 1.2 tickets), and one that started before two
//! reloads still does.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::time::Duration;

use common::http::{http_origin, ok};
use common::tls::{Ca, TempDir as Scratch, cert_entry, path_str, s_client};
use master_support::{Master, TempDir, global};

#[test]
fn a_session_ticket_issued_before_a_reload_resumes_after_it() {
    let o = http_origin(|_| ok("served"));
    let dir = TempDir::new("tickets");
    let certs = Scratch::new();
    let ca = Ca::new("tickets-ca");
    let leaf = ca.leaf(&["a.example"], "cert-a", false).write(&certs, "a");
    // The session cache is off: only a ticket can resume a session (a generation's cache
    // would not outlive it anyway).
    let config = format!(
        "{}[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
         [frontend.tls]\nsession_cache = false\n{}\n\
         [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        global(&dir.0, ""),
        cert_entry(&leaf, true),
        o.addr
    );
    let master = Master::start(dir, &config, &[]);
    let first_gen = master.wait_single_generation(Duration::from_secs(20)).0;
    let scratch = Scratch::new();
    let connect = |args: &[&str]| {
        let mut all = vec!["-servername", "a.example"];
        all.extend_from_slice(args);
        s_client(
            master.addr,
            &all,
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        )
    };
    let mut sessions = Vec::new();
    for version in ["-tls1_3", "-tls1_2"] {
        let sess = path_str(&scratch.path(&format!("sess{version}")));
        let out = connect(&[version, "-sess_out", &sess]);
        assert!(out.contains("New, TLSv1."), "{version} first:\n{out}");
        assert!(out.contains("served"), "{version}: not relayed:\n{out}");
        // Resumes on the same generation, of course.
        let out = connect(&[version, "-sess_in", &sess]);
        assert!(out.contains("Reused, TLSv1."), "{version} same generation:\n{out}");
        sessions.push((version, sess));
    }
    for reload in 1..=2 {
        master.reload_ok();
        // The old generation has gone: what answers now is a new process.
        let (generation, _, _) = master.wait_single_generation(Duration::from_secs(20));
        assert_eq!(generation, first_gen + reload);
        for (version, sess) in &sessions {
            let out = connect(&[version, "-sess_in", sess]);
            assert!(
                out.contains("Reused, TLSv1."),
                "{version} after reload {reload}: a full handshake:\n{out}"
            );
            assert!(
                out.contains("served"),
                "{version} after reload {reload}: not relayed:\n{out}"
            );
        }
    }
}
