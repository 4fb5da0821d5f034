//! Reading a file a config (or an operator) names: [`read_bounded`], the one way every
//! certificate, key, CA bundle, CRL, OCSP response, `body_file`, ACME state file, secret
//! (`*_file`: [`read_secret`]) and the config itself (with the files it includes) is read.
//!
//! Invariants: a read never blocks on a FIFO (the file is opened `O_NONBLOCK`), never reads
//! what is not a regular file (a device, a FIFO, a directory, a socket: refused after
//! `fstat` on the opened descriptor, so a rename between a check and the open cannot slip
//! one in), and never reads more than its limit plus one byte (the size a file reports is
//! not trusted: `/dev/zero` reports 0). Errors name the path and say why, in words.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// A PEM certificate chain, private key or CA bundle (Mozilla's bundle is ~220 KB).
pub(crate) const MAX_PEM: u64 = 1024 * 1024;
/// A CRL (a big CA's list runs to megabytes).
pub(crate) const MAX_CRL: u64 = 16 * 1024 * 1024;
/// A stapled OCSP response (a few KB in practice; as much as a responder's answer may be).
pub(crate) const MAX_OCSP: u64 = 64 * 1024;
/// A config file: it travels to the workers in one control frame.
pub(crate) const MAX_CONFIG: u64 = 16 * 1024 * 1024;
/// An ACME state file (account credentials, JSON).
pub(crate) const MAX_STATE: u64 = 64 * 1024;
/// A secret a `*_file` key names (`stats_auth_file`, `redis_password_file`).
pub(crate) const MAX_SECRET: u64 = 4 * 1024;

/// Why a file was not read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// Opening or reading failed (`NotFound` among them: callers that accept a missing
    /// file look at [`ReadError::not_found`]).
    Io(std::io::Error),
    /// Not a regular file: what it is.
    NotRegular(&'static str),
    /// Larger than the limit (in bytes).
    TooLarge(u64),
}

impl ReadError {
    pub(crate) fn not_found(&self) -> bool {
        matches!(self, ReadError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => f.write_str(&crate::error::os_message(e)),
            ReadError::NotRegular(what) => write!(f, "not a regular file (a {what})"),
            ReadError::TooLarge(limit) => write!(f, "larger than the {limit}-byte limit"),
        }
    }
}

/// The whole of the regular file `path`, at most `limit` bytes.
pub(crate) fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(ReadError::Io)?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    let kind = meta.file_type();
    if !kind.is_file() {
        return Err(ReadError::NotRegular(if kind.is_dir() {
            "directory"
        } else if kind.is_fifo() {
            "FIFO"
        } else if kind.is_char_device() || kind.is_block_device() {
            "device"
        } else if kind.is_socket() {
            "socket"
        } else {
            "special file"
        }));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().min(limit)).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge(limit));
    }
    Ok(bytes)
}

/// [`read_bounded`] with its error as `cannot read PATH: why`.
pub(crate) fn read_file(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    read_bounded(path, limit).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// A secret from the file at `path`: UTF-8 text of at most [`MAX_SECRET`] bytes, its
/// trailing line break (`\n` or `\r\n`, as editors and `echo` leave one) dropped, not empty.
/// Errors name the file and never quote it.
pub(crate) fn read_secret(path: &Path) -> Result<String, String> {
    let bytes = read_file(path, MAX_SECRET)?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    if text.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn regular_files_are_read_up_to_the_limit() {
        let dir = std::env::temp_dir().join(format!("tollgate-bounded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, b"12345").unwrap();
        assert_eq!(read_bounded(&file, 5).unwrap(), b"12345");
        assert!(matches!(read_bounded(&file, 4), Err(ReadError::TooLarge(4))));
        assert!(matches!(read_bounded(&dir, 4), Err(ReadError::NotRegular("directory"))));
        assert!(read_bounded(&dir.join("missing"), 4).unwrap_err().not_found());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn secrets_lose_their_line_break_and_are_never_quoted() {
        let dir = std::env::temp_dir().join(format!("tollgate-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("s");
        for (written, read) in [("pw\n", "pw"), ("pw\r\n", "pw"), ("pw", "pw"), ("a b\n\n", "a b\n")] {
            std::fs::write(&file, written).unwrap();
            assert_eq!(read_secret(&file).unwrap(), read, "{written:?}");
        }
        std::fs::write(&file, "\n").unwrap();
        assert!(read_secret(&file).unwrap_err().ends_with("is empty"));
        std::fs::write(&file, vec![b'x'; 5000]).unwrap();
        let e = read_secret(&file).unwrap_err();
        assert!(
            e.contains("larger than the 4096-byte limit") && !e.contains("xxx"),
            "{e}"
        );
        let e = read_secret(&dir.join("missing")).unwrap_err();
        assert!(e.starts_with("cannot read ") && e.contains("missing"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn devices_are_refused_without_reading() {
        let e = read_bounded(Path::new("/dev/zero"), 1024).unwrap_err();
        assert!(matches!(e, ReadError::NotRegular("device")), "{e}");
        assert_eq!(e.to_string(), "not a regular file (a device)");
    }
}
