//! HTTP/2 client connections (issue 13, client side): a TLS connection that negotiated `h2`
//! through ALPN, or a plain one that opened with the HTTP/2 preface on an `h2c = true`
//! frontend. Each stream is forwarded to an HTTP/1.1 server (`stream.rs`), or stays HTTP/2
//! to a `proto = "h2"` server (`to_h2.rs`), through the same routes, balancer, connect path,
//! server pools, counters and access log as an HTTP/1.1 request; the h1 → h1 path does not
//! go through here.
//!
//! Owns the connection task: the h2 codec (hyperium `h2`, configured from `[http2]`) over a
//! frame-counting wrapper (`guard.rs`), its streams (each a future polled inside this
//! connection's task, so no stream outlives its connection and none costs a task; each in a
//! heap slot reused by the next stream, `slots.rs`), and the
//! connection's end: idle (no stream for
//! `timeouts.http_keep_alive`, or none ever within `timeouts.http_request`) → graceful
//! GOAWAY; worker stopping (reload, stop) → graceful GOAWAY, open streams finish (a hard
//! stop drops them); a flood → GOAWAY `ENHANCE_YOUR_CALM`, every stream dropped, closed.
//! Request strictness: `check.rs`; h2 ↔ h1 bytes: `to_h1.rs`; a route's rewrites: `rewrite.rs`;
//! a stream over a `[[frontend.limit]]`: `limited.rs`.

mod check;
mod guard;
mod limited;
mod rewrite;
mod slots;
mod stream;
mod to_h1;
mod to_h2;

use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use futures_util::stream::FuturesUnordered;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::ctx::WorkerCtx;
use crate::error::{Error, ErrorKind, Side};

pub(crate) use guard::{Flood, PREFACE};
pub(crate) use stream::ConnInfo;

/// How long an ending connection may take to flush its GOAWAY before it is dropped.
const GOAWAY_FLUSH: Duration = Duration::from_secs(1);

/// Whether a plain connection opens with the HTTP/2 preface: peeks (never reads) until the
/// bytes differ from the preface or all 24 are there, within `timeouts.http_request`.
pub(crate) async fn peek_preface(ctx: &WorkerCtx, socket: &TcpStream) -> bool {
    let deadline = Instant::now() + ctx.shared.config.timeouts.http_request;
    let mut buf = [0u8; PREFACE.len()];
    // Bounded: each round waits for more bytes or ends at the deadline.
    loop {
        let n = match tokio::time::timeout_at(deadline, socket.peek(&mut buf)).await {
            Ok(Ok(n)) => n,
            // Closed, failed or silent: HTTP/1 handles it (and its timeouts) as always.
            _ => return false,
        };
        let seen = buf.get(..n).unwrap_or_default();
        if n == 0 || !PREFACE.starts_with(seen) {
            return false;
        }
        if n == PREFACE.len() {
            return true;
        }
        // A preface split across segments (rare): peek says "readable" at once while the
        // first part sits there, so wait a moment before looking again.
        if tokio::time::timeout_at(deadline, tokio::time::sleep(Duration::from_millis(2)))
            .await
            .is_err()
        {
            return false;
        }
    }
}

