//! Kernel TLS: the once-per-process probe, and the mid-connection handover of a terminated
//! client connection from userspace rustls to the kernel's `tls` ULP.
//!
//! The probe runs at startup (when some frontend enables `[frontend.tls.ktls]`, in
//! `runtime::worker::run`), before any handshake: once a handshake's secrets were extracted
//! there is no way back to userspace, so the choice must be made first. Without the ULP the
//! frontend serves with userspace rustls and says so once in the log, and no session ever
//! extracts secrets: a session takes the kTLS path only when the cached probe said yes
//! (`proxy::tcp`). The config stays a pure text → model step: it allows secret extraction in
//! the rustls config wherever kTLS is enabled, and never probes the kernel.
//!
//! # The handover
//!
//! A kTLS-eligible connection is relayed as a `KtlsClient` endpoint: rustls over a
//! `CorkStream` (the socket, plus a sans-io `RecordFraming` tracker of the TLS records
//! rustls was handed). After `after_bytes` of plaintext moved (both directions), the handover
//! is due (`Handover`): the stream is *corked* (reads stop at the end of the current
//! record) and at the first moment when
//!
//! - rustls has no TLS data left to send (flushed),
//! - every received byte handed to rustls ends a complete record, rustls processed them all
//!   and holds no plaintext for us,
//! - the peer has not closed and we have not half-closed,
//! - the version and cipher suite are ones the kernel takes,
//!
//! the secrets (with the record sequence numbers) are extracted from rustls, installed with
//! `TCP_ULP "tls"` + `TLS_TX` + `TLS_RX`, and the endpoint becomes the raw socket: the relay's
//! copy and splice paths carry on unchanged, the kernel doing the record layer. If the
//! install fails after the keys left rustls, there is no way back: the connection is closed
//! with an error (`ktls_install_failures`), never silently.
//!
//! After the handover: a non-application-data record from the peer makes `recv` fail (`EIO`,
//! `EINVAL` for splice). It is read with its record type: a `close_notify` alert is end of
//! stream; anything else (a TLS 1.3 KeyUpdate, for instance) closes the connection, counted
//! as `ktls_unsupported_record`. Our half-close sends `close_notify` through the kernel
//! before `shutdown(Write)`.
//!
//! Key updates *by us* are not done after the handover: a connection that lives past the
//! AEAD's confidentiality limit (2^24.5 records for AES-GCM) would need them.

use std::io::{self, Read};
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, ready};

use rustix::io::Errno;
use rustls::{CipherSuite, ConnectionTrafficSecrets, ProtocolVersion};
use socket2::SockRef;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tollgate_sys::sockopt::{self, KtlsCipher, KtlsDirection, KtlsSecrets, TlsVersion};

use crate::relay::Endpoint;
use crate::stats::WorkerStats;

/// `Ok` if kTLS can be used; the reason otherwise. Probes and logs only the first time.
pub fn available() -> Result<(), &'static str> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    let result = PROBE.get_or_init(|| {
        let r = tollgate_sys::sockopt::probe_ktls();
        match &r {
            Ok(()) => tracing::info!("kernel TLS available"),
            Err(reason) => {
                tracing::warn!(%reason, "kTLS enabled in the config but unavailable; serving TLS with userspace rustls")
            }
        }
        r
    });
    result.as_ref().map(|_| ()).map_err(String::as_str)
}

// ---------------------------------------------------------------------------------------
// Record framing (sans-io)
// ---------------------------------------------------------------------------------------

/// TLS record header: type (1), legacy version (2), length (2).
const RECORD_HEADER: usize = 5;

/// Follows the TLS record framing of a byte stream, to know whether the bytes seen so far end
/// exactly at a record boundary, and how many more bytes finish the current record (or its
/// header, while the length is not known yet).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordFraming {
    header: [u8; RECORD_HEADER],
    /// Header bytes seen of the current record (0 while in a body or at a boundary).
    header_seen: usize,
    /// Body bytes of the current record still to come.
    body_left: usize,
}

