//! TLS test support: certificates made in the test (rcgen), TLS origins (tokio-rustls on
//! their own thread), rustls clients, and `openssl s_client` runs.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tollgate-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A test CA that signs leaf certificates.
pub struct Ca {
    pub issuer: Issuer<'static, KeyPair>,
    pub der: CertificateDer<'static>,
    pub pem: String,
}

impl Ca {
    pub fn new(cn: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca {
            der: cert.der().clone(),
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    pub fn write(&self, dir: &TempDir, name: &str) -> PathBuf {
        let path = dir.path(name);
        std::fs::write(&path, &self.pem).unwrap();
        path
    }

    /// A leaf for `names` with subject CN `cn`; RSA-2048 if `rsa`, else ECDSA P-256.
    pub fn leaf(&self, names: &[&str], cn: &str, rsa: bool) -> Leaf {
        let mut params = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = if rsa {
            KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap()
        } else {
            KeyPair::generate().unwrap()
        };
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            der: cert.der().clone(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            key_der: key.serialize_der(),
        }
    }
}

pub struct Leaf {
    pub der: CertificateDer<'static>,
    pub cert_pem: String,
    pub key_pem: String,
    pub key_der: Vec<u8>,
}

impl Leaf {
    /// Writes `<name>.crt` and `<name>.key`; returns their paths.
    pub fn write(&self, dir: &TempDir, name: &str) -> (PathBuf, PathBuf) {
        let (c, k) = (dir.path(&format!("{name}.crt")), dir.path(&format!("{name}.key")));
        std::fs::write(&c, &self.cert_pem).unwrap();
        std::fs::write(&k, &self.key_pem).unwrap();
        (c, k)
    }

    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()));
        let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![self.der.clone()], key)
            .unwrap();
        Arc::new(cfg)
    }
}

/// A `[[frontend.tls.cert]]` entry.
pub fn cert_entry(paths: &(PathBuf, PathBuf), default: bool) -> String {
    format!(
        "[[frontend.tls.cert]]\ncert = \"{}\"\nkey = \"{}\"\n{}",
        paths.0.display(),
        paths.1.display(),
        if default { "default = true\n" } else { "" }
    )
}

/// A rustls client trusting `ca`.
pub fn client_config(ca: &Ca) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der.clone()).unwrap();
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// What a TLS origin connection saw.
pub type TlsHandler = fn(Vec<u8>, Option<String>) -> Vec<u8>;

/// A TLS-terminating origin on its own thread: reads the request until the client's EOF
/// (close_notify), answers `handler(request, sni)`, closes. Returns its address.
pub fn tls_origin(config: Arc<rustls::ServerConfig>, handler: TlsHandler) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            loop {
                let Ok((s, _)) = listener.accept().await else { continue };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(s).await else { return };
                    let sni = tls.get_ref().1.server_name().map(str::to_string);
                    let mut req = Vec::new();
                    let _ = tls.read_to_end(&mut req).await;
                    let reply = handler(req, sni);
                    let _ = tls.write_all(&reply).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
    });
    addr
}

/// Connects with rustls (SNI `name`) to `addr`, sends `request`, half-closes (close_notify
/// + FIN), reads the reply to EOF. Returns the reply and the server's leaf certificate.
pub fn tls_request(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    name: &str,
    request: &[u8],
) -> std::io::Result<(Vec<u8>, CertificateDer<'static>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let name = ServerName::try_from(name.to_string()).unwrap();
    rt.block_on(async move {
        let s = tokio::net::TcpStream::connect(addr).await?;
        let connector = tokio_rustls::TlsConnector::from(config);
        let mut tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, s))
            .await
            .map_err(|_| std::io::Error::other("handshake timed out"))??;
        let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].clone().into_owned();
        tls.write_all(request).await?;
        tls.shutdown().await?;
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), tls.read_to_end(&mut reply))
            .await
            .map_err(|_| std::io::Error::other("reply timed out"))??;
        Ok((reply, leaf))
    })
}

/// Runs `openssl s_client` with `args`, feeding `stdin`; returns stdout + stderr. With a
/// non-empty `stdin` it waits for the server to close (`-ign_eof`), so replies and TLS 1.3
/// tickets are read.
pub fn s_client(addr: SocketAddr, args: &[&str], stdin: &[u8]) -> String {
    let mut child = Command::new("openssl")
        .arg("s_client")
        .arg("-connect")
        .arg(addr.to_string())
        .args(args)
        .args(if stdin.is_empty() { &[][..] } else { &["-ign_eof"][..] })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = wait_bounded(child, Duration::from_secs(20));
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits for a child at most `limit` (then kills that child by its handle).
pub fn wait_bounded(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The `subject=` line of an s_client transcript.
pub fn subject(transcript: &str) -> &str {
    transcript
        .lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or_else(|| panic!("no subject in:\n{transcript}"))
}

pub fn path_str(p: &Path) -> String {
    p.display().to_string()
}
