//! `[[frontend.limit]]`: rate limits and concurrency limits per key, each counted in a
//! stick table of its own (`limit`). Docs: docs/config.md, "Rate limits".
//!
//! The two small grammars (`rate = "100/s"`, `key = "header:x-api-key"`) are parsed by
//! [`parse_rate`] and [`parse_key`] (fuzzed: fuzz/fuzz_targets/limit_spec.rs); the rest is
//! checked here against the frontend's mode: a key the mode cannot evaluate (`header:` and
//! `path` on a TCP frontend, `sni` where no SNI is ever read) and an action it cannot take
//! (`429` on a TCP frontend) are refused at load with their position.

use std::collections::HashSet;
use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::file::{FrontendSection, ModeName};
use super::units::DurationValue;

type Errors = Vec<(Range<usize>, String, String)>;

/// Entries a table holds unless `size` says otherwise.
pub const DEFAULT_SIZE: u32 = 100_000;
/// The idle lifetime of an entry of a concurrency-only limit (rate limits: at least two
/// windows, see [`Limit::expire`]).
pub const DEFAULT_EXPIRE: Duration = Duration::from_secs(60);
/// How long `action = "tarpit"` holds a request or connection unless `tarpit` says otherwise.
pub const DEFAULT_TARPIT: Duration = Duration::from_secs(5);
/// The longest key kept: longer header values and paths are cut to their first this many
/// bytes (a key is an identity, not a copy of the request).
pub const MAX_KEY_LEN: usize = 128;
/// Limits one frontend may have (a request's in-flight marks live in a fixed array).
pub const MAX_LIMITS_PER_FRONTEND: usize = 8;
/// The largest `rate` count and `burst`.
const MAX_COUNT: u64 = 1 << 32;
/// The longest window: a day.
const MAX_PERIOD: Duration = Duration::from_secs(86_400);

/// `[[frontend.limit]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitSection {
    /// The stick table's name, unique in the config (`ctl show table NAME`).
    pub name: Spanned<String>,
    /// `source`, `header:NAME`, `sni` or `path`.
    pub key: Spanned<String>,
    /// `N/s`, `N/m`, `N/h` or `N/<duration>` (`"10/5s"`).
    pub rate: Option<Spanned<String>>,
    pub burst: Option<Spanned<u64>>,
    pub concurrent: Option<Spanned<u32>>,
    /// `"429"` (HTTP default), `"close"` (TCP default), `"tarpit"`.
    pub action: Option<Spanned<String>>,
    pub tarpit: Option<Spanned<DurationValue>>,
    pub size: Option<Spanned<u32>>,
    pub expire: Option<Spanned<DurationValue>>,
    /// Counted across instances through `[shared]` (`config::shared`).
    pub shared: Option<Spanned<bool>>,
}

/// What a limit counts by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKey {
    /// The client's address (the PROXY header's when the frontend accepts one).
    Source,
    /// A request header's first value; the name is kept lowercase. A request without it is
    /// not counted by this limit.
    Header(String),
    /// The TLS server name, lowercase; a connection without one is not counted.
    Sni,
    /// The request path, without the query.
    Path,
}

impl LimitKey {
    /// As written in the file.
    pub fn describe(&self) -> String {
        match self {
            LimitKey::Source => "source".into(),
            LimitKey::Header(name) => format!("header:{name}"),
            LimitKey::Sni => "sni".into(),
            LimitKey::Path => "path".into(),
        }
    }
}

/// `rate = "N/period"`: at most `count` requests (connections) per sliding `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u64,
    pub period: Duration,
}

/// What happens to a request (connection) over a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitAction {
    /// HTTP: `429 Too Many Requests` with `Retry-After`; the connection stays open.
    TooMany,
    /// Close the connection at once (HTTP/2: reset the stream), nothing answered.
    Close,
    /// Hold it this long, then answer 500 and close (HTTP) or close (TCP).
    Tarpit(Duration),
}

