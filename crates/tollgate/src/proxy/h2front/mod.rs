//! HTTP/2 client connections (issue 13, client side): a TLS connection that negotiated `h2`
//! through ALPN, or a plain one that opened with the HTTP/2 preface on an `h2c = true`
//! frontend. Each stream is forwarded to an HTTP/1.1 server (`stream.rs`), or stays HTTP/2
//! to a `proto = "h2"` server (`to_h2.rs`), through the same routes, balancer, connect path,
//! server pools, counters and access log as an HTTP/1.1 request; the h1 → h1 path does not
//! go through here.
//!
//! Owns the connection task (`native/`): tollgate's own sans-io codec (`http::h2`,
//! configured from `[http2]`, flood budgets included), its streams (each a future polled
//! inside this connection's task, so no stream outlives its connection and none costs a
//! task; each in a heap slot reused by the next stream, `slots.rs`) with handles shaped as
//! the `h2` crate's, and the connection's end: idle (no stream for
//! `timeouts.http_keep_alive`, or none ever within `timeouts.http_request`) → graceful
//! GOAWAY; worker stopping (reload, stop) → graceful GOAWAY, open streams finish (a hard
//! stop drops them); a flood → GOAWAY `ENHANCE_YOUR_CALM`, every stream dropped, closed.
//! Request strictness: `check.rs`; h2 ↔ h1 bytes: `to_h1.rs`; a route's rewrites: `rewrite.rs`;
//! a stream over a `[[frontend.limit]]`: `limited.rs`.

mod check;
mod limited;
mod native;
mod rewrite;
mod slots;
mod stream;
mod to_h1;
mod to_h2;

use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::ctx::WorkerCtx;
use crate::http::h2::frame::PREFACE;

pub(crate) use check::request as check_request;
pub(crate) use native::{Bridge, Output, bridged, request_parts, serve};
pub(crate) use stream::{ConnInfo, serve as serve_stream};

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
