//! An HTTP/2 client's stream to an HTTP/2 server (`proto = "h2"`): h2 → h2, full duplex.
//!
//! The checked request head becomes the server's request head ([`request_parts`]: `:scheme`
//! from the server connection, `:authority` and `:path` as the client sent them, the
//! forwarding fields the h1 path adds, `te: trailers` kept, the proxy's sticky cookie and
//! `expect` left out), then `h2back::start` opens the stream. The request body (DATA, then
//! trailers) goes up while the response (head, DATA, trailers) comes down, both at once: a
//! gRPC bidirectional call sends a message and waits for its answer before the next.
//!
//! Invariants: memory is bounded by the two windows — a client DATA frame's window is
//! released only once the server's flow control took it, a response piece's only once the
//! client's window let it out (a client window shut for `timeouts.client` resets the stream,
//! as the h1 path's zero-window stall). A client reset cancels the server stream (dropping
//! its handles sends RST_STREAM CANCEL), a server reset or failure after the response head
//! ends the client stream (`Stream::fail`: RST_STREAM, or gRPC trailers). The stream is idle,
//! and ended, only when nothing moved either way for `timeouts.server`: a gRPC stream with
//! traffic in either direction is never cut by a proxy timeout.

use std::cell::RefCell;
use std::pin::pin;
use std::time::Duration;

use super::native::{RecvStream, SendStream, StreamError};
use crate::http::h2::Reason;
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue};

use super::stream::{BodyBudget, Interim, Stream, h2_error};
use super::to_h1::Forwarding;
use crate::config::model::Forwarded;
use crate::error::{Error, ErrorKind, Phase, Side};
use crate::http::compress::{self, Encoder, Facts, Verdict};
use crate::http::h1::{HeaderKind, Method};
use crate::proxy::connect::Connected;
use crate::proxy::h2back::{self, Lease, RequestBody, ResponseBody};
use crate::relay::idle::{self, Progress};
use crate::stats::{Counter, WorkerStats};

/// What the exchange needs of the request besides the stream.
pub(super) struct Asked<'a> {
    pub parts: &'a Parts,
    /// The HEADERS frame ended the client's stream: no body.
    pub end_stream: bool,
    pub fwd: Forwarding<'a>,
    /// The server the sticky cookie named.
    pub prefer: Option<crate::live::ServerId>,
}

