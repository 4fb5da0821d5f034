//! HTTP Basic authentication (RFC 7617) against an htpasswd file, sans-io.
//!
//! Owns: the file's parsed form ([`Users`]), the `Authorization: Basic` parser
//! ([`credentials`]) and the slow check of one password ([`Hash::verify`], run off the worker
//! thread by `proxy::auth`).
//!
//! Hashes accepted, as Apache's `htpasswd` writes them: bcrypt (`-B`: `$2y$`, `$2a$`, `$2b$`)
//! and SHA-256 / SHA-512 crypt (`-2` / `-5`: `$5$`, `$6$`). Refused at load, naming the line
//! and the command that makes an acceptable entry: MD5 (`$apr1$`, htpasswd's default, and
//! `$1$`), unsalted SHA-1 (`{SHA}`), DES crypt and plain text. Why refuse rather than warn:
//! those hashes fall to a GPU in hours or less, and a proxy that accepts them silently
//! protects less than its operator believes; remaking an entry is one command, once.
//!
//! Invariants: a password is only ever compared by the hash libraries' constant-time
//! comparisons; the file is read bounded (`MAX_USERS_FILE`); a user name is printable, has
//! no `:` and appears once. Nothing here logs a password or a hash.

use std::collections::HashMap;
use std::fmt;

/// Largest htpasswd file read.
pub const MAX_USERS_FILE: u64 = 1 << 20;
/// Longest `Authorization: Basic` value accepted (the base64 of user and password).
const MAX_CREDENTIALS: usize = 1024;

/// One user's password hash.
#[derive(Clone)]
pub enum Hash {
    Bcrypt(Box<str>),
    Sha256Crypt(Box<str>),
    Sha512Crypt(Box<str>),
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Hash::Bcrypt(_) => "bcrypt",
            Hash::Sha256Crypt(_) => "sha256-crypt",
            Hash::Sha512Crypt(_) => "sha512-crypt",
        };
        write!(f, "Hash({kind})")
    }
}

impl Hash {
    /// Whether `password` is this hash's. Slow by design (bcrypt: milliseconds to hundreds
    /// of them): never on a worker thread.
    pub fn verify(&self, password: &[u8]) -> bool {
        match self {
            Hash::Bcrypt(h) => bcrypt::verify(password, h).unwrap_or(false),
            Hash::Sha256Crypt(h) => std::str::from_utf8(password).is_ok_and(|p| sha_crypt::sha256_check(p, h).is_ok()),
            Hash::Sha512Crypt(h) => std::str::from_utf8(password).is_ok_and(|p| sha_crypt::sha512_check(p, h).is_ok()),
        }
    }
}

/// An htpasswd file, parsed.
#[derive(Debug, Default, Clone)]
pub struct Users {
    by_name: HashMap<Box<str>, Hash>,
    /// Verified in place of an unknown user's hash, so that an unknown name costs what a
    /// known one does (no user enumeration by timing).
    decoy: Option<Hash>,
    /// Random, per parse: what a cached success is tied to, so a changed file (a reload)
    /// forgets every success of the old one.
    pub id: u64,
}

impl Users {
    /// Parses an htpasswd file's text: `user:hash` lines, `#` comments and blank lines.
    pub fn parse(text: &str) -> Result<Users, String> {
        let mut users = Users {
            id: crate::http::request_id::random_u64(),
            ..Users::default()
        };
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            let at = |why: String| format!("line {}: {why}", n + 1);
            let Some((user, hash)) = line.split_once(':') else {
                return Err(at("not `user:hash`".into()));
            };
            if user.is_empty() || user.chars().any(char::is_control) {
                return Err(at("the user name must be printable text, not empty".into()));
            }
            let hash = parse_hash(hash.trim()).map_err(|why| at(format!("user `{user}`: {why}")))?;
            if users.decoy.is_none() {
                users.decoy = Some(hash.clone());
            }
            if users.by_name.insert(user.into(), hash).is_some() {
                return Err(at(format!("user `{user}` is listed twice")));
            }
        }
        Ok(users)
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The hash to verify `user`'s password against, and whether the user exists (an
    /// unknown one gets the decoy, whose verification fails the same way and as slowly).
    pub fn hash_for(&self, user: &str) -> Option<(Hash, bool)> {
        match self.by_name.get(user) {
            Some(h) => Some((h.clone(), true)),
            None => self.decoy.clone().map(|d| (d, false)),
        }
    }
}

