//! One HTTP/2 stream (a request and its response) forwarded to an HTTP/1.1 server (to an
//! HTTP/2 server: `to_h2.rs`, chosen once `server_conn::open` says which the server speaks).
//! A gRPC call's proxy-side failure is answered as `grpc-status: 14` (`Stream::fail`).
//!
//! Order of events, as `proxy::http::exchange` for an h1 client: judge the head
//! (`check`), route it (`route::decide_h2`), answer it or take a server connection
//! (pooled or new, `server_conn::open`: queues, maxconn and connect retries as for h1), send
//! the head as strict HTTP/1.1 (`to_h1`) and the body (known length as is, else chunked with
//! the client's trailers) while watching for the response head (a server that answers
//! early is heard at once, as on the h1 path), read with the h1 codec (interim 1xx passed on
//! as informational HEADERS, `Interim`), answer the stream, then
//! stream the body back under the client's flow control, chunked trailers becoming h2
//! trailers. The server connection goes back to the pool only when its response was read to
//! its end and it stays open.
//!
//! Retry rule (the h1 one): a stream that failed on a reused connection before any response
//! byte is sent again on a fresh connection only if its head never fully left, or if it is
//! idempotent and has no body. Bounded memory: a request body moves one DATA frame at a time
//! (its window released only once the server took it); a response body one pooled buffer at
//! a time, each piece sent only when the client's window has room (and the connection's
//! unwritten output is under `http2.max_send_buffer`), and a stream whose window stays shut for `timeouts.client` is
//! reset and its buffers freed (zero-window stall).

use std::borrow::Cow;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use super::native::{RecvStream, SendResponse, SendStream, StreamError};
use bytes::Bytes;
use http::request::Parts;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::check::{Checked, Refusal};
use super::to_h1::{self, BodyOut, Dechunk, Forwarding};
use super::to_h2;
use crate::config::model::{ForwardTarget, Frontend, Overrides, RequestLimits};
use crate::ctx::WorkerCtx;
use crate::error::{Error, ErrorKind, Phase, Side};
use crate::http::compress::{self, Encoder, Facts, Negotiated, Verdict};
use crate::http::h1::{self, BodyFraming, BodyTracker, HeadScratch, HeaderKind, Limits, MessageHead, Method, Proto};
use crate::http::h2::Reason;
use crate::http::normalize;
use crate::http::request_id::set_field as set_id_field;
use crate::http::rewrite::{RequestVars, Rewrite};
use crate::live::ServerId;
use crate::proxy::connect::{Connected, Retries};
use crate::proxy::h2back::{self, grpc};
use crate::proxy::http::inbound::Inbound;
use crate::proxy::http::route::{self, Decision};
use crate::proxy::http::server_conn::{self, Back};
use crate::proxy::record::{Seen, StreamRecord};
use crate::relay::ServerConn;
use crate::relay::counted::Counted;
use crate::stats::Counter;

/// How many times a stream an HTTP/2 server refused unprocessed is sent again.
const MAX_UNPROCESSED_RETRIES: u32 = 3;

/// What every stream of one client connection shares.
pub(crate) struct ConnInfo {
    pub ctx: Rc<WorkerCtx>,
    pub frontend: usize,
    pub peer: SocketAddr,
    pub proto: Proto,
    /// The access log's version: `HTTP/2.0`, or `HTTP/3` (a QUIC connection's streams).
    pub version: &'static str,
    /// What the TLS handshake settled (plain h2c: nothing).
    pub tls: crate::proxy::record::TlsSeen,
    /// The client presented a verified certificate (`client_cert` routes)...
    pub client_cert: bool,
    /// ...and the identity fields every request forwarded gets
    /// (`[frontend.tls.client_auth] headers`), rendered at the connection's start.
    pub cert_fields: Vec<(http::HeaderName, http::HeaderValue)>,
    /// Header storage for parsing response heads, shared by the connection's streams: a
    /// head is parsed, turned into h2 fields and its storage given back without an await
    /// in between, so one is enough (a stream that finds it lent out makes its own).
    pub scratch: RefCell<HeadScratch>,
    /// Request head buffers (the HTTP/1 bytes for a server) of ended streams, for the next
    /// ones: a head is a few hundred bytes, written for every stream.
    pub heads: RefCell<Vec<Vec<u8>>>,
    /// Header maps of ended streams, emptied, for the next ones' request heads.
    pub header_maps: RefCell<Vec<http::HeaderMap>>,
}

/// Head buffers (and header maps) kept per connection, and the largest head kept (a rare
/// huge head is not).
const MAX_SPARE_HEADS: usize = 16;
const MAX_SPARE_HEAD_SIZE: usize = 8 * 1024;
/// The largest header map kept, in fields: a browser's request has 10 to 20 (a map keeps
/// what its largest head needed, and an idle connection keeps its spares).
const MAX_SPARE_MAP_CAPACITY: usize = 32;

impl ConnInfo {
    fn head_buffer(&self) -> Vec<u8> {
        self.heads.borrow_mut().pop().unwrap_or_else(|| Vec::with_capacity(512))
    }

    /// An empty header map, with room from an ended stream when there is one.
    pub(crate) fn header_map(&self) -> http::HeaderMap {
        self.header_maps.borrow_mut().pop().unwrap_or_default()
    }

    /// A quiet connection gives back the spares its streams left for the next ones: the
    /// response head scratch, request head buffers and header maps (made again by the next
    /// burst's first streams).
    pub(super) fn release_spares(&self) {
        *self.scratch.borrow_mut() = HeadScratch::empty();
        *self.heads.borrow_mut() = Vec::new();
        *self.header_maps.borrow_mut() = Vec::new();
    }

    fn give_back_header_map(&self, mut map: http::HeaderMap) {
        let mut maps = self.header_maps.borrow_mut();
        if maps.len() < MAX_SPARE_HEADS && map.capacity() <= MAX_SPARE_MAP_CAPACITY {
            map.clear();
            maps.push(map);
        }
    }

    fn give_back_head(&self, mut head: Vec<u8>) {
        let mut heads = self.heads.borrow_mut();
        if heads.len() < MAX_SPARE_HEADS && head.capacity() <= MAX_SPARE_HEAD_SIZE {
            head.clear();
            heads.push(head);
        }
    }
}

