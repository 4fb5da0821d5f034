//! The TLS policy of a frontend (`[frontend.tls]`) or of TLS to a server (`tls = true`):
//! protocol versions, cipher suites and key-exchange groups, named as rustls names them,
//! checked at load, and the crypto provider built from it.
//!
//! The default is Mozilla's "intermediate" profile (TLS 1.2 and 1.3; the three TLS 1.3
//! suites; ECDHE with AES-GCM or ChaCha20-Poly1305 for TLS 1.2; X25519, secp256r1,
//! secp384r1) plus the post-quantum hybrid X25519MLKEM768, offered last: rustls picks the
//! group by the client's preference, so only a client that puts the hybrid first pays for
//! it, and a client of ours (TLS to servers) sends its first key share for X25519.
//! docs/config.md ("TLS policy") explains the choice and how to turn the hybrid off.
//!
//! Invariants: a policy that cannot complete a handshake in some version it enables is
//! refused at load (no suite for an enabled version, TLS 1.2 without a classic group);
//! unknown names are refused with the list of valid ones.

use std::sync::Arc;

use rustls::crypto::{CryptoProvider, SupportedKxGroup, aws_lc_rs};
use rustls::{CipherSuite, SupportedCipherSuite, SupportedProtocolVersion};
use toml::Spanned;

use super::validate::Validator;

/// `min_version` / `max_version` as written: "1.2" or "1.3".
const VERSIONS: [&str; 2] = ["1.2", "1.3"];

/// TLS 1.3 suites in the order Mozilla's intermediate profile lists them.
const DEFAULT_TLS13: [CipherSuite; 3] = [
    CipherSuite::TLS13_AES_128_GCM_SHA256,
    CipherSuite::TLS13_AES_256_GCM_SHA384,
    CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
];

/// TLS 1.2 suites in the order Mozilla's intermediate profile lists them (its DHE suites
/// are not in rustls).
const DEFAULT_TLS12: [CipherSuite; 6] = [
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
];

/// Mozilla intermediate's groups, then the hybrid (see the module doc).
const DEFAULT_GROUPS: [&str; 4] = ["X25519", "secp256r1", "secp384r1", "X25519MLKEM768"];

/// Other spellings operators bring from OpenSSL configs.
const GROUP_ALIASES: [(&str, &str); 3] = [
    ("P-256", "secp256r1"),
    ("prime256v1", "secp256r1"),
    ("P-384", "secp384r1"),
];

/// The keys as written, borrowed from `[frontend.tls]` or a `[[backend.server]]`.
pub(crate) struct PolicyKeys<'a> {
    pub min_version: Option<&'a Spanned<String>>,
    pub max_version: Option<&'a Spanned<String>>,
    pub ciphersuites: Option<&'a Spanned<Vec<Spanned<String>>>>,
    pub ciphers: Option<&'a Spanned<Vec<Spanned<String>>>>,
    pub curves: Option<&'a Spanned<Vec<Spanned<String>>>>,
}

/// A checked policy.
#[derive(Debug, Clone)]
pub(crate) struct TlsPolicy {
    /// TLS 1.3 suites first, then TLS 1.2 ones, each in the order given.
    pub suites: Vec<SupportedCipherSuite>,
    pub groups: Vec<&'static dyn SupportedKxGroup>,
    /// Newest first.
    pub versions: Vec<&'static SupportedProtocolVersion>,
}

impl Default for TlsPolicy {
    fn default() -> Self {
        let suites = DEFAULT_TLS13
            .iter()
            .chain(&DEFAULT_TLS12)
            .filter_map(|s| suite_of(*s))
            .collect();
        let groups = DEFAULT_GROUPS.iter().filter_map(|n| group_named(n)).collect();
        TlsPolicy {
            suites,
            groups,
            versions: vec![&rustls::version::TLS13, &rustls::version::TLS12],
        }
    }
}

impl TlsPolicy {
    /// The aws-lc-rs provider restricted to this policy's suites and groups.
    pub(crate) fn provider(&self) -> Arc<CryptoProvider> {
        Arc::new(CryptoProvider {
            cipher_suites: self.suites.clone(),
            kx_groups: self.groups.clone(),
            ..aws_lc_rs::default_provider()
        })
    }
}

fn suite_of(s: CipherSuite) -> Option<SupportedCipherSuite> {
    aws_lc_rs::ALL_CIPHER_SUITES.iter().copied().find(|c| c.suite() == s)
}

fn suite_name(s: &SupportedCipherSuite) -> &'static str {
    s.suite().as_str().unwrap_or("?")
}

