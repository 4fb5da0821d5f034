//! Forwarding one request to a server and its response back.
//!
//! Order of events: get a server connection (pooled or new, via the balancer), send the
//! rewritten head and the request body (`upload.rs`: a server that answers before the body
//! is complete is heard, its response forwarded, and both connections closed), read the
//! response head (interim 1xx forwarded), send the response head and body to the client,
//! then return the server connection to the pool only if its response was read to its end
//! and the server keeps it open. Bodies go out re-framed (`BodyTracker::reframe`): each peer
//! reads exactly the framing the proxy decided. With `[frontend.splice]`, the rest of a
//! Content-Length body above `after_bytes` between two plain sockets goes by splice(2)
//! (`spliced.rs`), either way, after what came in with its head. A chunked response to an
//! HTTP/1.0 client (which the server should not have sent: the request went up as HTTP/1.0)
//! goes de-chunked, without Transfer-Encoding, and the client connection closes after it
//! (RFC 9112 §6.1).
//!
//! Retry rule: a request that failed on a *reused* connection before any response byte
//! arrived is sent once more on a fresh connection if its head never fully left (nothing
//! could have been processed) or if it is idempotent and had no body; anything else that
//! may have reached the server gets a 502 and is never replayed.

use std::future::Future;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::futures::Notified;

use super::client::ClientStream;
use super::inbound::Inbound;
use super::server_conn::{self, Back};
use super::spliced::{self, Splicer};
use super::stream::{RequestInfo, Session, lingering_close, request_tracker};
use super::upload::{self, Upload};
use crate::buffer::BufferPool;
use crate::config::model::Timeouts;
use crate::error::{Error, ErrorKind, Phase, Side};
use crate::http::compress::{self, Encoder, Facts, Verdict};
use crate::http::h1::{
    self, BodyFraming, BodyTracker, ConnectionOut, H1Error, HeadEdits, Method, ResponseHead, Version,
};
use crate::proxy::connect::{Connected, Retries};
use crate::relay::counted::Counted;
use crate::relay::idle::{self, Progress};
use crate::relay::splice::SpliceEnd;
use crate::relay::{Moved, ServerConn};
use crate::stats::{Counter, WorkerStats};

/// Times a request an HTTP/2 server did not process is sent again.
const MAX_UNPROCESSED_RETRIES: u32 = 3;

/// Bodies up to this size are written together with their head.
const COALESCE: usize = 16 * 1024;

pub(super) enum Outcome {
    /// The exchange finished; whether the client connection may carry another request.
    Done { keep_client: bool },
    /// Failed: the error decides whether to retry and what the client gets.
    Failed(Error),
}

