//! `tollgate man`: one manual page, tollgate(1), for every command.
//!
//! clap_mangen renders the title, name, synopsis, description and options from the command
//! line's own definitions (so they never drift from `--help`); the rest is written here,
//! because its default page points at `tollgate-run(1)`, `tollgate-ctl(1)`... pages that are
//! never produced and reflows the examples into one paragraph. Instead: a COMMANDS section
//! listing every command and subcommand with what it does, EXAMPLES kept line by line, and
//! EXIT STATUS, SIGNALS, FILES and SEE ALSO sections.
//!
//! Invariant: every text that comes from a definition is escaped for roff ([`escape`]): a
//! leading `.` or `'` would be read as a request, a `\` as an escape.

use std::fmt::Write as _;

/// Lines of `tollgate man`'s EXAMPLES section: the command, then what it does.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "tollgate",
        "run the embedded demo (127.0.0.1:8080 to two built-in origins)",
    ),
    (
        "tollgate run --config /etc/tollgate/tollgate.toml",
        "run a config (also: tollgate -c FILE)",
    ),
    (
        "tollgate check --config tollgate.toml",
        "validate a config; exit 2 with FILE:LINE:COL on error",
    ),
    (
        "tollgate reload --config tollgate.toml",
        "reload the running master and wait for the outcome",
    ),
    (
        "tollgate ctl -c tollgate.toml show servers",
        "live server state (--json for scripts)",
    ),
    (
        "tollgate ctl -c tollgate.toml set server app/a state drain",
        "ready | drain | maint [--kill]",
    ),
    (
        "tollgate explain -c tollgate.toml 'GET https://api.example/v1/x'",
        "where a request would go, and why",
    ),
    (
        "RUST_LOG=tollgate=debug tollgate run",
        "per-connection events and counters",
    ),
];

const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "success (for reload: the new generation serves)"),
    (
        "1",
        "a runtime failure: an address in use, a worker that cannot start, the master unreachable",
    ),
    (
        "2",
        "a config refused (FILE:LINE:COL: message lines on standard error), or a command the master refused",
    ),
    ("64", "a usage error: unknown option or command, missing value"),
];

const SIGNALS: &[(&str, &str)] = &[
    (
        "SIGTERM",
        "stop accepting at once, finish the connections in flight (at most timeouts.hard_stop_after), exit",
    ),
    ("SIGINT", "exit at once"),
    (
        "SIGHUP",
        "to the master: reload the config file (as tollgate reload; the outcome is in the log); a worker ignores it",
    ),
    ("SIGUSR1", "reopen the access log files (after logrotate moved them)"),
];

const FILES: &[(&str, &str)] = &[
    (
        "./tollgate.toml",
        "the config run reads without --config, before the next one",
    ),
    (
        "/etc/tollgate/tollgate.toml",
        "then this one; without either, the embedded demo runs",
    ),
    (
        "/run/tollgate/tollgate.sock",
        "the master's control socket (global.control_socket), which reload, status and ctl use",
    ),
];

/// The whole page (roff) for `cmd`, the `tollgate` command line.
pub(crate) fn render(cmd: clap::Command) -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    let mut page = String::new();
    page.push_str(".SH COMMANDS\n");
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        commands(&mut page, "tollgate", sub);
    }
    page.push_str(".SH EXAMPLES\n");
    for (command, what) in EXAMPLES {
        let _ = writeln!(page, ".TP\n.B {}\n{}", escape(command), escape(what));
    }
    section(&mut page, "EXIT STATUS", EXIT_STATUS);
    section(&mut page, "SIGNALS", SIGNALS);
    section(&mut page, "FILES", FILES);
    page.push_str(
        ".SH SEE ALSO\nThe guide and reference in the docs/ folder of the source: config.md (every key, default and \
         budget), operations.md, reload.md, runtime-api.md, metrics.md, explain.md.\n",
    );
    if let Some(version) = cmd.get_version() {
        let _ = writeln!(page, ".SH VERSION\n{}", escape(version));
    }
    out.extend_from_slice(page.as_bytes());
    Ok(out)
}

/// `cmd` under `path`: a tagged paragraph with its full invocation and what it does, then
/// its own subcommands (`tollgate ctl set server`).
fn commands(page: &mut String, path: &str, cmd: &clap::Command) {
    if cmd.is_hide_set() || cmd.get_name() == "help" {
        return;
    }
    let full = format!("{path} {}", cmd.get_name());
    let mut line = full.clone();
    for arg in cmd.get_positionals().filter(|a| !a.is_hide_set()) {
        let name = arg.get_value_names().and_then(|v| v.first()).map_or_else(
            || arg.get_id().as_str().to_ascii_uppercase(),
            |v| v.as_str().to_string(),
        );
        if arg.is_required_set() {
            let _ = write!(line, " {name}");
        } else {
            let _ = write!(line, " [{name}]");
        }
    }
    let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
    let _ = writeln!(page, ".TP\n.B {}\n{}", escape(&line), escape(&about));
    for sub in cmd.get_subcommands() {
        commands(page, &full, sub);
    }
}

fn section(page: &mut String, title: &str, rows: &[(&str, &str)]) {
    let _ = writeln!(page, ".SH {title}");
    for (term, what) in rows {
        let _ = writeln!(page, ".TP\n.B {}\n{}", escape(term), escape(what));
    }
}

/// Text safe on a roff line: backslashes doubled, hyphens as `\-`, and a line that would
/// start with a request character guarded by `\&`.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for line in text.lines() {
        if !out.is_empty() {
            out.push('\n');
        }
        if line.starts_with('.') || line.starts_with('\'') {
            out.push_str("\\&");
        }
        for c in line.chars() {
            match c {
                '\\' => out.push_str("\\e"),
                '-' => out.push_str("\\-"),
                c => out.push(c),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn roff_requests_and_escapes_are_neutralised() {
        assert_eq!(escape(".SH x"), "\\&.SH x");
        assert_eq!(escape("'x"), "\\&'x");
        assert_eq!(escape("a\\b --json"), "a\\eb \\-\\-json");
        assert_eq!(escape("one\n.two"), "one\n\\&.two");
    }
}
