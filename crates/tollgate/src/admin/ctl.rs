//! `tollgate ctl`: arguments → `Command`, `Reply` → text. Sans-io; `main` does the socket.

use std::path::Path;

use crate::command::{AddServerArgs, Answer, Command, Outcome, Pem, Reply};
use crate::live::server::{AdminState, ServerView};

/// `BACKEND/SERVER` → its two names.
pub(crate) fn split_server(name: &str) -> Result<(String, String), String> {
    match name.split_once('/') {
        Some((b, s)) if !b.is_empty() && !s.is_empty() && !s.contains('/') => Ok((b.to_string(), s.to_string())),
        _ => Err(format!("`{name}`: expected BACKEND/SERVER")),
    }
}

pub fn set_state(server: &str, state: &str, kill: bool) -> Result<Command, String> {
    let (backend, server) = split_server(server)?;
    let state = AdminState::parse(state).ok_or_else(|| format!("unknown state `{state}` (ready, drain, maint)"))?;
    if kill && state != AdminState::Maint {
        return Err("--kill goes with state maint".into());
    }
    Ok(Command::SetServerState {
        backend,
        server,
        state,
        kill,
    })
}

pub fn shutdown_sessions(server: &str) -> Result<Command, String> {
    let (backend, server) = split_server(server)?;
    Ok(Command::ShutdownSessions { backend, server })
}

pub fn set_weight(server: &str, weight: u32) -> Result<Command, String> {
    let (backend, server) = split_server(server)?;
    Ok(Command::SetServerWeight {
        backend,
        server,
        weight,
    })
}

/// `set server B/S address IP[:PORT]` (the master checks the address: it knows the port to keep).
pub fn set_address(server: &str, address: &str) -> Result<Command, String> {
    let (backend, server) = split_server(server)?;
    Ok(Command::SetServerAddress {
        backend,
        server,
        address: address.to_string(),
    })
}

/// `add server B/S address=IP:PORT [weight=N] [maxconn=N] [backup] [check] [slowstart=DUR]
/// [enabled | state=ready|maint]`, HAProxy's words.
pub fn add_server(server: &str, words: &[String]) -> Result<Command, String> {
    let (backend, server) = split_server(server)?;
    let mut spec = AddServerArgs::default();
    let mut address = None;
    for word in words {
        let number = |v: &str| v.parse::<u32>().map_err(|_| format!("`{word}`: expected a number"));
        match word.split_once('=') {
            Some(("address", v)) => address = Some(v.to_string()),
            Some(("weight", v)) => spec.weight = Some(number(v)?),
            Some(("maxconn", v)) => spec.maxconn = Some(number(v)?),
            Some(("slowstart", v)) => {
                let d = crate::config::units::parse_duration(v)?;
                spec.slowstart_ms = Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            }
            Some(("state", "ready")) => spec.enabled = true,
            Some(("state", "maint")) => spec.enabled = false,
            Some(("state", v)) => return Err(format!("`state={v}`: a new server starts ready or maint")),
            None if word == "backup" => spec.backup = true,
            None if word == "check" => spec.check = true,
            None if word == "enabled" => spec.enabled = true,
            None if word == "disabled" => spec.enabled = false,
            _ => {
                return Err(format!(
                    "`{word}`: expected address=IP:PORT, weight=N, maxconn=N, slowstart=DUR, backup, check, enabled \
                     or state=ready|maint"
                ));
            }
        }
    }
    spec.address = address.ok_or("address=IP:PORT is required")?;
    Ok(Command::AddServer { backend, server, spec })
}

pub fn del_server(server: &str) -> Result<Command, String> {
    let (backend, server) = split_server(server)?;
    Ok(Command::DelServer { backend, server })
}

/// `set cert FRONTEND CERT [KEY]`: the files read here, with the caller's own rights
/// (bounded, regular files only: `config::bounded`), and their contents sent; the master
/// never opens a path a caller names (it runs as root and could read what the caller
/// cannot). The paths go along canonical, as names: the master matches `cert` against the
/// configured certificates (whose configured key it uses when KEY is not given).
pub fn set_cert(frontend: &str, cert: &Path, key: Option<&Path>) -> Result<Command, String> {
    use crate::config::bounded::{MAX_OCSP, MAX_PEM, read_bounded, read_file};
    let text = |path: &Path| -> Result<(String, Pem), String> {
        let bytes = read_file(path, MAX_PEM)?;
        let pem = String::from_utf8(bytes).map_err(|_| format!("{}: not a PEM file (not text)", path.display()))?;
        // Read: the path resolves, so canonicalizing it tells the caller nothing new.
        let name = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Ok((name.display().to_string(), Pem(pem)))
    };
    let (cert_name, cert_pem) = text(cert)?;
    let (key, key_pem) = match key.map(text).transpose()? {
        Some((name, pem)) => (Some(name), Some(pem)),
        None => (None, None),
    };
    let mut ocsp_path = cert.as_os_str().to_owned();
    ocsp_path.push(".ocsp");
    let ocsp_hex = match read_bounded(Path::new(&ocsp_path), MAX_OCSP) {
        Ok(der) => Some(crate::config::cert_store::hex(&der)),
        Err(e) if e.not_found() => None,
        Err(e) => return Err(format!("cannot read {}: {e}", Path::new(&ocsp_path).display())),
    };
    Ok(Command::SetCert {
        frontend: frontend.to_string(),
        cert: cert_name,
        cert_pem,
        key,
        key_pem,
        ocsp_hex,
    })
}

