//! A config split across files: `include = ["conf.d/*.toml"]`, and the one TOML tree the
//! files make together, with `${VAR}` expanded in its string values (`expand`).
//!
//! Two passes over the files. `read_included` follows the `include` keys from the main file:
//! each entry is a path relative to the file that names it, literal (it must exist) or with
//! `*`, `?` or `[...]` in its file name (the matches sorted by name; none is fine; names
//! starting with `.` only when the pattern does; directories skipped). Included files may
//! include in turn. Every file is read once, bounded ([`MAX_FILES`] files, nested at most
//! [`MAX_DEPTH`] deep, [`bounded::MAX_CONFIG`] bytes in all): a file on the chain that
//! includes it is a cycle, a file included from two places is refused as well (it would
//! define its frontends twice). `merge` then parses each file, shifts its spans to the
//! file's base in the `SourceMap` (so every later error names the file it is in), expands
//! variables, and appends the `[[frontend]]` and `[[backend]]` of each included file to the
//! main file's, in the order read (a file's own before those it includes). An included
//! file holds only those and `include`: `[global]` and the other sections, which exist once,
//! belong to the main file and are refused elsewhere.
//!
//! `prepared_text` writes the merged tree back as one TOML document: what the master hands
//! its workers, so they run what was checked without reading any file or variable again.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::bounded;
use super::expand::{self, Env};
use super::sources::SourceMap;

/// Files one config may be read from, the main file among them.
pub(crate) const MAX_FILES: usize = 64;
/// How deep includes may nest: the main file's includes are depth 1.
pub(crate) const MAX_DEPTH: usize = 8;

/// Problems found, each at a span of the `SourceMap`'s offset space, with its key path.
pub(crate) type Errors = Vec<(Range<usize>, String, String)>;

/// How the text of the main file is to be taken.
#[derive(Clone, Copy)]
pub(crate) enum Resolve<'e> {
    /// As an operator wrote it: `include` followed, `${VAR}` expanded from `env`.
    Written(Env<'e>),
    /// As `prepared_text` wrote it (a worker's): one file, nothing left to resolve.
    Prepared,
}

/// Reads every file the main file (file 0 of `sources`) includes, nested, into `sources`.
pub(crate) fn read_included(sources: &mut SourceMap, env: Env<'_>) -> Errors {
    let main = PathBuf::from(sources.shown(0));
    // Text given without a file (`config::parse`) has only its name.
    let canonical = std::fs::canonicalize(&main).unwrap_or(main);
    let bytes = sources.text(0).len();
    let mut reader = Reader {
        sources,
        env,
        errors: Vec::new(),
        seen: HashMap::new(),
        chain: vec![(canonical, 0)],
        bytes,
        full: false,
    };
    reader.visit(0, 0);
    reader.errors
}

struct Reader<'s, 'e> {
    sources: &'s mut SourceMap,
    env: Env<'e>,
    errors: Errors,
    /// Every included file read (canonical path) → the `include` entry that read it.
    seen: HashMap<PathBuf, Range<usize>>,
    /// The files being read, the main file first (canonical path, index in `sources`).
    chain: Vec<(PathBuf, usize)>,
    /// Bytes read so far, every file together.
    bytes: usize,
    /// `MAX_FILES` was reached (said once).
    full: bool,
}

impl Reader<'_, '_> {
    fn err(&mut self, span: &Range<usize>, key: &str, message: String) {
        self.errors.push((span.clone(), key.to_string(), message));
    }

    /// Reads what file `file` includes, and what those include.
    fn visit(&mut self, file: usize, depth: usize) {
        let dir = Path::new(self.sources.shown(file))
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        for (pattern, span, key) in self.entries(file) {
            match matching(&dir, &pattern) {
                Ok(paths) => {
                    for path in paths {
                        self.read(path, &span, &key, depth + 1);
                    }
                }
                Err(msg) => self.err(&span, &key, msg),
            }
        }
    }

