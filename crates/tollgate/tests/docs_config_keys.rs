//! `docs/config.md` and the parser agree on the keys: every key the parser accepts is
//! documented, and every key the reference's tables document is accepted.
//!
//! The parser's keys are read from the parser itself, not from a list kept beside it: every
//! config struct denies unknown fields, and serde's refusal names the fields it expected
//! (`unknown field `zzz_probe`, expected one of `a`, `b``). Probing the root, then each key
//! as a table and as an array of tables, walks the whole tree. A key whose value is not a
//! table (a string, a number, a list of strings, a map of names) is a leaf.
//!
//! The reference's keys are the first cells of its `| key | ...` tables, in the section of
//! the table the nearest heading names (`## [global]`, `### [[frontend.route]]`; a heading
//! naming no table stays in the section above it). A first cell may name several keys
//! (`` `cert`, `key` ``), a key of a sub-table (`` `[[frontend.tls.cert]]` `default` ``) or a
//! nested key (`` `timeouts.connect` ``).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const PROBE: &str = "zzz_probe";

/// How a key's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Leaf,
    Table,
    ArrayOfTables,
}

/// One step of a path: a key, and whether its value is an array of tables.
#[derive(Debug, Clone)]
struct Step {
    key: String,
    array: bool,
}

/// The config text that puts `{ zzz_probe = 1 }` at `path`.
fn probe_text(path: &[Step]) -> String {
    fn value(path: &[Step]) -> String {
        match path.split_first() {
            None => format!("{{ {PROBE} = 1 }}"),
            Some((first, rest)) => {
                let inner = value(rest);
                let inner = if first.array { format!("[{inner}]") } else { inner };
                format!("{{ {} = {inner} }}", first.key)
            }
        }
    }
    match path.split_first() {
        None => format!("{PROBE} = 1\n"),
        Some((first, rest)) => {
            let inner = value(rest);
            let inner = if first.array { format!("[{inner}]") } else { inner };
            format!("{} = {inner}\n", first.key)
        }
    }
}

/// The fields of the table at `path`, if the parser reads a table there.
fn fields_at(path: &[Step]) -> Option<Vec<String>> {
    let text = probe_text(path);
    let errors = match tollgate::config::parse(&text, "probe.toml") {
        Ok(_) => return None,
        Err(e) => e.0,
    };
    let message = &errors.first()?.message;
    let rest = message.strip_prefix(&format!("unknown field `{PROBE}`"))?;
    if rest.contains("there are no fields") {
        return Some(Vec::new());
    }
    let listed = rest.split_once("expected")?.1;
    Some(listed.split('`').skip(1).step_by(2).map(str::to_string).collect())
}

/// Every key path the parser accepts (`frontend.tls.cert.key`: arrays are not marked), with
/// its shape.
fn accepted_keys() -> BTreeMap<String, Shape> {
    fn walk(path: &mut Vec<Step>, seen: &mut Vec<Vec<String>>, out: &mut BTreeMap<String, Shape>) {
        let fields = fields_at(path).unwrap_or_else(|| panic!("no table at {}", dotted(path)));
        // A condition may nest a condition (`not`): stop at a table seen on the way down.
        if seen.contains(&fields) {
            return;
        }
        seen.push(fields.clone());
        for field in fields {
            let mut shape = Shape::Leaf;
            for (array, s) in [(false, Shape::Table), (true, Shape::ArrayOfTables)] {
                path.push(Step {
                    key: field.clone(),
                    array,
                });
                let is = fields_at(path).is_some();
                if is {
                    shape = s;
                    walk(path, seen, out);
                }
                path.pop();
                if is {
                    break;
                }
            }
            let mut key = dotted(path);
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(&field);
            out.insert(key, shape);
        }
        seen.pop();
    }
    let mut out = BTreeMap::new();
    walk(&mut Vec::new(), &mut Vec::new(), &mut out);
    out
}

