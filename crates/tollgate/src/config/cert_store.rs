//! A frontend's live certificates: the SNI → certificate resolver rustls asks on every
//! handshake, swappable at run time without a reload.
//!
//! Built at config load from `[[frontend.tls.cert]]` (one store per TLS frontend, inside the
//! `ServerConfig` every worker thread of a generation shares) and reachable from the model
//! (`FrontendTls::certs`), so whatever a generation runs — `ctl set cert`, the file watch,
//! the OCSP fetcher, ACME — installs into the same store the handshakes read.
//!
//! - Reading: a handshake does one `ArcSwap` load of the current [`Snapshot`] (no lock, no
//!   allocation) and clones one `Arc<CertifiedKey>`. A swap is seen by the next handshake;
//!   an open connection keeps the certificate it was made with (rustls holds its own `Arc`).
//!   A stapled OCSP response is left out of handshakes once its nextUpdate has passed (one
//!   clock read per handshake of a stapled certificate).
//! - Writing: [`CertStore::install`] (by names: ACME, runtime certificates),
//!   [`CertStore::replace_configured`] (the slot a config entry made: `set cert`, the file
//!   watch) and [`CertStore::set_staple`] (OCSP) build a new snapshot and store it. Writers
//!   are serialised by a mutex that handshakes never take; any thread may write.
//! - Reading the entries: [`CertStore::entries`] (`show certs`, metrics, the fetchers).
//!
//! Which certificate serves a name: among the entries listing it (exactly, or as the
//! `*.domain` wildcard), the one installed last by `install` (ACME, runtime), else the first
//! in config order. An install whose names equal an entry's names replaces that entry; any
//! other adds one, and an entry left serving no name is dropped (unless it is the default,
//! served when the SNI matches nothing — unless the frontend refuses unknown names).
//!
//! Invariants: an entry's key and facts (`CertFacts`) always describe the same certificate;
//! the snapshot is never mutated once stored. A reload builds new stores from the files (a
//! runtime certificate lives until the next reload, which reads the files again).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::sni::SniMatcher;

/// Where a certificate came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    /// `[[frontend.tls.cert]]`, read at load (or again by the file watch).
    File { cert: PathBuf, key: PathBuf },
    /// Issued through ACME.
    Acme,
    /// `ctl set cert`, from these files.
    Runtime { cert: PathBuf, key: PathBuf },
    /// Made at load for `[[frontend.tls.acme]]` names until the CA issues their certificate
    /// (a frontend without `[[frontend.tls.cert]]`).
    SelfSigned,
}

impl CertSource {
    /// `file`, `acme` or `runtime`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CertSource::File { .. } => "file",
            CertSource::Acme => "acme",
            CertSource::Runtime { .. } => "runtime",
            CertSource::SelfSigned => "self-signed",
        }
    }

    /// The certificate file, when it came from one.
    pub fn cert_path(&self) -> Option<&Path> {
        match self {
            CertSource::File { cert, .. } | CertSource::Runtime { cert, .. } => Some(cert),
            CertSource::Acme | CertSource::SelfSigned => None,
        }
    }
}

/// What the leaf certificate says about itself (read once, at install).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFacts {
    /// Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    /// The serial's INTEGER content, as the issuer wrote it.
    pub serial: Vec<u8>,
    /// SHA-256 of the leaf's DER, the fingerprint clients see.
    pub sha256: [u8; 32],
    /// The OCSP responder of its Authority Information Access.
    pub ocsp_url: Option<String>,
}

impl CertFacts {
    fn of(key: &CertifiedKey) -> Result<Self, String> {
        use sha2::Digest;
        let leaf = key.cert.first().ok_or("an empty certificate chain")?;
        let tbs = super::x509::tbs(leaf).ok_or("the leaf is not a readable X.509 certificate")?;
        Ok(CertFacts {
            not_before: tbs.not_before,
            not_after: tbs.not_after,
            serial: tbs.serial.to_vec(),
            sha256: sha2::Sha256::digest(leaf.as_ref()).into(),
            ocsp_url: super::x509::ocsp_url(&tbs),
        })
    }

    pub fn serial_hex(&self) -> String {
        hex(&self.serial)
    }