    /// The `include` entries of file `file`, expanded, each with its span and key.
    fn entries(&mut self, file: usize) -> Vec<(String, Range<usize>, String)> {
        let base = self.sources.base(file);
        let parsed = match DeTable::parse(self.sources.text(file)) {
            Ok(t) => t,
            Err(e) => {
                self.errors.push(syntax_error(&e, base));
                return Vec::new();
            }
        };
        let Some(value) = parsed.get_ref().get("include") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut entry = |v: &Spanned<DeValue<'_>>, key: String, errors: &mut Errors| {
            let span = shift(v.span(), base);
            let DeValue::String(text) = v.get_ref() else {
                errors.push((
                    span,
                    key,
                    "must be a path (a string; globs allowed: \"conf.d/*.toml\")".into(),
                ));
                return;
            };
            match expand::expand(text, self.env) {
                Ok(expanded) => {
                    let path = expanded.unwrap_or_else(|| text.to_string());
                    if path.is_empty() {
                        errors.push((span, key, "must not be empty".into()));
                    } else {
                        out.push((path, span, key));
                    }
                }
                Err(msg) => errors.push((span, key, msg)),
            }
        };
        let mut errors = Vec::new();
        match value.get_ref() {
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    entry(item, format!("include[{i}]"), &mut errors);
                }
            }
            DeValue::String(_) => entry(value, "include".into(), &mut errors),
            _ => errors.push((
                shift(value.span(), base),
                "include".into(),
                "must be a list of paths (`include = [\"conf.d/*.toml\"]`)".into(),
            )),
        }
        self.errors.extend(errors);
        out
    }

    /// Reads the file at `path`, named by the entry at `from`, at `depth`, then its includes.
    fn read(&mut self, path: PathBuf, from: &Range<usize>, key: &str, depth: usize) {
        if self.full {
            return;
        }
        let shown = path.display().to_string();
        let canonical = match std::fs::canonicalize(&path) {
            Ok(c) => c,
            Err(e) => {
                let why = crate::error::os_message(&e);
                return self.err(from, key, format!("cannot read {shown}: {why}"));
            }
        };
        if let Some(at) = self.chain.iter().position(|(c, _)| *c == canonical) {
            let names: Vec<&str> = self
                .chain
                .iter()
                .skip(at)
                .map(|(_, i)| self.sources.shown(*i))
                .chain([shown.as_str()])
                .collect();
            let msg = format!("include cycle: {}", names.join(" -> "));
            return self.err(from, key, msg);
        }
        if let Some(first) = self.seen.get(&canonical) {
            let msg = format!(
                "{shown} is included twice (first at {}): a file is read once",
                self.sources.position(first.start)
            );
            return self.err(from, key, msg);
        }
        if depth > MAX_DEPTH {
            let msg = format!("{shown}: includes nest more than {MAX_DEPTH} deep");
            return self.err(from, key, msg);
        }
        if self.sources.len() >= MAX_FILES {
            self.full = true;
            let msg = format!("{shown}: a config is at most {MAX_FILES} files, the main one among them");
            return self.err(from, key, msg);
        }
        let text = match bounded::read_bounded(&path, bounded::MAX_CONFIG) {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) => return self.err(from, key, format!("cannot read {shown}: not UTF-8 text")),
            },
            Err(e) => return self.err(from, key, format!("cannot read {shown}: {e}")),
        };
        self.bytes += text.len();
        if self.bytes as u64 > bounded::MAX_CONFIG {
            self.full = true;
            let msg = format!(
                "{shown}: the config's files together are larger than the {}-byte limit",
                bounded::MAX_CONFIG
            );
            return self.err(from, key, msg);
        }
        let index = self.sources.push(shown, text);
        self.seen.insert(canonical.clone(), from.clone());
        self.chain.push((canonical, index));
        self.visit(index, depth);
        self.chain.pop();
    }
}

