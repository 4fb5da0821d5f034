use super::*;

const GOOD: &str = r#"
[global]
workers = 2
maxconn = 1000
buffer_size = "16KiB"

[timeouts]
connect = "2s"
client = "30s"

[[frontend]]
name = "web"
bind = ["127.0.0.1:8080", "[::1]:8080"]
default_backend = "app"

[[backend]]
name = "app"
[[backend.server]]
name = "a"
address = "127.0.0.1:9001"
weight = 2
[[backend.server]]
name = "b"
address = "localhost:9002"
"#;

fn first_error(src: &str) -> ConfigError {
    match parse(src, "t.toml") {
        Ok(_) => panic!("config was accepted:\n{src}"),
        Err(e) => e.0.into_iter().next().expect("at least one error"),
    }
}

#[test]
fn good_config_resolves_everything() {
    let c = parse(GOOD, "t.toml").expect("valid");
    assert_eq!(c.global.workers, 2);
    assert_eq!(c.global.buffer_size, 16384);
    assert_eq!(c.frontends[0].binds.len(), 2);
    assert_eq!(c.frontends[0].default_backend, Some(0));
    assert_eq!(c.backends[0].servers[0].weight, 2);
    assert_eq!(c.backends[0].balance, "roundrobin");
    assert_eq!(c.backends[0].retries, 3);
    assert_eq!(c.timeouts.connect, std::time::Duration::from_secs(2));
}

#[test]
fn unknown_key_names_line_and_key() {
    let src = GOOD.replace("bind = [", "bnid = [\"x\"]\nbind = [");
    let e = first_error(&src);
    assert_eq!(e.line, 13, "{e}");
    assert!(e.key.ends_with("bnid"), "{e}");
    assert!(e.message.contains("unknown field"), "{e}");
}

#[test]
fn key_under_wrong_table() {
    // `retries` belongs to a backend, not to a server.
    let src = GOOD.replace("weight = 2", "weight = 2\nretries = 5");
    let e = first_error(&src);
    assert_eq!(e.line, 22, "{e}");
    assert_eq!(e.key, "backend[0].server[0].retries", "{e}");
}

#[test]
fn duplicate_and_missing_names() {
    let e = first_error(&GOOD.replace("name = \"b\"", "name = \"a\""));
    assert!(e.message.contains("duplicate name `a`"), "{e}");
    assert_eq!(e.key, "backend[0].server[1].name");
    let e = first_error(&GOOD.replace("default_backend = \"app\"", "default_backend = \"nope\""));
    assert!(e.message.contains("`nope` does not exist"), "{e}");
    assert_eq!((e.line, e.key.as_str()), (14, "frontend[0].default_backend"));
}

#[test]
fn bad_values_are_positioned() {
    let e = first_error(&GOOD.replace("127.0.0.1:9001", "127.0.0.1:99999"));
    assert_eq!((e.line, e.key.as_str()), (20, "backend[0].server[0].address"), "{e}");
    let e = first_error(&GOOD.replace("\"2s\"", "\"2 fortnights\""));
    assert_eq!((e.line, e.key.as_str()), (8, "timeouts.connect"), "{e}");
    let e = first_error(&GOOD.replace("\"[::1]:8080\"", "\"nowhere\""));
    assert_eq!((e.line, e.key.as_str()), (13, "frontend[0].bind[1]"), "{e}");
    let e = first_error(
        &GOOD
            .replace("balance", "x")
            .replace("name = \"app\"\n", "name = \"app\"\nbalance = \"magic\"\n"),
    );
    assert!(e.message.contains("unknown algorithm"), "{e}");
    let e = first_error(&GOOD.replace("buffer_size = \"16KiB\"", "pipe_size = \"2MiB\""));
    assert_eq!((e.line, e.key.as_str()), (5, "global.pipe_size"), "{e}");
}

/// The file takes the weights `ctl set server … weight` takes: 0..=256.
#[test]
fn weights_range_from_0_to_256_as_at_run_time() {
    let c = parse(&GOOD.replace("weight = 2", "weight = 0"), "t.toml").expect("weight 0 accepted");
    assert_eq!(c.backends[0].servers[0].weight, 0);
    let e = first_error(&GOOD.replace("weight = 2", "weight = 257"));
    assert_eq!(e.key, "backend[0].server[0].weight", "{e}");
    assert!(e.message.contains("between 0 and 256"), "{e}");
}

#[test]
fn pipe_size_defaults_to_the_kernel_default() {
    assert_eq!(parse(GOOD, "t.toml").expect("valid").global.pipe_size, 65536);
    let c = parse(&GOOD.replace("buffer_size", "pipe_size"), "t.toml").expect("valid");
    assert_eq!(c.global.pipe_size, 16384);
}

#[test]
fn mode_mismatch_is_refused() {
    let e = first_error(&GOOD.replace("name = \"app\"\n", "name = \"app\"\nmode = \"http\"\n"));
    assert!(e.message.contains("does not match"), "{e}");
}

const HTTP_ROUTES: &str = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
mode = "http"
default_backend = "app"

[[frontend.route]]
host = "*.api.example"
path_prefix = "/v1"
backend = "api"

[[frontend.route]]
path_prefix = "/healthz"
return = { status = 200, body = "ok\n" }

[[backend]]
name = "app"
mode = "http"
[[backend.server]]
name = "a"
address = "127.0.0.1:9001"

[[backend]]
name = "api"
mode = "http"
[[backend.server]]
name = "b"
address = "127.0.0.1:9002"
"#;

#[test]
fn routes_resolve_to_backends_and_returns() {
    let c = parse(HTTP_ROUTES, "t.toml").expect("valid");
    let routes = &c.frontends[0].routes;
    assert_eq!(routes.len(), 2);
    assert!(matches!(routes[0].action, model::RouteAction::Backend(1, None)));
    assert!(matches!(
        routes[0].when.0.first(),
        Some(route::Cond::Host(h)) if h[0].matches("eu.api.example") && !h[0].matches("a.b.api.example")
    ));
    assert!(matches!(&routes[1].action, model::RouteAction::Return(a) if a.status == 200 && &*a.body == b"ok\n"));
}

