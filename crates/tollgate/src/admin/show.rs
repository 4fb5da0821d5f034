//! `tollgate ctl show stat|sessions|errors|budgets`: arguments → `Command::Show`, the
//! answer → tables for a person (`--json`: the reply as it came). Sans-io.

use super::ctl::{render, split_server, table};
use crate::command::show::{ErrorCapture, GenerationShow, Query, ShowReport};
use crate::command::{Answer, Command, Outcome, Reply};

/// `show stat [frontend NAME | backend NAME]`.
pub fn stat(kind: Option<&str>, name: Option<&str>) -> Result<Command, String> {
    let query = match (kind, name) {
        (None, None) => Query::Stat {
            frontend: None,
            backend: None,
        },
        (Some("frontend"), Some(n)) => Query::Stat {
            frontend: Some(n.to_string()),
            backend: None,
        },
        (Some("backend"), Some(n)) => Query::Stat {
            frontend: None,
            backend: Some(n.to_string()),
        },
        _ => return Err("expected `show stat [frontend NAME | backend NAME]`".into()),
    };
    Ok(Command::Show { query })
}

/// `show sessions [BACKEND | BACKEND/SERVER]`.
pub fn sessions(filter: Option<&str>) -> Result<Command, String> {
    let (backend, server) = match filter {
        None => (None, None),
        Some(f) if f.contains('/') => {
            let (b, s) = split_server(f)?;
            (Some(b), Some(s))
        }
        Some(b) if !b.is_empty() => (Some(b.to_string()), None),
        Some(_) => return Err("expected `show sessions [BACKEND | BACKEND/SERVER]`".into()),
    };
    Ok(Command::Show {
        query: Query::Sessions { backend, server },
    })
}

/// What to print for a `show` answer and whether the command succeeded.
pub fn render_show(reply: &Reply, json: bool) -> (String, bool) {
    let Outcome::Ok {
        answer: Answer::Show(report),
    } = &reply.outcome
    else {
        return render(reply, json);
    };
    if json {
        return render(reply, json);
    }
    let mut out = String::new();
    let gens = &report.generations;
    match report.what.as_str() {
        "stat" => stat_tables(gens, &mut out),
        "budgets" => budgets_table(gens, &mut out),
        "certs" => certs_table(gens, crate::config::cert_store::unix_now(), &mut out),
        "errors" if report.errors.is_empty() => out.push_str("no capture"),
        "errors" => {
            errors_text(&report.errors, &mut out);
            if report.errors_left_out > 0 {
                out.push_str(&format!("({} older capture(s) left out)\n", report.errors_left_out));
            }
        }
        _ => sessions_table(report, &mut out),
    }
    (out.trim_end().to_string(), true)
}

fn stat_tables(gens: &[GenerationShow], out: &mut String) {
    let stats = || gens.iter().filter_map(|g| g.stat.as_ref().map(|s| (g.generation, s)));
    let frontends: Vec<Vec<String>> = stats()
        .flat_map(|(g, s)| {
            s.frontends.iter().map(move |f| {
                let limit = if f.sessions_limit == 0 {
                    "-".into()
                } else {
                    f.sessions_limit.to_string()
                };
                let tls = f.tls_handshakes.map_or_else(|| "-".into(), |n| n.to_string());
                vec![
                    g.to_string(),
                    f.name.clone(),
                    f.state.clone(),
                    f.sessions_current.to_string(),
                    f.sessions_total.to_string(),
                    limit,
                    format!("{}/{}", f.session_rate, f.session_rate_max),
                    f.requests.to_string(),
                    f.bytes_in.to_string(),
                    f.bytes_out.to_string(),
                    f.denied_4xx.to_string(),
                    f.malformed.to_string(),
                    f.conn_denied.to_string(),
                    tls,
                ]
            })
        })
        .collect();
    if !frontends.is_empty() {
        let header = [
            "GEN",
            "FRONTEND",
            "STATE",
            "SCUR",
            "STOT",
            "SLIM",
            "RATE/MAX",
            "REQS",
            "BYTES IN",
            "BYTES OUT",
            "4XX",
            "MALFORMED",
            "DENIED",
            "TLS",
        ];
        out.push_str(&table(&header, &frontends));
        out.push('\n');
    }
    let backends: Vec<Vec<String>> = stats()
        .flat_map(|(g, s)| {
            s.backends.iter().map(move |b| {
                vec![
                    g.to_string(),
                    b.name.clone(),
                    b.state.clone(),
                    b.sessions_current.to_string(),
                    b.sessions_total.to_string(),
                    format!("{}/{}", b.session_rate, b.session_rate_max),
                    format!("{}/{}", b.queue_current, b.queue_max),
                    b.queue_full.to_string(),
                    b.requests.to_string(),
                    b.bytes_in.to_string(),
                    b.bytes_out.to_string(),
                    b.responses_5xx.to_string(),
                    b.connect_errors.to_string(),
                    b.retries.to_string(),
                    b.malformed_responses.to_string(),
                ]
            })
        })
        .collect();
    if !backends.is_empty() {
        let header = [
            "GEN",
            "BACKEND",
            "STATE",
            "SCUR",
            "STOT",
            "RATE/MAX",
            "QCUR/QMAX",
            "QFULL",
            "REQS",
            "BYTES IN",
            "BYTES OUT",
            "5XX",
            "CONN ERR",
            "RETRIES",
            "MALFORMED",
        ];
        out.push_str(&table(&header, &backends));
        out.push('\n');
    }
    let servers: Vec<Vec<String>> = stats()
        .flat_map(|(g, s)| {
            s.servers.iter().map(move |st| {
                let v = &st.server;
                let check = v.check.as_ref();
                vec![
                    g.to_string(),
                    v.backend.clone(),
                    v.name.clone(),
                    format!("{}/{}", v.admin.as_str(), v.oper.as_str()),
                    format!("{}/{}", v.effective_weight, v.weight),
                    v.active.to_string(),
                    v.counters.connections.to_string(),
                    format!("{}/{}", st.session_rate, st.session_rate_max),
                    v.counters.requests.to_string(),
                    v.counters.bytes_to_server.to_string(),
                    v.counters.bytes_to_client.to_string(),
                    v.counters.responses_5xx.to_string(),
                    v.counters.connect_failures.to_string(),
                    check.map_or_else(|| "-".into(), |c| c.status.clone()),
                    since(v.last_change),
                ]
            })
        })
        .collect();
    if !servers.is_empty() {
        let header = [
            "GEN",
            "BACKEND",
            "SERVER",
            "ADMIN/OPER",
            "WEIGHT",
            "SCUR",
            "STOT",
            "RATE/MAX",
            "REQS",
            "BYTES IN",
            "BYTES OUT",
            "5XX",
            "CONN ERR",
            "CHECK",
            "LAST CHANGE",
        ];
        out.push_str(&table(&header, &servers));
    }
}