impl RecordFraming {
    /// Accounts for `data`, the next bytes of the stream.
    pub(crate) fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(data.len());
                self.body_left -= n;
                data = data.get(n..).unwrap_or_default();
                continue;
            }
            let n = (RECORD_HEADER - self.header_seen).min(data.len());
            if let (Some(dst), Some(src)) = (
                self.header.get_mut(self.header_seen..self.header_seen + n),
                data.get(..n),
            ) {
                dst.copy_from_slice(src);
            }
            self.header_seen += n;
            data = data.get(n..).unwrap_or_default();
            if self.header_seen == RECORD_HEADER {
                self.header_seen = 0;
                self.body_left = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
            }
        }
    }

    /// The bytes seen so far are whole records.
    pub(crate) fn at_boundary(&self) -> bool {
        self.header_seen == 0 && self.body_left == 0
    }

    /// How many bytes may be read without crossing the end of the current record (or of its
    /// header). At a boundary: a whole header.
    pub(crate) fn until_boundary(&self) -> usize {
        if self.body_left > 0 {
            self.body_left
        } else {
            RECORD_HEADER - self.header_seen
        }
    }
}

// ---------------------------------------------------------------------------------------
// CorkStream
// ---------------------------------------------------------------------------------------

/// The transport under rustls for a kTLS-eligible connection: passes everything through,
/// tracks the record framing of what it hands to rustls, and once corked never reads past the
/// end of the current record (so rustls can be left holding no partial record).
#[derive(Debug)]
pub(crate) struct CorkStream<IO> {
    io: IO,
    framing: RecordFraming,
    corked: bool,
    eof: bool,
}

impl<IO> CorkStream<IO> {
    pub(crate) fn new(io: IO) -> Self {
        CorkStream {
            io,
            framing: RecordFraming::default(),
            corked: false,
            eof: false,
        }
    }

    pub(crate) fn into_inner(self) -> IO {
        self.io
    }

    /// Everything handed to rustls so far is whole records.
    pub(crate) fn at_boundary(&self) -> bool {
        self.framing.at_boundary()
    }

    /// Corked and at a boundary: reading more now would hand rustls part of a new record.
    fn stopped(&self) -> bool {
        self.corked && self.framing.at_boundary()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for CorkStream<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.stopped() {
            // Only reached through rustls' own read loop: the endpoint (`KtlsClient`) decides
            // what happens next (hand over, or uncork), so make sure it is asked soon.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let limit = if this.corked {
            this.framing.until_boundary().min(buf.remaining())
        } else {
            buf.remaining()
        };
        let unfilled = buf.initialize_unfilled_to(limit);
        let mut sub = ReadBuf::new(unfilled);
        ready!(Pin::new(&mut this.io).poll_read(cx, &mut sub))?;
        let n = sub.filled().len();
        this.framing.feed(sub.filled());
        if n == 0 && limit > 0 {
            this.eof = true;
        }
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for CorkStream<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

// ---------------------------------------------------------------------------------------
// The handover decision (sans-io)
// ---------------------------------------------------------------------------------------

/// Where a connection stands with respect to kTLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handover {
    /// In userspace; hand over once `after_bytes` of plaintext moved.
    Pending { after_bytes: u64 },
    /// The kernel does the record layer.
    Installed,
    /// Stays in userspace for good (peer closed, we half-closed, unsupported suite) — or the
    /// install failed and the connection is being closed.
    Refused,
}

/// What the connection looks like at a possible handover point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Readiness {
    /// Received bytes handed to rustls end at a record boundary.
    pub at_boundary: bool,
    /// rustls has TLS data to send (not flushed yet).
    pub wants_write: bool,
    /// rustls holds received plaintext not read yet.
    pub plaintext_pending: bool,
    /// The peer sent close_notify, or its FIN was seen.
    pub peer_closed: bool,
    /// We half-closed (sent close_notify) already.
    pub write_closed: bool,
    pub handshaking: bool,
    /// Version and cipher suite are ones the kernel takes.
    pub supported: bool,
}

/// The outcome of [`Handover::decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Below the threshold (or not pending): nothing to do.
    NotDue,
    /// Due, but not at a safe point: keep going in userspace (corked) and ask again.
    Wait,
    /// Extract the secrets and install them now.
    Go,
    /// Never hand this connection over.
    Refuse,
}

impl Handover {
    /// Cheap check, before any rustls state is looked at.
    pub(crate) fn due(&self, moved: u64) -> bool {
        matches!(*self, Handover::Pending { after_bytes } if moved >= after_bytes)
    }

