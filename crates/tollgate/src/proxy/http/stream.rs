//! One client connection in HTTP mode: the loop of request streams, reading and judging
//! each request head, answering what the proxy answers itself, handing the rest to
//! `exchange`. Owns the client socket, its inbound bytes and the head scratch space.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::futures::Notified;
use tokio::time::Instant;

use super::client::ClientStream;
use super::inbound::Inbound;
use super::route::{self, Decision};
use crate::config::model::{ForwardTarget, Forwarded, Frontend, Overrides, RequestLimits};
use crate::ctx::WorkerCtx;
use crate::ctx::errors::{Direction, Refused};
use crate::ctx::park::{IdleConn, Opening, ParkedAt};
use crate::ctx::sessions::{self, SessionState};
use crate::error::{Error, ErrorKind, Side};
use crate::http::compress::Negotiated;
use crate::http::h1::{
    self, BodyFraming, BodyTracker, ConnectionOut, HeadEdits, HeadScratch, Limits, Method, RequestHead, Version,
};
use crate::http::normalize;
use crate::http::rewrite::{RequestVars, Rewrite};
use crate::live::ServerId;
use crate::proxy::record::StreamRecord;
use crate::relay::counted::Counted;

/// What the proxy needs to remember of a request once its head bytes are consumed.
#[derive(Debug, Clone, Copy)]
pub(super) struct RequestInfo {
    pub method: Method,
    pub version: Version,
    pub body: BodyFraming,
    pub keep_alive: bool,
    pub expect_continue: bool,
    pub upgrade: bool,
    /// The key a hashing backend picks its server by; `None` for other algorithms.
    pub hash_key: Option<u64>,
    /// The server a sticky backend's cookie names, when it names one of its servers.
    pub prefer: Option<ServerId>,
    /// The client sent `TE: trailers` (looked for only when the backend has HTTP/2
    /// servers: the HTTP/1 path drops TE, an HTTP/2 server needs it kept).
    pub te_trailers: bool,
    /// Timeouts, body size and retries of this request (its route's and backend's).
    pub limits: RequestLimits,
    /// When its route or backend sets `timeouts.http_request`: the body must be in by then.
    pub body_deadline: Option<Instant>,
}

impl RequestInfo {
    fn of(head: &RequestHead, limits: RequestLimits) -> Self {
        let has_body = head.body != BodyFraming::None;
        RequestInfo {
            limits,
            body_deadline: limits.whole_request.filter(|_| has_body).map(|d| Instant::now() + d),
            method: head.method,
            version: head.version,
            body: head.body,
            keep_alive: head.keep_alive && !head.close_after_response,
            expect_continue: head.expect_continue,
            upgrade: head.upgrade,
            hash_key: None,
            prefer: None,
            te_trailers: false,
        }
    }

    /// Safe to send twice (RFC 9110 9.2.2).
    pub(super) fn idempotent(&self) -> bool {
        matches!(
            self.method,
            Method::Get | Method::Head | Method::Options | Method::Trace | Method::Put | Method::Delete
        )
    }

    /// May be replayed after an empty response: idempotent and nothing to send but the head.
    pub(super) fn replayable(&self) -> bool {
        self.idempotent() && self.body == BodyFraming::None
    }
}

enum HeadOutcome {
    Head(RequestHead),
    /// Nothing came within `park_idle_after`: the connection waits in the park until this
    /// deadline (`ctx::park`).
    Park(Instant),
    /// The client closed, or stayed idle past its keep-alive timeout: close quietly.
    Closed,
    /// Answer (the error's status) and close.
    Refuse(Error),
}

pub(super) struct Session<'a, C> {
    pub(super) ctx: &'a Rc<WorkerCtx>,
    pub(super) fe: &'a Frontend,
    /// Counted into `bytes_to_client` whichever path writes to it.
    pub(super) client: Counted<'a, C>,
    pub(super) peer: SocketAddr,
    pub(super) front: Inbound,
    pub(super) scratch: HeadScratch,
    /// Head being written (request to the server, then response to the client).
    pub(super) out: Vec<u8>,
    served: u64,
    accepted: Instant,
    pub(super) frontend: usize,
    /// The record of the stream (request) being served; sunk when it ends.
    pub(super) rec: StreamRecord,
    /// When the next stream begins: the accept, then the end of each response.
    stream_began: Instant,
    /// `client.written()` when the current stream began.
    client_mark: u64,
    /// The current request's method and target for the access log (taken from the
    /// thread's spares at the first request, only when access logs are on).
    line: Option<crate::accesslog::LineSlot>,
    /// The trace tollgate started (`[frontend] trace`): made at the first request that
    /// starts one, reused by the next (boxed: most sessions never start one, and every
    /// session's state carries this field).
    trace: Option<Box<StartedTrace>>,
    /// The current request's ID (`[frontend] request_id`; taken from the thread's spares at
    /// the first request of a frontend that has them).
    pub(super) request_id: Option<crate::ctx::worker::IdLease<'a>>,
    /// The matched route's rewrites for the request being forwarded (its response too).
    pub(super) rewrite: Option<&'a Rewrite>,
    /// The request's response compression (its route's `compress` and `Accept-Encoding`).
    pub(super) compress: Option<Negotiated<'a>>,
    /// The client presented a verified certificate (`client_cert` routes).
    client_cert: bool,
    /// `[frontend.tls.client_auth] headers`: the names dropped from every request and the
    /// lines written in their place, rendered at the connection's start.
    cert_names: &'a [Box<str>],
    cert_lines: Vec<u8>,
    /// The connection may go to the park while it waits for a request.
    may_park: bool,
    /// The end of the first wait of a session resumed from the park (its deadline there).
    resume_deadline: Option<Instant>,
    /// The park's epoll set has the socket already (`ParkedAt::watched`).
    watched: bool,
    /// Resumed after a wait between requests longer than `park_idle_after`: a client
    /// that thinks that long between requests, so after this response the connection
    /// goes straight back to the park, without a read that would find nothing nor a
    /// reactor registration, instead of waiting `park_idle_after` in its task first.
    park_at_once: bool,
}