#[test]
fn bad_routes_are_refused() {
    let e = first_error(&HTTP_ROUTES.replace("backend = \"api\"", "backend = \"nope\""));
    assert_eq!(e.key, "frontend[0].route[0].backend", "{e}");
    let e = first_error(&HTTP_ROUTES.replace("path_prefix = \"/v1\"", "path_prefix = \"v1\""));
    assert_eq!(e.key, "frontend[0].route[0].path_prefix", "{e}");
    let e = first_error(&HTTP_ROUTES.replace("host = \"*.api.example\"", "host = \"bad host!\""));
    assert_eq!(e.key, "frontend[0].route[0].host", "{e}");
    let e = first_error(&HTTP_ROUTES.replace("backend = \"api\"", "backend = \"api\"\nreturn = { status = 204 }"));
    assert!(e.message.contains("exactly one of"), "{e}");
    let e = first_error(&HTTP_ROUTES.replace("path_prefix = \"/v1\"", "sni = \"a.example\""));
    assert_eq!(e.key, "frontend[0].route[0].sni", "{e}");
    let e = first_error(&HTTP_ROUTES.replace("hots = 1", "").replace("host = ", "hots = "));
    assert!(e.message.contains("unknown field `hots`"), "{e}");
}

#[test]
fn host_patterns() {
    use model::HostPattern;
    let exact = HostPattern::parse("A.Example").expect("exact");
    assert!(exact.matches("a.example") && !exact.matches("b.a.example"));
    let wild = HostPattern::parse("*.example").expect("wildcard");
    assert!(wild.matches("x.example") && !wild.matches("example") && !wild.matches("a.b.example"));
    assert!(HostPattern::parse("*.").is_none() && HostPattern::parse("a..b").is_none());
}

#[test]
fn master_and_watchdog_keys() {
    let c = parse(GOOD, "t.toml").expect("valid");
    assert!(c.global.master);
    assert_eq!(
        c.global.control_socket,
        std::path::PathBuf::from(model::DEFAULT_CONTROL_SOCKET)
    );
    assert!(c.watchdog.enabled);
    assert_eq!(c.watchdog.warn_after, std::time::Duration::from_millis(100));
    assert_eq!(c.watchdog.abort_after, std::time::Duration::from_secs(1));

    let src = GOOD.replace(
        "[global]\n",
        "[global]\nmaster = false\ncontrol_socket = \"/tmp/t.sock\"\n",
    ) + "[watchdog]\nwarn_after = \"50ms\"\nabort_after = \"2s\"\nno_progress_after = \"10s\"\n";
    let c = parse(&src, "t.toml").expect("valid");
    assert!(!c.global.master);
    assert_eq!(c.global.control_socket, std::path::PathBuf::from("/tmp/t.sock"));
    assert_eq!(c.watchdog.warn_after, std::time::Duration::from_millis(50));
    assert_eq!(c.watchdog.no_progress_after, std::time::Duration::from_secs(10));

    let e = first_error(&format!("{GOOD}[watchdog]\nwarn_after = \"2s\"\n"));
    assert_eq!(e.key, "watchdog.abort_after", "{e}");
    let e = first_error(&format!("{GOOD}[watchdog]\nabort_after = \"1ms\"\n"));
    assert!(e.message.contains("at least 10ms"), "{e}");
    let long = "x".repeat(120);
    let e = first_error(&GOOD.replace("[global]\n", &format!("[global]\ncontrol_socket = \"{long}\"\n")));
    assert_eq!((e.key.as_str(), e.line), ("global.control_socket", 3), "{e}");
    let e = first_error(&format!("{GOOD}[watchdog]\nwarn_aftr = \"1s\"\n"));
    assert!(e.key.contains("warn_aftr"), "{e}");
}

fn all_errors(src: &str) -> Vec<ConfigError> {
    match parse(src, "t.toml") {
        Ok(_) => panic!("config was accepted:\n{src}"),
        Err(e) => e.0,
    }
}

#[test]
fn max_header_size_cannot_exceed_the_buffer() {
    // Set explicitly above the buffer: refused at its position.
    let src = format!("{GOOD}[http]\nmax_header_size = \"32KiB\"\n");
    let e = first_error(&src);
    assert_eq!((e.key.as_str(), e.line), ("http.max_header_size", 26), "{e}");
    assert!(e.message.contains("global.buffer_size (16384 bytes)"), "{e}");
    // Not set: the default follows a smaller buffer instead of being silently unreachable.
    assert_eq!(parse(GOOD, "t.toml").expect("valid").http.max_header_size, 16384);
    let c = parse(&GOOD.replace("buffer_size = \"16KiB\"", ""), "t.toml").expect("valid");
    assert_eq!(c.http.max_header_size, model::DEFAULT_MAX_HEADER_SIZE);
    let c = parse(&format!("{GOOD}[http]\nmax_header_size = \"16KiB\"\n"), "t.toml").expect("valid");
    assert_eq!(c.http.max_header_size, 16384);
}

#[test]
fn relative_control_socket_is_relative_to_the_config_file() {
    let src = GOOD.replace("[global]\n", "[global]\ncontrol_socket = \"run/ctl.sock\"\n");
    let c = parse(&src, "/etc/tollgate/tollgate.toml").expect("valid");
    assert_eq!(
        c.global.control_socket,
        std::path::PathBuf::from("/etc/tollgate/run/ctl.sock")
    );
    let src = GOOD.replace("[global]\n", "[global]\ncontrol_socket = \"/tmp/abs.sock\"\n");
    let c = parse(&src, "/etc/tollgate/tollgate.toml").expect("valid");
    assert_eq!(c.global.control_socket, std::path::PathBuf::from("/tmp/abs.sock"));
    // The length limit applies to the resolved path (what bind(2) gets).
    let dir = format!("/{}", "d".repeat(100));
    let src = GOOD.replace("[global]\n", "[global]\ncontrol_socket = \"ctl.sock\"\n");
    let e = parse(&src, &format!("{dir}/t.toml")).expect_err("too long once resolved");
    assert_eq!(e.0[0].key, "global.control_socket", "{e}");
}

