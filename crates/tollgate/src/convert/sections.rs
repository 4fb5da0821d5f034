//! Lines grouped into HAProxy's sections, and each proxy's defaults found: a proxy without
//! `from` takes the last `defaults` section before it (named or not), `from NAME` names one,
//! and a `defaults NAME from PARENT` starts from its parent's lines (HAProxy 2.6).
//!
//! Invariant: a keyword line always belongs to exactly one section; a line before any
//! section header is an error, as in HAProxy (each file starts outside any section).

use super::ParseError;
use super::lexer::Line;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Global,
    Defaults,
    Frontend,
    Backend,
    Listen,
    Resolvers,
    Userlist,
    Peers,
    /// A section tollgate has nothing for (`cache`, `program`, `http-errors`, `ring`, ...).
    Other,
}

#[derive(Debug, Clone)]
pub(crate) struct Section {
    pub kind: Kind,
    pub name: String,
    pub header: Line,
    pub lines: Vec<Line>,
    /// Index of the defaults section this one inherits (proxies and named defaults).
    pub defaults: Option<usize>,
}

const OTHER_SECTIONS: &[&str] = &[
    "program",
    "cache",
    "http-errors",
    "ring",
    "mailers",
    "crt-store",
    "traces",
    "log-forward",
    "fcgi-app",
    "dynamic-update",
    "namespace_list",
    "acme",
];

fn kind_of(word: &str) -> Option<Kind> {
    Some(match word {
        "global" => Kind::Global,
        "defaults" => Kind::Defaults,
        "frontend" => Kind::Frontend,
        "backend" => Kind::Backend,
        "listen" => Kind::Listen,
        "resolvers" => Kind::Resolvers,
        "userlist" => Kind::Userlist,
        "peers" => Kind::Peers,
        w if OTHER_SECTIONS.contains(&w) => Kind::Other,
        _ => return None,
    })
}

pub(crate) fn split(lines: Vec<Line>) -> Result<Vec<Section>, ParseError> {
    let mut sections: Vec<Section> = Vec::new();
    let mut current_file = String::new();
    let mut last_defaults: Option<usize> = None;
    for line in lines {
        let new_file = line.file != current_file;
        current_file.clone_from(&line.file);
        if let Some(kind) = kind_of(line.word(0)) {
            let section = header(kind, line, &sections, last_defaults)?;
            if kind == Kind::Defaults {
                last_defaults = Some(sections.len());
            }
            sections.push(section);
            continue;
        }
        match sections.last_mut() {
            Some(s) if !new_file => s.lines.push(line),
            _ => {
                return Err(ParseError::at(
                    &line.file,
                    line.line,
                    &format!(
                        "`{}` is outside any section (global, defaults, frontend, backend, listen, ...)",
                        line.word(0)
                    ),
                ));
            }
        }
    }
    Ok(sections)
}

fn header(kind: Kind, line: Line, sections: &[Section], last_defaults: Option<usize>) -> Result<Section, ParseError> {
    let err = |m: String| ParseError::at(&line.file, line.line, &m);
    let mut name = String::new();
    let mut from = None;
    let mut rest = line.words.iter().skip(1);
    match kind {
        Kind::Global => {}
        _ => {
            if let Some(w) = rest.next() {
                if w == "from" && kind == Kind::Defaults {
                    from = rest.next().cloned();
                } else {
                    name.clone_from(w);
                    if let Some(f) = rest.next() {
                        if f != "from" {
                            return Err(err(format!(
                                "unexpected `{f}` after the section name (only `from NAME`)"
                            )));
                        }
                        from = Some(
                            rest.next()
                                .cloned()
                                .ok_or_else(|| err("`from` names no defaults section".into()))?,
                        );
                    }
                }
            }
        }
    }
    let needs_name = matches!(
        kind,
        Kind::Frontend | Kind::Backend | Kind::Listen | Kind::Resolvers | Kind::Userlist | Kind::Peers
    );
    if needs_name && name.is_empty() {
        return Err(err(format!("`{}` needs a name", line.word(0))));
    }
    if !name.is_empty() && !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b)) {
        return Err(err(format!(
            "`{name}`: a name is letters, digits, `-`, `_`, `.` and `:`"
        )));
    }
    let defaults = match (&from, kind) {
        (Some(f), _) => {
            let found = sections.iter().rposition(|s| s.kind == Kind::Defaults && s.name == *f);
            Some(found.ok_or_else(|| err(format!("no defaults section named `{f}` before this line")))?)
        }
        (None, Kind::Frontend | Kind::Backend | Kind::Listen) => last_defaults,
        _ => None,
    };
    Ok(Section {
        kind,
        name,
        header: line,
        lines: Vec::new(),
        defaults,
    })
}

impl Section {
    /// The lines a proxy runs with: its defaults chain's (oldest first), then its own,
    /// each flagged with whether it came from a defaults section.
    pub(crate) fn effective<'a>(&'a self, all: &'a [Section]) -> Vec<(&'a Line, bool)> {
        let mut chain = Vec::new();
        let mut at = self.defaults;
        while let Some(i) = at {
            let Some(d) = all.get(i) else { break };
            chain.push(d);
            at = d.defaults;
            if chain.len() > all.len() {
                break;
            }
        }
        let mut out: Vec<(&Line, bool)> = Vec::new();
        for d in chain.iter().rev() {
            out.extend(d.lines.iter().map(|l| (l, true)));
        }
        out.extend(self.lines.iter().map(|l| (l, false)));
        out
    }
}
