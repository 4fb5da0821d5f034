//! `state_dir`: the directory (0700) and its files (0600), written whole or not at all
//! (a temporary file renamed over the old one), and the ACME account kept there.
//!
//! Layout: `account.<hash of the directory URL>.json` (the account's id and key, one per
//! CA), and per order `<first domain>.<hash>.crt` (the chain, leaf first) and `.key` (the
//! certificate's private key, PKCS#8 PEM); names in `config::acme::cert_paths`.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use instant_acme::{Account, AccountCredentials, NewAccount};

use crate::config::acme::{AcmeOrder, account_path};

/// Creates `dir` (0700) if needed; an existing one is tightened to 0700.
pub(super) fn prepare_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Writes `bytes` to `path` with mode 0600, replacing the old file in one rename.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)
}

/// The account of `order.directory`: restored from `state_dir`, or created once (terms of
/// service agreed, the `email` as contact) and stored.
pub(super) async fn account(state_dir: &Path, order: &AcmeOrder) -> Result<Account, String> {
    let builder = || match &order.directory_ca {
        Some(ca) => Account::builder_with_root(ca).map_err(|e| format!("directory_ca {}: {e}", ca.display())),
        None => Account::builder().map_err(|e| format!("HTTP client: {e}")),
    };
    let path = account_path(state_dir, &order.directory);
    match crate::config::bounded::read_bounded(&path, crate::config::bounded::MAX_STATE) {
        Ok(json) => {
            let credentials: AccountCredentials =
                serde_json::from_slice(&json).map_err(|e| format!("{}: {e}", path.display()))?;
            return builder()?
                .from_credentials(credentials)
                .await
                .map_err(|e| super::describe("restoring the account", &e));
        }
        Err(e) if e.not_found() => {}
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    let contact: Vec<&str> = order.contact.iter().map(String::as_str).collect();
    let new = NewAccount {
        contact: &contact,
        terms_of_service_agreed: true,
        only_return_existing: false,
    };
    let (account, credentials) = builder()?
        .create(&new, order.directory.clone(), None)
        .await
        .map_err(|e| super::describe("creating the account", &e))?;
    let json = serde_json::to_vec(&credentials).map_err(|e| e.to_string())?;
    write_private(&path, &json).map_err(|e| format!("{}: {e}", path.display()))?;
    tracing::info!(directory = %order.directory, id = account.id(), "acme: account created");
    Ok(account)
}

/// Removes the stored account of `order.directory` (the CA no longer knows it).
pub(super) fn forget_account(state_dir: &Path, order: &AcmeOrder) -> Result<(), String> {
    let path = account_path(state_dir, &order.directory);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn files_and_directory_are_private() {
        let base = std::env::temp_dir().join(format!("tollgate-acme-files-{}", std::process::id()));
        let dir = base.join("state");
        prepare_dir(&dir).unwrap();
        let file = dir.join("x.key");
        write_private(&file, b"one").unwrap();
        write_private(&file, b"two").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&file), 0o600);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