/// Serves one stream to its end and sinks its record.
pub(crate) async fn serve(
    conn: Rc<ConnInfo>,
    checked: Result<Checked, Refusal>,
    req: http::Request<RecvStream>,
    mut respond: SendResponse,
) {
    let ctx = &*conn.ctx;
    let Some(fe) = ctx.shared.config.frontends.get(conn.frontend) else {
        return;
    };
    let began = Instant::now();
    let mut rec = StreamRecord::new(conn.frontend, conn.peer, began);
    rec.timing.head = Some(Duration::ZERO);
    ctx.stats.http_requests.add(1);
    let (mut parts, body) = req.into_parts();
    let request_id = fe
        .request_ids
        .as_ref()
        .map(|ids| assign_request_id(ids, conn.peer.ip(), &mut parts.headers));
    let mut line = ctx.access_log.as_ref().map(|log| {
        let mut slot = log.slot();
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        slot.line.set(parts.method.as_str().as_bytes(), target.as_bytes());
        slot.line.set_version(conn.version);
        let headers = parts.headers.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
        let authority = parts.uri.authority().map(|a| a.as_str().as_bytes());
        slot.line.capture_request(&fe.log, headers, authority);
        slot
    });
    // After the log's captures, which keep what the client sent.
    let trace = fe.trace.and_then(|t| start_trace(t, &mut parts.headers));
    let grpc = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| h2back::grpc::is_grpc(v.as_bytes()));
    let mut s = Stream {
        conn: &conn,
        fe,
        rec: &mut rec,
        respond: &mut respond,
        answered: false,
        send: None,
        grpc,
        rewrite: None,
        compress: None,
        id_field: fe
            .request_ids
            .as_ref()
            .filter(|ids| ids.response)
            .zip(request_id.as_ref())
            .map(|(ids, id)| (ids.header.as_bytes(), id.as_bytes())),
        line: line.as_mut(),
    };
    if let Err(e) = s.run(checked, &mut parts, body).await {
        s.fail(&e);
    }
    // The response's heads count as bytes to the client, as an HTTP/1 response's do.
    rec.bytes_to_client += respond.head_bytes();
    conn.give_back_header_map(std::mem::take(&mut parts.headers));
    rec.close();
    let seen = Seen {
        request: line.as_ref().map(|l| &*l.line),
        scheme: Some(conn.proto.as_str()),
        tls: conn.tls.facts(),
        request_id: request_id.as_ref().map(|id| id.as_bytes()),
        trace_id: trace.as_ref().map(crate::http::trace::Traceparent::trace_id),
    };
    crate::proxy::record::sink(ctx, &rec, seen);
}

pub(super) struct Stream<'s> {
    pub(super) conn: &'s ConnInfo,
    pub(super) fe: &'s Frontend,
    pub(super) rec: &'s mut StreamRecord,
    pub(super) respond: &'s mut SendResponse,
    /// A response head went out: a failure now can only reset the stream (or, for gRPC,
    /// end it with an UNAVAILABLE status in trailers).
    pub(super) answered: bool,
    /// The response body's sender once a head with a body went out: a failure ends it.
    pub(super) send: Option<SendStream>,
    /// A gRPC call (`content-type: application/grpc*`): proxy-side failures are answered
    /// as gRPC status 14 (UNAVAILABLE), never as a bare 5xx or reset — unless the response
    /// head announced a `content-length` (trailers ending it short would be malformed).
    pub(super) grpc: bool,
    /// The matched route's rewrites (its request already applied to the head).
    pub(super) rewrite: Option<&'s Rewrite>,
    /// The stream's response compression (its route's `compress` and `Accept-Encoding`).
    pub(super) compress: Option<Negotiated<'s>>,
    /// The request's ID field for the response (`request_id.response`): name, value.
    pub(super) id_field: Option<(&'s [u8], &'s [u8])>,
    /// The access log's request line and captures (logs on).
    pub(super) line: Option<&'s mut crate::accesslog::LineSlot>,
}

/// The stream's ID (`[frontend] request_id`), set in its head as its server will get it:
/// the client's own when it comes from a trusted address, is the request's only such
/// field and is acceptable (`http::request_id::is_acceptable`), else a new one.
fn assign_request_id(
    ids: &crate::config::request_id::RequestIds,
    client: std::net::IpAddr,
    headers: &mut http::HeaderMap,
) -> crate::http::request_id::IdSlot {
    let mut slot = crate::http::request_id::IdSlot::default();
    let sent = headers.get_all(&*ids.header).iter().map(http::HeaderValue::as_bytes);
    slot.assign(ids.trusts(client), sent, std::time::SystemTime::now());
    set_id_field(headers, Some((ids.header.as_bytes(), slot.as_bytes())));
    slot
}

/// Starts a trace for a stream without a readable `traceparent`, as `trace` samples them:
/// the received `traceparent` and `tracestate` fields give way to the new `traceparent`.
fn start_trace(
    trace: crate::config::trace::Trace,
    headers: &mut http::HeaderMap,
) -> Option<crate::http::trace::Traceparent> {
    use crate::http::trace::{TRACEPARENT, TRACESTATE, Traceparent};
    let sent = headers.get_all(TRACEPARENT).iter().map(http::HeaderValue::as_bytes);
    if !crate::http::trace::starts(sent, trace.sample_ppm, crate::http::request_id::sample_draw) {
        return None;
    }
    let started = Traceparent::generate();
    headers.remove(TRACESTATE);
    set_id_field(headers, Some((TRACEPARENT.as_bytes(), started.as_bytes())));
    Some(started)
}

/// What the forwarding needs to know of the request once its head is written.
pub(super) struct Request {
    pub(super) method: Method,
    body: BodyOut,
    head: Vec<u8>,
    /// The server the sticky cookie named (that client keeps its cookie as it is).
    prefer: Option<ServerId>,
    /// Timeouts, body size and retries of this stream (its route's and backend's).
    pub(super) limits: RequestLimits,
    /// When its route or backend sets `timeouts.http_request`: the body must be in by then.
    pub(super) body_deadline: Option<Instant>,
}

impl Request {
    fn replayable(&self) -> bool {
        self.body == BodyOut::None
            && matches!(
                self.method,
                Method::Get | Method::Head | Method::Options | Method::Trace | Method::Put | Method::Delete
            )
    }
}

