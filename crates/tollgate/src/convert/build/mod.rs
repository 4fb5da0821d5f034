//! HAProxy sections onto tollgate's model. [`global`] reads `global`, `userlist` and
//! `resolvers`; each proxy (`frontend`, `backend`, `listen`) is seen through a [`View`] of its
//! effective lines (its defaults' and its own) and converted by [`backend`] (servers, checks,
//! balancing, stickiness) and [`frontend`] (binds, TLS, the stats proxy, forwarding), with
//! [`limits`] (stick tables and the deny rules that read them) and [`routes`] (the routes
//! [`rules`] makes of ACLs, `http-request` rules and `use_backend`). [`values`] translates
//! HAProxy's value syntaxes.
//!
//! Invariant: every line is marked used when something took it; whatever no conversion used
//! is reported dropped at the end ([`Builder::sweep`]), so a keyword this module does not know
//! can never vanish. A `defaults` line counts as used once any proxy took it.

mod backend;
mod frontend;
mod global;
mod limits;
mod routes;
mod rules;
mod values;

use std::collections::{BTreeMap, HashSet};

use super::emit::{Model, Table};
use super::lexer::Line;
use super::sections::{Kind, Section};
use super::{Issue, ParseError};

pub(crate) fn build(sections: &[Section], issues: &mut Vec<Issue>, files: bool) -> Result<Model, ParseError> {
    let mut b = Builder {
        sections,
        issues,
        seen: HashSet::new(),
        used: HashSet::new(),
        model: Model::default(),
        g: global::Globals {
            files,
            ..global::Globals::default()
        },
    };
    for s in sections {
        match s.kind {
            Kind::Global => b.global(s)?,
            Kind::Userlist => b.userlist(s),
            Kind::Resolvers => b.resolvers(s),
            Kind::Peers => b.whole_section(
                s,
                "no equivalent: tollgate shares limits across instances through Redis ([shared], `shared = true` on a limit)",
            ),
            Kind::Other => b.whole_section(s, "this section has no equivalent in tollgate"),
            _ => {}
        }
    }
    let views: Vec<View<'_>> = sections
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s.kind, Kind::Frontend | Kind::Backend | Kind::Listen))
        .map(|(i, s)| View::new(i, s, sections))
        .collect();
    b.global_timeouts(&views);
    for v in &views {
        if v.is_backend() {
            b.backend(v)?;
        }
    }
    for v in &views {
        if v.is_frontend() {
            b.frontend(v, &views)?;
        }
    }
    b.sweep(&views);
    Ok(b.model)
}

pub(crate) struct Builder<'a, 'i> {
    sections: &'a [Section],
    issues: &'i mut Vec<Issue>,
    /// (file, line, reason) already reported.
    seen: HashSet<(String, u32, String)>,
    /// Lines something took, by address.
    used: HashSet<usize>,
    model: Model,
    g: global::Globals,
}

fn addr(l: &Line) -> usize {
    std::ptr::from_ref(l) as usize
}

impl Builder<'_, '_> {
    fn use_line(&mut self, l: &Line) {
        self.used.insert(addr(l));
    }

    fn push(&mut self, issue: Issue) {
        if self.seen.insert((issue.file.clone(), issue.line, issue.reason.clone())) {
            self.issues.push(issue);
        }
    }

    /// Converted, with a difference worth knowing.
    fn note(&mut self, l: &Line, reason: &str) {
        self.use_line(l);
        self.push(Issue::note(&l.file, l.line, &l.raw, reason));
    }

    /// No equivalent: reported, and kept as a comment in `t`.
    fn drop_line(&mut self, t: &mut Table, l: &Line, reason: &str) {
        self.use_line(l);
        t.comment(&format!("UNCONVERTED {}: {}", l.at(), l.raw));
        t.comment(&format!("  ({reason})"));
        self.push(Issue::dropped(&l.file, l.line, &l.raw, reason));
    }

    fn whole_section(&mut self, s: &Section, reason: &str) {
        let mut t = Table::default();
        self.drop_line(&mut t, &s.header, reason);
        for l in &s.lines {
            self.use_line(l);
            t.comment(&format!("UNCONVERTED {}: {}", l.at(), l.raw));
        }
        self.model.trailing.extend(t.comments);
    }

    /// A line nothing used: a note when tollgate needs nothing for it, else dropped.
    fn sweep_line(&mut self, l: &Line, t: &mut Table) {
        if self.used.contains(&addr(l)) {
            return;
        }
        match values::not_needed(l) {
            Some(why) => self.note(l, &format!("not needed: {why}")),
            None => {
                let reason = values::unknown_keyword(l);
                self.drop_line(t, l, &reason);
            }
        }
    }