/// A trace tollgate started: its `traceparent`, and whether the current request has it.
struct StartedTrace {
    parent: crate::http::trace::Traceparent,
    current: bool,
}

impl<'a, C: ClientStream> Session<'a, C> {
    pub(super) fn new(ctx: &'a Rc<WorkerCtx>, frontend: usize, client: C, peer: SocketAddr) -> Option<Self> {
        let fe = ctx.shared.config.frontends.get(frontend)?;
        let accepted = Instant::now();
        let leaf = client.peer_leaf();
        let (cert_names, cert_lines) = match fe.tls.as_ref().and_then(|t| t.client_auth.as_ref()) {
            Some(auth) => (
                &auth.headers.names[..],
                crate::proxy::client_cert::h1_lines(&auth.headers, leaf),
            ),
            None => (&[][..], Vec::new()),
        };
        let client_cert = leaf.is_some();
        Some(Session {
            ctx,
            fe,
            client: Counted::new(client, &ctx.stats.bytes_to_client),
            peer,
            front: Inbound::default(),
            // Both grow at the first head that needs them and stay for the connection's
            // next requests; a connection waiting for its first head holds neither.
            scratch: HeadScratch::default(),
            out: Vec::new(),
            served: 0,
            accepted,
            frontend,
            rec: StreamRecord::new(frontend, peer, accepted),
            stream_began: accepted,
            client_mark: 0,
            line: None,
            trace: None,
            request_id: None,
            rewrite: None,
            compress: None,
            client_cert,
            cert_names,
            cert_lines,
            may_park: C::PARKS,
            resume_deadline: None,
            watched: false,
            park_at_once: false,
        })
    }

    /// A session for a connection the park handed back (`client` rebuilt from what it
    /// kept), where the parked one left off.
    pub(super) fn resumed(
        ctx: &'a Rc<WorkerCtx>,
        opening: Opening,
        at: ParkedAt,
        shelf: Box<[u8]>,
        client: C,
    ) -> Option<Self> {
        let mut session = Session::new(ctx, opening.frontend, client, opening.peer)?;
        session.served = at.served;
        session.stream_began = at.stream_began;
        session.may_park = at.may_park;
        session.resume_deadline = Some(at.deadline);
        session.watched = at.watched;
        // Measured from the end of the last response (`stream_began`): how long the client
        // took to ask again, whatever part of it the connection spent parked.
        let asked_after = Instant::now().saturating_duration_since(at.stream_began);
        session.park_at_once =
            at.served > 0 && shelf.is_empty() && asked_after >= ctx.shared.config.global.park_idle_after;
        session.accepted = at.accepted;
        session.front = Inbound::shelved(shelf);
        Some(session)
    }

    pub(super) fn limits(&self) -> Limits {
        let http = &self.ctx.shared.config.http;
        Limits {
            max_header_size: http.max_header_size,
            max_request_line: http.max_request_line,
            max_headers: http.max_headers,
        }
    }

    /// The loop of request streams; an idle connection handed back (`Some`) is for the park.
    ///
    /// Not an `async fn`: one of those keeps its by-value arguments twice in its state (the
    /// argument and the binding the body moves it into: rust-lang/rust#62958), and this
    /// state is what every connection waiting for a request holds. The block below captures
    /// `self` and uses it where it lies.
    #[allow(clippy::manual_async_fn)] // on purpose: see above
    pub(super) fn run(mut self) -> impl Future<Output = Result<Option<IdleConn>, Error>> {
        async move {
            // One registration with the thread's kill notifications for the whole session.
            let ctx = self.ctx;
            let kills = ctx.kills.notified();
            tokio::pin!(kills);
            loop {
                self.begin_stream();
                let head = match self.read_head().await {
                    Ok(HeadOutcome::Head(head)) => head,
                    // Nothing was asked: no stream to record.
                    Ok(HeadOutcome::Closed) => return Ok(None),
                    Ok(HeadOutcome::Park(deadline)) => return Ok(self.into_idle(deadline)),
                    Ok(HeadOutcome::Refuse(e)) => {
                        let refused = self.fail(&e).await;
                        self.end_stream();
                        return refused.map(|()| None);
                    }
                    Err(e) => {
                        self.rec.fail(&e);
                        self.end_stream();
                        return Err(e);
                    }
                };
                self.rec.timing.head = Some(self.rec.timing.now());
                self.capture_line(&head);
                self.assign_request_id(&head);
                self.start_trace(&head);
                self.served += 1;
                let served = serve_boxed(&mut self, head, kills.as_mut()).await;
                if let Err(e) = &served {
                    self.rec.fail(e);
                }
                self.end_stream();
                if !served? {
                    return Ok(None);
                }
                self.front.release_if_empty();
            }
        }
    }

    /// What the park keeps of this session (the socket and where the session is), the
    /// rest freed. `None` if the socket cannot leave the reactor (then it is closed).
    fn into_idle(self, deadline: Instant) -> Option<IdleConn> {
        let at = ParkedAt {
            may_park: true,
            served: self.served,
            accepted: self.accepted,
            stream_began: self.stream_began,
            deadline,
            watched: self.watched,
        };
        let shelf = self.front.into_shelf();
        let parked = self.client.into_inner().into_parked()?;
        Some(IdleConn {
            socket: parked.socket,
            tls: parked.tls,
            shelf,
            origin: crate::ctx::origin::current(),
            open_counted: false,
            at,
        })
    }

