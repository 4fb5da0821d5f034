#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::net::IpAddr;

use proptest::prelude::*;

use super::*;
use crate::config::Frontend;

/// A request as the tests write it.
#[derive(Debug, Clone)]
struct Req {
    method: &'static str,
    host: Option<&'static str>,
    path: &'static str,
    query: Option<&'static str>,
    headers: Vec<(&'static str, &'static str)>,
    source: IpAddr,
    scheme: Scheme,
    sni: Option<&'static str>,
}

impl Default for Req {
    fn default() -> Self {
        Req {
            method: "GET",
            host: Some("a.example"),
            path: "/",
            query: None,
            headers: Vec::new(),
            source: IpAddr::from([127, 0, 0, 1]),
            scheme: Scheme::Http,
            sni: None,
        }
    }
}

struct ReqHeaders<'r>(&'r [(&'static str, &'static str)]);

impl Headers for ReqHeaders<'_> {
    fn any_value(&self, name: &str, test: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        self.0
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .any(|(_, v)| test(v.as_bytes()))
    }
}

fn with_view<R>(req: &Req, f: impl FnOnce(&RequestView<'_>) -> R) -> R {
    let headers = ReqHeaders(&req.headers);
    let view = RequestView {
        method: req.method.as_bytes(),
        host: req.host,
        path: req.path.as_bytes(),
        query: req.query.map(str::as_bytes),
        scheme: req.scheme,
        source: req.source,
        sni: req.sni,
        client_cert: false,
        headers: &headers,
    };
    f(&view)
}

fn frontend(routes: &str) -> Frontend {
    let text = format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8080\"]\nmode = \"http\"\ndefault_backend = \"app\"\n{routes}\n\
         [[backend]]\nname = \"app\"\nmode = \"http\"\n[[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:9001\"\n"
    );
    match crate::config::parse(&text, "t.toml") {
        Ok(c) => c.frontends.into_iter().next().unwrap(),
        Err(e) => panic!("{e}\n{text}"),
    }
}

fn matched(fe: &Frontend, req: &Req) -> Option<usize> {
    with_view(req, |v| {
        let indexed = fe.routes.first_match(v);
        assert_eq!(indexed, fe.routes.first_match_in_order(v), "{req:?}");
        indexed
    })
}

