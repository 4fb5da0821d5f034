//! Runs a route's `auth` for one request (HTTP/1 and HTTP/2 clients alike): Basic against
//! the htpasswd file, or a subrequest to a forward auth server.
//!
//! Basic: a success remembered by the thread (`ctx::auth`) lets the request through at once;
//! otherwise the password check runs on tokio's blocking pool under a permit of the thread's
//! `max_auth_checks` budget (waiting for one is bounded by the request's `http_request`
//! timeout: 503 past it). An unknown user is checked against a decoy hash, as slowly.
//! Forward: a connection the worker kept from an earlier check, or a new one, bounded in
//! time (`timeout`), head (the h1 limits) and body (`forward::MAX_ANSWER_BODY`).
//!
//! Invariants: a refusal is counted (worker and route) and never carries a credential; an
//! allowed request's extra header lines are complete (`name: value\r\n`) and come only from
//! the auth server's answer to the names the config lists.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::auth::forward::{self, Answer, FailMode, Forward, Original};
use crate::auth::jwt::Refusal as TokenRefusal;
use crate::auth::{BasicAuth, JwtAuth, Method, RouteAuth, basic};
use crate::ctx::worker::WorkerCtx;
use crate::http::h1::{self, BodyFraming, BodyTracker, HeadScratch, MessageHead};

/// What the request says, for the check.
pub(crate) struct Facts<'a, I> {
    pub method: &'a [u8],
    pub target: &'a [u8],
    pub host: &'a [u8],
    pub proto: &'a str,
    pub client: IpAddr,
    pub authorization: Option<&'a [u8]>,
    /// The request's fields (name, value), for a forward auth server.
    pub fields: I,
}

/// The outcome of a check.
pub(crate) enum Checked {
    /// Through, with these fields (lowercase name, value) added for the server.
    Allow(Vec<(Box<str>, Vec<u8>)>),
    Refuse(Refusal),
}

/// A response the client gets instead of the route's.
pub(crate) struct Refusal {
    pub status: u16,
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: Vec<u8>,
    /// For the debug log: never a credential.
    pub why: &'static str,
}

impl Refusal {
    fn text(status: u16, why: &'static str) -> Refusal {
        let body = format!("{status} {}\n", crate::http::status::reason(status)).into_bytes();
        Refusal {
            status,
            fields: vec![(b"Content-Type".to_vec(), b"text/plain".to_vec())],
            body,
            why,
        }
    }

    /// The whole HTTP/1.1 response (the body left out for a HEAD), into `out`.
    pub(crate) fn write_h1(&self, keep: bool, head_only: bool, out: &mut Vec<u8>) {
        let fields = self.fields.iter().map(|(n, v)| (&n[..], &v[..]));
        h1::write_made_response(self.status, None, fields, &self.body, (keep, head_only), out);
    }
}

/// Checks one request against `auth`; `wait` bounds a wait for a password-check slot.
pub(crate) async fn check<'a, I>(ctx: &WorkerCtx, auth: &RouteAuth, facts: Facts<'a, I>, wait: Duration) -> Checked
where
    I: Iterator<Item = (&'a [u8], &'a [u8])>,
{
    ctx.stats.auth_checks.add(1);
    let checked = match &auth.method {
        Method::Basic(b) => basic_check(ctx, b, facts.authorization, wait).await,
        Method::Forward(f) => forward_check(ctx, f, facts).await,
        Method::Jwt(j) => jwt_check(j, facts.authorization),
    };
    if let Checked::Refuse(r) = &checked {
        ctx.stats.auth_refused.add(1);
        tracing::debug!(status = r.status, why = r.why, "auth refused a request");
    }
    checked
}

/// `fields` as HTTP/1 lines (`name: value\r\n`).
pub(crate) fn h1_lines(fields: &[(Box<str>, Vec<u8>)]) -> Vec<u8> {
    let mut lines = Vec::new();
    for (name, value) in fields {
        lines.extend_from_slice(name.as_bytes());
        lines.extend_from_slice(b": ");
        lines.extend_from_slice(value);
        lines.extend_from_slice(b"\r\n");
    }
    lines
}

/// Counts a refusal against `frontend`'s route `route` too.
pub(crate) fn count_route(ctx: &WorkerCtx, frontend: usize, route: Option<u16>) {
    if let (Some(cells), Some(route)) = (ctx.shared.metrics.get(ctx.id), route) {
        cells.auth_refused(frontend, route);
    }
}

