//! TLS termination: the handshake, under the `max_handshakes` budget and the
//! `timeouts.tls_handshake` deadline, with counters by outcome and by what was negotiated
//! (group, version, suite).
//!
//! Two steps, for every mode (TCP mode relays the plaintext, HTTP mode parses it):
//! [`client_hello`] then [`accept`], which takes what the first returns.
//! - [`client_hello`]: the connection takes its source's place
//!   (`global.max_handshakes_per_source`, refused at once when full) and waits, by
//!   `timeouts.client_hello`, until a whole ClientHello is queued on the socket (peeked, not
//!   read: `tls::passthrough`). This wait costs no `max_handshakes` slot: a peer must send a
//!   whole ClientHello before it holds one, so idle connections, or ones that send half a
//!   record, cannot starve the handshakes of everyone else. Plain frontends never come here.
//! - [`accept`]: takes a slot (waiting if none is free) and handshakes, by
//!   `timeouts.tls_handshake` counted from the ClientHello's arrival. The source's place is
//!   kept until the handshake ends, so a source that stalls after its ClientHello holds at
//!   most its share of slots.
//!
//! The `ServerConfig` comes from the config model, shared by all workers (one ticketer, one
//! session cache), so a session resumes on whichever core accepts it; the ticket keys come
//! from the master (`config::tickets`), so it resumes after a reload too.

use std::io;
use std::net::IpAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::{LazyConfigAcceptor, TlsAcceptor};

use crate::config::acme::{ACME_TLS_ALPN, offers_acme_tls};
use crate::config::model::FrontendTls;
use crate::ctx::WorkerCtx;
use crate::ctx::pending_tls::SourcePlace;
use crate::error::{Error, ErrorKind, Side};
use crate::stats::{Counter, WorkerStats};
use crate::tls::passthrough::{self, InspectError};

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
    fn as_str(self) -> &'static str {
        match self {
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::Protocol => "protocol",
            HandshakeFailure::NoCert => "no-certificate",
            HandshakeFailure::Closed => "closed",
            HandshakeFailure::ClientCert => "client certificate",
        }
    }

    /// Counts the failure and makes its error (`stage`: where, for the message).
    fn failed(self, stats: &WorkerStats, stage: &str, source: Option<io::Error>) -> Error {
        self.counter(stats).add(1);
        // A client hanging up mid-handshake is routine (debug); the rest is logged at warn.
        let kind = match self {
            HandshakeFailure::Closed => ErrorKind::PeerClosed,
            _ => ErrorKind::Tls,
        };
        // A TLS error is said in words (rustls prints some of its own in Rust's debug form,
        // `Other(OtherError(UnsupportedCertVersion))`); other I/O errors stay the cause.
        let tls = source
            .as_ref()
            .and_then(|s| s.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        if let Some(tls) = tls {
            return Error::new(
                kind,
                Side::Front,
                format!("{stage}: {}: {}", self.as_str(), describe(tls)),
            );
        }
        let e = Error::new(kind, Side::Front, format!("{stage}: {}", self.as_str()));
        match source {
            Some(s) => e.with_source(s),
            None => e,
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

/// A handshake error as an operator reads it: what was wrong with the client's certificate
/// in words, never a Rust debug form.
pub(crate) fn describe(e: &rustls::Error) -> String {
    use rustls::CertificateError as C;
    match e {
        rustls::Error::NoCertificatesPresented => "the client presented no certificate".into(),
        rustls::Error::InvalidCertificate(c) => match c {
            C::Expired | C::ExpiredContext { .. } => "the client certificate has expired".into(),
            C::NotValidYet | C::NotValidYetContext { .. } => "the client certificate is not valid yet".into(),
            C::Revoked => "the client certificate is revoked".into(),
            C::UnknownIssuer => "the client certificate is not signed by a trusted CA".into(),
            C::BadSignature => "the client certificate's signature does not verify".into(),
            C::BadEncoding => "the client certificate is not valid DER".into(),
            C::UnknownRevocationStatus => "the client certificate's revocation status is unknown".into(),
            C::ExpiredRevocationList | C::ExpiredRevocationListContext { .. } => {
                "the revocation list for the client certificate has expired".into()
            }
            C::UnhandledCriticalExtension => "the client certificate has an unsupported critical extension".into(),
            C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
                "the client certificate is not for client authentication".into()
            }
            // webpki's own reasons reach us only as text; the common ones in words.
            C::Other(other) => {
                let text = format!("{other:?}");
                if text.contains("UnsupportedCertVersion") {
                    "the client certificate is X.509 v1; only v3 is accepted".into()
                } else if text.contains("CaUsedAsEndEntity") {
                    "the client certificate is a CA certificate, not an end-entity one".into()
                } else {
                    format!("the client certificate is refused: {other}")
                }
            }
            other => format!("the client certificate is refused: {other}"),
        },
        rustls::Error::AlertReceived(alert) => format!("the client sent the alert {alert:?}"),
        other => other.to_string(),
    }
}

/// Holds a gauge (`tls_handshakes_active`, `tls_hello_waiting`) up for the life of one
/// handshake or wait.
struct Active<'a>(&'a Counter);

impl<'a> Active<'a> {
    fn up(counter: &'a Counter) -> Self {
        counter.add(1);
        Active(counter)
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.sub(1);
    }
}

/// A connection whose whole ClientHello has arrived, with its source's place: what
/// [`accept`] takes.
pub(crate) struct HelloReceived<'a> {
    place: SourcePlace<'a>,
}

