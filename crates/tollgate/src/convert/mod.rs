//! `tollgate convert`: an HAProxy configuration (haproxy.cfg, as HAProxy 2.6 reads it) in,
//! an equivalent, commented tollgate TOML config and a report out.
//!
//! The pipeline, one module per step: [`lexer`] (files in `-f` order, quoting, `${VAR}`,
//! `.if` blocks: words with their `FILE:LINE`) → [`sections`] (global, named and inherited
//! defaults, proxies) → [`cond`] (ACLs and `if`/`unless` conditions as an OR of ANDs of route
//! conditions) → [`build`] (each HAProxy keyword onto tollgate's model: binds, routes, rules,
//! servers, checks, limits) → [`emit`] (the TOML text, each key naming the line it came from).
//!
//! Invariants: a line is either converted, converted with a note saying how tollgate differs,
//! or kept in the output as an `# UNCONVERTED` comment with the reason, and listed in the
//! report — never dropped silently. A malformed input (an unterminated quote, an `.if`
//! without `.endif`, a `server` without an address) is an error naming `FILE:LINE`, and
//! nothing is written. The converter reads only the files it is given (and, for `-f` lists
//! of ACL values, the files those lines name); it never runs anything.

mod build;
mod cond;
mod emit;
mod lexer;
mod sections;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// What to convert and how.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Files or directories, in the order HAProxy would read them (`-f A -f B`).
    pub inputs: Vec<PathBuf>,
    /// Environment variables `${VAR}` expands to (the process's, normally).
    pub env: Vec<(String, String)>,
}

/// A line that could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub file: String,
    pub line: u32,
    pub message: String,
}

impl ParseError {
    pub(crate) fn at(file: &str, line: u32, message: &str) -> ParseError {
        ParseError {
            file: file.to_string(),
            line,
            message: message.to_string(),
        }
    }