pub(super) async fn forward<'a, C: ClientStream>(
    s: &mut Session<'a, C>,
    backend: usize,
    req: &RequestInfo,
    mut kills: Pin<&mut Notified<'a>>,
) -> Result<bool, Error> {
    let mut fresh_only = false;
    // Requests an HTTP/2 server never processed (refused, or turned away by GOAWAY).
    let mut unprocessed = 0;
    loop {
        let retries = Retries {
            done: &mut s.rec.retries,
            budget: req.limits.retries,
        };
        let opened = server_conn::open(s.ctx, backend, fresh_only, req.hash_key, req.prefer, retries).await;
        let conn = match opened {
            Ok(conn) => conn,
            Err(e) => {
                s.fail(&e).await?;
                return Ok(false);
            }
        };
        if conn.reused {
            s.ctx.stats.http_pool_reused.add(1);
        }
        // A stream on a shared HTTP/2 connection is retried like a request on a reused
        // one: only when the server cannot have acted on it.
        let h2 = matches!(conn.stream, Back::H2(_));
        let reused = conn.reused || h2;
        // `maint --kill` on this server closes the connection mid-exchange.
        let (ctx, live) = (s.ctx, std::sync::Arc::clone(conn.slot.server()));
        let epoch = live.kill_epoch();
        let sent = Counter::new();
        let outcome = tokio::select! {
            biased;
            outcome = dispatch(s, backend, req, conn, &sent) => outcome,
            () = ctx.killed(&live, epoch, kills.as_mut()) => {
                let why = format!("server {}/{} put in maintenance with --kill", live.backend_name, live.name);
                // The exchange is dropped: its record says how far it got (`KH` before the
                // response head, not `KT`).
                let killed = Error::new(ErrorKind::Killed, Side::Internal, why).during(s.rec.exchange_phase());
                Outcome::Failed(killed.at(backend, Some(live.id)))
            }
        };
        s.rec.bytes_to_server += sent.get();
        match outcome {
            Outcome::Done { keep_client } => return Ok(keep_client),
            // Once, on a fresh connection: a reused one may have been closed by the server
            // just as the request left.
            // Safe however often (the server says it did nothing), but bounded.
            Outcome::Failed(e)
                if h2
                    && e.retryable
                    && unprocessed < MAX_UNPROCESSED_RETRIES
                    && req.limits.may_retry(s.rec.retries) =>
            {
                tracing::debug!(error = %e, "HTTP/2 server did not process the request: sending it again");
                s.ctx.stats.http_retries.add(1);
                s.rec.retries += 1;
                unprocessed += 1;
            }
            Outcome::Failed(e)
                if !fresh_only && e.may_retry(req.replayable(), reused) && req.limits.may_retry(s.rec.retries) =>
            {
                tracing::debug!(error = %e, "retrying on a fresh connection");
                s.ctx.stats.http_retries.add(1);
                s.rec.retries += 1;
                fresh_only = true;
            }
            Outcome::Failed(e) => {
                s.fail(&e).await?;
                return Ok(false);
            }
        }
    }
}

/// The exchange for the connection's protocol (HTTP/2 boxed: the HTTP/1 future keeps its size).
async fn dispatch<C: ClientStream>(
    s: &mut Session<'_, C>,
    backend: usize,
    req: &RequestInfo,
    conn: Connected<'_, Back>,
    sent: &Counter,
) -> Outcome {
    let (stream, conn) = conn.take_stream();
    match stream {
        Back::H1(stream) => exchange(s, backend, req, conn.with(stream), sent).await,
        Back::H2(stream) => Box::pin(super::to_h2::exchange(s, backend, req, conn.with(stream), sent)).await,
        Back::Wait(..) => Outcome::Failed(Error::new(ErrorKind::NoServer, Side::Internal, "no connection")),
    }
}