    /// The fingerprint as `AB:CD:...`.
    pub fn fingerprint(&self) -> String {
        let parts: Vec<String> = self.sha256.iter().map(|b| format!("{b:02X}")).collect();
        parts.join(":")
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One certificate of a store, as `entries` lists it.
#[derive(Debug, Clone)]
pub struct CertEntry {
    /// Lower case, as matched.
    pub names: Vec<String>,
    pub key: Arc<CertifiedKey>,
    pub source: CertSource,
    pub facts: CertFacts,
    /// The stapled OCSP response's validity, when one is stapled.
    pub staple: Option<super::ocsp::Staple>,
    /// `key` without its staple, served once the staple's nextUpdate has passed (an expired
    /// response is worse than none: a client may refuse the handshake over it).
    unstapled: Option<Arc<CertifiedKey>>,
    /// Served when the SNI matches no name.
    pub default: bool,
    /// The config entry (its `cert` path) this slot was made from, if any: `set cert` and
    /// the file watch replace it in place.
    pub configured: Option<PathBuf>,
    /// Unix seconds.
    pub installed_at: u64,
    /// Ranks installs: 0 for config entries, then counting up (the latest wins a name).
    seq: u64,
}

/// What one handshake reads: the entries and the matcher built over them.
#[derive(Debug)]
struct Snapshot {
    entries: Vec<CertEntry>,
    /// SNI → index in `entries`.
    matcher: SniMatcher,
    default: Option<usize>,
}

impl Snapshot {
    fn build(entries: Vec<CertEntry>) -> Result<Self, String> {
        let mut order: Vec<usize> = (0..entries.len()).collect();
        // Stable: config entries keep their order, later installs come first.
        order.sort_by_key(|&i| std::cmp::Reverse(entries.get(i).map_or(0, |e| e.seq)));
        let mut seen = std::collections::HashSet::new();
        let mut patterns = Vec::new();
        for i in order {
            for name in entries.get(i).map(|e| e.names.as_slice()).unwrap_or_default() {
                if seen.insert(name.as_str()) {
                    patterns.push((name.clone(), i));
                }
            }
        }
        let matcher = SniMatcher::new(patterns).map_err(|e| e.to_string())?;
        let default = entries.iter().position(|e| e.default);
        Ok(Snapshot {
            entries,
            matcher,
            default,
        })
    }
}

/// What an install did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The names the new certificate serves.
    pub names: Vec<String>,
    /// The names of the certificate it replaced (`None`: added).
    pub replaced: Option<Vec<String>>,
    /// Entries dropped because the new one serves all their names.
    pub dropped: usize,
}

/// A frontend's certificates (see the module doc).
#[derive(Debug)]
pub struct CertStore {
    frontend: String,
    current: ArcSwap<Snapshot>,
    /// Serialises writers (each is a read-modify-write of the snapshot); holds the last `seq`.
    writer: Mutex<u64>,
    /// Handshakes served a certificate with a stapled OCSP response (the client may not have
    /// asked for it: rustls does not say).
    staples_served: AtomicU64,
    /// OCSP responses fetched (`ocsp_fetch`) and accepted, or failed (refused, unreachable).
    pub ocsp_fetch_ok: AtomicU64,
    pub ocsp_fetch_failed: AtomicU64,
}

/// Lower case, duplicates out, order kept.
fn normalise(names: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for n in names {
        let n = n.to_ascii_lowercase();
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

fn same_names(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|n| b.contains(n))
}

pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Whether two paths name the same file (through symlinks and `..`), or are equal.
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

impl CertStore {
    /// The store of `frontend` from its config entries, in config order: `(certificate,
    /// its names, where it came from)`. `default`: the entry served for an unknown SNI
    /// (`None`: such handshakes fail).
    pub(crate) fn new(
        frontend: &str,
        certs: Vec<(Arc<CertifiedKey>, Vec<String>, CertSource)>,
        default: Option<usize>,
    ) -> Result<Self, String> {
        let now = unix_now().max(0) as u64;
        let mut entries = Vec::with_capacity(certs.len());
        for (i, (key, names, source)) in certs.into_iter().enumerate() {
            let facts = CertFacts::of(&key)?;
            let (staple, unstapled) = stapling(&key, &facts);
            entries.push(CertEntry {
                names: normalise(&names),
                unstapled,
                configured: source.cert_path().map(Path::to_path_buf),
                key,
                source,
                facts,
                staple,
                default: default == Some(i),
                installed_at: now,
                seq: 0,
            });
        }
        Ok(CertStore {
            frontend: frontend.to_string(),
            current: ArcSwap::from_pointee(Snapshot::build(entries)?),
            writer: Mutex::new(0),
            staples_served: AtomicU64::new(0),
            ocsp_fetch_ok: AtomicU64::new(0),
            ocsp_fetch_failed: AtomicU64::new(0),
        })
    }

    pub fn frontend(&self) -> &str {
        &self.frontend
    }

    /// Every certificate, in config order then install order.
    pub fn entries(&self) -> Vec<CertEntry> {
        self.current.load().entries.clone()
    }

    pub fn staples_served(&self) -> u64 {
        self.staples_served.load(Ordering::Relaxed)
    }

    /// Serves `key` for `names` from the next handshake on: replaces the entry serving
    /// exactly these names, or adds one that takes these names over from older entries.
    pub fn install(&self, names: &[String], key: Arc<CertifiedKey>, source: CertSource) -> Result<Installed, String> {
        let names = normalise(names);
        if names.is_empty() {
            return Err("a certificate to install needs at least one name".into());
        }
        self.write(|entries, seq| {
            let at = entries.iter().position(|e| same_names(&e.names, &names));
            put(entries, at, names, key, source, seq)
        })
    }

    /// Replaces the entry the config made from `configured` (its `cert` path), in place;
    /// without one, installs by the certificate's own names (as `install`).
    pub fn replace_configured(
        &self,
        configured: &Path,
        key: Arc<CertifiedKey>,
        source: CertSource,
    ) -> Result<Installed, String> {
        let names = normalise(&key.cert.first().map(|l| super::x509::dns_names(l)).unwrap_or_default());
        self.write(|entries, seq| {
            let at = entries
                .iter()
                .position(|e| e.configured.as_deref().is_some_and(|c| same_file(c, configured)))
                .or_else(|| entries.iter().position(|e| same_names(&e.names, &names)));
            if at.is_none() && names.is_empty() {
                return Err("the certificate names no host (no DNS subjectAltName, no CN)".into());
            }
            put(entries, at, names, key, source, seq)
        })
    }

    /// Staples `response` (or nothing) to the certificate whose leaf has `sha256`; false
    /// when no entry has it (it was replaced meanwhile).
    pub fn set_staple(&self, sha256: &[u8; 32], response: Option<Vec<u8>>) -> bool {
        let Ok(_writer) = self.writer.lock() else {
            return false;
        };
        let snapshot = self.current.load();
        let mut entries = snapshot.entries.clone();
        let Some(entry) = entries.iter_mut().find(|e| &e.facts.sha256 == sha256) else {
            return false;
        };
        let key = CertifiedKey {
            cert: entry.key.cert.clone(),
            key: Arc::clone(&entry.key.key),
            ocsp: response,
        };
        (entry.staple, entry.unstapled) = stapling(&key, &entry.facts);
        entry.key = Arc::new(key);
        match Snapshot::build(entries) {
            Ok(s) => {
                self.current.store(Arc::new(s));
                true
            }
            Err(_) => false,
        }
    }

    fn write(
        &self,
        change: impl FnOnce(&mut Vec<CertEntry>, u64) -> Result<Installed, String>,
    ) -> Result<Installed, String> {
        let mut seq = self
            .writer
            .lock()
            .map_err(|_| "the certificate store is poisoned".to_string())?;
        *seq += 1;
        let mut entries = self.current.load().entries.clone();
        let installed = change(&mut entries, *seq)?;
        self.current.store(Arc::new(Snapshot::build(entries)?));
        Ok(installed)
    }
}

/// The stapled response's validity (already checked when it was attached), and the key
/// to serve once it has expired.
fn stapling(key: &CertifiedKey, facts: &CertFacts) -> (Option<super::ocsp::Staple>, Option<Arc<CertifiedKey>>) {
    let Some(response) = key.ocsp.as_deref() else {
        return (None, None);
    };
    let staple = super::ocsp::read_response(response, &facts.serial).ok();
    let unstapled = Arc::new(CertifiedKey {
        cert: key.cert.clone(),
        key: Arc::clone(&key.key),
        ocsp: None,
    });
    (staple, Some(unstapled))
}

/// Puts a certificate at `at` (replacing that entry) or adds it, then drops the entries
/// whose every name is now served by another one (never the default).
fn put(
    entries: &mut Vec<CertEntry>,
    at: Option<usize>,
    names: Vec<String>,
    key: Arc<CertifiedKey>,
    source: CertSource,
    seq: u64,
) -> Result<Installed, String> {
    let facts = CertFacts::of(&key)?;
    let (staple, unstapled) = stapling(&key, &facts);
    let now = unix_now().max(0) as u64;
    let (replaced, index) = match at.and_then(|i| entries.get_mut(i).map(|e| (i, e))) {
        Some((i, e)) => {
            let old = std::mem::replace(&mut e.names, names.clone());
            e.key = key;
            e.source = source;
            e.facts = facts;
            e.staple = staple;
            e.unstapled = unstapled;
            e.installed_at = now;
            (Some(old), i)
        }
        None => {
            entries.push(CertEntry {
                names: names.clone(),
                key,
                source,
                facts,
                staple,
                unstapled,
                default: false,
                configured: None,
                installed_at: now,
                seq,
            });
            (None, entries.len() - 1)
        }
    };
    let covered = |e: &CertEntry| e.names.iter().all(|n| names.contains(n));
    // The self-signed stand-in ACME names get until their certificates are issued is no
    // default worth keeping: once every name it served has a real certificate (from this
    // install or earlier ones), it goes and the certificate just installed becomes the
    // default (a client without SNI gets a real certificate too).
    let stand_in = entries.iter().enumerate().position(|(i, e)| {
        i != index
            && e.default
            && e.source == CertSource::SelfSigned
            && e.names.iter().all(|n| {
                entries
                    .iter()
                    .enumerate()
                    .any(|(j, other)| j != i && other.source != CertSource::SelfSigned && other.names.contains(n))
            })
    });
    if stand_in.is_some()
        && let Some(e) = entries.get_mut(index)
    {
        e.default = true;
    }
    let before = entries.len();
    let mut i = 0;
    entries.retain(|e| {
        let keep = stand_in != Some(i) && (i == index || e.default || !covered(e));
        i += 1;
        keep
    });
    Ok(Installed {
        names,
        replaced,
        dropped: before - entries.len(),
    })
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.serve(client_hello.server_name())
    }
}

impl CertStore {
    /// What a handshake with this SNI is served now.
    fn serve(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let snapshot = self.current.load();
        let index = sni.and_then(|n| snapshot.matcher.lookup(n)).or(snapshot.default)?;
        let entry = snapshot.entries.get(index)?;
        if entry.key.ocsp.is_none() {
            return Some(Arc::clone(&entry.key));
        }
        if let Some(until) = entry.staple.and_then(|s| s.next_update)
            && unix_now() >= until
        {
            return Some(Arc::clone(entry.unstapled.as_ref().unwrap_or(&entry.key)));
        }
        self.staples_served.fetch_add(1, Ordering::Relaxed);
        Some(Arc::clone(&entry.key))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn cert(names: &[&str]) -> Arc<CertifiedKey> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(names).unwrap().self_signed(&key).unwrap();
        let der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let provider = super::super::tls::provider();
        Arc::new(CertifiedKey::from_der(vec![cert.der().clone()], der, &provider).unwrap())
    }

