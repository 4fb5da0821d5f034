//! Certificates and rustls configs, built once at config load (a reload builds new ones).
//!
//! Owns: reading PEM chains and keys (a chain must be in order, leaf first, and the key must
//! be the leaf's), the host names a certificate serves (its DNS subjectAltNames, or its
//! subject CN when it has none, read by `config::x509`), and the `ServerConfig` /
//! `ClientConfig` builders. The SNI → certificate resolver is the frontend's live
//! `config::cert_store::CertStore`. Errors are plain strings: config validation attaches the
//! file, line and key.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

use super::cert_store::CertStore;
pub(crate) use super::x509::dns_names;

/// TLS 1.2 sessions remembered per frontend (shared by all workers; touched once per handshake).
pub(crate) const SESSION_CACHE_ENTRIES: usize = 20_480;

pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// One certificate chain with its key, and the names it serves.
pub(crate) struct LoadedCert {
    pub key: Arc<CertifiedKey>,
    pub names: Vec<String>,
}

/// Reads a PEM chain and key and checks that they belong together.
pub(crate) fn load_cert(cert_path: &Path, key_path: &Path, provider: &CryptoProvider) -> Result<LoadedCert, String> {
    let cert_pem = read(cert_path)?;
    let key_pem = read(key_path)?;
    cert_from_pem(&cert_pem, &key_pem, cert_path, key_path, provider)
}

pub(crate) fn read(path: &Path) -> Result<Vec<u8>, String> {
    super::bounded::read_file(path, super::bounded::MAX_PEM)
}

/// `load_cert` on PEM text already read (`ctl set cert`: the master reads the files, each
/// worker process checks them again); the paths only name the files in errors.
pub(crate) fn cert_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<LoadedCert, String> {
    let chain = chain_from_pem(cert_pem, cert_path)?;
    check_chain(&chain, cert_path)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| format!("{}: no usable private key: {e}", key_path.display()))?;
    let names = chain.first().map(|leaf| dns_names(leaf)).unwrap_or_default();
    let certified = CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => format!(
            "{} and {}: the private key does not belong to the certificate",
            cert_path.display(),
            key_path.display()
        ),
        e => format!("{} and {}: {e}", cert_path.display(), key_path.display()),
    })?;
    Ok(LoadedCert {
        key: Arc::new(certified),
        names,
    })
}

/// `cert` with the OCSP response in `ocsp_path` stapled, when that file exists and the
/// response is good for it now (`config::ocsp`); otherwise as it was, with a warning when
/// the file is there but unusable (a stale staple must not stop a restart).
pub(crate) fn with_staple_file(cert: LoadedCert, ocsp_path: &Path) -> LoadedCert {
    let response = match super::bounded::read_bounded(ocsp_path, super::bounded::MAX_OCSP) {
        Ok(r) => r,
        Err(e) if e.not_found() => return cert,
        Err(e) => {
            tracing::warn!("{}: not stapled: {e}", ocsp_path.display());
            return cert;
        }
    };
    match with_staple(&cert.key, response) {
        Ok(key) => LoadedCert {
            key: Arc::new(key),
            names: cert.names,
        },
        Err(msg) => {
            tracing::warn!("{}: not stapled: {msg}", ocsp_path.display());
            cert
        }
    }
}

/// `key` with `response` stapled, if it is a good response for its leaf now.
pub(crate) fn with_staple(key: &CertifiedKey, response: Vec<u8>) -> Result<CertifiedKey, String> {
    let leaf = key.cert.first().ok_or("an empty chain")?;
    let tbs = super::x509::tbs(leaf).ok_or("the leaf is not a readable certificate")?;
    super::ocsp::validate(&response, tbs.serial, super::cert_store::unix_now())?;
    Ok(CertifiedKey {
        cert: key.cert.clone(),
        key: Arc::clone(&key.key),
        ocsp: Some(response),
    })
}

/// A certificate to swap in at run time (`ctl set cert`, the file watch): checked as at
/// load, and its leaf must be valid now; `ocsp` is stapled when it is good for it (else the
/// second value says why it was not).
pub(crate) fn runtime_cert(
    cert_pem: &[u8],
    key_pem: &[u8],
    ocsp: Option<Vec<u8>>,
    cert_path: &Path,
    key_path: &Path,
) -> Result<(LoadedCert, Option<String>), String> {
    let loaded = cert_from_pem(cert_pem, key_pem, cert_path, key_path, &provider())?;
    let leaf = loaded.key.cert.first().and_then(|l| super::x509::tbs(l));
    let now = super::cert_store::unix_now();
    match leaf {
        Some(t) if t.not_after <= now => {
            return Err(format!("{}: the certificate has expired", cert_path.display()));
        }
        Some(t) if t.not_before > now + 60 => {
            return Err(format!("{}: the certificate is not valid yet", cert_path.display()));
        }
        _ => {}
    }
    let Some(response) = ocsp else {
        return Ok((loaded, None));
    };
    match with_staple(&loaded.key, response) {
        Ok(key) => Ok((
            LoadedCert {
                key: Arc::new(key),
                names: loaded.names,
            },
            None,
        )),
        Err(msg) => Ok((loaded, Some(format!("OCSP response not stapled: {msg}")))),
    }
}

