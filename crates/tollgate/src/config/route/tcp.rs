//! TCP-mode routing: what a connection's source address and (if a route needs it) its SNI
//! decide. Routes take `source`, `sni`, or both, and `backend` or `deny = true`.
//!
//! The order, which validation keeps the same as the file's (`config::validate`):
//! 1. at accept, before any byte is read: routes with `source` and no `sni`, in order;
//! 2. once the SNI is known: the `sni` route its name matches (exact before wildcard), if
//!    that route's `source` (when it has one) holds;
//! 3. the route with no condition, else `default_backend` (unless `reject_unknown_sni`).

use std::net::IpAddr;

use super::Cond;
use crate::config::model::{Frontend, Route, RouteAction};

/// Where a TCP connection goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpTarget {
    Backend(usize),
    /// A `deny = true` route: close now.
    Close,
}

/// The route's `source` blocks hold `client` (true when it has none).
fn source_holds(r: &Route, client: IpAddr) -> bool {
    r.when.0.iter().all(|c| match c {
        Cond::Source(blocks) => blocks.contains(client),
        _ => true,
    })
}

fn has_source(r: &Route) -> bool {
    r.when.0.iter().any(|c| matches!(c, Cond::Source(_)))
}

fn target(r: &Route) -> Option<TcpTarget> {
    match &r.action {
        RouteAction::Backend(b, _) => Some(TcpTarget::Backend(*b)),
        RouteAction::Close => Some(TcpTarget::Close),
        RouteAction::Return(_) | RouteAction::Redirect(_) => None,
    }
}

/// Step 1: the first source-only route whose blocks hold `client`, with its index.
pub fn at_accept(fe: &Frontend, client: IpAddr) -> Option<(usize, TcpTarget)> {
    fe.routes
        .iter()
        .enumerate()
        .filter(|(_, r)| has_source(r) && r.when.sni().is_none())
        .find(|(_, r)| source_holds(r, client))
        .and_then(|(i, r)| Some((i, target(r)?)))
}

/// Steps 2 and 3 (step 1 found nothing): `None` when nothing takes the connection.
pub fn after_sni(fe: &Frontend, client: IpAddr, sni: Option<&str>) -> Option<TcpTarget> {
    routed_after_sni(fe, client, sni).map(|(_, t)| t)
}

/// `after_sni`, with the index of the route that decided (`None`: the default backend).
pub fn routed_after_sni(fe: &Frontend, client: IpAddr, sni: Option<&str>) -> Option<(Option<usize>, TcpTarget)> {
    let by_name = fe
        .sni_routes
        .as_ref()
        .zip(sni)
        .and_then(|(m, name)| m.lookup(name))
        .and_then(|i| Some((i, fe.routes.get(i)?)))
        .filter(|(_, r)| source_holds(r, client));
    if let Some((i, r)) = by_name {
        return Some((Some(i), target(r)?));
    }
    if fe.reject_unknown_sni {
        return None;
    }
    let unconditional = fe
        .routes
        .iter()
        .enumerate()
        .find(|(_, r)| r.when.is_empty())
        .and_then(|(i, r)| Some((Some(i), target(r)?)));
    unconditional.or(fe.default_backend.map(|b| (None, TcpTarget::Backend(b))))
}