    fn file(n: &str) -> CertSource {
        CertSource::File {
            cert: format!("/nonexistent/{n}.pem").into(),
            key: format!("/nonexistent/{n}.key").into(),
        }
    }

    fn pick(store: &CertStore, sni: &str) -> Option<[u8; 32]> {
        let snapshot = store.current.load();
        let i = snapshot.matcher.lookup(sni).or(snapshot.default)?;
        Some(snapshot.entries[i].facts.sha256)
    }

    /// What a client without SNI gets.
    fn pick_default(store: &CertStore) -> Option<[u8; 32]> {
        let snapshot = store.current.load();
        Some(snapshot.entries[snapshot.default?].facts.sha256)
    }

    fn fp(key: &CertifiedKey) -> [u8; 32] {
        CertFacts::of(key).unwrap().sha256
    }

    #[test]
    fn installs_replace_same_names_and_take_over_names() {
        let (a, b) = (cert(&["a.example", "b.example"]), cert(&["*.c.example"]));
        let store = CertStore::new(
            "fe",
            vec![
                (Arc::clone(&a), vec!["a.example".into(), "b.example".into()], file("a")),
                (Arc::clone(&b), vec!["*.c.example".into()], file("c")),
            ],
            Some(0),
        )
        .unwrap();
        assert_eq!(pick(&store, "x.c.example"), Some(fp(&b)));
        assert_eq!(pick(&store, "unknown.example"), Some(fp(&a)), "the default");

        // Same names: replaced in place.
        let b2 = cert(&["*.c.example"]);
        let done = store
            .install(&["*.C.example".into()], Arc::clone(&b2), CertSource::Acme)
            .unwrap();
        assert_eq!(done.replaced, Some(vec!["*.c.example".to_string()]));
        assert_eq!(store.entries().len(), 2);
        assert_eq!(pick(&store, "x.c.example"), Some(fp(&b2)));

        // A subset of a's names: added, wins that name; a keeps the other (and stays default).
        let a2 = cert(&["a.example"]);
        let done = store
            .install(&["a.example".into()], Arc::clone(&a2), CertSource::Acme)
            .unwrap();
        assert_eq!((done.replaced, done.dropped), (None, 0));
        assert_eq!(pick(&store, "a.example"), Some(fp(&a2)));
        assert_eq!(pick(&store, "b.example"), Some(fp(&a)));

        // Covering every name of b2's entry (not the default): that entry goes.
        let wide = cert(&["*.c.example", "d.example"]);
        let done = store
            .install(
                &["*.c.example".into(), "d.example".into()],
                Arc::clone(&wide),
                CertSource::Acme,
            )
            .unwrap();
        assert_eq!(done.dropped, 1);
        assert_eq!(pick(&store, "y.c.example"), Some(fp(&wide)));
        assert_eq!(store.entries().len(), 3);
        assert!(store.install(&[], wide, CertSource::Acme).is_err());
    }

