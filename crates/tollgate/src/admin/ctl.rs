//! `tollgate ctl`: arguments → `Command`, `Reply` → text. Sans-io; `main` does the socket.

use crate::command::{Answer, Command, Outcome, Reply};
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

pub fn set_weight(server: &str, weight: u32) -> Result<Command, String> {
    let (backend, server) = split_server(server)?;
    Ok(Command::SetServerWeight {
        backend,
        server,
        weight,
    })
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
            Answer::Metrics(report) => super::prometheus::render(report),
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

/// One line a server, columns aligned.
pub(crate) fn servers_table(servers: &[ServerView]) -> String {
    let header = [
        "BACKEND", "SERVER", "ID", "ADDRESS", "ADMIN", "OPER", "WEIGHT", "ACTIVE", "QUEUED", "CONNS", "REQS", "FAILS",
        "5XX",
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
                s.address.to_string(),
                s.admin.as_str().to_string(),
                s.oper.as_str().to_string(),
                weight,
                s.active.to_string(),
                s.queued.to_string(),
                s.counters.connections.to_string(),
                s.counters.requests.to_string(),
                s.counters.connect_failures.to_string(),
                s.counters.responses_5xx.to_string(),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let parts: Vec<String> = cells
            .zip(&widths)
            .map(|(c, w)| format!("{c:<width$}", width = *w))
            .collect();
        parts.join("  ").trim_end().to_string()
    };
    let mut out = line(&mut header.iter().copied());
    for row in &rows {
        out.push('\n');
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

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
    fn errors_render_as_failures() {
        let (text, ok) = render(&Reply::error(1, "no server `x`"), false);
        assert!(!ok && text.contains("no server"));
        let (json, ok) = render(&Reply::text(1, "done"), true);
        assert!(ok && json.contains("\"status\": \"ok\""), "{json}");
    }
}
