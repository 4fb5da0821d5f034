//! The converted model as TOML text: tables in the order tollgate's reference documents them,
//! each key followed by the `FILE:LINE` it came from, each dropped line kept as a comment
//! where it stood.
//!
//! Invariant: every string goes through [`q`] (a TOML basic string with every control
//! character escaped), so no input byte can end a string, a comment or a line early.

use std::fmt::Write as _;

/// One `key = value` line.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub key: String,
    /// TOML text of the value.
    pub value: String,
    /// `FILE:LINE`s it came from.
    pub src: String,
}

/// A TOML table's keys, and comments shown after them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Table {
    pub entries: Vec<Entry>,
    pub comments: Vec<String>,
}

impl Table {
    /// Sets `key` (a later line wins, as in HAProxy), remembering where it came from.
    pub(crate) fn set(&mut self, key: &str, value: String, src: &str) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.key == key) {
            e.value = value;
            e.src = src.to_string();
        } else {
            self.entries.push(Entry {
                key: key.to_string(),
                value,
                src: src.to_string(),
            });
        }
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.entries.iter().any(|e| e.key == key)
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.entries.iter().find(|e| e.key == key).map(|e| e.value.as_str())
    }

    pub(crate) fn remove(&mut self, key: &str) {
        self.entries.retain(|e| e.key != key);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.comments.is_empty()
    }

    /// A comment line (`# ` is added; the text is made one line).
    pub(crate) fn comment(&mut self, text: &str) {
        self.comments.push(one_line(text));
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Frontend {
    pub head: Table,
    pub tls: Option<Table>,
    pub certs: Vec<Table>,
    pub client_auth: Option<Table>,
    pub limits: Vec<Table>,
    pub matchers: Vec<Table>,
    pub routes: Vec<Table>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Backend {
    pub head: Table,
    pub sticky: Option<Table>,
    pub health: Option<Table>,
    pub servers: Vec<Table>,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Model {
    pub global: Table,
    pub timeouts: Table,
    pub log: Table,
    pub admin: Table,
    pub resolvers: Table,
    pub frontends: Vec<Frontend>,
    pub backends: Vec<Backend>,
    /// Whole sections with no equivalent, as comments at the end.
    pub trailing: Vec<String>,
    /// Files the config names that the conversion made (htpasswd files from userlists):
    /// name (relative to the output's directory) and content.
    pub side_files: Vec<(String, String)>,
}

/// A TOML basic string. A `${` is written `$${`: tollgate expands `${VAR}` in every string
/// value, and HAProxy's text meant it literally (its variables were expanded on reading).
pub(crate) fn q(s: &str) -> String {
    verbatim(&s.replace("${", "$${"))
}

/// A TOML basic string for the one value tollgate does not expand: a path rewrite's
/// replacement, whose `${1}` is a group.
pub(crate) fn verbatim(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML array of strings.
pub(crate) fn arr(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|s| q(s)).collect();
    format!("[{}]", parts.join(", "))
}

/// A TOML key: bare when it can be (keys are never expanded).
pub(crate) fn key(k: &str) -> String {
    if !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        k.to_string()
    } else {
        q(k).replace("$${", "${")
    }
}

/// An inline table from `key = TOML value` pairs.
pub(crate) fn inline(pairs: &[(String, String)]) -> String {
    let parts: Vec<String> = pairs.iter().map(|(k, v)| format!("{} = {v}", key(k))).collect();
    format!("{{ {} }}", parts.join(", "))
}

/// Text made safe for a comment: one line, controls shown escaped.
pub(crate) fn one_line(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

fn table(out: &mut String, header: &str, t: &Table) {
    if !header.is_empty() {
        let _ = writeln!(out, "\n{header}");
    }
    let width = t
        .entries
        .iter()
        .map(|e| e.key.len() + e.value.len())
        .filter(|w| *w < 48)
        .max()
        .unwrap_or(0);
    for e in &t.entries {
        let line = format!("{} = {}", key(&e.key), e.value);
        if e.src.is_empty() {
            let _ = writeln!(out, "{line}");
        } else {
            let pad = (width + 3).saturating_sub(line.len()).max(1);
            let _ = writeln!(out, "{line}{:pad$}# {}", "", one_line(&e.src));
        }
    }
    for c in &t.comments {
        let _ = writeln!(out, "# {c}");
    }
}

pub(crate) fn emit(m: &Model, files: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Converted from HAProxy configuration by `tollgate convert`:");
    for f in files {
        let _ = writeln!(out, "#   {}", one_line(f));
    }
    let _ = writeln!(
        out,
        "# Each key names the HAProxy line it came from (FILE:LINE). A line with no"
    );
    let _ = writeln!(
        out,
        "# equivalent is kept below as `# UNCONVERTED FILE:LINE: ...` with the reason."
    );
    let _ = writeln!(out, "# Review it, then run: tollgate check --config THIS_FILE");
    for (name, t) in [
        ("[global]", &m.global),
        ("[timeouts]", &m.timeouts),
        ("[log]", &m.log),
        ("[admin]", &m.admin),
        ("[resolvers]", &m.resolvers),
    ] {
        if !t.is_empty() {
            table(&mut out, name, t);
        }
    }
    for fe in &m.frontends {
        table(&mut out, "[[frontend]]", &fe.head);
        if let Some(tls) = &fe.tls {
            table(&mut out, "[frontend.tls]", tls);
        }
        for c in &fe.certs {
            table(&mut out, "[[frontend.tls.cert]]", c);
        }
        if let Some(ca) = &fe.client_auth {
            table(&mut out, "[frontend.tls.client_auth]", ca);
        }
        for l in &fe.limits {
            table(&mut out, "[[frontend.limit]]", l);
        }
        for mt in &fe.matchers {
            table(&mut out, "[[frontend.matcher]]", mt);
        }
        for r in &fe.routes {
            table(&mut out, "[[frontend.route]]", r);
        }
    }
    for be in &m.backends {
        table(&mut out, "[[backend]]", &be.head);
        if let Some(s) = &be.sticky {
            table(&mut out, "[backend.sticky]", s);
        }
        if let Some(h) = &be.health {
            table(&mut out, "[backend.health]", h);
        }
        for s in &be.servers {
            table(&mut out, "[[backend.server]]", s);
        }
    }
    if !m.trailing.is_empty() {
        out.push('\n');
        for c in &m.trailing {
            let _ = writeln!(out, "# {}", one_line(c));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn strings_are_escaped() {
        assert_eq!(q("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
        assert_eq!(key("x-y_1"), "x-y_1");
        assert_eq!(key("X Y"), "\"X Y\"");
        assert_eq!(one_line("a\nb"), "a?b");
        assert_eq!(q("${X}"), "\"$${X}\"");
        let v: toml::Value = toml::from_str(&format!("k = {}", q("\u{7f}é\t\"'"))).unwrap();
        assert_eq!(v.get("k").and_then(toml::Value::as_str), Some("\u{7f}é\t\"'"));
    }
}
