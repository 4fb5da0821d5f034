//! Route actions as the config loader sees them: what is refused, and where.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::config::model::RouteAction;
use crate::config::{ConfigError, parse};

/// An http frontend with one route (`route` as written), a default backend `app`.
fn config(route: &str) -> String {
    format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"app\"\n\n\
         [[frontend.route]]\n{route}\n\n[[backend]]\nname = \"app\"\nmode = \"http\"\n\
         [[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:9001\"\n"
    )
}

/// The route's first line in `config`.
const ROUTE_LINE: usize = 8;

fn first_error(route: &str) -> ConfigError {
    let src = config(route);
    match parse(&src, "t.toml") {
        Ok(_) => panic!("config was accepted:\n{src}"),
        Err(e) => e.0.into_iter().next().expect("an error"),
    }
}

/// The 1-based column of `needle` in the `line`th line (0-based) of `route`.
fn column(route: &str, line: usize, needle: &str) -> usize {
    route.lines().nth(line).and_then(|l| l.find(needle)).expect("needle") + 1
}

fn action(route: &str) -> RouteAction {
    let src = config(route);
    let c = parse(&src, "t.toml").unwrap_or_else(|e| panic!("{e}\n{src}"));
    c.frontends[0].routes[0].action.clone()
}

#[test]
fn hop_by_hop_and_framing_names_are_refused_with_their_position() {
    for (dir, name) in [
        ("request_headers", "Connection"),
        ("request_headers", "Transfer-Encoding"),
        ("request_headers", "TE"),
        ("request_headers", "Upgrade"),
        ("request_headers", "Keep-Alive"),
        ("request_headers", "Proxy-Connection"),
        ("request_headers", "Host"),
        ("response_headers", "Content-Length"),
        ("response_headers", "connection"),
    ] {
        let route = format!("path_prefix = \"/\"\nbackend = \"app\"\n{dir} = {{ set = {{ \"{name}\" = \"x\" }} }}");
        let e = first_error(&route);
        let at = column(&route, 2, &format!("\"{name}\""));
        assert_eq!((e.line, e.column), (ROUTE_LINE + 2, at), "{name}: {e}");
        assert_eq!(e.key, format!("frontend[0].route[0].{dir}.set.{name}"), "{e}");
        assert!(e.message.contains("cannot be edited by a route"), "{e}");
        let route = format!("backend = \"app\"\n{dir} = {{ remove = [\"{name}\"] }}");
        let e = first_error(&route);
        assert!(e.message.contains("cannot be edited"), "{name} in remove: {e}");
        assert_eq!(e.line, ROUTE_LINE + 1, "{e}");
    }
    // The forwarding fields belong to the frontend's `forwarded`, but a route may drop the
    // client's own.
    let e = first_error("backend = \"app\"\nrequest_headers = { add = { \"X-Forwarded-For\" = \"1.2.3.4\" } }");
    assert!(e.message.contains("forwarded"), "{e}");
    assert!(matches!(
        action("backend = \"app\"\nrequest_headers = { remove = [\"X-Forwarded-For\"] }"),
        RouteAction::Backend(0, Some(_))
    ));
}

#[test]
fn a_template_that_would_inject_a_line_is_refused() {
    let route = "backend = \"app\"\nrequest_headers = { set = { \"X-A\" = \"a\\r\\nX-Evil: 1\" } }";
    let e = first_error(route);
    assert_eq!((e.line, e.column), (ROUTE_LINE + 1, column(route, 1, "\"a\\r")), "{e}");
    assert_eq!(e.key, "frontend[0].route[0].request_headers.set.X-A", "{e}");
    assert!(e.message.contains("0x0d"), "{e}");
    let e = first_error("redirect = { to = \"https://{host}\\n{path}\" }");
    assert_eq!(e.line, ROUTE_LINE, "{e}");
    assert!(e.message.contains("0x0a"), "{e}");
    let e = first_error("return = { status = 200, headers = { \"X-A\" = \"a\\u0000\" } }");
    assert!(e.message.contains("0x00"), "{e}");
    let e = first_error("backend = \"app\"\nresponse_headers = { add = { \"X-A\" = \"x\\ry\" } }");
    assert!(e.message.contains("0x0d"), "{e}");
    let e = first_error("redirect = { to = \"https://{hots}{path}\" }");
    assert!(e.message.contains("unknown variable `{hots}`"), "{e}");
    let e = first_error("backend = \"app\"\nrequest_headers = { set = { \"Bad Name\" = \"1\" } }");
    assert!(e.message.contains("not a header field name"), "{e}");
    let e = first_error("backend = \"app\"\nresponse_headers = { set = { \"X-Host\" = \"{host}\" } }");
    assert!(e.message.contains("variables are for requests"), "{e}");
}