/// The files `pattern` names, relative to `dir`: the path itself when it has no glob
/// character, else the matches of its file name in its directory, sorted.
fn matching(dir: &Path, pattern: &str) -> Result<Vec<PathBuf>, String> {
    let full = dir.join(pattern);
    let Some(name) = full.file_name().and_then(|n| n.to_str()) else {
        return Err(format!("`{pattern}` does not name a file"));
    };
    let parent = full.parent().unwrap_or(Path::new(""));
    if parent.to_str().is_some_and(has_glob) {
        return Err(format!(
            "`{pattern}`: `*`, `?` and `[` may only be in the file name (\"conf.d/*.toml\"), not in a directory"
        ));
    }
    if !has_glob(name) {
        return Ok(vec![full.clone()]);
    }
    let listed = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let entries = match std::fs::read_dir(listed) {
        Ok(entries) => entries,
        // A glob over a directory that is not there matches nothing, as over an empty one.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            let why = crate::error::os_message(&e);
            return Err(format!("cannot list {}: {why}", listed.display()));
        }
    };
    let pattern_chars: Vec<char> = name.chars().collect();
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {}: {}", listed.display(), crate::error::os_message(&e)))?;
        let file_name = entry.file_name();
        let Some(found) = file_name.to_str() else { continue };
        if found.starts_with('.') && !name.starts_with('.') {
            continue;
        }
        let found_chars: Vec<char> = found.chars().collect();
        if glob_match(&pattern_chars, &found_chars) && !parent.join(found).is_dir() {
            names.push(found.to_string());
        }
    }
    names.sort();
    Ok(names.into_iter().map(|n| parent.join(n)).collect())
}

fn has_glob(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

/// Whether `name` matches `pattern`: `*` any run of characters, `?` one, `[abc]`, `[a-z]`,
/// `[!a]` (or `[^a]`) one of a set; an unclosed `[` is itself.
fn glob_match(pattern: &[char], name: &[char]) -> bool {
    let (mut p, mut n) = (0, 0);
    // Where the last `*` was, and the name position it is retried from.
    let mut star: Option<(usize, usize)> = None;
    while let Some(&c) = name.get(n) {
        let step = match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
                continue;
            }
            Some('?') => Some(1),
            Some('[') => match class(pattern.get(p..).unwrap_or_default(), c) {
                Some((true, len)) => Some(len),
                Some((false, _)) => None,
                None => (c == '[').then_some(1),
            },
            Some(&literal) => (literal == c).then_some(1),
            None => None,
        };
        match (step, star) {
            (Some(len), _) => {
                p += len;
                n += 1;
            }
            (None, Some((star_p, star_n))) => {
                p = star_p + 1;
                n = star_n + 1;
                star = Some((star_p, star_n + 1));
            }
            (None, None) => return false,
        }
    }
    pattern.get(p..).unwrap_or_default().iter().all(|&c| c == '*')
}

/// A `[...]` set at the start of `pattern`: whether `c` is in it and the set's length;
/// `None` when it is not closed.
fn class(pattern: &[char], c: char) -> Option<(bool, usize)> {
    let mut i = 1;
    let negated = matches!(pattern.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let &lo = pattern.get(i)?;
        if lo == ']' && !first {
            return Some((matched != negated, i + 1));
        }
        first = false;
        match (pattern.get(i + 1), pattern.get(i + 2)) {
            (Some('-'), Some(&hi)) if hi != ']' => {
                matched |= (lo..=hi).contains(&c);
                i += 3;
            }
            _ => {
                matched |= lo == c;
                i += 1;
            }
        }
    }
}

fn shift(span: Range<usize>, base: usize) -> Range<usize> {
    span.start + base..span.end + base
}

/// A TOML syntax error, at its place in the offset space.
fn syntax_error(e: &toml::de::Error, base: usize) -> (Range<usize>, String, String) {
    let span = shift(e.span().unwrap_or(0..0), base);
    (span, String::new(), e.message().trim().replace('\n', " "))
}

