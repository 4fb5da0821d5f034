//! HAProxy's value syntaxes in tollgate's: times, sizes, log-format strings in header values
//! and redirects, and the reason a keyword has no equivalent.

use super::super::lexer::Line;

/// An HAProxy time (`5s`, `100ms`, `2m`; a bare number is milliseconds) in milliseconds.
pub(crate) fn time_ms(v: &str) -> Result<u64, String> {
    let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
    let unit = v.get(digits.len()..).unwrap_or_default();
    let n: u64 = digits.parse().map_err(|_| format!("`{v}` is not a time"))?;
    let ms = match unit {
        "" | "ms" => Some(n),
        "us" => Some(n.div_ceil(1000)),
        "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => return Err(format!("`{v}`: unknown time unit `{unit}`")),
    };
    ms.ok_or_else(|| format!("`{v}` is too long"))
}

/// Milliseconds as a tollgate duration string.
pub(crate) fn duration(ms: u64) -> String {
    match ms {
        0 => "0s".into(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}

/// An HAProxy size (`100k`, `1m`: powers of 1024) as a number.
pub(crate) fn size(v: &str) -> Result<u64, String> {
    let lower = v.to_ascii_lowercase();
    let (digits, mult) = match lower.as_bytes().last() {
        Some(b'k') => (&lower[..lower.len() - 1], 1024),
        Some(b'm') => (&lower[..lower.len() - 1], 1024 * 1024),
        Some(b'g') => (&lower[..lower.len() - 1], 1024 * 1024 * 1024),
        _ => (lower.as_str(), 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("`{v}` is not a size"))
}

/// A log-format string (`%[hdr(host)]`, `%%`) as a tollgate template (`{authority}`,
/// `{{` for a brace), for redirects and request header values.
pub(crate) fn template(v: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = v;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("%[") {
            let end = after.find(']').ok_or_else(|| format!("`{v}`: `%[` without `]`"))?;
            let expr = after.get(..end).unwrap_or_default();
            out.push_str(match expr {
                "hdr(host)" | "req.hdr(host)" | "req.fhdr(host)" => "{authority}",
                "path" => "{path}",
                "query" => "{query}",
                "url" | "capture.req.uri" | "pathq" => "{path_and_query}",
                other => {
                    return Err(format!(
                        "the sample expression `%[{other}]` has no template variable in tollgate"
                    ));
                }
            });
            rest = after.get(end + 1..).unwrap_or_default();
            continue;
        }
        if let Some(after) = rest.strip_prefix("%%") {
            out.push('%');
            rest = after;
            continue;
        }
        if rest.starts_with('%') && rest.len() > 1 {
            return Err(format!(
                "`{v}`: the log-format variable in it has no template variable in tollgate"
            ));
        }
        rest = push_literal(c, rest, &mut out);
    }
    Ok(out)
}

/// Writes `c`, the first character of `rest`, as template text (braces doubled); returns
/// what follows it.
fn push_literal<'r>(c: char, rest: &'r str, out: &mut String) -> &'r str {
    match c {
        '{' => out.push_str("{{"),
        '}' => out.push_str("}}"),
        c => out.push(c),
    }
    rest.get(c.len_utf8()..).unwrap_or_default()
}

/// A value with no expression at all (response header values are fixed text).
pub(crate) fn fixed(v: &str) -> Result<String, String> {
    if v.replace("%%", "").contains('%') {
        return Err("a response header value with a sample expression or log-format variable has no equivalent (fixed text only)".into());
    }
    Ok(v.replace("%%", "%"))
}