/// Why `ocsp_fetch` cannot fetch for `key`, if it cannot: it needs the responder's URL
/// (plain HTTP) in the leaf's Authority Information Access and the issuer next in the chain.
pub(crate) fn fetchable(key: &CertifiedKey) -> Result<(), String> {
    let leaf = key.cert.first().and_then(|l| super::x509::tbs(l));
    match leaf.and_then(|t| super::x509::ocsp_url(&t)) {
        None => Err("`ocsp_fetch` needs a certificate that names its OCSP responder (Authority Information Access)".into()),
        Some(url) if !url.starts_with("http://") => Err(format!(
            "`ocsp_fetch`: the certificate's OCSP responder `{url}` is not a plain http:// URL"
        )),
        Some(_) if key.cert.len() < 2 => Err(
            "`ocsp_fetch` needs the issuer's certificate after the leaf in the chain file (the request names the issuer)"
                .into(),
        ),
        Some(_) => Ok(()),
    }
}

pub(crate) fn load_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    chain_from_pem(&read(path)?, path)
}

fn chain_from_pem(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: bad PEM: {e}", path.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate in the file", path.display()));
    }
    Ok(chain)
}

/// Every certificate of a served chain is readable, and each one is issued by the next
/// (leaf first): clients would refuse a chain out of order.
fn check_chain(chain: &[CertificateDer<'_>], path: &Path) -> Result<(), String> {
    let mut parsed = Vec::with_capacity(chain.len());
    for (i, cert) in chain.iter().enumerate() {
        let tbs = super::x509::tbs(cert).ok_or_else(|| {
            format!(
                "{}: certificate {} of the chain is not a readable X.509 certificate",
                path.display(),
                i + 1
            )
        })?;
        parsed.push(tbs);
    }
    for (i, pair) in parsed.windows(2).enumerate() {
        if let [cert, issuer] = pair
            && cert.issuer != issuer.subject
        {
            return Err(format!(
                "{}: certificate {} of the chain is not issued by certificate {} (the chain must be leaf first, each certificate followed by its issuer)",
                path.display(),
                i + 1,
                i + 2
            ));
        }
    }
    Ok(())
}

/// What `[frontend.tls]` asks for, already checked.
pub(crate) struct ServerSettings {
    /// The frontend's name: its session tickets are its own (`config::tickets`).
    pub frontend: String,
    /// The frontend's live certificates (`config::cert_store`): SNI → certificate.
    pub certs: Arc<CertStore>,
    /// Newest first (`tls_policy::TlsPolicy::versions`).
    pub versions: Vec<&'static rustls::SupportedProtocolVersion>,
    pub alpn: Vec<Vec<u8>>,
    pub session_tickets: bool,
    pub session_cache: bool,
    pub secret_extraction: bool,
    /// `[frontend.tls.client_auth]`: clients are asked for a certificate.
    pub client_verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
}

/// `provider`: the policy's suites and groups (`tls_policy::TlsPolicy::provider`).
pub(crate) fn server_config(s: ServerSettings, provider: Arc<CryptoProvider>) -> Result<Arc<ServerConfig>, String> {
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&s.versions)
        .map_err(|e| e.to_string())?;
    let builder = match s.client_verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(s.certs);
    config.alpn_protocols = s.alpn;
    if s.session_tickets {
        // Keys the master hands to every generation: tickets survive a reload.
        config.ticketer = super::tickets::ticketer(&s.frontend)?;
    }
    if s.session_cache {
        config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES);
    } else {
        config.session_storage = Arc::new(NoServerSessionStorage {});
        if !s.session_tickets {
            config.send_tls13_tickets = 0;
        }
    }
    config.enable_secret_extraction = s.secret_extraction;
    Ok(Arc::new(config))
}

/// What TLS to a server asks for, already checked.
pub(crate) struct ClientSettings<'a> {
    /// Verify the server's certificate against these CAs (`None`: not verified at all).
    pub ca_file: Option<&'a Path>,
    /// Offered in the ClientHello (none: the server picks nothing).
    pub alpn: Vec<Vec<u8>>,
    /// Newest first.
    pub versions: &'a [&'static rustls::SupportedProtocolVersion],
    /// Presented when the server asks for a client certificate.
    pub client_cert: Option<Arc<CertifiedKey>>,
}

/// A client config for TLS to a server. `provider`: the policy's suites and groups.
pub(crate) fn client_config(s: ClientSettings<'_>, provider: Arc<CryptoProvider>) -> Result<Arc<ClientConfig>, String> {
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(s.versions)
        .map_err(|e| e.to_string())?;
    let builder = match s.ca_file {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in load_chain(path)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: unusable CA certificate: {e}", path.display()))?;
            }
            builder.with_root_certificates(roots)
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider))),
    };
    let mut config = match s.client_cert {
        Some(key) => builder.with_client_cert_resolver(Arc::new(OwnCert(key))),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = s.alpn;
    Ok(Arc::new(config))
}

/// `cert`/`key` on a server: the one certificate presented whatever the server asks.
#[derive(Debug)]
struct OwnCert(Arc<CertifiedKey>);

impl rustls::client::ResolvesClientCert for OwnCert {
    fn resolve(&self, _root_hint_subjects: &[&[u8]], _sigschemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// `verify = false`: any certificate is accepted (signatures on the handshake still checked).
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