    /// Whether to hand over now. Secret extraction consumes the rustls connection, so `Go`
    /// is only said when nothing is buffered anywhere in rustls, in either direction.
    pub(crate) fn decide(&self, moved: u64, r: &Readiness) -> Decision {
        if !self.due(moved) {
            return Decision::NotDue;
        }
        if r.peer_closed || r.write_closed || !r.supported {
            return Decision::Refuse;
        }
        if r.handshaking || !r.at_boundary || r.wants_write || r.plaintext_pending {
            return Decision::Wait;
        }
        Decision::Go
    }
}

// ---------------------------------------------------------------------------------------
// Key mapping: rustls secrets → linux/tls.h crypto_info
// ---------------------------------------------------------------------------------------

/// The kernel's cipher for a rustls cipher suite (`None`: the kernel path does not take it).
pub(crate) fn kernel_cipher(suite: CipherSuite) -> Option<KtlsCipher> {
    match suite {
        CipherSuite::TLS13_AES_128_GCM_SHA256
        | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => Some(KtlsCipher::Aes128Gcm),
        CipherSuite::TLS13_AES_256_GCM_SHA384
        | CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        | CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => Some(KtlsCipher::Aes256Gcm),
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
        | CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        | CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => Some(KtlsCipher::Chacha20Poly1305),
        _ => None,
    }
}

/// The kernel's protocol version for a rustls one.
pub(crate) fn kernel_version(v: ProtocolVersion) -> Option<TlsVersion> {
    match v {
        ProtocolVersion::TLSv1_2 => Some(TlsVersion::Tls12),
        ProtocolVersion::TLSv1_3 => Some(TlsVersion::Tls13),
        _ => None,
    }
}

/// One direction's `crypto_info` contents, in fixed arrays (no allocation), wiped on drop.
pub(crate) struct KernelKeys {
    pub version: TlsVersion,
    pub cipher: KtlsCipher,
    key: [u8; 32],
    iv: [u8; 12],
    salt: [u8; 4],
    rec_seq: [u8; 8],
}

impl std::fmt::Debug for KernelKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelKeys")
            .field("version", &self.version)
            .field("cipher", &self.cipher)
            .finish_non_exhaustive()
    }
}

impl Drop for KernelKeys {
    fn drop(&mut self) {
        self.key = [0; 32];
        self.iv = [0; 12];
        self.salt = [0; 4];
        std::hint::black_box(&mut *self);
    }
}

impl KernelKeys {
    /// Maps one direction of rustls' extracted secrets (`seq` = sequence number of the next
    /// record) to the kernel's fields. `None` if the key length does not fit the cipher.
    ///
    /// rustls gives the 12-byte nonce base `N` (the TLS 1.3 `iv`; for TLS 1.2 AES-GCM the
    /// 4-byte implicit salt followed by 8 key-block bytes) and XORs the record sequence number
    /// into its last 8 bytes for every record, for every suite. The kernel
    /// (`net/tls`, `tls_xor_iv_with_seq` / `tls_advance_record_sn`) does:
    ///
    /// - TLS 1.3 AES-GCM: nonce = `salt ‖ (iv ⊕ seq)` → `salt = N[0..4]`, `iv = N[4..12]`;
    /// - ChaCha20-Poly1305 (1.2 and 1.3): nonce = `iv ⊕ seq` over 12 bytes → `iv = N`, no salt;
    /// - TLS 1.2 AES-GCM: nonce = `salt ‖ explicit`, where `explicit` starts at `iv` and is
    ///   *incremented* per record (and sent in the clear). rustls used `N[4..12] ⊕ seq` for
    ///   the records it sent, so starting the kernel at `N[4..12] ⊕ seq` and counting up would
    ///   repeat nonces rustls already used under the same key (e.g. `x⊕5 + 1 = x⊕4` when the
    ///   low bits of `x` are `111`). The kernel's explicit nonce starts at the sequence number
    ///   itself instead (RFC 5288 §3's suggestion), which collides with rustls' pseudo-random
    ///   `N[4..12] ⊕ k` only with negligible probability. For RX the kernel reads the explicit
    ///   nonce from each record, so only `salt` matters there.
    pub(crate) fn new(version: TlsVersion, cipher: KtlsCipher, key: &[u8], nonce: &[u8; 12], seq: u64) -> Option<Self> {
        let (key_len, _, _, _) = cipher.lengths();
        if key.len() != key_len {
            return None;
        }
        let mut k = KernelKeys {
            version,
            cipher,
            key: [0; 32],
            iv: [0; 12],
            salt: [0; 4],
            rec_seq: seq.to_be_bytes(),
        };
        k.key.get_mut(..key_len)?.copy_from_slice(key);
        let [s0, s1, s2, s3, rest @ ..] = *nonce;
        match (cipher, version) {
            (KtlsCipher::Chacha20Poly1305, _) => k.iv = *nonce,
            (_, TlsVersion::Tls13) => {
                k.salt = [s0, s1, s2, s3];
                k.iv.get_mut(..8)?.copy_from_slice(&rest);
            }
            (_, TlsVersion::Tls12) => {
                k.salt = [s0, s1, s2, s3];
                k.iv.get_mut(..8)?.copy_from_slice(&k.rec_seq);
            }
        }
        Some(k)
    }