impl Stream<'_> {
    /// Keeps the response fields the frontend's log line captures.
    pub(super) fn capture_response<'h>(&mut self, headers: impl Iterator<Item = (&'h [u8], &'h [u8])>) {
        if let Some(slot) = self.line.as_deref_mut() {
            slot.line.capture_response(&self.fe.log, headers);
        }
    }

    /// `checked`: the verdict of `check::request` on the head as the codec decoded it.
    async fn run(
        &mut self,
        checked: Result<Checked, Refusal>,
        parts: &mut Parts,
        mut body: RecvStream,
    ) -> Result<(), Error> {
        let end_stream = body.is_end_stream();
        let checked = checked.map_err(|r| refused(400, r.0))?;
        // What came in the head's read is judged before anything else, as on the HTTP/1 path:
        // DATA that contradicted `content-length` (the codec reset the stream, RFC 9113
        // §8.1.1), or the client's own RST_STREAM (rapid reset), and the request is dropped
        // before it is routed: no server ever sees it, none is connected for it.
        reset_before_head(&body)?;
        let conn = route::ConnFacts {
            scheme: self.conn.proto,
            source: self.conn.peer.ip(),
            sni: self.conn.tls.sni(),
            client_cert: self.conn.client_cert,
        };
        // The route's index goes to the record at once: no local of it spans an await.
        let (decision, counted_by, auth) = {
            let routed = route::decide_h2(self.fe, parts, &conn);
            self.rec.route = routed.route;
            self.compress = routed.compress.map(|policy| {
                let accept = parts.headers.get_all(http::header::ACCEPT_ENCODING).iter();
                Negotiated::of(policy, accept.map(|v| (&b"accept-encoding"[..], v.as_bytes())))
            });
            (routed.decision, routed.counted_by, routed.auth)
        };
        let config = &self.conn.ctx.shared.config;
        let limits = match decision {
            Decision::Backend(backend, _, overrides) => config.request_limits(Some(backend), overrides),
            _ => config.request_limits(None, &Overrides::NONE),
        };
        // `[[frontend.limit]]`: held (requests in flight) until this stream ends.
        let mut held = crate::limit::Held::default();
        let set = self.conn.ctx.shared.limits(self.conn.frontend);
        if !set.is_empty() {
            let facts = super::limited::H2Facts {
                source: self.conn.peer.ip(),
                sni: self.conn.tls.sni(),
                parts,
                path: normalize::path(parts.uri.path().as_bytes()),
            };
            if let Err(over) = set.check(&facts, crate::limit::bits(counted_by), &mut held) {
                return self.limited(over).await;
            }
        }
        let max_body = limits.max_body_size;
        if max_body > 0 && checked.content_length.is_some_and(|n| n > max_body) {
            return Err(refused(413, "content-length over max_body_size"));
        }
        // The route's `auth`, before anything is answered or forwarded.
        if let Some(auth) = auth {
            let ctx = std::rc::Rc::clone(&self.conn.ctx);
            let mut authorization = parts.headers.get_all(http::header::AUTHORIZATION).iter();
            let only = match (authorization.next(), authorization.next()) {
                (Some(v), None) => Some(v.as_bytes()),
                _ => None,
            };
            let host = parts.headers.get(http::header::HOST).map(http::HeaderValue::as_bytes);
            let facts = crate::proxy::auth::Facts {
                method: parts.method.as_str().as_bytes(),
                target: parts.uri.path_and_query().map_or("/", |p| p.as_str()).as_bytes(),
                host: parts
                    .uri
                    .authority()
                    .map(|a| a.as_str().as_bytes())
                    .or(host)
                    .unwrap_or_default(),
                proto: self.conn.proto.as_str(),
                client: self.conn.peer.ip(),
                authorization: only,
                fields: parts.headers.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes())),
            };
            match crate::proxy::auth::check(&ctx, auth, facts, limits.timeouts.http_request).await {
                crate::proxy::auth::Checked::Allow(fields) => {
                    for name in &auth.strip {
                        parts.headers.remove(&**name);
                    }
                    for (name, value) in fields {
                        if let (Ok(n), Ok(v)) = (
                            http::HeaderName::from_bytes(name.as_bytes()),
                            http::HeaderValue::from_bytes(&value),
                        ) {
                            parts.headers.append(n, v);
                        }
                    }
                }
                crate::proxy::auth::Checked::Refuse(r) => {
                    crate::proxy::auth::count_route(&ctx, self.conn.frontend, self.rec.route);
                    let mut resp = http::Response::new(());
                    for (name, value) in &r.fields {
                        if let (Ok(n), Ok(v)) =
                            (http::HeaderName::from_bytes(name), http::HeaderValue::from_bytes(value))
                        {
                            resp.headers_mut().append(n, v);
                        }
                    }
                    let body: &[u8] = if parts.method == http::Method::HEAD {
                        b""
                    } else {
                        &r.body
                    };
                    return self.answer_with(resp, r.status, "", body);
                }
            }
        }
        match decision {
            Decision::NoRoute => Err(Error::new(
                ErrorKind::NoServer,
                Side::Front,
                "no route and no default_backend",
            )),
            Decision::Return(answer) => {
                let mut resp = http::Response::new(());
                for (name, value) in &answer.headers {
                    if let (Ok(n), Ok(v)) = (
                        http::HeaderName::from_bytes(name.as_bytes()),
                        http::HeaderValue::from_bytes(value),
                    ) {
                        resp.headers_mut().append(n, v);
                    }
                }
                // A HEAD request gets the length of the body it does not get.
                let body: &[u8] = if parts.method == http::Method::HEAD {
                    resp.headers_mut()
                        .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(answer.body.len()));
                    b""
                } else {
                    &answer.body
                };
                self.answer_with(resp, answer.status, &answer.content_type, body)
            }
            Decision::Redirect(redirect) => {
                let host = parts.headers.get(http::header::HOST).map(|h| h.as_bytes());
                let authority = parts.uri.authority().map(|a| a.as_str().as_bytes()).or(host);
                let target = parts.uri.path_and_query().map_or("/", |p| p.as_str()).as_bytes();
                let vars = RequestVars::of(self.conn.proto.as_str(), target, authority);
                let mut location = Vec::with_capacity(128);
                let value = redirect
                    .location
                    .render(&vars, &mut location)
                    .then(|| http::HeaderValue::from_bytes(&location).ok())
                    .flatten();
                let Some(value) = value else {
                    self.conn.ctx.stats.http_rewrite_skipped.add(1);
                    return Err(refused(
                        400,
                        "redirect: the request makes a Location that cannot be sent",
                    ));
                };
                let mut resp = http::Response::new(());
                resp.headers_mut().insert(http::header::LOCATION, value);
                self.answer_with(resp, redirect.status, "", b"")
            }
            Decision::Backend(backend, rewrite, _) => {
                // Balancing and stickiness read the request as the client sent it, as on
                // the h1 path; the server gets it rewritten.
                let prefer = self.sticky_server(backend, parts);
                let keys = (self.hash_key(backend, parts), prefer);
                self.rewrite = rewrite;
                // The server gets the path the route matched (`forward_target`), as does a
                // route's path rewrite; a buffer only when the path was not normal already.
                let forward_normalized = self.fe.forward_target == ForwardTarget::Normalized;
                let normalized = (forward_normalized || rewrite.is_some_and(|r| r.path.is_some()))
                    .then(|| {
                        match normalize::target(parts.uri.path_and_query().map_or("/", |p| p.as_str()).as_bytes()) {
                            Cow::Owned(t) => Some(t),
                            Cow::Borrowed(_) => None,
                        }
                    })
                    .flatten();
                // The client's own identity fields never reach a server, as on the h1 path.
                if let Some(auth) = self.fe.tls.as_ref().and_then(|t| t.client_auth.as_ref()) {
                    for name in &auth.headers.names {
                        parts.headers.remove(&**name);
                    }
                }
                if let Some(rewrite) = rewrite {
                    let skipped =
                        super::rewrite::request(parts, rewrite, self.conn.proto.as_str(), normalized.as_deref());
                    if skipped > 0 {
                        self.conn.ctx.stats.http_rewrite_skipped.add(u64::from(skipped));
                    }
                }
                if let Some(target) = normalized
                    && forward_normalized
                    && !rewrite.is_some_and(Rewrite::changes_target)
                {
                    set_target(&mut parts.uri, target).map_err(|r| refused(400, r))?;
                }
                for (name, value) in &self.conn.cert_fields {
                    parts.headers.append(name.clone(), value.clone());
                }
                let body_out = match (end_stream, checked.content_length) {
                    (true, _) => BodyOut::None,
                    (false, Some(n)) => BodyOut::Length(n),
                    (false, None) => BodyOut::Chunked,
                };
                let sticky = self.conn.ctx.backends.get(backend).and_then(|b| b.sticky.as_ref());
                let fwd = Forwarding {
                    mode: self.fe.forwarded,
                    ip: self.conn.peer.ip(),
                    proto: self.conn.proto,
                    sticky: sticky.map(|t| t.cookie()),
                };
                let mut head = self.conn.head_buffer();
                to_h1::write_request_head(parts, body_out, &fwd, &mut head).map_err(|r| refused(400, r.0))?;
                if body_out != BodyOut::None && expects_continue(parts) {
                    // The body is forwarded as it comes (the server is not asked): tell the
                    // client to send it now rather than after its own timeout.
                    let mut go = http::Response::new(());
                    *go.status_mut() = http::StatusCode::CONTINUE;
                    let _ = self.respond.send_informational(go);
                }
                let req = Request {
                    method: Method::of(parts.method.as_str().as_bytes()),
                    body: body_out,
                    head,
                    prefer,
                    limits,
                    body_deadline: limits.whole_request.filter(|_| !end_stream).map(|d| Instant::now() + d),
                };
                let asked = to_h2::Asked {
                    parts,
                    end_stream,
                    fwd,
                    prefer,
                };
                let forwarded = self.forward(backend, &req, &asked, keys, &mut body).await;
                self.conn.give_back_head(req.head);
                forwarded
            }
        }
    }

    /// Gets a server connection and runs the exchange, once more on a fresh connection
    /// when the h1 retry rule allows it.
    async fn forward(
        &mut self,
        backend: usize,
        req: &Request,
        asked: &to_h2::Asked<'_>,
        (hash_key, prefer): (Option<u64>, Option<ServerId>),
        body: &mut RecvStream,
    ) -> Result<(), Error> {
        let ctx = &*self.conn.ctx;
        let mut fresh_only = false;
        let mut unprocessed = 0;
        loop {
            let retries = Retries {
                done: &mut self.rec.retries,
                budget: req.limits.retries,
            };
            let conn = server_conn::open(ctx, backend, fresh_only, hash_key, prefer, retries).await?;
            if conn.reused {
                ctx.stats.http_pool_reused.add(1);
            }
            // A stream on a shared HTTP/2 connection is retried like a request on a reused
            // one: only when the server cannot have acted on it.
            let h2 = matches!(conn.stream, Back::H2(_));
            let reused = conn.reused || h2;
            let sent = Counter::new();
            // `maint --kill` on this server ends the stream mid-exchange, as on the h1 path.
            let live = std::sync::Arc::clone(conn.slot.server());
            let epoch = live.kill_epoch();
            let kills = ctx.kills.notified();
            tokio::pin!(kills);
            let outcome = tokio::select! {
                biased;
                outcome = self.dispatch(backend, req, asked, conn, body, &sent) => outcome,
                () = ctx.killed(&live, epoch, kills.as_mut()) => {
                    let why = format!("server {}/{} put in maintenance with --kill", live.backend_name, live.name);
                    let killed = Error::new(ErrorKind::Killed, Side::Internal, why).during(self.rec.exchange_phase());
                    Err(killed.at(backend, Some(live.id)))
                }
            };
            self.rec.bytes_to_server += sent.get();
            match outcome {
                Ok(()) => return Ok(()),
                // Safe however often (the server says it did nothing), but bounded.
                Err(e)
                    if h2
                        && e.retryable
                        && !self.answered
                        && unprocessed < MAX_UNPROCESSED_RETRIES
                        && req.limits.may_retry(self.rec.retries) =>
                {
                    tracing::debug!(error = %e, "h2 stream: HTTP/2 server did not process it, sending it again");
                    ctx.stats.http_retries.add(1);
                    self.rec.retries += 1;
                    unprocessed += 1;
                }
                Err(e)
                    if !fresh_only
                        && !self.answered
                        && e.may_retry(req.replayable(), reused)
                        && req.limits.may_retry(self.rec.retries) =>
                {
                    tracing::debug!(error = %e, "h2 stream: retrying on a fresh connection");
                    ctx.stats.http_retries.add(1);
                    self.rec.retries += 1;
                    fresh_only = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The exchange for the server's protocol (HTTP/2 boxed: the HTTP/1 future keeps its size).
    async fn dispatch(
        &mut self,
        backend: usize,
        req: &Request,
        asked: &to_h2::Asked<'_>,
        conn: Connected<'_, Back>,
        body: &mut RecvStream,
        sent: &Counter,
    ) -> Result<(), Error> {
        // DATA that came while the server was being chosen and connected may have had the
        // codec reset the stream (against `content-length`): its head then goes nowhere.
        reset_before_head(body)?;
        let (stream, conn) = conn.take_stream();
        match stream {
            Back::H1(stream) => self.exchange(backend, req, conn.with(stream), body, sent).await,
            Back::H2(stream) => {
                Box::pin(to_h2::exchange(
                    self,
                    backend,
                    req,
                    asked,
                    conn.with(stream),
                    body,
                    sent,
                ))
                .await
            }
            Back::Wait(..) => Err(Error::new(ErrorKind::NoServer, Side::Internal, "no connection")),
        }
    }

    async fn exchange(
        &mut self,
        backend: usize,
        req: &Request,
        conn: Connected<'_, ServerConn>,
        body: &mut RecvStream,
        sent: &Counter,
    ) -> Result<(), Error> {
        let Connected {
            stream,
            slot,
            reused,
            chosen,
            connected,
        } = conn;
        let ctx = &*self.conn.ctx;
        let server_live = std::sync::Arc::clone(slot.server());
        let (id, tls, address) = (server_live.id, server_live.tls.is_some(), server_live.address);
        let at = |e: Error| e.at(backend, Some(id));
        let mut server = Counted::with_tally(stream, &ctx.stats.bytes_to_server, sent);
        (self.rec.backend, self.rec.server, self.rec.server_at) = (Some(backend), Some(id), Some(slot.position()));
        self.rec.timing.chosen = Some(self.rec.timing.since(chosen));
        self.rec.timing.connected = Some(self.rec.timing.since(connected));
        let timeouts = req.limits.timeouts;
        if let Err(e) = server.write_all(&req.head).await {
            tracing::debug!(error = %e, reused, "h2 stream: sending request head failed");
            let e = Error::io(Side::Back, "send request head", e).during(Phase::Headers);
            return Err(at(e.retryable(true)));
        }
        let mut back = Inbound::default();
        let head = Head {
            ctx,
            respond: &mut *self.respond,
            back: &mut back,
            method: req.method,
            scratch: &self.conn.scratch,
            server_idle: timeouts.server,
        };
        // Split only when a body goes up while the response is awaited (the split halves
        // share the connection through a lock and an allocation).
        let (read, server_first) = if req.body == BodyOut::None {
            head.wait(&mut server, None::<std::future::Pending<Result<(), Error>>>)
                .await
        } else {
            let (mut rd, mut wr) = tokio::io::split(&mut server);
            let upload = async {
                tokio::select! {
                    biased;
                    sent = send_body(&mut wr, body, req.body, timeouts.client, req.limits.max_body_size) => sent,
                    () = crate::proxy::until(req.body_deadline) => Err(crate::proxy::body_timeout()),
                }
            };
            head.wait(&mut rd, Some(upload)).await
        }
        .map_err(at)?;
        let response = match read {
            Ok(r) => {
                server_live.check.traffic_ok();
                r
            }
            Err(e) => {
                let broken = matches!(e.kind, ErrorKind::BadResponse | ErrorKind::ResponseTimeout)
                    || (e.kind == ErrorKind::ServerEmpty && !reused);
                if broken {
                    crate::proxy::connect::server_error(&server_live);
                }
                return Err(at(e));
            }
        };
        self.rec.timing.response = Some(self.rec.timing.now());
        self.rec.status = response.status;
        self.capture_response(response.headers(back.data()));
        let sticky = ctx.backends.get(backend).and_then(|b| b.sticky.as_ref());
        let cookie = sticky.map(|t| t.cookie());
        // As the h1 path: a client that came with this server's cookie keeps it.
        let sets_cookie = sticky.is_some() && req.prefer != Some(id);
        let rewritten = self.rewrite.is_some_and(|r| !r.response_headers.is_empty());
        let framing = response.body;
        let keep_server = response.keep_alive && framing != BodyFraming::CloseDelimited && !server_first;
        let end = framing == BodyFraming::None || framing == BodyFraming::ContentLength(0);
        // A body of announced length cannot end early with gRPC trailers.
        self.grpc = self.grpc && !response.entries().iter().any(|e| e.kind == HeaderKind::ContentLength);
        let mut verdict = match self.compress {
            Some(n) => n.verdict(&Facts::gather(
                response.status,
                req.method == Method::Head,
                response.headers(back.data()),
            )),
            None => Verdict::Untouched,
        };
        let mut compressing = match (verdict, self.compress) {
            (Verdict::Compress(coding), Some(n)) if !end => ctx.compressors.start(coding, n.policy),
            _ => None,
        };
        if compressing.is_none() && matches!(verdict, Verdict::Compress(_)) {
            verdict = Verdict::VaryOnly;
        }
        let alt_svc = self.fe.alt_svc();
        let sent = if rewritten || sets_cookie || self.id_field.is_some() || verdict != Verdict::Untouched {
            let mut head = to_h1::response_head(&response, back.data(), cookie);
            compress::edit_h2_head(head.headers_mut(), verdict);
            if let Some(rewrite) = self.rewrite {
                rewrite
                    .response_headers
                    .apply_to_map(head.headers_mut(), &RequestVars::default());
            }
            set_id_field(head.headers_mut(), self.id_field);
            add_alt_svc(head.headers_mut(), alt_svc);
            if let Some(table) = sticky.filter(|_| sets_cookie) {
                let private = crate::http::cookie::kept_from_shared_caches(response.headers(back.data()));
                table.with_lines(id, private, |lines| to_h1::append_lines(&mut head, lines));
            }
            self.respond.send_response(head, end)
        } else {
            // Sent as the server wrote it: encoded from its bytes, no header map.
            let fields = to_h1::response_fields(&response, back.data(), cookie);
            let alt_svc = alt_svc.map(|v| (&b"alt-svc"[..], v));
            self.respond
                .send_response_fields(response.status, fields.chain(alt_svc), end)
        };
        back.consume(response.head_len);
        response.reclaim(&mut self.conn.scratch.borrow_mut());
        let send = sent.map_err(|e| at(h2_error("send response head", &e)))?;
        self.answered = true;
        if !end {
            let send = self.send.insert(send);
            let encoder = compressing.as_mut().map(|c| &mut c.encoder);
            let moved = relay_response(ctx, &mut server, &mut back, framing, send, encoder, timeouts).await;
            self.rec.bytes_to_client += moved.bytes;
            moved.result.map_err(at)?;
        }
        drop(compressing);
        if keep_server && back.is_empty() {
            drop(slot);
            ctx.http_pool.put(id, tls, address, server.into_inner());
        }
        Ok(())
    }

    /// A response the proxy makes (an error before any response).
    fn answer(&mut self, status: u16, content_type: &str, text: &[u8]) -> Result<(), Error> {
        self.answer_with(http::Response::new(()), status, content_type, text)
    }

    /// A response the proxy makes: `resp`'s fields, then the status, the content type (none
    /// when empty) and the length of `text`, the body.
    pub(super) fn answer_with(
        &mut self,
        mut resp: http::Response<()>,
        status: u16,
        content_type: &str,
        text: &[u8],
    ) -> Result<(), Error> {
        *resp.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        if !content_type.is_empty()
            && let Ok(v) = http::HeaderValue::from_str(content_type)
        {
            resp.headers_mut().insert(http::header::CONTENT_TYPE, v);
        }
        // Already there only for a HEAD request's answer (the length it would have had). A
        // 204 or 304 has none (RFC 9110 §8.6).
        if !resp.headers().contains_key(http::header::CONTENT_LENGTH) && status != 204 && status != 304 {
            resp.headers_mut()
                .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(text.len()));
        }
        set_id_field(resp.headers_mut(), self.id_field);
        self.rec.status = status;
        self.answered = true;
        let mut send = self
            .respond
            .send_response(resp, text.is_empty())
            .map_err(|e| h2_error("send response", &e))?;
        if !text.is_empty() {
            send.send_bytes(text, true).map_err(|e| h2_error("send response", &e))?;
            self.rec.bytes_to_client += text.len() as u64;
        }
        Ok(())
    }

    /// A stream failed: log it; answer with the error's status when nothing was answered
    /// yet, else reset the stream (the response had started: nothing else can be said).
    fn fail(&mut self, cause: &Error) {
        let ctx = &*self.conn.ctx;
        self.rec.fail(cause);
        let status = if self.answered { None } else { cause.http_status() };
        log_failure(ctx, self.fe, self.conn.peer, status.unwrap_or(0), cause);
        match status {
            Some(status) if status >= 500 && self.grpc => {
                ctx.stats.http_proxy_5xx.add(1);
                self.rec.status = 200;
                self.answered = true;
                let mut head = http::Response::from_parts(grpc::unavailable(grpc_message(cause)), ());
                set_id_field(head.headers_mut(), self.id_field);
                let _ = self.respond.send_response(head, true);
            }
            Some(status) => {
                if status >= 500 {
                    ctx.stats.http_proxy_5xx.add(1);
                } else {
                    ctx.stats.http_proxy_4xx.add(1);
                }
                let reason = crate::http::status::reason(status);
                let text = format!("{reason}\n");
                let _ = self.answer(status, "text/plain", text.as_bytes());
            }
            None => match self.send.as_mut() {
                // A gRPC client reads the outcome from the trailers, even mid-stream.
                Some(send) if self.grpc => {
                    let mut trailers = grpc::unavailable(grpc_message(cause)).headers;
                    trailers.remove(http::header::CONTENT_TYPE);
                    if send.send_trailers(trailers).is_err() {
                        send.send_reset(Reason::INTERNAL_ERROR);
                    }
                }
                Some(send) => send.send_reset(Reason::INTERNAL_ERROR),
                None => self.respond.send_reset(Reason::INTERNAL_ERROR),
            },
        }
    }

    /// As the h1 path: the request's key when `backend` hashes.
    fn hash_key(&self, backend: usize, parts: &Parts) -> Option<u64> {
        use crate::balance::hash::{cookie_value, key_of_bytes, key_of_ip};
        use crate::config::model::HashKey;
        let spec = self.conn.ctx.shared.config.backends.get(backend)?.hash_key.as_ref()?;
        let found = match spec {
            HashKey::Source => None,
            HashKey::Uri => parts.uri.path_and_query().map(|p| p.as_str().as_bytes()),
            HashKey::Header(name) => parts.headers.get(name.as_str()).map(|v| v.as_bytes()),
            HashKey::Cookie(name) => parts
                .headers
                .get_all(http::header::COOKIE)
                .iter()
                .find_map(|v| cookie_value(v.as_bytes(), name.as_bytes())),
        };
        Some(found.map_or_else(|| key_of_ip(self.conn.peer.ip()), key_of_bytes))
    }

    /// As the h1 path: the server a sticky backend's cookie names.
    fn sticky_server(&self, backend: usize, parts: &Parts) -> Option<ServerId> {
        let local = self.conn.ctx.backends.get(backend)?;
        let table = local.sticky.as_ref()?;
        let value = parts
            .headers
            .get_all(http::header::COOKIE)
            .iter()
            .find_map(|v| crate::http::cookie::find(v.as_bytes(), table.cookie()))?;
        table.server_of(&local.live, value)
    }
}

/// What a gRPC client is told of a proxy-side failure: the kind of failure, never a
/// server's name or address.
/// The frontend's `Alt-Svc` (HTTP/3 offered on its quic binds), beside any the server sent.
pub(super) fn add_alt_svc(headers: &mut http::HeaderMap, alt_svc: Option<&[u8]>) {
    if let Some(v) = alt_svc.and_then(|v| http::HeaderValue::from_bytes(v).ok()) {
        headers.append(http::header::ALT_SVC, v);
    }
}

fn grpc_message(cause: &Error) -> &'static str {
    match cause.kind {
        ErrorKind::NoServer | ErrorKind::QueueFull | ErrorKind::QueueTimeout => "proxy: no server available",
        ErrorKind::Connect | ErrorKind::ConnectTimeout | ErrorKind::Tls => "proxy: server unreachable",
        ErrorKind::ResponseTimeout | ErrorKind::IdleTimeout => "proxy: server timed out",
        ErrorKind::Killed => "proxy: server taken out of service",
        _ => "proxy: server failed",
    }
}

fn expects_continue(parts: &Parts) -> bool {
    parts
        .headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// A stream's body against its `max_body_size` (a body without content-length is counted
/// as it comes; one with it was judged before anything was sent).
pub(super) struct BodyBudget {
    left: u64,
}

impl BodyBudget {
    /// `max` 0 = unlimited.
    pub(super) fn new(max: u64) -> Self {
        BodyBudget {
            left: if max == 0 { u64::MAX } else { max },
        }
    }

    pub(super) fn take(&mut self, n: usize) -> Result<(), Error> {
        match self.left.checked_sub(n as u64) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(refused(413, "request body over max_body_size")),
        }
    }
}

/// `Err` once the stream was reset (by the client, or by the codec for what it sent): its
/// head must not be sent to a server.
fn reset_before_head(body: &RecvStream) -> Result<(), Error> {
    match body.reset_code() {
        None => Ok(()),
        Some(code) => {
            let why = format!("stream reset before its head was forwarded ({})", code.as_str());
            Err(Error::new(ErrorKind::PeerClosed, Side::Front, why).during(Phase::Request))
        }
    }
}

/// `uri` with `target` as its path and query (scheme and authority kept).
fn set_target(uri: &mut http::Uri, target: Vec<u8>) -> Result<(), &'static str> {
    let mut parts = std::mem::take(uri).into_parts();
    parts.path_and_query =
        Some(http::uri::PathAndQuery::from_maybe_shared(Bytes::from(target)).map_err(|_| "normalised path")?);
    *uri = http::Uri::from_parts(parts).map_err(|_| "normalised path")?;
    Ok(())
}