    /// Reports every line nothing used: proxies' own lines in their first table, defaults'
    /// lines at the end.
    fn sweep(&mut self, views: &[View<'_>]) {
        let sections = self.sections;
        for s in sections {
            if !matches!(s.kind, Kind::Defaults | Kind::Global) {
                continue;
            }
            let mut t = Table::default();
            for l in &s.lines {
                self.sweep_line(l, &mut t);
            }
            if !t.comments.is_empty() {
                self.model
                    .trailing
                    .push(format!("From {} ({}):", s.header.raw, s.header.at()));
                self.model.trailing.extend(t.comments);
            }
        }
        for v in views {
            let mut t = Table::default();
            for (l, inherited) in &v.lines {
                if !inherited {
                    self.sweep_line(l, &mut t);
                }
            }
            if t.comments.is_empty() {
                continue;
            }
            let target = self
                .model
                .frontends
                .iter_mut()
                .find(|f| f.head.get("name").is_some_and(|n| n == super::emit::q(&v.name)))
                .map(|f| &mut f.head)
                .or_else(|| {
                    self.model
                        .backends
                        .iter_mut()
                        .find(|b| b.head.get("name").is_some_and(|n| n == super::emit::q(&v.name)))
                        .map(|b| &mut b.head)
                });
            match target {
                Some(head) => head.comments.extend(t.comments),
                None => {
                    self.model
                        .trailing
                        .push(format!("From {} ({}):", v.header.raw, v.header.at()));
                    self.model.trailing.extend(t.comments);
                }
            }
        }
    }
}

/// A proxy's effective lines, looked up by keyword.
#[derive(Clone)]
pub(crate) struct View<'a> {
    pub kind: Kind,
    pub name: String,
    pub header: &'a Line,
    /// Its defaults' lines, then its own; `true` for inherited ones.
    pub lines: Vec<(&'a Line, bool)>,
    pub defaults: Option<usize>,
    pub http: bool,
}

impl<'a> View<'a> {
    fn new(index: usize, s: &'a Section, all: &'a [Section]) -> View<'a> {
        let lines = s.effective(all);
        let http = lines
            .iter()
            .rev()
            .find(|(l, _)| l.word(0) == "mode")
            .is_some_and(|(l, _)| l.word(1) == "http");
        let _ = index;
        View {
            kind: s.kind,
            name: s.name.clone(),
            header: &s.header,
            lines,
            defaults: s.defaults,
            http,
        }
    }

    pub(crate) fn is_backend(&self) -> bool {
        match self.kind {
            Kind::Backend => true,
            Kind::Listen => {
                self.all("server").next().is_some()
                    || self.all("server-template").next().is_some()
                    || self.last("balance").is_some()
            }
            _ => false,
        }
    }

    pub(crate) fn is_frontend(&self) -> bool {
        match self.kind {
            Kind::Frontend => true,
            Kind::Listen => self.all("bind").next().is_some(),
            _ => false,
        }
    }

    /// Every line whose first word is `kw` (inherited ones first).
    pub(crate) fn all(&self, kw: &'a str) -> impl Iterator<Item = &'a Line> + '_ {
        self.lines.iter().filter(move |(l, _)| l.word(0) == kw).map(|(l, _)| *l)
    }

    /// Every line starting with these words.
    pub(crate) fn all2(&self, w0: &'a str, w1: &'a str) -> impl Iterator<Item = &'a Line> + '_ {
        self.lines
            .iter()
            .filter(move |(l, _)| l.word(0) == w0 && l.word(1) == w1)
            .map(|(l, _)| *l)
    }

    /// The line that decides a setting: the last one.
    pub(crate) fn last(&self, kw: &str) -> Option<&'a Line> {
        self.lines.iter().rev().find(|(l, _)| l.word(0) == kw).map(|(l, _)| *l)
    }

    /// `option NAME` / `no option NAME`: the last says, `Some(true)` for enabled.
    pub(crate) fn option(&self, name: &str) -> Option<(bool, &'a Line)> {
        self.lines
            .iter()
            .rev()
            .find_map(|(l, _)| match (l.word(0), l.word(1), l.word(2)) {
                ("option", n, _) if n == name => Some((true, *l)),
                ("no", "option", n) if n == name => Some((false, *l)),
                _ => None,
            })
    }

    /// `timeout NAME VALUE`: the last.
    pub(crate) fn timeout(&self, name: &str) -> Option<&'a Line> {
        self.lines
            .iter()
            .rev()
            .find(|(l, _)| l.word(0) == "timeout" && l.word(1) == name)
            .map(|(l, _)| *l)
    }

    pub(crate) fn inherited(&self, l: &Line) -> bool {
        self.lines.iter().any(|(x, inh)| *inh && std::ptr::eq(*x, l))
    }
}

/// What proxies the global `[timeouts]` come from: the defaults section most proxies use.
fn main_defaults(views: &[View<'_>]) -> Option<usize> {
    let mut counts: BTreeMap<usize, usize> = BTreeMap::new();
    for v in views {
        if let Some(d) = v.defaults {
            *counts.entry(d).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by_key(|(i, n)| (*n, std::cmp::Reverse(*i)))
        .map(|(i, _)| i)
}