#[test]
fn a_config_without_frontends_is_refused() {
    for src in ["", "[global]\nworkers = 1\n"] {
        let errors = all_errors(src);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!((errors[0].key.as_str(), errors[0].line), ("frontend", 1));
        assert!(errors[0].message.contains("no [[frontend]]"), "{}", errors[0]);
    }
}

#[test]
fn an_unreadable_file_names_itself_without_a_position() {
    let e = load(std::path::Path::new("/nonexistent/tollgate.toml")).expect_err("missing");
    assert_eq!(
        e.to_string(),
        "cannot read /nonexistent/tollgate.toml: No such file or directory"
    );
}

#[test]
fn mode_mismatch_quotes_the_modes_as_written() {
    let e = first_error(&GOOD.replace("name = \"app\"\n", "name = \"app\"\nmode = \"http\"\n"));
    assert!(
        e.message
            .contains("frontend mode \"tcp\" does not match backend `app` mode \"http\""),
        "{e}"
    );
}

#[test]
fn a_route_with_backend_and_return_is_one_error() {
    // No default_backend: the refused route must not also count as "no route at all".
    let src = HTTP_ROUTES.replace("default_backend = \"app\"\n", "").replace(
        "return = { status = 200, body = \"ok\\n\" }",
        "backend = \"app\"\nreturn = { status = 204 }",
    );
    let errors = all_errors(&src);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].message.contains("exactly one of"), "{}", errors[0]);
    assert_eq!(errors[0].key, "frontend[0].route[1]");
    assert_eq!(errors[0].line, 14, "{}", errors[0]);
    // A route naming a missing backend is likewise one error.
    let src = HTTP_ROUTES
        .replace("default_backend = \"app\"\n", "")
        .replace("backend = \"api\"", "backend = \"nope\"");
    let errors = all_errors(&src);
    assert_eq!(errors.len(), 1, "{errors:?}");
}

#[test]
fn user_and_group_are_resolved_at_load() {
    let with = |extra: &str| GOOD.replace("[global]\n", &format!("[global]\n{extra}\n"));
    let c = parse(&with("user = \"root\""), "t.toml").expect("valid");
    let run_as = c.global.run_as.expect("run_as");
    assert_eq!((run_as.uid, run_as.gid), (0, 0));
    assert!(!c.global.allow_root);
    let c = parse(&with("user = \"12345\"\ngroup = \"root\"\nallow_root = true"), "t.toml").expect("valid");
    let run_as = c.global.run_as.expect("run_as");
    assert_eq!((run_as.uid, run_as.gid), (12345, 0));
    assert!(c.global.allow_root);
    let e = first_error(&with("user = \"no-such-user-tollgate\""));
    assert_eq!((e.key.as_str(), e.line), ("global.user", 3), "{e}");
    let e = first_error(&with("user = \"12345\""));
    assert!(e.message.contains("needs `group`"), "{e}");
    let e = first_error(&with("group = \"root\""));
    assert_eq!(e.key, "global.group", "{e}");
    let e = first_error(&with("user = \"root\"\ngroup = \"no-such-group-tollgate\""));
    assert_eq!((e.key.as_str(), e.line), ("global.group", 4), "{e}");
}

#[test]
fn a_control_socket_the_workers_could_open_is_refused() {
    // Workers run as uid/gid 12345 (numbers resolve on every machine); the socket is
    // theirs to open through its group or through "others": the master would take
    // commands from the processes that parse client traffic.
    let with = |extra: &str| {
        GOOD.replace(
            "[global]\n",
            &format!("[global]\nuser = \"12345\"\ngroup = \"12345\"\n{extra}\n"),
        )
    };
    for (extra, why) in [
        (
            "control_socket_mode = \"0660\"\ncontrol_socket_group = \"12345\"",
            "its group is the one the workers run in",
        ),
        ("control_socket_mode = \"0666\"", "it lets every user write to it"),
    ] {
        let e = first_error(&with(extra));
        assert_eq!(e.key, "global.control_socket_mode", "{e}");
        assert!(e.message.contains(why) && e.message.contains("user `12345`"), "{e}");
    }
    // An operators' group of its own, or workers that stay who started them: accepted.
    for extra in [
        "control_socket_mode = \"0660\"\ncontrol_socket_group = \"54321\"",
        "control_socket_mode = \"0640\"\ncontrol_socket_group = \"12345\"",
    ] {
        parse(&with(extra), "t.toml").unwrap_or_else(|e| panic!("{extra}: {e}"));
    }
    let open_to_all = GOOD.replace("[global]\n", "[global]\ncontrol_socket_mode = \"0666\"\n");
    parse(&open_to_all, "t.toml").expect("no user: the workers are the master's own user");
}