fn refused(status: u16, why: &'static str) -> Error {
    Error::new(ErrorKind::BadRequest(status), Side::Front, why).during(Phase::Request)
}

/// A stream the client reset, or one whose connection is gone: nothing more goes to it.
pub(super) fn h2_error(what: &'static str, e: &StreamError) -> Error {
    Error::new(ErrorKind::PeerClosed, Side::Front, format!("{what}: {e}"))
}

fn log_failure(ctx: &WorkerCtx, fe: &Frontend, peer: SocketAddr, status: u16, cause: &Error) {
    if status == 0 && cause.is_routine() {
        tracing::debug!(frontend = %fe.name, %peer, error = %cause, "h2 stream ended");
    } else if ctx.may_warn() {
        let (backend, server) = crate::proxy::names(&ctx.shared.config, cause.backend, cause.server);
        tracing::warn!(frontend = %fe.name, backend = %backend, server = %server, status, %peer, cause = %cause, "h2 request failed");
    }
}

/// The request body to the server: DATA frames as they come (each one's window given back
/// once the server took it), framed as `out` says, the client's trailers after a chunked body.
async fn send_body<W: AsyncWrite + Unpin>(
    server: &mut W,
    body: &mut RecvStream,
    out: BodyOut,
    idle: Duration,
    max_body: u64,
) -> Result<(), Error> {
    let mut frame = Vec::with_capacity(16);
    let mut budget = BodyBudget::new(max_body);
    loop {
        let next = tokio::time::timeout(idle, body.data())
            .await
            .map_err(|_| Error::new(ErrorKind::IdleTimeout, Side::Front, "request body idle").during(Phase::Request))?;
        let Some(data) = next else { break };
        // h2 has checked DATA against content-length (a mismatch resets the stream): the
        // server then never gets the complete body it was announced.
        let data = data.map_err(|e| h2_error("read request body", &e).during(Phase::Request))?;
        if data.is_empty() {
            continue;
        }
        budget.take(data.len())?;
        if out == BodyOut::Chunked {
            to_h1::chunk_head(data.len(), &mut frame);
            write(server, &frame).await?;
        }
        write(server, &data).await?;
        if out == BodyOut::Chunked {
            write(server, b"\r\n").await?;
        }
        body.release_capacity(data.len());
    }
    if out == BodyOut::Chunked {
        let trailers = tokio::time::timeout(idle, body.trailers())
            .await
            .map_err(|_| Error::new(ErrorKind::IdleTimeout, Side::Front, "request trailers idle"))?
            .map_err(|e| h2_error("read request trailers", &e).during(Phase::Request))?;
        to_h1::write_last_chunk(trailers.as_ref(), &mut frame).map_err(|r| refused(400, r.0))?;
        write(server, &frame).await?;
    }
    Ok(())
}

