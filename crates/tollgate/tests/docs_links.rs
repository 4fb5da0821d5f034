//! Every relative link in the README and under `docs/` reaches a file of the repository,
//! and every `#anchor` one of its headings, so a renamed heading or a moved page cannot
//! leave a reader at a dead end. Links to other sites are not followed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod docs_support;

use std::collections::BTreeSet;

use docs_support::repo_root;

/// The lines of a Markdown text outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut in_fence = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                in_fence = !in_fence;
                return false;
            }
            !in_fence
        })
        .collect()
}

/// The anchors GitHub gives a file's headings: lower case, punctuation dropped (letters,
/// digits, `-` and `_` kept), spaces to `-`, a repeated anchor suffixed `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let Some(title) = line.strip_prefix('#') else { continue };
        let title = title.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while out.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        out.insert(unique);
    }
    out
}

/// The targets of `[text](target)` links on prose lines (inline code spans skipped).
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Drop inline code: a `[x](y)` inside backticks is an example, not a link.
        let outside_code: String = line
            .split('`')
            .enumerate()
            .filter(|(n, _)| n % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = outside_code.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((i + 1, after[..end].to_string()));
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let root = repo_root();
    let mut broken = Vec::new();
    let mut checked = 0;
    let mut docs = docs_support::documents();
    docs.push(root.join("bench/README.md"));
    for doc in docs {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap().join(file)
            };
            let shown = doc.strip_prefix(&root).unwrap_or(&doc).display().to_string();
            if !path.exists() {
                broken.push(format!("{shown}:{line}: {target}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let target_text = std::fs::read_to_string(&path).unwrap_or_default();
                if path.extension().is_some_and(|e| e == "md") && !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{shown}:{line}: {target}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} relative links found");
    assert!(broken.is_empty(), "broken links:\n  {}", broken.join("\n  "));
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    let md = "# Title\n\n## `[frontend.tls]` — TLS termination\n\n### Per-route and per-backend limits\n\n## Title\n\n```sh\n# not a heading\n```\n";
    let a = anchors(md);
    assert_eq!(
        a,
        BTreeSet::from([
            "title".to_string(),
            "frontendtls--tls-termination".into(),
            "per-route-and-per-backend-limits".into(),
            "title-1".into(),
        ])
    );
    assert_eq!(
        links("see [a](b.md#c) and `[x](y)` and [d](http://e)\n```\n[f](g)\n```\n"),
        vec![(1, "b.md#c".to_string()), (1, "http://e".to_string())]
    );
}