async fn basic_check(ctx: &WorkerCtx, b: &BasicAuth, authorization: Option<&[u8]>, wait: Duration) -> Checked {
    let challenge = |why| {
        let mut r = Refusal::text(401, why);
        r.fields
            .push((b"WWW-Authenticate".to_vec(), b.challenge.as_bytes().to_vec()));
        Checked::Refuse(r)
    };
    let Some((user, password)) = authorization.and_then(basic::credentials) else {
        return challenge("no Basic credentials");
    };
    let now = Instant::now();
    let key = ctx.auth.key(b.users.id, &user, &password);
    if ctx.auth.remembered(&key, now) {
        ctx.stats.auth_cache_hits.add(1);
        return Checked::Allow(Vec::new());
    }
    let Some((hash, known)) = b.users.hash_for(&user) else {
        return challenge("no users");
    };
    let permit = match ctx.auth.permits.clone().try_acquire_owned() {
        Ok(p) => p,
        Err(_) => {
            ctx.stats.auth_verify_waits.add(1);
            match tokio::time::timeout(wait, ctx.auth.permits.clone().acquire_owned()).await {
                Ok(Ok(p)) => p,
                _ => return Checked::Refuse(Refusal::text(503, "no password-check slot in time")),
            }
        }
    };
    ctx.stats.auth_verifications.add(1);
    ctx.stats.auth_verifying.add(1);
    let _verifying = Verifying(ctx);
    // The permit goes with the check: a client that leaves does not free its slot before
    // the CPU it asked for is spent.
    let verified = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        hash.verify(&password)
    })
    .await
    .unwrap_or(false);
    if verified && known {
        ctx.auth.remember(key, Instant::now());
        Checked::Allow(Vec::new())
    } else {
        challenge("wrong user or password")
    }
}

/// A bearer token against the route's key set: no I/O, no wait (the keys are fetched in
/// the background). A refusal is RFC 6750's: 401 with `error="invalid_token"` when a token
/// came, the bare challenge when none did.
fn jwt_check(j: &JwtAuth, authorization: Option<&[u8]>) -> Checked {
    match j.jwks.verify(&j.policy, authorization, std::time::SystemTime::now()) {
        Ok(verified) => Checked::Allow(
            verified
                .headers
                .into_iter()
                .map(|(n, v)| (Box::from(n.as_str()), v.as_bytes().to_vec()))
                .collect(),
        ),
        Err(refusal) => {
            let mut r = Refusal::text(401, refusal.as_str());
            let challenge = match refusal {
                TokenRefusal::Missing => j.challenge.to_string(),
                _ => format!("{}, error=\"invalid_token\"", j.challenge),
            };
            r.fields.push((b"WWW-Authenticate".to_vec(), challenge.into_bytes()));
            Checked::Refuse(r)
        }
    }
}

/// Counts a password check out of `auth_verifying` (on this thread) however it ends.
struct Verifying<'a>(&'a WorkerCtx);

impl Drop for Verifying<'_> {
    fn drop(&mut self) {
        self.0.stats.auth_verifying.sub(1);
    }
}

async fn forward_check<'a, I>(ctx: &WorkerCtx, f: &Forward, facts: Facts<'a, I>) -> Checked
where
    I: Iterator<Item = (&'a [u8], &'a [u8])>,
{
    let method = h1::Method::of(facts.method);
    let mut request = Vec::with_capacity(1024);
    forward::write_request(
        f,
        Original {
            method: facts.method,
            target: facts.target,
            host: facts.host,
            proto: facts.proto,
            client: facts.client,
            fields: facts.fields,
        },
        &mut request,
    );
    let failed = |status: u16, why: &'static str| {
        ctx.stats.auth_forward_failures.add(1);
        tracing::debug!(why, "forward auth: no usable answer");
        match f.fail {
            FailMode::Open => Checked::Allow(Vec::new()),
            FailMode::Closed => Checked::Refuse(Refusal::text(status, why)),
        }
    };
    match tokio::time::timeout(f.timeout, ask(ctx, f, &request, method)).await {
        Err(_) => failed(504, "the auth server did not answer in time"),
        Ok(Err(why)) => failed(502, why),
        Ok(Ok(Answer::Allow(copied))) => Checked::Allow(copied),
        Ok(Ok(Answer::Deny { status, fields, body })) => Checked::Refuse(Refusal {
            status,
            fields,
            body,
            why: "the auth server refused",
        }),
    }
}