async fn write<W: AsyncWrite + Unpin>(server: &mut W, bytes: &[u8]) -> Result<(), Error> {
    server
        .write_all(bytes)
        .await
        .map_err(|e| Error::io(Side::Back, "send request body", e).during(Phase::Headers))
}

/// Interim responses passed on per stream; later ones are dropped. HEADERS frames are not
/// flow-controlled: h2 would queue every one a server sends.
const MAX_INTERIM: u8 = 16;

/// Passes a server's interim (1xx) responses on to the h2 client as informational HEADERS
/// (103 Early Hints, 102...), as HAProxy does. Not 100 Continue: tollgate answers the
/// client's `expect: 100-continue` itself (the body is forwarded as it comes), so a server's
/// 100 would repeat it, or, unasked, mean nothing. The sender is shared with the wait for
/// the final head (its reset watch); each use is one synchronous call.
pub(super) struct Interim<'a, 'b> {
    respond: &'a RefCell<&'b mut SendResponse>,
    left: u8,
}

impl<'a, 'b> Interim<'a, 'b> {
    pub(super) fn new(respond: &'a RefCell<&'b mut SendResponse>) -> Self {
        Interim {
            respond,
            left: MAX_INTERIM,
        }
    }

    /// `head` is made only for a response passed on.
    pub(super) fn pass(&mut self, status: u16, head: impl FnOnce() -> http::Response<()>) {
        if status == 100 || self.left == 0 {
            return;
        }
        self.left -= 1;
        // Fails only once the stream is gone: the wait for the final head hears it.
        let _ = self.respond.borrow_mut().send_informational(head());
    }
}

