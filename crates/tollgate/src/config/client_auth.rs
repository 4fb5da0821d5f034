//! `[frontend.tls.client_auth]`: client certificates (mTLS) checked into the verifier the
//! frontend's `ServerConfig` carries, and the identity fields HTTP mode sends servers.
//!
//! Invariants: a certificate that does not chain to `ca_file`, or that a CRL revokes, fails
//! the handshake in both modes (`optional` only admits clients that present none); with
//! CRLs every CA of the chain must have one (an unknown revocation status fails too, as
//! with HAProxy's `crl-file`). The identity field names are refused at load when they are
//! not tokens, repeat, or name a field the proxy owns; the sessions drop them from every
//! request (`ClientCertHeaders::names`), whether or not a certificate was presented.

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateRevocationListDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use toml::Spanned;

use super::file::{ClientAuthMode, ClientAuthSection, ModeName};
use super::model::{ClientAuth, ClientCertHeaders};
use super::validate::Validator;

/// The identity fields when `headers` is not given (HTTP mode).
pub(crate) const DEFAULT_SUBJECT: &str = "X-Client-Cert-Subject";
pub(crate) const DEFAULT_FINGERPRINT: &str = "X-Client-Cert-Fingerprint";
pub(crate) const DEFAULT_VERIFIED: &str = "X-Client-Cert-Verified";

/// Fields other keys or the proxy itself write: an identity field may not take their name.
const OWNED: [&str; 12] = [
    "connection",
    "keep-alive",
    "te",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
    "content-length",
    "host",
    "cookie",
    "x-forwarded-for",
    "x-forwarded-proto",
    "forwarded",
];

impl Validator<'_> {
    /// The verifier and what sessions need; `None` after an error (reported).
    pub(super) fn client_auth(
        &mut self,
        section: &Spanned<ClientAuthSection>,
        key: &str,
        mode: ModeName,
        provider: &Arc<CryptoProvider>,
    ) -> Option<(Arc<dyn ClientCertVerifier>, ClientAuth)> {
        let c = section.get_ref();
        let required = c.mode.as_ref().is_none_or(|m| *m.get_ref() == ClientAuthMode::Required);
        let headers = self.cert_headers(c, key, mode);
        let roots = match super::tls::load_chain(&self.path(c.ca_file.get_ref())) {
            Ok(certs) => certs,
            Err(msg) => {
                self.err(c.ca_file.span(), format!("{key}.ca_file"), msg);
                return None;
            }
        };
        let mut store = RootCertStore::empty();
        for cert in roots {
            if let Err(e) = store.add(cert) {
                self.err(
                    c.ca_file.span(),
                    format!("{key}.ca_file"),
                    format!("{}: unusable CA certificate: {e}", c.ca_file.get_ref()),
                );
                return None;
            }
        }
        let mut crls = Vec::new();
        if let Some(files) = &c.crl_file {
            if files.get_ref().0.is_empty() {
                self.err(
                    files.span(),
                    format!("{key}.crl_file"),
                    "must name at least one file".into(),
                );
            }
            for (i, file) in files.get_ref().0.iter().enumerate() {
                match read_crls(&self.path(file)) {
                    Ok(found) => crls.extend(found),
                    Err(msg) => self.err(files.span(), format!("{key}.crl_file[{i}]"), msg),
                }
            }
        }
        let mut builder = WebPkiClientVerifier::builder_with_provider(Arc::new(store), Arc::clone(provider));
        if !crls.is_empty() {
            builder = builder.with_crls(crls);
        }
        if !required {
            builder = builder.allow_unauthenticated();
        }
        match builder.build() {
            Ok(verifier) => Some((verifier, ClientAuth { required, headers })),
            Err(e) => {
                let span = c.crl_file.as_ref().map_or(c.ca_file.span(), Spanned::span);
                self.err(span, key.into(), format!("client certificate verifier: {e}"));
                None
            }
        }
    }

    /// `headers`: the defaults in HTTP mode when absent; refused in TCP mode (no request).
    fn cert_headers(&mut self, c: &ClientAuthSection, key: &str, mode: ModeName) -> ClientCertHeaders {
        let given = match (&c.headers, mode) {
            (None, ModeName::Tcp) => return ClientCertHeaders::default(),
            (Some(h), ModeName::Tcp) => {
                self.err(
                    h.span(),
                    format!("{key}.headers"),
                    "`headers` needs an http-mode frontend (TCP mode relays bytes it does not parse)".into(),
                );
                return ClientCertHeaders::default();
            }
            (None, ModeName::Http) => {
                let names = [DEFAULT_SUBJECT, DEFAULT_FINGERPRINT, DEFAULT_VERIFIED];
                return ClientCertHeaders {
                    subject: Some(DEFAULT_SUBJECT.into()),
                    fingerprint: Some(DEFAULT_FINGERPRINT.into()),
                    verified: Some(DEFAULT_VERIFIED.into()),
                    names: names.iter().map(|n| n.to_ascii_lowercase().into()).collect(),
                };
            }
            (Some(h), ModeName::Http) => h.get_ref(),
        };
        let mut out = ClientCertHeaders::default();
        for (field, value, slot) in [
            ("subject", &given.subject, &mut out.subject),
            ("fingerprint", &given.fingerprint, &mut out.fingerprint),
            ("verified", &given.verified, &mut out.verified),
        ] {
            let Some(name) = value else { continue };
            let lower = name.get_ref().to_ascii_lowercase();
            let refusal = if !crate::http::rewrite::field_name_ok(lower.as_bytes()) {
                Some(format!("`{}` is not a header name", name.get_ref()))
            } else if OWNED.contains(&lower.as_str()) {
                Some(format!(
                    "`{}` is a field the proxy (or another key) writes",
                    name.get_ref()
                ))
            } else if out.names.iter().any(|n| **n == *lower) {
                Some(format!("`{}` is named twice", name.get_ref()))
            } else {
                None
            };
            match refusal {
                Some(msg) => self.err(name.span(), format!("{key}.headers.{field}"), msg),
                None => {
                    *slot = Some(name.get_ref().as_str().into());
                    out.names.push(lower.into());
                }
            }
        }
        out
    }
}

/// Every CRL in a file: PEM blocks, else the whole file as one DER CRL.
fn read_crls(path: &std::path::Path) -> Result<Vec<CertificateRevocationListDer<'static>>, String> {
    let bytes = super::bounded::read_file(path, super::bounded::MAX_CRL)?;
    let pem: Vec<_> = CertificateRevocationListDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: bad PEM: {e}", path.display()))?;
    if !pem.is_empty() {
        return Ok(pem);
    }
    if bytes.first() == Some(&0x30) {
        return Ok(vec![CertificateRevocationListDer::from(bytes)]);
    }
    Err(format!(
        "{}: no certificate revocation list in the file",
        path.display()
    ))
}