/// `show info`: the metrics answer as a summary for a person — the master, each
/// generation's threads, every budget with its limit, use and parks, the process counters.
/// Other answers (and `--json`) render as `render` does.
pub fn render_info(reply: &Reply, json: bool) -> (String, bool) {
    let Outcome::Ok {
        answer: Answer::Metrics(report),
    } = &reply.outcome
    else {
        return render(reply, json);
    };
    if json {
        return render(reply, json);
    }
    let mut out = String::new();
    match &report.master {
        Some(m) => {
            let states: Vec<String> = m.generations.iter().map(|(s, n)| format!("{s} {n}")).collect();
            out.push_str(&format!(
                "tollgate {}, master up {} s, generation {} serving; generations: {}; reloads {} ({} refused)\n",
                m.version,
                m.uptime_seconds,
                m.current_generation,
                states.join(", "),
                m.reloads,
                m.reloads_refused
            ));
        }
        None => out.push_str("no master (--no-master)\n"),
    }
    let opt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    for g in &report.generations {
        let m = &g.metrics;
        out.push_str(&format!(
            "\ngeneration {}: {} worker thread(s)\n",
            g.generation, m.workers
        ));
        let rows: Vec<Vec<String>> = m
            .budgets
            .iter()
            .map(|b| {
                vec![
                    b.name.clone(),
                    b.limit.to_string(),
                    opt(b.in_use),
                    opt(b.parked),
                    opt(b.waiting),
                ]
            })
            .collect();
        out.push_str(&table(&["BUDGET", "LIMIT", "IN USE", "PARKED", "WAITING"], &rows));
        let counters: Vec<String> = m
            .counters
            .iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        out.push_str(&format!("counters (non-zero): {}\n", counters.join(" ")));
        out.push_str(&shared_line(&m.counters));
    }
    (out.trim_end().to_string(), true)
}

/// The state of the limits shared through Redis, when the generation shares any (it has
/// tried a round).
fn shared_line(counters: &[(String, u64)]) -> String {
    let get = |name: &str| counters.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
    let (rounds, failed) = (get("shared_rounds"), get("shared_rounds_failed"));
    if rounds + failed == 0 {
        return String::new();
    }
    let state = if get("shared_redis_down") == 1 {
        "UNREACHABLE (limiting locally, or refusing with fail = \"closed\")"
    } else {
        "reachable"
    };
    format!(
        "shared limits: Redis {state}; rounds {rounds} ({failed} failed), outages {}, keys pushed {}, pulled {}\n",
        get("shared_outages"),
        get("shared_keys_pushed"),
        get("shared_keys_pulled")
    )
}

/// Columns aligned to their widest cell.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// What to print and whether the command succeeded.
pub fn render(reply: &Reply, json: bool) -> (String, bool) {
    let ok = matches!(reply.outcome, Outcome::Ok { .. });
    if json {
        let text = serde_json::to_string_pretty(reply).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        return (text, ok);
    }
    let text = match &reply.outcome {
        Outcome::Error { message } => message.clone(),
        Outcome::Ok { answer } => match answer {
            Answer::Text { text } => text.clone(),
            Answer::Servers { servers } => servers_table(servers),
            Answer::Explained { text, .. } => text.trim_end().to_string(),
            Answer::Metrics(report) => super::prometheus::render(report),
            Answer::Table(report) => table_text(report),
            Answer::Status(report) => report.text().trim_end().to_string(),
            // Tables (never back here: `render_show` renders a `show` answer itself).
            Answer::Show(_) => return super::show::render_show(reply, false),
            Answer::Reload(report) => {
                let mut out = report.text.clone();
                for line in &report.kept {
                    out.push_str(&format!("\nkept runtime change: {line}"));
                }
                for line in &report.overridden {
                    out.push_str(&format!("\ndropped runtime change: {line}"));
                }
                out
            }
        },
    };
    (text, ok)
}