    /// From one direction of `ExtractedSecrets` (`(seq, secrets)`).
    pub(crate) fn from_rustls(version: TlsVersion, seq: u64, secrets: &ConnectionTrafficSecrets) -> Option<Self> {
        let (cipher, key, iv) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (KtlsCipher::Aes128Gcm, key, iv),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (KtlsCipher::Aes256Gcm, key, iv),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (KtlsCipher::Chacha20Poly1305, key, iv),
            _ => return None,
        };
        let nonce: &[u8; 12] = iv.as_ref().try_into().ok()?;
        Self::new(version, cipher, key.as_ref(), nonce, seq)
    }

    /// The slices `set_ktls_crypto` takes, cut to the cipher's lengths.
    pub(crate) fn secrets(&self) -> KtlsSecrets<'_> {
        let (k, i, s, r) = self.cipher.lengths();
        KtlsSecrets {
            key: self.key.get(..k).unwrap_or_default(),
            iv: self.iv.get(..i).unwrap_or_default(),
            salt: self.salt.get(..s).unwrap_or_default(),
            rec_seq: self.rec_seq.get(..r).unwrap_or_default(),
        }
    }

    fn install(&self, stream: &TcpStream, direction: KtlsDirection) -> io::Result<()> {
        sockopt::set_ktls_crypto(stream.as_fd(), direction, self.version, self.cipher, &self.secrets())
    }
}

// ---------------------------------------------------------------------------------------
// The relay endpoint
// ---------------------------------------------------------------------------------------

/// A terminated client connection that started in userspace rustls.
pub(crate) type UserStream = tokio_rustls::server::TlsStream<CorkStream<TcpStream>>;

#[allow(clippy::large_enum_variant)] // one per connection, moved once at the handover
enum Conn {
    User(UserStream),
    Kernel(TcpStream),
    /// Only while the handover moves the connection (or after it failed).
    Gone,
}

/// The client side of a relay on a kTLS-eligible frontend: rustls until the handover, then
/// the raw socket with the kernel doing TLS (see the module doc).
pub(crate) struct KtlsClient<'a> {
    conn: Conn,
    handover: Handover,
    /// Plaintext moved through this endpoint in userspace, both directions.
    moved: u64,
    /// Our half-close started (no handover after that).
    write_closed: bool,
    close_notify_sent: bool,
    stats: &'a WorkerStats,
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "kTLS handover failed; connection closed")
}

impl<'a> KtlsClient<'a> {
    pub(crate) fn new(stream: UserStream, after_bytes: u64, stats: &'a WorkerStats) -> Self {
        KtlsClient {
            conn: Conn::User(stream),
            handover: Handover::Pending { after_bytes },
            moved: 0,
            write_closed: false,
            close_notify_sent: false,
            stats,
        }
    }

    #[cfg(test)]
    pub(crate) fn handover(&self) -> Handover {
        self.handover
    }

