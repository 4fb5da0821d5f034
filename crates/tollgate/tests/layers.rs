//! The crate's layers are one-way: a module never imports one above it.
//!
//! Reads every file under `src/` (the library; `main.rs` is the binary, a crate of its own),
//! maps each `crate::X` reference (`use crate::X::..`, `use crate::{X, Y::..}`, a path
//! `crate::X::f()` in code) to its top-level module X and fails on any reference that goes
//! up `LAYERS`, the order docs/architecture.md ("Layers") documents. Modules on one line
//! may import each other, but not in a cycle. A new top-level module must be placed in
//! `LAYERS` before this passes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top to bottom; a module may import anything on a lower line.
const LAYERS: &[&[&str]] = &[
    &["master"],
    &["admin", "convert"],
    &["runtime"],
    &["health", "discover", "acme", "sharing"],
    &["quic"],
    &["listener"],
    &["proxy"],
    &["tls"],
    &["ctx"],
    &["relay"],
    &["balance"],
    &["command"],
    &["metrics"],
    &["live"],
    &["limit"],
    &["budget", "buffer", "stats", "accesslog", "background"],
    &["config", "http", "auth", "error", "ids", "origin", "proxyproto"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|line| line.contains(&module))
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` without comments, string and char literals (so that a path in a doc comment or
/// an error message is not an import).
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1).copied()) {
            (b'/', Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            (b'r', Some(b'#' | b'"')) if i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') => {
                // A raw string r"..." or r#"..."#.
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                j += 1;
                while j < b.len() && !b[j..].starts_with(&close) {
                    j += 1;
                }
                i = j + close.len();
                out.push_str("\"\"");
            }
            (b'"', _) => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            (b'\'', _) => {
                // A char literal ('x', '\n', '\''), not a lifetime ('a).
                let end = if b.get(i + 1) == Some(&b'\\') {
                    text[i + 2..].find('\'').map(|k| i + 2 + k)
                } else {
                    let c = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + c) == Some(&b'\'')).then_some(i + 1 + c)
                };
                match end {
                    Some(end) => {
                        out.push_str("' '");
                        i = end + 1;
                    }
                    None => {
                        out.push('\'');
                        i += 1;
                    }
                }
            }
            _ => {
                let c = text[i..].chars().next().unwrap();
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules `code` refers to through `crate::`.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // `mycrate::`, `tollgate_crate::`
        }
        let rest_trimmed = rest.trim_start();
        if let Some(group) = rest_trimmed.strip_prefix('{') {
            // `crate::{a, b::c, d::{e, f}}`: the first segment of each item at depth 1.
            let mut depth = 1;
            let mut item_start = true;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => item_start = true,
                    c if depth == 1 && item_start && (c.is_ascii_alphabetic() || c == '_') => {
                        refs.insert(ident_at(&group[k..]).to_string());
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident_at(rest_trimmed);
            if !name.is_empty() {
                refs.insert(name.to_string());
            }
        }
    }
    refs
}

/// The top-level module a file under `src/` belongs to (`None` for lib.rs, and for main.rs
/// and the binary's own modules: the binary is a crate of its own, above every layer).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" | "manpage.rs" | "convert_cmd.rs" => None,
        f => Some(f.strip_suffix(".rs").unwrap_or(f).to_string()),
    }
}

/// module -> (imported module -> files that import it).
type Edges = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn crate_edges(src: &Path) -> (BTreeSet<String>, Edges) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules = BTreeSet::new();
    let mut edges = Edges::new();
    for file in files {
        let Some(module) = module_of(src, &file) else {
            continue;
        };
        modules.insert(module.clone());
        let code = code_only(&std::fs::read_to_string(&file).unwrap());
        for target in crate_refs(&code) {
            if target != module {
                let shown = file.strip_prefix(src).unwrap().display().to_string();
                edges
                    .entry(module.clone())
                    .or_default()
                    .entry(target)
                    .or_default()
                    .insert(shown);
            }
        }
    }
    (modules, edges)
}

/// A cycle among `nodes` through `edges`, if any (as the path that closes it).
fn find_cycle(nodes: &[&str], edges: &Edges) -> Option<Vec<String>> {
    fn visit(n: &str, nodes: &[&str], edges: &Edges, path: &mut Vec<String>, done: &mut BTreeSet<String>) -> bool {
        if let Some(start) = path.iter().position(|p| p == n) {
            path.drain(..start);
            path.push(n.to_string());
            return true;
        }
        if done.contains(n) {
            return false;
        }
        path.push(n.to_string());
        for next in edges.get(n).into_iter().flat_map(|m| m.keys()) {
            if nodes.contains(&next.as_str()) && visit(next, nodes, edges, path, done) {
                return true;
            }
        }
        path.pop();
        done.insert(n.to_string());
        false
    }
    let mut done = BTreeSet::new();
    for n in nodes {
        let mut path = Vec::new();
        if visit(n, nodes, edges, &mut path, &mut done) {
            return Some(path);
        }
    }
    None
}

/// Imports that go up the layers, and cycles within one layer.
fn violations(edges: &Edges) -> Vec<String> {
    let mut out = Vec::new();
    for (from, targets) in edges {
        for (to, files) in targets {
            let (Some(a), Some(b)) = (layer_of(from), layer_of(to)) else {
                continue; // `crate::` followed by a macro or a name that is no module
            };
            if b < a {
                out.push(format!("{from} imports {to} (above it) in {files:?}"));
            }
        }
    }
    for line in LAYERS {
        if let Some(cycle) = find_cycle(line, edges) {
            out.push(format!(
                "modules on one layer import each other in a cycle: {}",
                cycle.join(" -> ")
            ));
        }
    }
    out
}

#[test]
fn no_module_imports_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (modules, edges) = crate_edges(&src);

    let unplaced: Vec<_> = modules.iter().filter(|m| layer_of(m).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "top-level modules missing from LAYERS: {unplaced:?}"
    );
    let stale: Vec<_> = LAYERS
        .iter()
        .flat_map(|line| line.iter())
        .filter(|m| !modules.contains(**m))
        .collect();
    assert!(stale.is_empty(), "LAYERS names modules that do not exist: {stale:?}");
    // The parse found the imports it must (a broken parse would pass everything).
    assert!(
        edges.get("proxy").is_some_and(|m| m.contains_key("relay"))
            && edges.values().map(BTreeMap::len).sum::<usize>() > 30,
        "too few imports found: {edges:?}"
    );

    let broken = violations(&edges);
    assert!(broken.is_empty(), "the layers are not one-way:\n{}", broken.join("\n"));
}

#[test]
fn references_are_found_in_code_and_not_in_comments_or_strings() {
    let text = r#"
        use crate::alpha::Thing;
        use crate::{beta, gamma::{x, y}, delta::z};
        use super::epsilon; // crate::commented
        /* crate::blocked */
        fn f() { crate::zeta::call(); let s = "crate::quoted"; let c = '"'; crate::eta::g(); }
        let r = r"crate::raw";
        fn g<'a>(x: &'a str) { mycrate::theta(); }
    "#;
    let refs = crate_refs(&code_only(text));
    let want: BTreeSet<String> = ["alpha", "beta", "gamma", "delta", "zeta", "eta"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(refs, want);
}

#[test]
fn an_upward_import_or_a_cycle_is_caught() {
    let edge = |edges: &mut Edges, from: &str, to: &str| {
        edges
            .entry(from.into())
            .or_default()
            .insert(to.into(), BTreeSet::from([format!("{from}/x.rs")]));
    };
    let mut edges = Edges::new();
    edge(&mut edges, "proxy", "relay");
    edge(&mut edges, "config", "http");
    assert!(violations(&edges).is_empty());

    edge(&mut edges, "relay", "ctx");
    let found = violations(&edges);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("relay imports ctx (above it)"), "{found:?}");

    let mut edges = Edges::new();
    edge(&mut edges, "budget", "stats");
    edge(&mut edges, "stats", "budget");
    let found = violations(&edges);
    assert_eq!(
        found,
        ["modules on one layer import each other in a cycle: budget -> stats -> budget"]
    );
}