/// One attempt of the stream on an HTTP/2 server. A failure before the response head leaves
/// the client answerable (and, when the server says it never processed it, retryable).
pub(super) async fn exchange(
    s: &mut Stream<'_>,
    backend: usize,
    req: &super::stream::Request,
    asked: &Asked<'_>,
    conn: Connected<'_, Lease>,
    body: &mut RecvStream,
    sent: &Counter,
) -> Result<(), Error> {
    let Connected {
        stream: lease,
        slot,
        chosen,
        connected,
        ..
    } = conn;
    let ctx = &*s.conn.ctx;
    let server = std::sync::Arc::clone(slot.server());
    let id = server.id;
    let at = |e: Error| e.at(backend, Some(id));
    (s.rec.backend, s.rec.server, s.rec.server_at) = (Some(backend), Some(id), Some(slot.position()));
    s.rec.timing.chosen = Some(s.rec.timing.since(chosen));
    s.rec.timing.connected = Some(s.rec.timing.since(connected));
    let head = request_parts(asked.parts, &asked.fwd, server.tls.is_some()).map_err(at)?;
    let (up, pending) = h2back::start(lease, head, asked.end_stream).await.map_err(at)?;
    let timeouts = req.limits.timeouts;
    let progress = Progress::default();
    let mut uploading = !asked.end_stream;
    let budget = BodyBudget::new(req.limits.max_body_size);
    let mut upload = pin!(upload(body, up, &progress, (sent, budget), &ctx.stats));
    let mut body_deadline = pin!(crate::proxy::until(req.body_deadline));
    let mut dog = pin!(idle::watchdog(&progress, timeouts.server));
    // Until the response head: the body goes up, interim heads come down, a client reset
    // ends the wait at once.
    let head = {
        let respond = RefCell::new(&mut *s.respond);
        let mut interim = Interim::new(&respond);
        let mut response = pin!(pending.head(|head| interim.pass(head.status().as_u16(), || head)));
        loop {
            tokio::select! {
                biased;
                r = &mut response => break r,
                r = &mut upload, if uploading => {
                    uploading = false;
                    upload_ended(r).map_err(at)?;
                }
                () = &mut body_deadline, if uploading => return Err(at(crate::proxy::body_timeout())),
                () = &mut dog => {
                    ctx.stats.idle_timeouts.add(1);
                    let e = if uploading {
                        Error::new(ErrorKind::IdleTimeout, Side::Front, "request body idle").during(Phase::Request)
                    } else {
                        Error::new(ErrorKind::ResponseTimeout, Side::Back, "no response head within timeouts.server")
                    };
                    return Err(at(e));
                }
                reason = std::future::poll_fn(|cx| respond.borrow_mut().poll_reset(cx)) => return Err(at(client_reset(reason, Phase::Headers))),
            }
        }
    };
    let (parts, mut down) = match head {
        Ok(head) => {
            server.check.traffic_ok();
            head
        }
        Err(e) => {
            if e.kind == ErrorKind::BadResponse {
                crate::proxy::connect::server_error(&server);
            }
            // Body bytes already sent cannot be sent again.
            let e = if asked.end_stream { e } else { e.retryable(false) };
            return Err(at(e));
        }
    };
    s.rec.timing.response = Some(s.rec.timing.now());
    s.rec.status = parts.status.as_u16();
    s.capture_response(parts.headers.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())));
    let mut response = response_head(s, backend, id, asked.prefer, parts);
    let end = down.is_end_stream();
    // Compression (`compress`), as the h1 server path.
    let mut verdict = match s.compress {
        Some(n) => n.verdict(&Facts::gather(
            response.status().as_u16(),
            req.method == Method::Head,
            response
                .headers()
                .iter()
                .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())),
        )),
        None => Verdict::Untouched,
    };
    let mut compressing = match (verdict, s.compress) {
        (Verdict::Compress(coding), Some(n)) if !end => ctx.compressors.start(coding, n.policy),
        _ => None,
    };
    if compressing.is_none() && matches!(verdict, Verdict::Compress(_)) {
        verdict = Verdict::VaryOnly;
    }
    compress::edit_h2_head(response.headers_mut(), verdict);
    // A body of announced length cannot end early with gRPC trailers: a failure resets it.
    s.grpc &= !response.headers().contains_key(http::header::CONTENT_LENGTH);
    let send = s
        .respond
        .send_response(response, end)
        .map_err(|e| at(h2_error("send response head", &e)))?;
    s.answered = true;
    if end {
        return Ok(());
    }
    let send = s.send.insert(send);
    let encoder = compressing.as_mut().map(|c| &mut c.encoder);
    let mut relay = pin!(relay_down(&mut down, send, encoder, &progress, timeouts.client));
    let moved = loop {
        tokio::select! {
            biased;
            r = &mut relay => break r,
            r = &mut upload, if uploading => {
                uploading = false;
                upload_ended(r).map_err(at)?;
            }
            () = &mut body_deadline, if uploading => return Err(at(crate::proxy::body_timeout())),
            () = &mut dog => {
                ctx.stats.idle_timeouts.add(1);
                let e = Error::new(ErrorKind::IdleTimeout, Side::Back, "stream idle both ways").during(Phase::Data);
                return Err(at(e));
            }
        }
    };
    s.rec.bytes_to_client += moved.bytes;
    moved.result.map_err(at)
}