    /// Keeps the response fields the frontend's log line captures.
    pub(super) fn capture_response<'h>(&mut self, headers: impl Iterator<Item = (&'h [u8], &'h [u8])>) {
        if let Some(slot) = &mut self.line {
            slot.line.capture_response(&self.fe.log, headers);
        }
    }

    fn begin_stream(&mut self) {
        let state = if self.served == 0 {
            SessionState::ReadingRequest
        } else {
            SessionState::IdleKeepalive
        };
        sessions::note(|e| {
            e.state.set(state);
            e.backend.set(None);
            e.server.set(None);
        });
        self.rec = StreamRecord::new(self.frontend, self.peer, self.stream_began);
        self.rewrite = None;
        self.compress = None;
        self.client_mark = self.client.written();
        if let Some(slot) = &mut self.line {
            slot.line.clear();
        }
        if let Some(slot) = self.request_id.as_mut().and_then(|l| l.slot_mut()) {
            slot.clear();
        }
    }

    /// Gives the request its ID (`[frontend] request_id`): the client's own when it comes
    /// from a trusted address, is the request's only such field and is acceptable
    /// (`http::request_id::is_acceptable`); else a new one.
    fn assign_request_id(&mut self, head: &RequestHead) {
        use crate::http::h1::MessageHead;
        let Some(ids) = &self.fe.request_ids else {
            return;
        };
        let ctx = self.ctx;
        let lease = self.request_id.get_or_insert_with(|| ctx.id_lease());
        let Some(slot) = lease.slot_mut() else {
            return;
        };
        let sent = head
            .headers(self.front.data())
            .filter(|(name, _)| name.eq_ignore_ascii_case(ids.header.as_bytes()))
            .map(|(_, value)| value);
        slot.assign(ids.trusts(self.peer.ip()), sent, std::time::SystemTime::now());
        if let Some(at) = sessions::current().map(|e| e.slot()) {
            ctx.sessions.show_request_id(at, slot, || ctx.spare_id_slot());
        }
    }

    /// Starts a trace for a request without a readable `traceparent`, as the frontend's
    /// `trace` samples them (`http::trace`); a client's own goes to the server untouched.
    fn start_trace(&mut self, head: &RequestHead) {
        use crate::http::h1::MessageHead;
        use crate::http::trace::{TRACEPARENT, Traceparent};
        if let Some(t) = &mut self.trace {
            t.current = false;
        }
        let Some(trace) = self.fe.trace else {
            return;
        };
        let sent = head
            .headers(self.front.data())
            .filter(|(name, _)| name.eq_ignore_ascii_case(TRACEPARENT.as_bytes()))
            .map(|(_, value)| value);
        if crate::http::trace::starts(sent, trace.sample_ppm, crate::http::request_id::sample_draw) {
            let started = StartedTrace {
                parent: Traceparent::generate(),
                current: true,
            };
            match &mut self.trace {
                Some(kept) => **kept = started,
                None => self.trace = Some(Box::new(started)),
            }
        }
    }

    /// The `traceparent` tollgate started for the current request, if it did.
    fn started_trace(&self) -> Option<&crate::http::trace::Traceparent> {
        self.trace.as_deref().filter(|t| t.current).map(|t| &t.parent)
    }

    /// Copies the method, target, version and the fields the frontend's line captures, for
    /// the access log (bounded: `accesslog::format`).
    fn capture_line(&mut self, head: &RequestHead) {
        use crate::http::h1::{MessageHead, TargetForm, Version};
        let Some(log) = &self.ctx.access_log else {
            return;
        };
        let slot = self.line.get_or_insert_with(|| log.slot());
        let buf = self.front.data();
        slot.line.set(head.method_span.of(buf), head.target.of(buf));
        slot.line.set_version(match head.version {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        });
        // The absolute form's authority wins over Host (RFC 9112 §3.2.2), as routes see it.
        let authority = (head.target_form == TargetForm::Absolute).then(|| route::authority_of(head.target.of(buf)));
        slot.line.capture_request(&self.fe.log, head.headers(buf), authority);
        if self.fe.log.client_cert_subject
            && let Some(leaf) = self.client.peer_leaf()
        {
            slot.line
                .set_client_cert_subject(|out| crate::tls::client_cert::subject_into(leaf, out));
        }
    }

    /// The stream's record is complete: hand it to the worker's sink.
    fn end_stream(&mut self) {
        // Plus what a tunnel relayed past the counted writer (already in the record).
        self.rec.bytes_to_client += self.client.written() - self.client_mark;
        self.rec.close();
        let tls = crate::proxy::record::TlsFacts {
            client_cert_subject: None,
            ..self.client.tls_seen()
        };
        let seen = crate::proxy::record::Seen {
            request: self.line.as_ref().map(|s| &*s.line),
            scheme: Some(C::PROTO.as_str()),
            tls,
            request_id: self
                .request_id
                .as_ref()
                .map(|l| l.as_bytes())
                .filter(|id| !id.is_empty()),
            trace_id: self.started_trace().map(crate::http::trace::Traceparent::trace_id),
        };
        crate::proxy::record::sink(self.ctx, &self.rec, seen);
        sessions::note(|e| {
            e.add_bytes(self.rec.bytes_to_server, self.rec.bytes_to_client);
            if self.request_id.is_some()
                && let Some(shown) = self.ctx.sessions.take_request_id(e.slot())
            {
                self.ctx.give_id_slot(shown);
            }
        });
        self.stream_began = self.rec.timing.began + self.rec.timing.end;
    }

    /// Waits for and reads one request head: the first byte within `http_request` of the
    /// accept (first request) or `http_keep_alive` (later ones), the whole head within
    /// `http_request` of its first byte.
    async fn read_head(&mut self) -> Result<HeadOutcome, Error> {
        let timeouts = self.ctx.shared.config.timeouts;
        let first = self.served == 0;
        // A session resumed from the park goes on with the deadline it had there: a head's
        // if it began one (bytes on the shelf), else its wait's. Taken here either way, so
        // that no later wait of the session inherits it.
        let resumed = self.resume_deadline.take();
        let begun = resumed.filter(|_| !self.front.is_empty());
        // After the first response of a session resumed from the park, for a client that
        // asks seldom (`park_at_once`): straight back to the park, whose epoll reports at
        // once what may already be there.
        let at_once = resumed.is_none() && std::mem::take(&mut self.park_at_once);
        if self.front.is_empty() && !at_once {
            // What is already there needs no timer (nor a clock read) to be taken.
            match self.client.read_now(&mut self.front, &self.ctx.buffers) {
                Ok(Some(true)) => return Ok(HeadOutcome::Closed),
                Ok(_) => {}
                Err(e) => return Err(Error::io(Side::Front, "read request", e)),
            }
        }
        if self.front.is_empty() {
            let expires = resumed.unwrap_or_else(|| {
                if first {
                    self.accepted + timeouts.http_request
                } else {
                    Instant::now() + timeouts.http_keep_alive
                }
            });
            match self.wait_for_request(expires, at_once).await {
                Waited::TimedOut if first => return Ok(HeadOutcome::Refuse(request_timeout())),
                Waited::TimedOut => return Ok(HeadOutcome::Closed),
                Waited::Park => return Ok(HeadOutcome::Park(expires)),
                Waited::Failed(e) => return Err(Error::io(Side::Front, "wait for request", e)),
                Waited::Closed => return Ok(HeadOutcome::Closed),
                Waited::Data => {}
            }
        }
        sessions::set_state(SessionState::ReadingRequest);
        let limits = self.limits();
        // Usually the whole head came in one read: no deadline timer is made for it.
        if let Some(outcome) = self.judge_head(&limits) {
            return Ok(outcome);
        }
        // A head resumed from the park keeps the deadline it had there; a trickle of bytes
        // that parks and resumes never earns a new one.
        let expires = match begun {
            // Counted in `http_heads_waited` when it first waited.
            Some(at) => at,
            None => {
                self.ctx.stats.http_heads_waited.add(1);
                let start = if first { self.accepted } else { Instant::now() };
                start + timeouts.http_request
            }
        };
        // One timer: the park first (after `park_idle_after` without a byte), the head's
        // deadline last.
        let mut park_at = self.park_at(expires);
        let timer = tokio::time::sleep_until(park_at.unwrap_or(expires));
        tokio::pin!(timer);
        loop {
            // The rest may take long (a slow client, an attacker's trickle): the bytes so far
            // wait on a shelf of their size, the pooled buffer goes back until more came.
            self.front.shelve();
            let more = async {
                self.client.wait_readable().await?;
                self.front.read_from(&mut self.client, &self.ctx.buffers, false).await
            };
            let read = tokio::select! {
                biased;
                r = more => Some(r),
                () = &mut timer => None,
            };
            let Some(read) = read else {
                if park_at.take().is_none() {
                    return Ok(HeadOutcome::Refuse(request_timeout()));
                }
                // Stopping, or a TLS layer holding what the park's epoll would not see:
                // wait on here.
                if !self.ctx.is_stopping() && self.client.can_park() {
                    return Ok(HeadOutcome::Park(expires));
                }
                timer.as_mut().reset(expires);
                continue;
            };
            match read {
                Ok(0) => return Ok(HeadOutcome::Closed),
                Ok(_) => {}
                Err(e) => return Err(Error::io(Side::Front, "read request", e)),
            }
            if let Some(outcome) = self.judge_head(&limits) {
                return Ok(outcome);
            }
            if park_at.is_some() {
                // Bytes came: the park waits for the next `park_idle_after` without any.
                park_at = self.park_at(expires);
                timer.as_mut().reset(park_at.unwrap_or(expires));
            }
        }
    }

    /// When a wait that ends at `expires` goes to the park instead: `park_idle_after` from
    /// now, if this connection may park and that comes first.
    fn park_at(&self, expires: Instant) -> Option<Instant> {
        let park_after = self.ctx.shared.config.global.park_idle_after;
        (self.may_park && !self.ctx.is_stopping())
            .then(|| Instant::now() + park_after)
            .filter(|at| *at < expires)
    }

    /// Waits for the first byte of a request until `expires`; after `global.park_idle_after`
    /// of nothing (at once with `at_once`), a connection that may park says so instead (one
    /// timer per wait), unless it cannot leave its task now (its TLS layer holds what the
    /// park's epoll would not see): then it waits on here.
    async fn wait_for_request(&mut self, expires: Instant, at_once: bool) -> Waited {
        let mut park_at = self.park_at(expires);
        if at_once && park_at.is_some() && self.front.is_empty() && self.client.can_park() {
            return Waited::Park;
        }
        // At most two rounds: the park's time, then the deadline. The wait is made again
        // for the second: it is cancel-safe (a TLS read that found half a record left it in
        // the TLS layer; a pooled buffer it took stays in `front`).
        loop {
            let timer = tokio::time::sleep_until(park_at.unwrap_or(expires));
            let wait = self.client.wait_for_data(&mut self.front, &self.ctx.buffers);
            let waited = tokio::select! {
                biased;
                waited = wait => Some(waited),
                () = timer => None,
            };
            match waited {
                Some(Ok(true)) => return Waited::Closed,
                Some(Ok(false)) => return Waited::Data,
                Some(Err(e)) => return Waited::Failed(e),
                None if park_at.take().is_none() => return Waited::TimedOut,
                // Stopping: no park, wait on as a session does at a stop.
                None if !self.ctx.is_stopping() && self.front.is_empty() && self.client.can_park() => {
                    return Waited::Park;
                }
                // The buffer a TLS read took for half a record goes back for the wait.
                None => self.front.release_if_empty(),
            }
        }
    }

    /// Parses what has been read: a complete head, a refusal, or `None` (read more).
    fn judge_head(&mut self, limits: &Limits) -> Option<HeadOutcome> {
        if self.front.is_empty() {
            return None;
        }
        match h1::parse_request_head(self.front.data(), limits, &mut self.scratch) {
            Ok(Some(head)) => Some(HeadOutcome::Head(head)),
            Ok(None) if self.front.is_full() => {
                let e = h1::H1Error::new(h1::ErrorKind::HeadTooLarge, h1::Side::Request);
                self.capture(Direction::Request, self.front.data(), &e);
                Some(HeadOutcome::Refuse(Error::new(
                    ErrorKind::BadRequest(431),
                    Side::Front,
                    "request head larger than the buffer",
                )))
            }
            Ok(None) => None,
            Err(e) => {
                self.capture(Direction::Request, self.front.data(), &e);
                Some(HeadOutcome::Refuse(Error::new(
                    ErrorKind::BadRequest(e.status()),
                    Side::Front,
                    e.as_str(),
                )))
            }
        }
    }

    /// An http-01 challenge answer (`/.well-known/acme-challenge/TOKEN` for a token the
    /// `acme` thread is being validated on), before any route: the CA must get it whatever
    /// the routes say. Only with `[[frontend.tls.acme]]` in the config, so a path compare.
    fn acme_http01(&self, head: &RequestHead) -> Option<crate::config::model::Answer> {
        let acme = &self.ctx.shared.config.acme;
        if acme.orders.is_empty() {
            return None;
        }
        let target = route::request_path(head, self.front.data());
        let path = target.split(|&b| b == b'?').next().unwrap_or(target);
        let key_authorization = acme.book.http_answer(path)?;
        Some(crate::config::model::Answer {
            status: 200,
            content_type: "application/octet-stream".into(),
            body: key_authorization.as_bytes().into(),
            headers: Vec::new(),
        })
    }

    /// Keeps a refused message for `show errors`, with where it went wrong.
    pub(super) fn capture(&self, direction: Direction, bytes: &[u8], e: &h1::H1Error) {
        self.ctx.capture_error(Refused {
            direction,
            client: self.peer,
            frontend: self.frontend,
            backend: self.rec.backend,
            server: self.rec.server,
            error: e.as_str(),
            offset: h1::locate::offending_byte(bytes, e),
            bytes,
            request_id: self.request_id.as_ref().map_or(&[][..], |l| l.as_bytes()),
        });
    }

    /// Answers one request; true when the client connection stays open for the next.
    async fn serve_request(&mut self, head: RequestHead, kills: Pin<&mut Notified<'a>>) -> Result<bool, Error> {
        self.ctx.stats.http_requests.add(1);
        if let Some(answer) = self.acme_http01(&head) {
            let req = RequestInfo::of(&head, self.ctx.shared.config.request_limits(None, &Overrides::NONE));
            let keep = req.keep_alive && !self.ctx.is_stopping();
            fixed_response(&answer, keep, req.method == Method::Head, &mut self.out);
            return self.answer_here(head, &req, answer.status, keep).await;
        }
        let conn = route::ConnFacts {
            scheme: C::PROTO,
            source: self.peer.ip(),
            sni: self.client.tls_seen().sni,
            client_cert: self.client_cert,
        };
        // The route's index goes to the record at once: no local of it spans an await.
        let (decision, counted_by, auth) = {
            let routed = route::decide(self.fe, &head, self.front.data(), &conn);
            self.rec.route = routed.route;
            self.compress = routed
                .compress
                .map(|policy| Negotiated::of(policy, h1::MessageHead::headers(&head, self.front.data())));
            (routed.decision, routed.counted_by, routed.auth)
        };
        let config = &self.ctx.shared.config;
        let limits = match decision {
            Decision::Backend(backend, _, overrides) => config.request_limits(Some(backend), overrides),
            _ => config.request_limits(None, &Overrides::NONE),
        };
        let req = RequestInfo::of(&head, limits);
        // `[[frontend.limit]]`: held (requests in flight) until this request ends.
        let mut held = crate::limit::Held::default();
        let set = self.ctx.shared.limits(self.frontend);
        if !set.is_empty() {
            let facts = super::limited::H1Facts {
                source: self.peer.ip(),
                sni: self.client.tls_seen().sni,
                head: &head,
                buf: self.front.data(),
                path: normalize::path(route::request_path_only(&head, self.front.data())),
            };
            if let Err(refused) = set.check(&facts, crate::limit::bits(counted_by), &mut held) {
                return self.limited(head, &req, refused).await;
            }
        }
        let max_body = limits.max_body_size;
        if let BodyFraming::ContentLength(n) = head.body
            && max_body > 0
            && n > max_body
        {
            head.reclaim(&mut self.scratch);
            let e = Error::new(
                ErrorKind::BadRequest(413),
                Side::Front,
                "Content-Length over max_body_size",
            );
            self.fail(&e).await?;
            return Ok(false);
        }
        // What came with the head is judged before anything is connected: a request
        // refused for bytes already here never reaches a server, not even its head.
        let early = self.front.data().get(head.head_len..).unwrap_or_default();
        if let Err(e) = request_tracker(head.body, &limits).advance(early) {
            head.reclaim(&mut self.scratch);
            let cause = Error::new(
                ErrorKind::BadRequest(e.status()),
                Side::Front,
                format!("bad request body: {e}"),
            );
            self.fail(&cause).await?;
            return Ok(false);
        }
        // The route's `auth`, before anything is answered or forwarded.
        let (mut auth_lines, mut auth_strip): (Vec<u8>, &[Box<str>]) = (Vec::new(), &[]);
        if let Some(auth) = auth {
            let ctx = self.ctx;
            let buf = self.front.data();
            let facts = crate::proxy::auth::Facts {
                method: head.method_span.of(buf),
                target: head.target.of(buf),
                host: head.host.map_or(&b""[..], |h| h.of(buf)),
                proto: C::PROTO.as_str(),
                client: self.peer.ip(),
                authorization: only_field(h1::MessageHead::headers(&head, buf), b"authorization"),
                fields: h1::MessageHead::headers(&head, buf),
            };
            let wait = limits.timeouts.http_request;
            match crate::proxy::auth::check(ctx, auth, facts, wait).await {
                crate::proxy::auth::Checked::Allow(fields) => {
                    (auth_lines, auth_strip) = (crate::proxy::auth::h1_lines(&fields), &auth.strip);
                }
                crate::proxy::auth::Checked::Refuse(r) => {
                    crate::proxy::auth::count_route(ctx, self.frontend, self.rec.route);
                    let keep = req.keep_alive && !ctx.is_stopping();
                    r.write_h1(keep, req.method == Method::Head, &mut self.out);
                    return self.answer_here(head, &req, r.status, keep).await;
                }
            }
        }
        match decision {
            Decision::NoRoute => {
                head.reclaim(&mut self.scratch);
                let e = Error::new(ErrorKind::NoServer, Side::Front, "no route and no default_backend");
                self.fail(&e).await?;
                Ok(false)
            }
            Decision::Return(answer) => {
                let keep = req.keep_alive && !self.ctx.is_stopping();
                fixed_response(answer, keep, req.method == Method::Head, &mut self.out);
                self.answer_here(head, &req, answer.status, keep).await
            }
            Decision::Redirect(redirect) => {
                let keep = req.keep_alive && !self.ctx.is_stopping();
                let buf = self.front.data();
                let mut vars = RequestVars::of(C::PROTO.as_str(), head.target.of(buf), head.host.map(|h| h.of(buf)));
                // An HTTP/1.0 request may name no host (no or an empty Host, origin-form
                // target): the host is then the address the client reached (RFC 7230 §5.5),
                // so that `https://{host}/` never becomes `https:///`.
                let mut own = [0u8; LOCAL_AUTHORITY_MAX];
                if vars.authority.is_empty()
                    && let Some(local) = crate::ctx::origin::current()
                        .map(|o| o.local)
                        .or_else(|| self.client.local_addr())
                {
                    vars.authority = local_authority(local, C::PROTO, &mut own);
                }
                if !redirect_response(redirect, &vars, keep, &mut self.out) {
                    head.reclaim(&mut self.scratch);
                    self.ctx.stats.http_rewrite_skipped.add(1);
                    let e = Error::new(
                        ErrorKind::BadRequest(400),
                        Side::Front,
                        "redirect: the request makes a Location that cannot be sent",
                    );
                    self.fail(&e).await?;
                    return Ok(false);
                }
                self.answer_here(head, &req, redirect.status, keep).await
            }
            Decision::Backend(backend, rewrite, _) => {
                self.rewrite = rewrite;
                let req = RequestInfo {
                    hash_key: self.hash_key(backend, &head),
                    prefer: self.sticky_server(backend, &head),
                    te_trailers: self.accepts_trailers(backend, &head),
                    ..req
                };
                self.out.clear();
                let ctx = self.ctx;
                let sticky = ctx.backends.get(backend).and_then(|b| b.sticky.as_ref());
                // In a block of its own: what writing the head needs is not kept in the
                // session's state over the exchange's awaits (nor is the target buffer).
                let skipped = {
                    // The server gets the target the route matched (`forward_target`), as
                    // does a route's path rewrite (it was matched there); a buffer only when
                    // the path was not normal already.
                    let normalized = (self.fe.forward_target == ForwardTarget::Normalized
                        || rewrite.is_some_and(|r| r.path.is_some()))
                    .then(|| match normalize::target(head.target.of(self.front.data())) {
                        Cow::Owned(t) => Some(t),
                        Cow::Borrowed(_) => None,
                    })
                    .flatten();
                    let edits = HeadEdits {
                        // The proxy's cookie is its own business: the server never sees it.
                        cookie: sticky.map(|t| t.cookie()),
                        rewrite,
                        scheme: Some(C::PROTO),
                        strip: self.cert_names,
                        append: &self.cert_lines,
                        target: normalized.as_deref(),
                        id_field: id_field(self.fe, self.request_id.as_ref(), false),
                        traceparent: self.trace.as_deref().filter(|t| t.current).map(|t| t.parent.as_bytes()),
                        auth_strip,
                        auth_lines: &auth_lines,
                        ..self.request_edits(&req)
                    };
                    h1::write_request_head(&head, self.front.data(), &edits, &mut self.out)
                };
                if skipped > 0 {
                    ctx.stats.http_rewrite_skipped.add(u64::from(skipped));
                }
                self.front.consume(head.head_len);
                head.reclaim(&mut self.scratch);
                super::exchange::forward(self, backend, &req, kills).await
            }
        }
    }

    /// Sends the response the proxy made (in `out`) for a request it answers itself, once
    /// the request's body is read and dropped.
    pub(super) async fn answer_here(
        &mut self,
        head: RequestHead,
        req: &RequestInfo,
        status: u16,
        keep: bool,
    ) -> Result<bool, Error> {
        self.front.consume(head.head_len);
        head.reclaim(&mut self.scratch);
        // `discard_body` leaves `out` (the response) alone.
        if let Err(e) = super::exchange::discard_body(self, req).await {
            self.fail(&e).await?;
            return Ok(false);
        }
        self.rec.status = status;
        if let Some((name, value)) = id_field(self.fe, self.request_id.as_ref(), true) {
            h1::add_response_field(&mut self.out, name, value);
        }
        let written = if keep {
            self.client.write_all(&self.out).await
        } else {
            self.client.write_last(&self.out).await
        };
        written.map_err(|e| Error::io(Side::Front, "write response", e))?;
        Ok(keep)
    }

    /// The request's key when `backend` hashes (computed from the head in place, nothing
    /// allocated): the target, a header's first value, a cookie's value, else the client
    /// address (also when the header or cookie is missing).
    fn hash_key(&self, backend: usize, head: &RequestHead) -> Option<u64> {
        use crate::balance::hash::{cookie_value, key_of_bytes, key_of_ip};
        use crate::config::model::HashKey;
        use crate::http::h1::MessageHead;
        let spec = self.ctx.shared.config.backends.get(backend)?.hash_key.as_ref()?;
        let buf = self.front.data();
        let found = match spec {
            HashKey::Source => None,
            HashKey::Uri => Some(route::request_path(head, buf)),
            HashKey::Header(name) => head.header(buf, name.as_bytes()),
            HashKey::Cookie(name) => head
                .headers(buf)
                .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
                .find_map(|(_, v)| cookie_value(v, name.as_bytes())),
        };
        Some(found.map_or_else(|| key_of_ip(self.peer.ip()), key_of_bytes))
    }

    /// Whether the client sent `TE: trailers`, for a backend with HTTP/2 servers only.
    fn accepts_trailers(&self, backend: usize, head: &RequestHead) -> bool {
        use crate::http::h1::MessageHead;
        if !self.ctx.shared.config.backends.get(backend).is_some_and(|b| b.any_h2) {
            return false;
        }
        head.headers(self.front.data())
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"te"))
            .any(|(_, v)| {
                v.split(|&b| b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"))
            })
    }

    /// The server a sticky backend's cookie (its first value in the request) names, if it
    /// is one of the backend's servers; a missing, malformed or unknown value names none.
    fn sticky_server(&self, backend: usize, head: &RequestHead) -> Option<ServerId> {
        use crate::http::h1::MessageHead;
        let local = self.ctx.backends.get(backend)?;
        let table = local.sticky.as_ref()?;
        let buf = self.front.data();
        let value = head
            .headers(buf)
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
            .find_map(|(_, v)| crate::http::cookie::find(v, table.cookie()))?;
        table.server_of(&local.live, value)
    }

    fn request_edits(&self, req: &RequestInfo) -> HeadEdits<'static> {
        let ip = self.peer.ip();
        let mut edits = HeadEdits {
            connection: if req.upgrade {
                ConnectionOut::Upgrade
            } else if req.version == Version::Http10 {
                ConnectionOut::KeepAlive
            } else {
                ConnectionOut::Omit
            },
            http10: req.version == Version::Http10,
            ..HeadEdits::default()
        };
        match self.fe.forwarded {
            Forwarded::XForwardedFor => {
                edits.x_forwarded_for = Some(ip);
                edits.x_forwarded_proto = Some(C::PROTO);
            }
            Forwarded::Forwarded => edits.forwarded = Some((ip, Some(C::PROTO))),
            Forwarded::None => {}
        }
        edits
    }

    /// A stream failed: log it, and when the error says the client can still be answered
    /// (`Error::http_status`, the one place that picks the status), send the proxy-made
    /// response and close without resetting it away.
    pub(super) async fn fail(&mut self, cause: &Error) -> Result<(), Error> {
        let status = cause.http_status();
        self.log_failure(status.unwrap_or(0), cause);
        self.rec.fail(cause);
        let Some(status) = status else {
            return Ok(());
        };
        sessions::set_state(SessionState::Closing);
        self.rec.status = status;
        if status >= 500 {
            self.ctx.stats.http_proxy_5xx.add(1);
        } else {
            self.ctx.stats.http_proxy_4xx.add(1);
            if let Some(c) = self.ctx.stat().and_then(|s| s.frontend(self.frontend)) {
                c.proxy_4xx.add(1);
            }
        }
        self.out.clear();
        h1::write_error_response(status, &mut self.out);
        if let Some((name, value)) = id_field(self.fe, self.request_id.as_ref(), true) {
            h1::add_response_field(&mut self.out, name, value);
        }
        if self.client.write_all(&self.out).await.is_ok() {
            lingering_close(&mut self.client, &mut self.out).await;
        }
        Ok(())
    }
}