/// Serves one HTTP/2 client connection to its end.
pub(crate) async fn serve<T>(ctx: &Rc<WorkerCtx>, info: ConnInfo, io: T) -> Result<(), Error>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let config = &ctx.shared.config;
    let limits = config.http2;
    let timeouts = config.timeouts;
    ctx.stats.h2_connections.add(1);
    let trip = Rc::new(guard::Trip::default());
    let io = guard::Guarded::new(io, limits, Rc::clone(&trip), std::sync::Arc::clone(&ctx.stats));
    let handshake = builder(&limits).handshake::<_, bytes::Bytes>(io);
    let mut conn = match tokio::time::timeout(timeouts.http_request, handshake).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => {
            return Err(Error::new(
                ErrorKind::PeerClosed,
                Side::Front,
                format!("h2 handshake: {e}"),
            ));
        }
        Err(_) => {
            return Err(Error::new(
                ErrorKind::IdleTimeout,
                Side::Front,
                "no h2 preface within timeouts.http_request",
            ));
        }
    };
    let info = Rc::new(info);
    // Declared before `streams`, which borrows it (and so is dropped first).
    let spares = slots::Spares::new();
    let mut streams = FuturesUnordered::new();
    let mut going_away = false;
    // No stream yet: the first must come within http_request; later, http_keep_alive.
    let idle = tokio::time::sleep_until(Instant::now() + timeouts.http_request);
    tokio::pin!(idle);
    let stopping = ctx.stopping();
    tokio::pin!(stopping);
    let ended = loop {
        tokio::select! {
            biased;
            flood = trip.tripped() => break Some(flood),
            accepted = conn.accept() => match accepted {
                Some(Ok((req, respond))) => {
                    ctx.stats.h2_streams.add(1);
                    streams.push(spares.slot(stream::serve(Rc::clone(&info), req, respond)));
                }
                Some(Err(e)) => {
                    tracing::debug!(peer = %info.peer, error = %e, "h2 connection ended");
                    // h2's own bound on streams it reset for the client's errors counts them
                    // as they are decided, before `guard` sees the resets written: the same
                    // flood (its rapid-reset bound is set above `guard`'s, so not that one).
                    if e.is_go_away() && e.is_library() && e.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM) {
                        count_flood(ctx, Flood::ServerResets);
                    }
                    break None;
                }
                // GOAWAY sent and every stream done, or the client closed.
                None => break None,
            },
            _ = std::future::poll_fn(|cx| finish_ready(&mut streams, cx)), if !streams.is_empty() => {
                if streams.is_empty() {
                    idle.as_mut().reset(Instant::now() + timeouts.http_keep_alive);
                }
            }
            () = &mut stopping, if !going_away => {
                conn.graceful_shutdown();
                going_away = true;
            }
            () = &mut idle, if streams.is_empty() && !going_away => {
                conn.graceful_shutdown();
                going_away = true;
            }
        }
    };
    if let Some(flood) = ended {
        // The abusive connection's streams go now: nothing of theirs is worth finishing.
        streams.clear();
        count_flood(ctx, flood);
        conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
        // Driving the codec writes the GOAWAY; once it is flushed nothing else is owed.
        let closed = std::future::poll_fn(|cx| conn.poll_closed(cx));
        tokio::select! {
            _ = closed => {}
            () = trip.goaway_flushed() => {}
            () = tokio::time::sleep(GOAWAY_FLUSH) => {}
        }
        tracing::debug!(peer = %info.peer, flood = flood.as_str(), "h2 connection closed: ENHANCE_YOUR_CALM");
        return Err(Error::new(ErrorKind::BadRequest(400), Side::Front, flood.as_str()));
    }
    // Streams still running after the connection ended have lost their client.
    drop(streams);
    Ok(())
}

/// Polls the streams until none can go further now; ready once at least one finished.
/// Every stream that can answer now does so before the codec writes again: their frames
/// leave together, in one TLS record and one write, rather than one response at a time.
fn finish_ready<F: Future<Output = ()>>(streams: &mut FuturesUnordered<F>, cx: &mut Context<'_>) -> Poll<usize> {
    let mut finished = 0;
    // Bounded: each round ends a stream (one poll never runs a stream twice).
    while let Poll::Ready(Some(())) = Pin::new(&mut *streams).poll_next(cx) {
        finished += 1;
    }
    if finished > 0 {
        Poll::Ready(finished)
    } else {
        Poll::Pending
    }
}

fn builder(l: &crate::config::model::Http2) -> h2::server::Builder {
    let mut b = h2::server::Builder::new();
    b.max_concurrent_streams(l.max_concurrent_streams)
        .initial_window_size(l.initial_stream_window)
        .initial_connection_window_size(l.initial_connection_window)
        .max_frame_size(l.max_frame_size)
        .max_header_list_size(l.max_header_list_size)
        .max_send_buffer_size(l.max_send_buffer as usize)
        // h2's own rapid-reset bound, as a backstop set above `guard`'s (which counts
        // every client RST_STREAM before h2 reads it, so trips first), and its bound on
        // streams reset for the client's protocol errors (per connection, not per window:
        // a well-behaved client makes none), which sees them before they are written.
        .max_pending_accept_reset_streams(2 * l.max_client_resets as usize)
        .max_local_error_reset_streams(Some(l.max_server_resets as usize));
    b
}

fn count_flood(ctx: &WorkerCtx, flood: Flood) {
    let s = &ctx.stats;
    let counter = match flood {
        Flood::ClientResets => &s.h2_flood_client_resets,
        Flood::ServerResets => &s.h2_flood_server_resets,
        Flood::Pings => &s.h2_flood_pings,
        Flood::Settings => &s.h2_flood_settings,
        Flood::EmptyData => &s.h2_flood_empty_data,
        Flood::Priority => &s.h2_flood_priority,
        Flood::WindowUpdates => &s.h2_flood_window_updates,
        Flood::HeaderBlock => &s.h2_flood_header_block,
    };
    counter.add(1);
}
