//! TLS termination: the handshake, under the `max_handshakes` budget and the
//! `timeouts.tls_handshake` deadline, with counters by outcome and by what was negotiated
//! (group, version, suite).
//!
//! [`accept`] is the one entry point for every mode: TCP mode relays the plaintext, HTTP
//! mode parses it. The `ServerConfig` comes from the config model, shared by all workers
//! (one ticketer, one session cache), so a session resumes on whichever core accepts it.

use std::io;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::{LazyConfigAcceptor, TlsAcceptor};

use crate::config::acme::{ACME_TLS_ALPN, offers_acme_tls};
use crate::config::model::FrontendTls;
use crate::ctx::WorkerCtx;
use crate::error::{Error, ErrorKind, Side};
use crate::stats::{Counter, WorkerStats};

/// A terminated client connection.
pub(crate) type ServerTlsStream = tokio_rustls::server::TlsStream<TcpStream>;

/// Why a handshake failed, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandshakeFailure {
    Timeout,
    /// A protocol error or an alert (either way).
    Protocol,
    /// No certificate for the SNI the client sent (or none sent, without a default).
    NoCert,
    /// The client closed or reset the connection mid-handshake.
    Closed,
    /// `[frontend.tls.client_auth]`: no client certificate where one is required, or one
    /// that does not verify (unknown CA, expired, revoked).
    ClientCert,
}

impl HandshakeFailure {
    fn context(self) -> &'static str {
        match self {
            HandshakeFailure::Timeout => "TLS handshake: timeout",
            HandshakeFailure::Protocol => "TLS handshake: protocol",
            HandshakeFailure::NoCert => "TLS handshake: no-certificate",
            HandshakeFailure::Closed => "TLS handshake: closed",
            HandshakeFailure::ClientCert => "TLS handshake: client certificate",
        }
    }

    fn classify(e: &io::Error) -> Self {
        match e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
            Some(rustls::Error::General(msg)) if msg.contains("no server certificate") => HandshakeFailure::NoCert,
            // On the server side these are about the client's certificate.
            Some(rustls::Error::NoCertificatesPresented | rustls::Error::InvalidCertificate(_)) => {
                HandshakeFailure::ClientCert
            }
            Some(_) => HandshakeFailure::Protocol,
            None if crate::error::is_peer_reset(e) => HandshakeFailure::Closed,
            None => HandshakeFailure::Protocol,
        }
    }

    fn counter(self, stats: &WorkerStats) -> &Counter {
        match self {
            HandshakeFailure::Timeout => &stats.tls_fail_timeout,
            HandshakeFailure::Protocol => &stats.tls_fail_protocol,
            HandshakeFailure::NoCert => &stats.tls_fail_no_cert,
            HandshakeFailure::Closed => &stats.tls_fail_closed,
            HandshakeFailure::ClientCert => &stats.tls_fail_client_cert,
        }
    }
}

/// Holds `tls_handshakes_active` up for the life of one handshake.
struct Active<'a>(&'a Counter);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.sub(1);
    }
}