impl<C> Session<'_, C> {
    /// A request tollgate failed or refused: warn (rate-limited per worker) with frontend,
    /// backend, server and cause. `status` 0: no response could be sent; a peer hang-up or an
    /// idle timeout then stays at debug.
    pub(super) fn log_failure(&self, status: u16, cause: &Error) {
        if status == 0 && cause.is_routine() {
            tracing::debug!(frontend = %self.fe.name, peer = %self.peer, error = %cause, "request ended");
        } else if self.ctx.may_warn() {
            let (backend, server) = crate::proxy::names(&self.ctx.shared.config, cause.backend, cause.server);
            tracing::warn!(
                frontend = %self.fe.name,
                backend = %backend,
                server = %server,
                status,
                peer = %self.peer,
                cause = %cause,
                "request failed"
            );
        }
    }
}

/// How a wait for a request's first byte ended.
enum Waited {
    Data,
    Closed,
    TimedOut,
    Park,
    Failed(std::io::Error),
}

/// The value of the one field named `name` (lowercase); `None` when there is none or more
/// than one (two `Authorization` fields say nothing a check can trust).
pub(crate) fn only_field<'b>(fields: impl Iterator<Item = (&'b [u8], &'b [u8])>, name: &[u8]) -> Option<&'b [u8]> {
    let mut found = None;
    for (n, v) in fields {
        if n.eq_ignore_ascii_case(name) {
            if found.is_some() {
                return None;
            }
            found = Some(v);
        }
    }
    found
}

