//! HAProxy's configuration language, read into words: the files in `-f` order (a directory:
//! its `*.cfg` files in lexical order), comments, backslash escapes, weak (`"…"`) and strong
//! (`'…'`) quoting, `${VAR}` expansion inside double quotes only (with `-default` and `[*]`),
//! `setenv`/`presetenv`/`unsetenv`/`resetenv` as they are met, and the `.if`/`.elif`/`.else`/
//! `.endif` blocks evaluated as HAProxy 2.6 would.
//!
//! Invariants: every line handed on carries the file and line it came from; nothing here
//! interprets keywords (besides the environment ones above, which change later lines); a
//! malformed line is an error naming `FILE:LINE`, never a silent skip.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Issue, ParseError};

/// HAProxy's own line limit is 2 KiB; a generous bound still refuses a runaway line.
const MAX_LINE: usize = 64 * 1024;
/// Total input read, all files together.
const MAX_INPUT: u64 = 16 * 1024 * 1024;
/// `.if` nesting depth HAProxy accepts (`MAXNESTEDCONDS`).
const MAX_NESTING: usize = 10;
/// The HAProxy version conditions compare against: the one whose behaviour we convert to.
pub(crate) const EMULATED_VERSION: [u32; 3] = [2, 6, 0];

/// One configuration line, split into words.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    pub file: String,
    pub line: u32,
    pub words: Vec<String>,
    /// The line as written (trimmed), for comments and the report.
    pub raw: String,
}

impl Line {
    pub(crate) fn word(&self, i: usize) -> &str {
        self.words.get(i).map_or("", String::as_str)
    }

    pub(crate) fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// The environment a conversion reads: the process's, changed by `setenv` and friends.
#[derive(Debug, Clone, Default)]
pub(crate) struct Env {
    vars: BTreeMap<String, String>,
}

impl Env {
    pub(crate) fn new(vars: impl IntoIterator<Item = (String, String)>) -> Env {
        Env {
            vars: vars.into_iter().collect(),
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }
}

/// An input as named on the command line: a file, or a directory of `*.cfg` files.
pub(crate) fn expand_inputs(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, ParseError> {
    let mut files = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let entries = std::fs::read_dir(input).map_err(|e| ParseError::file(input, &e.to_string()))?;
            let mut names: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "cfg") && p.is_file())
                .collect();
            names.sort();
            files.extend(names);
        } else {
            files.push(input.clone());
        }
    }
    Ok(files)
}

/// Reads every file in order into lines, conditionals resolved.
pub(crate) fn read_files(files: &[PathBuf], env: &mut Env, issues: &mut Vec<Issue>) -> Result<Vec<Line>, ParseError> {
    let mut out = Vec::new();
    let mut total = 0u64;
    for path in files {
        let bytes = crate::config::bounded::read_bounded(path, MAX_INPUT.saturating_sub(total))
            .map_err(|e| ParseError::file(path, &e.to_string()))?;
        total += bytes.len() as u64;
        let text = String::from_utf8_lossy(&bytes);
        let shown = path.display().to_string();
        read_text(&text, &shown, env, issues, &mut out)?;
    }
    Ok(out)
}

