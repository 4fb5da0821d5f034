//! An HTTP/1 client's request to a `proto = "h2"` server: the rewritten HTTP/1 head (with
//! the forwarding headers the HTTP/1 path adds) becomes `http::request::Parts`, the body
//! (its HTTP/1 framing decoded by `BodyTracker::decode`) goes out as DATA under the
//! server's flow control, and the HTTP/2 response comes back as a strict HTTP/1.1 response:
//! `content-length` when known, else chunked for an HTTP/1.1 client, else close-delimited;
//! trailers as chunked trailers when the client sent `TE: trailers`, otherwise dropped.
//! Interim (1xx) heads are passed on to an HTTP/1.1 client before the final one
//! ([`Interims`]), 100 Continue excepted (the proxy answers `expect` itself).
//!
//! Invariants: connection-specific headers (Connection, Keep-Alive, Proxy-Connection,
//! Transfer-Encoding, Upgrade, TE other than `trailers`) never reach the server; Host
//! becomes `:authority`. A failure before the response head leaves the client answerable
//! (502/503/504 by `Error::http_status`); only a request the server cannot have processed
//! and that had no body is retried (`h2back`).

use std::cell::RefCell;
use std::io::Write;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::Poll;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::client::ClientStream;
use super::exchange::Outcome;
use super::inbound::Inbound;
use super::stream::{RequestInfo, Session};
use crate::buffer::BufferPool;
use crate::error::{Error, ErrorKind, Phase, Side};
use crate::http::compress::{self, Encoder, Facts, Verdict};
use crate::http::h1::{self, BodyTracker, Method, Version};
use crate::proxy::connect::Connected;
use crate::proxy::h2back::{self, Lease, RequestBody, ResponseBody};
use crate::relay::idle::{self, Progress};
use crate::stats::{Counter, WorkerStats};

/// Request headers that describe the HTTP/1 connection, not the request.
const CONNECTION_HEADERS: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "expect",
];

/// What the exchange needs to know of the request besides its head.
struct Asked {
    /// The client accepts trailers (`TE: trailers`).
    trailers: bool,
}

