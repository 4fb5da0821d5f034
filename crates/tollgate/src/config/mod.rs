//! Configuration: a pipeline from TOML text to an immutable model.
//!
//! `include` reads the main file and the files it includes into one TOML tree, `${VAR}`
//! expanded in its string values (`expand`), every span tagged with its file (`sources`).
//! `file` holds the strict serde structs (unknown keys refused), `validate` applies defaults,
//! resolves names and addresses and checks consistency, `model` is what the proxy runs on.
//! `route_action` validates what a matched route does (answers, redirects, rewrites).
//! `tls` reads certificate files and builds the rustls configs (loading them is part of
//! loading the config), `tls_policy` checks TLS versions, cipher suites and groups,
//! `client_auth` the client-certificate verifier and identity fields, `cert_store` holds a
//! frontend's certificates (swappable at run time), `x509` and `ocsp` read the certificate
//! and OCSP DER they need, `sni` validates host names and matches them, `route` compiles a
//! frontend's route conditions into the table requests are matched against. `shared`
//! validates `[shared]` (the Redis that shared limits are counted in). `quic` validates
//! `[frontend.quic]` and `[http3]` (HTTP/3's UDP binds and connection limits).
//!
//! A pure pipeline: text (and the files it names, and the environment variables its values
//! name) in, model out. It probes no kernel feature and reads no process limit; what
//! depends on the machine is decided at run time (`runtime`, the session).
//! Every error names the file (the included one it is in, if so), line, column and key path
//! of the value at fault, so `tollgate check` and a refused reload can say exactly what to
//! fix.

pub mod acme;
pub(crate) mod auth;
pub(crate) mod bounded;
pub mod cert_store;
mod client_auth;
pub(crate) mod compress;
pub(crate) mod expand;
pub(crate) mod file;
pub mod health;
pub mod ids;
mod include;
pub(crate) mod jwt;
pub mod limit;
mod limits;
pub mod log_layout;
pub mod model;
pub mod ocsp;
pub mod prefix_set;
pub mod proxy;
pub(crate) mod quic;
pub mod request_id;
pub mod route;
mod route_action;
pub mod shared;
pub mod sni;
pub(crate) mod sources;
pub mod tickets;
pub(crate) mod tls;
mod tls_policy;
pub mod trace;
pub(crate) mod units;
mod users;
mod validate;
pub(crate) mod x509;

use std::fmt;
use std::path::{Path, PathBuf};

use include::Resolve;
use sources::SourceMap;

pub use model::{Backend, Config, Frontend, Global, Mode, Server, Timeouts, Watchdog};

/// The names `backend.balance` accepts: the algorithms of `balance::ALGORITHMS`, listed
/// here so that loading a config needs nothing above it (a test in `balance` keeps the two
/// lists equal).
pub(crate) const BALANCE_ALGORITHMS: &[&str] = &["roundrobin", "leastconn", "random", "first", "hash"];

/// Whether `name` is a frontend, backend or server name as the config takes them: non-empty,
/// letters, digits, `-`, `_`, `.` only (so a name is safe to log and to put in a path).
pub fn is_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(&c))
}

/// `backend.balance` when the key is absent.
pub(crate) const DEFAULT_BALANCE: &str = "roundrobin";

/// `backend.hash_balance_factor` when the key is absent: percent of the average load.
pub(crate) const DEFAULT_HASH_BALANCE_FACTOR: u32 = 125;

/// One problem in a config file, positioned at the value (or key) at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    /// 0 when the problem has no position (the file could not be read): then the message
    /// names the file itself.
    pub line: usize,
    pub column: usize,
    /// Dotted key path, e.g. `frontend[0].bind[1]`.
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            return write!(f, "{}", self.message);
        }
        write!(f, "{}:{}:{}: {}", self.path, self.line, self.column, self.message)?;
        if !self.key.is_empty() {
            write!(f, " (key `{}`)", self.key)?;
        }
        Ok(())
    }
}

/// All the problems found in one file; never empty.
#[derive(Debug, Clone)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Reads and validates a config file, with the files it includes and the variables its
/// values name.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    load_with_text(path).map(|(config, _)| config)
}

/// `load`, also returning the config as one TOML text: the main file and the files it
/// includes merged, `${VAR}` expanded (`include::prepared_text`). The master hands it to
/// workers (`parse_with_ids`), so they run exactly what was checked even if the files or
/// the environment change meanwhile, and read neither.
pub fn load_with_text(path: &Path) -> Result<(Config, String), ConfigErrors> {
    let shown = path.display().to_string();
    let unreadable = |why: String| {
        ConfigErrors(vec![ConfigError {
            path: shown.clone(),
            line: 0,
            column: 0,
            key: String::new(),
            message: format!("cannot read {shown}: {why}"),
        }])
    };
    let bytes = bounded::read_bounded(path, bounded::MAX_CONFIG).map_err(|e| unreadable(e.to_string()))?;
    let src = String::from_utf8(bytes).map_err(|_| unreadable("not UTF-8 text".into()))?;
    let base_dir = base_dir(&shown);
    let (mut config, text) = load_text(src, &shown, base_dir, Resolve::Written(&expand::process_env), true)?;
    config.source = Some(PathBuf::from(path));
    Ok((config, text.unwrap_or_default()))
}

/// Parses and validates config text as the file `shown_path` (its includes are read
/// relative to that name's directory, variables from the process environment).
pub fn parse(src: &str, shown_path: &str) -> Result<Config, ConfigErrors> {
    parse_env(src, shown_path, &expand::process_env)
}