fn sessions_table(report: &ShowReport, out: &mut String) {
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let rows: Vec<Vec<String>> = report
        .generations
        .iter()
        .flat_map(|g| {
            g.sessions.iter().map(move |s| {
                vec![
                    g.generation.to_string(),
                    s.worker.to_string(),
                    s.id.to_string(),
                    format!("{:.1}s", s.age_ms as f64 / 1000.0),
                    s.client.clone(),
                    s.frontend.clone(),
                    dash(&s.backend),
                    dash(&s.server),
                    s.bytes_in.to_string(),
                    s.bytes_out.to_string(),
                    s.state.clone(),
                    match (s.quic, s.tls) {
                        // TLS 1.3 inside QUIC: the column says which protocol carries it.
                        (true, _) => "HTTP/3",
                        (false, true) => "tls",
                        (false, false) => "-",
                    }
                    .to_string(),
                    dash(&s.request_id),
                ]
            })
        })
        .collect();
    let header = [
        "GEN",
        "WORKER",
        "ID",
        "AGE",
        "CLIENT",
        "FRONTEND",
        "BACKEND",
        "SERVER",
        "BYTES IN",
        "BYTES OUT",
        "STATE",
        "TLS",
        "REQUEST ID",
    ];
    let listed = rows.len();
    out.push_str(&table(&header, &rows));
    out.push_str(&format!("{listed} session(s)"));
    if report.sessions_left_out > 0 {
        out.push_str(&format!(", {} more not listed", report.sessions_left_out));
    }
    out.push('\n');
}

fn budgets_table(gens: &[GenerationShow], out: &mut String) {
    let opt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    let rows: Vec<Vec<String>> = gens
        .iter()
        .flat_map(|g| {
            g.budgets.iter().flat_map(move |t| {
                t.budgets.iter().map(move |b| {
                    vec![
                        g.generation.to_string(),
                        t.worker.to_string(),
                        b.name.clone(),
                        b.limit.to_string(),
                        opt(b.in_use),
                        opt(b.parked),
                        opt(b.waiting),
                    ]
                })
            })
        })
        .collect();
    let header = ["GEN", "WORKER", "BUDGET", "LIMIT", "IN USE", "PARKED", "WAITING"];
    out.push_str(&table(&header, &rows));
}