/// Waits (by `timeouts.client_hello`, without a handshake slot) until a whole ClientHello
/// is queued on `stream`, the connection holding a place of its source `client`.
///
/// Refused at once (counted in `tls_source_refused`) when the source already has
/// `global.max_handshakes_per_source` connections before the end of their handshake while
/// the process has `max_handshakes` of them or more (see `ctx::pending_tls`). A
/// wait that fails is counted as a failed handshake (timeout, closed, protocol).
pub(crate) async fn client_hello<'a>(
    ctx: &'a WorkerCtx,
    stream: &TcpStream,
    client: IpAddr,
) -> Result<HelloReceived<'a>, Error> {
    let stats = &ctx.stats;
    let slots = ctx.shared.config.global.max_handshakes;
    let Some(place) = ctx.shared.pending_tls.enter(client, slots) else {
        stats.tls_source_refused.add(1);
        return Err(Error::new(
            ErrorKind::Limited,
            Side::Front,
            "TLS: the source has global.max_handshakes_per_source connections before their handshake",
        ));
    };
    let deadline = Instant::now() + ctx.shared.config.timeouts.client_hello;
    let waited = {
        let _waiting = Active::up(&stats.tls_hello_waiting);
        passthrough::wait_client_hello(stream, deadline).await
    };
    let e = match waited {
        Ok(_) => return Ok(HelloReceived { place }),
        Err(e) => e,
    };
    let (reason, source) = match e {
        InspectError::TimedOut => (HandshakeFailure::Timeout, None),
        InspectError::Truncated => (HandshakeFailure::Closed, None),
        InspectError::Io(io) if crate::error::is_peer_reset(&io) => (HandshakeFailure::Closed, Some(io)),
        InspectError::Io(io) => (HandshakeFailure::Protocol, Some(io)),
        InspectError::Hello(h) => (
            HandshakeFailure::Protocol,
            Some(io::Error::new(io::ErrorKind::InvalidData, h)),
        ),
    };
    Err(reason.failed(stats, "TLS ClientHello", source))
}

