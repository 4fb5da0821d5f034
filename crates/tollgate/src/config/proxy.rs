//! PROXY protocol keys: `accept_proxy` and `trusted_proxies` on a frontend, `send_proxy`
//! and `check_send_proxy` on a server (docs/config.md, "PROXY protocol").
//!
//! Refused at load: `accept_proxy` without `trusted_proxies` (or the reverse, or an empty
//! list, or a block that does not parse), and `send_proxy` on a `proto = "h2"` server (an
//! HTTP/2 connection carries many clients' streams; one header cannot name them all).

use std::ops::Range;

use serde::Deserialize;

use super::file::{FrontendSection, ServerSection};
use super::model::ServerProto;
use crate::proxyproto::{Accept, Cidr, Cidrs, Version};

type Errors = Vec<(Range<usize>, String, String)>;

/// `accept_proxy` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum AcceptName {
    V1,
    V2,
    Any,
}

/// `send_proxy` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum VersionName {
    V1,
    V2,
}

/// A frontend's PROXY protocol intake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptProxy {
    pub accept: Accept,
    /// Peers allowed to send a header; any other connection is closed unread.
    pub trusted: Cidrs,
}

pub(super) fn accept_proxy(f: &FrontendSection, key: &str, errors: &mut Errors) -> Option<AcceptProxy> {
    match (&f.accept_proxy, &f.trusted_proxies) {
        (None, None) => None,
        (None, Some(list)) => {
            errors.push((
                list.span(),
                format!("{key}.trusted_proxies"),
                "`trusted_proxies` is only used with `accept_proxy`".into(),
            ));
            None
        }
        (Some(v), None) => {
            errors.push((
                v.span(),
                format!("{key}.accept_proxy"),
                "`accept_proxy` needs `trusted_proxies` (the balancers allowed to send the header, e.g. [\"10.0.0.0/8\"])"
                    .into(),
            ));
            None
        }
        (Some(v), Some(list)) => {
            if list.get_ref().is_empty() {
                errors.push((
                    list.span(),
                    format!("{key}.trusted_proxies"),
                    "needs at least one address or CIDR block".into(),
                ));
            }
            let mut trusted = Vec::new();
            for (i, item) in list.get_ref().iter().enumerate() {
                match Cidr::parse(item.get_ref()) {
                    Ok(c) => trusted.push(c),
                    Err(msg) => errors.push((item.span(), format!("{key}.trusted_proxies[{i}]"), msg)),
                }
            }
            let accept = match v.get_ref() {
                AcceptName::V1 => Accept::V1,
                AcceptName::V2 => Accept::V2,
                AcceptName::Any => Accept::Any,
            };
            Some(AcceptProxy {
                accept,
                trusted: Cidrs(trusted),
            })
        }
    }
}

fn version(v: VersionName) -> Version {
    match v {
        VersionName::V1 => Version::V1,
        VersionName::V2 => Version::V2,
    }
}

pub(super) fn send_proxy(s: &ServerSection, skey: &str, proto: ServerProto, errors: &mut Errors) -> Option<Version> {
    let v = s.send_proxy.as_ref()?;
    if proto == ServerProto::H2 {
        errors.push((
            v.span(),
            format!("{skey}.send_proxy"),
            "`send_proxy` cannot be used with `proto = \"h2\"`: an HTTP/2 connection carries many clients' requests, a PROXY header names one"
                .into(),
        ));
        return None;
    }
    Some(version(*v.get_ref()))
}

/// The version checks send with `check_send_proxy = true`: the server's own `send_proxy`,
/// else v1.
pub(super) fn check_send_proxy(s: &ServerSection, server: Option<Version>) -> Option<Version> {
    s.check_send_proxy
        .as_ref()
        .filter(|c| *c.get_ref())
        .map(|_| server.unwrap_or(Version::V1))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use std::time::Duration;

    use crate::proxyproto::{Accept, Version};

    const CONFIG: &str = r#"
[[frontend]]
name = "fe"
bind = ["127.0.0.1:0"]
default_backend = "be"
accept_proxy = "any"
trusted_proxies = ["10.0.0.0/8", "::1"]
[[frontend]]
name = "plain"
bind = ["127.0.0.1:0"]
default_backend = "be"
[[backend]]
name = "be"
[backend.health]
type = "tcp"
[[backend.server]]
name = "a"
address = "127.0.0.1:1"
send_proxy = "v2"
check_send_proxy = true
[[backend.server]]
name = "b"
address = "127.0.0.1:2"
check_send_proxy = true
[[backend.server]]
name = "c"
address = "127.0.0.1:3"
"#;

    #[test]
    fn keys_become_the_model() {
        let c = crate::config::parse(CONFIG, "t.toml").unwrap();
        let fe = &c.frontends[0];
        let accept = fe.accept_proxy.as_ref().unwrap();
        assert_eq!(accept.accept, Accept::Any);
        assert!(accept.trusted.contains("10.9.8.7".parse().unwrap()));
        assert!(accept.trusted.contains("::1".parse().unwrap()));
        assert!(!accept.trusted.contains("127.0.0.1".parse().unwrap()));
        assert_eq!(c.timeouts.proxy_header, Duration::from_secs(5));
        // A server sends headers: every frontend keeps its sessions' origins.
        assert!(fe.keep_origin && c.frontends[1].keep_origin && c.frontends[1].accept_proxy.is_none());
        let s = &c.backends[0].servers;
        assert_eq!(
            (s[0].send_proxy, s[0].check.send_proxy),
            (Some(Version::V2), Some(Version::V2))
        );
        // Checks without the server's own version send v1; no key, no header.
        assert_eq!((s[1].send_proxy, s[1].check.send_proxy), (None, Some(Version::V1)));
        assert_eq!((s[2].send_proxy, s[2].check.send_proxy), (None, None));
    }

    #[test]
    fn no_send_proxy_keeps_no_origin() {
        let text = CONFIG
            .replace("send_proxy = \"v2\"\n", "")
            .replace("check_send_proxy = true\n", "");
        let c = crate::config::parse(&text, "t.toml").unwrap();
        assert!(!c.frontends[1].keep_origin);
        let with = "[timeouts]\nproxy_header = \"250ms\"\n".to_string() + &text;
        let c = crate::config::parse(&with, "t.toml").unwrap();
        assert_eq!(c.timeouts.proxy_header, Duration::from_millis(250));
    }
}
