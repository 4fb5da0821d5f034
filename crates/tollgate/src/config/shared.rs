//! `[shared]`: the Redis instance that limits with `shared = true` are counted in, so that
//! several tollgate instances enforce one global limit (the `sharing` module runs it).
//!
//! Invariants after validation: the URL parses as a Redis URL without TLS (`redis://` or
//! `redis+unix://`/`unix://`); a password read from `redis_password_file` is kept apart from
//! it (never shown: [`Secret`]), and only for a URL without one; `sync_interval` is 10 ms..=10 s; `timeout` is non-zero and at
//! most 10 s (default: the sync interval); the prefix is 1..=64 bytes of printable ASCII
//! without `:` or whitespace, so that `PREFIX:TABLE:KEY:PERIOD` splits back unambiguously.

use std::path::Path;
use std::time::Duration;

use redis::IntoConnectionInfo;

use super::file::ConfigFile;
pub use super::file::FailName as FailMode;

pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_millis(100);
pub const DEFAULT_PREFIX: &str = "tollgate";
const MIN_SYNC_INTERVAL: Duration = Duration::from_millis(10);
const MAX_SYNC_INTERVAL: Duration = Duration::from_secs(10);
const MAX_PREFIX: usize = 64;

/// `[shared]` as the proxy runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sharing {
    /// As written (it may hold a password: show [`Sharing::shown_url`] instead).
    pub redis: String,
    /// The password `redis_password_file` holds, for a URL written without one.
    pub password: Option<Secret>,
    pub sync_interval: Duration,
    /// One sync round's bound, connecting included: past it the round failed.
    pub timeout: Duration,
    pub fail: FailMode,
    pub prefix: String,
    /// The limits with `shared = true` (names are unique in a config).
    pub limits: Vec<String>,
}

/// A password read from a file: `Debug` hides it, so the config can be logged.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<hidden>")
    }
}

impl Sharing {
    /// A client for the Redis of `redis`, with the password of `redis_password_file`.
    pub fn client(&self) -> redis::RedisResult<redis::Client> {
        let info = self.redis.as_str().into_connection_info()?;
        let info = match &self.password {
            Some(password) => {
                let settings = info.redis_settings().clone().set_password(password.expose());
                info.set_redis_settings(settings)
            }
            None => info,
        };
        redis::Client::open(info)
    }

    /// The URL without its password, for logs and the runtime API.
    pub fn shown_url(&self) -> String {
        let Some((scheme, rest)) = self.redis.split_once("://") else {
            return self.redis.clone();
        };
        match rest.split_once('@') {
            Some((user, host)) => match user.split_once(':') {
                Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
                None => self.redis.clone(),
            },
            None => self.redis.clone(),
        }
    }
}

impl FailMode {
    pub fn as_str(self) -> &'static str {
        match self {
            FailMode::Open => "open",
            FailMode::Closed => "closed",
        }
    }
}

type Errors = Vec<(std::ops::Range<usize>, String, String)>;