fn group_name(g: &&'static dyn SupportedKxGroup) -> &'static str {
    g.name().as_str().unwrap_or("?")
}

/// A suite by its rustls name, case-insensitive; a TLS 1.3 suite also by its IANA name
/// (`TLS_AES_128_GCM_SHA256`, as OpenSSL's `-ciphersuites` spells it).
fn suite_named(name: &str) -> Option<SupportedCipherSuite> {
    aws_lc_rs::ALL_CIPHER_SUITES.iter().copied().find(|s| {
        let rustls_name = suite_name(s);
        let iana = rustls_name.strip_prefix("TLS13_").map(|rest| format!("TLS_{rest}"));
        rustls_name.eq_ignore_ascii_case(name) || iana.is_some_and(|n| n.eq_ignore_ascii_case(name))
    })
}

fn group_named(name: &str) -> Option<&'static dyn SupportedKxGroup> {
    let name = GROUP_ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(name))
        .map_or(name, |(_, real)| real);
    aws_lc_rs::ALL_KX_GROUPS
        .iter()
        .copied()
        .find(|g| group_name(g).eq_ignore_ascii_case(name))
}

/// Whether a classic (non-ML-KEM) group: the ones TLS 1.2 can use.
fn classic(g: &&'static dyn SupportedKxGroup) -> bool {
    matches!(
        g.name(),
        rustls::NamedGroup::X25519 | rustls::NamedGroup::secp256r1 | rustls::NamedGroup::secp384r1
    )
}