pub(super) async fn exchange<C: ClientStream>(
    s: &mut Session<'_, C>,
    backend: usize,
    req: &RequestInfo,
    conn: Connected<'_, Lease>,
    sent: &Counter,
) -> Outcome {
    let Connected {
        stream: lease,
        slot,
        chosen,
        connected,
        ..
    } = conn;
    let server = std::sync::Arc::clone(slot.server());
    let id = server.id;
    let rec = &mut s.rec;
    (rec.backend, rec.server, rec.server_at) = (Some(backend), Some(id), Some(slot.position()));
    rec.timing.chosen = Some(rec.timing.since(chosen));
    rec.timing.connected = Some(rec.timing.since(connected));
    let at = |e: Error| e.at(backend, Some(id));
    let limit = s.ctx.shared.config.http.max_headers.saturating_add(16);
    let (parts, asked) = match request_parts(&s.out, limit, server.tls.is_some(), server.address, req.te_trailers) {
        Ok(p) => p,
        Err(e) => return Outcome::Failed(at(e)),
    };
    let head_len = s.out.len() as u64;
    let mut tracker = super::stream::request_tracker(req.body, &req.limits);
    let has_body = !tracker.is_done();
    let (mut body, pending) = match h2back::start(lease, parts, !has_body).await {
        Ok(started) => started,
        Err(e) => return Outcome::Failed(at(e)),
    };
    count(s, sent, head_len);
    if has_body && req.expect_continue && req.version == Version::Http11 {
        // The server cannot say 100 over HTTP/2 here: the proxy invites the body itself.
        if s.client.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err() {
            return Outcome::Failed(client_gone());
        }
    }
    let timeouts = req.limits.timeouts;
    let interims = Interims::new(req.version);
    let mut response = pin!(pending.head(|head| interims.queue(head)));
    // A response head that came while the body was still going up.
    let mut early = None;
    let mut unsent = None;
    if has_body {
        let progress = Progress::default();
        let ctx = s.ctx;
        let uploaded = {
            let client = &mut s.client;
            let up = Upload {
                front: &mut s.front,
                pending: &mut unsent,
                pool: &ctx.buffers,
                stats: &ctx.stats,
                sent,
                progress: &progress,
            };
            let upload = pin!(up.run(client, &mut body, &mut tracker));
            tokio::select! {
                biased;
                r = upload => r,
                // The server answered before the body was complete: the rest goes up while
                // the response comes down (`respond`).
                r = response.as_mut() => {
                    early = Some(r);
                    Ok(())
                }
                () = idle::watchdog(&progress, timeouts.client) => {
                    ctx.stats.idle_timeouts.add(1);
                    let e = Error::new(ErrorKind::IdleTimeout, Side::Front, "request body idle");
                    Err(e.during(Phase::Request))
                }
                () = crate::proxy::until(req.body_deadline) => Err(crate::proxy::body_timeout()),
            }
        };
        if let Err(e) = uploaded {
            body.cancel();
            return Outcome::Failed(at(e));
        }
    }
    let duplex = early.is_some();
    let head = match early {
        Some(r) => Ok(interims.flush(&mut s.client).await.and(r)),
        None => tokio::time::timeout(timeouts.server, interims.until_final(&mut s.client, response)).await,
    };
    let head = match head {
        Ok(Ok(head)) => {
            server.check.traffic_ok();
            head
        }
        Ok(Err(e)) => {
            if e.kind == ErrorKind::BadResponse {
                crate::proxy::connect::server_error(&server);
            }
            // A body already sent cannot be sent again.
            let e = if has_body { e.retryable(false) } else { e };
            return Outcome::Failed(at(e));
        }
        Err(_) => {
            crate::proxy::connect::server_error(&server);
            let e = Error::new(
                ErrorKind::ResponseTimeout,
                Side::Back,
                "no response head within timeouts.server",
            );
            return Outcome::Failed(at(e));
        }
    };
    s.rec.timing.response = Some(s.rec.timing.now());
    let rest = duplex.then_some((&mut body, &mut tracker, &mut unsent));
    let outcome = respond(s, (backend, id), req, head, &asked, rest, sent).await;
    drop(slot);
    let cut = matches!(outcome, Ok((_, true)));
    if cut {
        body.cancel();
        // The client may still be sending the body: closing with it unread would reset the
        // connection and could destroy the response before it is read.
        super::stream::lingering_close(&mut s.client, &mut s.out).await;
    }
    match outcome {
        Ok((keep_client, _)) => Outcome::Done { keep_client },
        Err(e) => Outcome::Failed(at(e)),
    }
}

/// Interim heads waiting at once; more are dropped while the queue is full (a server could
/// send them without end while the upload holds the client).
const MAX_INTERIM: usize = 16;

/// The HTTP/2 server's interim (1xx) heads on their way to an HTTP/1.1 client, as the h1
/// path passes an HTTP/1.1 server's on (`exchange::forward_interim`). The response future
/// queues them; they are written between its polls, or, during an upload (which holds the
/// client), once it ends. Not 100 Continue: the proxy answers `expect: 100-continue`
/// itself. None for an HTTP/1.0 client, which would not understand them.
struct Interims {
    queued: RefCell<Vec<http::Response<()>>>,
    wanted: bool,
}

impl Interims {
    fn new(version: Version) -> Self {
        Interims {
            queued: RefCell::new(Vec::new()),
            wanted: version == Version::Http11,
        }
    }

    fn queue(&self, head: http::Response<()>) {
        let mut queued = self.queued.borrow_mut();
        if self.wanted && head.status() != http::StatusCode::CONTINUE && queued.len() < MAX_INTERIM {
            queued.push(head);
        }
    }