async fn exchange<C: ClientStream>(
    s: &mut Session<'_, C>,
    backend: usize,
    req: &RequestInfo,
    conn: Connected<'_, ServerConn>,
    sent: &Counter,
) -> Outcome {
    let Connected {
        stream,
        slot,
        reused,
        chosen,
        connected,
    } = conn;
    let (id, tls) = (slot.server().id, slot.server().tls.is_some());
    let address = slot.server().address;
    let ctx = s.ctx;
    // Every byte to the server, by any path, is counted for the worker and this stream.
    let mut server = Counted::with_tally(stream, &ctx.stats.bytes_to_server, sent);
    let rec = &mut s.rec;
    (rec.backend, rec.server, rec.server_at) = (Some(backend), Some(id), Some(slot.position()));
    rec.timing.chosen = Some(rec.timing.since(chosen));
    rec.timing.connected = Some(rec.timing.since(connected));
    let timeouts = req.limits.timeouts;
    let at = |e: Error| e.at(backend, Some(id));
    // The head is still in `s.out`: a failure here means the server cannot have acted on it.
    if let Err(e) = server.write_all(&s.out).await {
        tracing::debug!(error = %e, reused, "sending request head failed");
        let e = Error::io(Side::Back, "send request head", e).during(Phase::Headers);
        return Outcome::Failed(at(e.retryable(true)));
    }
    let mut back = Inbound::default();
    let mut request_body = request_tracker(req.body, &req.limits);
    // The body will not be sent whole: close both connections after the response.
    let mut body_skipped = false;
    let mut server_first = false;
    if !request_body.is_done() && req.expect_continue {
        match await_continue(s, &mut server, &mut back, req).await {
            Ok(true) => {}
            Ok(false) => body_skipped = true,
            Err(e) => return Outcome::Failed(at(e)),
        }
    }
    if !request_body.is_done() && !body_skipped {
        let progress = Progress::default();
        let ctx = s.ctx;
        let upload = upload::send_body(s, &mut server, &mut back, &mut request_body, req, &progress);
        let sent = match crate::proxy::by_deadline(
            req.body_deadline,
            transfer(pin!(upload), &progress, timeouts.client),
        )
        .await
        {
            Some(sent) => sent,
            None => return Outcome::Failed(at(crate::proxy::body_timeout())),
        };
        if let Err(e) = &sent {
            e.log("request body", &ctx.stats);
        }
        match sent {
            Ok(Upload::Complete) => {}
            Ok(Upload::ServerFirst) => {
                tracing::debug!("server answered before the request body was complete");
                (body_skipped, server_first) = (true, true);
            }
            Err(e) => return Outcome::Failed(at(e.request_error())),
        }
    }

    let response = match read_response(s, &mut server, &mut back, req).await {
        Ok(r) => {
            slot.server().check.traffic_ok();
            r
        }
        Err(e) => {
            // Passive health: what only a broken server does. A reused connection closed
            // before answering is the keep-alive race, not the server's fault.
            let broken = matches!(e.kind, ErrorKind::BadResponse | ErrorKind::ResponseTimeout)
                || (e.kind == ErrorKind::ServerEmpty && !reused);
            if broken {
                crate::proxy::connect::server_error(slot.server());
            }
            return Outcome::Failed(at(e));
        }
    };
    s.rec.timing.response = Some(s.rec.timing.now());
    s.rec.status = response.status;
    s.capture_response(h1::MessageHead::headers(&response, back.data()));

    let switching = response.switching_protocols && req.upgrade;
    // RFC 9112 §6.1: no chunked body (no Transfer-Encoding at all) for an HTTP/1.0 client.
    // Its request went up as HTTP/1.0, but a server may chunk anyway: the body then goes
    // de-chunked and close-delimited. A coding before `chunked` would stay on the body, and
    // such a client cannot be told: that response is a server fault.
    let http10 = req.version == Version::Http10;
    let dechunk = http10 && response.body == BodyFraming::Chunked;
    if dechunk && response.transfer_coded {
        response.reclaim(&mut s.scratch);
        let why = "transfer-coded response for an HTTP/1.0 client";
        return Outcome::Failed(at(Error::new(ErrorKind::BadResponse, Side::Back, why)));
    }
    let keep_client = !switching
        && !dechunk
        && !body_skipped
        && req.keep_alive
        && response.body != BodyFraming::CloseDelimited
        && !s.ctx.is_stopping();
    let keep_server =
        !switching && response.keep_alive && response.body != BodyFraming::CloseDelimited && !body_skipped;
    let connection = if switching {
        ConnectionOut::Upgrade
    } else if !keep_client {
        ConnectionOut::Close
    } else if req.version == Version::Http10 {
        ConnectionOut::KeepAlive
    } else {
        ConnectionOut::Omit
    };
    // Compression (`compress`): never for an HTTP/1.0 client (as nginx's default), nor a
    // 101; a response eligible but over the thread's compressor budget only gains `Vary`.
    let mut verdict = match s.compress {
        Some(n) if !http10 && !switching => n.verdict(&Facts::gather(
            response.status,
            req.method == Method::Head,
            h1::MessageHead::headers(&response, back.data()),
        )),
        _ => Verdict::Untouched,
    };
    let mut compressing = match (verdict, s.compress) {
        (Verdict::Compress(coding), Some(n)) => ctx.compressors.start(coding, n.policy),
        _ => None,
    };
    if compressing.is_none() && matches!(verdict, Verdict::Compress(_)) {
        verdict = Verdict::VaryOnly;
    }
    s.out.clear();
    let sticky = ctx.backends.get(backend).and_then(|b| b.sticky.as_ref());
    let rewrite = s.rewrite;
    let id_field = super::stream::id_field(s.fe, s.request_id.as_ref(), true);
    let mut write_head = |append: &[u8]| {
        let edits = HeadEdits {
            connection,
            no_transfer_encoding: http10,
            cookie: sticky.map(|t| t.cookie()),
            append,
            rewrite,
            id_field,
            ..HeadEdits::default()
        };
        h1::write_response_head(&response, back.data(), &edits, &mut s.out);
    };
    match sticky {
        // A client that came with this server's cookie keeps it (HAProxy's `indirect`).
        Some(table) if req.prefer != Some(id) => {
            use crate::http::h1::MessageHead;
            let private = crate::http::cookie::kept_from_shared_caches(response.headers(back.data()));
            table.with_lines(id, private, write_head);
        }
        _ => write_head(b""),
    }
    compress::edit_h1_head(&mut s.out, verdict, true);
    if let Some(alt_svc) = s.fe.alt_svc() {
        h1::add_head_field(&mut s.out, b"alt-svc", alt_svc);
    }
    back.consume(response.head_len);
    let framing = response.body;
    response.reclaim(&mut s.scratch);

    if switching {
        return tunnel(s, server.into_inner(), back, sent, &timeouts).await;
    }
    let mut response_body = BodyTracker::new(framing, h1::Side::Response);
    let progress = Progress::default();
    let ctx = s.ctx;
    let mut prefix = std::mem::take(&mut s.out);
    let front_holds = s.front.holds_buffer();
    let splice =
        (spliced::wanted(s.fe.splice, framing) && server.is_plain() && s.client.is_plain()).then_some(Splicer {
            pipes: &ctx.pipes,
            stats: &ctx.stats,
        });
    let sent = match &mut compressing {
        Some(comp) => {
            let body = forward_compressed(
                &mut response_body,
                &mut back,
                &mut server,
                &mut s.client,
                &mut prefix,
                &ctx.buffers,
                front_holds,
                !keep_client,
                &mut comp.encoder,
                &progress,
            );
            transfer(pin!(body), &progress, timeouts.server).await
        }
        None => {
            let body = forward_body(
                &mut response_body,
                &mut back,
                &mut server,
                &mut s.client,
                &mut prefix,
                &ctx.buffers,
                front_holds,
                !keep_client,
                dechunk,
                splice,
                &progress,
            );
            transfer(pin!(body), &progress, timeouts.server).await
        }
    };
    drop(compressing);
    // Closing after this response: its tail goes out with the FIN.
    let sent = match sent {
        Ok(()) if !prefix.is_empty() => {
            let last = async { s.client.write_last(&prefix).await.map_err(BodyError::Write) };
            transfer(pin!(last), &progress, timeouts.client).await
        }
        other => other,
    };
    prefix.clear();
    s.out = prefix;
    match sent {
        Ok(()) => {
            if keep_server && back.is_empty() {
                drop(slot);
                s.ctx.http_pool.put(id, tls, address, server.into_inner());
            }
            if server_first {
                // The client may still be sending the body: closing with it unread would
                // reset the connection and could destroy the response before it is read.
                lingering_close(&mut s.client, &mut s.out).await;
            }
            Outcome::Done { keep_client }
        }
        // The response has started: nothing sensible can be sent any more, just close.
        Err(e) => {
            e.log("response body", &ctx.stats);
            Outcome::Failed(at(e.response_error()))
        }
    }
}