/// `parse` with variables from `env`.
pub(crate) fn parse_env(src: &str, shown_path: &str, env: expand::Env<'_>) -> Result<Config, ConfigErrors> {
    let base_dir = base_dir(shown_path);
    load_text(src.to_string(), shown_path, base_dir, Resolve::Written(env), false).map(|(config, _)| config)
}

/// Parses what `load_with_text` prepared (the master's text of the config at `path`), then
/// ids from `table` (allocating for new names), as workers do so that ids survive reloads.
/// Nothing is left to include or expand; errors (a certificate that changed since the
/// master read it) name `PATH (merged)`, the text they are positioned in.
pub(crate) fn parse_with_ids(src: &str, path: &str, table: &mut ids::IdTable) -> Result<Config, ConfigErrors> {
    let shown = format!("{path} (merged)");
    let (mut config, _) = load_text(src.to_string(), &shown, base_dir(path), Resolve::Prepared, false)?;
    table.assign(&mut config);
    Ok(config)
}

/// Relative paths in a config are relative to its main file's directory.
fn base_dir(shown_path: &str) -> Option<PathBuf> {
    Path::new(shown_path).parent().map(Path::to_path_buf)
}

/// The pipeline: the main file's text (and, `Written`, the files it includes) merged into
/// one tree, deserialized, validated; with `want_text`, the tree as `prepared_text` too.
fn load_text(
    src: String,
    shown_path: &str,
    base_dir: Option<PathBuf>,
    resolve: Resolve<'_>,
    want_text: bool,
) -> Result<(Config, Option<String>), ConfigErrors> {
    let mut sources = SourceMap::default();
    sources.push(shown_path.to_string(), src);
    if let Resolve::Written(env) = resolve {
        let errors = include::read_included(&mut sources, env);
        if !errors.is_empty() {
            return Err(positioned(&sources, errors));
        }
    }
    let tree = include::merge(&sources, resolve).map_err(|errors| positioned(&sources, errors))?;
    let text = want_text.then(|| include::prepared_text(tree.get_ref()));
    let file = deserialize(tree, &sources)?;
    let mut validator = validate::Validator::new(&sources);
    validator.base_dir = base_dir;
    let Some(mut config) = validator.build(file) else {
        return Err(positioned(&sources, validator.errors));
    };
    let text = match text.transpose() {
        Ok(Some(text)) if text.len() as u64 > bounded::MAX_CONFIG => {
            return Err(ConfigErrors(vec![ConfigError {
                path: shown_path.to_string(),
                line: 0,
                column: 0,
                key: String::new(),
                message: format!(
                    "{shown_path}: the config, its included files merged, is larger than the {}-byte limit",
                    bounded::MAX_CONFIG
                ),
            }]));
        }
        Ok(text) => text,
        Err((span, message)) => return Err(positioned(&sources, vec![(span, String::new(), message)])),
    };
    // Ids of a process with no master: a fresh table. A master re-assigns them from its own
    // table (`parse_with_ids`) so they stay stable across reloads.
    ids::IdTable::default().assign(&mut config);
    config.files = sources.paths();
    Ok((config, text))
}

/// Errors in the offset space of `sources`, each at its file, line and column.
fn positioned(sources: &SourceMap, errors: include::Errors) -> ConfigErrors {
    ConfigErrors(
        errors
            .iter()
            .map(|(span, key, msg)| sources.error(span.clone(), key, msg))
            .collect(),
    )
}

fn deserialize(
    tree: toml::Spanned<toml::de::DeTable<'_>>,
    sources: &SourceMap,
) -> Result<file::ConfigFile, ConfigErrors> {
    let de = toml::de::Deserializer::from(tree);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = key_path(&e.path().to_string(), e.inner().message());
        let span = e.inner().span().unwrap_or(0..0);
        let message = e.inner().message().trim().replace('\n', " ");
        positioned(sources, vec![(span, key, message)])
    })
}

/// Unknown-field errors name the key in the message; add it to the path so the reader
/// sees `frontend[0].bnid`, not just `frontend[0]`.
fn key_path(path: &str, message: &str) -> String {
    // `Spanned` values show up as a private field name in the path: not a key.
    let cleaned: Vec<&str> = path
        .split('.')
        .filter(|seg| !seg.starts_with("$__serde_spanned"))
        .collect();
    let cleaned = cleaned.join(".");
    let path = if cleaned == "." || cleaned.is_empty() {
        ""
    } else {
        cleaned.as_str()
    };
    let unknown = message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name);
    match unknown {
        Some(name) if !path.ends_with(name) && path.is_empty() => name.to_string(),
        Some(name) if !path.ends_with(name) => format!("{path}.{name}"),
        _ => path.to_string(),
    }
}

/// Where the embedded default listens unless `TOLLGATE_DEMO_BIND` says otherwise.
pub const DEMO_BIND: &str = "127.0.0.1:8080";

/// The embedded default config on `bind`, pointed at demo origins on `origin_a` and `origin_b`.
pub fn embedded_default(
    bind: &str,
    origin_a: std::net::SocketAddr,
    origin_b: std::net::SocketAddr,
) -> Result<Config, ConfigErrors> {
    let src = include_str!("default.toml")
        .replace(DEMO_BIND, bind)
        .replace("{origin_a}", &origin_a.to_string())
        .replace("{origin_b}", &origin_b.to_string());
    parse(&src, "<embedded default>")
}

#[cfg(test)]
mod include_tests;
#[cfg(test)]
mod tests;