    /// Hands over if due and safe. `Ok(true)`: the kernel has the connection.
    fn try_handover(&mut self, cx: &mut Context<'_>) -> io::Result<bool> {
        match self.handover {
            Handover::Installed => return Ok(true),
            Handover::Refused => return Ok(false),
            Handover::Pending { .. } if !self.handover.due(self.moved) => return Ok(false),
            Handover::Pending { .. } => {}
        }
        let Conn::User(tls) = &mut self.conn else {
            return Err(gone());
        };
        let (cork, conn) = tls.get_mut();
        cork.corked = true;
        let io_state = conn
            .process_new_packets()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let target = conn
            .protocol_version()
            .and_then(kernel_version)
            .zip(conn.negotiated_cipher_suite().and_then(|s| kernel_cipher(s.suite())));
        let readiness = Readiness {
            at_boundary: cork.at_boundary(),
            wants_write: conn.wants_write(),
            plaintext_pending: io_state.plaintext_bytes_to_read() > 0,
            peer_closed: io_state.peer_has_closed() || cork.eof,
            write_closed: self.write_closed,
            handshaking: conn.is_handshaking(),
            supported: target.is_some(),
        };
        match self.handover.decide(self.moved, &readiness) {
            Decision::NotDue | Decision::Wait => Ok(false),
            Decision::Refuse => {
                self.handover = Handover::Refused;
                cork.corked = false;
                Ok(false)
            }
            Decision::Go => {
                let Some((version, _)) = target else {
                    return Ok(false);
                };
                self.install(version)?;
                // The other direction may be parked on a wakeup that now comes from the raw
                // socket: let the relay poll both pumps again.
                cx.waker().wake_by_ref();
                Ok(true)
            }
        }
    }

    /// Extracts the secrets (consuming the rustls connection) and installs them. On failure
    /// the connection is gone: counted and reported, never silently dropped.
    fn install(&mut self, version: TlsVersion) -> io::Result<()> {
        self.handover = Handover::Refused;
        let Conn::User(tls) = std::mem::replace(&mut self.conn, Conn::Gone) else {
            return Err(gone());
        };
        let (cork, conn) = tls.into_inner();
        let stream = cork.into_inner();
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            self.stats.ktls_install_failures.add(1);
            tracing::warn!(error = %e, "kTLS handover failed at {what}; closing the connection");
            io::Error::other(format!("kTLS handover failed at {what}: {e}"))
        };
        let secrets = conn
            .dangerous_extract_secrets()
            .map_err(|e| fail("secret extraction", &e))?;
        let (tx_seq, tx) = &secrets.tx;
        let (rx_seq, rx) = &secrets.rx;
        let (Some(tx), Some(rx)) = (
            KernelKeys::from_rustls(version, *tx_seq, tx),
            KernelKeys::from_rustls(version, *rx_seq, rx),
        ) else {
            return Err(fail("key mapping", &"unsupported traffic secrets"));
        };
        sockopt::set_tcp_ulp(stream.as_fd(), "tls").map_err(|e| fail("TCP_ULP", &e))?;
        tx.install(&stream, KtlsDirection::Tx).map_err(|e| fail("TLS_TX", &e))?;
        rx.install(&stream, KtlsDirection::Rx).map_err(|e| fail("TLS_RX", &e))?;
        self.stats.ktls_offloaded.add(1);
        self.conn = Conn::Kernel(stream);
        self.handover = Handover::Installed;
        Ok(())
    }

    /// Reads plaintext in userspace; stops at a record boundary once corked so the handover
    /// can happen (see the module doc).
    fn poll_read_user(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        // Bounded: each turn either returns or has flushed and re-decided (hand over or
        // refuse), which changes the state; the bound is a guard against a livelock.
        for _ in 0..4 {
            if self.try_handover(cx)? {
                return self.poll_read_kernel(cx, buf);
            }
            let Conn::User(tls) = &mut self.conn else {
                return Poll::Ready(Err(gone()));
            };
            if tls.get_ref().0.stopped() {
                // Corked at a boundary: hand out what rustls holds, else flush so the
                // handover can happen on the next turn.
                match tls.get_mut().1.reader().read(buf) {
                    Ok(n) => return Poll::Ready(Ok(n)),
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Poll::Ready(Ok(0)),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Poll::Ready(Err(e)),
                }
                ready!(Pin::new(&mut *tls).poll_flush(cx))?;
                continue;
            }
            let mut rb = ReadBuf::new(buf);
            match Pin::new(&mut *tls).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    self.moved += n as u64;
                    return Poll::Ready(Ok(n));
                }
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => return Poll::Ready(Ok(0)),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending if tls.get_ref().0.stopped() => continue,
                Poll::Pending => return Poll::Pending,
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    fn poll_read_kernel(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match &self.conn {
            Conn::Kernel(s) => Endpoint::poll_read(&mut &*s, cx, buf),
            _ => Poll::Ready(Err(gone())),
        }
    }

    /// A read on the kTLS socket failed: the kernel met a record that is not application data.
    /// Reads it with its type: close_notify is end of stream, anything else closes.
    fn classify_kernel_read_error(&mut self, e: io::Error) -> io::Result<()> {
        let Conn::Kernel(stream) = &self.conn else {
            return Err(e);
        };
        // EIO from recv, EINVAL from splice: what a kTLS socket returns for a control record.
        if !matches!(Errno::from_io_error(&e), Some(Errno::IO | Errno::INVAL)) {
            return Err(e);
        }
        let mut record = [0u8; 256];
        match sockopt::recv_tls_record(stream.as_fd(), &mut record) {
            Ok((Some(sockopt::TLS_RECORD_ALERT), n)) => match record.get(..n) {
                Some([_, 0]) => Ok(()), // close_notify
                _ => Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    format!("kTLS: peer sent TLS alert {:?}", record.get(..n.min(2))),
                )),
            },
            Ok((Some(record_type), _)) if record_type != sockopt::TLS_RECORD_APPLICATION_DATA => {
                self.stats.ktls_unsupported_record.add(1);
                Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "kTLS: peer sent a TLS record of type {record_type} (post-handshake message such as \
                         a TLS 1.3 KeyUpdate); not supported after the handover, closing"
                    ),
                ))
            }
            _ => Err(e),
        }
    }
}