impl LimitAction {
    pub fn as_str(&self) -> &'static str {
        match self {
            LimitAction::TooMany => "429",
            LimitAction::Close => "close",
            LimitAction::Tarpit(_) => "tarpit",
        }
    }
}

/// One validated limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    pub name: String,
    pub key: LimitKey,
    pub rate: Option<Rate>,
    /// Requests a key may go above `rate` at once (see `limit::window`); 0 without `rate`.
    pub burst: u64,
    /// Requests (connections) in flight per key; 0 = no such limit.
    pub concurrent: u32,
    pub action: LimitAction,
    /// Entries the table holds at most (the least recently seen goes first).
    pub size: u32,
    /// An entry not seen for this long is forgotten (never less than two windows: the
    /// sliding window reads the previous one).
    pub expire: Duration,
}

/// Parses `N/s`, `N/m`, `N/h` or `N/<duration>` (`10/5s`, `100/250ms`): N from 1 to 2^32,
/// the period from 1 ms to a day.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let (count, period) = text
        .split_once('/')
        .ok_or_else(|| format!("rate `{text}` must be COUNT/PERIOD, e.g. \"100/s\" or \"6000/m\""))?;
    let count: u64 = match count.trim().parse() {
        Ok(n) if (1..=MAX_COUNT).contains(&n) => n,
        Ok(_) => return Err(format!("rate `{text}`: the count must be between 1 and 2^32")),
        Err(_) => return Err(format!("rate `{text}`: `{}` is not a whole number", count.trim())),
    };
    let period = match period.trim() {
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        other => super::units::parse_duration(other).map_err(|e| format!("rate `{text}`: {e}"))?,
    };
    if period < Duration::from_millis(1) || period > MAX_PERIOD || period.subsec_micros() % 1000 != 0 {
        return Err(format!(
            "rate `{text}`: the period must be whole milliseconds, from 1ms to 1d"
        ));
    }
    Ok(Rate { count, period })
}

/// Parses `source`, `sni`, `path` or `header:NAME` (NAME a header field name, kept
/// lowercase).
pub fn parse_key(text: &str) -> Result<LimitKey, String> {
    match text {
        "source" => Ok(LimitKey::Source),
        "sni" => Ok(LimitKey::Sni),
        "path" => Ok(LimitKey::Path),
        _ => match text.strip_prefix("header:") {
            Some(name) if !name.is_empty() && name.bytes().all(is_token_byte) => {
                Ok(LimitKey::Header(name.to_ascii_lowercase()))
            }
            Some(_) => Err(format!(
                "`{text}`: a header name is a token (letters, digits, `-`, ...), e.g. \"header:x-api-key\""
            )),
            None => Err(format!(
                "unknown key `{text}` (use \"source\", \"header:NAME\", \"sni\" or \"path\")"
            )),
        },
    }
}

/// RFC 9110 `tchar`.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A frontend's limits, validated; `names` collects every limit name of the config.
pub(super) fn limits(
    f: &FrontendSection,
    mode: ModeName,
    key: &str,
    names: &mut HashSet<String>,
    errors: &mut Errors,
) -> Vec<Limit> {
    if f.limit.len() > MAX_LIMITS_PER_FRONTEND
        && let Some(extra) = f.limit.get(MAX_LIMITS_PER_FRONTEND)
    {
        errors.push((
            extra.name.span(),
            format!("{key}.limit[{MAX_LIMITS_PER_FRONTEND}]"),
            format!("a frontend has at most {MAX_LIMITS_PER_FRONTEND} limits"),
        ));
    }
    // Where an SNI is read: a TLS frontend's handshake, or a TCP frontend's `sni` routes.
    let reads_sni = f.tls.is_some() || (mode == ModeName::Tcp && f.route.iter().any(|r| r.sni.is_some()));
    f.limit
        .iter()
        .enumerate()
        .filter_map(|(i, l)| one(l, mode, reads_sni, &format!("{key}.limit[{i}]"), names, errors))
        .collect()
}