/// `show table`: the limit and its counters, then one line an entry.
pub(crate) fn table_text(t: &crate::command::table::TableReport) -> String {
    let mut limits = Vec::new();
    if let Some(rate) = &t.rate {
        limits.push(format!("rate {rate}"));
        if t.burst > 0 {
            limits.push(format!("burst {}", t.burst));
        }
    }
    if t.concurrent > 0 {
        limits.push(format!("concurrent {}", t.concurrent));
    }
    let mut out = format!(
        "table {} (frontend {}): key {}, {}, action {}\nentries {}/{} denied {} tarpitted {} evicted {} expired {} untracked {}\n",
        t.name,
        t.frontend,
        t.key,
        limits.join(", "),
        t.action,
        t.entries,
        t.size,
        t.denied,
        t.tarpitted,
        t.evicted,
        t.expired,
        t.untracked
    );
    let rows: Vec<Vec<String>> = t
        .rows
        .iter()
        .map(|r| {
            vec![
                r.key.clone(),
                r.rate.to_string(),
                r.in_flight.to_string(),
                format!("{}.{:03}s", r.idle_ms / 1000, r.idle_ms % 1000),
            ]
        })
        .collect();
    out.push_str(&table(&["KEY", "RATE", "CONCURRENT", "LAST SEEN"], &rows));
    if t.rows_left_out > 0 {
        out.push_str(&format!("\n({} more entries not listed)", t.rows_left_out));
    }
    out
}

/// One line a server, columns aligned.
pub(crate) fn servers_table(servers: &[ServerView]) -> String {
    let header = [
        "BACKEND",
        "SERVER",
        "ID",
        "SRC",
        "ADDRESS",
        "ADMIN",
        "OPER",
        "WEIGHT",
        "ACTIVE",
        "QUEUED",
        "CONNS",
        "REQS",
        "FAILS",
        "5XX",
        "CHECK",
        "CHECKS",
        "LAST CHANGE",
        "HOST",
    ];
    let rows: Vec<Vec<String>> = servers
        .iter()
        .map(|s| {
            let weight = if s.effective_weight == s.weight {
                s.weight.to_string()
            } else {
                format!("{}/{}", s.effective_weight, s.weight)
            };
            vec![
                s.backend.clone(),
                s.name.clone(),
                s.id.to_string(),
                s.source.as_str().to_string(),
                if s.resolved {
                    s.address.to_string()
                } else {
                    "unresolved".to_string()
                },
                s.admin.as_str().to_string(),
                s.oper.as_str().to_string(),
                weight,
                s.active.to_string(),
                s.queued.to_string(),
                s.counters.connections.to_string(),
                s.counters.requests.to_string(),
                s.counters.connect_failures.to_string(),
                s.counters.responses_5xx.to_string(),
                // HAProxy's short code of the last check; checks run / failed.
                s.check.as_ref().map_or_else(|| "-".into(), |c| c.status.clone()),
                s.check
                    .as_ref()
                    .map_or_else(|| "-".into(), |c| format!("{}/{}", c.checks, c.failed)),
                super::show::since(s.last_change),
                s.host.clone().unwrap_or_else(|| "-".to_string()),
            ]
        })
        .collect();
    let mut out = table(&header, &rows);
    // The table ends each line; the queue lines start theirs.
    out.pop();
    out.push_str(&queue_lines(servers));
    out
}

