//! Sending a request body to the server while listening to the server.
//!
//! A server may answer before it has read the whole body (413, 401, 400 ... and often closes
//! right after). The upload therefore watches the server connection whenever it would wait,
//! for the client's next bytes or for the server to take more: an interim (1xx) response is
//! passed on and the upload goes on; anything else (a final response head, EOF, a reset) ends
//! the upload, and the caller reads and forwards the response and closes both connections
//! (the body was not sent whole, so neither connection is in a known state). A write that
//! fails because the server is gone ends the upload the same way: its response may already
//! be in the socket.
//!
//! The body goes out re-framed ([`BodyTracker::reframe`]): in place in the client's pooled
//! buffer, with no copy for canonical chunk framing and no allocation at all.
//!
//! With `[frontend.splice]`, a Content-Length body above `after_bytes` between two plain
//! sockets goes by splice(2) once the bytes read with the head are sent (`spliced`),
//! exactly to its end (a pipelined request stays in the client's socket); the server is
//! watched meanwhile as above, from its readiness, so the splice holds no buffer.
//!
//! Full-duplex exchanges (a server streaming a 2xx response while still reading the body)
//! are not supported: the upload stops at the first byte of a final response.

use std::rc::Rc;
use std::task::Poll;

use tokio::io::{AsyncRead, AsyncWrite};

use super::client::ClientStream;
use super::exchange::{BodyError, forward_interim};
use super::inbound::Inbound;
use super::spliced::{self, Splicer};
use super::stream::{RequestInfo, Session};
use crate::buffer::{BufferPool, Parked};
use crate::http::h1::{self, BodyTracker};
use crate::relay::idle::Progress;
use crate::relay::splice::{Exact, SpliceEnd};

/// How an upload ended.
pub(super) enum Upload {
    /// The whole body was sent.
    Complete,
    /// The server spoke (or went away) first; what it sent is in `back`.
    ServerFirst,
}

/// Sends the body tracked by `tracker` (starting with the bytes already in `s.front`) to
/// `server`, watching `server` as described in the module doc.
pub(super) async fn send_body<C, S>(
    s: &mut Session<'_, C>,
    server: &mut S,
    back: &mut Inbound,
    tracker: &mut BodyTracker,
    req: &RequestInfo,
    progress: &Progress,
) -> Result<Upload, BodyError>
where
    C: ClientStream,
    S: AsyncRead + AsyncWrite + SpliceEnd + Unpin,
{
    let ctx = s.ctx;
    let splicer =
        (spliced::wanted(s.fe.splice, req.body) && server.is_plain() && s.client.is_plain()).then_some(Splicer {
            pipes: &ctx.pipes,
            stats: &ctx.stats,
        });
    let mut splice: Option<Exact> = None;
    loop {
        if !s.front.is_empty() && !tracker.is_done() {
            let r = tracker.reframe(s.front.data_mut()).map_err(BodyError::Framing)?;
            if !send(s, server, back, req, Bytes::Lead(r)).await?
                || !send(s, server, back, req, Bytes::Front(r.out)).await?
            {
                return Ok(Upload::ServerFirst);
            }
            progress.moved(r.consumed);
            s.front.consume(r.consumed);
        }
        if tracker.is_done() {
            return Ok(Upload::Complete);
        }
        if let Some(sp) = splicer
            && splice.is_none()
            && s.front.is_empty()
        {
            splice = sp.start(&mut s.client, server, tracker);
            if splice.is_some() {
                // No buffer held while the pipe carries the rest.
                s.front.release_if_empty();
            }
        }
        if let (Some(sp), Some(exact)) = (splicer, splice.as_mut()) {
            match splice_watching(s, server, back, tracker, exact, sp, progress).await? {
                Watched::Done => splice = None,
                Watched::Spoke => {
                    if !interim_passed(s, back, req).await? {
                        return Ok(Upload::ServerFirst);
                    }
                }
                Watched::Gone => return Ok(Upload::ServerFirst),
            }
            continue;
        }
        match wait_either(s, server, back).await {
            Wait::Client(Ok(0)) => {
                tracker.on_eof().map_err(BodyError::Framing)?;
                return Ok(Upload::Complete);
            }
            Wait::Client(Ok(_)) => {}
            Wait::Client(Err(e)) => return Err(BodyError::Read(e)),
            Wait::Server(Ok(n)) if n > 0 => {
                if !interim_passed(s, back, req).await? {
                    return Ok(Upload::ServerFirst);
                }
            }
            Wait::Server(_) => return Ok(Upload::ServerFirst),
        }
    }
}

/// How a spliced stretch of the upload ended.
enum Watched {
    /// The whole body went through.
    Done,
    /// The server sent bytes (now in `back`).
    Spoke,
    /// Writing to the server failed, or it closed: whatever it sent is in its socket.
    Gone,
}