/// What waiting for a response head needs.
struct Head<'a> {
    ctx: &'a WorkerCtx,
    respond: &'a mut SendResponse,
    back: &'a mut Inbound,
    method: Method,
    scratch: &'a RefCell<HeadScratch>,
    /// `timeouts.server`, from the end of the request body.
    server_idle: Duration,
}

impl Head<'_> {
    /// The response head read from `server` while `upload` sends the request body: the
    /// head, and whether it came before the body was all sent. `Err`: the upload failed or
    /// the client reset the stream.
    async fn wait<R, U>(
        self,
        server: &mut R,
        upload: Option<U>,
    ) -> Result<(Result<h1::ResponseHead, Error>, bool), Error>
    where
        R: AsyncRead + Unpin,
        U: Future<Output = Result<(), Error>>,
    {
        let respond = RefCell::new(self.respond);
        let mut interim = Interim::new(&respond);
        let response = read_response(self.ctx, server, self.back, self.method, self.scratch, &mut interim);
        tokio::pin!(response);
        // A server may answer before the body is complete (a 413, a redirect): its
        // answer is heard at once, the rest of the body is not sent, and the server
        // connection is not reused (as `upload.rs` on the h1 path).
        let mut early = None;
        if let Some(upload) = upload {
            tokio::select! {
                biased;
                r = &mut response => early = Some(r),
                sent = upload => sent?,
            }
        }
        let server_first = early.is_some();
        // A client that resets its stream stops the wait at once (its server connection
        // is closed): a reset stream holds no server connection (rapid reset).
        let read = match early {
            Some(r) => r,
            None => tokio::select! {
                r = tokio::time::timeout(self.server_idle, &mut response) => r.unwrap_or_else(|_| {
                    Err(Error::new(ErrorKind::ResponseTimeout, Side::Back, "no response head within timeouts.server"))
                }),
                reason = std::future::poll_fn(|cx| respond.borrow_mut().poll_reset(cx)) => {
                    let why = match reason {
                        Ok(reason) => format!("client reset the stream ({})", reason.as_str()),
                        Err(e) => format!("client connection: {e}"),
                    };
                    return Err(Error::new(ErrorKind::PeerClosed, Side::Front, why).during(Phase::Headers));
                }
            },
        };
        Ok((read, server_first))
    }
}

