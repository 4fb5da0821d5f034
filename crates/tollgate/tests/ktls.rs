//! kTLS: off by default, probed once at startup. Where the kernel has no `tls` ULP, this
//! reports `skipped: <reason>`; the frontend still serves with userspace rustls.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::tls::*;
use common::*;

/// The kTLS switch never breaks serving: on this kernel it falls back to userspace.
#[test]
fn ktls_frontend_round_trip() {
    let origin = origin(|s: &mut TcpStream| {
        let mut req = Vec::new();
        s.read_to_end(&mut req).expect("origin read");
        let _ = s.write_all(&payload_block(req.len() as u64, 4 << 20));
    });
    let dir = TempDir::new();
    let ca = Ca::new("ca");
    let a = ca.leaf(&["a.example"], "cert-a", false).write(&dir, "a");
    let proxy = Proxy::start(&format!(
        "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
         [frontend.tls]\n{}\n[frontend.tls.ktls]\nenabled = true\nafter_bytes = \"1MiB\"\n\
         [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"o\"\naddress = \"{}\"\n",
        cert_entry(&a, false),
        origin.addr
    ));
    // The config is served either way: with kTLS where the kernel has it, else in userspace.
    let (reply, _) = tls_request(proxy.addr, client_config(&ca), "a.example", b"0123456789").unwrap();
    assert!(reply == payload_block(10, 4 << 20));
}

/// The kernel side itself: only where the `tls` ULP exists.
#[test]
fn ktls_probe() {
    if let Err(reason) = tollgate_sys::sockopt::probe_ktls() {
        println!("skipped: {reason}");
        return;
    }
    assert!(tollgate::tls::ktls::available().is_ok());
}
