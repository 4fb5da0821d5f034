//! `tollgate ctl explain` against a running master: the same explanation as `tollgate
//! explain`, but the pick sees the servers' live admin states and connections.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::origin;
use master_support::{Master, TempDir, global};

/// An origin that says its name and then holds the connection until the client closes.
fn holding(name: &'static str) -> common::Origin {
    origin(move |s| {
        let _ = s.write_all(name.as_bytes());
        let mut sink = [0u8; 64];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    })
}

fn explain_json(master: &Master) -> serde_json::Value {
    let out = master.ctl_ok(&["--json", "explain", "--frontend", "fe", "http://t/"]);
    let reply: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    reply["answer"]["detail"].clone()
}

fn server<'a>(detail: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    detail["pick"]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no server {name} in {detail}"))
}

#[test]
fn ctl_explain_picks_with_live_states_and_load() {
    let (a, b) = (holding("A"), holding("B"));
    let dir = TempDir::new("ctl-explain");
    let config = format!(
        "{}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\n\
         [[backend]]\nname = \"be\"\nbalance = \"leastconn\"\n\
         [[backend.server]]\nname = \"a\"\naddress = \"{}\"\n\
         [[backend.server]]\nname = \"b\"\naddress = \"{}\"\n",
        global(&dir.0, ""),
        a.addr,
        b.addr
    );
    let master = Master::start(dir, &config, &[]);

    // The human form names the frontend, the backend and the chosen server.
    let text = master.ctl_ok(&["explain", "--frontend", "fe", "http://t/"]);
    assert!(
        text.contains("fe") && text.contains("be") && text.contains("leastconn"),
        "{text}"
    );

    // A drained server is not usable: the live state reaches the pick.
    master.ctl_ok(&["set", "server", "be/a", "state", "drain"]);
    let detail = explain_json(&master);
    assert_eq!(detail["pick"]["server"], "b", "{detail}");
    assert_eq!(server(&detail, "a")["admin"], "drain", "{detail}");
    assert_eq!(server(&detail, "a")["usable"], false, "{detail}");
    master.ctl_ok(&["set", "server", "be/a", "state", "ready"]);

    // A held connection loads one server: leastconn picks the other.
    let mut held = TcpStream::connect(master.addr).unwrap();
    held.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut greeting = [0u8; 1];
    held.read_exact(&mut greeting).unwrap();
    let (busy, idle) = if &greeting == b"A" { ("a", "b") } else { ("b", "a") };
    let detail = explain_json(&master);
    assert_eq!(server(&detail, busy)["load"], 1, "{detail}");
    assert_eq!(server(&detail, idle)["load"], 0, "{detail}");
    assert_eq!(detail["pick"]["server"], idle, "{detail}");

    // Offline `tollgate explain` knows nothing of the load; the request shape is shared.
    let (code, _, err) = master.ctl(&["explain", "--frontend", "nope", "http://t/"]);
    assert_eq!(code, 2, "an unknown frontend is refused: {err}");
    assert!(err.contains("nope"), "{err}");
    drop(held);
}