fn request_timeout() -> Error {
    let what = "no complete request head within timeouts.http_request";
    Error::new(ErrorKind::IdleTimeout, Side::Front, what).during(crate::error::Phase::Request)
}

/// A tracker for a request body, with its `max_body_size` applied to chunked bodies.
pub(super) fn request_tracker(framing: BodyFraming, limits: &RequestLimits) -> BodyTracker {
    let max = limits.max_body_size;
    BodyTracker::new(framing, h1::Side::Request).with_max_body(if max > 0 { max } else { u64::MAX })
}

/// One request's exchange, in a box made when its head is in and freed when it is answered:
/// the session's task (all that a connection waiting for its next request holds, in the task
/// or, after `park_idle_after`, parked) then has the size of its waits, not of the exchange's
/// deepest state (connect, retries, body, response: several KiB). One allocation per request
/// from the thread's own heap, against the task's size for the connection's whole idle life.
/// A plain function: a box made inside an async fn still leaves the unboxed size in its state.
/// The future is written into the box where it lies: `Box::pin(future)` built it on the
/// stack and copied all of its size (several KiB, +440 instructions per request in memcpy).
fn serve_boxed<'s, 'a, C: ClientStream>(
    session: &'s mut Session<'a, C>,
    head: RequestHead,
    kills: Pin<&'s mut Notified<'a>>,
) -> Pin<Box<impl Future<Output = Result<bool, Error>> + 's>> {
    Box::into_pin(Box::write(Box::new_uninit(), session.serve_request(head, kills)))
}