/// `[shared]` with the limits that take part, or `None` when the section is absent or wrong
/// (then `errors` says why). `shared = true` needs the section, and a `rate`: only rate
/// counts are shared (requests in flight, `concurrent`, stay per instance).
/// `base_dir`: the config file's directory (a relative `redis_password_file` is in it).
pub(super) fn sharing(file: &ConfigFile, base_dir: Option<&Path>, errors: &mut Errors) -> Option<Sharing> {
    let mut limits = Vec::new();
    for (f, fe) in file.frontend.iter().enumerate() {
        for (i, l) in fe.limit.iter().enumerate() {
            let Some(shared) = l.shared.as_ref().filter(|s| *s.get_ref()) else {
                continue;
            };
            let key = format!("frontend[{f}].limit[{i}].shared");
            if file.shared.is_none() {
                errors.push((
                    shared.span(),
                    key,
                    "`shared = true` needs a [shared] section (the Redis the counts are shared in)".into(),
                ));
            } else if l.rate.is_none() {
                errors.push((
                    shared.span(),
                    key,
                    "only `rate` counts are shared: a limit with `concurrent` alone is per instance".into(),
                ));
            } else {
                limits.push(l.name.get_ref().clone());
            }
        }
    }
    let section = file.shared.as_ref()?;
    let s = section.get_ref();
    let before = errors.len();
    let mut err = |span, key: &str, msg: String| errors.push((span, format!("shared.{key}"), msg));
    let redis = match &s.redis {
        None => {
            err(
                section.span(),
                "redis",
                "[shared] needs `redis = \"redis://HOST:PORT\"` (the Redis the shared limits are counted in)".into(),
            );
            String::new()
        }
        Some(url) => {
            if let Err(msg) = check_url(url.get_ref()) {
                err(url.span(), "redis", msg);
            }
            url.get_ref().clone()
        }
    };
    let password = s.redis_password_file.as_ref().and_then(|file| {
        let path = match base_dir {
            Some(dir) if Path::new(file.get_ref()).is_relative() => dir.join(file.get_ref()),
            _ => file.get_ref().into(),
        };
        let has_one = redis
            .as_str()
            .into_connection_info()
            .is_ok_and(|info| info.redis_settings().password().is_some());
        if has_one {
            let msg = "the `redis` URL has a password already: give it in one place".to_string();
            err(file.span(), "redis_password_file", msg);
            return None;
        }
        super::bounded::read_secret(&path)
            .map_err(|msg| err(file.span(), "redis_password_file", msg))
            .ok()
            .map(Secret)
    });
    let mut sync_interval = DEFAULT_SYNC_INTERVAL;
    if let Some(v) = &s.sync_interval {
        let d = v.get_ref().0;
        if (MIN_SYNC_INTERVAL..=MAX_SYNC_INTERVAL).contains(&d) {
            sync_interval = d;
        } else {
            err(v.span(), "sync_interval", "must be between 10ms and 10s".into());
        }
    }
    let mut timeout = sync_interval;
    if let Some(v) = &s.timeout {
        let d = v.get_ref().0;
        if d.is_zero() || d > MAX_SYNC_INTERVAL {
            err(v.span(), "timeout", "must be more than 0 and at most 10s".into());
        } else {
            timeout = d;
        }
    }
    let prefix = match &s.prefix {
        None => DEFAULT_PREFIX.to_string(),
        Some(p) => {
            let text = p.get_ref();
            let fits =
                (1..=MAX_PREFIX).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_graphic() && b != b':');
            if !fits {
                err(
                    p.span(),
                    "prefix",
                    format!("must be 1 to {MAX_PREFIX} printable ASCII characters without `:` or spaces"),
                );
            }
            text.clone()
        }
    };
    let fail = s.fail.as_ref().map_or(FailMode::Open, |f| *f.get_ref());
    (errors.len() == before).then_some(Sharing {
        redis,
        password,
        sync_interval,
        timeout,
        fail,
        prefix,
        limits,
    })
}

