//! Configuration: a pipeline from TOML text to an immutable model.
//!
//! `file` holds the strict serde structs (unknown keys refused), `validate` applies defaults,
//! resolves names and addresses and checks consistency, `model` is what the proxy runs on.
//! `route_action` validates what a matched route does (answers, redirects, rewrites).
//! `tls` reads certificate files and builds the rustls configs (loading them is part of
//! loading the config), `tls_policy` checks TLS versions, cipher suites and groups,
//! `client_auth` the client-certificate verifier and identity fields, `cert_store` holds a
//! frontend's certificates (swappable at run time), `x509` and `ocsp` read the certificate
//! and OCSP DER they need, `sni` validates host names and matches them, `route` compiles a
//! frontend's route conditions into the table requests are matched against. `shared`
//! validates `[shared]` (the Redis that shared limits are counted in).
//!
//! A pure pipeline: text (and the files it names) in, model out. It probes no kernel
//! feature and reads no process limit; what depends on the machine is decided at run time
//! (`runtime`, the session).
//! Every error names the file, line, column and key path of the value at fault, so
//! `tollgate check` and a refused reload can say exactly what to fix.

pub mod acme;
pub(crate) mod auth;
pub(crate) mod bounded;
pub mod cert_store;
mod client_auth;
pub(crate) mod compress;
pub(crate) mod file;
pub mod health;
pub mod ids;
pub(crate) mod jwt;
pub mod limit;
mod limits;
pub mod log_layout;
pub mod model;
pub mod ocsp;
pub mod prefix_set;
pub mod proxy;
pub mod request_id;
pub mod route;
mod route_action;
pub mod shared;
pub mod sni;
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

/// Reads and validates a config file.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    load_with_text(path).map(|(config, _)| config)
}

/// `load`, also returning the text that was validated (the master hands it to workers, so
/// they run exactly what was checked even if the file changes meanwhile).
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
    let mut config = parse(&src, &shown)?;
    config.source = Some(PathBuf::from(path));
    Ok((config, src))
}

/// Parses and validates config text; `shown_path` is used in error messages only.
pub fn parse(src: &str, shown_path: &str) -> Result<Config, ConfigErrors> {
    let file = deserialize(src, shown_path)?;
    let mut validator = validate::Validator::new(src);
    validator.base_dir = Path::new(shown_path).parent().map(Path::to_path_buf);
    match validator.build(file) {
        Some(mut config) => {
            // Ids of a process with no master: a fresh table. A master re-assigns them from
            // its own table (`parse_with_ids`) so they stay stable across reloads.
            ids::IdTable::default().assign(&mut config);
            Ok(config)
        }
        None => {
            let lines = validate::Lines::new(src);
            Err(ConfigErrors(
                validator
                    .errors
                    .iter()
                    .map(|(span, key, msg)| ConfigError::at_line(shown_path, &lines, span.clone(), key, msg))
                    .collect(),
            ))
        }
    }
}

/// `parse`, then ids from `table` (allocating for new names), as the master and its
/// workers do so that ids survive reloads.
pub(crate) fn parse_with_ids(src: &str, shown_path: &str, table: &mut ids::IdTable) -> Result<Config, ConfigErrors> {
    let mut config = parse(src, shown_path)?;
    table.assign(&mut config);
    Ok(config)
}

fn deserialize(src: &str, shown_path: &str) -> Result<file::ConfigFile, ConfigErrors> {
    let de = toml::Deserializer::parse(src).map_err(|e| toml_error(src, shown_path, &e, String::new()))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = key_path(&e.path().to_string(), e.inner().message());
        toml_error(src, shown_path, e.inner(), key)
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

fn toml_error(src: &str, shown_path: &str, e: &toml::de::Error, key: String) -> ConfigErrors {
    let span = e.span().unwrap_or(0..0);
    let message = e.message().trim().replace('\n', " ");
    ConfigErrors(vec![ConfigError::at(shown_path, src, span, &key, &message)])
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
mod tests;