/// One line per backend whose queue is in use or has refused requests (nothing otherwise):
/// the backend's queue is not any one server's.
fn queue_lines(servers: &[ServerView]) -> String {
    let mut out = String::new();
    let mut seen: Vec<&str> = Vec::new();
    for s in servers {
        if seen.contains(&s.backend.as_str()) {
            continue;
        }
        seen.push(&s.backend);
        if s.backend_queued != 0 || s.backend_queue_full != 0 {
            out.push_str(&format!(
                "\nbackend {}: {} queued, {} refused (queue full)",
                s.backend, s.backend_queued, s.backend_queue_full
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_shared_line_says_whether_redis_is_reachable() {
        let counters = |down: u64, failed: u64| -> Vec<(String, u64)> {
            [
                ("shared_rounds", 12),
                ("shared_rounds_failed", failed),
                ("shared_outages", 1),
                ("shared_keys_pushed", 30),
                ("shared_keys_pulled", 40),
                ("shared_redis_down", down),
            ]
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect()
        };
        let line = shared_line(&counters(1, 3));
        assert!(line.starts_with("shared limits: Redis UNREACHABLE"), "{line}");
        assert!(
            line.contains("rounds 12 (3 failed), outages 1, keys pushed 30, pulled 40"),
            "{line}"
        );
        assert!(shared_line(&counters(0, 3)).starts_with("shared limits: Redis reachable;"));
        assert_eq!(
            shared_line(&[("sessions_total".to_string(), 5)]),
            "",
            "no sharing: no line"
        );
    }

    #[test]
    fn arguments_become_commands_or_clear_errors() {
        assert!(matches!(
            set_state("app/a", "drain", false).unwrap(),
            Command::SetServerState {
                state: AdminState::Drain,
                kill: false,
                ..
            }
        ));
        assert!(set_state("app", "drain", false).unwrap_err().contains("BACKEND/SERVER"));
        assert!(set_state("app/a/b", "drain", false).is_err());
        assert!(
            set_state("app/a", "sleep", false)
                .unwrap_err()
                .contains("unknown state")
        );
        assert!(set_state("app/a", "ready", true).unwrap_err().contains("maint"));
        assert!(matches!(
            set_weight("app/a", 3).unwrap(),
            Command::SetServerWeight { weight: 3, .. }
        ));
    }

    #[test]
    fn servers_table_shows_host_names_and_unresolved_addresses() {
        let view = |name: &str, host: Option<&str>, resolved: bool| ServerView {
            id: crate::ids::ServerId(7),
            backend: "be".into(),
            name: name.into(),
            address: "127.0.0.2:80".parse().unwrap(),
            host: host.map(Into::into),
            resolved,
            admin: AdminState::Ready,
            oper: crate::live::server::OperState::Unknown,
            weight: 1,
            effective_weight: 1,
            backup: false,
            maxconn: 0,
            active: 0,
            queued: 0,
            last_change: 0,
            counters: Default::default(),
            check: None,
            backend_queued: 0,
            backend_queue_full: 0,
            source: Default::default(),
        };
        let table = servers_table(&[
            view("ip", None, true),
            view("named", Some("app.example"), true),
            view("later", Some("new.example"), false),
        ]);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].ends_with("CHECKS  LAST CHANGE  HOST"), "{table}");
        assert!(lines[1].contains("127.0.0.2:80") && lines[1].ends_with(" -"), "{table}");
        assert!(
            lines[2].contains("127.0.0.2:80") && lines[2].ends_with("app.example"),
            "{table}"
        );
        assert!(
            lines[3].contains(" unresolved ") && lines[3].ends_with("new.example"),
            "{table}"
        );
        // An older worker's JSON (no host, no resolved) still reads as a resolved server.
        let old = r#"{"id":1,"backend":"b","name":"a","address":"127.0.0.1:1","admin":"ready","oper":"up",
            "weight":1,"effective_weight":1,"backup":false,"maxconn":0,"active":0,"queued":0,
            "last_change":0,"counters":{"connections":0,"requests":0,"bytes_to_server":0,
            "bytes_to_client":0,"connect_failures":0,"retries":0,"responses_1xx":0,
            "responses_2xx":0,"responses_3xx":0,"responses_4xx":0,"responses_5xx":0,
            "responses_other":0}}"#;
        let parsed: ServerView = serde_json::from_str(old).unwrap();
        assert!(parsed.resolved && parsed.host.is_none());
    }

    #[test]
    fn server_commands_parse_haproxy_words() {
        let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let add = add_server(
            "app/n",
            &words(&[
                "address=10.0.0.1:80",
                "weight=5",
                "maxconn=9",
                "backup",
                "check",
                "slowstart=2s",
                "enabled",
            ]),
        )
        .unwrap();
        let Command::AddServer { backend, server, spec } = add else {
            panic!("{add:?}");
        };
        assert_eq!((backend.as_str(), server.as_str()), ("app", "n"));
        assert_eq!(
            spec,
            AddServerArgs {
                address: "10.0.0.1:80".into(),
                weight: Some(5),
                maxconn: Some(9),
                backup: true,
                check: true,
                slowstart_ms: Some(2000),
                enabled: true,
            }
        );
        assert!(
            add_server("app/n", &words(&["weight=2"]))
                .unwrap_err()
                .contains("address")
        );
        assert!(
            add_server("app/n", &words(&["address=1.2.3.4:5", "weight=x"]))
                .unwrap_err()
                .contains("number")
        );
        assert!(
            add_server("app/n", &words(&["address=1.2.3.4:5", "tls"]))
                .unwrap_err()
                .contains("expected")
        );
        assert!(add_server("app/n", &words(&["address=1.2.3.4:5", "state=drain"])).is_err());
        assert!(matches!(del_server("app/n").unwrap(), Command::DelServer { .. }));
        assert!(del_server("app").is_err());
        assert!(matches!(
            set_address("app/a", "10.0.0.2").unwrap(),
            Command::SetServerAddress { address, .. } if address == "10.0.0.2"
        ));
    }

    #[test]
    fn errors_render_as_failures() {
        let (text, ok) = render(&Reply::error(1, "no server `x`"), false);
        assert!(!ok && text.contains("no server"));
        let (json, ok) = render(&Reply::text(1, "done"), true);
        assert!(ok && json.contains("\"status\": \"ok\""), "{json}");
    }
}