/// A `log-format` as a text template: the common `%` variables by name.
pub(crate) fn log_template(v: &str) -> Result<String, String> {
    const VARS: &[(&str, &str)] = &[
        ("ci", "{client_ip}"),
        ("cp", "{client_port}"),
        ("ft", "{frontend}"),
        ("f", "{frontend}"),
        ("b", "{backend}"),
        ("s", "{server}"),
        ("si", "{server_address}"),
        ("ST", "{status}"),
        ("B", "{bytes_to_client}"),
        ("U", "{bytes_to_server}"),
        ("Ta", "{total_ms}"),
        ("Tt", "{total_ms}"),
        ("Tw", "{queued_ms}"),
        ("Tc", "{connected_ms}"),
        ("Tr", "{response_ms}"),
        ("TR", "{head_ms}"),
        ("HM", "{method}"),
        ("HU", "{path}"),
        ("HQ", "{query}"),
        ("HV", "{version}"),
        ("ID", "{request_id}"),
        ("ts", "{termination_code}"),
        ("tsc", "{termination_code}"),
        ("rc", "{retries}"),
        ("t", "{time}"),
        ("T", "{time}"),
        ("tr", "{time}"),
        ("trg", "{time}"),
        ("sslv", "{tls_version}"),
        ("sslc", "{tls_cipher}"),
    ];
    let mut out = String::new();
    let mut rest = v;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("%%") {
            out.push('%');
            rest = after;
            continue;
        }
        if let Some(after) = rest.strip_prefix('%') {
            // Flags such as %{+Q} are dropped: the template has its own quoting.
            let after = match after.strip_prefix('{') {
                Some(f) => f.get(f.find('}').ok_or("`%{` without `}`")? + 1..).unwrap_or_default(),
                None => after,
            };
            if after.starts_with('[') {
                let end = after.find(']').ok_or("`%[` without `]`")?;
                let expr = after.get(1..end).unwrap_or_default();
                let field = match expr.strip_prefix("req.hdr(").or_else(|| expr.strip_prefix("hdr(")) {
                    Some(h) => format!("{{header.{}}}", h.trim_end_matches(')').to_ascii_lowercase()),
                    None if expr == "ssl_fc_sni" => "{sni}".to_string(),
                    None if expr == "unique-id" => "{request_id}".to_string(),
                    None => return Err(format!("the sample `%[{expr}]` has no access-log field")),
                };
                out.push_str(&field);
                rest = after.get(end + 1..).unwrap_or_default();
                continue;
            }
            let Some((name, field)) = VARS
                .iter()
                .filter(|(n, _)| after.starts_with(n))
                .max_by_key(|(n, _)| n.len())
            else {
                let name: String = after.chars().take_while(char::is_ascii_alphabetic).collect();
                return Err(format!("the log-format variable `%{name}` has no access-log field"));
            };
            let used = name.len();
            out.push_str(field);
            rest = after.get(used..).unwrap_or_default();
            continue;
        }
        rest = push_literal(c, rest, &mut out);
    }
    Ok(out)
}

/// A line that needs nothing in tollgate (its behaviour is tollgate's own), and why.
pub(crate) fn not_needed(l: &Line) -> Option<&'static str> {
    Some(match (l.word(0), l.word(1)) {
        ("log", "global") => "tollgate writes access lines where [log] `access` says",
        ("option", "httplog" | "tcplog" | "httpslog") => {
            "tollgate's access log has its own layout ([log] `format`, `template`)"
        }
        ("option", "dontlognull") => "tollgate logs every session; `[log] sample` thins out normal ones",
        ("option", "http-server-close" | "http-keep-alive" | "httpclose" | "http-pretend-keepalive") => {
            "tollgate keeps client connections alive and pools server connections"
        }
        ("option", "log-health-checks") => "health state changes are always logged",
        ("option", "splice-auto" | "splice-request" | "splice-response") => "zero-copy relaying is [frontend.splice]",
        (
            "option",
            "tcpka" | "clitcpka" | "srvtcpka" | "tcp-smart-accept" | "tcp-smart-connect" | "nolinger" | "http-no-delay",
        ) => "socket options tollgate sets itself",
        ("option", "contstats" | "socket-stats" | "http-use-htx" | "independent-streams") => {
            "tollgate's counters and streams work this way already"
        }
        ("option", "http-ignore-probes") => "a connection closed before a request is not logged as an error",
        ("option", "abortonclose") => "a request whose client left is abandoned",
        ("option", "log-separate-errors") => "errors are logged with the other lines",
        ("no", "log") => "no access log unless [log] `access` is set",
        ("mode", _) => "the proxies that use this section set their own mode",
        _ => return None,
    })
}