fn dotted(path: &[Step]) -> String {
    path.iter().map(|s| s.key.as_str()).collect::<Vec<_>>().join(".")
}

/// What the reference documents: the key paths of its tables' first cells, and for each
/// table section its whole text (for keys of inline tables, described in prose).
struct Reference {
    /// Key path → (line, the key as the cell wrote it).
    rows: BTreeMap<String, (usize, String)>,
    sections: BTreeMap<String, String>,
}

/// The table a heading names: `## `[global]``, `### Rate limits: `[[frontend.limit]]``.
fn heading_table(line: &str) -> Option<String> {
    line.split('`').skip(1).step_by(2).find_map(table_name)
}

/// `frontend.tls` for `[frontend.tls]` or `[[frontend.tls]]`.
fn table_name(code: &str) -> Option<String> {
    let inner = code.strip_prefix('[')?.strip_suffix(']')?;
    let inner = inner
        .strip_prefix('[')
        .and_then(|i| i.strip_suffix(']'))
        .unwrap_or(inner);
    (!inner.is_empty() && inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .then(|| inner.to_string())
}

fn read_reference(text: &str) -> Reference {
    let mut rows = BTreeMap::new();
    let mut sections: BTreeMap<String, String> = BTreeMap::new();
    let mut table = String::new(); // the root: keys outside any section are top-level
    // Open headings: (level, the table of its section). A heading naming no table belongs
    // to the nearest heading above it of a higher level.
    let mut headings: Vec<(usize, String)> = Vec::new();
    let mut in_fence = false;
    let mut in_key_table = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if line.starts_with('#') && !in_fence {
            let level = line.len() - line.trim_start_matches('#').len();
            while headings.last().is_some_and(|(l, _)| *l >= level) {
                headings.pop();
            }
            table = heading_table(line)
                .or_else(|| headings.last().map(|(_, t)| t.clone()))
                .unwrap_or_default();
            headings.push((level, table.clone()));
            in_key_table = false;
        }
        let section = sections.entry(table.clone()).or_default();
        section.push_str(line);
        section.push('\n');
        if !line.starts_with('|') {
            in_key_table = false;
            continue;
        }
        let first = line.trim_start_matches('|').split('|').next().unwrap_or("").trim();
        if first == "key" {
            in_key_table = true;
            continue;
        }
        if !in_key_table || first.starts_with("---") {
            continue;
        }
        let codes: Vec<&str> = first.split('`').skip(1).step_by(2).collect();
        let (row_table, keys) = match codes.split_first() {
            Some((c, rest)) if table_name(c).is_some() => {
                let named = table_name(c).unwrap();
                if rest.is_empty() {
                    // `[[frontend.limit]]` alone documents the table key itself.
                    rows.insert(named.clone(), (i + 1, named));
                    continue;
                }
                (named, rest.to_vec())
            }
            _ => (table.clone(), codes),
        };
        for key in keys {
            let path = if row_table.is_empty() {
                key.to_string()
            } else {
                format!("{row_table}.{key}")
            };
            rows.insert(path, (i + 1, key.to_string()));
        }
    }
    Reference { rows, sections }
}

fn reference() -> Reference {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/config.md");
    read_reference(&std::fs::read_to_string(path).unwrap())
}

/// The nearest enclosing table of `key` that has a section in the reference.
fn nearest_section<'a>(reference: &'a Reference, key: &str) -> Option<&'a str> {
    let mut parent = key;
    while let Some((p, _)) = parent.rsplit_once('.') {
        parent = p;
        if let Some(s) = reference.sections.get(parent) {
            return Some(s);
        }
    }
    None
}