#[test]
fn redirects_take_a_template_or_a_scheme_and_a_redirect_status() {
    let RouteAction::Redirect(r) = action("redirect = { scheme = \"https\", status = 301 }") else {
        panic!("not a redirect");
    };
    assert_eq!((r.status, r.location.as_str()), (301, "https://{host}{path_and_query}"));
    let RouteAction::Redirect(r) = action("redirect = { scheme = \"https\", port = 8443 }") else {
        panic!("not a redirect");
    };
    assert_eq!(
        (r.status, r.location.as_str()),
        (302, "https://{host}:8443{path_and_query}")
    );
    let e = first_error("redirect = { to = \"/x\", status = 200 }");
    assert_eq!(
        (e.line, e.key.as_str()),
        (ROUTE_LINE, "frontend[0].route[0].redirect.status"),
        "{e}"
    );
    let e = first_error("redirect = { to = \"/x\", scheme = \"https\" }");
    assert!(e.message.contains("exactly one of `to` or `scheme`"), "{e}");
    let e = first_error("redirect = { scheme = \"ftp\" }");
    assert!(e.message.contains("\"http\" or \"https\""), "{e}");
}

#[test]
fn one_action_per_route_and_rewrites_only_with_a_backend() {
    let e = first_error("backend = \"app\"\ndeny = 403");
    assert_eq!(e.line, ROUTE_LINE, "{e}");
    assert!(e.message.contains("exactly one of"), "{e}");
    let e = first_error("deny = 403\nset_host = \"internal\"");
    assert_eq!(e.key, "frontend[0].route[0].set_host", "{e}");
    assert!(e.message.contains("answers itself"), "{e}");
    let e = first_error("deny = 200");
    assert!(e.message.contains("between 400 and 599"), "{e}");
    let RouteAction::Return(a) = action("deny = {}") else {
        panic!("deny is a proxy-made answer");
    };
    assert_eq!((a.status, &*a.body), (403, &b"Forbidden\n"[..]));
    let RouteAction::Return(a) = action("deny = 451") else {
        panic!("deny is a proxy-made answer");
    };
    assert_eq!(a.status, 451);
}

#[test]
fn path_rewrites_are_checked_and_regexes_compiled_at_load() {
    let e = first_error("backend = \"app\"\nrewrite_path = { regex = \"^/(a\", replace = \"/\" }");
    assert_eq!(e.key, "frontend[0].route[0].rewrite_path.regex", "{e}");
    assert!(e.message.contains("bad regex"), "{e}");
    let e = first_error("backend = \"app\"\nrewrite_path = { regex = \"^/(a)\", replace = \"/$2\" }");
    assert_eq!(e.key, "frontend[0].route[0].rewrite_path.replace", "{e}");
    let e = first_error("backend = \"app\"\nrewrite_path = { prefix = \"api\", to = \"/\" }");
    assert!(e.message.contains("must start with `/`"), "{e}");
    let e = first_error("backend = \"app\"\nrewrite_path = { prefix = \"/api\", regex = \"x\" }");
    assert!(e.message.contains("needs `prefix` and `to`"), "{e}");
    let e = first_error("backend = \"app\"\nset_host = \"bad host\"");
    assert!(e.message.contains("not a host name"), "{e}");
    assert!(matches!(
        action("backend = \"app\"\nset_host = \"internal.example:8080\"\nrewrite_path = { prefix = \"/api\", to = \"/\" }"),
        RouteAction::Backend(0, Some(r)) if r.host.as_deref() == Some(&b"internal.example:8080"[..])
    ));
}