/// A Redis URL the client can connect with, TLS excluded (the client is built without it).
fn check_url(url: &str) -> Result<(), String> {
    let scheme = url.split_once("://").map(|(s, _)| s);
    match scheme {
        Some("redis" | "redis+unix" | "unix" | "valkey" | "valkey+unix") => {}
        Some("rediss" | "valkeys") => {
            return Err(format!(
                "`{url}`: TLS to Redis is not supported (use `redis://` on a trusted network or a local TLS tunnel)"
            ));
        }
        _ => {
            return Err(format!(
                "`{url}` is not a Redis URL (e.g. \"redis://127.0.0.1:6379\" or \"redis+unix:///run/redis.sock\")"
            ));
        }
    }
    url.into_connection_info()
        .map(|_| ())
        .map_err(|e| format!("`{url}` is not a usable Redis URL: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn sharing_of(url: &str) -> Sharing {
        Sharing {
            redis: url.into(),
            password: None,
            sync_interval: DEFAULT_SYNC_INTERVAL,
            timeout: DEFAULT_SYNC_INTERVAL,
            fail: FailMode::Open,
            prefix: DEFAULT_PREFIX.into(),
            limits: Vec::new(),
        }
    }

    #[test]
    fn urls_are_checked_and_passwords_never_shown() {
        for good in [
            "redis://127.0.0.1:6379",
            "redis://[::1]:6380/2",
            "redis://:secret@10.0.0.1",
            "redis+unix:///run/redis.sock",
        ] {
            assert_eq!(check_url(good), Ok(()), "{good}");
        }
        for bad in [
            "127.0.0.1:6379",
            "http://a:1",
            "rediss://a:1",
            "redis://",
            "redis://0.0.0.0:1",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
        assert_eq!(
            sharing_of("redis://:secret@10.0.0.1:6379/1").shown_url(),
            "redis://:***@10.0.0.1:6379/1"
        );
        assert_eq!(sharing_of("redis://user:pw@h:1").shown_url(), "redis://user:***@h:1");
        assert_eq!(sharing_of("redis://h:1").shown_url(), "redis://h:1");
    }

    const BASE: &str =
        "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n[[backend]]\nname = \"b\"\n";

    fn first_error(src: &str) -> crate::config::ConfigError {
        match crate::config::parse(src, "t.toml") {
            Ok(_) => panic!("accepted:\n{src}"),
            Err(e) => e.0.into_iter().next().unwrap(),
        }
    }

    #[test]
    fn the_section_has_defaults_and_every_value_is_checked_where_written() {
        let c = crate::config::parse(BASE, "t.toml").unwrap();
        assert_eq!(c.sharing, None);
        let src = format!("{BASE}[shared]\nredis = \"redis://127.0.0.1:6379\"\n");
        let s = crate::config::parse(&src, "t.toml").unwrap().sharing.unwrap();
        assert_eq!(s, sharing_of("redis://127.0.0.1:6379"));
        let src = format!(
            "{BASE}[shared]\nredis = \"redis://h:1\"\nsync_interval = \"50ms\"\nfail = \"closed\"\nprefix = \"edge-eu\"\n"
        );
        let s = crate::config::parse(&src, "t.toml").unwrap().sharing.unwrap();
        assert_eq!(
            (s.sync_interval, s.timeout),
            (Duration::from_millis(50), Duration::from_millis(50))
        );
        assert_eq!((s.fail, s.prefix.as_str()), (FailMode::Closed, "edge-eu"));

        let e = first_error(&format!("{BASE}[shared]\nsync_interval = \"1s\"\n"));
        assert_eq!((e.line, e.key.as_str()), (7, "shared.redis"), "{e}");
        for (line, key) in [
            ("redis = \"rediss://h:1\"", "shared.redis"),
            ("redis = \"h:6379\"", "shared.redis"),
            ("sync_interval = \"1ms\"", "shared.sync_interval"),
            ("timeout = \"0s\"", "shared.timeout"),
            ("prefix = \"a:b\"", "shared.prefix"),
            ("prefix = \"\"", "shared.prefix"),
        ] {
            let src = format!("{BASE}[shared]\nredis = \"redis://h:1\"\n{line}\n").replacen(
                "redis = \"redis://h:1\"\nredis",
                "redis",
                1,
            );
            let e = first_error(&src);
            let at = if key == "shared.redis" { 8 } else { 9 };
            assert_eq!((e.line, e.key.as_str()), (at, key), "{line}: {e}");
        }
        let e = first_error(&format!("{BASE}[shared]\nredis = \"redis://h:1\"\nfail = \"maybe\"\n"));
        assert_eq!(e.line, 9, "{e}");
        let e = first_error(&format!(
            "{BASE}[shared]\nredis = \"redis://h:1\"\nintervall = \"1s\"\n"
        ));
        assert!(e.message.contains("unknown field"), "{e}");
    }

    #[test]
    fn shared_limits_need_the_section_and_a_rate() {
        let limit = |extra: &str| {
            format!(
                "[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
                 [[frontend.limit]]\nname = \"per_ip\"\nkey = \"source\"\n{extra}\nshared = true\n\
                 [[backend]]\nname = \"b\"\n"
            )
        };
        let e = first_error(&limit("rate = \"10/s\""));
        assert_eq!((e.line, e.key.as_str()), (9, "frontend[0].limit[0].shared"), "{e}");
        assert!(e.message.contains("[shared]"), "{e}");
        let with = |extra: &str| format!("{}[shared]\nredis = \"redis://h:1\"\n", limit(extra));
        let e = first_error(&with("concurrent = 2"));
        assert_eq!((e.line, e.key.as_str()), (9, "frontend[0].limit[0].shared"), "{e}");
        let c = crate::config::parse(&with("rate = \"10/s\""), "t.toml").unwrap();
        assert_eq!(c.sharing.unwrap().limits, ["per_ip"]);
        let c = crate::config::parse(
            &with("rate = \"10/s\"").replace("shared = true", "shared = false"),
            "t.toml",
        )
        .unwrap();
        assert!(c.sharing.unwrap().limits.is_empty());
    }
}
