//! One QUIC connection's life: its handshake (within `timeouts.tls_handshake`, holding a
//! `max_handshakes` slot only that long), its HTTP/3 session, and its request streams
//! (`stream.rs`), each a task of its own; a stopping worker sends GOAWAY and lets the open
//! streams finish.
//!
//! Owns the connection's session guards (`sessions_active`, its `show sessions` entry, its
//! `maxconn` permits), held until the connection and every stream task it started are done,
//! and its rapid-reset count: more than `http3.max_client_resets` streams reset by the
//! client within `http2.flood_window` close the connection H3_EXCESSIVE_LOAD.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;

use crate::budget::ConnPermits;
use crate::ctx::WorkerCtx;
use crate::ctx::park::SessionGuards;
use crate::ctx::sessions::{Opened, SessionState};
use crate::proxy::h2front::ConnInfo;

/// H3_EXCESSIVE_LOAD (RFC 9114 §8.1).
const EXCESSIVE_LOAD: u32 = 0x107;

/// What the connection's stream tasks share with it.
pub(super) struct Shared {
    pub(super) info: Rc<ConnInfo>,
    pub(super) quic: quinn::Connection,
    /// The handshake is not complete yet: what arrives now came as 0-RTT early data, which
    /// an attacker may have replayed (`zero_rtt` only).
    pub(super) early: Rc<Cell<bool>>,
    /// Client resets in the current flood window, and when it began.
    resets: Cell<(u32, Instant)>,
}

impl Shared {
    /// A stream the client reset before its response ended: counted, and the connection
    /// closed once they are a flood.
    pub(super) fn client_reset(&self) {
        let ctx = &self.info.ctx;
        let config = &ctx.shared.config;
        let (count, since) = self.resets.get();
        let now = Instant::now();
        let (count, since) = if now.duration_since(since) >= config.http2.flood_window {
            (1, now)
        } else {
            (count.saturating_add(1), since)
        };
        self.resets.set((count, since));
        if count == config.http3.max_client_resets.saturating_add(1) {
            ctx.stats.quic_flood_client_resets.add(1);
            tracing::debug!(peer = %self.info.peer, "HTTP/3 connection closed: too many stream resets");
            self.quic.close(EXCESSIVE_LOAD.into(), b"too many stream resets");
        }
    }
}

/// Serves one connection attempt an accept loop admitted (counted in `sessions_total` and
/// `sessions_active` already).
pub(super) async fn serve(
    ctx: Rc<WorkerCtx>,
    frontend: usize,
    incoming: quinn::Incoming,
    permits: ConnPermits,
    handshake: OwnedSemaphorePermit,
) {
    let peer = incoming.remote_address();
    let opened = Opened {
        at: std::time::Instant::now(),
        client: peer,
        frontend,
        tls: true,
        quic: true,
        state: SessionState::Handshake,
    };
    let guards = SessionGuards::open(&ctx, opened, true, permits);
    let Some(fe) = ctx.shared.config.frontends.get(frontend) else {
        return;
    };
    let early = Rc::new(Cell::new(false));
    // 0-RTT only where no client certificate is asked for: early data comes before the
    // client's certificate would be checked.
    let zero_rtt =
        fe.quic.as_ref().is_some_and(|q| q.zero_rtt) && fe.tls.as_ref().is_none_or(|t| t.client_auth.is_none());
    let quic = match handshake_done(&ctx, incoming, zero_rtt.then_some(&early)).await {
        Some(q) => q,
        None => {
            ctx.stats.quic_handshake_failures.add(1);
            if let Some(f) = super::frontend_cell(&ctx, frontend) {
                f.quic_handshake_failures.add(1);
            }
            return;
        }
    };
    drop(handshake);
    ctx.stats.quic_connections.add(1);
    if let Some(f) = super::frontend_cell(&ctx, frontend) {
        f.quic_connections.add(1);
    }
    let sni = quic
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.server_name);
    let certs = quic
        .peer_identity()
        .and_then(|c| c.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>().ok());
    let leaf = certs.as_deref().and_then(|c| c.first()).map(|c| c.as_ref());
    let client_auth = fe.tls.as_ref().and_then(|t| t.client_auth.as_ref());
    let info = Rc::new(ConnInfo {
        ctx: Rc::clone(&ctx),
        frontend,
        peer,
        proto: crate::http::h1::Proto::Https,
        version: "HTTP/3",
        tls: crate::proxy::record::TlsSeen::quic(sni.as_deref(), leaf, &fe.log),
        client_cert: leaf.is_some(),
        cert_fields: client_auth.map_or_else(Vec::new, |a| crate::proxy::client_cert::h2_fields(&a.headers, leaf)),
        scratch: std::cell::RefCell::new(crate::http::h1::HeadScratch::empty()),
        heads: std::cell::RefCell::default(),
        header_maps: std::cell::RefCell::default(),
    });
    let shared = Rc::new(Shared {
        info,
        quic: quic.clone(),
        early,
        resets: Cell::new((0, Instant::now())),
    });
    let entry = guards.entry();
    crate::ctx::sessions::scope(Rc::clone(&entry), async {
        crate::ctx::sessions::set_state(SessionState::Forwarding);
    })
    .await;
    requests(&ctx, &shared, quic, &entry).await;
    let lost = shared.quic.stats().path.lost_packets;
    ctx.stats.quic_lost_packets.add(lost);
    if let Some(f) = super::frontend_cell(&ctx, frontend) {
        f.quic_lost_packets.add(lost);
    }
    drop(guards);
}