/// All three steps at once (for `explain`, and connections with no SNI to wait for).
pub fn decide(fe: &Frontend, client: IpAddr, sni: Option<&str>) -> Option<TcpTarget> {
    at_accept(fe, client)
        .map(|(_, t)| t)
        .or_else(|| after_sni(fe, client, sni))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    const BACKENDS: &str = "[[backend]]\nname = \"a\"\n[[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:9001\"\n\
                            [[backend]]\nname = \"b\"\n[[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:9002\"\n";

    fn frontend(routes: &str) -> String {
        format!(
            "[[frontend]]\nname = \"t\"\nbind = [\"127.0.0.1:0\"]\nmode = \"tcp\"\ndefault_backend = \"a\"\n{routes}{BACKENDS}"
        )
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn source_routes_decide_at_accept_then_sni_with_source_then_default() {
        let c = parse(
            &frontend(
                "[[frontend.route]]\nsource = [\"10.0.0.0/8\", \"2001:db8::/32\"]\ndeny = true\n\
                 [[frontend.route]]\nsource = \"192.0.2.0/24\"\nbackend = \"b\"\n\
                 [[frontend.route]]\nsni = \"x.example\"\nsource = \"198.51.100.0/24\"\nbackend = \"b\"\n",
            ),
            "t.toml",
        )
        .unwrap();
        let fe = &c.frontends[0];
        assert_eq!(at_accept(fe, ip("10.1.2.3")), Some((0, TcpTarget::Close)));
        assert_eq!(at_accept(fe, ip("2001:db8::7")), Some((0, TcpTarget::Close)));
        assert_eq!(at_accept(fe, ip("::ffff:10.0.0.1")), Some((0, TcpTarget::Close)));
        assert_eq!(at_accept(fe, ip("192.0.2.9")), Some((1, TcpTarget::Backend(1))));
        assert_eq!(
            at_accept(fe, ip("198.51.100.1")),
            None,
            "an sni route waits for the SNI"
        );
        assert_eq!(
            after_sni(fe, ip("198.51.100.1"), Some("x.example")),
            Some(TcpTarget::Backend(1))
        );
        assert_eq!(
            after_sni(fe, ip("203.0.113.1"), Some("x.example")),
            Some(TcpTarget::Backend(0))
        );
        assert_eq!(decide(fe, ip("127.0.0.1"), None), Some(TcpTarget::Backend(0)));
    }

    #[test]
    fn refusals_name_the_key_and_line() {
        let cases = [
            (
                "[[frontend.route]]\nsource = \"10.0.0.0/8\"\ndeny = 403\n",
                8,
                "frontend[0].route[0].deny",
                "deny = true",
            ),
            (
                "[[frontend.route]]\nsource = \"10.0.0.0/8\"\ndeny = false\n",
                8,
                "frontend[0].route[0].deny",
                "deny = true",
            ),
            (
                "[[frontend.route]]\nsni = \"x.example\"\nbackend = \"b\"\n[[frontend.route]]\nsource = \"10.0.0.0/8\"\ndeny = true\n",
                10,
                "frontend[0].route[1].source",
                "write it before that route",
            ),
            (
                "[[frontend.route]]\nsource = \"10.0.0.1/8\"\ndeny = true\n",
                7,
                "frontend[0].route[0].source",
                "bits set",
            ),
        ];
        for (routes, line, key, message) in cases {
            let errors = parse(&frontend(routes), "t.toml").unwrap_err().0;
            let e = &errors[0];
            assert_eq!((e.line, e.key.as_str()), (line, key), "{routes}: {e}");
            assert!(e.message.contains(message), "{e}");
        }
    }

    #[test]
    fn frontend_lists_and_http_deny_true() {
        let text = frontend("").replace(
            "mode = \"tcp\"\n",
            "mode = \"tcp\"\nallow = [\"127.0.0.0/8\", \"::1\"]\ndeny = \"127.0.0.2\"\n",
        );
        let c = parse(&text, "t.toml").unwrap();
        let access = &c.frontends[0].access;
        assert!(access.admits(ip("127.0.0.1")) && access.admits(ip("::1")));
        assert!(!access.admits(ip("127.0.0.2")), "deny wins over allow");
        assert!(!access.admits(ip("192.0.2.1")), "not in allow");
        let bad = frontend("").replace("mode = \"tcp\"\n", "mode = \"tcp\"\ndeny = [\"::1/129\"]\n");
        let e = &parse(&bad, "t.toml").unwrap_err().0[0];
        assert_eq!((e.line, e.column, e.key.as_str()), (5, 8, "frontend[0].deny"), "{e}");
        let http = "[[frontend]]\nname = \"h\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"a\"\n\
                    [[frontend.route]]\nsource = \"10.0.0.0/8\"\ndeny = true\n\
                    [[backend]]\nname = \"a\"\nmode = \"http\"\n[[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:9001\"\n";
        let c = parse(http, "t.toml").unwrap();
        assert!(matches!(&c.frontends[0].routes[0].action, RouteAction::Return(a) if a.status == 403));
    }
}