/// Bits `0..n` set: every limit of a frontend with `n`.
pub(super) fn all_bits(n: usize) -> u8 {
    match n {
        0 => 0,
        n if n >= 8 => u8::MAX,
        n => (1u8 << n) - 1,
    }
}

/// A route's `limits = ["name", ...]`: the bits of the frontend's limits it names. HTTP only:
/// a TCP connection is counted by source at accept, before any route is decided.
pub(super) fn route_limits(
    r: &super::file::RouteSection,
    limits: &[Limit],
    mode: ModeName,
    key: &str,
    errors: &mut Errors,
) -> u8 {
    let Some(names) = &r.limits else {
        return 0;
    };
    if mode == ModeName::Tcp {
        errors.push((
            names.span(),
            format!("{key}.limits"),
            "`limits` on a route needs an http-mode frontend (a TCP connection is counted at accept, before routing)"
                .into(),
        ));
        return 0;
    }
    let mut bits = 0u8;
    for (i, name) in names.get_ref().iter().enumerate() {
        match limits.iter().position(|l| l.name == *name.get_ref()) {
            Some(at) if at < 8 => bits |= 1 << at,
            _ => errors.push((
                name.span(),
                format!("{key}.limits[{i}]"),
                format!("no [[frontend.limit]] named `{}` on this frontend", name.get_ref()),
            )),
        }
    }
    bits
}

fn one(
    l: &LimitSection,
    mode: ModeName,
    reads_sni: bool,
    key: &str,
    names: &mut HashSet<String>,
    errors: &mut Errors,
) -> Option<Limit> {
    let before = errors.len();
    let mut err = |span: Range<usize>, field: &str, msg: String| errors.push((span, format!("{key}.{field}"), msg));
    let name = l.name.get_ref();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
        err(
            l.name.span(),
            "name",
            "a limit name is letters, digits, `-`, `_` and `.`".into(),
        );
    } else if !names.insert(name.clone()) {
        err(l.name.span(), "name", format!("limit name `{name}` is used twice"));
    }
    let limit_key = match parse_key(l.key.get_ref()) {
        Ok(k) => Some(k),
        Err(msg) => {
            err(l.key.span(), "key", msg);
            None
        }
    };
    match (&limit_key, mode) {
        (Some(LimitKey::Header(_) | LimitKey::Path), ModeName::Tcp) => err(
            l.key.span(),
            "key",
            format!(
                "`{}` needs an http-mode frontend (a TCP frontend reads no request)",
                l.key.get_ref()
            ),
        ),
        (Some(LimitKey::Sni), _) if !reads_sni => err(
            l.key.span(),
            "key",
            "`sni` needs `[frontend.tls]` or (TCP mode) an `sni` route: no SNI is read otherwise".into(),
        ),
        _ => {}
    }
    let rate = l.rate.as_ref().and_then(|r| match parse_rate(r.get_ref()) {
        Ok(rate) => Some(rate),
        Err(msg) => {
            err(r.span(), "rate", msg);
            None
        }
    });
    let concurrent = l.concurrent.as_ref().map_or(0, |c| *c.get_ref());
    if let Some(c) = &l.concurrent
        && *c.get_ref() == 0
    {
        err(
            c.span(),
            "concurrent",
            "must be at least 1 (leave it out for no limit)".into(),
        );
    }
    if l.rate.is_none() && l.concurrent.is_none() {
        err(
            l.name.span(),
            "rate",
            "a limit needs `rate`, `concurrent` or both".into(),
        );
    }
    let burst = match &l.burst {
        Some(b) if l.rate.is_none() => {
            err(
                b.span(),
                "burst",
                "`burst` is an allowance above `rate`: it needs `rate`".into(),
            );
            0
        }
        Some(b) if *b.get_ref() > MAX_COUNT => {
            err(b.span(), "burst", "must be at most 2^32".into());
            0
        }
        Some(b) => *b.get_ref(),
        None => 0,
    };
    let action = action(l, mode, &mut err);
    let size = match &l.size {
        Some(s) if *s.get_ref() == 0 => {
            err(s.span(), "size", "must be at least 1".into());
            DEFAULT_SIZE
        }
        Some(s) => *s.get_ref(),
        None => DEFAULT_SIZE,
    };
    let floor = rate.map_or(Duration::ZERO, |r| r.period * 2);
    let expire = match &l.expire {
        Some(e) if e.get_ref().0 < floor || e.get_ref().0.is_zero() => {
            err(
                e.span(),
                "expire",
                format!(
                    "must be at least two windows ({}ms): the sliding window reads the previous one",
                    floor.as_millis().max(1)
                ),
            );
            floor
        }
        Some(e) => e.get_ref().0,
        None => DEFAULT_EXPIRE.max(floor),
    };
    if errors.len() != before {
        return None;
    }
    Some(Limit {
        name: name.clone(),
        key: limit_key?,
        rate,
        burst,
        concurrent,
        action,
        size,
        expire,
    })
}