    /// ACME's self-signed stand-in is the default until the real certificate for its names
    /// is installed: then it is gone (`show certs`, metrics) and the issued one is served to
    /// clients without SNI too.
    #[test]
    fn an_issued_certificate_replaces_the_self_signed_default() {
        let pending = cert(&["a.example", "b.example"]);
        let store = CertStore::new(
            "fe",
            vec![(
                Arc::clone(&pending),
                vec!["a.example".into(), "b.example".into()],
                CertSource::SelfSigned,
            )],
            Some(0),
        )
        .unwrap();
        assert_eq!(pick_default(&store), Some(fp(&pending)));
        // One order's names: the stand-in stays the default, for the other's.
        let a = cert(&["a.example"]);
        store
            .install(&["a.example".into()], Arc::clone(&a), CertSource::Acme)
            .unwrap();
        assert_eq!(pick_default(&store), Some(fp(&pending)));
        assert_eq!(pick(&store, "a.example"), Some(fp(&a)));
        // The other order's: every name is served by a real certificate, the stand-in goes
        // and the one just issued is the default.
        let b = cert(&["b.example"]);
        let done = store
            .install(&["b.example".into()], Arc::clone(&b), CertSource::Acme)
            .unwrap();
        assert_eq!(done.dropped, 1);
        assert_eq!(pick_default(&store), Some(fp(&b)));
        assert!(
            store.entries().iter().all(|e| e.source != CertSource::SelfSigned),
            "the stand-in is still listed"
        );
        assert_eq!(store.entries().len(), 2);
        assert_eq!(pick(&store, "a.example"), Some(fp(&a)));
        assert_eq!(pick(&store, "b.example"), Some(fp(&b)));
    }

