//! Certificates and rustls configs, built once at config load (a reload builds new ones).
//!
//! Owns: reading PEM chains and keys, the host names a certificate serves (its DNS
//! subjectAltNames, or its subject CN when it has none, read by a small bounded DER walker),
//! the SNI → certificate resolver, and the `ServerConfig` / `ClientConfig` builders. Errors
//! are plain strings: config validation attaches the file, line and key.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, NoServerSessionStorage, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

use super::sni::SniMatcher;

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
    let chain = load_chain(cert_path)?;
    let key_pem = std::fs::read(key_path).map_err(|e| format!("cannot read {}: {e}", key_path.display()))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("{}: no usable private key: {e}", key_path.display()))?;
    let names = chain.first().map(|leaf| dns_names(leaf)).unwrap_or_default();
    let certified = CertifiedKey::from_der(chain, key, provider)
        .map_err(|e| format!("{} and {}: {e}", cert_path.display(), key_path.display()))?;
    Ok(LoadedCert {
        key: Arc::new(certified),
        names,
    })
}

fn load_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: bad PEM: {e}", path.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate in the file", path.display()));
    }
    Ok(chain)
}

/// Chooses the certificate by SNI: exact name, then `*.domain` wildcard, then the default
/// (none when unknown names must be refused: the handshake then fails).
#[derive(Debug)]
pub(crate) struct CertResolver {
    matcher: SniMatcher,
    keys: Vec<Arc<CertifiedKey>>,
    default: Option<usize>,
}

impl CertResolver {
    /// `certs` in config order; names listed by several certificates go to the first.
    pub(crate) fn new(certs: Vec<LoadedCert>, default: Option<usize>) -> Result<Self, String> {
        let mut seen = std::collections::HashSet::new();
        let mut patterns = Vec::new();
        let mut keys = Vec::with_capacity(certs.len());
        for (i, c) in certs.into_iter().enumerate() {
            for name in c.names {
                let name = name.to_ascii_lowercase();
                if seen.insert(name.clone()) {
                    patterns.push((name, i));
                }
            }
            keys.push(c.key);
        }
        let matcher = SniMatcher::new(patterns).map_err(|e| e.to_string())?;
        Ok(CertResolver { matcher, keys, default })
    }

    fn pick(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let index = sni.and_then(|n| self.matcher.lookup(n)).or(self.default)?;
        self.keys.get(index).cloned()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.pick(client_hello.server_name())
    }
}

/// What `[frontend.tls]` asks for, already checked.
pub(crate) struct ServerSettings {
    pub certs: Vec<LoadedCert>,
    pub default: Option<usize>,
    pub tls13_only: bool,
    pub alpn: Vec<Vec<u8>>,
    pub session_tickets: bool,
    pub session_cache: bool,
    pub secret_extraction: bool,
}

pub(crate) fn server_config(s: ServerSettings, provider: Arc<CryptoProvider>) -> Result<Arc<ServerConfig>, String> {
    let versions: &[&rustls::SupportedProtocolVersion] = if s.tls13_only {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let resolver = CertResolver::new(s.certs, s.default)?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = s.alpn;
    if s.session_tickets {
        config.ticketer = rustls::crypto::aws_lc_rs::Ticketer::new().map_err(|e| e.to_string())?;
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

/// A client config for TLS to a server: verified against `ca_file`, or not verified at all;
/// `alpn` offered in the ClientHello (none: the server picks nothing).
pub(crate) fn client_config(
    ca_file: Option<&Path>,
    alpn: Vec<Vec<u8>>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<ClientConfig>, String> {
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let mut config = match ca_file {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in load_chain(path)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: unusable CA certificate: {e}", path.display()))?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth(),
    };
    config.alpn_protocols = alpn;
    Ok(Arc::new(config))
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

/// The DNS names a certificate serves: its subjectAltName dNSNames, else its subject CN.
/// Anything unexpected in the DER yields no names (the certificate can still be a default).
pub(crate) fn dns_names(cert: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let mut cn = None;
    let _ = walk_certificate(cert, &mut names, &mut cn);
    if names.is_empty()
        && let Some(cn) = cn
    {
        names.push(cn);
    }
    names
}

const TAG_SEQUENCE: u8 = 0x30;
const TAG_SET: u8 = 0x31;
const TAG_OID: u8 = 0x06;
const TAG_OCTET_STRING: u8 = 0x04;
const TAG_EXTENSIONS: u8 = 0xa3;
const TAG_VERSION: u8 = 0xa0;
const TAG_DNS_NAME: u8 = 0x82;
const OID_SAN: &[u8] = &[0x55, 0x1d, 0x11];
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];

/// One DER TLV: `(tag, content, rest)`.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let (bytes, after) = rest.split_at_checked(n)?;
        rest = after;
        bytes.iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
    };
    let (content, rest) = rest.split_at_checked(len)?;
    Some((tag, content, rest))
}

fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, content, rest) = tlv(input)?;
    (t == tag).then_some((content, rest))
}