/// Reads one file's text (named `file`) into `out`.
pub(crate) fn read_text(
    text: &str,
    file: &str,
    env: &mut Env,
    issues: &mut Vec<Issue>,
    out: &mut Vec<Line>,
) -> Result<(), ParseError> {
    let mut conds = Conditions::default();
    let mut last = 0u32;
    for (i, raw) in text.lines().enumerate() {
        let line_no = u32::try_from(i + 1).unwrap_or(u32::MAX);
        last = line_no;
        let err = |m: &str| ParseError::at(file, line_no, m);
        if raw.len() > MAX_LINE {
            return Err(err(&format!("line longer than {MAX_LINE} bytes")));
        }
        let trimmed = raw.trim();
        let directive = trimmed.starts_with('.');
        if !directive && !conds.active() {
            continue;
        }
        let words = split_words(raw, env).map_err(|m| err(&m))?;
        let Some(first) = words.first() else { continue };
        if directive {
            let expr = words.get(1..).map(|w| w.join(" ")).unwrap_or_default();
            match first.as_str() {
                ".if" | ".elif" => {
                    let evaluated = if first == ".if" {
                        conds.active()
                    } else {
                        conds.elif_evaluates()
                    };
                    if first == ".if" {
                        conds
                            .open(|| eval_condition(&expr, env), line_no)
                            .map_err(|m| err(&m))?;
                    } else {
                        conds.elif(|| eval_condition(&expr, env)).map_err(|m| err(&m))?;
                    }
                    if evaluated {
                        let taken = conds.stack.last().is_some_and(|l| l.current);
                        let what = if taken {
                            "true here: the block is converted"
                        } else {
                            "false here: the block is skipped, as HAProxy would skip it with this environment"
                        };
                        issues.push(Issue::note(file, line_no, trimmed, what));
                    }
                }
                ".else" => conds.otherwise().map_err(|m| err(&m))?,
                ".endif" => conds.close().map_err(|m| err(&m))?,
                ".diag" | ".notice" | ".warning" | ".alert" => {
                    if conds.active() {
                        issues.push(Issue::note(
                            file,
                            line_no,
                            trimmed,
                            "a message HAProxy prints while reading its configuration; not needed",
                        ));
                    }
                }
                other => return Err(err(&format!("unknown directive `{other}`"))),
            }
            continue;
        }
        if apply_env_keyword(&words, env) {
            issues.push(Issue::note(
                file,
                line_no,
                trimmed,
                "applied while converting: later `${VAR}`s were expanded with it",
            ));
            continue;
        }
        out.push(Line {
            file: file.to_string(),
            line: line_no,
            words,
            raw: trimmed.to_string(),
        });
    }
    if let Some(open) = conds.stack.last() {
        return Err(ParseError::at(
            file,
            last,
            &format!(".if at line {} has no .endif", open.line),
        ));
    }
    Ok(())
}

/// `setenv` and friends change the variables of the lines after them.
fn apply_env_keyword(words: &[String], env: &mut Env) -> bool {
    let arg = |i: usize| words.get(i).cloned().unwrap_or_default();
    match words.first().map(String::as_str) {
        Some("setenv") => {
            env.vars.insert(arg(1), arg(2));
        }
        Some("presetenv") => {
            env.vars.entry(arg(1)).or_insert_with(|| arg(2));
        }
        Some("unsetenv") => {
            for name in words.iter().skip(1) {
                env.vars.remove(name);
            }
        }
        Some("resetenv") => {
            let keep: Vec<&String> = words.iter().skip(1).collect();
            env.vars.retain(|k, _| keep.contains(&k));
        }
        _ => return false,
    }
    true
}

#[derive(Debug)]
struct Level {
    /// The enclosing levels are all active.
    parent_active: bool,
    /// A branch of this level was taken already.
    taken: bool,
    /// The current branch is taken.
    current: bool,
    seen_else: bool,
    line: u32,
}

#[derive(Debug, Default)]
struct Conditions {
    stack: Vec<Level>,
}

impl Conditions {
    fn active(&self) -> bool {
        self.stack.last().is_none_or(|l| l.parent_active && l.current)
    }

    fn open(&mut self, eval: impl FnOnce() -> Result<bool, String>, line: u32) -> Result<(), String> {
        if self.stack.len() >= MAX_NESTING {
            return Err(format!("more than {MAX_NESTING} nested .if blocks"));
        }
        let parent_active = self.active();
        // A block inside an inactive one is not evaluated (its condition may name what is
        // not there), only tracked.
        let current = if parent_active { eval()? } else { false };
        self.stack.push(Level {
            parent_active,
            taken: current,
            current,
            seen_else: false,
            line,
        });
        Ok(())
    }

