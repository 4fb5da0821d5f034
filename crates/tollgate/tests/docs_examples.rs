//! Every config example in the README and under `docs/` passes `tollgate check`, so the
//! documentation cannot drift from what the parser accepts.
//!
//! A fenced block whose info string is `toml` is a whole config: written to a file and
//! checked as it is. `toml fragment` is part of one: merged into [`SKELETON`] first (tables
//! key by key, arrays appended, a table meeting an array of tables merged into its last
//! element). `toml check-fails` must be refused, with the first line of the ```` ```text ````
//! block right after it somewhere in `check`'s message.
//!
//! The files an example names (certificates, keys, CA bundles, a `body_file`, a `users_file`,
//! the secret of a `*_file` key) are paths on the reader's machine, not this one: each is
//! replaced by a file this test makes (a chain and key from a test CA, the CA itself, a
//! small body, an htpasswd file, a `user:password`), and `[global] user` and `group` by
//! the user running the test (`control_socket_group` by a group no worker runs in). Nothing else is changed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;
mod docs_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::tls::{Ca, TempDir};
use docs_support::{documents, repo_root};
use toml::{Table, Value};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// What a `toml fragment` block is merged into: one HTTP frontend and its backend.
const SKELETON: &str = r#"
[[frontend]]
name = "web"
bind = ["127.0.0.1:8080"]
mode = "http"
default_backend = "app"

[[backend]]
name = "app"
mode = "http"

[[backend.server]]
name = "app1"
address = "127.0.0.1:9001"
"#;

#[derive(Debug, PartialEq)]
enum Kind {
    Whole,
    Fragment,
    Fails { expected: String },
}

#[derive(Debug)]
struct Example {
    file: PathBuf,
    line: usize,
    kind: Kind,
    text: String,
}

struct Fence {
    line: usize,
    info: String,
    body: String,
}

/// The fenced blocks of a Markdown file, with the line each opens on (1-based). A fence may
/// be indented (inside a list item); its body loses that indentation.
fn fences(text: &str) -> Vec<Fence> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String, usize, String)> = None; // line, info, indent, body
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        let indent = raw.len() - trimmed.len();
        match open.as_mut() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some((i + 1, info.trim().to_string(), indent, String::new()));
                }
            }
            Some((_, _, fence_indent, body)) => {
                if trimmed.starts_with("```") && trimmed.trim_end() == "```" {
                    let (line, info, _, body) = open.take().unwrap();
                    out.push(Fence { line, info, body });
                } else {
                    let cut = raw.len().min(*fence_indent).min(indent);
                    body.push_str(&raw[cut..]);
                    body.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "an unclosed code fence");
    out
}

fn examples_in(file: &Path) -> Vec<Example> {
    let text = std::fs::read_to_string(file).unwrap();
    let blocks = fences(&text);
    let mut out = Vec::new();
    for (i, f) in blocks.iter().enumerate() {
        let mut words = f.info.split_whitespace();
        if words.next() != Some("toml") {
            continue;
        }
        let flags: Vec<&str> = words.collect();
        let kind = match flags.as_slice() {
            [] => Kind::Whole,
            ["fragment"] => Kind::Fragment,
            ["check-fails"] => {
                let next = blocks.get(i + 1).filter(|n| n.info == "text").unwrap_or_else(|| {
                    panic!(
                        "{}:{}: a `toml check-fails` block needs a ```text block after it with the message",
                        file.display(),
                        f.line
                    )
                });
                Kind::Fails {
                    expected: next.body.lines().next().unwrap_or("").trim().to_string(),
                }
            }
            other => panic!("{}:{}: unknown toml block flags {other:?}", file.display(), f.line),
        };
        out.push(Example {
            file: file.to_path_buf(),
            line: f.line,
            kind,
            text: f.body.clone(),
        });
    }
    out
}