/// Half-closes, then reads and discards what the client still sends for a short while:
/// closing with unread bytes would make the kernel send a reset that can destroy the
/// response before the client reads it. `sink` is scratch space on the heap: an array here
/// would grow every session's future by its size.
pub(super) async fn lingering_close<C: AsyncRead + AsyncWrite + Unpin>(client: &mut C, sink: &mut Vec<u8>) {
    let _ = client.shutdown().await;
    sink.clear();
    sink.resize(4096, 0);
    let drain = async {
        let mut total = 0usize;
        while let Ok(n) = client.read(sink).await {
            total += n;
            if n == 0 || total > 256 * 1024 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_millis(500), drain).await;
}

/// The request's ID field (name, value) to write to its server, or with `response` to its
/// client (only when `request_id.response`); `None` without an ID.
pub(super) fn id_field<'s>(
    fe: &'s Frontend,
    id: Option<&'s crate::ctx::worker::IdLease<'_>>,
    response: bool,
) -> Option<(&'s [u8], &'s [u8])> {
    let ids = fe.request_ids.as_ref().filter(|ids| !response || ids.response)?;
    let value = id?.as_bytes();
    (!value.is_empty()).then_some((ids.header.as_bytes(), value))
}

/// A response made by a `return` or `deny` route (to a HEAD request: its head only).
fn fixed_response(answer: &crate::config::model::Answer, keep: bool, head_only: bool, out: &mut Vec<u8>) {
    let fields = answer.headers.iter().map(|(n, v)| (n.as_bytes(), &v[..]));
    h1::write_made_response(
        answer.status,
        Some(answer.content_type.as_bytes()),
        fields,
        &answer.body,
        (keep, head_only),
        out,
    );
}