fn action(l: &LimitSection, mode: ModeName, err: &mut impl FnMut(Range<usize>, &str, String)) -> LimitAction {
    let tarpit = l.tarpit.as_ref().map(|t| t.get_ref().0);
    let action = match l.action.as_ref().map(|a| (a.get_ref().as_str(), a.span())) {
        None if mode == ModeName::Http => LimitAction::TooMany,
        None => LimitAction::Close,
        Some(("429", span)) if mode == ModeName::Tcp => {
            err(
                span,
                "action",
                "`429` is an HTTP status: a TCP frontend can `close` or `tarpit`".into(),
            );
            LimitAction::Close
        }
        Some(("429", _)) => LimitAction::TooMany,
        Some(("close", _)) => LimitAction::Close,
        Some(("tarpit", _)) => LimitAction::Tarpit(tarpit.unwrap_or(DEFAULT_TARPIT)),
        Some((other, span)) => {
            err(
                span,
                "action",
                format!("unknown action `{other}` (use \"429\", \"close\" or \"tarpit\")"),
            );
            LimitAction::Close
        }
    };
    if let Some(t) = &l.tarpit {
        if !matches!(action, LimitAction::Tarpit(_)) {
            err(
                t.span(),
                "tarpit",
                "`tarpit` is only used with `action = \"tarpit\"`".into(),
            );
        } else if t.get_ref().0.is_zero() {
            err(t.span(), "tarpit", "must be more than 0".into());
        }
    }
    action
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    #[test]
    fn rates_parse_with_their_period() {
        let r = |t| parse_rate(t).unwrap();
        assert_eq!(
            r("100/s"),
            Rate {
                count: 100,
                period: Duration::from_secs(1)
            }
        );
        assert_eq!(r("6000/m").period, Duration::from_secs(60));
        assert_eq!(r("5/h").period, Duration::from_secs(3600));
        assert_eq!(
            r("10/5s"),
            Rate {
                count: 10,
                period: Duration::from_secs(5)
            }
        );
        assert_eq!(r("3/250ms").period, Duration::from_millis(250));
        for bad in [
            "",
            "100",
            "/s",
            "0/s",
            "-1/s",
            "1.5/s",
            "100/",
            "100/x",
            "100/0s",
            "100/2d",
            "100/1500us",
            "99999999999/s",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn keys_parse_and_header_names_are_lowercased() {
        assert_eq!(parse_key("source").unwrap(), LimitKey::Source);
        assert_eq!(
            parse_key("header:X-Api-Key").unwrap(),
            LimitKey::Header("x-api-key".into())
        );
        assert_eq!(parse_key("sni").unwrap(), LimitKey::Sni);
        assert_eq!(parse_key("path").unwrap(), LimitKey::Path);
        for bad in ["", "header:", "header:a b", "cookie:x", "Source", "header:é"] {
            assert!(parse_key(bad).is_err(), "{bad:?} parsed");
        }
    }

    proptest::proptest! {
        /// What the fuzz target checks, on text shaped like a rate or a key: never a panic,
        /// and what parses writes back to itself.
        #[test]
        fn specs_round_trip(rate in "[0-9]{0,11}/[0-9]{0,6}(us|ms|s|m|h|d|x)?", key in "(header:)?[A-Za-z0-9 -]{0,8}") {
            if let Ok(r) = parse_rate(&rate) {
                proptest::prop_assert!(r.count >= 1 && r.period >= Duration::from_millis(1));
                proptest::prop_assert_eq!(parse_rate(&format!("{}/{}ms", r.count, r.period.as_millis())), Ok(r));
            }
            if let Ok(k) = parse_key(&key) {
                proptest::prop_assert_eq!(parse_key(&k.describe()), Ok(k));
            }
        }
    }

    fn config(mode: &str, limit: &str) -> String {
        format!(
            "[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"{mode}\"\ndefault_backend = \"be\"\n\
             [[frontend.limit]]\n{limit}\n\
             [[backend]]\nname = \"be\"\nmode = \"{mode}\"\n[[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:1\"\n"
        )
    }

    #[test]
    fn defaults_follow_the_mode_and_the_window() {
        let c = crate::config::parse(
            &config("http", "name = \"api\"\nkey = \"header:X-Key\"\nrate = \"50/s\""),
            "t.toml",
        )
        .unwrap();
        let l = &c.frontends[0].limits[0];
        assert_eq!(l.key, LimitKey::Header("x-key".into()));
        assert_eq!(
            (l.action, l.size, l.expire, l.burst, l.concurrent),
            (LimitAction::TooMany, DEFAULT_SIZE, DEFAULT_EXPIRE, 0, 0)
        );
        let c = crate::config::parse(
            &config(
                "tcp",
                "name = \"c\"\nkey = \"source\"\nrate = \"5/h\"\naction = \"tarpit\"",
            ),
            "t.toml",
        )
        .unwrap();
        let l = &c.frontends[0].limits[0];
        assert_eq!(
            (l.action, l.expire),
            (LimitAction::Tarpit(DEFAULT_TARPIT), Duration::from_secs(7200))
        );
        let c = crate::config::parse(
            &config("tcp", "name = \"c\"\nkey = \"source\"\nconcurrent = 3"),
            "t.toml",
        )
        .unwrap();
        assert_eq!(c.frontends[0].limits[0].action, LimitAction::Close);
    }

    #[test]
    fn routes_name_the_limits_that_count_them() {
        let limits = "name = \"a\"\nkey = \"source\"\nrate = \"1/s\"\n\
                      [[frontend.limit]]\nname = \"b\"\nkey = \"path\"\nrate = \"1/s\"\n\
                      [[frontend.limit]]\nname = \"c\"\nkey = \"path\"\nconcurrent = 1\n\
                      [[frontend.route]]\npath_prefix = \"/api\"\nbackend = \"be\"\nlimits = [\"c\", \"a\"]\n\
                      [[frontend.route]]\npath = \"/x\"\nbackend = \"be\"\nlimits = []";
        let c = crate::config::parse(&config("http", limits), "t.toml").unwrap();
        let fe = &c.frontends[0];
        // `b` is named by no route: it counts everything; `a` and `c` only /api.
        assert_eq!(fe.unrouted_limits, 0b010);
        assert_eq!((fe.routes[0].limits, fe.routes[1].limits), (0b101, 0));
        let bad = |limit: &str| {
            crate::config::parse(&config("http", limit), "t.toml")
                .unwrap_err()
                .to_string()
        };
        let e = bad(
            "name = \"a\"\nkey = \"source\"\nrate = \"1/s\"\n[[frontend.route]]\nbackend = \"be\"\nlimits = [\"a\", \"zz\"]",
        );
        assert!(
            e.contains("t.toml:12:16") && e.contains("route[0].limits[1]") && e.contains("`zz`"),
            "{e}"
        );
        let e = crate::config::parse(
            &config("tcp", "name = \"a\"\nkey = \"source\"\nrate = \"1/s\"\n[[frontend.route]]\nbackend = \"be\"\nlimits = [\"a\"]"),
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("t.toml:12:10") && e.contains("route[0].limits") && e.contains("http-mode"),
            "{e}"
        );
    }

    #[test]
    fn refusals_name_the_position_and_key() {
        let cases = [
            (
                "tcp",
                "name = \"a\"\nkey = \"header:x\"\nrate = \"1/s\"",
                "t.toml:8:7",
                "limit[0].key",
            ),
            (
                "tcp",
                "name = \"a\"\nkey = \"path\"\nrate = \"1/s\"",
                "t.toml:8:7",
                "limit[0].key",
            ),
            (
                "tcp",
                "name = \"a\"\nkey = \"sni\"\nrate = \"1/s\"",
                "t.toml:8:7",
                "limit[0].key",
            ),
            (
                "http",
                "name = \"a\"\nkey = \"sni\"\nrate = \"1/s\"",
                "t.toml:8:7",
                "limit[0].key",
            ),
            (
                "http",
                "name = \"a\"\nkey = \"source\"\nrate = \"0/s\"",
                "t.toml:9:8",
                "limit[0].rate",
            ),
            (
                "http",
                "name = \"a\"\nkey = \"source\"\nrate = \"10/fortnight\"",
                "t.toml:9:8",
                "limit[0].rate",
            ),
            ("http", "name = \"a\"\nkey = \"source\"", "t.toml:7:8", "limit[0].rate"),
            (
                "http",
                "name = \"a\"\nkey = \"source\"\nconcurrent = 0",
                "t.toml:9:14",
                "limit[0].concurrent",
            ),
            (
                "http",
                "name = \"a\"\nkey = \"source\"\nconcurrent = 1\nburst = 3",
                "t.toml:10:9",
                "limit[0].burst",
            ),
            (
                "tcp",
                "name = \"a\"\nkey = \"source\"\nrate = \"1/s\"\naction = \"429\"",
                "t.toml:10:10",
                "limit[0].action",
            ),
            (
                "http",
                "name = \"a\"\nkey = \"source\"\nrate = \"1/s\"\naction = \"drop\"",
                "t.toml:10:10",
                "limit[0].action",
            ),
            (
                "http",
                "name = \"a\"\nkey = \"source\"\nrate = \"1/s\"\ntarpit = \"1s\"",
                "t.toml:10:10",
                "limit[0].tarpit",
            ),
            (
                "http",
                "name = \"a\"\nkey = \"source\"\nrate = \"1/m\"\nexpire = \"1m\"",
                "t.toml:10:10",
                "limit[0].expire",
            ),
            (
                "http",
                "name = \"a\"\nkey = \"source\"\nrate = \"1/m\"\nsize = 0",
                "t.toml:10:8",
                "limit[0].size",
            ),
            (
                "http",
                "name = \"a b\"\nkey = \"source\"\nrate = \"1/m\"",
                "t.toml:7:8",
                "limit[0].name",
            ),
            (
                "http",
                "name = \"a\"\nkey = \"source\"\nrate = \"1/m\"\n[[frontend.limit]]\nname = \"a\"\nkey = \"path\"\nrate = \"1/s\"",
                "t.toml:11:8",
                "limit[1].name",
            ),
        ];
        for (mode, limit, at, key) in cases {
            let text = config(mode, limit);
            let e = crate::config::parse(&text, "t.toml").unwrap_err().to_string();
            assert!(e.contains(at) && e.contains(key), "want {at} {key}, got: {e}\n{text}");
        }
    }
}