impl Validator<'_> {
    /// The policy `keys` ask for (`key`: the table they are in), the default where absent.
    pub(super) fn tls_policy(&mut self, keys: &PolicyKeys<'_>, key: &str) -> TlsPolicy {
        let defaults = TlsPolicy::default();
        let min = self
            .tls_version(keys.min_version, &format!("{key}.min_version"))
            .unwrap_or(0);
        let max = self
            .tls_version(keys.max_version, &format!("{key}.max_version"))
            .unwrap_or(1);
        if min > max
            && let Some(v) = keys.max_version
        {
            self.err(
                v.span(),
                format!("{key}.max_version"),
                "`max_version` is older than `min_version`".into(),
            );
        }
        let (tls12, tls13) = (min == 0, max == 1);
        let mut versions: Vec<&'static SupportedProtocolVersion> = Vec::new();
        if tls13 {
            versions.push(&rustls::version::TLS13);
        }
        if tls12 {
            versions.push(&rustls::version::TLS12);
        }
        let default_of = |v: rustls::ProtocolVersion| -> Vec<SupportedCipherSuite> {
            defaults
                .suites
                .iter()
                .copied()
                .filter(|s| s.version().version == v)
                .collect()
        };
        let tls13_suites = match keys.ciphersuites {
            Some(list) => self.suites(
                list,
                &format!("{key}.ciphersuites"),
                rustls::ProtocolVersion::TLSv1_3,
                tls13,
            ),
            None => default_of(rustls::ProtocolVersion::TLSv1_3),
        };
        let tls12_suites = match keys.ciphers {
            Some(list) => self.suites(list, &format!("{key}.ciphers"), rustls::ProtocolVersion::TLSv1_2, tls12),
            None => default_of(rustls::ProtocolVersion::TLSv1_2),
        };
        let groups = match keys.curves {
            Some(list) => self.groups(list, &format!("{key}.curves"), tls12),
            None => defaults.groups,
        };
        TlsPolicy {
            suites: tls13_suites
                .into_iter()
                .filter(|_| tls13)
                .chain(tls12_suites.into_iter().filter(|_| tls12))
                .collect(),
            groups,
            versions,
        }
    }

    /// `ciphers` given: every certificate's key (`keys`: what it is, its algorithm) needs
    /// a TLS 1.2 suite it can sign for, else every TLS 1.2 client getting that certificate
    /// would fail its handshake.
    pub(super) fn tls12_suites_fit(
        &mut self,
        policy: &TlsPolicy,
        keys: impl Iterator<Item = (String, rustls::SignatureAlgorithm)>,
        ciphers: Option<&Spanned<Vec<Spanned<String>>>>,
        key: &str,
    ) {
        let Some(ciphers) = ciphers else { return };
        // Without TLS 1.2 (`min_version = "1.3"`) no client ever uses these suites: nothing
        // to fit (the TLS 1.3 suites work with any key).
        if !policy
            .versions
            .iter()
            .any(|v| v.version == rustls::ProtocolVersion::TLSv1_2)
        {
            return;
        }
        for (what, alg) in keys {
            let fits = policy.suites.iter().any(|s| {
                s.version().version == rustls::ProtocolVersion::TLSv1_2 && s.usable_for_signature_algorithm(alg)
            });
            if !fits {
                self.err(
                    ciphers.span(),
                    format!("{key}.ciphers"),
                    format!("no suite here works with the {alg:?} key of {what}: TLS 1.2 clients would fail (an ECDSA or Ed25519 key needs a TLS_ECDHE_ECDSA_… suite, an RSA key a TLS_ECDHE_RSA_… one)"),
                );
            }
        }
    }

    /// 0 for "1.2", 1 for "1.3".
    fn tls_version(&mut self, v: Option<&Spanned<String>>, key: &str) -> Option<usize> {
        let v = v?;
        let found = VERSIONS.iter().position(|n| *n == v.get_ref().as_str());
        if found.is_none() {
            self.err(
                v.span(),
                key.into(),
                format!("`{}` is not \"1.2\" or \"1.3\"", v.get_ref()),
            );
        }
        found
    }

    /// `ciphersuites` (TLS 1.3) or `ciphers` (TLS 1.2): known names of that version, at
    /// least one, and only where that version is enabled.
    fn suites(
        &mut self,
        list: &Spanned<Vec<Spanned<String>>>,
        key: &str,
        version: rustls::ProtocolVersion,
        enabled: bool,
    ) -> Vec<SupportedCipherSuite> {
        let (this, other, other_key) = match version {
            rustls::ProtocolVersion::TLSv1_3 => ("TLS 1.3", "TLS 1.2", "ciphers"),
            _ => ("TLS 1.2", "TLS 1.3", "ciphersuites"),
        };
        if !enabled {
            self.err(
                list.span(),
                key.into(),
                format!("{this} is off (`min_version` / `max_version`): its suites are unused"),
            );
            return Vec::new();
        }
        if list.get_ref().is_empty() {
            self.err(
                list.span(),
                key.into(),
                format!("must list at least one {this} suite (to turn {this} off, set `min_version` / `max_version`)"),
            );
        }
        let valid: Vec<&str> = aws_lc_rs::ALL_CIPHER_SUITES
            .iter()
            .filter(|s| s.version().version == version)
            .map(suite_name)
            .collect();
        let mut out = Vec::new();
        for (i, name) in list.get_ref().iter().enumerate() {
            match suite_named(name.get_ref()) {
                Some(s) if s.version().version == version => {
                    if !out.iter().any(|o: &SupportedCipherSuite| o.suite() == s.suite()) {
                        out.push(s);
                    }
                }
                Some(_) => self.err(
                    name.span(),
                    format!("{key}[{i}]"),
                    format!("`{}` is a {other} suite: list it in `{other_key}`", name.get_ref()),
                ),
                None => self.err(
                    name.span(),
                    format!("{key}[{i}]"),
                    format!(
                        "unknown {this} cipher suite `{}`; valid: {}",
                        name.get_ref(),
                        valid.join(", ")
                    ),
                ),
            }
        }
        out
    }

    /// `curves`: known groups, at least one, and a classic one when TLS 1.2 is on.
    fn groups(
        &mut self,
        list: &Spanned<Vec<Spanned<String>>>,
        key: &str,
        tls12: bool,
    ) -> Vec<&'static dyn SupportedKxGroup> {
        let valid: Vec<&str> = aws_lc_rs::ALL_KX_GROUPS.iter().map(group_name).collect();
        let mut out: Vec<&'static dyn SupportedKxGroup> = Vec::new();
        let mut unknown = false;
        for (i, name) in list.get_ref().iter().enumerate() {
            match group_named(name.get_ref()) {
                Some(g) => {
                    if !out.iter().any(|o| o.name() == g.name()) {
                        out.push(g);
                    }
                }
                None => {
                    unknown = true;
                    self.err(
                        name.span(),
                        format!("{key}[{i}]"),
                        format!(
                            "unknown key-exchange group `{}`; valid: {}",
                            name.get_ref(),
                            valid.join(", ")
                        ),
                    );
                }
            }
        }
        if list.get_ref().is_empty() {
            self.err(list.span(), key.into(), "must list at least one group".into());
        } else if tls12 && !unknown && !out.iter().any(classic) {
            self.err(
                list.span(),
                key.into(),
                "TLS 1.2 needs one of X25519, secp256r1, secp384r1 (the ML-KEM groups are TLS 1.3 only): add one, or set `min_version = \"1.3\"`".into(),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_mozilla_intermediate_plus_the_hybrid() {
        let p = TlsPolicy::default();
        let suites: Vec<&str> = p.suites.iter().map(suite_name).collect();
        assert_eq!(
            suites,
            [
                "TLS13_AES_128_GCM_SHA256",
                "TLS13_AES_256_GCM_SHA384",
                "TLS13_CHACHA20_POLY1305_SHA256",
                "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            ]
        );
        let groups: Vec<&str> = p.groups.iter().map(group_name).collect();
        assert_eq!(groups, DEFAULT_GROUPS);
        assert_eq!(p.versions.len(), 2);
    }

    #[test]
    fn names_are_case_insensitive_with_iana_and_openssl_spellings() {
        for (name, want) in [
            ("tls13_aes_128_gcm_sha256", "TLS13_AES_128_GCM_SHA256"),
            ("TLS_AES_256_GCM_SHA384", "TLS13_AES_256_GCM_SHA384"),
            (
                "tls_ecdhe_rsa_with_aes_128_gcm_sha256",
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            ),
        ] {
            assert_eq!(suite_named(name).map(|s| suite_name(&s)), Some(want), "{name}");
        }
        assert!(suite_named("TLS_RSA_WITH_AES_128_CBC_SHA").is_none());
        assert!(suite_named("TLS_AES_128_GCM_SHA2567").is_none());
        for (name, want) in [
            ("x25519", "X25519"),
            ("P-256", "secp256r1"),
            ("x25519mlkem768", "X25519MLKEM768"),
        ] {
            assert_eq!(group_named(name).map(|g| group_name(&g)), Some(want), "{name}");
        }
        assert!(group_named("secp521r1").is_none(), "not in the provider");
    }
}