fn walk_certificate(cert: &[u8], names: &mut Vec<String>, cn: &mut Option<String>) -> Option<()> {
    let (certificate, _) = expect(cert, TAG_SEQUENCE)?;
    let (tbs, _) = expect(certificate, TAG_SEQUENCE)?;
    let mut rest = tbs;
    // version (optional), serial, signature, issuer, validity, subject
    let mut index = 0;
    while !rest.is_empty() {
        let (tag, content, after) = tlv(rest)?;
        rest = after;
        if tag == TAG_VERSION {
            continue;
        }
        if index == 4 && tag == TAG_SEQUENCE {
            *cn = subject_cn(content);
        }
        if tag == TAG_EXTENSIONS {
            let (exts, _) = expect(content, TAG_SEQUENCE)?;
            san_names(exts, names);
        }
        index += 1;
    }
    Some(())
}

fn subject_cn(mut rdns: &[u8]) -> Option<String> {
    while !rdns.is_empty() {
        let (set, after) = expect(rdns, TAG_SET)?;
        rdns = after;
        let (attr, _) = expect(set, TAG_SEQUENCE)?;
        let (oid, value) = expect(attr, TAG_OID)?;
        if oid == OID_CN {
            let (_, text, _) = tlv(value)?;
            return std::str::from_utf8(text).ok().map(str::to_string);
        }
    }
    None
}

fn san_names(mut exts: &[u8], names: &mut Vec<String>) -> Option<()> {
    while !exts.is_empty() {
        let (ext, after) = expect(exts, TAG_SEQUENCE)?;
        exts = after;
        let (oid, mut rest) = expect(ext, TAG_OID)?;
        if oid != OID_SAN {
            continue;
        }
        // critical BOOLEAN is optional
        if let Some((0x01, _, after)) = tlv(rest) {
            rest = after;
        }
        let (value, _) = expect(rest, TAG_OCTET_STRING)?;
        let (mut general_names, _) = expect(value, TAG_SEQUENCE)?;
        while !general_names.is_empty() {
            let (tag, content, after) = tlv(general_names)?;
            general_names = after;
            if tag == TAG_DNS_NAME
                && let Ok(name) = std::str::from_utf8(content)
            {
                names.push(name.to_string());
            }
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_come_from_san_then_cn() {
        let mut params = rcgen::CertificateParams::new(vec!["a.example".into(), "*.b.example".into()]).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, "cn.example");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(dns_names(cert.der()), vec!["a.example", "*.b.example"]);

        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "only-cn.example");
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(dns_names(cert.der()), vec!["only-cn.example"]);
    }

    #[test]
    fn garbage_has_no_names() {
        for bad in [
            &b""[..],
            b"\x30",
            b"\x30\x84\xff\xff\xff\xff",
            b"\x30\x03\x30\x01",
            &[0x30; 64],
        ] {
            assert!(dns_names(bad).is_empty());
        }
    }
}
