//! A worker process's side of its certificates at run time: `ctl set cert` installed into a
//! frontend's store, and `show certs` read from the stores.
//!
//! The stores are the generation's own (`config::cert_store`, reached through `Shared`);
//! the master has already read and checked what it sends, each process checks it again
//! (it parses the PEM itself) before swapping it in.

use std::path::Path;

use crate::command::CertInstall;
use crate::command::show::CertView;
use crate::config::cert_store::{CertSource, Installed};
use crate::ctx::Shared;

/// Installs `c` into its frontend's store; what it did, in words.
pub(crate) fn set_cert(shared: &Shared, c: &CertInstall) -> Result<String, String> {
    let store = shared
        .cert_store(&c.frontend)
        .ok_or_else(|| format!("no TLS frontend `{}`", c.frontend))?;
    let ocsp = c.ocsp_hex.as_deref().map(unhex).transpose()?;
    let (cert_path, key_path) = (Path::new(&c.cert_path), Path::new(&c.key_path));
    let (loaded, note) =
        crate::config::tls::runtime_cert(c.cert_pem.as_bytes(), c.key_pem.as_bytes(), ocsp, cert_path, key_path)?;
    let source = CertSource::Runtime {
        cert: cert_path.to_path_buf(),
        key: key_path.to_path_buf(),
    };
    let done = store.replace_configured(cert_path, loaded.key, source)?;
    let mut text = describe(&done);
    if let Some(note) = note {
        text.push_str("; ");
        text.push_str(&note);
    }
    // The names come from a certificate a caller sent (a CN may hold any byte): escaped.
    tracing::info!(frontend = %c.frontend, names = ?text, "certificate swapped in");
    Ok(text)
}

/// `a.example, b.example (replaced the certificate of a.example)`.
pub(crate) fn describe(done: &Installed) -> String {
    let mut text = done.names.join(", ");
    match &done.replaced {
        Some(old) => text.push_str(&format!(" (replaced the certificate of {})", old.join(", "))),
        None => text.push_str(" (added)"),
    }
    if done.dropped > 0 {
        text.push_str(&format!(", {} certificate(s) it covers dropped", done.dropped));
    }
    text
}

/// Hex text → bytes.
pub(crate) fn unhex(text: &str) -> Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) {
        return Err("odd-length hex".into());
    }
    (0..text.len() / 2)
        .map(|i| {
            text.get(2 * i..2 * i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "bad hex".to_string())
        })
        .collect()
}

/// Every certificate of every TLS frontend (or of `frontend`), as the handshakes see them.
pub(crate) fn views(shared: &Shared, frontend: Option<&str>) -> Vec<CertView> {
    shared
        .cert_stores()
        .filter(|(name, _)| frontend.is_none_or(|f| f == *name))
        .flat_map(|(name, store)| {
            store.entries().into_iter().map(move |e| CertView {
                frontend: name.to_string(),
                names: e.names.clone(),
                not_before: e.facts.not_before,
                not_after: e.facts.not_after,
                source: e.source.as_str().to_string(),
                path: e.source.cert_path().map(|p| p.display().to_string()),
                serial: e.facts.serial_hex(),
                sha256: e.facts.fingerprint(),
                default: e.default,
                stapled: e.key.ocsp.is_some(),
                ocsp_next_update: e.staple.and_then(|s| s.next_update),
                installed_at: e.installed_at,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_garbage() {
        let bytes = vec![0u8, 1, 0xab, 0xff];
        assert_eq!(unhex(&crate::config::cert_store::hex(&bytes)).unwrap(), bytes);
        assert!(unhex("abc").is_err());
        assert!(unhex("zz").is_err());
    }
}