/// `fragment` merged into `base`: tables key by key, arrays appended, a table into the last
/// element of an array of tables; anything else replaces.
fn merge(base: &mut Table, fragment: Table) {
    for (key, value) in fragment {
        match (base.get_mut(&key), value) {
            (Some(Value::Table(b)), Value::Table(f)) => merge(b, f),
            (Some(Value::Array(b)), Value::Array(f)) => b.extend(f),
            (Some(Value::Array(b)), Value::Table(f)) if matches!(b.last(), Some(Value::Table(_))) => {
                if let Some(Value::Table(last)) = b.last_mut() {
                    merge(last, f);
                }
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// The files examples may name, made once per run.
struct Fixtures {
    _dir: TempDir,
    chain: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    body: PathBuf,
    /// An htpasswd file (a bcrypt entry) for `users_file`.
    users: PathBuf,
    /// `user:password`, as `stats_auth_file` and `redis_password_file` take it.
    secret: PathBuf,
    state_dir: PathBuf,
    uid: String,
    gid: String,
}

impl Fixtures {
    fn new() -> Fixtures {
        let dir = TempDir::new();
        let ca = Ca::new("docs example CA");
        let leaf = ca.leaf(
            &["example.com", "www.example.com", "api.example.com", "*.example.com"],
            "example.com",
            false,
        );
        let (chain, key) = leaf.write(&dir, "example.com");
        // The chain file holds the leaf, then its issuer, as a CA's bundle does.
        std::fs::write(&chain, format!("{}{}", leaf.cert_pem, ca.pem)).unwrap();
        let ca_path = ca.write(&dir, "ca.pem");
        let body = dir.path("body.html");
        std::fs::write(&body, "<h1>maintenance</h1>\n").unwrap();
        let users = dir.path("users.htpasswd");
        std::fs::write(
            &users,
            "alice:$2y$05$LlNh6baUGMOtO/VdJ8Uhkexo9u6jO4Y043PSigVhgt/qLZSbOjv6e\n",
        )
        .unwrap();
        let secret = dir.path("secret");
        std::fs::write(&secret, "ops:change-this-password\n").unwrap();
        let state_dir = dir.path("state");
        Fixtures {
            users,
            chain,
            key,
            ca: ca_path,
            body,
            secret,
            state_dir,
            uid: current_id("Uid:"),
            gid: current_id("Gid:"),
            _dir: dir,
        }
    }

    fn path_str(p: &Path) -> Value {
        Value::String(p.display().to_string())
    }

    /// Points every file key of `table` (and the tables under it) at a fixture.
    fn substitute(&self, table: &mut Table, top: bool) {
        // `cert` with `key` beside it is a certificate pair (a frontend's, or a TLS
        // server's client certificate); a lone `key` is something else (a limit's key).
        let pair = table.contains_key("cert");
        for (name, value) in table.iter_mut() {
            match value {
                Value::Table(t) => self.substitute(t, false),
                Value::Array(items) => {
                    for item in items.iter_mut() {
                        if let Value::Table(t) = item {
                            self.substitute(t, false);
                        }
                    }
                }
                Value::String(_) => {
                    let replacement = match name.as_str() {
                        "cert" if pair => Some(Self::path_str(&self.chain)),
                        "key" if pair => Some(Self::path_str(&self.key)),
                        "ca_file" | "directory_ca" => Some(Self::path_str(&self.ca)),
                        "body_file" => Some(Self::path_str(&self.body)),
                        "users_file" => Some(Self::path_str(&self.users)),
                        "stats_auth_file" | "redis_password_file" => Some(Self::path_str(&self.secret)),
                        "state_dir" => Some(Self::path_str(&self.state_dir)),
                        _ => None,
                    };
                    if let Some(r) = replacement {
                        *value = r;
                    }
                }
                _ => {}
            }
        }
        if top && let Some(Value::Table(global)) = table.get_mut("global") {
            // An operators' group for the socket: a gid no worker runs in (check refuses
            // a socket the workers could open).
            let operators = "4242".to_string();
            for (key, id) in [
                ("user", &self.uid),
                ("group", &self.gid),
                ("control_socket_group", &operators),
            ] {
                if global.contains_key(key) {
                    global.insert(key.into(), Value::String(id.clone()));
                }
            }
        }
    }
}

/// The name of this process's real user (`Uid:`) or group (`Gid:`), from the system's
/// database (`/etc/passwd`, `/etc/group`): a `user` or `group` every machine resolves.
fn current_id(field: &str) -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let id = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    let db = if field == "Uid:" { "/etc/passwd" } else { "/etc/group" };
    std::fs::read_to_string(db)
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let mut parts = l.split(':');
            let name = parts.next()?;
            (parts.nth(1)? == id).then(|| name.to_string())
        })
        .unwrap_or(id)
}

/// Runs `tollgate check` on the example as the test prepared it; `Err` says why it failed.
fn check(example: &Example, fixtures: &Fixtures, dir: &TempDir, n: usize) -> Result<(), String> {
    let mut table: Table = match example.text.parse::<Table>() {
        Ok(t) => t,
        Err(e) if matches!(example.kind, Kind::Fails { .. }) => {
            // A refused example may be refused by TOML itself; check judges the text as is.
            let _ = e;
            return run_check(example, &example.text, dir, n);
        }
        Err(e) => return Err(format!("not TOML: {e}")),
    };
    if example.kind == Kind::Fragment {
        let mut base: Table = SKELETON.parse().unwrap();
        merge(&mut base, table);
        table = base;
    }
    fixtures.substitute(&mut table, true);
    let text = toml::to_string(&table).map_err(|e| format!("cannot write back: {e}"))?;
    run_check(example, &text, dir, n)
}

fn run_check(example: &Example, text: &str, dir: &TempDir, n: usize) -> Result<(), String> {
    let path = dir.path(&format!("example-{n}.toml"));
    std::fs::write(&path, text).unwrap();
    let out = Command::new(BIN)
        .arg("check")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    match (&example.kind, out.status.success()) {
        (Kind::Whole | Kind::Fragment, true) => Ok(()),
        (Kind::Whole | Kind::Fragment, false) => Err(format!("check refused it:\n{stderr}\nas checked:\n{text}")),
        (Kind::Fails { .. }, true) => Err("check accepted a block marked `check-fails`".into()),
        (Kind::Fails { expected }, false) if stderr.contains(expected.as_str()) => Ok(()),
        (Kind::Fails { expected }, false) => Err(format!("refused, but without `{expected}`:\n{stderr}")),
    }
}

fn all_examples() -> Vec<Example> {
    documents().iter().flat_map(|d| examples_in(d)).collect()
}

#[test]
fn every_config_example_in_the_docs_passes_check() {
    let examples = all_examples();
    let fixtures = Fixtures::new();
    let dir = TempDir::new();
    let root = repo_root();
    let failures: Vec<String> = examples
        .iter()
        .enumerate()
        .filter_map(|(n, ex)| {
            check(ex, &fixtures, &dir, n).err().map(|why| {
                let file = ex.file.strip_prefix(&root).unwrap_or(&ex.file);
                format!("{}:{} ({:?}): {why}", file.display(), ex.line, ex.kind)
            })
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} config examples fail:\n\n{}",
        failures.len(),
        examples.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_docs_hold_config_examples_of_every_kind() {
    // Guards the extractor: a change that made it find nothing would pass the test above.
    let examples = all_examples();
    let whole = examples.iter().filter(|e| e.kind == Kind::Whole).count();
    let fragments = examples.iter().filter(|e| e.kind == Kind::Fragment).count();
    assert!(whole >= 10, "only {whole} whole config examples found");
    assert!(fragments >= 1, "no `toml fragment` example found");
    let readme = examples.iter().filter(|e| e.file.ends_with("README.md")).count();
    assert!(readme >= 1, "the README's config example was not found");
    let guide = examples
        .iter()
        .filter(|e| e.file.parent().is_some_and(|p| p.ends_with("docs/guide")))
        .count();
    assert!(guide >= 8, "only {guide} examples in docs/guide/");
}

#[test]
fn the_extractor_reads_flags_indentation_and_expected_messages() {
    let md = "intro\n\n```toml\na = 1\n```\n\n- item\n\n  ```toml fragment\n  [global]\n  workers = 1\n  ```\n\n```toml check-fails\nbnid = 1\n```\n\n```text\nunknown field `bnid`\n```\n\n```sh\necho hi\n```\n";
    let dir = TempDir::new();
    let path = dir.path("x.md");
    std::fs::write(&path, md).unwrap();
    let ex = examples_in(&path);
    assert_eq!(ex.len(), 3);
    assert_eq!(
        (ex[0].line, &ex[0].kind, ex[0].text.as_str()),
        (3, &Kind::Whole, "a = 1\n")
    );
    assert_eq!(
        (&ex[1].kind, ex[1].text.as_str()),
        (&Kind::Fragment, "[global]\nworkers = 1\n")
    );
    assert_eq!(
        ex[2].kind,
        Kind::Fails {
            expected: "unknown field `bnid`".into()
        }
    );
}

#[test]
fn a_fragment_merges_into_the_skeleton_as_documented() {
    let mut base: Table = SKELETON.parse().unwrap();
    let fragment: Table = "[global]\nworkers = 2\n[frontend.tls]\nalpn = [\"h2\"]\n[[backend]]\nname = \"api\"\n"
        .parse()
        .unwrap();
    merge(&mut base, fragment);
    assert_eq!(base["global"]["workers"].as_integer(), Some(2));
    let frontends = base["frontend"].as_array().unwrap();
    assert_eq!(frontends.len(), 1, "a table merges into the last frontend");
    assert_eq!(frontends[0]["tls"]["alpn"][0].as_str(), Some("h2"));
    assert_eq!(frontends[0]["name"].as_str(), Some("web"));
    assert_eq!(
        base["backend"].as_array().unwrap().len(),
        2,
        "an array of tables is appended"
    );
}

#[test]
fn a_broken_example_is_caught() {
    // The test above could pass by checking nothing; here `check` must refuse.
    let fixtures = Fixtures::new();
    let dir = TempDir::new();
    let bad = Example {
        file: PathBuf::from("x.md"),
        line: 1,
        kind: Kind::Whole,
        text: "[[frontend]]\nname = \"web\"\nbnid = [\"127.0.0.1:1\"]\n".into(),
    };
    let why = check(&bad, &fixtures, &dir, 0).unwrap_err();
    assert!(why.contains("bnid"), "{why}");
}