/// The handshake, bounded by `timeouts.tls_handshake`. With `early` (0-RTT on), the
/// connection is taken at once, its early data readable, and `early` stays set until the
/// handshake completes (bounded the same way: past it the connection is closed).
async fn handshake_done(
    ctx: &WorkerCtx,
    incoming: quinn::Incoming,
    early: Option<&Rc<Cell<bool>>>,
) -> Option<quinn::Connection> {
    let connecting = match incoming.accept() {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(error = %e, "QUIC connection refused by the endpoint");
            return None;
        }
    };
    let limit = ctx.shared.config.timeouts.tls_handshake;
    let connecting = match early {
        Some(flag) => match connecting.into_0rtt() {
            Ok((conn, accepted)) => {
                flag.set(true);
                let (flag, closing) = (Rc::clone(flag), conn.clone());
                tokio::task::spawn_local(async move {
                    if tokio::time::timeout(limit, accepted).await.is_err() {
                        closing.close(0u32.into(), b"handshake timeout");
                    }
                    flag.set(false);
                });
                return Some(conn);
            }
            Err(connecting) => connecting,
        },
        None => connecting,
    };
    match tokio::time::timeout(limit, connecting).await {
        Ok(Ok(conn)) => Some(conn),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "QUIC handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!("QUIC handshake timed out");
            None
        }
    }
}

/// Takes request streams until the connection ends; a stopping worker sends GOAWAY first
/// (the streams the client opened before it are still served). Returns once every stream
/// task is done.
async fn requests(
    ctx: &Rc<WorkerCtx>,
    shared: &Rc<Shared>,
    quic: quinn::Connection,
    entry: &Rc<crate::ctx::sessions::SessionEntry>,
) {
    let h3 = &ctx.shared.config.http3;
    let mut session = match h3::server::builder()
        .max_field_section_size(u64::from(h3.max_field_section_size))
        .build::<_, bytes::Bytes>(super::guard::GuardedConn::new(
            quic,
            u64::from(h3.max_field_section_size),
            std::sync::Arc::clone(&ctx.stats),
        ))
        .await
    {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(peer = %shared.info.peer, error = %e, "HTTP/3 session not set up");
            return;
        }
    };
    let mut streams = tokio::task::JoinSet::new();
    let stop = ctx.stopping();
    tokio::pin!(stop);
    let mut goaway_sent = false;
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut stop, if !goaway_sent => {
                goaway_sent = true;
                // GOAWAY with the last stream taken; accept() then yields the streams the
                // client had already opened and ends once they are done.
                if let Err(e) = session.shutdown(0).await {
                    tracing::debug!(peer = %shared.info.peer, error = %e, "HTTP/3 GOAWAY not sent");
                    break;
                }
                continue;
            }
            Some(_) = streams.join_next(), if !streams.is_empty() => continue,
            a = session.accept() => a,
        };
        match accepted {
            Ok(Some(resolver)) => {
                // In the connection's `show sessions` entry, as an HTTP/2 stream is. Boxed
                // where it lies: the stream's future is the whole forwarding path's, several
                // KB, and spawning it by value copied all of it more than once per request.
                let serve = super::stream::serve(Rc::clone(shared), resolver);
                let serve = Box::write(Box::new_uninit(), crate::ctx::sessions::scope(Rc::clone(entry), serve));
                streams.spawn_local(Box::into_pin(serve));
            }
            Ok(None) => break,
            Err(e) => {
                if !e.is_h3_no_error() {
                    tracing::debug!(peer = %shared.info.peer, error = %e, "HTTP/3 connection ended");
                }
                break;
            }
        }
    }
    // Bounded: each stream ends with its response, or when the connection is gone.
    while streams.join_next().await.is_some() {}
    if goaway_sent {
        // Every response is written; its last packets may still be in flight, and closing
        // now would abandon them (RFC 9000 §10.2). The client closes an idle connection it
        // was told to leave; past a moment, close it from here.
        let _ = tokio::time::timeout(GOODBYE, shared.quic.closed()).await;
        shared.quic.close(NO_ERROR.into(), b"");
    }
}

/// H3_NO_ERROR (RFC 9114 §8.1).
const NO_ERROR: u32 = 0x100;

/// How long a connection that was sent GOAWAY and has no stream left waits for the
/// client to close it.
const GOODBYE: std::time::Duration = std::time::Duration::from_secs(1);