fn parse_hash(hash: &str) -> Result<Hash, String> {
    let remake = "make the entry again with `htpasswd -B` (bcrypt) or `htpasswd -5` (SHA-512)";
    if hash.starts_with("$2y$") || hash.starts_with("$2a$") || hash.starts_with("$2b$") {
        // bcrypt's own parser decides; a malformed one is refused now, not at every request.
        return match hash.get(4..6).and_then(|c| c.parse::<u32>().ok()) {
            Some(cost) if (4..=31).contains(&cost) && hash.len() == 60 => Ok(Hash::Bcrypt(hash.into())),
            _ => Err("a malformed bcrypt hash".into()),
        };
    }
    if let Some(rest) = hash.strip_prefix("$5$") {
        return well_formed_crypt(rest, 43).map(|()| Hash::Sha256Crypt(hash.into()));
    }
    if let Some(rest) = hash.strip_prefix("$6$") {
        return well_formed_crypt(rest, 86).map(|()| Hash::Sha512Crypt(hash.into()));
    }
    if hash.starts_with("$apr1$") || hash.starts_with("$1$") {
        return Err(format!("MD5 hashes are refused (fast to brute-force); {remake}"));
    }
    if hash.starts_with("{SHA}") {
        return Err(format!("unsalted SHA-1 hashes are refused; {remake}"));
    }
    Err(format!(
        "not a hash tollgate accepts (DES crypt or plain text are refused); {remake}"
    ))
}

/// `[rounds=N$]salt$hash` of a SHA-crypt hash whose hash part is `len` characters.
fn well_formed_crypt(rest: &str, len: usize) -> Result<(), String> {
    let rest = match rest.strip_prefix("rounds=") {
        Some(r) => {
            let (n, tail) = r.split_once('$').ok_or("a malformed SHA-crypt hash")?;
            let rounds: u64 = n.parse().map_err(|_| "a malformed SHA-crypt rounds count")?;
            // Each check runs the rounds: a file could make every request cost seconds.
            if !(1000..=10_000_000).contains(&rounds) {
                return Err("SHA-crypt rounds must be 1000 to 10,000,000".into());
            }
            tail
        }
        None => rest,
    };
    match rest.split_once('$') {
        Some((salt, h)) if salt.len() <= 16 && h.len() == len => Ok(()),
        _ => Err("a malformed SHA-crypt hash".into()),
    }
}

/// The user and password of an `Authorization: Basic` value, or `None` when it is not one
/// (another scheme, bad base64, no `:`, a user that is not UTF-8, over 1 KiB).
pub fn credentials(value: &[u8]) -> Option<(String, Vec<u8>)> {
    let value = value.trim_ascii();
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") || rest.len() > MAX_CREDENTIALS {
        return None;
    }
    let decoded = decode_base64(rest.trim_ascii())?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = std::str::from_utf8(decoded.get(..colon)?).ok()?.to_string();
    let password = decoded.get(colon + 1..)?.to_vec();
    Some((user, password))
}

/// Standard base64 with padding (RFC 4648 §4), as RFC 7617 uses; `None` on any other byte.
fn decode_base64(text: &[u8]) -> Option<Vec<u8>> {
    fn sextet(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    if !text.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let groups = text.len() / 4;
    for (i, g) in text.chunks_exact(4).enumerate() {
        let last = i + 1 == groups;
        let pad = g.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in g.get(..4 - pad)? {
            n = n << 6 | sextet(c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = n.to_be_bytes();
        out.extend_from_slice(bytes.get(1..4 - pad)?);
    }
    Some(out)
}

#[cfg(test)]
mod tests;