    /// Writes the queued heads (an error: the client is gone). Not through the session's
    /// `out`: it still holds the request head, sent again if the stream is retried.
    async fn flush<W: AsyncWrite + Unpin>(&self, client: &mut W) -> Result<(), Error> {
        let queued = std::mem::take(&mut *self.queued.borrow_mut());
        let mut out = Vec::new();
        for interim in &queued {
            let head = Head {
                status: interim.status().as_u16(),
                headers: interim.headers(),
                framing: Framing::None,
                keep_client: true,
                version: Version::Http11,
                length: None,
                append: b"",
                rules: None,
            };
            write_head(&mut out, &head);
            client.write_all(&out).await.map_err(|_| client_gone())?;
        }
        Ok(())
    }

    /// Waits for the final head, writing interim ones as they come. The queue only grows
    /// inside `response`'s poll, and the check after it runs in the same round: no waker.
    async fn until_final<W: AsyncWrite + Unpin, R>(
        &self,
        client: &mut W,
        mut response: Pin<&mut impl Future<Output = Result<R, Error>>>,
    ) -> Result<R, Error> {
        loop {
            self.flush(client).await?;
            tokio::select! {
                biased;
                r = response.as_mut() => {
                    self.flush(client).await?;
                    return r;
                }
                () = std::future::poll_fn(|_| if self.queued.borrow().is_empty() { Poll::Pending } else { Poll::Ready(()) }) => {}
            }
        }
    }
}

fn count<C>(s: &Session<'_, C>, sent: &Counter, n: u64) {
    sent.add(n);
    s.ctx.stats.bytes_to_server.add(n);
}

fn client_gone() -> Error {
    Error::new(ErrorKind::PeerClosed, Side::Front, "client gone").during(Phase::Headers)
}

/// A decoded piece of the request body not yet (fully) sent, and whether it ends the body.
type Unsent = Option<(Bytes, bool)>;

/// What streaming the request body up needs of the session (borrowed apart from the
/// client socket, which may be split for a full-duplex exchange).
struct Upload<'s> {
    front: &'s mut Inbound,
    /// A decoded piece not yet (fully) sent, and whether it ends the body: kept outside the
    /// future, so an upload paused for the response head loses nothing.
    pending: &'s mut Unsent,
    pool: &'s Rc<BufferPool>,
    stats: &'s WorkerStats,
    sent: &'s Counter,
    progress: &'s Progress,
}

impl Upload<'_> {
    /// Streams the request body from `client` to the server, decoded from its HTTP/1 framing.
    async fn run<R: AsyncRead + Unpin>(
        self,
        client: &mut R,
        body: &mut RequestBody,
        tracker: &mut BodyTracker,
    ) -> Result<(), Error> {
        loop {
            if let Some((chunk, end)) = self.pending.as_mut() {
                let end = *end;
                body.send(chunk, end).await?;
                *self.pending = None;
                if end {
                    return Ok(());
                }
            }
            if tracker.is_done() {
                return Ok(());
            }
            if !self.front.is_empty() {
                let r = tracker.decode(self.front.data_mut()).map_err(|e| {
                    Error::new(ErrorKind::BadRequest(e.status()), Side::Front, e.as_str()).during(Phase::Request)
                })?;
                let chunk = Bytes::copy_from_slice(self.front.data().get(..r.out).unwrap_or_default());
                self.front.consume(r.consumed);
                self.progress.moved(r.consumed);
                self.sent.add(chunk.len() as u64);
                self.stats.bytes_to_server.add(chunk.len() as u64);
                *self.pending = Some((chunk, r.done));
                continue;
            }
            match self.front.read_from(client, self.pool, false).await {
                Ok(0) => {
                    let e = Error::new(ErrorKind::PeerClosed, Side::Front, "client closed mid request body");
                    return Err(e.during(Phase::Request));
                }
                Ok(_) => {}
                Err(e) => return Err(Error::io(Side::Front, "read request body", e).during(Phase::Request)),
            }
        }
    }
}