#[test]
fn return_body_files_are_read_at_load_relative_to_the_config() {
    let dir = std::env::temp_dir().join(format!("tollgate-route-action-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("maintenance.html"), b"<h1>back soon</h1>\n").unwrap();
    let route = "return = { status = 503, body_file = \"maintenance.html\", content_type = \"text/html\", \
                 headers = { \"Retry-After\" = \"120\" } }";
    std::fs::write(dir.join("ok.toml"), config(route)).unwrap();
    let c = crate::config::load(&dir.join("ok.toml")).unwrap_or_else(|e| panic!("{e}"));
    let RouteAction::Return(a) = &c.frontends[0].routes[0].action else {
        panic!("not a return");
    };
    assert_eq!(&*a.body, b"<h1>back soon</h1>\n");
    assert_eq!(
        a.headers,
        [("Retry-After".to_string(), b"120".to_vec().into_boxed_slice())]
    );
    std::fs::write(
        dir.join("missing.toml"),
        config("return = { status = 503, body_file = \"nope.html\" }"),
    )
    .unwrap();
    let e = crate::config::load(&dir.join("missing.toml")).unwrap_err().0.remove(0);
    assert_eq!(
        (e.line, e.key.as_str()),
        (ROUTE_LINE, "frontend[0].route[0].return.body_file"),
        "{e}"
    );
    assert!(
        e.message.contains("cannot read") && e.message.contains("nope.html"),
        "{e}"
    );
    let big = vec![b'x'; super::MAX_BODY_FILE as usize + 1];
    std::fs::write(dir.join("big.html"), big).unwrap();
    std::fs::write(
        dir.join("big.toml"),
        config("return = { status = 503, body_file = \"big.html\" }"),
    )
    .unwrap();
    let e = crate::config::load(&dir.join("big.toml")).unwrap_err().0.remove(0);
    assert!(e.message.contains("limit"), "{e}");
    let e = first_error("return = { status = 200, body = \"a\", body_file = \"b\" }");
    assert!(e.message.contains("not both"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn actions_other_than_backend_need_an_http_frontend() {
    let tcp = |route: &str| {
        format!(
            "[[frontend]]\nname = \"t\"\nbind = [\"127.0.0.1:0\"]\nmode = \"tcp\"\ndefault_backend = \"app\"\n\n\
             [[frontend.route]]\n{route}\n\n[[backend]]\nname = \"app\"\nmode = \"tcp\"\n\
             [[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:9001\"\n"
        )
    };
    for (route, key) in [
        ("sni = \"a.example\"\nredirect = { scheme = \"https\" }", "redirect"),
        ("sni = \"a.example\"\nbackend = \"app\"\nset_host = \"x\"", "set_host"),
        (
            "sni = \"a.example\"\nbackend = \"app\"\nrequest_headers = { remove = [\"x\"] }",
            "request_headers",
        ),
    ] {
        let src = tcp(route);
        let e = parse(&src, "t.toml").map(|_| ()).unwrap_err().0.remove(0);
        assert_eq!(e.key, format!("frontend[0].route[0].{key}"), "{e}");
        assert!(e.message.contains("needs an http-mode frontend"), "{e}");
        let at = route.lines().position(|l| l.starts_with(key)).unwrap();
        assert_eq!(e.line, ROUTE_LINE + at, "{e}");
    }
    // `deny` works in TCP mode, as `deny = true` only.
    let e = parse(&tcp("sni = \"a.example\"\ndeny = 403"), "t.toml")
        .unwrap_err()
        .0
        .remove(0);
    assert_eq!(
        (e.key.as_str(), e.line),
        ("frontend[0].route[0].deny", ROUTE_LINE + 1),
        "{e}"
    );
    assert!(e.message.contains("`deny = true`"), "{e}");
    assert!(parse(&tcp("sni = \"a.example\"\ndeny = true"), "t.toml").is_ok());
}

#[test]
fn a_204_or_304_return_has_no_content() {
    let e = first_error("return = { status = 204, body = \"x\" }");
    assert!(e.message.contains("a 204 response has no content"), "{e}");
    let e = first_error("return = { status = 304, content_type = \"text/html\" }");
    assert!(e.message.contains("a 304 response has no content"), "{e}");
    let RouteAction::Return(a) = action("return = { status = 204 }") else {
        panic!("not a return")
    };
    assert!(a.content_type.is_empty() && a.body.is_empty());
    let mut out = Vec::new();
    crate::http::h1::write_made_response(204, Some(b""), [], &[], (true, false), &mut out);
    assert_eq!(out, b"HTTP/1.1 204 No Content\r\n\r\n");
}
