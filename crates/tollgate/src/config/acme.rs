//! ACME configuration: `[[frontend.tls.acme]]` and `[global] state_dir` as written (serde
//! structs), as validated ([`AcmeOrder`]), the files an order keeps in `state_dir`, and the
//! [`ChallengeBook`] through which the `acme` thread hands challenge answers to the
//! listeners (tls-alpn-01 certificates to `tls::terminate`, http-01 key authorizations to
//! the HTTP pipeline).
//!
//! Invariants after validation: every order has at least one domain, lowercase; a wildcard
//! only with `challenge = "dns-01"`, which has a `dns_hook`; `http-01` only when some
//! plain-HTTP frontend exists to answer it; `state_dir` is set. One book per loaded config
//! (one per worker process): it is written by the `acme` thread only, and read only for a
//! handshake offering `acme-tls/1` or a request for `/.well-known/acme-challenge/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde::Deserialize;
use toml::Spanned;

use super::units::DurationValue;

/// The ALPN protocol of tls-alpn-01 validation connections (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";
/// Where http-01 answers live (RFC 8555 8.3).
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// `challenge` of `[[frontend.tls.acme]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ChallengeKind {
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
    #[serde(rename = "http-01")]
    Http01,
    #[serde(rename = "dns-01")]
    Dns01,
}

impl ChallengeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChallengeKind::TlsAlpn01 => "tls-alpn-01",
            ChallengeKind::Http01 => "http-01",
            ChallengeKind::Dns01 => "dns-01",
        }
    }
}

/// `[[frontend.tls.acme]]`: one certificate ordered for `domains`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AcmeSection {
    pub domains: Spanned<Vec<Spanned<String>>>,
    /// The CA's directory URL (`https://…/directory`).
    pub directory: Spanned<String>,
    /// Contact for the account (`mailto:` added).
    pub email: Option<Spanned<String>>,
    pub challenge: Option<Spanned<ChallengeKind>>,
    /// PEM file of the CA that signed the directory server's own certificate (a test CA).
    pub directory_ca: Option<Spanned<String>>,
    /// dns-01: the command run as `CMD... set|clear NAME VALUE`.
    pub dns_hook: Option<Spanned<Vec<Spanned<String>>>>,
    /// Renew this long before expiry instead of at two thirds of the lifetime.
    pub renew_before: Option<Spanned<DurationValue>>,
}

/// One validated `[[frontend.tls.acme]]` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeOrder {
    /// The frontend (index) whose block this is.
    pub frontend: usize,
    /// Lowercase, in config order; the first names the files.
    pub domains: Vec<String>,
    pub directory: String,
    /// `mailto:` contact, if an email was given.
    pub contact: Option<String>,
    pub challenge: ChallengeKind,
    pub directory_ca: Option<PathBuf>,
    pub dns_hook: Vec<String>,
    pub renew_before: Option<Duration>,
    /// The frontend has no `[[frontend.tls.cert]]`: a self-signed certificate serves these
    /// names until the CA issues one.
    pub fallback_self_signed: bool,
}

/// Everything ACME of one loaded config.
#[derive(Debug, Default, Clone)]
pub struct Acme {
    pub orders: Vec<AcmeOrder>,
    /// `global.state_dir` (set whenever `orders` is not empty).
    pub state_dir: Option<PathBuf>,
    pub book: Arc<ChallengeBook>,
    pub stats: Arc<AcmeStats>,
}

/// Counters of the process's ACME thread.
#[derive(Debug, Default)]
pub struct AcmeStats {
    pub orders_ok: std::sync::atomic::AtomicU64,
    pub orders_failed: std::sync::atomic::AtomicU64,
    /// Orders that replaced a certificate still valid.
    pub renewals: std::sync::atomic::AtomicU64,
}