#[test]
fn every_key_the_parser_accepts_is_in_the_reference() {
    let accepted = accepted_keys();
    let reference = reference();
    let missing: Vec<String> = accepted
        .iter()
        .filter(|(key, shape)| {
            if reference.rows.contains_key(key.as_str()) {
                return false;
            }
            // A table documented by a heading of its own (`### [backend.health]`), or by rows
            // naming its keys (`[[frontend.tls.cert]]` `cert`).
            let prefix = format!("{key}.");
            if **shape != Shape::Leaf
                && (reference.sections.contains_key(key.as_str())
                    || reference.rows.keys().any(|r| r.starts_with(&prefix)))
            {
                return false;
            }
            // A key of a table with no section of its own (an inline table such as a
            // route's `request_headers = { set = ... }`): named in its parent's section.
            let (parent, name) = key.rsplit_once('.').unwrap_or(("", key));
            if !reference.sections.contains_key(parent)
                && let Some(section) = nearest_section(&reference, key)
            {
                return !section.contains(&format!("`{name}`")) && !section.contains(&format!("{name} ="));
            }
            true
        })
        .map(|(k, s)| format!("{k} ({s:?})"))
        .collect();
    assert!(
        missing.is_empty(),
        "keys the parser accepts that docs/config.md does not document:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn every_key_the_reference_documents_is_accepted() {
    let accepted = accepted_keys();
    let reference = reference();
    let unknown: Vec<String> = reference
        .rows
        .iter()
        .filter(|(key, (_, written))| {
            if accepted.contains_key(key.as_str()) {
                return false;
            }
            // The per-route and per-backend table names nested keys (`timeouts.connect`)
            // for both kinds of table at once.
            !(written.contains('.') && accepted.keys().any(|a| a.ends_with(&format!(".{written}"))))
        })
        .map(|(k, (line, _))| format!("{k} (docs/config.md:{line})"))
        .collect();
    assert!(
        unknown.is_empty(),
        "keys docs/config.md documents that the parser refuses:\n  {}",
        unknown.join("\n  ")
    );
}

#[test]
fn the_probe_reads_the_tree() {
    // The walk must find what every config has; a probe that found nothing would make the
    // tests above pass on an empty set.
    let accepted = accepted_keys();
    for (key, shape) in [
        ("global", Shape::Table),
        ("global.workers", Shape::Leaf),
        ("frontend", Shape::ArrayOfTables),
        ("frontend.bind", Shape::Leaf),
        ("frontend.tls", Shape::Table),
        ("frontend.tls.cert", Shape::ArrayOfTables),
        ("frontend.tls.cert.key", Shape::Leaf),
        ("frontend.route", Shape::ArrayOfTables),
        ("backend.server.address", Shape::Leaf),
        ("backend.health", Shape::Table),
    ] {
        assert_eq!(accepted.get(key), Some(&shape), "{key}: {accepted:#?}");
    }
    assert!(accepted.len() > 150, "only {} keys found", accepted.len());
}

#[test]
fn the_reference_reader_reads_rows_and_sections() {
    let md = "# Reference\n\n## `[global]`\n\n| key | default | meaning |\n|---|---|---|\n| `workers` | 2 | x |\n\n```toml\n# not a heading\n```\n\n### `[global.sub]`\n\n### Privileges\n\n| key | meaning |\n|---|---|\n| `user` | x |\n\n### `[frontend.tls]` — TLS\n\n| key | default | meaning |\n|---|---|---|\n| `[[frontend.tls.cert]]` `cert`, `key` | - | x |\n| `alpn` | [] | x |\n| `timeouts.connect` | - | x |\n\n| counter | meaning |\n|---|---|\n| `not_a_key` | x |\n";
    let r = read_reference(md);
    let rows: BTreeSet<&str> = r.rows.keys().map(String::as_str).collect();
    assert_eq!(
        rows,
        BTreeSet::from([
            "global.workers",
            "global.user",
            "frontend.tls.cert.cert",
            "frontend.tls.cert.key",
            "frontend.tls.alpn",
            "frontend.tls.timeouts.connect",
        ])
    );
    assert!(r.sections["global"].contains("Privileges"));
}