/// For `Expect: 100-continue`: let the server answer first, but stop waiting as soon as
/// the client sends its body anyway. `Ok(true)`: send the body; `Ok(false)`: the server
/// answered with a final response, the body will not be read (and the client connection
/// is closed after the response).
async fn await_continue<C: ClientStream>(
    s: &mut Session<'_, C>,
    server: &mut Counted<'_, ServerConn>,
    back: &mut Inbound,
    req: &RequestInfo,
) -> Result<bool, Error> {
    let limits = s.limits();
    let deadline = tokio::time::sleep(req.limits.timeouts.server);
    tokio::pin!(deadline);
    loop {
        if !back.is_empty() {
            match h1::parse_response_head(back.data(), &limits, req.method, &mut s.scratch) {
                Ok(Some(head)) if head.status == 100 => {
                    return if forward_interim(s, head, back, req).await {
                        Ok(true)
                    } else {
                        Err(client_gone())
                    };
                }
                Ok(Some(head)) => {
                    let final_response = !head.informational;
                    head.reclaim(&mut s.scratch);
                    return Ok(!final_response);
                }
                Ok(None) => {}
                Err(e) => {
                    s.capture(crate::ctx::errors::Direction::Response, back.data(), &e);
                    return Err(Error::new(ErrorKind::BadResponse, Side::Back, e.as_str()));
                }
            }
        }
        tokio::select! {
            biased;
            r = back.read_from(server, &s.ctx.buffers, true) => match r {
                Ok(0) => return Err(Error::new(ErrorKind::ServerEmpty, Side::Back, "server closed before 100-continue")),
                Err(e) => return Err(Error::io(Side::Back, "read 100-continue", e).during(Phase::Headers)),
                Ok(_) => {}
            },
            r = s.client.wait_for_data(&mut s.front, &s.ctx.buffers) => {
                return if matches!(r, Ok(false)) {
                    Ok(true)
                } else {
                    Err(client_gone())
                };
            }
            _ = &mut deadline => {
                return Err(Error::new(ErrorKind::ResponseTimeout, Side::Back, "no 100-continue within timeouts.server"));
            }
        }
    }
}