/// One check: on a connection the worker kept when it has one (and once more on a new one
/// if that one turns out closed before any byte of an answer: the check has no body and
/// changes nothing), else on a new one.
async fn ask(ctx: &WorkerCtx, f: &Forward, request: &[u8], method: h1::Method) -> Result<Answer, &'static str> {
    if let Some(conn) = ctx.auth.take_idle(f.target.addr) {
        match exchange(ctx, f, conn, request, method).await {
            Err(Failure::Stale) => {}
            Err(Failure::Broken(why)) => return Err(why),
            Ok(answer) => return Ok(answer),
        }
    }
    let conn = tokio::net::TcpStream::connect(f.target.addr)
        .await
        .map_err(|_| "cannot connect to the auth server")?;
    let _ = conn.set_nodelay(true);
    exchange(ctx, f, conn, request, method).await.map_err(|e| match e {
        Failure::Stale => "the auth server closed without an answer",
        Failure::Broken(why) => why,
    })
}

enum Failure {
    /// Closed or reset before any byte of an answer (a kept connection the server let go).
    Stale,
    Broken(&'static str),
}

/// One exchange on `conn`; the connection is kept for the next check when the answer was
/// read to its end and the server keeps it open.
async fn exchange(
    ctx: &WorkerCtx,
    f: &Forward,
    mut conn: tokio::net::TcpStream,
    request: &[u8],
    method: h1::Method,
) -> Result<Answer, Failure> {
    let broken = Failure::Broken;
    conn.write_all(request).await.map_err(|_| Failure::Stale)?;
    let limits = h1::Limits::default();
    let mut buf = Vec::with_capacity(4096);
    let mut scratch = HeadScratch::default();
    let head = loop {
        if buf.len() >= limits.max_header_size {
            return Err(broken("the auth server's answer head is too large"));
        }
        let mut chunk = [0u8; 4096];
        let n = match conn.read(&mut chunk).await {
            Ok(0) | Err(_) if buf.is_empty() => return Err(Failure::Stale),
            Ok(0) => return Err(broken("the auth server closed mid-answer")),
            Err(_) => return Err(broken("the auth server's answer failed")),
            Ok(n) => n,
        };
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        match h1::parse_response_head(&buf, &limits, method, &mut scratch) {
            Ok(Some(head)) if head.status >= 200 => break head,
            // An interim answer is not an answer to a check.
            Ok(Some(head)) => {
                head.reclaim(&mut scratch);
                return Err(broken("the auth server answered 1xx"));
            }
            Ok(None) => continue,
            Err(_) => return Err(broken("the auth server's answer is malformed")),
        }
    };
    let (status, framing, head_len, keep) = (head.status, head.body, head.head_len, head.keep_alive);
    // The body is read to its end either way (a 2xx's is dropped): the next check on this
    // connection must start at the next answer.
    let mut body = Vec::new();
    let mut tracker = BodyTracker::new(framing, h1::Side::Response);
    let mut rest = buf.get(head_len..).unwrap_or_default().to_vec();
    let ended_cleanly = if framing == BodyFraming::None {
        rest.is_empty()
    } else {
        loop {
            let r = tracker
                .decode(&mut rest)
                .map_err(|_| broken("the auth server's answer body is malformed"))?;
            body.extend_from_slice(rest.get(..r.out).unwrap_or_default());
            if body.len() > forward::MAX_ANSWER_BODY {
                return Err(broken("the auth server's answer body is too large"));
            }
            if tracker.is_done() {
                // Bytes after the answer: the connection is not in step any more.
                break r.consumed == rest.len();
            }
            rest.clear();
            let mut chunk = [0u8; 8192];
            let n = conn
                .read(&mut chunk)
                .await
                .map_err(|_| broken("the auth server's answer failed"))?;
            if n == 0 {
                tracker
                    .on_eof()
                    .map_err(|_| broken("the auth server's answer was cut short"))?;
                break false;
            }
            rest.extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
    };
    let answer = forward::decide(f, status, head.headers(&buf), &body);
    head.reclaim(&mut scratch);
    if keep && ended_cleanly && framing != BodyFraming::CloseDelimited {
        ctx.auth.keep_idle(f.target.addr, conn);
    }
    Ok(answer)
}