impl Endpoint for KtlsClient<'_> {
    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &self.conn {
            Conn::Kernel(s) => s.poll_read_ready(cx),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match self.conn {
            Conn::Kernel(_) => self.poll_read_kernel(cx, buf),
            _ => self.poll_read_user(cx, buf),
        }
    }

    fn poll_write(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.try_handover(cx)? {
            return match &self.conn {
                Conn::Kernel(s) => Endpoint::poll_write(&mut &*s, cx, buf),
                _ => Poll::Ready(Err(gone())),
            };
        }
        let Conn::User(tls) = &mut self.conn else {
            return Poll::Ready(Err(gone()));
        };
        let n = ready!(Pin::new(tls).poll_write(cx, buf))?;
        self.moved += n as u64;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.conn {
            Conn::Kernel(_) => Poll::Ready(Ok(())),
            Conn::Gone => Poll::Ready(Err(gone())),
            Conn::User(tls) => {
                ready!(Pin::new(tls).poll_flush(cx))?;
                // Flushed: a natural handover point.
                self.try_handover(cx)?;
                Poll::Ready(Ok(()))
            }
        }
    }

    fn poll_shutdown_write(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.write_closed = true;
        if self.handover != Handover::Installed {
            self.handover = Handover::Refused;
        }
        match &mut self.conn {
            Conn::Gone => Poll::Ready(Err(gone())),
            Conn::User(tls) => {
                tls.get_mut().0.corked = false;
                Pin::new(tls).poll_shutdown(cx)
            }
            Conn::Kernel(s) => {
                // close_notify through the kernel (it encrypts the alert record), then FIN.
                while !self.close_notify_sent {
                    match s.try_io(Interest::WRITABLE, || sockopt::send_tls_alert_close_notify(s.as_fd())) {
                        Ok(()) => self.close_notify_sent = true,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready!(s.poll_write_ready(cx))?,
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
                Poll::Ready(SockRef::from(&*s).shutdown(Shutdown::Write))
            }
        }
    }

    fn raw(&self) -> Option<&TcpStream> {
        match &self.conn {
            Conn::Kernel(s) => Some(s),
            _ => None,
        }
    }

    fn read_failed(&mut self, e: io::Error) -> io::Result<()> {
        self.classify_kernel_read_error(e)
    }
}

#[cfg(test)]
mod tests;