/// The client went away while the proxy waited for the server.
fn client_gone() -> Error {
    Error::new(ErrorKind::PeerClosed, Side::Front, "client gone").during(Phase::Headers)
}

/// Reads the final response head (forwarding interim 1xx responses to the client).
async fn read_response<C: ClientStream>(
    s: &mut Session<'_, C>,
    server: &mut Counted<'_, ServerConn>,
    back: &mut Inbound,
    req: &RequestInfo,
) -> Result<ResponseHead, Error> {
    let limits = s.limits();
    let deadline = tokio::time::sleep(req.limits.timeouts.server);
    tokio::pin!(deadline);
    let mut received = !back.is_empty();
    loop {
        if !back.is_empty() {
            match h1::parse_response_head(back.data(), &limits, req.method, &mut s.scratch) {
                Ok(Some(head)) if head.informational => {
                    if !forward_interim(s, head, back, req).await {
                        return Err(client_gone());
                    }
                    continue;
                }
                Ok(Some(head)) => return Ok(head),
                Ok(None) if back.is_full() => {
                    return Err(Error::new(
                        ErrorKind::BadResponse,
                        Side::Back,
                        "response head larger than the buffer",
                    ));
                }
                Ok(None) => {}
                Err(e) => {
                    s.capture(crate::ctx::errors::Direction::Response, back.data(), &e);
                    return Err(Error::new(ErrorKind::BadResponse, Side::Back, e.as_str()));
                }
            }
        }
        let second = s.front.holds_buffer();
        let read = tokio::select! {
            biased;
            r = back.read_from(server, &s.ctx.buffers, second) => r,
            _ = &mut deadline => {
                return Err(Error::new(ErrorKind::ResponseTimeout, Side::Back, "no response head within timeouts.server"));
            }
        };
        super::inbound::response_head_read(read, &mut received)?;
    }
}

/// Passes an interim (1xx) response on to an HTTP/1.1 client (an HTTP/1.0 client would not
/// understand it) and consumes it. False if the client is gone.
pub(super) async fn forward_interim<C: ClientStream>(
    s: &mut Session<'_, C>,
    head: ResponseHead,
    back: &mut Inbound,
    req: &RequestInfo,
) -> bool {
    let mut sent = true;
    if req.version == Version::Http11 {
        s.out.clear();
        h1::write_response_head(&head, back.data(), &HeadEdits::default(), &mut s.out);
        sent = s.client.write_all(&s.out).await.is_ok();
    }
    back.consume(head.head_len);
    head.reclaim(&mut s.scratch);
    sent
}