/// Challenge answers being validated right now, by name (tls-alpn-01) and token (http-01).
#[derive(Debug, Default)]
pub struct ChallengeBook {
    alpn: RwLock<HashMap<String, Arc<CertifiedKey>>>,
    /// How many names `alpn` holds: while none, handshakes skip the ClientHello peek.
    alpn_pending: AtomicUsize,
    http: RwLock<HashMap<String, Arc<str>>>,
}

impl ChallengeBook {
    pub fn set_alpn(&self, name: &str, key: Arc<CertifiedKey>) {
        let mut map = self.alpn.write().unwrap_or_else(PoisonError::into_inner);
        map.insert(name.to_ascii_lowercase(), key);
        self.alpn_pending.store(map.len(), Ordering::Release);
    }

    pub fn clear_alpn(&self, name: &str) {
        let mut map = self.alpn.write().unwrap_or_else(PoisonError::into_inner);
        map.remove(&name.to_ascii_lowercase());
        self.alpn_pending.store(map.len(), Ordering::Release);
    }

    /// Whether some name is under tls-alpn-01 validation (one atomic load).
    pub fn alpn_pending(&self) -> bool {
        self.alpn_pending.load(Ordering::Acquire) > 0
    }

    /// The challenge certificate for `name`, while it is under validation.
    pub fn alpn(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let map = self.alpn.read().unwrap_or_else(PoisonError::into_inner);
        map.get(name).or_else(|| map.get(&name.to_ascii_lowercase())).cloned()
    }

    pub fn set_http(&self, token: &str, key_authorization: &str) {
        self.http
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token.to_string(), Arc::from(key_authorization));
    }

    pub fn clear_http(&self, token: &str) {
        self.http.write().unwrap_or_else(PoisonError::into_inner).remove(token);
    }

    /// The key authorization answering `path` (`/.well-known/acme-challenge/TOKEN`).
    pub fn http_answer(&self, path: &[u8]) -> Option<Arc<str>> {
        let token = path.strip_prefix(HTTP01_PREFIX.as_bytes())?;
        let token = std::str::from_utf8(token).ok()?;
        self.http
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(token)
            .cloned()
    }
}

/// The resolver of tls-alpn-01 handshakes: the challenge certificate for the SNI, or none
/// (the handshake fails: a name not under validation has nothing to prove).
#[derive(Debug)]
pub(crate) struct ChallengeResolver(pub Arc<ChallengeBook>);

impl ResolvesServerCert for ChallengeResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.0.alpn(client_hello.server_name()?)
    }
}

/// What a frontend answering tls-alpn-01 needs in its handshakes: the book (is a name under
/// validation?) and the config a validation handshake gets.
#[derive(Debug, Clone)]
pub struct AlpnChallenge {
    pub book: Arc<ChallengeBook>,
    pub config: Arc<rustls::ServerConfig>,
}

/// The rustls config of tls-alpn-01 validation handshakes: only `acme-tls/1`, no sessions.
pub(crate) fn challenge_config(
    book: Arc<ChallengeBook>,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<AlpnChallenge, String> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(ChallengeResolver(Arc::clone(&book))));
    config.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(AlpnChallenge {
        book,
        config: Arc::new(config),
    })
}

/// Whether a ClientHello is a tls-alpn-01 validation (it offers `acme-tls/1`).
pub(crate) fn offers_acme_tls(client_hello: &ClientHello<'_>) -> bool {
    client_hello
        .alpn()
        .is_some_and(|mut offered| offered.any(|p| p == ACME_TLS_ALPN))
}

/// Where an order keeps its certificate chain and key: `<first domain>.<hash>.crt|key`,
/// the hash over the directory and every domain (so another set of names, or another CA,
/// is another order and another pair of files).
pub fn cert_paths(state_dir: &Path, order: &AcmeOrder) -> (PathBuf, PathBuf) {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(order.directory.as_bytes());
    for d in &order.domains {
        hash.update(b"\0");
        hash.update(d.as_bytes());
    }
    let digest = hash.finalize();
    let short: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let first = order.domains.first().map_or("order", String::as_str).replace('*', "_");
    (
        state_dir.join(format!("{first}.{short}.crt")),
        state_dir.join(format!("{first}.{short}.key")),
    )
}