/// Sends the response to the client as HTTP/1.1; `rest`: the request body still to send
/// (the response head came first), sent up while the response comes down. Returns whether
/// the client connection stays open, and whether the request body was cut short (the
/// response ended first, or the server stopped reading it).
async fn respond<C: ClientStream>(
    s: &mut Session<'_, C>,
    (backend, server): (usize, crate::live::ServerId),
    req: &RequestInfo,
    (mut parts, mut body): (http::response::Parts, ResponseBody),
    asked: &Asked,
    rest: Option<(&mut RequestBody, &mut BodyTracker, &mut Unsent)>,
    sent: &Counter,
) -> Result<(bool, bool), Error> {
    let status = parts.status.as_u16();
    s.rec.status = status;
    s.capture_response(parts.headers.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())));
    crate::http::request_id::set_field(
        &mut parts.headers,
        super::stream::id_field(s.fe, s.request_id.as_ref(), true),
    );
    if let Some(v) = s.fe.alt_svc().and_then(|v| http::HeaderValue::from_bytes(v).ok()) {
        parts.headers.append(http::header::ALT_SVC, v);
    }
    let bodiless = req.method == Method::Head || matches!(status, 100..=199 | 204 | 304);
    // Compression (`compress`), as the h1 path: not for an HTTP/1.0 client, the head edited
    // before it is written, over the compressor budget only `Vary`.
    let mut verdict = match s.compress {
        Some(n) if req.version == Version::Http11 => n.verdict(&Facts::gather(
            status,
            req.method == Method::Head,
            parts.headers.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())),
        )),
        _ => Verdict::Untouched,
    };
    let mut compressing = match (verdict, s.compress) {
        (Verdict::Compress(coding), Some(n)) if !body.is_end_stream() => s.ctx.compressors.start(coding, n.policy),
        _ => None,
    };
    if compressing.is_none() && matches!(verdict, Verdict::Compress(_)) {
        verdict = Verdict::VaryOnly;
    }
    compress::edit_h2_head(&mut parts.headers, verdict);
    let length = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let framing = match (bodiless, length) {
        (true, _) => Framing::None,
        (false, Some(_)) => Framing::Length,
        (false, None) if body.is_end_stream() => Framing::Empty,
        (false, None) if req.version == Version::Http11 => Framing::Chunked,
        (false, None) => Framing::Close,
    };
    let keep = req.keep_alive && framing != Framing::Close && !s.ctx.is_stopping();
    let mut out = std::mem::take(&mut s.out);
    let ctx = s.ctx;
    let head = Head {
        status,
        headers: &parts.headers,
        framing,
        keep_client: keep,
        version: req.version,
        length,
        append: b"",
        rules: s.rewrite.map(|r| &r.response_headers),
    };
    match ctx.backends.get(backend).and_then(|b| b.sticky.as_ref()) {
        // A client that came with this server's cookie keeps it (HAProxy's `indirect`).
        Some(table) if req.prefer != Some(server) => {
            let fields = parts.headers.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
            let private = crate::http::cookie::kept_from_shared_caches(fields);
            table.with_lines(server, private, |append| write_head(&mut out, &Head { append, ..head }));
        }
        _ => write_head(&mut out, &head),
    }
    let progress = Progress::default();
    let idle = req.limits.timeouts.server;
    // Trailers describe the body as the server sent it: not a compressed one.
    let trailers = asked.trailers && framing == Framing::Chunked && compressing.is_none();
    let mut encoder = compressing.as_mut().map(|c| &mut c.encoder);
    let mut cut = false;
    let transfer = async {
        let Some((request, tracker, pending)) = rest else {
            return send_body(
                &mut s.client,
                &mut body,
                &mut out,
                framing,
                trailers,
                encoder,
                &progress,
            )
            .await;
        };
        let (mut rd, mut wr) = tokio::io::split(&mut s.client);
        let up = Upload {
            front: &mut s.front,
            pending,
            pool: &ctx.buffers,
            stats: &ctx.stats,
            sent,
            progress: &progress,
        };
        let mut up = pin!(up.run(&mut rd, request, tracker));
        let mut down = pin!(send_body(
            &mut wr,
            &mut body,
            &mut out,
            framing,
            trailers,
            encoder.take(),
            &progress
        ));
        let mut uploading = true;
        loop {
            tokio::select! {
                r = &mut up, if uploading => match r {
                    Ok(()) => uploading = false,
                    // The server stopped reading: its response still comes.
                    Err(e) if e.side == Side::Back => {
                        tracing::debug!(error = %e, "request body cut short by the server");
                        (uploading, cut) = (false, true);
                    }
                    Err(e) => break Err(e),
                },
                r = &mut down => {
                    cut |= uploading;
                    break r;
                }
            }
        }
    };
    let sent = tokio::select! {
        biased;
        r = transfer => r,
        () = idle::watchdog(&progress, idle) => {
            ctx.stats.idle_timeouts.add(1);
            Err(Error::new(ErrorKind::IdleTimeout, Side::Back, "response body idle").during(Phase::Data))
        }
    };
    // A request body not read to its end: the client connection cannot carry another request.
    let keep_client = keep && !cut;
    let sent = match sent {
        Ok(()) if !keep_client => s
            .client
            .write_last(&out)
            .await
            .map_err(|e| Error::io(Side::Front, "write response", e).during(Phase::Data)),
        Ok(()) => s
            .client
            .write_all(&out)
            .await
            .map_err(|e| Error::io(Side::Front, "write response", e).during(Phase::Data)),
        Err(e) => Err(e),
    };
    out.clear();
    s.out = out;
    sent.map(|()| (keep_client, cut))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body by the rules of the request or status.
    None,
    /// The server's content-length.
    Length,
    /// The response ended with its head: `content-length: 0`.
    Empty,
    Chunked,
    /// HTTP/1.0 client, length unknown: the body ends with the connection.
    Close,
}