    #[test]
    fn configured_slots_are_replaced_in_place_and_staples_swapped() {
        let a = cert(&["a.example"]);
        let store = CertStore::new("fe", vec![(a, vec!["a.example".into()], file("a"))], None).unwrap();
        let renamed = cert(&["new.example"]);
        let done = store
            .replace_configured(Path::new("/nonexistent/a.pem"), Arc::clone(&renamed), file("a"))
            .unwrap();
        assert_eq!(done.replaced, Some(vec!["a.example".to_string()]));
        assert_eq!(pick(&store, "a.example"), None, "no default: unknown names fail");
        assert_eq!(pick(&store, "new.example"), Some(fp(&renamed)));
        let entries = store.entries();
        assert_eq!(entries[0].configured.as_deref(), Some(Path::new("/nonexistent/a.pem")));

        assert!(store.set_staple(&fp(&renamed), Some(vec![1, 2, 3])));
        assert_eq!(store.entries()[0].key.ocsp.as_deref(), Some(&[1u8, 2, 3][..]));
        assert!(!store.set_staple(&[0; 32], None));
    }

    #[test]
    fn a_staple_is_served_until_its_next_update() {
        let a = cert(&["a.example"]);
        let serial = CertFacts::of(&a).unwrap().serial;
        let store = CertStore::new("fe", vec![(Arc::clone(&a), vec!["a.example".into()], file("a"))], None).unwrap();
        let response =
            |next: &str| super::super::ocsp::tests::response(0, &serial, &[0x80, 0], "20200101000000Z", Some(next));
        assert!(store.set_staple(&fp(&a), Some(response("29990101000000Z"))));
        assert!(store.serve(Some("a.example")).unwrap().ocsp.is_some());
        assert_eq!(store.staples_served(), 1);
        assert_eq!(store.entries()[0].staple.unwrap().next_update, Some(32_472_144_000));
        // Past its nextUpdate: the certificate is served bare.
        assert!(store.set_staple(&fp(&a), Some(response("20210101000000Z"))));
        let served = store.serve(Some("a.example")).unwrap();
        assert!(served.ocsp.is_none());
        assert_eq!(served.cert, a.cert);
        assert_eq!(store.staples_served(), 1);
    }
}