/// The one tree of every file in `sources`, spans in the shared offset space.
pub(crate) fn merge<'a>(sources: &'a SourceMap, resolve: Resolve<'_>) -> Result<Spanned<DeTable<'a>>, Errors> {
    let mut errors = Vec::new();
    let mut main: Option<Spanned<DeTable<'a>>> = None;
    for file in 0..sources.len() {
        let base = sources.base(file);
        let parsed = match DeTable::parse(sources.text(file)) {
            Ok(t) => t,
            Err(e) => {
                errors.push(syntax_error(&e, base));
                continue;
            }
        };
        let span = shift(parsed.span(), base);
        let mut table = parsed.into_inner();
        let env = match resolve {
            Resolve::Written(env) => {
                // Read already (`read_included`).
                table.remove("include");
                Some(env)
            }
            Resolve::Prepared => None,
        };
        let mut prepare = Prepare {
            base,
            env,
            errors: &mut errors,
            path: Vec::new(),
            offsets: Vec::new(),
        };
        match main.as_mut() {
            None => main = Some(Spanned::new(span, prepare.table(table))),
            Some(main) => {
                // An included file's `frontend[0]` is the merged tree's `frontend[N]`.
                prepare.offsets = ["frontend", "backend"]
                    .into_iter()
                    .map(|k| {
                        (
                            k,
                            main.get_ref()
                                .get(k)
                                .and_then(|v| v.get_ref().as_array())
                                .map_or(0, |a| a.len()),
                        )
                    })
                    .collect();
                let table = prepare.table(table);
                graft(main.get_mut(), table, sources, &mut errors);
            }
        }
    }
    match main {
        Some(main) if errors.is_empty() => Ok(main),
        _ => Err(errors),
    }
}

/// Appends an included file's frontends and backends to the main file's; anything else
/// there is an error.
fn graft<'a>(main: &mut DeTable<'a>, included: DeTable<'a>, sources: &SourceMap, errors: &mut Errors) {
    for (key, value) in included {
        let name = key.get_ref().to_string();
        if name != "frontend" && name != "backend" {
            let shown = match value.get_ref() {
                DeValue::Table(_) => format!("[{name}]"),
                _ => name.clone(),
            };
            errors.push((
                key.span(),
                name,
                format!(
                    "`{shown}` cannot be in an included file: it belongs in the main file ({}); an included file holds `[[frontend]]`, `[[backend]]` and `include`",
                    sources.shown(0)
                ),
            ));
            continue;
        }
        let span = value.span();
        let DeValue::Array(items) = value.into_inner() else {
            errors.push((span, name.clone(), format!("must be an array of tables (`[[{name}]]`)")));
            continue;
        };
        match main.get_mut(name.as_str()).map(Spanned::get_mut) {
            Some(DeValue::Array(existing)) => {
                for item in items {
                    existing.push(item);
                }
            }
            // The main file's own value is not an array: deserializing says so.
            Some(_) => {}
            None => {
                main.insert(key, Spanned::new(span, DeValue::Array(items)));
            }
        }
    }
}

/// One step of a key path as errors show it (`frontend[0].bind[1]`).
enum Segment {
    Key(String),
    Index(usize),
}