/// What the HTTP/1.1 response head says.
struct Head<'a> {
    status: u16,
    headers: &'a http::HeaderMap,
    framing: Framing,
    keep_client: bool,
    version: Version,
    /// The body's length as the server gave it (written only for `Length` and `None`).
    length: Option<u64>,
    /// Lines the proxy adds (a sticky cookie), CRLF-terminated.
    append: &'a [u8],
    /// The matched route's response rules.
    rules: Option<&'a crate::http::rewrite::HeaderRules>,
}

/// The HTTP/1.1 response head, into `out`.
fn write_head(out: &mut Vec<u8>, head: &Head<'_>) {
    out.clear();
    let _ = write!(
        out,
        "HTTP/1.1 {} {}\r\n",
        head.status,
        crate::http::status::reason(head.status)
    );
    for (name, value) in head.headers {
        let name = name.as_str();
        // Content-Length is written from the one value the framing was decided on: a list or
        // a bad value can never reach the client beside another framing.
        if matches!(
            name,
            "connection" | "keep-alive" | "transfer-encoding" | "upgrade" | "proxy-connection" | "content-length"
        ) || head.rules.is_some_and(|r| r.drops(name.as_bytes()))
        {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(rules) = head.rules {
        // Response rules hold no variables (config load refuses them).
        rules.write_h1(&crate::http::rewrite::RequestVars::default(), out);
    }
    match (head.framing, head.length) {
        (Framing::Length | Framing::None, Some(n)) => {
            let _ = write!(out, "content-length: {n}\r\n");
        }
        (Framing::Empty, _) => out.extend_from_slice(b"content-length: 0\r\n"),
        (Framing::Chunked, _) => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        (Framing::None | Framing::Length | Framing::Close, _) => {}
    }
    if !head.keep_client {
        out.extend_from_slice(b"connection: close\r\n");
    } else if head.version == Version::Http10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(head.append);
    out.extend_from_slice(b"\r\n");
}

/// The response body (and trailers) to the client. What is left in `out` at the end is for
/// the caller to write (with the FIN when the connection closes). With an `encoder`
/// (`compress`, always chunked), the data goes through it and its output out as chunks,
/// flushed whenever the server's next DATA is not there yet.
async fn send_body<W: AsyncWrite + Unpin>(
    client: &mut W,
    body: &mut ResponseBody,
    out: &mut Vec<u8>,
    framing: Framing,
    trailers: bool,
    mut encoder: Option<&mut Encoder>,
    progress: &Progress,
) -> Result<(), Error> {
    let write_error = |e: std::io::Error| Error::io(Side::Front, "write response body", e).during(Phase::Data);
    let compress_failed =
        |e: std::io::Error| Error::new(ErrorKind::Io, Side::Internal, format!("compression: {e}")).during(Phase::Data);
    if framing != Framing::None && framing != Framing::Empty {
        loop {
            let next = {
                let mut next = pin!(body.data());
                match std::future::poll_fn(|cx| std::task::Poll::Ready(next.as_mut().poll(cx))).await {
                    std::task::Poll::Ready(d) => d,
                    std::task::Poll::Pending => {
                        // The server has nothing more for now: what it sent goes out whole.
                        if let Some(e) = &mut encoder {
                            e.flush().map_err(compress_failed)?;
                            e.drain(|o| h1::push_chunk(out, o));
                            client.write_all(out).await.map_err(write_error)?;
                            out.clear();
                        }
                        next.await
                    }
                }
            };
            let Some(data) = next else { break };
            let data = data?;
            let n = data.len();
            if n == 0 {
                continue;
            }
            if let Some(e) = &mut encoder {
                e.push(&data).map_err(compress_failed)?;
                e.drain(|o| h1::push_chunk(out, o));
                if out.len() >= 16 * 1024 {
                    client.write_all(out).await.map_err(write_error)?;
                    out.clear();
                }
                body.release(n);
                progress.moved(n);
                continue;
            }
            if framing == Framing::Chunked {
                let _ = write!(out, "{n:x}\r\n");
            }
            if out.len() + n <= 16 * 1024 {
                out.extend_from_slice(&data);
            } else {
                client.write_all(out).await.map_err(write_error)?;
                out.clear();
                client.write_all(&data).await.map_err(write_error)?;
            }
            if framing == Framing::Chunked {
                out.extend_from_slice(b"\r\n");
            }
            // Flushed at once: a streaming server's pieces reach the client as they come.
            client.write_all(out).await.map_err(write_error)?;
            out.clear();
            body.release(n);
            progress.moved(n);
        }
    }
    if let Some(e) = &mut encoder {
        e.finish().map_err(compress_failed)?;
        e.drain(|o| h1::push_chunk(out, o));
    }
    if framing == Framing::Chunked {
        out.extend_from_slice(b"0\r\n");
        if let Some(map) = body.trailers().await?
            && trailers
        {
            for (name, value) in &map {
                out.extend_from_slice(name.as_str().as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(value.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
        out.extend_from_slice(b"\r\n");
    }
    Ok(())
}

/// The rewritten HTTP/1 request head as HTTP/2 request parts (`limit`: most headers taken).
fn request_parts(
    head: &[u8],
    limit: usize,
    tls: bool,
    address: std::net::SocketAddr,
    te_trailers: bool,
) -> Result<(http::request::Parts, Asked), Error> {
    let bad = |what: &str| Error::new(ErrorKind::BadRequest(400), Side::Front, format!("to HTTP/2: {what}"));
    let mut headers = vec![httparse::EMPTY_HEADER; limit];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(bad("unparsable head")),
    }
    let method = http::Method::from_bytes(parsed.method.unwrap_or("GET").as_bytes()).map_err(|_| bad("method"))?;
    let target = parsed.path.unwrap_or("/");
    let host = parsed
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("host"))
        .and_then(|h| std::str::from_utf8(h.value).ok());
    let uri = target_uri(target, host, tls, address).ok_or_else(|| bad("request target"))?;
    let mut builder = http::Request::builder().method(method).uri(uri);
    let mut asked = Asked { trailers: false };
    for h in parsed.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if name == "host" || CONNECTION_HEADERS.contains(&name.as_str()) {
            continue;
        }
        if name == "te" {
            // Only `trailers` may cross into HTTP/2 (RFC 9113 8.2.2).
            if !h
                .value
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"))
            {
                continue;
            }
            asked.trailers = true;
            builder = builder.header("te", "trailers");
            continue;
        }
        builder = builder.header(name, h.value);
    }
    if te_trailers && !asked.trailers {
        // The HTTP/1 rewrite dropped TE (hop-by-hop); the client's `trailers` is kept.
        asked.trailers = true;
        builder = builder.header("te", "trailers");
    }
    let request = builder.body(()).map_err(|_| bad("header"))?;
    Ok((request.into_parts().0, asked))
}

/// The request's URI for HTTP/2: `:scheme` from the server connection, `:authority` from
/// an absolute-form target or Host (else the server's address), `:path` from the target.
fn target_uri(target: &str, host: Option<&str>, tls: bool, address: std::net::SocketAddr) -> Option<http::Uri> {
    let parsed: http::Uri = target.parse().ok()?;
    let authority = match (parsed.authority(), host) {
        (Some(a), _) => a.as_str().to_string(),
        (None, Some(h)) => h.to_string(),
        (None, None) => address.to_string(),
    };
    let path = parsed.path_and_query().map_or("/", |p| p.as_str());
    http::Uri::builder()
        .scheme(if tls { "https" } else { "http" })
        .authority(authority)
        .path_and_query(path)
        .build()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(head: &str) -> (http::request::Parts, Asked) {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 8443));
        match request_parts(head.as_bytes(), 64, true, addr, false) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn connection_headers_are_dropped_and_host_becomes_authority() {
        let (p, asked) = parts(
            "POST /a?b=1 HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\n\
             TE: trailers, deflate\r\nUpgrade: x\r\nProxy-Connection: y\r\nTransfer-Encoding: chunked\r\n\
             X-Forwarded-For: 10.0.0.1\r\nExpect: 100-continue\r\n\r\n",
        );
        assert_eq!(p.method, http::Method::POST);
        assert_eq!(p.uri.to_string(), "https://example.com/a?b=1");
        let names: Vec<&str> = p.headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["te", "x-forwarded-for"]);
        assert_eq!(p.headers.get("te").map(|v| v.as_bytes()), Some(&b"trailers"[..]));
        assert!(asked.trailers);
    }

    #[test]
    fn te_without_trailers_is_dropped_and_absolute_targets_keep_their_authority() {
        let (p, asked) = parts("GET http://other:81/x HTTP/1.1\r\nHost: other:81\r\nTE: gzip\r\n\r\n");
        assert!(p.headers.is_empty());
        assert!(!asked.trailers);
        assert_eq!(p.uri.to_string(), "https://other:81/x");
        let (p, _) = parts("GET / HTTP/1.0\r\n\r\n");
        assert_eq!(p.uri.authority().map(|a| a.as_str()), Some("127.0.0.1:8443"));
    }

    #[test]
    fn response_heads_are_framed_for_http1() {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-a", http::HeaderValue::from_static("1"));
        let head = |framing, keep_client, version, append| Head {
            status: 200,
            headers: &headers,
            framing,
            keep_client,
            version,
            length: None,
            append,
            rules: None,
        };
        let mut out = Vec::new();
        write_head(&mut out, &head(Framing::Chunked, true, Version::Http11, b""));
        assert_eq!(out, b"HTTP/1.1 200 OK\r\nx-a: 1\r\ntransfer-encoding: chunked\r\n\r\n");
        let mut listed = headers.clone();
        listed.insert("content-length", http::HeaderValue::from_static("5, 5"));
        let length = Head {
            headers: &listed,
            length: Some(5),
            ..head(Framing::Length, true, Version::Http11, b"")
        };
        write_head(&mut out, &length);
        assert_eq!(
            out, b"HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 5\r\n\r\n",
            "one value, from the framing"
        );
        write_head(&mut out, &head(Framing::Close, false, Version::Http10, b""));
        assert_eq!(out, b"HTTP/1.1 200 OK\r\nx-a: 1\r\nconnection: close\r\n\r\n");
        write_head(
            &mut out,
            &head(Framing::Empty, true, Version::Http10, b"set-cookie: s=1\r\n"),
        );
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 0\r\nconnection: keep-alive\r\nset-cookie: s=1\r\n\r\n"
        );
    }
}