#[test]
fn each_condition_kind() {
    let fe = frontend(
        r#"
[[frontend.matcher]]
name = "api"
host = ["api.example", "*.api.example"]
path_prefix = "/api/"

[[frontend.route]]
matcher = "api"
not = { method = ["DELETE", "PUT"] }
backend = "app"

[[frontend.route]]
path = "/exact"
query = { name = "v", value = "2" }
backend = "app"

[[frontend.route]]
path_regex = "^/users/[0-9]+$"
header = { name = "X-Beta", prefix = "yes" }
backend = "app"

[[frontend.route]]
cookie = { name = "sid", value = "7" }
source = ["10.0.0.0/8", "2001:db8::/32"]
backend = "app"

[[frontend.route]]
scheme = "https"
header = { name = "user-agent", regex = "^curl/" }
backend = "app"

[[frontend.route]]
query = { name = "debug" }
header = { name = "x-trace" }
backend = "app"
"#,
    );
    let r = |f: fn(&mut Req)| {
        let mut req = Req::default();
        f(&mut req);
        matched(&fe, &req)
    };
    assert_eq!(
        r(|q| {
            q.host = Some("eu.api.example");
            q.path = "/api/x";
        }),
        Some(0)
    );
    assert_eq!(
        r(|q| {
            q.host = Some("api.example");
            q.path = "/api/x";
            q.method = "DELETE";
        }),
        None
    );
    assert_eq!(r(|q| q.host = Some("api.example")), None, "prefix missing");
    assert_eq!(
        r(|q| {
            q.path = "/exact";
            q.query = Some("a=1&v=2");
        }),
        Some(1)
    );
    assert_eq!(
        r(|q| {
            q.path = "/exact";
            q.query = Some("v=20");
        }),
        None
    );
    assert_eq!(r(|q| q.path = "/exact/"), None, "path is exact");
    assert_eq!(
        r(|q| {
            q.path = "/users/42";
            q.headers = vec![("x-beta", "no"), ("X-BETA", "yes please")];
        }),
        Some(2),
        "any field of the name may match"
    );
    assert_eq!(
        r(|q| {
            q.path = "/users/42x";
            q.headers = vec![("x-beta", "yes")];
        }),
        None
    );
    assert_eq!(
        r(|q| {
            q.headers = vec![("cookie", "a=1; sid=7")];
            q.source = "10.9.8.7".parse().unwrap();
        }),
        Some(3)
    );
    assert_eq!(
        r(|q| {
            q.headers = vec![("cookie", "sid=7")];
            q.source = "::ffff:10.0.0.1".parse().unwrap();
        }),
        Some(3),
        "an IPv4-mapped client is its IPv4 address"
    );
    assert_eq!(
        r(|q| {
            q.headers = vec![("cookie", "sid=7")];
            q.source = "2001:db8::1".parse().unwrap();
        }),
        Some(3)
    );
    assert_eq!(
        r(|q| {
            q.headers = vec![("cookie", "sid=8")];
            q.source = "10.0.0.1".parse().unwrap();
        }),
        None
    );
    assert_eq!(
        r(|q| {
            q.scheme = Scheme::Https;
            q.headers = vec![("user-agent", "curl/8.0")];
        }),
        Some(4)
    );
    assert_eq!(r(|q| q.headers = vec![("user-agent", "curl/8.0")]), None, "scheme http");
    assert_eq!(
        r(|q| {
            q.query = Some("x&debug");
            q.headers = vec![("x-trace", "")];
        }),
        Some(5)
    );
    assert_eq!(r(|q| q.query = Some("debug=1")), None, "x-trace absent");
}

#[test]
fn first_matching_route_decides_whatever_the_index() {
    // Route 0 has no key (header only), route 1 a host, route 2 a prefix: the lowest
    // matching index wins even when a keyed lookup finds a later route first.
    let fe = frontend(
        r#"
[[frontend.route]]
header = { name = "x-a" }
backend = "app"
[[frontend.route]]
host = "a.example"
backend = "app"
[[frontend.route]]
path_prefix = "/"
backend = "app"
[[frontend.route]]
path_regex = "."
backend = "app"
"#,
    );
    let mut req = Req {
        headers: vec![("x-a", "1")],
        ..Req::default()
    };
    assert_eq!(matched(&fe, &req), Some(0));
    req.headers.clear();
    assert_eq!(matched(&fe, &req), Some(1));
    req.host = Some("b.example");
    assert_eq!(matched(&fe, &req), Some(2));
    req.path = "x";
    assert_eq!(matched(&fe, &req), Some(3));
}