/// After a 101: pass the bytes already read on, then relay both ways until both close.
async fn tunnel<C: ClientStream>(
    s: &mut Session<'_, C>,
    server: ServerConn,
    back: Inbound,
    tally: &Counter,
    timeouts: &Timeouts,
) -> Outcome {
    let mut head = std::mem::take(&mut s.out);
    head.extend_from_slice(back.data());
    let sent = s.client.write_all(&head).await;
    head.clear();
    s.out = head;
    if let Err(e) = sent {
        return Outcome::Failed(Error::io(Side::Front, "write 101 response", e).during(Phase::Data));
    }
    let mut server = server;
    if !s.front.is_empty() {
        // Flushed: the relay reads a TLS server without pushing out what this left in rustls.
        let to_server = &s.ctx.stats.bytes_to_server;
        let mut counted = Counted::with_tally(&mut server, to_server, tally);
        let sent = match counted.write_all(s.front.data()).await {
            Ok(()) => counted.flush().await,
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            return Outcome::Failed(Error::io(Side::Back, "write to tunnel", e).during(Phase::Tunnel));
        }
        s.front.consume(s.front.data().len());
    }
    s.front.release_if_empty();
    crate::ctx::sessions::set_state(crate::ctx::sessions::SessionState::Tunnel);
    let moved = Moved::default();
    let relayed = s
        .client
        .tunnel(s.ctx, &mut server, timeouts.tunnel_idle(), s.fe.splice, &moved)
        .await;
    s.rec.bytes_to_server += moved.to_server.get();
    s.rec.bytes_to_client += moved.to_client.get();
    if let Err(e) = relayed {
        tracing::debug!(error = %e, "tunnel ended");
    }
    Outcome::Done { keep_client: false }
}

/// Reads and drops a request body the proxy answers itself; an error if the connection
/// cannot continue (its status, if any, is for the client).
pub(super) async fn discard_body<C: ClientStream>(s: &mut Session<'_, C>, req: &RequestInfo) -> Result<(), Error> {
    let mut tracker = request_tracker(req.body, &req.limits);
    if tracker.is_done() {
        return Ok(());
    }
    let progress = Progress::default();
    let ctx = s.ctx;
    let mut prefix = Vec::new();
    let mut sink = tokio::io::sink();
    let done = transfer(
        pin!(forward_body(
            &mut tracker,
            &mut s.front,
            &mut s.client,
            &mut sink,
            &mut prefix,
            &ctx.buffers,
            false,
            false,
            false,
            None,
            &progress,
        )),
        &progress,
        ctx.shared.config.timeouts.client,
    )
    .await;
    if let Err(e) = &done {
        e.log("discarded request body", &ctx.stats);
    }
    done.map_err(BodyError::request_error)
}

pub(super) enum BodyError {
    Read(std::io::Error),
    Write(std::io::Error),
    Framing(H1Error),
    Idle,
}

impl BodyError {
    /// Logs at debug (the caller decides what the operator sees) and counts idle timeouts.
    fn log(&self, what: &str, stats: &WorkerStats) {
        match self {
            BodyError::Read(e) => tracing::debug!(error = %e, "{what}: read failed"),
            BodyError::Write(e) => tracing::debug!(error = %e, "{what}: write failed"),
            BodyError::Framing(e) => tracing::debug!(error = %e, "{what}: bad framing"),
            BodyError::Idle => {
                stats.idle_timeouts.add(1);
                tracing::debug!("{what}: idle timeout")
            }
        }
    }