/// Splices the rest of the body to `server` while watching it: the server's readiness is
/// polled whenever the splice would wait, and only a readable server is read (into `back`).
async fn splice_watching<C, S>(
    s: &mut Session<'_, C>,
    server: &mut S,
    back: &mut Inbound,
    tracker: &mut BodyTracker,
    exact: &mut Exact,
    sp: Splicer<'_>,
    progress: &Progress,
) -> Result<Watched, BodyError>
where
    C: ClientStream,
    S: AsyncRead + AsyncWrite + SpliceEnd + Unpin,
{
    let pool = &s.ctx.buffers;
    let client = &mut s.client;
    let mut parked = Parked::default();
    let watched = std::future::poll_fn(|cx| {
        match sp.poll_move(cx, exact, client, server, tracker, progress) {
            Poll::Ready(Ok(())) => return Poll::Ready(Ok(Watched::Done)),
            Poll::Ready(Err(BodyError::Write(e))) => {
                tracing::debug!(error = %e, "splicing the request body: the server is gone");
                return Poll::Ready(Ok(Watched::Gone));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        let Some(socket) = server.splice_socket() else {
            return Poll::Ready(Ok(Watched::Gone));
        };
        match socket.poll_read_ready(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(_)) => return Poll::Ready(Ok(Watched::Gone)),
            Poll::Ready(Ok(())) => {}
        }
        match back.poll_read_from(cx, server, pool, &mut parked, false) {
            Poll::Ready(Ok(n)) if n > 0 => Poll::Ready(Ok(Watched::Spoke)),
            Poll::Ready(_) => Poll::Ready(Ok(Watched::Gone)),
            Poll::Pending => {
                // Readiness was stale: nothing to read, and no buffer kept for it.
                back.release_if_empty();
                Poll::Pending
            }
        }
    })
    .await;
    parked.leave(pool.stats());
    watched
}

enum Wait {
    Client(std::io::Result<usize>),
    Server(std::io::Result<usize>),
}

/// One read from whichever side has something first (the server wins a tie). A poll rather
/// than a `select!` of two `read_from`s, so that a read parked on the buffer pool and then
/// dropped still leaves the pool's waiter count right.
async fn wait_either<C, S>(s: &mut Session<'_, C>, server: &mut S, back: &mut Inbound) -> Wait
where
    C: ClientStream,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let pool = &s.ctx.buffers;
    let second = s.front.holds_buffer();
    let (mut parked_back, mut parked_front) = (Parked::default(), Parked::default());
    let front = &mut s.front;
    let client = &mut s.client;
    let wait = std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = back.poll_read_from(cx, server, pool, &mut parked_back, second) {
            return Poll::Ready(Wait::Server(r));
        }
        front
            .poll_read_from(cx, client, pool, &mut parked_front, false)
            .map(Wait::Client)
    })
    .await;
    parked_back.leave(pool.stats());
    parked_front.leave(pool.stats());
    wait
}

/// Bytes to send: a re-framed size line held on the side, or the first `n` pending bytes of
/// `s.front`.
#[derive(Clone, Copy)]
enum Bytes {
    Lead(h1::Reframed),
    Front(usize),
}

/// Writes the bytes, passing on interim responses met on the way; false if the server
/// spoke (or failed) first.
async fn send<C, S>(
    s: &mut Session<'_, C>,
    server: &mut S,
    back: &mut Inbound,
    req: &RequestInfo,
    bytes: Bytes,
) -> Result<bool, BodyError>
where
    C: ClientStream,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut at = 0usize;
    loop {
        let data = match &bytes {
            Bytes::Lead(r) => r.lead(),
            Bytes::Front(n) => s.front.data().get(..*n).unwrap_or_default(),
        };
        let Some(rest) = data.get(at..).filter(|rest| !rest.is_empty()) else {
            return Ok(true);
        };
        let second = s.front.holds_buffer();
        match write_watching(server, rest, back, &s.ctx.buffers, second).await {
            Step::Wrote(n) => at += n,
            Step::Spoke => {
                if !interim_passed(s, back, req).await? {
                    return Ok(false);
                }
            }
            Step::Gone => return Ok(false),
        }
    }
}

enum Step {
    Wrote(usize),
    /// The server sent bytes (now in `back`).
    Spoke,
    /// The write failed or the server closed: whatever it sent is in `back`.
    Gone,
}

/// One write of `data` to `server`; while the write waits, a read from `server` into `back`.
async fn write_watching<S: AsyncRead + AsyncWrite + Unpin>(
    server: &mut S,
    data: &[u8],
    back: &mut Inbound,
    pool: &Rc<BufferPool>,
    second: bool,
) -> Step {
    let mut parked = Parked::default();
    let step = std::future::poll_fn(|cx| {
        match std::pin::Pin::new(&mut *server).poll_write(cx, data) {
            Poll::Ready(Ok(n)) if n > 0 => return Poll::Ready(Step::Wrote(n)),
            Poll::Ready(_) => return Poll::Ready(Step::Gone),
            Poll::Pending => {}
        }
        match back.poll_read_from(cx, server, pool, &mut parked, second) {
            Poll::Ready(Ok(n)) if n > 0 => Poll::Ready(Step::Spoke),
            Poll::Ready(_) => Poll::Ready(Step::Gone),
            Poll::Pending => Poll::Pending,
        }
    })
    .await;
    parked.leave(pool.stats());
    step
}

/// After the server sent bytes mid-upload: forwards an interim response (true: go on with the
/// upload); an incomplete head also lets the upload go on while more of it arrives. False for
/// a final response or a malformed one (the caller's response reading reports it).
async fn interim_passed<C: ClientStream>(
    s: &mut Session<'_, C>,
    back: &mut Inbound,
    req: &RequestInfo,
) -> Result<bool, BodyError> {
    let limits = s.limits();
    while !back.is_empty() {
        match h1::parse_response_head(back.data(), &limits, req.method, &mut s.scratch) {
            Ok(Some(head)) if head.informational => {
                // Boxed: rare, and its state would otherwise grow every session's future.
                if !Box::pin(forward_interim(s, head, back, req)).await {
                    return Err(BodyError::Read(std::io::ErrorKind::BrokenPipe.into()));
                }
            }
            Ok(Some(head)) => {
                head.reclaim(&mut s.scratch);
                return Ok(false);
            }
            Ok(None) => return Ok(!back.is_full()),
            Err(_) => return Ok(false),
        }
    }
    Ok(true)
}