/// Runs the server side of a TLS handshake on `stream`, whose ClientHello has arrived
/// (`hello`, from [`client_hello`]: its source's place is given back when this returns).
///
/// Waits for a `max_handshakes` slot first (the wait counts against the handshake
/// deadline), so a flood of handshakes queues instead of eating every core.
pub(crate) async fn accept<IO: AsyncRead + AsyncWrite + Unpin>(
    ctx: &WorkerCtx,
    tls: &FrontendTls,
    hello: HelloReceived<'_>,
    stream: IO,
) -> Result<tokio_rustls::server::TlsStream<IO>, Error> {
    let stats = &ctx.stats;
    let limit = ctx.shared.config.timeouts.tls_handshake;
    let deadline = Instant::now() + limit;
    let fail = |reason: HandshakeFailure, source| reason.failed(stats, "TLS handshake", source);
    let _permit = match Arc::clone(&ctx.shared.handshakes).try_acquire_owned() {
        Ok(p) => p,
        // No slot free: a source past its bound is refused rather than queued before
        // sources within theirs.
        Err(_) if hello.place.over() => {
            stats.tls_source_refused.add(1);
            return Err(Error::new(
                ErrorKind::Limited,
                Side::Front,
                "TLS: no handshake slot free, and the source is past global.max_handshakes_per_source",
            ));
        }
        Err(_) => {
            stats.tls_handshake_waits.add(1);
            match tokio::time::timeout_at(deadline, Arc::clone(&ctx.shared.handshakes).acquire_owned()).await {
                Ok(Ok(p)) => p,
                _ => return Err(fail(HandshakeFailure::Timeout, None)),
            }
        }
    };
    let _active = Active::up(&stats.tls_handshakes_active);
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

/// A terminated connection again, from its socket and the rustls state it was parked with
/// (`ctx::park`): no handshake, no byte exchanged.
///
/// tokio-rustls makes a stream only around a connection it creates itself, so this lets it
/// create one (`accept_with`, no I/O yet) and puts the parked state in its place before the
/// first poll. That poll finds the handshake done, has nothing to flush (a connection is
/// parked only with nothing left to write) and hands the stream back. The throwaway
/// connection costs a few small allocations, once per resume (after at least
/// `global.park_idle_after` of idleness).
pub(crate) async fn resume(
    tls: &FrontendTls,
    socket: TcpStream,
    conn: rustls::ServerConnection,
) -> io::Result<ServerTlsStream> {
    let acceptor = TlsAcceptor::from(Arc::clone(&tls.server_config));
    let stream = acceptor.accept_with(socket, |fresh| *fresh = conn).await?;
    // Only a connection whose handshake was over is parked; were this one mid-handshake,
    // the accept above would have gone on with it.
    debug_assert!(!stream.get_ref().1.is_handshaking());
    Ok(stream)
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::describe;

    /// What webpki puts in `CertificateError::Other`: a Debug name.
    #[derive(Debug)]
    enum Webpki {
        UnsupportedCertVersion,
        CaUsedAsEndEntity,
    }

    impl std::fmt::Display for Webpki {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{self:?}")
        }
    }

    impl std::error::Error for Webpki {}

    fn other(e: Webpki) -> rustls::Error {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(Arc::new(e))))
    }

    #[test]
    fn client_certificate_errors_are_said_in_words() {
        assert_eq!(
            describe(&other(Webpki::UnsupportedCertVersion)),
            "the client certificate is X.509 v1; only v3 is accepted"
        );
        assert_eq!(
            describe(&other(Webpki::CaUsedAsEndEntity)),
            "the client certificate is a CA certificate, not an end-entity one"
        );
        assert_eq!(
            describe(&rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer
            )),
            "the client certificate is not signed by a trusted CA"
        );
        assert_eq!(
            describe(&rustls::Error::NoCertificatesPresented),
            "the client presented no certificate"
        );
        for e in [other(Webpki::UnsupportedCertVersion), other(Webpki::CaUsedAsEndEntity)] {
            assert!(!describe(&e).contains("Other("), "{}", describe(&e));
        }
    }
}