    /// The error of a request body (client → server) that failed before any response.
    fn request_error(self) -> Error {
        match self {
            BodyError::Read(e) => Error::io(Side::Front, "read request body", e).during(Phase::Request),
            BodyError::Write(e) => Error::io(Side::Back, "send request body", e).during(Phase::Headers),
            BodyError::Framing(e) => Error::new(ErrorKind::BadRequest(e.status()), Side::Front, e.as_str()),
            BodyError::Idle => {
                Error::new(ErrorKind::IdleTimeout, Side::Front, "request body idle").during(Phase::Request)
            }
        }
    }

    /// The error of a response body that failed after its head was sent.
    fn response_error(self) -> Error {
        let e = match self {
            BodyError::Read(e) => Error::io(Side::Back, "read response body", e),
            BodyError::Write(e) => Error::io(Side::Front, "write response body", e),
            // The server hanging up mid-body is a hang-up (debug), not a framing fault.
            BodyError::Framing(e) if e.kind() == h1::ErrorKind::TruncatedBody => {
                Error::new(ErrorKind::PeerClosed, Side::Back, e.as_str())
            }
            BodyError::Framing(e) => Error::new(ErrorKind::BadResponse, Side::Back, e.as_str()),
            BodyError::Idle => Error::new(ErrorKind::IdleTimeout, Side::Back, "response body idle"),
        };
        e.during(Phase::Data)
    }
}

/// Runs a body transfer under one idle watchdog (no timer per read or write). Most bodies
/// complete without ever waiting: those are polled once and never arm a timer at all.
/// The caller pins `body` in its own state: a future taken by value and pinned here would be
/// stored twice in this one's (the argument and the pinned local).
async fn transfer<T, F: Future<Output = Result<T, BodyError>>>(
    mut body: Pin<&mut F>,
    progress: &Progress,
    idle: Duration,
) -> Result<T, BodyError> {
    if let Poll::Ready(done) = std::future::poll_fn(|cx| Poll::Ready(body.as_mut().poll(cx))).await {
        return done;
    }
    tokio::select! {
        biased;
        r = body => r,
        _ = idle::watchdog(progress, idle) => Err(BodyError::Idle),
    }
}

/// Forwards one body from `src` (starting with the bytes already in `inbound`) to `dst`,
/// re-framed (see `BodyTracker::reframe`), preceded by `prefix` (a head), coalesced into one
/// write when the body start is small.
/// Leaves any bytes after the body (a pipelined request) in `inbound`. With `hold_last`,
/// the final coalesced bytes stay in `prefix` for the caller to write (see `write_last`).
/// With `decode`, a chunked body goes as its content only (`BodyTracker::decode`), for a
/// peer that reads it close-delimited.
/// With `splice` (a Content-Length body between two plain sockets, `spliced::wanted`), the
/// rest goes by splice(2) once `inbound` holds none of it; without a free pipe, copied.
/// Counting is the writer's business (`Counted`, `SpliceEnd::spliced_into`): this counts
/// nothing.
#[allow(clippy::too_many_arguments)]
async fn forward_body<R, W>(
    tracker: &mut BodyTracker,
    inbound: &mut Inbound,
    src: &mut R,
    dst: &mut W,
    prefix: &mut Vec<u8>,
    pool: &Rc<BufferPool>,
    second: bool,
    hold_last: bool,
    decode: bool,
    splice: Option<Splicer<'_>>,
    progress: &Progress,
) -> Result<(), BodyError>
where
    R: AsyncRead + SpliceEnd + Unpin,
    W: AsyncWrite + SpliceEnd + Unpin,
{
    loop {
        if !inbound.is_empty() && !tracker.is_done() {
            // Re-framed in place: the peer reads the framing the tracker decided.
            let r = if decode {
                tracker.decode(inbound.data_mut())
            } else {
                tracker.reframe(inbound.data_mut())
            };
            let r = r.map_err(BodyError::Framing)?;
            let (lead, chunk) = (r.lead(), inbound.data().get(..r.out).unwrap_or_default());
            if !prefix.is_empty() && prefix.len() + lead.len() + chunk.len() <= COALESCE {
                prefix.extend_from_slice(lead);
                prefix.extend_from_slice(chunk);
            } else {
                flush(dst, prefix).await?;
                if !lead.is_empty() {
                    dst.write_all(lead).await.map_err(BodyError::Write)?;
                }
                dst.write_all(chunk).await.map_err(BodyError::Write)?;
            }
            progress.moved(r.consumed);
            inbound.consume(r.consumed);
        }
        if tracker.is_done() {
            return if hold_last { Ok(()) } else { flush(dst, prefix).await };
        }
        flush(dst, prefix).await?;
        if let Some(sp) = splice
            && inbound.is_empty()
            && let Some(mut exact) = sp.start(src, dst, tracker)
        {
            // No buffer held while the pipe carries the rest.
            inbound.release_if_empty();
            std::future::poll_fn(|cx| sp.poll_move(cx, &mut exact, src, dst, tracker, progress)).await?;
            continue;
        }
        match inbound.read_from(src, pool, second).await {
            Ok(0) => {
                tracker.on_eof().map_err(BodyError::Framing)?;
                return Ok(());
            }
            Ok(_) => {}
            Err(e) => return Err(BodyError::Read(e)),
        }
    }
}

