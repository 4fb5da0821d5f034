//! The master's side of `ctl set cert`: the files read (the master keeps the privileges a
//! worker drops, so it can read what the config could) and checked against the config it
//! runs before any worker is asked; a worker process then checks the PEM again itself.
//!
//! The key: the one given, else the configured key of the certificate configured from the
//! same file, else the certificate file itself (a PEM holding both).

use std::path::{Path, PathBuf};

use crate::command::CertInstall;
use crate::config::Config;
use crate::config::cert_store::same_file;

/// Reads and checks what `set cert FRONTEND CERT [KEY]` names.
pub(crate) fn prepare(config: &Config, frontend: &str, cert: &str, key: Option<&str>) -> Result<CertInstall, String> {
    let fe = config
        .frontends
        .iter()
        .find(|f| f.name == frontend)
        .ok_or_else(|| format!("no frontend `{frontend}`"))?;
    let tls = fe
        .tls
        .as_ref()
        .ok_or_else(|| format!("frontend `{frontend}` does not terminate TLS"))?;
    let cert_path = PathBuf::from(cert);
    let key_path = match key {
        Some(k) => PathBuf::from(k),
        None => tls
            .files
            .iter()
            .find(|f| same_file(&f.cert, &cert_path))
            .map_or_else(|| cert_path.clone(), |f| f.key.clone()),
    };
    let cert_pem = read_text(&cert_path)?;
    let key_pem = read_text(&key_path)?;
    let mut ocsp_path = cert_path.clone().into_os_string();
    ocsp_path.push(".ocsp");
    let ocsp = std::fs::read(&ocsp_path).ok();
    // The same checks every worker makes: a bad pair is refused here, with the reason.
    let (loaded, _) = crate::config::tls::runtime_cert(
        cert_pem.as_bytes(),
        key_pem.as_bytes(),
        ocsp.clone(),
        &cert_path,
        &key_path,
    )?;
    let configured = tls.files.iter().any(|f| same_file(&f.cert, &cert_path));
    if !configured && loaded.names.is_empty() {
        return Err(format!(
            "{}: the certificate names no host (no DNS subjectAltName, no CN) and replaces no configured certificate",
            cert_path.display()
        ));
    }
    Ok(CertInstall {
        frontend: frontend.to_string(),
        cert_path: cert_path.display().to_string(),
        key_path: key_path.display().to_string(),
        cert_pem,
        key_pem,
        ocsp_hex: ocsp.map(|o| crate::config::cert_store::hex(&o)),
    })
}

fn read_text(path: &Path) -> Result<String, String> {
    let bytes = crate::config::tls::read(path)?;
    String::from_utf8(bytes).map_err(|_| format!("{}: not a PEM file (not text)", path.display()))
}