/// Reads the final response head, each interim 1xx passed on through `interim`.
async fn read_response<R: AsyncRead + Unpin>(
    ctx: &WorkerCtx,
    server: &mut R,
    back: &mut Inbound,
    method: Method,
    scratch: &RefCell<HeadScratch>,
    interim: &mut Interim<'_, '_>,
) -> Result<h1::ResponseHead, Error> {
    let http = &ctx.shared.config.http;
    let limits = Limits {
        max_header_size: http.max_header_size,
        max_request_line: http.max_request_line,
        max_headers: http.max_headers,
    };
    // The caller bounds the wait (`timeouts.server` from the end of the request body).
    let mut received = false;
    loop {
        if !back.is_empty() {
            let parsed = h1::parse_response_head(back.data(), &limits, method, &mut scratch.borrow_mut());
            match parsed {
                Ok(Some(head)) if head.informational => {
                    interim.pass(head.status, || to_h1::response_head(&head, back.data(), None));
                    back.consume(head.head_len);
                    head.reclaim(&mut scratch.borrow_mut());
                    continue;
                }
                Ok(Some(head)) if head.switching_protocols || head.tunnel => {
                    head.reclaim(&mut scratch.borrow_mut());
                    return Err(Error::new(
                        ErrorKind::BadResponse,
                        Side::Back,
                        "upgrade answered to an h2 request",
                    ));
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
                Err(e) => return Err(Error::new(ErrorKind::BadResponse, Side::Back, e.as_str())),
            }
        }
        let read = back.read_from(server, &ctx.buffers, false).await;
        crate::proxy::http::inbound::response_head_read(read, &mut received)?;
    }
}

struct Moved {
    bytes: u64,
    result: Result<(), Error>,
}

/// The response body to the client, de-chunked, its trailers as h2 trailers. With an
/// `encoder` (`compress`), the content goes through it: its output is sent as it comes,
/// flushed whenever the next read from the server would wait (a stream streams), and the
/// server's trailers are dropped (they described the uncompressed body).
async fn relay_response(
    ctx: &WorkerCtx,
    server: &mut Counted<'_, ServerConn>,
    back: &mut Inbound,
    framing: BodyFraming,
    send: &mut SendStream,
    mut encoder: Option<&mut Encoder>,
    timeouts: crate::config::model::Timeouts,
) -> Moved {
    let mut moved = Moved {
        bytes: 0,
        result: Ok(()),
    };
    let mut tracker = BodyTracker::new(framing, h1::Side::Response);
    let mut dechunk = (framing == BodyFraming::Chunked).then(Dechunk::default);
    let mut out = Vec::new();
    let compress_failed =
        |e: std::io::Error| Error::new(ErrorKind::Io, Side::Internal, format!("compression: {e}")).during(Phase::Data);
    moved.result = async {
        loop {
            if !back.is_empty() {
                let p = tracker
                    .advance(back.data())
                    .map_err(|e| Error::new(ErrorKind::BadResponse, Side::Back, e.as_str()).during(Phase::Data))?;
                let body = back.data().get(..p.consumed).unwrap_or_default();
                match (&mut dechunk, &mut encoder) {
                    (Some(d), enc) => {
                        let mut at = 0;
                        while at < body.len() {
                            let (used, run) = d.step(body.get(at..).unwrap_or_default());
                            if let Some(r) = run {
                                let data = body.get(at + r.start..at + r.end).unwrap_or_default();
                                match enc {
                                    Some(e) => e.push(data).map_err(compress_failed)?,
                                    None => moved.bytes += send_data(send, data, false, timeouts.client).await?,
                                }
                            }
                            at += used;
                        }
                    }
                    (None, Some(e)) => e.push(body).map_err(compress_failed)?,
                    // The last piece of a length-framed body ends the stream itself (no
                    // empty DATA frame after it).
                    (None, None) if p.done && !body.is_empty() => {
                        moved.bytes += send_data(send, body, true, timeouts.client).await?;
                        back.consume(p.consumed);
                        return Ok(());
                    }
                    (None, None) => moved.bytes += send_data(send, body, false, timeouts.client).await?,
                }
                back.consume(p.consumed);
                if let Some(e) = &mut encoder {
                    e.swap_output(&mut out);
                    moved.bytes += send_data(send, &out, false, timeouts.client).await?;
                }
                if p.done {
                    break;
                }
            }
            let read = {
                let mut read = std::pin::pin!(back.read_from(server, &ctx.buffers, false));
                match std::future::poll_fn(|cx| std::task::Poll::Ready(read.as_mut().poll(cx))).await {
                    std::task::Poll::Ready(r) => Ok(r),
                    std::task::Poll::Pending => {
                        // The server has nothing more for now: what it sent goes out whole.
                        if let Some(e) = &mut encoder {
                            e.flush().map_err(compress_failed)?;
                            e.swap_output(&mut out);
                            moved.bytes += send_data(send, &out, false, timeouts.client).await?;
                        }
                        tokio::time::timeout(timeouts.server, read).await
                    }
                }
            }
            .map_err(|_| {
                ctx.stats.idle_timeouts.add(1);
                Error::new(ErrorKind::IdleTimeout, Side::Back, "response body idle").during(Phase::Data)
            })?;
            match read {
                Ok(0) => {
                    tracker
                        .on_eof()
                        .map_err(|e| Error::new(ErrorKind::PeerClosed, Side::Back, e.as_str()).during(Phase::Data))?;
                    break;
                }
                Ok(_) => {}
                Err(e) => return Err(Error::io(Side::Back, "read response body", e).during(Phase::Data)),
            }
        }
        if let Some(e) = &mut encoder {
            e.finish().map_err(compress_failed)?;
            e.swap_output(&mut out);
            moved.bytes += send_data(send, &out, true, timeouts.client).await?;
            return Ok(());
        }
        let trailers = dechunk.as_ref().map(|d| to_h1::trailer_map(d.trailer_section()));
        match trailers {
            Some(t) if !t.is_empty() => send.send_trailers(t),
            _ => send.send_data(Bytes::new(), true),
        }
        .map_err(|e| h2_error("end response", &e).during(Phase::Data))
    }
    .await;
    // A failure ends the stream in `Stream::fail` (a reset, or gRPC trailers).
    back.release_if_empty();
    moved
}

/// Waits up to `idle` for the client's window to give `send` capacity (zero-window stall).
async fn window(send: &mut SendStream, idle: Duration) -> Result<Option<Result<usize, StreamError>>, Error> {
    tokio::time::timeout(idle, std::future::poll_fn(|cx| send.poll_capacity(cx)))
        .await
        .map_err(|_| {
            Error::new(
                ErrorKind::IdleTimeout,
                Side::Front,
                "client window stayed shut (zero-window stall)",
            )
            .during(Phase::Data)
        })
}

/// Sends `data` as the client's window allows, its last piece ending the stream if `end`; a
/// window that stays shut for `idle` ends the stream (zero-window stall).
async fn send_data(send: &mut SendStream, mut data: &[u8], end: bool, idle: Duration) -> Result<u64, Error> {
    let total = data.len() as u64;
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        // Mostly granted at once (h2 assigns what the windows have as it is reserved): sent
        // then without a wait and its timer.
        let n = match send.capacity() {
            0 => match window(send, idle).await? {
                None => return Err(Error::new(ErrorKind::PeerClosed, Side::Front, "stream closed").during(Phase::Data)),
                Some(Err(e)) => return Err(h2_error("response window", &e).during(Phase::Data)),
                Some(Ok(n)) => n.min(data.len()),
            },
            n => n.min(data.len()),
        };
        if n == 0 {
            continue;
        }
        let (now, rest) = data.split_at(n);
        send.send_bytes(now, end && rest.is_empty())
            .map_err(|e| h2_error("send response body", &e).during(Phase::Data))?;
        data = rest;
    }
    Ok(total)
}
