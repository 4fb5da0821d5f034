//! Route decision cost against the number of routes (issue 14): a frontend of 10 routes
//! and one of 1,000 (exact hosts, wildcard hosts, path prefixes, exact paths, two path
//! regexes, two routes on headers only), asked for a request that matches the last
//! host-keyed route, one that matches a regex route, and one that matches nothing. The
//! goal: 1,000 routes cost at most twice what 10 do. Before the criterion runs, `main`
//! counts heap allocations over many decisions (the table must allocate nothing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{Criterion, criterion_group};
use tollgate::config::Frontend;
use tollgate::config::route::{Headers, RequestView, Scheme};

#[global_allocator]
static GLOBAL: tollgate_sys::alloc_count::CountingAlloc = tollgate_sys::alloc_count::CountingAlloc;

/// A frontend of `n` routes (n >= 10): header-only routes first, regex routes in the
/// middle, the rest keyed by host, wildcard host, prefix or path.
fn frontend(n: usize) -> Frontend {
    let mut text = String::from(
        "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
         [[frontend.route]]\nheader = { name = \"x-debug\" }\nbackend = \"be\"\n\
         [[frontend.route]]\nheader = { name = \"x-canary\", value = \"1\" }\nmethod = \"POST\"\nbackend = \"be\"\n",
    );
    for i in 2..n {
        let cond = if i == n / 2 {
            r#"path_regex = "^/users/[0-9]+/orders$""#.to_string()
        } else if i == n / 2 + 1 {
            r#"path_regex = ["^/v[0-9]+/items/[a-z0-9-]+$", "\\.php$"]"#.to_string()
        } else {
            match i % 4 {
                0 => format!("host = \"h{i}.example\""),
                1 => format!("host = \"*.w{i}.example\"\npath_prefix = \"/x\""),
                2 => format!("path_prefix = \"/p{i}/\""),
                _ => format!("path = \"/exact/{i}\"\nmethod = [\"GET\", \"HEAD\"]"),
            }
        };
        text.push_str(&format!("[[frontend.route]]\n{cond}\nbackend = \"be\"\n"));
    }
    text.push_str(
        "[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:9\"\n",
    );
    let config = tollgate::config::parse(&text, "bench.toml").unwrap();
    assert_eq!(config.frontends[0].routes.len(), n);
    config.frontends.into_iter().next().unwrap()
}

/// A typical request's fields: nine of them, none a route looks for.
struct Fields;

const FIELDS: &[(&str, &[u8])] = &[
    ("host", b"h.example"),
    ("user-agent", b"Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0"),
    ("accept", b"application/json, text/plain, */*"),
    ("accept-language", b"en-US,en;q=0.5"),
    ("accept-encoding", b"gzip, deflate, br"),
    ("connection", b"keep-alive"),
    ("cookie", b"session=abc123"),
    ("referer", b"https://example.com/"),
    ("x-request-id", b"7f9c2ba4e88f827"),
];

impl Headers for Fields {
    fn any_value(&self, name: &str, test: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        FIELDS.iter().any(|(n, v)| n.eq_ignore_ascii_case(name) && test(v))
    }
}

fn view<'a>(host: &'a str, path: &'a str) -> RequestView<'a> {
    RequestView {
        method: b"GET",
        host: Some(host),
        path: path.as_bytes(),
        query: None,
        scheme: Scheme::Http,
        source: IpAddr::from([192, 0, 2, 1]),
        sni: None,
        client_cert: false,
        headers: &Fields,
    }
}

/// (name, host, path, the route it must match) for a frontend of `n` routes.
fn requests(n: usize) -> Vec<(&'static str, String, String, Option<usize>)> {
    let last_host = (2..n)
        .rev()
        .find(|i| i % 4 == 0 && *i != n / 2 && *i != n / 2 + 1)
        .unwrap();
    vec![
        (
            "last_host",
            format!("h{last_host}.example"),
            "/a/b/c".to_string(),
            Some(last_host),
        ),
        (
            "regex",
            "other.example".to_string(),
            "/users/42/orders".to_string(),
            Some(n / 2),
        ),
        (
            "no_match",
            "other.example".to_string(),
            "/nothing/here".to_string(),
            None,
        ),
    ]
}

fn count_allocations() {
    for n in [10, 1000] {
        let fe = frontend(n);
        for (name, host, path, want) in requests(n) {
            let v = view(&host, &path);
            assert_eq!(fe.routes.first_match(&v), want, "{n} routes, {name}");
            const N: u64 = 10_000;
            let before = tollgate_sys::alloc_count::allocations();
            for _ in 0..N {
                black_box(fe.routes.first_match(black_box(&v)));
            }
            let allocs = tollgate_sys::alloc_count::allocations() - before;
            println!("route decision, {n} routes, {name}: {allocs} allocations in {N} decisions");
        }
    }
}

fn benches(c: &mut Criterion) {
    for n in [10, 1000] {
        let fe = frontend(n);
        for (name, host, path, _) in requests(n) {
            let v = view(&host, &path);
            c.bench_function(&format!("route_decision/{n}_routes/{name}"), |b| {
                b.iter(|| fe.routes.first_match(black_box(&v)))
            });
        }
    }
}

criterion_group!(route, benches);

fn main() {
    count_allocations();
    route();
    Criterion::default().configure_from_args().final_summary();
}