#[test]
fn a_backtracking_shaped_regex_runs_in_linear_time() {
    let fe = frontend("[[frontend.route]]\npath_regex = \"^/(a+)+$\"\nbackend = \"app\"\n");
    let path: &'static str = Box::leak(format!("/{}b", "a".repeat(4096)).into_boxed_str());
    let began = std::time::Instant::now();
    for _ in 0..100 {
        assert_eq!(matched(&fe, &Req { path, ..Req::default() }), None);
    }
    assert!(
        began.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    let ok: &'static str = Box::leak(format!("/{}", "a".repeat(4096)).into_boxed_str());
    assert_eq!(
        matched(
            &fe,
            &Req {
                path: ok,
                ..Req::default()
            }
        ),
        Some(0)
    );
}

#[test]
fn cidr_blocks() {
    let c = Cidr::parse("10.0.0.0/8").unwrap();
    assert!(c.contains("10.255.0.1".parse().unwrap()) && !c.contains("11.0.0.1".parse().unwrap()));
    assert!(!c.contains("::1".parse().unwrap()));
    assert!(Cidr::parse("0.0.0.0/0").unwrap().contains("1.2.3.4".parse().unwrap()));
    assert!(Cidr::parse("::/0").unwrap().contains("::1".parse().unwrap()));
    assert!(Cidr::parse("::1").unwrap().contains("::1".parse().unwrap()));
    assert!(Cidr::parse("10.0.0.1/8").unwrap_err().contains("bits set past /8"));
    assert!(Cidr::parse("10.0.0.0/33").is_err());
    assert!(Cidr::parse("10.0.0/8").is_err());
}

// The property: over random routes and requests, the compiled table picks exactly the
// route a naive walk picks, where the walk checks each condition with its own code here.

type Check = fn(&Req) -> bool;

/// (key, TOML value, what it means).
const CONDS: &[(&str, &str, Check)] = &[
    ("host", r#""a.example""#, |r| r.host == Some("a.example")),
    ("host", r#"["b.example", "*.example"]"#, |r| {
        r.host == Some("b.example")
            || r.host.is_some_and(|h| {
                h.strip_suffix(".example")
                    .is_some_and(|l| !l.is_empty() && !l.contains('.'))
            })
    }),
    ("path", r#""/a""#, |r| r.path == "/a"),
    ("path_prefix", r#""/a""#, |r| r.path.starts_with("/a")),
    ("path_prefix", r#"["/b", "/a/b"]"#, |r| {
        r.path.starts_with("/b") || r.path.starts_with("/a/b")
    }),
    ("path_regex", r#""^/a/[0-9]+$""#, |r| {
        r.path
            .strip_prefix("/a/")
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    }),
    ("path_regex", r#"["b$", "^/(a+)+$"]"#, |r| {
        r.path.ends_with('b')
            || r.path
                .strip_prefix('/')
                .is_some_and(|a| !a.is_empty() && a.bytes().all(|b| b == b'a'))
    }),
    ("method", r#"["GET", "HEAD"]"#, |r| {
        r.method == "GET" || r.method == "HEAD"
    }),
    ("query", r#"{ name = "v", value = "2" }"#, |r| {
        r.query.is_some_and(|q| q.split('&').any(|p| p == "v=2"))
    }),
    ("query", r#"{ name = "debug" }"#, |r| {
        r.query
            .is_some_and(|q| q.split('&').any(|p| p.split('=').next() == Some("debug")))
    }),
    ("header", r#"{ name = "x-beta", value = "1" }"#, |r| {
        has_header(r, |v| v == "1")
    }),
    ("header", r#"{ name = "X-Beta", prefix = "1" }"#, |r| {
        has_header(r, |v| v.starts_with('1'))
    }),
    ("header", r#"{ name = "x-beta", regex = "^[0-9]+$" }"#, |r| {
        has_header(r, |v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
    }),
    ("header", r#"{ name = "x-beta" }"#, |r| has_header(r, |_| true)),
    ("cookie", r#"{ name = "sid" }"#, |r| cookies(r).any(|(n, _)| n == "sid")),
    ("cookie", r#"{ name = "sid", value = "7" }"#, |r| {
        cookies(r).find(|(n, _)| *n == "sid").is_some_and(|(_, v)| v == "7")
    }),
    ("source", r#"["10.0.0.0/8", "::1/128"]"#, |r| match r.source {
        IpAddr::V4(v4) => v4.octets()[0] == 10,
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.octets()[0] == 10),
    }),
    ("scheme", r#""https""#, |r| r.scheme == Scheme::Https),
    ("matcher", r#""m0""#, matcher0),
    ("matchers", r#"["m0", "m1"]"#, |r| matcher0(r) && matcher1(r)),
    // A matcher of one regex, used by many routes (a matcher's regex keys no route).
    ("matcher", r#""m2""#, |r| r.path.starts_with("/a/")),
];

const MATCHERS: &str = r#"
[[frontend.matcher]]
name = "m0"
host = "a.example"
path_prefix = "/a"

[[frontend.matcher]]
name = "m1"
header = { name = "x-beta" }
not = { path_regex = "b$" }

[[frontend.matcher]]
name = "m2"
path_regex = "^/a/"
"#;

fn matcher0(r: &Req) -> bool {
    r.host == Some("a.example") && r.path.starts_with("/a")
}

fn matcher1(r: &Req) -> bool {
    has_header(r, |_| true) && !r.path.ends_with('b')
}

fn has_header(r: &Req, f: impl Fn(&str) -> bool) -> bool {
    r.headers.iter().any(|(n, v)| n.eq_ignore_ascii_case("x-beta") && f(v))
}

fn cookies(r: &Req) -> impl Iterator<Item = (&str, &str)> {
    r.headers
        .iter()
        .filter(|(n, _)| *n == "cookie")
        .flat_map(|(_, v)| v.split(';'))
        .filter_map(|p| p.trim().split_once('='))
}

/// A route: condition indexes (distinct keys), and an optional negated one.
#[derive(Debug, Clone)]
struct GenRoute {
    conds: Vec<usize>,
    not: Option<usize>,
}

fn gen_route() -> impl Strategy<Value = GenRoute> {
    (
        prop::collection::vec(0..CONDS.len(), 0..3),
        prop::option::of(0..CONDS.len()),
    )
        .prop_map(|(mut conds, not)| {
            let mut seen = Vec::new();
            conds.retain(|&c| {
                let key = CONDS[c].0;
                let fresh = !seen.contains(&key);
                seen.push(key);
                fresh
            });
            GenRoute { conds, not }
        })
}

fn gen_req() -> impl Strategy<Value = Req> {
    let hosts = prop::sample::select(vec![
        None,
        Some("a.example"),
        Some("b.example"),
        Some("x.example"),
        Some("x.y.example"),
    ]);
    let paths = prop::sample::select(vec!["/", "/a", "/a/b", "/a/123", "/aaaa", "/b", "/ab", "/a/1b"]);
    let queries = prop::sample::select(vec![None, Some("v=2"), Some("debug"), Some("v=3&debug=1"), Some("")]);
    let methods = prop::sample::select(vec!["GET", "POST", "HEAD"]);
    let header_sets = prop::sample::select(vec![
        vec![],
        vec![("x-beta", "1")],
        vec![("X-Beta", "12"), ("x-beta", "a")],
        vec![("x-beta", "no")],
        vec![("cookie", "sid=7")],
        vec![("cookie", "a=1; sid=8"), ("x-beta", "")],
    ]);
    let sources = prop::sample::select(vec!["127.0.0.1", "10.1.2.3", "::1", "::ffff:10.0.0.1", "192.0.2.1"]);
    let schemes = prop::sample::select(vec![Scheme::Http, Scheme::Https]);
    (hosts, paths, queries, methods, header_sets, sources, schemes).prop_map(
        |(host, path, query, method, headers, source, scheme)| Req {
            method,
            host,
            path,
            query,
            headers,
            source: source.parse().unwrap(),
            scheme,
            sni: None,
        },
    )
}

fn toml_of(routes: &[GenRoute]) -> String {
    let mut out = String::from(MATCHERS);
    for r in routes {
        out.push_str("\n[[frontend.route]]\n");
        for &c in &r.conds {
            out.push_str(&format!("{} = {}\n", CONDS[c].0, CONDS[c].1));
        }
        if let Some(n) = r.not {
            out.push_str(&format!("not = {{ {} = {} }}\n", CONDS[n].0, CONDS[n].1));
        }
        out.push_str("backend = \"app\"\n");
    }
    out
}

/// Whether `not = { <cond> }` holds: none of its conditions does (each matcher of a
/// `matchers` list is one condition).
fn naive_not(c: usize, req: &Req) -> bool {
    match CONDS[c].0 {
        "matchers" => !matcher0(req) && !matcher1(req),
        _ => !(CONDS[c].2)(req),
    }
}

fn naive(routes: &[GenRoute], req: &Req) -> Option<usize> {
    routes
        .iter()
        .position(|r| r.conds.iter().all(|&c| (CONDS[c].2)(req)) && r.not.is_none_or(|n| naive_not(n, req)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn compiled_decision_is_the_naive_first_match(
        routes in prop::collection::vec(gen_route(), 1..40),
        reqs in prop::collection::vec(gen_req(), 1..20),
    ) {
        let fe = frontend(&toml_of(&routes));
        for req in &reqs {
            let got = with_view(req, |v| fe.routes.first_match(v));
            prop_assert_eq!(got, naive(&routes, req), "{:?}\n{}", req, toml_of(&routes));
        }
    }
}

/// The first error of a config whose only frontend has `routes`: (line, column, key, message).
fn refusal(routes: &str) -> (usize, usize, String, String) {
    let text = format!(
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:8080\"]\nmode = \"http\"\ndefault_backend = \"app\"\n{routes}\n\
         [[backend]]\nname = \"app\"\nmode = \"http\"\n[[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:9001\"\n"
    );
    match crate::config::parse(&text, "t.toml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => {
            let e = e.0.into_iter().next().unwrap();
            (e.line, e.column, e.key, e.message)
        }
    }
}

#[test]
fn bad_conditions_are_refused_where_they_are_written() {
    // Line 6 is the first line after the frontend's keys.
    let cases: &[(&str, usize, usize, &str, &str)] = &[
        (
            "[[frontend.route]]\npath_regex = \"^/(unclosed\"\nbackend = \"app\"",
            7,
            14,
            "frontend[0].route[0].path_regex",
            "regex `^/(unclosed`",
        ),
        (
            "[[frontend.route]]\npath_regex = \"(a{1000}){1000}\"\nbackend = \"app\"",
            7,
            14,
            "frontend[0].route[0].path_regex",
            "compiles to more than",
        ),
        (
            "[[frontend.route]]\nheader = { name = \"ua\", regex = \"\\\\w{1000}{1000}\" }\nbackend = \"app\"",
            7,
            33,
            "frontend[0].route[0].header.regex",
            "compiles to more than",
        ),
        (
            "[[frontend.route]]\nsource = [\"10.0.0.0/8\", \"10.0.0.1/33\"]\nbackend = \"app\"",
            7,
            10,
            "frontend[0].route[0].source",
            "prefix length",
        ),
        (
            "[[frontend.route]]\nsource = \"192.168.1.1/16\"\nbackend = \"app\"",
            7,
            10,
            "frontend[0].route[0].source",
            "bits set past /16",
        ),
        (
            "[[frontend.route]]\nsource = \"localhost\"\nbackend = \"app\"",
            7,
            10,
            "frontend[0].route[0].source",
            "not an IP address",
        ),
        (
            "[[frontend.route]]\nmatcher = \"nope\"\nbackend = \"app\"",
            7,
            11,
            "frontend[0].route[0].matcher",
            "no [[frontend.matcher]] named `nope`",
        ),
        (
            "[[frontend.route]]\nmatchers = [\"nope\"]\nbackend = \"app\"",
            7,
            13,
            "frontend[0].route[0].matchers[0]",
            "named `nope`",
        ),
        (
            "[[frontend.route]]\nnot = {}\nbackend = \"app\"",
            7,
            7,
            "frontend[0].route[0].not",
            "at least one condition",
        ),
        (
            "[[frontend.route]]\nnot = { not = { host = \"a.example\" } }\nbackend = \"app\"",
            7,
            9,
            "frontend[0].route[0].not.not",
            "unknown field `not`",
        ),
        (
            "[[frontend.route]]\nheader = { name = \"x\", value = \"1\", prefix = \"1\" }\nbackend = \"app\"",
            7,
            46,
            "frontend[0].route[0].header.prefix",
            "at most one of",
        ),
        (
            "[[frontend.route]]\nmethod = [\"GET\", \"post\"]\nbackend = \"app\"",
            7,
            10,
            "frontend[0].route[0].method",
            "write `POST`",
        ),
        (
            "[[frontend.route]]\npath = \"api\"\nbackend = \"app\"",
            7,
            8,
            "frontend[0].route[0].path",
            "must start with `/`",
        ),
        (
            "[[frontend.route]]\npath_prefix = \"/a?b=1\"\nbackend = \"app\"",
            7,
            15,
            "frontend[0].route[0].path_prefix",
            "match the query with `query`",
        ),
        (
            "[[frontend.route]]\nhost = []\nbackend = \"app\"",
            7,
            8,
            "frontend[0].route[0].host",
            "at least one",
        ),
        (
            "[[frontend.route]]\nscheme = \"ftp\"\nbackend = \"app\"",
            7,
            10,
            "frontend[0].route[0].scheme",
            "unknown variant",
        ),
        (
            "[[frontend.route]]\nsni = \"a.example\"\nbackend = \"app\"",
            7,
            7,
            "frontend[0].route[0].sni",
            "needs `[frontend.tls]`",
        ),
        (
            "[[frontend.matcher]]\nname = \"m\"\nhost = \"a.example\"\n[[frontend.matcher]]\nname = \"m\"\npath = \"/\"",
            10,
            8,
            "frontend[0].matcher[1].name",
            "defined twice",
        ),
        (
            "[[frontend.matcher]]\nname = \"m\"\nnot = { matcher = \"m\" }",
            8,
            19,
            "frontend[0].matcher[0].not.matcher",
            "cannot use another matcher",
        ),
        (
            "[[frontend.matcher]]\nname = \"m\"\nmatcher = \"x\"",
            8,
            1,
            "frontend[0].matcher[0].matcher",
            "unknown field `matcher`",
        ),
        (
            "[[frontend.matcher]]\nname = \"m\"",
            7,
            8,
            "frontend[0].matcher[0]",
            "at least one condition",
        ),
    ];
    for &(routes, line, column, key, message) in cases {
        let (l, c, k, m) = refusal(routes);
        assert!(
            (l, c, k.as_str()) == (line, column, key) && m.contains(message),
            "{routes}\n  got {l}:{c} {k}: {m}\n want {line}:{column} {key}: {message}"
        );
    }
}

#[test]
fn tcp_mode_routes_take_only_sni_and_source() {
    let text = "[[frontend]]\nname = \"t\"\nbind = [\"127.0.0.1:8443\"]\nmode = \"tcp\"\ndefault_backend = \"app\"\n\
                [[frontend.route]]\nsni = [\"a.example\", \"*.b.example\"]\npath = \"/x\"\nbackend = \"app\"\n\
                [[backend]]\nname = \"app\"\n[[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:9001\"\n";
    let e = crate::config::parse(text, "t.toml").unwrap_err().0.remove(0);
    assert_eq!((e.line, e.key.as_str()), (8, "frontend[0].route[0].path"), "{e}");
    assert!(e.message.contains("needs an http-mode frontend"), "{e}");
    let with_source = text.replace("path = \"/x\"\n", "source = \"10.0.0.0/8\"\n");
    assert!(crate::config::parse(&with_source, "t.toml").is_ok());
    let ok = text.replace("path = \"/x\"\n", "");
    let c = crate::config::parse(&ok, "t.toml").unwrap();
    let sni = c.frontends[0].sni_routes.as_ref().unwrap();
    assert_eq!(sni.lookup("a.example"), Some(0));
    assert_eq!(sni.lookup("x.b.example"), Some(0));
    assert_eq!(sni.lookup("b.example"), None);
}