    /// An `.elif` here would be evaluated: its level is active and no branch was taken.
    fn elif_evaluates(&self) -> bool {
        self.stack
            .last()
            .is_some_and(|l| l.parent_active && !l.taken && !l.seen_else)
    }

    fn elif(&mut self, eval: impl FnOnce() -> Result<bool, String>) -> Result<(), String> {
        let level = self.stack.last_mut().ok_or(".elif without .if")?;
        if level.seen_else {
            return Err(".elif after .else".into());
        }
        level.current = if level.parent_active && !level.taken {
            eval()?
        } else {
            false
        };
        level.taken |= level.current;
        Ok(())
    }

    fn otherwise(&mut self) -> Result<(), String> {
        let level = self.stack.last_mut().ok_or(".else without .if")?;
        if level.seen_else {
            return Err("a second .else in one .if block".into());
        }
        level.seen_else = true;
        level.current = !level.taken;
        level.taken = true;
        Ok(())
    }

    fn close(&mut self) -> Result<(), String> {
        self.stack.pop().map(|_| ()).ok_or_else(|| ".endif without .if".into())
    }
}

/// Splits one line into words as HAProxy's `parse_line` does.
pub(crate) fn split_words(line: &str, env: &Env) -> Result<Vec<String>, String> {
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    #[derive(PartialEq)]
    enum Quote {
        None,
        Weak,
        Strong,
    }
    let mut quote = Quote::None;
    while let Some(c) = chars.next() {
        match quote {
            Quote::Strong => {
                if c == '\'' {
                    quote = Quote::None;
                } else {
                    word.push(c);
                }
                continue;
            }
            Quote::Weak if c == '"' => {
                quote = Quote::None;
                continue;
            }
            Quote::Weak if c == '$' => {
                expand_var(&mut chars, env, &mut word, &mut words)?;
                continue;
            }
            _ => {}
        }
        match c {
            '\\' => {
                in_word = true;
                let Some(next) = chars.next() else {
                    return Err("a backslash ends the line".into());
                };
                match next {
                    'n' => word.push('\n'),
                    'r' => word.push('\r'),
                    't' => word.push('\t'),
                    'x' => {
                        let hex: String = [chars.next(), chars.next()].into_iter().flatten().collect();
                        let byte = u8::from_str_radix(&hex, 16)
                            .map_err(|_| format!("`\\x{hex}` is not a two-digit hex escape"))?;
                        word.push(char::from(byte));
                    }
                    ' ' | '\t' | '\\' | '#' | '\'' | '"' | '$' => word.push(next),
                    other => {
                        // HAProxy keeps an unknown escape as written (regexes rely on it).
                        word.push('\\');
                        word.push(other);
                    }
                }
            }
            '"' if quote == Quote::None => {
                quote = Quote::Weak;
                in_word = true;
            }
            '\'' if quote == Quote::None => {
                quote = Quote::Strong;
                in_word = true;
            }
            '#' if quote == Quote::None => break,
            ' ' | '\t' if quote == Quote::None => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    match quote {
        Quote::None => {}
        Quote::Weak => return Err("unterminated double quote".into()),
        Quote::Strong => return Err("unterminated single quote".into()),
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// `$NAME`, `${NAME}`, `${NAME-default}`, `${NAME[*]}` inside double quotes.
fn expand_var(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    env: &Env,
    word: &mut String,
    words: &mut Vec<String>,
) -> Result<(), String> {
    let braced = chars.peek() == Some(&'{');
    if braced {
        chars.next();
    }
    let mut name = String::new();
    while let Some(&c) = chars.peek() {
        if c.is_ascii_alphanumeric() || c == '_' {
            name.push(c);
            chars.next();
        } else {
            break;
        }
    }
    if name.is_empty() {
        if braced {
            return Err("`${` names no variable".into());
        }
        // A lone `$` stays what it is.
        word.push('$');
        return Ok(());
    }
    let mut default = None;
    let mut split = false;
    if braced {
        let mut rest = String::new();
        let mut closed = false;
        for c in chars.by_ref() {
            if c == '}' {
                closed = true;
                break;
            }
            rest.push(c);
        }
        if !closed {
            return Err(format!("`${{{name}` has no closing brace"));
        }
        if let Some(d) = rest.strip_prefix('-') {
            default = Some(d.to_string());
        } else if rest == "[*]" {
            split = true;
        } else if !rest.is_empty() {
            return Err(format!("`${{{name}{rest}}}`: unexpected `{rest}`"));
        }
    }
    let value = env.get(&name).map(str::to_string).or(default).unwrap_or_default();
    if split {
        let mut parts = value.split(' ').filter(|p| !p.is_empty());
        if let Some(first) = parts.next() {
            word.push_str(first);
        }
        for part in parts {
            words.push(std::mem::take(word));
            word.push_str(part);
        }
    } else {
        word.push_str(&value);
    }
    Ok(())
}

/// A `.if` expression: `||` of `&&` of (`!`)terms, terms being `0`, `1`, a predicate call or
/// a parenthesised expression.
fn eval_condition(expr: &str, env: &Env) -> Result<bool, String> {
    let mut p = CondParser {
        s: expr.as_bytes(),
        pos: 0,
        env,
    };
    if expr.trim().is_empty() {
        return Ok(false);
    }
    let v = p.or()?;
    p.skip_ws();
    if p.pos < p.s.len() {
        return Err(format!("unexpected `{}` in condition", &expr[p.pos..]));
    }
    Ok(v)
}

struct CondParser<'a> {
    s: &'a [u8],
    pos: usize,
    env: &'a Env,
}

impl CondParser<'_> {
    fn skip_ws(&mut self) {
        while self.s.get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.skip_ws();
        if self.s.get(self.pos..self.pos + tok.len()) == Some(tok.as_bytes()) {
            self.pos += tok.len();
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Result<bool, String> {
        let mut v = self.and()?;
        while self.eat("||") {
            v |= self.and()?;
        }
        Ok(v)
    }

    fn and(&mut self) -> Result<bool, String> {
        let mut v = self.term()?;
        while self.eat("&&") {
            v &= self.term()?;
        }
        Ok(v)
    }

    fn term(&mut self) -> Result<bool, String> {
        if self.eat("!") {
            return Ok(!self.term()?);
        }
        if self.eat("(") {
            let v = self.or()?;
            if !self.eat(")") {
                return Err("missing `)` in condition".into());
            }
            return Ok(v);
        }
        self.skip_ws();
        let start = self.pos;
        while self
            .s
            .get(self.pos)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            self.pos += 1;
        }
        let name = String::from_utf8_lossy(self.s.get(start..self.pos).unwrap_or_default()).into_owned();
        if name.is_empty() {
            return Err("a condition term is missing".into());
        }
        if name.bytes().all(|b| b.is_ascii_digit()) {
            return Ok(name.bytes().any(|b| b != b'0'));
        }
        if self.s.get(self.pos) != Some(&b'(') {
            return Err(format!("`{name}` is not a predicate call"));
        }
        self.pos += 1;
        let mut args = Vec::new();
        let mut arg = String::new();
        let mut closed = false;
        while let Some(&c) = self.s.get(self.pos) {
            self.pos += 1;
            match c {
                b')' => {
                    closed = true;
                    break;
                }
                b',' => args.push(std::mem::take(&mut arg)),
                _ => arg.push(char::from(c)),
            }
        }
        if !closed {
            return Err(format!("`{name}(` has no closing parenthesis"));
        }
        if !arg.is_empty() || !args.is_empty() {
            args.push(arg);
        }
        self.predicate(&name, &args)
    }

    fn predicate(&self, name: &str, args: &[String]) -> Result<bool, String> {
        let arg = |i: usize| args.get(i).map_or("", String::as_str);
        Ok(match name {
            "defined" => self.env.get(arg(0)).is_some(),
            "streq" => arg(0) == arg(1),
            "strneq" => arg(0) != arg(1),
            "strstr" => arg(0).contains(arg(1)),
            "version_atleast" => parse_version(arg(0))? <= EMULATED_VERSION,
            "version_before" => parse_version(arg(0))? > EMULATED_VERSION,
            // tollgate has what these name in HAProxy builds: TLS, threads, PROXY protocol.
            "feature" => matches!(arg(0), "OPENSSL" | "THREAD" | "LINUX_SPLICE" | "GETADDRINFO" | "ZLIB"),
            "enabled" => matches!(
                arg(0),
                "EPOLL" | "SPLICE" | "GETADDRINFO" | "REUSEPORT" | "FAST-FORWARD"
            ),
            "openssl_version_atleast"
            | "openssl_version_before"
            | "ssllib_name_startswith"
            | "fips_mode"
            | "awslc_api_atleast"
            | "awslc_api_before" => false,
            other => return Err(format!("unknown condition predicate `{other}`")),
        })
    }
}

fn parse_version(v: &str) -> Result<[u32; 3], String> {
    let mut out = [0u32; 3];
    if !v.trim().starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!("`{v}` is not a version"));
    }
    // `3.1-dev8`: the numbers before a suffix count.
    let numbers = v.trim().split(['-', '+']).next().unwrap_or_default();
    for (slot, part) in out.iter_mut().zip(numbers.split('.')) {
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        *slot = digits.parse().unwrap_or(0);
    }
    Ok(out)
}

/// A file name for errors before any line was read.
pub(crate) fn shown(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn words(s: &str) -> Vec<String> {
        split_words(s, &Env::new([("A".to_string(), "x y".to_string())])).unwrap()
    }

    #[test]
    fn quoting_and_escapes() {
        assert_eq!(words(r#"log-format %{+Q}o\ %t\ %s"#), ["log-format", "%{+Q}o %t %s"]);
        assert_eq!(words(r#"a "b c" 'd $A' "${A}" # comment"#), ["a", "b c", "d $A", "x y"]);
        assert_eq!(words(r#"x "${A[*]}" "${B-def}" $A"#), ["x", "x", "y", "def", "$A"]);
        assert_eq!(words(r"\x41\#"), ["A#"]);
        assert!(split_words("a \"open", &Env::default()).is_err());
        assert!(split_words("a 'open", &Env::default()).is_err());
        assert!(split_words("a \\xZZ", &Env::default()).is_err());
    }

    #[test]
    fn conditions() {
        let env = Env::new([("SSL".to_string(), "1".to_string())]);
        assert!(eval_condition("defined(SSL) && streq(1,1)", &env).unwrap());
        assert!(!eval_condition("!defined(SSL) || version_before(2.4)", &env).unwrap());
        assert!(eval_condition("version_atleast(2.6) && (0 || 1)", &env).unwrap());
        assert!(eval_condition("nope(1)", &env).is_err());
        let mut out = Vec::new();
        let text =
            ".if defined(SSL)\na\n.elif 1\nb\n.else\nc\n.endif\n.if 0\n.if nope()\n.endif\nd\n.else\ne\n.endif\n";
        read_text(text, "t.cfg", &mut env.clone(), &mut Vec::new(), &mut out).unwrap();
        let got: Vec<&str> = out.iter().map(|l| l.words[0].as_str()).collect();
        assert_eq!(got, ["a", "e"]);
        let err = read_text(".if 1\n", "t.cfg", &mut env.clone(), &mut Vec::new(), &mut out).unwrap_err();
        assert_eq!(err.to_string(), "t.cfg:1: .if at line 1 has no .endif");
    }
}