/// [`forward_body`] through a compressor (`compress`): the body's content (de-chunked) goes
/// into `encoder`, its output to `dst` as chunks, after `prefix` (the head). Whenever the
/// next read from `src` would wait, what was compressed so far is flushed and sent first,
/// so a streamed response (SSE, long polling) reaches the client as the server writes it;
/// otherwise output collects up to `COALESCE` bytes per write. Ends with the coding's last
/// bytes and the last chunk (the server's trailers are dropped: they described the
/// uncompressed body). With `hold_last`, the final bytes stay in `prefix`, as `forward_body`.
#[allow(clippy::too_many_arguments)]
async fn forward_compressed<R, W>(
    tracker: &mut BodyTracker,
    inbound: &mut Inbound,
    src: &mut R,
    dst: &mut W,
    prefix: &mut Vec<u8>,
    pool: &Rc<BufferPool>,
    second: bool,
    hold_last: bool,
    encoder: &mut Encoder,
    progress: &Progress,
) -> Result<(), BodyError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let compress_failed = |e: std::io::Error| BodyError::Write(std::io::Error::other(format!("compression: {e}")));
    loop {
        if !inbound.is_empty() && !tracker.is_done() {
            let r = tracker.decode(inbound.data_mut()).map_err(BodyError::Framing)?;
            let content = inbound.data().get(..r.out).unwrap_or_default();
            encoder.push(content).map_err(compress_failed)?;
            progress.moved(r.consumed);
            inbound.consume(r.consumed);
            encoder.drain(|out| h1::push_chunk(prefix, out));
            if prefix.len() >= COALESCE {
                flush(dst, prefix).await?;
            }
        }
        if tracker.is_done() {
            break;
        }
        let mut read = pin!(inbound.read_from(src, pool, second));
        let read = match std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await {
            Poll::Ready(r) => r,
            Poll::Pending => {
                // The server has nothing more for now: what it sent goes out whole.
                encoder.flush().map_err(compress_failed)?;
                encoder.drain(|out| h1::push_chunk(prefix, out));
                flush(dst, prefix).await?;
                read.await
            }
        };
        match read {
            Ok(0) => {
                tracker.on_eof().map_err(BodyError::Framing)?;
                break;
            }
            Ok(_) => {}
            Err(e) => return Err(BodyError::Read(e)),
        }
    }
    encoder.finish().map_err(compress_failed)?;
    encoder.drain(|out| h1::push_chunk(prefix, out));
    prefix.extend_from_slice(b"0\r\n\r\n");
    if hold_last { Ok(()) } else { flush(dst, prefix).await }
}

async fn flush<W: AsyncWrite + Unpin>(dst: &mut W, prefix: &mut Vec<u8>) -> Result<(), BodyError> {
    if !prefix.is_empty() {
        dst.write_all(prefix).await.map_err(BodyError::Write)?;
        prefix.clear();
    }
    Ok(())
}