/// The pass over one file's tree: spans shifted to the file's base, variables expanded.
struct Prepare<'p, 'e> {
    base: usize,
    /// `None`: the text is prepared already (a worker's), nothing to expand.
    env: Option<Env<'e>>,
    errors: &'p mut Errors,
    /// Where the value being prepared is.
    path: Vec<Segment>,
    /// Added to the index of a top-level array's items (an included file's).
    offsets: Vec<(&'static str, usize)>,
}

impl Prepare<'_, '_> {
    fn table<'a>(&mut self, table: DeTable<'a>) -> DeTable<'a> {
        table
            .into_iter()
            .map(|(key, value)| {
                let span = shift(key.span(), self.base);
                let key = key.into_inner();
                self.path.push(Segment::Key(key.to_string()));
                let value = self.value(value);
                self.path.pop();
                (Spanned::new(span, key), value)
            })
            .collect()
    }

    fn value<'a>(&mut self, value: Spanned<DeValue<'a>>) -> Spanned<DeValue<'a>> {
        let span = shift(value.span(), self.base);
        let inner = match value.into_inner() {
            DeValue::String(text) => DeValue::String(self.string(text, &span)),
            DeValue::Array(items) => {
                let offset = match self.path.as_slice() {
                    [Segment::Key(top)] => self.offsets.iter().find(|(k, _)| k == top).map_or(0, |(_, n)| *n),
                    _ => 0,
                };
                DeValue::Array(
                    items
                        .into_iter()
                        .enumerate()
                        .map(|(i, item)| {
                            self.path.push(Segment::Index(i + offset));
                            let item = self.value(item);
                            self.path.pop();
                            item
                        })
                        .collect(),
                )
            }
            DeValue::Table(table) => DeValue::Table(self.table(table)),
            other => other,
        };
        Spanned::new(span, inner)
    }

    fn string<'a>(&mut self, text: Cow<'a, str>, span: &Range<usize>) -> Cow<'a, str> {
        let Some(env) = self.env else { return text };
        // A path rewrite's replacement has `$1`, `${name}` and `$$` of its own.
        if let [.., Segment::Key(table), Segment::Key(key)] = self.path.as_slice()
            && table == "rewrite_path"
            && key == "replace"
        {
            return text;
        }
        match expand::expand(&text, env) {
            Ok(None) => text,
            Ok(Some(expanded)) => Cow::Owned(expanded),
            Err(msg) => {
                self.errors.push((span.clone(), self.key(), msg));
                text
            }
        }
    }

    fn key(&self) -> String {
        let mut out = String::new();
        for segment in &self.path {
            match segment {
                Segment::Key(k) if out.is_empty() => out.push_str(k),
                Segment::Key(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Segment::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }
}

/// The merged tree as one TOML document (see the module's header).
pub(crate) fn prepared_text(tree: &DeTable<'_>) -> Result<String, (Range<usize>, String)> {
    let table = to_table(tree)?;
    toml::to_string(&table).map_err(|e| (0..0, format!("cannot write the merged config: {e}")))
}

fn to_table(tree: &DeTable<'_>) -> Result<toml::Table, (Range<usize>, String)> {
    tree.iter()
        .map(|(k, v)| Ok((k.get_ref().to_string(), to_value(v)?)))
        .collect()
}

fn to_value(value: &Spanned<DeValue<'_>>) -> Result<toml::Value, (Range<usize>, String)> {
    Ok(match value.get_ref() {
        DeValue::String(s) => toml::Value::String(s.to_string()),
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
            .map(toml::Value::Integer)
            .map_err(|_| (value.span(), format!("integer {i} is out of range")))?,
        DeValue::Float(f) => f
            .as_str()
            .parse::<f64>()
            .map(toml::Value::Float)
            .map_err(|_| (value.span(), format!("float {f} is out of range")))?,
        DeValue::Boolean(b) => toml::Value::Boolean(*b),
        DeValue::Datetime(d) => toml::Value::Datetime(*d),
        DeValue::Array(items) => toml::Value::Array(items.iter().map(to_value).collect::<Result<_, _>>()?),
        DeValue::Table(t) => toml::Value::Table(to_table(t)?),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn matches(pattern: &str, name: &str) -> bool {
        let p: Vec<char> = pattern.chars().collect();
        let n: Vec<char> = name.chars().collect();
        glob_match(&p, &n)
    }

    #[test]
    fn globs_match_like_a_shell() {
        assert!(matches("*.toml", "a.toml"));
        assert!(matches("*.toml", ".toml"));
        assert!(!matches("*.toml", "a.toml.bak"));
        assert!(matches("*", ""));
        assert!(matches("a*b*c", "aXXbYYc"));
        assert!(matches("a*b*c", "abbbc"));
        assert!(!matches("a*b*c", "abbb"));
        assert!(matches("??-*.toml", "10-web.toml"));
        assert!(!matches("??-*.toml", "1-web.toml"));
        assert!(matches("[0-9]*", "7a"));
        assert!(!matches("[0-9]*", "a7"));
        assert!(matches("[!a]x", "bx"));
        assert!(!matches("[^a]x", "ax"));
        assert!(matches("[]]", "]"));
        assert!(matches("[a-]", "-"));
        // An unclosed `[` is a literal.
        assert!(matches("a[b", "a[b"));
        assert!(matches("é*", "été"));
    }

    #[test]
    fn prepared_text_round_trips_every_kind_of_value() {
        let src = "a = \"x\\\"y\\nz\"\nb = 0x1F\nc = -3\nd = 1.5\ne = true\nf = [1, \"s\"]\n\
                   j = \"\\n'''\\t\\u0001\\\\\"\nk = 1e-7\nl = 1_000\nm = -inf\n[[t]]\ng = { h = 'i' }\n";
        let tree = DeTable::parse(src).unwrap();
        let text = prepared_text(tree.get_ref()).unwrap();
        let back: toml::Table = text.parse().unwrap();
        let want: toml::Table = src.parse().unwrap();
        assert_eq!(back, want, "{text}");
    }
}
