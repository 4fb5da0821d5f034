//! `return` routes answer with the status's registered reason phrase (IANA registry), or the
//! name of its class for a code the registry does not list.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use common::Proxy;
use common::http::raw_exchange;

const CONFIG: &str = r#"
[[frontend]]
name = "fe"
bind = ["127.0.0.1:0"]
mode = "http"

[[frontend.route]]
path_prefix = "/teapot"
return = { status = 418, body = "short and stout\n" }

[[frontend.route]]
path_prefix = "/legal"
return = { status = 451 }

[[frontend.route]]
path_prefix = "/odd"
return = { status = 299 }
"#;

#[test]
fn return_routes_send_real_reason_phrases() {
    let proxy = Proxy::start(CONFIG);
    let status_line = |path: &str| {
        let out = raw_exchange(
            proxy.addr,
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        out.lines().next().unwrap_or_default().to_string()
    };
    assert_eq!(status_line("/teapot"), "HTTP/1.1 418 I'm a teapot");
    assert_eq!(status_line("/legal"), "HTTP/1.1 451 Unavailable For Legal Reasons");
    assert_eq!(status_line("/odd"), "HTTP/1.1 299 Successful");
    let out = raw_exchange(
        proxy.addr,
        b"GET /teapot HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    );
    assert!(out.ends_with("\r\n\r\nshort and stout\n"), "{out}");
}