/// A self-signed certificate and key written to a fresh directory: `(dir, cert, key)`.
fn cert_files(tag: &str) -> (std::path::PathBuf, String, String) {
    let dir = std::env::temp_dir().join(format!("tollgate-config-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["a.example".into()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    let (c, k) = (dir.join("a.crt"), dir.join("a.key"));
    std::fs::write(&c, cert.pem()).expect("write cert");
    std::fs::write(&k, key.serialize_pem()).expect("write key");
    (dir, c.display().to_string(), k.display().to_string())
}

/// A frontend in `mode` terminating TLS with `tls_extra` in `[frontend.tls]`.
fn tls_frontend(mode: &str, cert: &str, key: &str, tls_extra: &str) -> String {
    format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8443\"]\nmode = \"{mode}\"\ndefault_backend = \"app\"\n\
         [frontend.tls]\n{tls_extra}\n[[frontend.tls.cert]]\ncert = \"{cert}\"\nkey = \"{key}\"\n\
         [[backend]]\nname = \"app\"\nmode = \"{mode}\"\n[[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:9001\"\n"
    )
}

#[test]
fn alpn_on_http_frontends_is_what_http_mode_speaks() {
    let (dir, cert, key) = cert_files("alpn");
    let src = tls_frontend("http", &cert, &key, "alpn = [\"spdy/3\", \"http/1.1\"]");
    let e = first_error(&src);
    assert_eq!(
        (e.line, e.column, e.key.as_str()),
        (7, 9, "frontend[0].tls.alpn[0]"),
        "{e}"
    );
    assert!(e.message.contains("`spdy/3`") && e.message.contains("http-mode"), "{e}");
    for alpn in ["[\"h2\", \"http/1.1\"]", "[\"http/1.1\", \"http/1.0\"]"] {
        let ok = parse(&tls_frontend("http", &cert, &key, &format!("alpn = {alpn}")), "t.toml");
        assert!(ok.is_ok(), "{:?}", ok.err());
    }
    // TCP mode relays whatever the client speaks: h2 is the server's business.
    let ok = parse(
        &tls_frontend("tcp", &cert, &key, "alpn = [\"h2\", \"http/1.1\"]"),
        "t.toml",
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn http2_section_and_h2c_are_checked() {
    let base = |extra: &str, fe: &str| {
        format!(
            "{extra}\n[[frontend]]\nname = \"f\"\nbind = [\"127.0.0.1:0\"]\nmode = \"{fe}\"\nh2c = true\ndefault_backend = \"b\"\n\
             [[backend]]\nname = \"b\"\nmode = \"{fe}\"\n[[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:1\"\n"
        )
    };
    let c = parse(
        &base(
            "[http2]\nmax_concurrent_streams = 7\nmax_frame_size = \"32KiB\"",
            "http",
        ),
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.http2.max_concurrent_streams, 7);
    assert_eq!(c.http2.max_frame_size, 32 * 1024);
    assert_eq!(
        c.http2.initial_stream_window,
        super::model::Http2::default().initial_stream_window
    );
    assert!(c.frontends[0].h2c);
    let e = first_error(&base("[http2]\nmax_frame_size = \"1KiB\"", "http"));
    assert_eq!((e.line, e.key.as_str()), (2, "http2.max_frame_size"), "{e}");
    let e = first_error(&base("[http2]\nmax_pings = 0", "http"));
    assert_eq!(e.key, "http2.max_pings", "{e}");
    let e = first_error(&base("[http2]\nmax_streams = 1", "http"));
    assert!(e.message.contains("max_streams"), "{e}");
    let e = first_error(&base("", "tcp"));
    assert_eq!(e.key, "frontend[0].h2c", "{e}");
    let c = parse(&base("[http2]\nmax_oversized_heads = 3", "http"), "t.toml").unwrap();
    assert_eq!(c.http2.max_oversized_heads, 3);
    let e = first_error(&base("[http2]\nmax_oversized_heads = 0", "http"));
    assert_eq!(e.key, "http2.max_oversized_heads", "{e}");
}

#[test]
fn keys_a_mode_ignores_are_refused() {
    let (dir, cert, key) = cert_files("modes");
    // (text, line, key)
    let cases = [
        (
            GOOD.replace(
                "default_backend = \"app\"",
                "default_backend = \"app\"\nforwarded = \"none\"",
            ),
            15,
            "frontend[0].forwarded",
        ),
        (
            GOOD.replace(
                "default_backend = \"app\"",
                "default_backend = \"app\"\nforward_target = \"original\"",
            ),
            15,
            "frontend[0].forward_target",
        ),
        // Splice needs a plain client socket: never there behind TLS in user space.
        (
            tls_frontend("http", &cert, &key, "").replacen(
                "default_backend = \"app\"\n",
                "default_backend = \"app\"\n[frontend.splice]\nenabled = true\n",
                1,
            ),
            6,
            "frontend[0].splice",
        ),
        (
            tls_frontend("tcp", &cert, &key, "").replacen(
                "default_backend = \"app\"\n",
                "default_backend = \"app\"\n[frontend.splice]\nenabled = true\n",
                1,
            ),
            6,
            "frontend[0].splice",
        ),
        (
            tls_frontend("http", &cert, &key, "[frontend.tls.ktls]\nenabled = true"),
            7,
            "frontend[0].tls.ktls",
        ),
        (
            GOOD.replace(
                "default_backend = \"app\"",
                "default_backend = \"app\"\nreject_unknown_sni = true",
            ),
            15,
            "frontend[0].reject_unknown_sni",
        ),
        (
            HTTP_ROUTES.replace(
                "default_backend = \"app\"",
                "default_backend = \"app\"\nreject_unknown_sni = true",
            ),
            7,
            "frontend[0].reject_unknown_sni",
        ),
    ];
    for (src, line, key) in cases {
        let e = first_error(&src);
        assert_eq!((e.line, e.key.as_str()), (line, key), "{e}\n{src}");
    }
    // Where they do something, they are accepted.
    let tcp_ok = [
        tls_frontend("tcp", &cert, &key, "[frontend.tls.ktls]\nenabled = true"),
        tls_frontend("tcp", &cert, &key, "").replacen(
            "mode = \"tcp\"\n",
            "mode = \"tcp\"\nreject_unknown_sni = true\n",
            1,
        ),
        tls_frontend("http", &cert, &key, "").replacen(
            "mode = \"http\"\n",
            "mode = \"http\"\nreject_unknown_sni = true\n",
            1,
        ),
        GOOD.replace(
            "default_backend = \"app\"",
            "default_backend = \"app\"\n[frontend.splice]\nenabled = true",
        ),
        // HTTP mode splices Content-Length bodies and tunnels between plain sockets.
        HTTP_ROUTES.replace(
            "default_backend = \"app\"\n",
            "default_backend = \"app\"\n[frontend.splice]\nenabled = true\nafter_bytes = \"1MiB\"\n",
        ),
        // TCP mode with kTLS: the socket is plain again after the handover.
        tls_frontend(
            "tcp",
            &cert,
            &key,
            "[frontend.tls.ktls]\nenabled = true\n[frontend.splice]\nenabled = true",
        ),
    ];
    for src in tcp_ok {
        let parsed = parse(&src, "t.toml");
        assert!(parsed.is_ok(), "{:?}\n{src}", parsed.err());
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn tls_to_servers_offers_http11_in_http_mode_only() {
    let server = "name = \"a\"\naddress = \"127.0.0.1:9001\"\ntls = true\nverify = false\n";
    let http = parse(
        &HTTP_ROUTES.replace("name = \"a\"\naddress = \"127.0.0.1:9001\"\n", server),
        "t.toml",
    )
    .expect("valid");
    let tls = http.backends[0].servers[0].tls.as_ref().expect("tls");
    assert_eq!(tls.client_config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    let tcp = parse(
        &GOOD.replace("name = \"a\"\naddress = \"127.0.0.1:9001\"\n", server),
        "t.toml",
    )
    .expect("valid");
    let tls = tcp.backends[0].servers[0].tls.as_ref().expect("tls");
    assert!(tls.client_config.alpn_protocols.is_empty(), "TCP mode relays: no ALPN");
}

#[test]
fn hash_options_are_parsed_defaulted_and_refused_where_they_do_nothing() {
    let with = |lines: &str| GOOD.replace("name = \"app\"\n", &format!("name = \"app\"\n{lines}"));
    let http = |lines: &str| {
        with(&format!("mode = \"http\"\n{lines}")).replace(
            "default_backend = \"app\"\n",
            "default_backend = \"app\"\nmode = \"http\"\n",
        )
    };
    let c = parse(&with("balance = \"hash\"\n"), "t.toml").expect("valid");
    assert_eq!(c.backends[0].hash_key, Some(model::HashKey::Source));
    assert_eq!(c.backends[0].hash_balance_factor, 125);
    // Other algorithms compute no key.
    assert_eq!(parse(GOOD, "t.toml").expect("valid").backends[0].hash_key, None);
    let c = parse(
        &http("balance = \"hash\"\nhash_key = \"cookie:SID\"\nhash_balance_factor = 0\n"),
        "t.toml",
    )
    .expect("valid");
    assert_eq!(c.backends[0].hash_key, Some(model::HashKey::Cookie("SID".into())));
    assert_eq!(c.backends[0].hash_balance_factor, 0);
    let c = parse(&http("balance = \"hash\"\nhash_key = \"header:X-User\"\n"), "t.toml").expect("valid");
    assert_eq!(c.backends[0].hash_key, Some(model::HashKey::Header("X-User".into())));

    let e = first_error(&with("hash_key = \"source\"\n"));
    assert_eq!((e.line, e.key.as_str()), (18, "backend[0].hash_key"), "{e}");
    assert!(e.message.contains("balance = \"hash\""), "{e}");
    let e = first_error(&with("hash_balance_factor = 150\n"));
    assert_eq!((e.line, e.key.as_str()), (18, "backend[0].hash_balance_factor"), "{e}");
    let e = first_error(&with("balance = \"hash\"\nhash_balance_factor = 99\n"));
    assert_eq!((e.line, e.key.as_str()), (19, "backend[0].hash_balance_factor"), "{e}");
    // Request keys need an HTTP backend: a TCP one has no URI, header or cookie.
    let e = first_error(&with("balance = \"hash\"\nhash_key = \"uri\"\n"));
    assert_eq!(
        (e.line, e.column, e.key.as_str()),
        (19, 12, "backend[0].hash_key"),
        "{e}"
    );
    assert!(e.message.contains("HTTP backend"), "{e}");
    for bad in ["\"header:\"", "\"cookie:a b\"", "\"client\"", "\"header\""] {
        let e = first_error(&http(&format!("balance = \"hash\"\nhash_key = {bad}\n")));
        assert_eq!(e.key, "backend[0].hash_key", "{bad}: {e}");
    }
}

#[test]
fn sticky_is_parsed_defaulted_and_refused_on_tcp_backends() {
    let http = |sticky: &str| {
        format!("{GOOD}[backend.sticky]\n{sticky}")
            .replace("name = \"app\"\n", "name = \"app\"\nmode = \"http\"\n")
            .replace(
                "default_backend = \"app\"\n",
                "default_backend = \"app\"\nmode = \"http\"\n",
            )
    };
    let c = parse(&http("cookie = \"SRV\"\n"), "t.toml").expect("valid");
    let s = c.backends[0].sticky.as_ref().expect("sticky");
    assert_eq!(
        (s.cookie.as_str(), s.path.as_str(), s.domain.as_deref()),
        ("SRV", "/", None)
    );
    assert!(s.httponly && !s.secure && s.nocache, "{s:?}");
    let c = parse(
        &http("cookie = \"S\"\npath = \"/app\"\ndomain = \"example.com\"\nhttponly = false\nsecure = true\nnocache = false\n"),
        "t.toml",
    )
    .expect("valid");
    let s = c.backends[0].sticky.as_ref().expect("sticky");
    assert_eq!((s.path.as_str(), s.domain.as_deref()), ("/app", Some("example.com")));
    assert!(!s.httponly && s.secure && !s.nocache, "{s:?}");
    assert!(parse(GOOD, "t.toml").expect("valid").backends[0].sticky.is_none());

    // A TCP backend has no cookies: refused at the table, with its line and key.
    let tcp = format!("{GOOD}[backend.sticky]\ncookie = \"SRV\"\n");
    let line = GOOD.lines().count() + 1;
    let e = first_error(&tcp);
    assert_eq!((e.line, e.key.as_str()), (line, "backend[0].sticky"), "{e}");
    assert!(
        e.message.contains("HTTP backend") && e.message.contains("source"),
        "{e}"
    );

    for (bad, key) in [
        ("cookie = \"a b\"\n", "backend[0].sticky.cookie"),
        ("cookie = \"\"\n", "backend[0].sticky.cookie"),
        ("cookie = \"S\"\npath = \"/a;b\"\n", "backend[0].sticky.path"),
        ("cookie = \"S\"\ndomain = \"\"\n", "backend[0].sticky.domain"),
    ] {
        let e = first_error(&http(bad));
        assert_eq!(e.key, key, "{bad}: {e}");
    }
    let e = first_error(&http("cookie = \"S\"\nmax_age = 5\n"));
    assert!(e.to_string().contains("max_age"), "unknown keys are refused: {e}");
}

/// `[resolvers]`, host-named addresses and `[[backend.discover]]`: syntax only, nothing is
/// resolved at load.
#[test]
fn dns_keys_are_checked_not_resolved() {
    let c = parse(GOOD, "t.toml").expect("valid");
    let b = &c.backends[0].servers[1];
    assert_eq!(b.host.as_deref(), Some("localhost"), "a name is kept for discovery");
    assert!(b.address.ip().is_unspecified() && b.address.port() == 9002);
    assert_eq!(c.backends[0].servers[0].host, None);
    assert!(c.backends[0].uses_dns());
    assert_eq!(c.resolvers, model::Resolvers::default());

    // A name that no DNS knows still loads: `check` does not resolve.
    let c = parse(&GOOD.replace("localhost:9002", "nowhere.invalid:9002"), "t.toml").expect("valid");
    assert_eq!(c.backends[0].servers[1].host.as_deref(), Some("nowhere.invalid"));
    for bad in ["bad name:80", "a..b:80", "app.example", "app.example:0", "::1:80"] {
        let e = first_error(&GOOD.replace("localhost:9002", bad));
        assert_eq!(e.key, "backend[0].server[1].address", "{bad}: {e}");
    }

    let discover_only = GOOD.replace(
        "[[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:9001\"\nweight = 2\n[[backend.server]]\nname = \"b\"\naddress = \"localhost:9002\"\n",
        "[[backend.discover]]\nsrv = \"_http._tcp.app.example\"\nmaxconn = 10\n\n[resolvers]\nnameservers = [\"127.0.0.1:5353\", \"::1\"]\nresolve_interval = \"500ms\"\ntimeout = \"250ms\"\nattempts = 3\n",
    );
    let c = parse(&discover_only, "t.toml").expect("a backend with only discover is valid");
    assert!(c.backends[0].servers.is_empty());
    assert_eq!(
        c.backends[0].discover,
        [model::Discover {
            srv: "_http._tcp.app.example".into(),
            maxconn: 10
        }]
    );
    assert_eq!(
        c.resolvers.nameservers,
        [
            "127.0.0.1:5353".parse::<std::net::SocketAddr>().unwrap(),
            "[::1]:53".parse().unwrap()
        ]
    );
    assert_eq!(c.resolvers.resolve_interval, std::time::Duration::from_millis(500));
    assert_eq!((c.resolvers.timeout.as_millis(), c.resolvers.attempts), (250, 3));

    for (from, to, key) in [
        (
            "\"127.0.0.1:5353\", \"::1\"",
            "\"dns.example\"",
            "resolvers.nameservers[0]",
        ),
        ("\"127.0.0.1:5353\", \"::1\"", "", "resolvers.nameservers"),
        ("\"500ms\"", "\"1ms\"", "resolvers.resolve_interval"),
        ("attempts = 3", "attempts = 0", "resolvers.attempts"),
        (
            "\"_http._tcp.app.example\"",
            "\"not a name\"",
            "backend[0].discover[0].srv",
        ),
    ] {
        let e = first_error(&discover_only.replace(from, to));
        assert_eq!(e.key, key, "{to}: {e}");
    }
    let twice = discover_only.replace(
        "maxconn = 10\n",
        "maxconn = 10\n[[backend.discover]]\nsrv = \"_HTTP._tcp.app.example\"\n",
    );
    assert_eq!(first_error(&twice).key, "backend[0].discover[1].srv");
    let e = first_error(&discover_only.replace("maxconn = 10", "maxcon = 10"));
    assert!(e.message.contains("unknown field"), "{e}");
}

#[test]
fn queue_options_default_like_haproxy_and_are_read() {
    let c = parse(GOOD, "t.toml").expect("valid");
    assert_eq!(
        c.backends[0].queue,
        model::QueueOptions {
            maxqueue: 0,
            redispatch: true
        }
    );
    let src = GOOD.replace("name = \"app\"", "name = \"app\"\nmaxqueue = 50\nredispatch = false");
    let c = parse(&src, "t.toml").expect("valid");
    assert_eq!(
        c.backends[0].queue,
        model::QueueOptions {
            maxqueue: 50,
            redispatch: false
        }
    );
    let e = first_error(&GOOD.replace("name = \"app\"", "name = \"app\"\nmaxqueue = -1"));
    assert!(e.key.contains("maxqueue"), "{e}");
}

#[test]
fn admin_bind_is_an_ip_and_port() {
    let c = parse(&format!("[admin]\nbind = \"127.0.0.1:9100\"\n{GOOD}"), "t.toml").expect("valid");
    assert_eq!(c.admin.bind, Some("127.0.0.1:9100".parse().expect("addr")));
    assert_eq!(parse(GOOD, "t.toml").expect("valid").admin.bind, None);
    let e = first_error(&format!("[admin]\nbind = \"localhost\"\n{GOOD}"));
    assert_eq!((e.line, e.key.as_str()), (2, "admin.bind"));
    let e = first_error(&format!("[admin]\nstats = true\n{GOOD}"));
    assert_eq!(e.line, 2, "{e}");
}

#[test]
fn stats_auth_is_user_colon_password_and_needs_the_endpoint() {
    let with = |auth: &str| format!("[admin]\nbind = \"127.0.0.1:0\"\nstats_auth = \"{auth}\"\n{GOOD}");
    let c = parse(&with("ops:s3:cret"), "t.toml").expect("valid");
    let auth = c.admin.stats_auth.expect("stats_auth");
    assert_eq!((auth.user.as_str(), auth.password.as_str()), ("ops", "s3:cret"));
    assert!(!format!("{auth:?}").contains("s3:cret"), "Debug hides the password");
    for bad in ["ops", ":pw", "ops:", "", "ops:p\\tw"] {
        let e = first_error(&with(bad));
        assert_eq!((e.line, e.key.as_str()), (3, "admin.stats_auth"), "{bad}: {e}");
    }
    let e = first_error(&format!("[admin]\nstats_auth = \"a:b\"\n{GOOD}"));
    assert!(
        e.key == "admin.stats_auth" && e.to_string().contains("admin.bind"),
        "{e}"
    );
}

#[test]
fn proto_h2_on_servers_offers_alpn_h2_and_needs_http_mode() {
    let server = "name = \"a\"\naddress = \"127.0.0.1:9001\"\n";
    let h2 = "name = \"a\"\naddress = \"127.0.0.1:9001\"\nproto = \"h2\"\ntls = true\nverify = false\n";
    let http = parse(&HTTP_ROUTES.replacen(server, h2, 1), "t.toml").expect("valid");
    let s = &http.backends[0].servers[0];
    assert_eq!(s.proto, crate::config::model::ServerProto::H2);
    let tls = s.tls.as_ref().expect("tls");
    assert_eq!(
        tls.client_config.alpn_protocols,
        vec![b"h2".to_vec()],
        "only h2 is offered"
    );
    let tcp = GOOD.replacen(
        server,
        "name = \"a\"\naddress = \"127.0.0.1:9001\"\nproto = \"h2\"\n",
        1,
    );
    let e = first_error(&tcp);
    assert!(e.key.ends_with(".server[0].proto"), "{e}");
    assert!(e.message.contains("mode = \"http\""), "{e}");
    let e = first_error(&HTTP_ROUTES.replacen(
        server,
        "name = \"a\"\naddress = \"127.0.0.1:9001\"\nproto = \"h3\"\n",
        1,
    ));
    assert!(e.to_string().contains("h3"), "unknown protocol named: {e}");
}

#[test]
fn watch_and_ocsp_fetch_are_read_and_ocsp_fetch_needs_a_responder() {
    let (dir, cert, key) = cert_files("certkeys");
    let c = parse(&tls_frontend("tcp", &cert, &key, "watch = true"), "t.toml").unwrap();
    let files = &c.frontends[0].tls.as_ref().unwrap().files;
    assert!(files[0].watch && !files[0].ocsp_fetch, "{files:?}");
    assert_eq!(files[0].ocsp_path(), std::path::PathBuf::from(format!("{cert}.ocsp")));
    let per_cert = tls_frontend("tcp", &cert, &key, "watch = true").replace(
        &format!("key = \"{key}\"\n"),
        &format!("key = \"{key}\"\nwatch = false\n"),
    );
    let c = parse(&per_cert, "t.toml").unwrap();
    assert!(
        !c.frontends[0].tls.as_ref().unwrap().files[0].watch,
        "the cert's own key wins"
    );
    // A self-signed certificate names no responder and has no issuer to ask about.
    let e = first_error(&tls_frontend("tcp", &cert, &key, "ocsp_fetch = true"));
    assert_eq!(e.key, "frontend[0].tls.cert[0].ocsp_fetch", "{e}");
    assert!(e.message.contains("Authority Information Access"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn frontend_quic_is_parsed_with_defaults() {
    let (dir, cert, key) = cert_files("quic");
    let base = tls_frontend("http", &cert, &key, "");
    let with = |quic: &str| base.replace("[[backend]]", &format!("{quic}\n[[backend]]"));
    // The UDP bind shares the TCP bind's port: the normal case.
    let c = parse(
        &with("[frontend.quic]\nbind = [\"127.0.0.1:8443\", \"[::1]:8443\"]"),
        "t.toml",
    )
    .unwrap();
    let q = c.frontends[0].quic.as_ref().expect("quic");
    assert_eq!(
        q.binds,
        ["127.0.0.1:8443".parse().unwrap(), "[::1]:8443".parse().unwrap()]
    );
    assert!(!q.zero_rtt);
    assert_eq!(q.alt_svc_max_age, std::time::Duration::from_secs(24 * 3600));
    let c = parse(
        &with("[frontend.quic]\nbind = [\"127.0.0.1:443\"]\nzero_rtt = true\nalt_svc_max_age = \"0s\""),
        "t.toml",
    )
    .unwrap();
    let q = c.frontends[0].quic.as_ref().expect("quic");
    assert!(q.zero_rtt);
    assert!(q.alt_svc_max_age.is_zero());
    assert!(parse(&base, "t.toml").unwrap().frontends[0].quic.is_none());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn frontend_quic_refusals_name_the_key() {
    let (dir, cert, key) = cert_files("quic-refused");
    let with = |fe: String, quic: &str| fe.replace("[[backend]]", &format!("{quic}\n[[backend]]"));
    let quic = "[frontend.quic]\nbind = [\"127.0.0.1:8443\"]";
    // (config, key, words in the message)
    let cases = [
        (
            with(tls_frontend("tcp", &cert, &key, ""), quic),
            "frontend[0].quic",
            "http-mode",
        ),
        (
            with(
                tls_frontend("http", &cert, &key, "").replace(
                    &format!("[frontend.tls]\n\n[[frontend.tls.cert]]\ncert = \"{cert}\"\nkey = \"{key}\"\n"),
                    "",
                ),
                quic,
            ),
            "frontend[0].quic",
            "[frontend.tls]",
        ),
        (
            with(tls_frontend("http", &cert, &key, ""), "[frontend.quic]\nbind = []"),
            "frontend[0].quic.bind",
            "at least one",
        ),
        (
            with(
                tls_frontend("http", &cert, &key, ""),
                "[frontend.quic]\nzero_rtt = true",
            ),
            "frontend[0].quic",
            "bind",
        ),
        (
            with(
                tls_frontend("http", &cert, &key, ""),
                "[frontend.quic]\nbind = [\"localhost:443\"]",
            ),
            "frontend[0].quic.bind[0]",
            "not an IP:port",
        ),
        (
            with(
                tls_frontend("http", &cert, &key, ""),
                "[frontend.quic]\nbind = [\"127.0.0.1:443\", \"127.0.0.1:443\"]",
            ),
            "frontend[0].quic.bind[1]",
            "bound twice",
        ),
        (
            with(
                tls_frontend("http", &cert, &key, ""),
                "[frontend.quic]\nbind = [\"127.0.0.1:443\"]\nalt_svc_max_age = \"1 day\"",
            ),
            "frontend[0].quic.alt_svc_max_age",
            "unit",
        ),
        // QUIC is TLS 1.3 with TLS13_AES_128_GCM_SHA256 for its Initial packets.
        (
            with(tls_frontend("http", &cert, &key, "max_version = \"1.2\""), quic),
            "frontend[0].quic",
            "needs TLS 1.3",
        ),
        (
            with(
                tls_frontend("http", &cert, &key, "ciphersuites = [\"TLS13_AES_256_GCM_SHA384\"]"),
                quic,
            ),
            "frontend[0].quic",
            "TLS13_AES_128_GCM_SHA256",
        ),
    ];
    for (src, key, words) in cases {
        let e = first_error(&src);
        assert_eq!(e.key, key, "{e}");
        assert!(e.message.contains(words), "{e}");
    }
    // More threads than a connection ID can name.
    let many = format!(
        "[global]\nworkers = 33\n{}",
        with(tls_frontend("http", &cert, &key, ""), quic)
    );
    let e = first_error(&many);
    assert_eq!((e.line, e.key.as_str()), (2, "global.workers"), "{e}");
    assert!(e.message.contains("at most 32"), "{e}");
    let fits = format!(
        "[global]\nworkers = 32\n{}",
        with(tls_frontend("http", &cert, &key, ""), quic)
    );
    assert!(parse(&fits, "t.toml").is_ok());
    // The same UDP address on two frontends (their TCP binds differ).
    let one = with(tls_frontend("http", &cert, &key, ""), quic);
    let two = one
        .replace("name = \"web\"", "name = \"web2\"")
        .replace("8443\"]\nmode", "8444\"]\nmode");
    let backend_at = two.find("[[backend]]").unwrap();
    let src = format!("{}{}", &one[..one.find("[[backend]]").unwrap()], &two[..backend_at])
        + &one[one.find("[[backend]]").unwrap()..];
    let e = first_error(&src);
    assert_eq!(e.key, "frontend[1].quic.bind[0]", "{e}");
    assert!(e.message.contains("bound twice"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn http3_section_is_checked() {
    let with = |section: &str| format!("{section}\n{GOOD}");
    let c = parse(GOOD, "t.toml").unwrap();
    assert_eq!(c.http3, super::model::Http3::default());
    let c = parse(
        &with(
            "[http3]\nmax_concurrent_streams = 50\nstream_window = \"128KiB\"\nconnection_window = \"4MiB\"\n\
             max_field_section_size = \"16KiB\"\nidle_timeout = \"10s\"\nmax_client_resets = 7\nretry_above = 0",
        ),
        "t.toml",
    )
    .unwrap();
    let h = c.http3;
    assert_eq!(
        (
            h.max_concurrent_streams,
            h.stream_window,
            h.connection_window,
            h.max_field_section_size
        ),
        (50, 128 * 1024, 4 << 20, 16 * 1024)
    );
    assert_eq!(h.idle_timeout, std::time::Duration::from_secs(10));
    assert_eq!((h.max_client_resets, h.retry_above), (7, 0));
    // (section, key, words in the message)
    let cases = [
        (
            "[http3]\nmax_concurrent_streams = 0",
            "http3.max_concurrent_streams",
            "1..=1000",
        ),
        (
            "[http3]\nmax_concurrent_streams = 1001",
            "http3.max_concurrent_streams",
            "1..=1000",
        ),
        ("[http3]\nstream_window = \"1KiB\"", "http3.stream_window", "bytes"),
        (
            "[http3]\nconnection_window = \"4GiB\"",
            "http3.connection_window",
            "bytes",
        ),
        (
            "[http3]\nstream_window = \"2MiB\"\nconnection_window = \"1MiB\"",
            "http3.connection_window",
            "at least http3.stream_window",
        ),
        (
            "[http3]\nstream_window = \"2MiB\"",
            "http3.connection_window",
            "at least",
        ),
        (
            "[http3]\nmax_field_section_size = \"2MiB\"",
            "http3.max_field_section_size",
            "bytes",
        ),
        ("[http3]\nidle_timeout = \"0s\"", "http3.idle_timeout", "greater than 0"),
        (
            "[http3]\nmax_client_resets = 0",
            "http3.max_client_resets",
            "greater than 0",
        ),
        ("[http3]\nretry_above = -1", "http3.retry_above", ""),
        ("[http3]\nmax_streams = 1", "http3.max_streams", "unknown field"),
    ];
    for (section, key, words) in cases {
        let e = first_error(&with(section));
        assert_eq!(e.key, key, "{section}: {e}");
        assert!(e.message.contains(words), "{section}: {e}");
    }
}

#[test]
fn default_toml_still_loads() {
    let a = "127.0.0.1:9001".parse().unwrap();
    let c = embedded_default(DEMO_BIND, a, "127.0.0.1:9002".parse().unwrap()).expect("default.toml loads");
    assert_eq!(c.http3, super::model::Http3::default());
    assert!(c.frontends.iter().all(|f| f.quic.is_none()));
}