/// Why nothing took a line: what HAProxy does with it and what tollgate has instead.
pub(crate) fn unknown_keyword(l: &Line) -> String {
    let kw = l.word(0);
    let second = l.word(1);
    match (kw, second) {
        (
            "option",
            "httplog"
            | "tcplog"
            | "dontlognull"
            | "log-health-checks"
            | "http-server-close"
            | "httpclose"
            | "http-keep-alive"
            | "splice-auto"
            | "splice-request"
            | "splice-response"
            | "socket-stats"
            | "contstats"
            | "http-buffer-request"
            | "abortonclose"
            | "tcp-smart-accept"
            | "tcp-smart-connect"
            | "clitcpka"
            | "srvtcpka"
            | "tcpka"
            | "nolinger"
            | "http-pretend-keepalive"
            | "http-no-delay"
            | "log-separate-errors"
            | "dontlog-normal"
            | "prefer-last-server"
            | "allbackups"
            | "independent-streams"
            | "http-use-htx"
            | "logasap"
            | "checkcache"
            | "persist"
            | "accept-invalid-http-request"
            | "accept-invalid-http-response"
            | "h1-case-adjust-bogus-client"
            | "h1-case-adjust-bogus-server"
            | "http-ignore-probes"
            | "http-restrict-req-hdr-names"
            | "originalto"
            | "transparent"
            | "disable-h2-upgrade"
            | "idle-close-on-response"
            | "redis-check"
            | "mysql-check"
            | "pgsql-check"
            | "smtpchk"
            | "ldap-check"
            | "ssl-hello-chk"
            | "spop-check"
            | "external-check",
        ) => {
            format!(
                "`option {second}` has no equivalent; tollgate's behaviour here is fixed (see docs/migrating-from-haproxy.md)"
            )
        }
        ("option", _) => format!("`option {second}` has no equivalent in tollgate"),
        ("errorfile" | "errorfiles" | "errorloc" | "errorloc302" | "errorloc303", _) => {
            "custom error pages have no equivalent: tollgate answers its own errors with the status's reason phrase"
                .into()
        }
        (
            "filter"
            | "http-reuse"
            | "fullconn"
            | "description"
            | "id"
            | "enabled"
            | "disabled"
            | "rate-limit"
            | "bind-process"
            | "email-alert"
            | "http-send-name-header"
            | "dynamic-cookie-key"
            | "force-persist"
            | "ignore-persist"
            | "persist"
            | "stick"
            | "stick-store-request"
            | "stick-match"
            | "stick-on"
            | "spoe"
            | "declare"
            | "server-state-file-name"
            | "load-server-state-from-file"
            | "external-check"
            | "max-keep-alive-queue"
            | "http-error"
            | "use-server"
            | "tcp-check"
            | "tcp-response"
            | "http-after-response"
            | "monitor"
            | "monitor-net"
            | "source"
            | "grace"
            | "clitcpka-idle"
            | "srvtcpka-idle",
            _,
        ) => {
            format!("`{kw}` has no equivalent in tollgate")
        }
        ("lua-load" | "lua-load-per-thread" | "lua-prepend-path", _) => "Lua has no equivalent in tollgate".into(),
        (
            "tune.bufsize"
            | "tune.maxrewrite"
            | "tune.ssl.default-dh-param"
            | "tune.ssl.cachesize"
            | "tune.ssl.lifetime"
            | "tune.http.maxhdr"
            | "tune.maxaccept"
            | "tune.h2.max-concurrent-streams"
            | "tune.idletimer",
            _,
        ) => {
            format!(
                "`{kw}` tunes HAProxy's own buffers and tables; tollgate's limits are in [global], [http] and [http2] (docs/config.md)"
            )
        }
        (kw, _) if kw.starts_with("tune.") => format!("`{kw}` tunes HAProxy internals; no equivalent"),
        _ => format!("`{kw}` is not something `tollgate convert` knows how to convert"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn values() {
        assert_eq!(time_ms("5s").unwrap(), 5000);
        assert_eq!(time_ms("250").unwrap(), 250);
        assert_eq!(duration(time_ms("2m").unwrap()), "2m");
        assert_eq!(duration(1500), "1500ms");
        assert!(time_ms("5x").is_err());
        assert_eq!(size("100k").unwrap(), 102_400);
        assert_eq!(
            template("https://%[hdr(host)]%[url]{x}").unwrap(),
            "https://{authority}{path_and_query}{{x}}"
        );
        assert!(template("%[src]").is_err());
        assert!(log_template("%ci:%cp [%tr] %ft %b/%s %ST %B %{+Q}r").is_err());
        assert_eq!(
            log_template("%ci %HM %HU %ST %Ta").unwrap(),
            "{client_ip} {method} {path} {status} {total_ms}"
        );
    }
}