/// One line per certificate: where, which names, validity and days left, where from,
/// the OCSP staple's end, serial and fingerprint.
fn certs_table(gens: &[GenerationShow], now: i64, out: &mut String) {
    let rows: Vec<Vec<String>> = gens
        .iter()
        .flat_map(|g| {
            g.certs.iter().map(move |c| {
                let ocsp = match (c.stapled, c.ocsp_next_update) {
                    (false, _) => "-".to_string(),
                    (true, Some(next)) => format!("until {}", date(next)),
                    (true, None) => "stapled".to_string(),
                };
                let mut names = c.names.join(",");
                if c.default {
                    names.push_str(" (default)");
                }
                vec![
                    g.generation.to_string(),
                    c.frontend.clone(),
                    names,
                    date(c.not_before),
                    date(c.not_after),
                    days_left(c.not_after, now).to_string(),
                    c.source.clone(),
                    ocsp,
                    c.serial.clone(),
                    c.sha256.clone(),
                ]
            })
        })
        .collect();
    let header = [
        "GEN",
        "FRONTEND",
        "NAMES",
        "NOT BEFORE",
        "NOT AFTER",
        "DAYS",
        "SOURCE",
        "OCSP",
        "SERIAL",
        "SHA256",
    ];
    out.push_str(&table(&header, &rows));
}

/// Whole days from `now` to `not_after` (negative once expired).
pub(crate) fn days_left(not_after: i64, now: i64) -> i64 {
    (not_after - now).div_euclid(86_400)
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SSZ` (UTC).
pub(crate) fn date(unix: i64) -> String {
    let (days, secs) = (unix.div_euclid(86_400), unix.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// Each capture: a line of facts, then its bytes, a line per line of the message with
/// the byte offset of its start, and a caret under the offending byte.
fn errors_text(errors: &[ErrorCapture], out: &mut String) {
    for e in errors {
        let mut time = Vec::new();
        crate::accesslog::format::rfc3339(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(e.time_ms),
            &mut time,
        );
        let mut place = match (&e.backend, &e.server) {
            (Some(b), Some(s)) => format!(" backend {b} server {s}"),
            (Some(b), None) => format!(" backend {b}"),
            _ => String::new(),
        };
        if let Some(id) = &e.request_id {
            place.push_str(&format!(" request {id}"));
        }
        out.push_str(&format!(
            "{} generation {} worker {}: invalid {} from {} on frontend {}{place}: {} at offset {} ({} bytes, {} captured)\n",
            String::from_utf8_lossy(&time),
            e.generation,
            e.worker,
            e.side,
            e.client,
            e.frontend,
            e.error,
            e.offset,
            e.length,
            e.captured
        ));
        marked_lines(&e.escaped, e.escaped_offset as usize, out);
        out.push('\n');
    }
}

/// `escaped` cut after each `\n`, the caret under position `mark`.
fn marked_lines(escaped: &str, mark: usize, out: &mut String) {
    let mut start = 0;
    let mut marked = false;
    let pieces = escaped.split_inclusive("\\n");
    for piece in pieces {
        let end = start + piece.len();
        out.push_str(&format!("  {start:>5}  {piece}\n"));
        if !marked && mark >= start && (mark < end || end == escaped.len()) {
            out.push_str(&format!("  {:>5}  {}^\n", "", " ".repeat(mark - start)));
            marked = true;
        }
        start = end;
    }
}

/// How long ago a server last changed state (`epoch_secs`, 0: never), as `show stat`
/// prints it: `3m12s ago` (HAProxy's `lastchg`, in words; JSON keeps the epoch seconds).
pub(crate) fn since(epoch_secs: u64) -> String {
    if epoch_secs == 0 {
        return "-".into();
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let ago = std::time::Duration::from_secs(now.saturating_sub(epoch_secs));
    format!("{} ago", crate::config::units::human_duration(ago))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn arguments_become_show_commands() {
        assert!(matches!(
            stat(Some("backend"), Some("app")).unwrap(),
            Command::Show {
                query: Query::Stat {
                    backend: Some(_),
                    frontend: None
                }
            }
        ));
        assert!(stat(Some("server"), Some("x")).is_err());
        assert!(stat(Some("frontend"), None).is_err());
        assert!(matches!(
            sessions(Some("app/a")).unwrap(),
            Command::Show {
                query: Query::Sessions { server: Some(_), .. }
            }
        ));
        assert!(sessions(Some("app/")).is_err());
    }

    #[test]
    fn dates_and_days_left() {
        assert_eq!(date(0), "1970-01-01 00:00:00Z");
        assert_eq!(date(1_709_164_800 + 3661), "2024-02-29 01:01:01Z");
        assert_eq!(date(2_556_143_999), "2050-12-31 23:59:59Z");
        assert_eq!(days_left(86_400 * 10, 0), 10);
        assert_eq!(days_left(86_400 * 10 - 1, 0), 9);
        assert_eq!(days_left(0, 1), -1);
    }

    #[test]
    fn the_caret_sits_under_the_offending_byte() {
        let mut out = String::new();
        marked_lines("GET / HTTP/1.1\\r\\nBad Name: x\\r\\n\\r\\n", 21, &mut out);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[1].starts_with("     18  Bad Name"), "{out}");
        let caret = lines[2].find('^').unwrap();
        assert_eq!(&lines[1][caret..caret + 1], " ", "{out}");
        assert_eq!(&lines[1][caret - 3..caret], "Bad", "{out}");
    }
}