    pub(crate) fn file(path: &Path, message: &str) -> ParseError {
        ParseError {
            file: lexer::shown(path),
            line: 0,
            message: message.to_string(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        }
    }
}

impl std::error::Error for ParseError {}

/// How a line fared, when it did not simply convert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IssueKind {
    /// No equivalent: kept in the output as a comment.
    Dropped,
    /// Converted, or not needed, with a difference worth knowing.
    Note,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Issue {
    pub kind: IssueKind,
    pub file: String,
    pub line: u32,
    pub text: String,
    pub reason: String,
}

impl Issue {
    pub(crate) fn note(file: &str, line: u32, text: &str, reason: &str) -> Issue {
        Issue {
            kind: IssueKind::Note,
            file: file.into(),
            line,
            text: text.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn dropped(file: &str, line: u32, text: &str, reason: &str) -> Issue {
        Issue {
            kind: IssueKind::Dropped,
            file: file.into(),
            line,
            text: text.into(),
            reason: reason.into(),
        }
    }

    /// `FILE:LINE`.
    pub fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// What a conversion made.
#[derive(Debug, Clone)]
pub struct Conversion {
    /// The TOML config.
    pub toml: String,
    /// The files read, in order.
    pub files: Vec<String>,
    /// Configuration lines read (comments, blank lines and inactive `.if` branches aside).
    pub lines: usize,
    /// Every line that was dropped or converted with a note, in input order.
    pub issues: Vec<Issue>,
    /// Files the config names that the conversion made (a userlist's htpasswd file): name,
    /// relative to the output's directory, and content.
    pub side_files: Vec<(String, String)>,
}

impl Conversion {
    pub fn dropped(&self) -> impl Iterator<Item = &Issue> {
        self.issues.iter().filter(|i| i.kind == IssueKind::Dropped)
    }

    pub fn notes(&self) -> impl Iterator<Item = &Issue> {
        self.issues.iter().filter(|i| i.kind == IssueKind::Note)
    }
}

/// Converts the inputs.
pub fn convert(options: &Options) -> Result<Conversion, ParseError> {
    let files = lexer::expand_inputs(&options.inputs)?;
    if files.is_empty() {
        return Err(ParseError {
            file: String::new(),
            line: 0,
            message: "no configuration file to read".into(),
        });
    }
    let mut env = lexer::Env::new(options.env.iter().cloned());
    let mut issues = Vec::new();
    let lines = lexer::read_files(&files, &mut env, &mut issues)?;
    let shown: Vec<String> = files.iter().map(|f| lexer::shown(f)).collect();
    finish(lines, shown, issues, true)
}

/// Converts one configuration given as text (named `file` in messages). For the fuzz
/// target and tests: reads no file (an ACL's `-f` list is refused) and no environment.
pub fn convert_text(text: &str, file: &str) -> Result<Conversion, ParseError> {
    let mut env = lexer::Env::default();
    let mut issues = Vec::new();
    let mut lines = Vec::new();
    lexer::read_text(text, file, &mut env, &mut issues, &mut lines)?;
    finish(lines, vec![file.to_string()], issues, false)
}

fn finish(
    lines: Vec<lexer::Line>,
    files: Vec<String>,
    mut issues: Vec<Issue>,
    read_files: bool,
) -> Result<Conversion, ParseError> {
    let count = lines.len();
    let sections = sections::split(lines)?;
    let model = build::build(&sections, &mut issues, read_files)?;
    let toml = emit::emit(&model, &files);
    issues.sort_by(|a, b| {
        let fa = files.iter().position(|f| *f == a.file);
        let fb = files.iter().position(|f| *f == b.file);
        (fa, a.line).cmp(&(fb, b.line))
    });
    issues.dedup();
    Ok(Conversion {
        toml,
        files,
        lines: count,
        issues,
        side_files: model.side_files,
    })
}

/// The JSON report `--report json` prints.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    pub inputs: &'a [String],
    pub output: Option<String>,
    pub lines: usize,
    pub dropped: Vec<&'a Issue>,
    pub notes: Vec<&'a Issue>,
    pub check: CheckVerdict,
}

/// What `tollgate check` said of the output.
#[derive(Debug, Clone, Serialize)]
pub struct CheckVerdict {
    pub ok: bool,
    pub skipped: bool,
    pub errors: Vec<String>,
}

impl<'a> Report<'a> {
    pub fn new(c: &'a Conversion, output: Option<String>, check: CheckVerdict) -> Report<'a> {
        Report {
            inputs: &c.files,
            output,
            lines: c.lines,
            dropped: c.dropped().collect(),
            notes: c.notes().collect(),
            check,
        }
    }

    /// The human form: one line per issue, then a summary.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for i in &self.dropped {
            out.push_str(&format!("{}: dropped: {}\n    {}\n", i.at(), i.text, i.reason));
        }
        for i in &self.notes {
            out.push_str(&format!("{}: note: {}\n    {}\n", i.at(), i.text, i.reason));
        }
        out.push_str(&format!(
            "converted {} line(s) from {}: {} dropped (kept as comments), {} note(s)\n",
            self.lines,
            self.inputs.join(", "),
            self.dropped.len(),
            self.notes.len()
        ));
        if self.check.skipped {
            out.push_str("check: skipped (--no-check)\n");
        } else if self.check.ok {
            out.push_str("check: ok: the output passes `tollgate check`\n");
        } else {
            out.push_str("check: the output does not pass `tollgate check`:\n");
            for e in &self.check.errors {
                out.push_str(&format!("    {e}\n"));
            }
        }
        out
    }
}

/// Checks converted text as `tollgate check` would check it at `path` (relative paths are
/// relative to its directory).
pub fn check(toml: &str, path: &str) -> CheckVerdict {
    match crate::config::parse(toml, path) {
        Ok(_) => CheckVerdict {
            ok: true,
            skipped: false,
            errors: Vec::new(),
        },
        Err(errors) => CheckVerdict {
            ok: false,
            skipped: false,
            errors: errors.0.iter().map(ToString::to_string).collect(),
        },
    }
}

#[cfg(test)]
mod tests;