/// The account of `directory`: `account.<hash>.json`.
pub fn account_path(state_dir: &Path, directory: &str) -> PathBuf {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(directory.as_bytes());
    let short: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    state_dir.join(format!("account.{short}.json"))
}

/// A certificate an order stored earlier, with its validity, if it is still valid now and
/// covers every domain of the order.
pub(crate) struct Stored {
    pub cert: super::tls::LoadedCert,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

pub(crate) fn load_stored(state_dir: &Path, order: &AcmeOrder, now: SystemTime) -> Option<Stored> {
    let (cert_path, key_path) = cert_paths(state_dir, order);
    if !cert_path.exists() {
        return None;
    }
    let provider = super::tls::provider();
    let cert = super::tls::load_cert(&cert_path, &key_path, &provider).ok()?;
    let leaf = cert.key.end_entity_cert().ok()?;
    let (not_before, not_after) = validity(leaf)?;
    let covers = order
        .domains
        .iter()
        .all(|d| cert.names.iter().any(|n| n.eq_ignore_ascii_case(d)));
    (covers && now < not_after).then_some(Stored {
        cert,
        not_before,
        not_after,
    })
}

/// A self-signed certificate for `names`, served until the CA issues the real one.
pub(crate) fn self_signed(names: &[String]) -> Result<super::tls::LoadedCert, String> {
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(|e| e.to_string())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "tollgate self-signed (ACME pending)");
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    certified(cert.der().clone(), &key, names.to_vec())
}

/// The tls-alpn-01 certificate for `name` (RFC 8737 3): self-signed, the name as its only
/// subjectAltName, the SHA-256 of the key authorization in a critical acmeIdentifier.
pub fn alpn_challenge_cert(name: &str, key_authorization_digest: &[u8]) -> Result<Arc<CertifiedKey>, String> {
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
    params
        .custom_extensions
        .push(rcgen::CustomExtension::new_acme_identifier(key_authorization_digest));
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    Ok(certified(cert.der().clone(), &key, vec![name.to_string()])?.key)
}

fn certified(
    der: rustls::pki_types::CertificateDer<'static>,
    key: &rcgen::KeyPair,
    names: Vec<String>,
) -> Result<super::tls::LoadedCert, String> {
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    // Not `CertifiedKey::from_der`: its key check parses the certificate with webpki, which
    // refuses the challenge certificate's critical acmeIdentifier. rcgen made both here.
    let signing_key = super::tls::provider()
        .key_provider
        .load_private_key(key_der)
        .map_err(|e| e.to_string())?;
    let certified = CertifiedKey::new(vec![der], signing_key);
    Ok(super::tls::LoadedCert {
        key: Arc::new(certified),
        names,
    })
}

/// A certificate's validity: (notBefore, notAfter), from `config::x509`.
pub(crate) fn validity(cert: &[u8]) -> Option<(SystemTime, SystemTime)> {
    let tbs = super::x509::tbs(cert)?;
    let at = |secs: i64| {
        u64::try_from(secs)
            .ok()
            .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s))
    };
    Some((at(tbs.not_before)?, at(tbs.not_after)?))
}