/// The server's request head: the client's, with the h1 path's forwarding edits.
pub(super) fn request_parts(parts: &Parts, fwd: &Forwarding<'_>, tls: bool) -> Result<Parts, Error> {
    let bad = |what: &'static str| Error::new(ErrorKind::BadRequest(400), Side::Front, what).during(Phase::Request);
    let authority = match parts.uri.authority() {
        Some(a) => a.as_str(),
        None => parts
            .headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default(),
    };
    let uri = http::Uri::builder()
        .scheme(if tls { "https" } else { "http" })
        .authority(authority)
        .path_and_query(parts.uri.path_and_query().map_or("/", |p| p.as_str()))
        .build()
        .map_err(|_| bad("request target"))?;
    let (mut out, ()) = http::Request::new(()).into_parts();
    out.method = parts.method.clone();
    out.uri = uri;
    let headers = &mut out.headers;
    headers.reserve(parts.headers.len() + 2);
    for (name, value) in &parts.headers {
        match HeaderKind::of(name.as_str().as_bytes()) {
            // `:authority` carries the host; the proxy answers `expect` itself; `check` let
            // through no other connection-specific field than `te: trailers`.
            HeaderKind::Host | HeaderKind::Expect | HeaderKind::TransferEncoding => continue,
            HeaderKind::XForwardedFor | HeaderKind::XForwardedProto if fwd.mode == Forwarded::XForwardedFor => continue,
            HeaderKind::Forwarded if fwd.mode == Forwarded::Forwarded => continue,
            HeaderKind::Te => {}
            kind if kind.is_hop_by_hop() => continue,
            _ => {}
        }
        if name == http::header::COOKIE
            && let Some(sticky) = fwd.sticky
            && crate::http::cookie::contains(value.as_bytes(), sticky)
        {
            // The proxy's own cookie never reaches a server (a field left empty is dropped).
            let mut kept = Vec::with_capacity(value.len());
            if crate::http::cookie::push_without(value.as_bytes(), sticky, &mut kept)
                && let Ok(v) = HeaderValue::from_bytes(&kept)
            {
                headers.append(http::header::COOKIE, v);
            }
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    forwarding(&parts.headers, fwd, headers).map_err(|()| bad("forwarding field"))?;
    Ok(out)
}

/// `x-forwarded-for`/`x-forwarded-proto` or `forwarded`, the client's values first (as `to_h1`).
fn forwarding(from: &HeaderMap, fwd: &Forwarding<'_>, to: &mut HeaderMap) -> Result<(), ()> {
    use std::io::Write;
    let (name, existing) = match fwd.mode {
        Forwarded::None => return Ok(()),
        Forwarded::XForwardedFor => ("x-forwarded-for", "x-forwarded-for"),
        Forwarded::Forwarded => ("forwarded", "forwarded"),
    };
    let mut value = Vec::with_capacity(64);
    for v in from.get_all(existing) {
        if !v.is_empty() {
            value.extend_from_slice(v.as_bytes());
            value.extend_from_slice(b", ");
        }
    }
    let proto = fwd.proto.as_str();
    let _ = match (fwd.mode, fwd.ip) {
        (Forwarded::Forwarded, std::net::IpAddr::V4(ip)) => write!(value, "for={ip};proto={proto}"),
        (Forwarded::Forwarded, std::net::IpAddr::V6(ip)) => write!(value, "for=\"[{ip}]\";proto={proto}"),
        _ => write!(value, "{}", fwd.ip),
    };
    to.insert(name, HeaderValue::from_bytes(&value).map_err(|_| ())?);
    if fwd.mode == Forwarded::XForwardedFor {
        to.insert("x-forwarded-proto", HeaderValue::from_static(proto));
    }
    Ok(())
}

/// The client's response head: the server's, with the sticky cookie as the h1 path sets it.
fn response_head(
    s: &Stream<'_>,
    backend: usize,
    id: crate::live::ServerId,
    prefer: Option<crate::live::ServerId>,
    mut parts: http::response::Parts,
) -> http::Response<()> {
    let sticky = s.conn.ctx.backends.get(backend).and_then(|b| b.sticky.as_ref());
    let private = sticky.is_some_and(|_| {
        let fields = parts.headers.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
        crate::http::cookie::kept_from_shared_caches(fields)
    });
    if let Some(table) = sticky {
        // A server's own cookie of that name is dropped: the proxy sets its own.
        let name = table.cookie();
        let kept: Vec<HeaderValue> = parts
            .headers
            .get_all(http::header::SET_COOKIE)
            .iter()
            .filter(|v| !crate::http::cookie::sets(v.as_bytes(), name))
            .cloned()
            .collect();
        if parts.headers.remove(http::header::SET_COOKIE).is_some() {
            for v in kept {
                parts.headers.append(http::header::SET_COOKIE, v);
            }
        }
    }
    if let Some(rewrite) = s.rewrite {
        // Response rules hold no variables (config load refuses them).
        let vars = crate::http::rewrite::RequestVars::default();
        rewrite.response_headers.apply_to_map(&mut parts.headers, &vars);
    }
    crate::http::request_id::set_field(&mut parts.headers, s.id_field);
    super::stream::add_alt_svc(&mut parts.headers, s.fe.alt_svc());
    let mut response = http::Response::from_parts(parts, ());
    if let Some(table) = sticky
        && prefer != Some(id)
    {
        table.with_lines(id, private, |lines| super::to_h1::append_lines(&mut response, lines));
    }
    response
}

/// Streams the client's body and trailers up. A client failure cancels the server stream.
async fn upload(
    body: &mut RecvStream,
    mut up: RequestBody,
    progress: &Progress,
    (sent, mut budget): (&Counter, BodyBudget),
    stats: &WorkerStats,
) -> Result<(), Error> {
    while let Some(data) = body.data().await {
        let mut data = match data {
            Ok(data) => data,
            Err(e) => {
                up.cancel();
                return Err(h2_error("read request body", &e).during(Phase::Request));
            }
        };
        let n = data.len();
        let last = body.is_end_stream();
        if n == 0 && !last {
            continue;
        }
        if let Err(e) = budget.take(n) {
            up.cancel();
            return Err(e);
        }
        up.send(&mut data, last).await?;
        // Given back only once the server's flow control took it: the client sends no
        // faster than the server reads.
        body.release_capacity(n);
        sent.add(n as u64);
        stats.bytes_to_server.add(n as u64);
        progress.moved(n.max(1));
        if last {
            return Ok(());
        }
    }
    match body.trailers().await {
        Ok(Some(trailers)) => up.trailers(trailers),
        Ok(None) => up.send(&mut Bytes::new(), true).await,
        Err(e) => {
            up.cancel();
            Err(h2_error("read request trailers", &e).during(Phase::Request))
        }
    }
}

struct Moved {
    bytes: u64,
    result: Result<(), Error>,
}

/// The response body and trailers down, under the client's flow control.
async fn relay_down(
    down: &mut ResponseBody,
    send: &mut SendStream,
    mut encoder: Option<&mut Encoder>,
    progress: &Progress,
    idle: Duration,
) -> Moved {
    let mut moved = Moved {
        bytes: 0,
        result: Ok(()),
    };
    let compress_failed =
        |e: std::io::Error| Error::new(ErrorKind::Io, Side::Internal, format!("compression: {e}")).during(Phase::Data);
    let mut out = Vec::new();
    moved.result = async {
        loop {
            let next = {
                let mut data = pin!(down.data());
                match std::future::poll_fn(|cx| std::task::Poll::Ready(data.as_mut().poll(cx))).await {
                    std::task::Poll::Ready(next) => next,
                    std::task::Poll::Pending => {
                        // The server has nothing more for now: what it sent goes out whole.
                        if let Some(e) = &mut encoder {
                            e.flush().map_err(compress_failed)?;
                            e.swap_output(&mut out);
                            moved.bytes += out.len() as u64;
                            if !out.is_empty() {
                                send_bytes(send, Bytes::from(std::mem::take(&mut out)), false, idle).await?;
                            }
                        }
                        tokio::select! {
                            next = data => next,
                            reason = std::future::poll_fn(|cx| send.poll_reset(cx)) => return Err(client_reset(reason, Phase::Data)),
                        }
                    }
                }
            };
            let Some(data) = next else { break };
            let data = data?;
            let n = data.len();
            let last = down.is_end_stream();
            match &mut encoder {
                Some(e) => {
                    e.push(&data).map_err(compress_failed)?;
                    e.swap_output(&mut out);
                    moved.bytes += out.len() as u64;
                    if !out.is_empty() {
                        send_bytes(send, Bytes::from(std::mem::take(&mut out)), false, idle).await?;
                    }
                }
                None => {
                    send_bytes(send, data, last, idle).await?;
                    moved.bytes += n as u64;
                }
            }
            down.release(n);
            progress.moved(n.max(1));
            if last && encoder.is_none() {
                return Ok(());
            }
            if last {
                break;
            }
        }
        if let Some(e) = &mut encoder {
            // The server's trailers described the uncompressed body: dropped.
            e.finish().map_err(compress_failed)?;
            e.swap_output(&mut out);
            moved.bytes += out.len() as u64;
            return send_bytes(send, Bytes::from(std::mem::take(&mut out)), true, idle).await;
        }
        match down.trailers().await? {
            Some(trailers) => send.send_trailers(trailers),
            None => send.send_data(Bytes::new(), true),
        }
        .map_err(|e| h2_error("end response", &e).during(Phase::Data))
    }
    .await;
    moved
}

/// Sends `data` as the client's window allows (`end`: the last of the stream); a window shut
/// for `idle` ends the stream (zero-window stall).
async fn send_bytes(send: &mut SendStream, mut data: Bytes, end: bool, idle: Duration) -> Result<(), Error> {
    if data.is_empty() {
        return send
            .send_data(data, end)
            .map_err(|e| h2_error("send response body", &e).during(Phase::Data));
    }
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let granted = tokio::time::timeout(idle, std::future::poll_fn(|cx| send.poll_capacity(cx)))
            .await
            .map_err(|_| {
                let why = "client window stayed shut (zero-window stall)";
                Error::new(ErrorKind::IdleTimeout, Side::Front, why).during(Phase::Data)
            })?;
        let n = match granted {
            None => return Err(Error::new(ErrorKind::PeerClosed, Side::Front, "stream closed").during(Phase::Data)),
            Some(Err(e)) => return Err(h2_error("response window", &e).during(Phase::Data)),
            Some(Ok(n)) => n.min(data.len()),
        };
        if n == 0 {
            continue;
        }
        let now = data.split_to(n);
        send.send_data(now, end && data.is_empty())
            .map_err(|e| h2_error("send response body", &e).during(Phase::Data))?;
    }
    Ok(())
}

fn client_reset(reason: Result<Reason, StreamError>, phase: Phase) -> Error {
    let why = match reason {
        Ok(reason) => format!("client reset the stream ({})", reason.as_str()),
        Err(e) => format!("client connection: {e}"),
    };
    Error::new(ErrorKind::PeerClosed, Side::Front, why).during(phase)
}

/// The upload's end while the response is awaited or relayed: a server that stopped reading
/// still answers, so only a client-side failure ends the stream.
fn upload_ended(r: Result<(), Error>) -> Result<(), Error> {
    match r {
        Err(e) if e.side == Side::Back => {
            tracing::debug!(error = %e, "request body cut short by the server");
            Ok(())
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::h1::Proto;

    fn parts(req: http::Request<()>) -> Parts {
        req.into_parts().0
    }

    #[test]
    fn the_server_head_keeps_te_trailers_and_gets_forwarding_fields() {
        let req = http::Request::builder()
            .method("POST")
            .uri("https://example.com/svc/Call?x=1")
            .header("te", "trailers")
            .header("content-type", "application/grpc")
            .header("host", "example.com")
            .header("expect", "100-continue")
            .header("x-forwarded-for", "10.0.0.1")
            .header("cookie", "a=1")
            .header("cookie", "sid=s1; b=2")
            .header("cookie", "sid=s2")
            .body(());
        let req = match req {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        };
        let fwd = Forwarding {
            mode: Forwarded::XForwardedFor,
            ip: std::net::IpAddr::from([192, 0, 2, 7]),
            proto: Proto::Https,
            sticky: Some(b"sid"),
        };
        let out = match request_parts(&parts(req), &fwd, false) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(out.uri.to_string(), "http://example.com/svc/Call?x=1");
        assert_eq!(out.method, http::Method::POST);
        let get = |n: &str| {
            out.headers
                .get_all(n)
                .iter()
                .map(|v| v.as_bytes().to_vec())
                .collect::<Vec<_>>()
        };
        assert_eq!(get("te"), [b"trailers".to_vec()]);
        assert_eq!(get("content-type"), [b"application/grpc".to_vec()]);
        assert!(get("host").is_empty() && get("expect").is_empty());
        assert_eq!(get("x-forwarded-for"), [b"10.0.0.1, 192.0.2.7".to_vec()]);
        assert_eq!(get("x-forwarded-proto"), [b"https".to_vec()]);
        assert_eq!(get("cookie"), [b"a=1".to_vec(), b"b=2".to_vec()]);
    }
}