/// Runs the server side of a TLS handshake on `stream`.
///
/// Waits for a `max_handshakes` slot first (the wait counts against the handshake
/// deadline), so a flood of handshakes queues instead of eating every core.
pub(crate) async fn accept<IO: AsyncRead + AsyncWrite + Unpin>(
    ctx: &WorkerCtx,
    tls: &FrontendTls,
    stream: IO,
) -> Result<tokio_rustls::server::TlsStream<IO>, Error> {
    let stats = &ctx.stats;
    let limit = ctx.shared.config.timeouts.tls_handshake;
    let deadline = Instant::now() + limit;
    let fail = |reason: HandshakeFailure, source: Option<io::Error>| {
        reason.counter(stats).add(1);
        // A client hanging up mid-handshake is routine (debug); the rest is logged at warn.
        let kind = match reason {
            HandshakeFailure::Closed => ErrorKind::PeerClosed,
            _ => ErrorKind::Tls,
        };
        let e = Error::new(kind, Side::Front, reason.context());
        match source {
            Some(s) => e.with_source(s),
            None => e,
        }
    };
    let _permit = match Arc::clone(&ctx.shared.handshakes).try_acquire_owned() {
        Ok(p) => p,
        Err(_) => {
            stats.tls_handshake_waits.add(1);
            match tokio::time::timeout_at(deadline, Arc::clone(&ctx.shared.handshakes).acquire_owned()).await {
                Ok(Ok(p)) => p,
                _ => return Err(fail(HandshakeFailure::Timeout, None)),
            }
        }
    };
    stats.tls_handshakes_active.add(1);
    let _active = Active(&stats.tls_handshakes_active);
    let handshake = async {
        match &tls.acme_challenge {
            // While a name of a frontend answering tls-alpn-01 is under validation, the
            // ClientHello is read first: a validation connection (offering `acme-tls/1`)
            // gets the challenge config. Otherwise (nearly always) one atomic load.
            Some(challenge) if challenge.book.alpn_pending() => {
                let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream).await?;
                let config = if offers_acme_tls(&start.client_hello()) {
                    Arc::clone(&challenge.config)
                } else {
                    Arc::clone(&tls.server_config)
                };
                start.into_stream(config).await
            }
            _ => TlsAcceptor::from(Arc::clone(&tls.server_config)).accept(stream).await,
        }
    };
    match tokio::time::timeout_at(deadline, handshake).await {
        Err(_) => Err(fail(HandshakeFailure::Timeout, None)),
        Ok(Err(e)) => Err(fail(HandshakeFailure::classify(&e), Some(e))),
        Ok(Ok(s)) if s.get_ref().1.alpn_protocol() == Some(ACME_TLS_ALPN) => {
            // The CA only handshakes: the proof is the certificate. Nothing is served.
            stats.tls_handshakes_full.add(1);
            Err(Error::new(
                ErrorKind::PeerClosed,
                Side::Front,
                "TLS handshake: tls-alpn-01 validation answered",
            ))
        }
        Ok(Ok(s)) => {
            let conn = s.get_ref().1;
            if conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                stats.tls_handshakes_resumed.add(1);
            } else {
                stats.tls_handshakes_full.add(1);
            }
            count_negotiated(stats, conn);
            Ok(s)
        }
    }
}

/// What the handshake settled on: its group, version and suite, one counter each.
fn count_negotiated(stats: &WorkerStats, conn: &rustls::ServerConnection) {
    use rustls::{CipherSuite as S, NamedGroup as G, ProtocolVersion as V};
    let group = conn.negotiated_key_exchange_group().map(|g| match g.name() {
        G::X25519 => &stats.tls_group_x25519,
        G::secp256r1 => &stats.tls_group_secp256r1,
        G::secp384r1 => &stats.tls_group_secp384r1,
        G::X25519MLKEM768 => &stats.tls_group_x25519mlkem768,
        _ => &stats.tls_group_other,
    });
    let version = match conn.protocol_version() {
        Some(V::TLSv1_3) => Some(&stats.tls_version_13),
        Some(V::TLSv1_2) => Some(&stats.tls_version_12),
        _ => None,
    };
    let suite = conn.negotiated_cipher_suite().and_then(|s| match s.suite() {
        S::TLS13_AES_128_GCM_SHA256 => Some(&stats.tls_suite_aes_128_gcm_sha256),
        S::TLS13_AES_256_GCM_SHA384 => Some(&stats.tls_suite_aes_256_gcm_sha384),
        S::TLS13_CHACHA20_POLY1305_SHA256 => Some(&stats.tls_suite_chacha20_poly1305_sha256),
        S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => Some(&stats.tls_suite_ecdhe_ecdsa_aes_128_gcm),
        S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => Some(&stats.tls_suite_ecdhe_rsa_aes_128_gcm),
        S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => Some(&stats.tls_suite_ecdhe_ecdsa_aes_256_gcm),
        S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => Some(&stats.tls_suite_ecdhe_rsa_aes_256_gcm),
        S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => Some(&stats.tls_suite_ecdhe_ecdsa_chacha20),
        S::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => Some(&stats.tls_suite_ecdhe_rsa_chacha20),
        _ => None,
    });
    for counter in [group, version, suite].into_iter().flatten() {
        counter.add(1);
    }
}