impl super::validate::Validator<'_> {
    /// The `[[frontend.tls.acme]]` blocks of frontend `frontend` (at `key`, `frontend.tls`).
    /// Checks that need the whole config (`state_dir`, an HTTP frontend for http-01) are
    /// in [`Self::acme_whole`].
    pub(super) fn acme_orders(&mut self, sections: &[AcmeSection], key: &str, frontend: usize) -> Vec<AcmeOrder> {
        let mut orders = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, a) in sections.iter().enumerate() {
            let key = format!("{key}.acme[{i}]");
            let challenge = a.challenge.as_ref().map_or(ChallengeKind::TlsAlpn01, |c| *c.get_ref());
            let mut domains = Vec::new();
            if a.domains.get_ref().is_empty() {
                self.err(
                    a.domains.span(),
                    format!("{key}.domains"),
                    "needs at least one name".into(),
                );
            }
            for (j, d) in a.domains.get_ref().iter().enumerate() {
                let name = d.get_ref().to_ascii_lowercase();
                let dkey = format!("{key}.domains[{j}]");
                if super::model::HostPattern::parse(&name).is_none() || name.parse::<std::net::IpAddr>().is_ok() {
                    self.err(
                        d.span(),
                        dkey,
                        format!("`{}` is not a DNS name (or a `*.` wildcard)", d.get_ref()),
                    );
                    continue;
                }
                if name.starts_with("*.") && challenge != ChallengeKind::Dns01 {
                    self.err(
                        d.span(),
                        dkey,
                        format!(
                            "a wildcard can only be validated through DNS: `challenge = \"dns-01\"` (this block uses {})",
                            challenge.as_str()
                        ),
                    );
                    continue;
                }
                if let Some(other) = seen.insert(name.clone(), i) {
                    self.err(
                        d.span(),
                        dkey,
                        format!(
                            "`{name}` is already ordered by {key_base}.acme[{other}]",
                            key_base = key.rsplit_once(".acme[").map_or("", |k| k.0)
                        ),
                    );
                    continue;
                }
                domains.push(name);
            }
            let directory = a.directory.get_ref();
            if !directory.starts_with("https://") || directory.len() <= "https://".len() {
                self.err(
                    a.directory.span(),
                    format!("{key}.directory"),
                    format!("`{directory}` is not an https:// URL (ACME runs over HTTPS only, RFC 8555 6.1)"),
                );
            } else if directory.parse::<http::Uri>().is_err() {
                self.err(
                    a.directory.span(),
                    format!("{key}.directory"),
                    format!("`{directory}` is not a URL"),
                );
            }
            let contact = a.email.as_ref().and_then(|e| {
                let text = e.get_ref();
                let ok = text
                    .split_once('@')
                    .is_some_and(|(l, d)| !l.is_empty() && !d.is_empty())
                    && !text.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control());
                if !ok {
                    self.err(
                        e.span(),
                        format!("{key}.email"),
                        format!("`{text}` is not an email address"),
                    );
                }
                ok.then(|| format!("mailto:{text}"))
            });
            let directory_ca = a.directory_ca.as_ref().and_then(|ca| {
                let path = self.path(ca.get_ref());
                use rustls::pki_types::pem::PemObject;
                let pem = super::bounded::read_bounded(&path, super::bounded::MAX_PEM);
                match pem.map(|pem| {
                    rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
                        .next()
                        .map(|c| c.map(|_| ()))
                }) {
                    Ok(Some(Ok(_))) => Some(path),
                    Ok(_) => {
                        let msg = format!("{}: no PEM certificate in the file", path.display());
                        self.err(ca.span(), format!("{key}.directory_ca"), msg);
                        None
                    }
                    Err(e) => {
                        let msg = format!("cannot read {}: {e}", path.display());
                        self.err(ca.span(), format!("{key}.directory_ca"), msg);
                        None
                    }
                }
            });
            let dns_hook: Vec<String> = a
                .dns_hook
                .as_ref()
                .map(|h| h.get_ref().iter().map(|s| s.get_ref().clone()).collect())
                .unwrap_or_default();
            match (&a.dns_hook, challenge) {
                (None, ChallengeKind::Dns01) => self.err(
                    a.challenge.as_ref().map_or(a.directory.span(), Spanned::span),
                    format!("{key}.dns_hook"),
                    "dns-01 needs `dns_hook`: the command that publishes the TXT record".into(),
                ),
                (Some(h), ChallengeKind::Dns01) if dns_hook.first().is_none_or(String::is_empty) => self.err(
                    h.span(),
                    format!("{key}.dns_hook"),
                    "needs the command's path first".into(),
                ),
                (Some(h), other) if other != ChallengeKind::Dns01 => self.err(
                    h.span(),
                    format!("{key}.dns_hook"),
                    format!(
                        "only used by `challenge = \"dns-01\"` (this block uses {})",
                        other.as_str()
                    ),
                ),
                _ => {}
            }
            let renew_before = a.renew_before.as_ref().and_then(|r| {
                if r.get_ref().0.is_zero() {
                    self.err(r.span(), format!("{key}.renew_before"), "must be more than 0s".into());
                    None
                } else {
                    Some(r.get_ref().0)
                }
            });
            if domains.len() == a.domains.get_ref().len() && !domains.is_empty() {
                orders.push(AcmeOrder {
                    frontend,
                    domains,
                    directory: directory.clone(),
                    contact,
                    challenge,
                    directory_ca,
                    dns_hook,
                    renew_before,
                    fallback_self_signed: false,
                });
            }
        }
        orders
    }

    /// What ACME needs from the whole config: `state_dir` (made absolute), and for http-01
    /// a plain-HTTP frontend (the CA fetches the answer over `http://` on port 80; tollgate
    /// answers it on every http-mode frontend without TLS, before routing).
    pub(super) fn acme_whole(
        &mut self,
        file: &super::file::ConfigFile,
        frontends: &[super::model::Frontend],
    ) -> Option<PathBuf> {
        let first = file
            .frontend
            .iter()
            .flat_map(|f| f.tls.iter().flat_map(|t| t.acme.iter()))
            .next();
        let state_dir = file.global.state_dir.as_ref().map(|d| self.path(d.get_ref()));
        if let Some(first) = first {
            if state_dir.is_none() {
                self.err(
                    first.directory.span(),
                    "global.state_dir".into(),
                    "[[frontend.tls.acme]] needs `global.state_dir` (where the account key and certificates are kept)"
                        .into(),
                );
            }
            let plain_http = frontends
                .iter()
                .any(|f| f.mode == super::model::Mode::Http && f.tls.is_none());
            for (i, f) in file.frontend.iter().enumerate() {
                for (j, a) in f.tls.iter().flat_map(|t| t.acme.iter()).enumerate() {
                    if let Some(c) = &a.challenge
                        && *c.get_ref() == ChallengeKind::Http01
                        && !plain_http
                    {
                        self.err(
                            c.span(),
                            format!("frontend[{i}].tls.acme[{j}].challenge"),
                            "http-01 is answered by a `mode = \"http\"` frontend without TLS (the CA connects to port 80), and this config has none: add one, or use tls-alpn-01".into(),
                        );
                    }
                }
            }
        }
        state_dir
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn order(domains: &[&str]) -> AcmeOrder {
        AcmeOrder {
            frontend: 0,
            domains: domains.iter().map(|d| d.to_string()).collect(),
            directory: "https://ca.example/directory".into(),
            contact: None,
            challenge: ChallengeKind::Dns01,
            directory_ca: None,
            dns_hook: vec!["/bin/true".into()],
            renew_before: None,
            fallback_self_signed: false,
        }
    }

    #[test]
    fn files_are_named_by_first_domain_and_differ_per_set() {
        let dir = Path::new("/state");
        let (crt, key) = cert_paths(dir, &order(&["*.b.example", "a.example"]));
        let crt = crt.to_string_lossy().into_owned();
        assert!(crt.starts_with("/state/_.b.example.") && crt.ends_with(".crt"), "{crt}");
        assert!(key.to_string_lossy().ends_with(".key"));
        assert_ne!(
            cert_paths(dir, &order(&["a.example"])).0,
            cert_paths(dir, &order(&["a.example", "c.example"])).0
        );
    }

    #[test]
    fn http_answers_only_known_tokens_under_the_prefix() {
        let book = ChallengeBook::default();
        book.set_http("tok", "tok.thumb");
        assert_eq!(
            book.http_answer(b"/.well-known/acme-challenge/tok").as_deref(),
            Some("tok.thumb")
        );
        assert!(book.http_answer(b"/.well-known/acme-challenge/other").is_none());
        assert!(book.http_answer(b"/tok").is_none());
        book.clear_http("tok");
        assert!(book.http_answer(b"/.well-known/acme-challenge/tok").is_none());
    }

    /// A config with one TLS frontend whose `[[frontend.tls.acme]]` block is `acme`, and
    /// `extra` (more frontends, `[global]` keys go in `global`).
    fn config(global: &str, acme: &str, extra: &str) -> String {
        format!(
            "[global]\n{global}\n[[frontend]]\nname = \"web\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"be\"\n\
             [frontend.tls]\n[[frontend.tls.acme]]\ndirectory = \"https://ca.example/directory\"\n{acme}\n{extra}\n\
             [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:1\"\n"
        )
    }

    const STATE: &str = "state_dir = \"/nonexistent/tollgate-acme-state\"";

    fn refused(src: &str) -> super::super::ConfigError {
        match super::super::parse(src, "t.toml") {
            Ok(_) => panic!("accepted:\n{src}"),
            Err(e) => e.0.into_iter().next().unwrap(),
        }
    }

    #[test]
    fn a_block_without_files_gets_a_self_signed_fallback_and_defaults() {
        let c = super::super::parse(&config(STATE, "domains = [\"A.example\"]", ""), "t.toml").unwrap();
        let order = &c.acme.orders[0];
        assert_eq!(order.domains, vec!["a.example"]);
        assert_eq!(order.challenge, ChallengeKind::TlsAlpn01);
        assert!(order.fallback_self_signed);
        let tls = c.frontends[0].tls.as_ref().unwrap();
        assert!(tls.acme_challenge.is_some());
        let entries = tls.certs.entries();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].source.as_str(), "self-signed");
        assert_eq!(entries[0].names, vec!["a.example"]);
    }

    #[test]
    fn a_wildcard_needs_dns_01() {
        let e = refused(&config(STATE, "domains = [\"a.example\", \"*.b.example\"]", ""));
        assert_eq!(e.key, "frontend[0].tls.acme[0].domains[1]", "{e}");
        assert!(e.message.contains("dns-01"), "{e}");
        assert_eq!((e.line, e.column), (10, 25), "{e}");
        // with dns-01 and its hook it is accepted
        let ok = config(
            STATE,
            "domains = [\"*.b.example\"]\nchallenge = \"dns-01\"\ndns_hook = [\"/bin/true\"]",
            "",
        );
        assert!(super::super::parse(&ok, "t.toml").is_ok());
    }

    #[test]
    fn http_01_needs_a_plain_http_frontend() {
        let block = "domains = [\"a.example\"]\nchallenge = \"http-01\"";
        let e = refused(&config(STATE, block, ""));
        assert_eq!(e.key, "frontend[0].tls.acme[0].challenge", "{e}");
        assert!(e.message.contains("without TLS"), "{e}");
        let plain = "[[frontend]]\nname = \"plain\"\nmode = \"http\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"hb\"\n\
                     [[backend]]\nname = \"hb\"\nmode = \"http\"\n[[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:1\"\n";
        assert!(super::super::parse(&config(STATE, block, plain), "t.toml").is_ok());
    }

    #[test]
    fn refusals_name_the_key() {
        let cases: [(&str, &str, &str, &str); 7] = [
            ("", "domains = [\"a.example\"]", "global.state_dir", "state_dir"),
            (STATE, "domains = []", "frontend[0].tls.acme[0].domains", "at least one"),
            (
                STATE,
                "domains = [\"10.0.0.1\"]",
                "frontend[0].tls.acme[0].domains[0]",
                "not a DNS name",
            ),
            (
                STATE,
                "domains = [\"a.example\"]\nemail = \"nobody\"",
                "frontend[0].tls.acme[0].email",
                "email",
            ),
            (
                STATE,
                "domains = [\"a.example\"]\nchallenge = \"dns-01\"",
                "frontend[0].tls.acme[0].dns_hook",
                "dns_hook",
            ),
            (
                STATE,
                "domains = [\"a.example\"]\ndns_hook = [\"/bin/true\"]",
                "frontend[0].tls.acme[0].dns_hook",
                "only used",
            ),
            (
                STATE,
                "domains = [\"a.example\"]\nrenew_before = \"0s\"",
                "frontend[0].tls.acme[0].renew_before",
                "more than",
            ),
        ];
        for (global, block, key, words) in cases {
            let e = refused(&config(global, block, ""));
            assert_eq!(e.key, key, "{e}");
            assert!(e.message.contains(words), "{e}");
            assert!(e.line > 0, "{e}");
        }
        let e = refused(&config(
            STATE,
            "domains = [\"a.example\"]\nchallenge = \"tls-sni-01\"",
            "",
        ));
        assert!(e.message.contains("unknown variant"), "{e}");
        let e = refused(&config(STATE, "domains = [\"a.example\"]\nemial = \"x@y\"", ""));
        assert!(e.message.contains("unknown field"), "{e}");
        let plain = config(STATE, "domains = [\"a.example\"]", "").replace("https://ca.example", "http://ca.example");
        assert_eq!(refused(&plain).key, "frontend[0].tls.acme[0].directory");
    }

    #[test]
    fn a_stored_certificate_still_valid_is_loaded_and_an_expired_one_is_not() {
        let dir = std::env::temp_dir().join(format!("tollgate-acme-stored-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let global = format!("state_dir = \"{}\"", dir.display());
        let src = config(&global, "domains = [\"a.example\"]", "");
        let order = super::super::parse(&src, "t.toml").unwrap().acme.orders[0].clone();
        let (crt, key) = cert_paths(&dir, &order);
        let write = |not_after| {
            let mut params = rcgen::CertificateParams::new(vec!["a.example".to_string()]).unwrap();
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = not_after;
            let k = rcgen::KeyPair::generate().unwrap();
            let cert = params.self_signed(&k).unwrap();
            std::fs::write(&crt, cert.pem()).unwrap();
            std::fs::write(&key, k.serialize_pem()).unwrap();
        };
        write(rcgen::date_time_ymd(2090, 1, 1));
        let c = super::super::parse(&src, "t.toml").unwrap();
        let sources: Vec<&str> = c.frontends[0]
            .tls
            .as_ref()
            .unwrap()
            .certs
            .entries()
            .iter()
            .map(|e| e.source.as_str())
            .collect();
        assert!(sources.contains(&"acme"), "{sources:?}");
        write(rcgen::date_time_ymd(2021, 1, 1));
        let c = super::super::parse(&src, "t.toml").unwrap();
        let entries = c.frontends[0].tls.as_ref().unwrap().certs.entries();
        assert!(entries.iter().all(|e| e.source.as_str() != "acme"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn alpn_answers_are_counted_while_pending() {
        let book = ChallengeBook::default();
        assert!(!book.alpn_pending());
        let key = alpn_challenge_cert("a.example", &[7u8; 32]).unwrap();
        book.set_alpn("A.example", key);
        assert!(book.alpn_pending());
        assert!(book.alpn("a.example").is_some() && book.alpn("A.EXAMPLE").is_some());
        assert!(book.alpn("b.example").is_none());
        book.clear_alpn("a.example");
        assert!(!book.alpn_pending());
        assert!(book.alpn("a.example").is_none());
    }

    #[test]
    fn challenge_cert_carries_the_name() {
        let key = alpn_challenge_cert("a.example", &[7u8; 32]).unwrap();
        let leaf = key.end_entity_cert().unwrap();
        assert_eq!(super::super::tls::dns_names(leaf), vec!["a.example"]);
    }
}
