//! The master's side of `ctl set cert`: the PEM `ctl` read with the caller's rights, checked
//! against the config it runs before any worker is asked; a worker process then checks the
//! PEM again itself.
//!
//! Invariant: the master never opens, stats or resolves a path a caller names (it keeps the
//! privileges a worker drops, so it could read what the caller cannot, and a FIFO would stop
//! its event loop). The caller's path is only a name, compared with the configured paths;
//! the one file the master reads is the configured key of a configured certificate (a path
//! the config names, read as at load: `config::bounded`).
//!
//! The key: the one sent, else the configured key of the certificate configured from the
//! same file, else the certificate's PEM itself (a PEM holding both).

use std::path::{Path, PathBuf};

use crate::command::{CertInstall, Pem};
use crate::config::Config;
use crate::config::bounded::{MAX_PEM, read_file};

/// What `set cert FRONTEND CERT [KEY]` sent, as `ctl` read it.
pub(crate) struct Sent<'a> {
    pub frontend: &'a str,
    pub cert: &'a str,
    pub cert_pem: &'a Pem,
    pub key: Option<&'a str>,
    pub key_pem: Option<&'a Pem>,
    pub ocsp_hex: Option<&'a str>,
}

/// Whether the configured path `configured` names the file a caller named `named` (`ctl`
/// sends it canonical). Only the configured path is resolved.
fn is_configured(configured: &Path, named: &Path) -> bool {
    configured == named || configured.canonicalize().is_ok_and(|c| c == named)
}

/// Checks what `set cert` sent.
pub(crate) fn prepare(config: &Config, sent: &Sent<'_>) -> Result<CertInstall, String> {
    let frontend = sent.frontend;
    let fe = config
        .frontends
        .iter()
        .find(|f| f.name == frontend)
        .ok_or_else(|| format!("no frontend `{frontend}`"))?;
    let tls = fe
        .tls
        .as_ref()
        .ok_or_else(|| format!("frontend `{frontend}` does not terminate TLS"))?;
    let named = PathBuf::from(sent.cert);
    let configured = tls.files.iter().find(|f| is_configured(&f.cert, &named));
    // A configured certificate keeps its configured path: the workers match slots on it.
    let cert_path = configured.map_or_else(|| named.clone(), |f| f.cert.clone());
    let (key_path, key_pem) = match (sent.key, sent.key_pem, configured) {
        (Some(path), Some(pem), _) => (PathBuf::from(path), pem.0.clone()),
        (None, None, Some(f)) => {
            let bytes = read_file(&f.key, MAX_PEM)?;
            let pem =
                String::from_utf8(bytes).map_err(|_| format!("{}: not a PEM file (not text)", f.key.display()))?;
            (f.key.clone(), pem)
        }
        (None, None, None) => (named.clone(), sent.cert_pem.0.clone()),
        _ => return Err("a key needs both its name and its PEM".into()),
    };
    let ocsp = sent
        .ocsp_hex
        .map(|h| crate::runtime::certs::unhex(h).map_err(|e| format!("the OCSP response: {e}")))
        .transpose()?;
    // The same checks every worker makes: a bad pair is refused here, with the reason.
    let (loaded, _) = crate::config::tls::runtime_cert(
        sent.cert_pem.0.as_bytes(),
        key_pem.as_bytes(),
        ocsp,
        &cert_path,
        &key_path,
    )?;
    if configured.is_none() && loaded.names.is_empty() {
        return Err(format!(
            "{}: the certificate names no host (no DNS subjectAltName, no CN) and replaces no configured certificate",
            cert_path.display()
        ));
    }
    Ok(CertInstall {
        frontend: frontend.to_string(),
        cert_path: cert_path.display().to_string(),
        key_path: key_path.display().to_string(),
        cert_pem: sent.cert_pem.0.clone(),
        key_pem,
        ocsp_hex: sent.ocsp_hex.map(str::to_string),
    })
}