/// A `redirect` route's response; false (nothing usable in `out`) if the request makes a
/// `Location` that cannot be sent.
fn redirect_response(
    redirect: &crate::config::model::Redirect,
    vars: &RequestVars<'_>,
    keep: bool,
    out: &mut Vec<u8>,
) -> bool {
    use std::io::Write;
    out.clear();
    let _ = write!(
        out,
        "HTTP/1.1 {} {}\r\nLocation: ",
        redirect.status,
        reason(redirect.status)
    );
    if !redirect.location.render(vars, out) {
        out.clear();
        return false;
    }
    out.extend_from_slice(b"\r\nContent-Length: 0\r\n");
    if !keep {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    true
}

/// Room for `[v6 address]:port`.
const LOCAL_AUTHORITY_MAX: usize = 64;

/// `addr` as an authority (`[..]` around IPv6), without the port when it is the scheme's
/// default.
fn local_authority(addr: SocketAddr, proto: h1::Proto, out: &mut [u8; LOCAL_AUTHORITY_MAX]) -> &[u8] {
    use std::io::Write;
    let default_port = match proto {
        h1::Proto::Http => 80,
        h1::Proto::Https => 443,
    };
    let mut w = out.as_mut_slice();
    let written = match (addr.ip(), addr.port()) {
        (std::net::IpAddr::V4(ip), p) if p == default_port => write!(w, "{ip}"),
        (std::net::IpAddr::V6(ip), p) if p == default_port => write!(w, "[{ip}]"),
        (std::net::IpAddr::V4(ip), p) => write!(w, "{ip}:{p}"),
        (std::net::IpAddr::V6(ip), p) => write!(w, "[{ip}]:{p}"),
    };
    let left = if written.is_ok() { w.len() } else { LOCAL_AUTHORITY_MAX };
    out.get(..LOCAL_AUTHORITY_MAX - left).unwrap_or_default()
}

fn reason(status: u16) -> &'static str {
    crate::http::status::reason(status)
}
