//! The record of one stream — a TCP session, or one HTTP request and its response — built
//! while it runs and handed to the worker's sink when it ends: who (frontend, backend,
//! server, client), when (offsets from the stream's start), how much (bytes each way), how
//! it went (retries, status, termination cause).
//!
//! Invariants: a record is a plain `Copy` value on the session's stack (no allocation per
//! request); every stream that was accepted or read produces exactly one record; timing
//! offsets only move forward (`None` = that step never happened). The sink feeds the
//! per-server counters, a trace event (`tollgate::record`) and the access log (one line per
//! record, formatted on this thread: `accesslog`).

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::accesslog::format::{Entry, RequestLine, Timings};
use crate::config::log_layout::LogPlan;
use crate::ctx::WorkerCtx;
use crate::ctx::backends::Position;
use crate::error::{Error, Termination};
use crate::ids::ServerId;
use crate::metrics::StreamTimes;

/// When each step of a stream happened, as offsets from its start: the accept for a TCP
/// session and an HTTP connection's first request, the end of the previous response for a
/// keep-alive request (so idle time is part of `head`, as in HAProxy's `Ti`+`TR`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub began: Instant,
    /// Request head complete (HTTP).
    pub head: Option<Duration>,
    /// A server chosen and a slot on it taken (queueing included).
    pub chosen: Option<Duration>,
    /// Connected to it (or a pooled connection taken).
    pub connected: Option<Duration>,
    /// Response head received (HTTP).
    pub response: Option<Duration>,
    /// The stream ended.
    pub end: Duration,
}

impl Timing {
    pub(crate) fn new(began: Instant) -> Self {
        Timing {
            began,
            head: None,
            chosen: None,
            connected: None,
            response: None,
            end: Duration::ZERO,
        }
    }

    /// Offset of `at` from the start.
    pub(crate) fn since(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.began)
    }

    pub(crate) fn now(&self) -> Duration {
        self.since(Instant::now())
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamRecord {
    pub frontend: usize,
    pub backend: Option<usize>,
    pub server: Option<ServerId>,
    /// Where this thread's view found the server (lets the sink skip a lookup by id).
    pub server_at: Option<Position>,
    pub client: SocketAddr,
    pub timing: Timing,
    pub bytes_to_server: u64,
    pub bytes_to_client: u64,
    /// Attempts beyond the first (other servers, or a fresh connection after a reused one
    /// failed).
    pub retries: u32,
    /// The status the client got (0: none, as in TCP mode or when the client left first).
    pub status: u16,
    pub termination: Termination,
    /// The index of the route that decided, in the frontend's routes (`None`: none did;
    /// the default backend took it, or nothing).
    pub route: Option<u16>,
}

impl StreamRecord {
    pub(crate) fn new(frontend: usize, client: SocketAddr, began: Instant) -> Self {
        StreamRecord {
            frontend,
            backend: None,
            server: None,
            server_at: None,
            client,
            timing: Timing::new(began),
            bytes_to_server: 0,
            bytes_to_client: 0,
            retries: 0,
            status: 0,
            termination: Termination::NORMAL,
            route: None,
        }
    }

    /// The stream failed this way (the backend and server too, if the record did not know).
    pub(crate) fn fail(&mut self, e: &Error) {
        self.termination = e.termination();
        if self.backend.is_none() {
            self.backend = e.backend;
        }
        if self.server.is_none() {
            self.server = e.server;
        }
    }

    /// Where an exchange with a server stands, for an error that interrupts it from outside
    /// (an operator's kill): no response head yet, the response going out, or a tunnel.
    pub(crate) fn exchange_phase(&self) -> crate::error::Phase {
        use crate::error::Phase;
        match (self.timing.response, self.status) {
            (None, _) => Phase::Headers,
            (Some(_), 101) => Phase::Tunnel,
            (Some(_), _) => Phase::Data,
        }
    }

    /// The stream ended now.
    pub(crate) fn close(&mut self) {
        self.timing.end = self.timing.now();
    }
}

/// What the access log line says beyond the record, borrowed from the session at its end
/// (nothing copied for it but the request line and its captures, at head-parse time).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Seen<'a> {
    /// HTTP: the method, target, version and captured fields.
    pub request: Option<&'a RequestLine>,
    /// HTTP: `http` or `https`.
    pub scheme: Option<&'static str>,
    /// The frontend terminated or peeked TLS: the version and cipher (terminated only) and
    /// the SNI.
    pub tls: TlsFacts<'a>,
    /// HTTP: the request's ID (`[frontend] request_id`).
    pub request_id: Option<&'a [u8]>,
    /// HTTP: the ID of the trace tollgate started for it (`[frontend] trace`).
    pub trace_id: Option<&'a [u8]>,
}

/// What a client's TLS handshake settled, for the log.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TlsFacts<'a> {
    pub version: Option<&'static str>,
    pub cipher: Option<&'static str>,
    pub sni: Option<&'a str>,
    /// The verified client certificate's subject (RFC 4514), when the line shows it.
    pub client_cert_subject: Option<&'a str>,
}

/// The TLS facts of a TCP session or an HTTP/2 connection, kept past the TLS stream's
/// life or shared by its streams. Boxed: a TCP session carries this in its state for its
/// whole life, and most have no TLS facts to keep (no TLS, or access logs off).
#[derive(Debug, Default)]
pub(crate) struct TlsSeen(Option<Box<TlsKept>>);

#[derive(Debug, Default)]
struct TlsKept {
    version: Option<&'static str>,
    cipher: Option<&'static str>,
    sni: Option<Box<str>>,
    /// Only when the frontend's log line shows it (`client_cert_subject`).
    cert_subject: Option<Box<str>>,
}

impl TlsSeen {
    /// What `conn` settled; the client certificate's subject only if `plan` logs it.
    pub(crate) fn of(conn: &rustls::ServerConnection, leaf: Option<&[u8]>, plan: &LogPlan) -> Self {
        TlsSeen(Some(Box::new(TlsKept {
            version: tls_version_name(conn.protocol_version()),
            cipher: cipher_name(conn),
            sni: conn.server_name().map(Box::from),
            cert_subject: cert_subject(leaf, plan),
        })))
    }

    /// A QUIC connection's handshake (always TLS 1.3; quinn does not tell the suite).
    pub(crate) fn quic(sni: Option<&str>, leaf: Option<&[u8]>, plan: &LogPlan) -> Self {
        TlsSeen(Some(Box::new(TlsKept {
            version: Some("TLSv1.3"),
            cipher: None,
            sni: sni.map(Box::from),
            cert_subject: cert_subject(leaf, plan),
        })))
    }

    /// A peeked ClientHello's SNI (TLS passthrough: no handshake of ours).
    pub(crate) fn peeked(sni: Option<&str>) -> Self {
        TlsSeen(Some(Box::new(TlsKept {
            sni: sni.map(Box::from),
            ..TlsKept::default()
        })))
    }

    pub(crate) fn sni(&self) -> Option<&str> {
        self.0.as_ref()?.sni.as_deref()
    }

    pub(crate) fn facts(&self) -> TlsFacts<'_> {
        let Some(k) = self.0.as_deref() else {
            return TlsFacts::default();
        };
        TlsFacts {
            version: k.version,
            cipher: k.cipher,
            sni: k.sni.as_deref(),
            client_cert_subject: k.cert_subject.as_deref(),
        }
    }

    pub(crate) fn seen(&self) -> Seen<'_> {
        Seen {
            tls: self.facts(),
            ..Seen::default()
        }
    }
}

/// The subject of a verified client certificate, when `plan` logs it (made once per
/// connection; `tls::client_cert::subject` escapes it to printable ASCII).
pub(crate) fn cert_subject(leaf: Option<&[u8]>, plan: &LogPlan) -> Option<Box<str>> {
    if !plan.client_cert_subject {
        return None;
    }
    Some(crate::tls::client_cert::subject(leaf?).into_boxed_str())
}

/// The negotiated suite by its IANA name (`TLS_AES_128_GCM_SHA256`,
/// `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`), as OpenSSL's `-ciphersuites` and the RFCs say it.
pub(crate) fn cipher_name(conn: &rustls::ServerConnection) -> Option<&'static str> {
    use rustls::CipherSuite as C;
    let suite = conn.negotiated_cipher_suite()?.suite();
    match suite {
        C::TLS13_AES_128_GCM_SHA256 => Some("TLS_AES_128_GCM_SHA256"),
        C::TLS13_AES_256_GCM_SHA384 => Some("TLS_AES_256_GCM_SHA384"),
        C::TLS13_CHACHA20_POLY1305_SHA256 => Some("TLS_CHACHA20_POLY1305_SHA256"),
        other => other.as_str(),
    }
}

/// `TLSv1.3`, as OpenSSL and HAProxy name versions.
pub(crate) fn tls_version_name(v: Option<rustls::ProtocolVersion>) -> Option<&'static str> {
    match v? {
        rustls::ProtocolVersion::TLSv1_3 => Some("TLSv1.3"),
        rustls::ProtocolVersion::TLSv1_2 => Some("TLSv1.2"),
        _ => Some("TLS"),
    }
}

/// The worker's sink: every ended stream comes here once. Feeds the server's counters
/// (requests, bytes, responses by class) from this thread's cell, a trace event the tests
/// (and a curious operator) can read with `RUST_LOG=tollgate::record=trace`, and the
/// access log when it is on.
pub(crate) fn sink(ctx: &WorkerCtx, r: &StreamRecord, seen: Seen<'_>) {
    let fe = ctx.shared.config.frontends.get(r.frontend);
    let plan = fe.map(|fe| &*fe.log);
    // Sampled out (`[log] sample`, `slow`): the line is not written, the counters still are.
    let mut logged = ctx.access_log.is_none()
        || plan.is_none_or(|p| {
            let failed = r.termination != Termination::NORMAL;
            !p.keeps(r.status, failed, r.timing.end, crate::http::request_id::sample_draw)
        });
    if let (Some(backend), Some(id)) = (r.backend, r.server)
        && let Some(local) = ctx.backends.get(backend)
    {
        local.with_server(id, r.server_at, |server| {
            if !logged && let (Some(log), Some(plan)) = (&ctx.access_log, plan) {
                // The live names: a server need not be in the config (added at runtime).
                let names = (Some(&*server.backend_name), Some(&*server.name), Some(server.address));
                log.write(&plan.layout, &entry(ctx, r, seen, names));
                logged = true;
            }
            let c = server.counters(ctx.id);
            c.requests.add(1);
            c.bytes_to_server.add(r.bytes_to_server);
            c.bytes_to_client.add(r.bytes_to_client);
            if r.status != 0 {
                c.response(r.status);
            }
        });
    }
    if !logged && let (Some(log), Some(plan)) = (&ctx.access_log, plan) {
        let backend = r.backend.and_then(|b| ctx.shared.config.backends.get(b));
        log.write(
            &plan.layout,
            &entry(ctx, r, seen, (backend.map(|b| b.name.as_str()), None, None)),
        );
    }
    if let Some(cells) = ctx.shared.metrics.get(ctx.id) {
        cells.stream(&crate::metrics::Ended {
            frontend: r.frontend,
            route: r.route,
            backend: r.backend,
            bytes: (r.bytes_to_server, r.bytes_to_client),
            status: r.status,
            // A status with no response head from a server is one tollgate made.
            by_proxy: r.timing.response.is_none(),
            times: times(&r.timing),
        });
    }
    let us = |d: Option<Duration>| d.map_or(-1, |d| d.as_micros() as i64);
    tracing::trace!(
        target: "tollgate::record",
        frontend = r.frontend,
        backend = r.backend.map_or(-1, |b| b as i64),
        server = r.server.map_or(-1, |s| i64::from(s.0)),
        client = %r.client,
        head_us = us(r.timing.head),
        chosen_us = us(r.timing.chosen),
        connected_us = us(r.timing.connected),
        response_us = us(r.timing.response),
        end_us = r.timing.end.as_micros() as i64,
        to_server = r.bytes_to_server,
        to_client = r.bytes_to_client,
        retries = r.retries,
        status = r.status,
        termination = %r.termination,
        "stream"
    );
}

/// The access log's view of a record: names looked up (the backend's and server's names
/// and the server's address, as `server` says them), offsets as the log names them.
fn entry<'a>(
    ctx: &'a WorkerCtx,
    r: &StreamRecord,
    seen: Seen<'a>,
    (backend, server, server_address): (Option<&'a str>, Option<&'a str>, Option<SocketAddr>),
) -> Entry<'a> {
    let config = &ctx.shared.config;
    let fe = config.frontends.get(r.frontend);
    let t = &r.timing;
    Entry {
        // One clock read: the record closed just now, `end` after it began.
        time: SystemTime::now().checked_sub(t.end).unwrap_or(SystemTime::UNIX_EPOCH),
        client: r.client,
        frontend: fe.map_or("-", |f| f.name.as_str()),
        backend,
        server,
        server_address,
        route: r
            .route
            .and_then(|i| fe?.routes.get(usize::from(i)))
            .map(|route| &*route.name),
        scheme: seen.scheme,
        request: seen.request.filter(|l| !l.is_empty()),
        status: r.status,
        bytes_to_server: r.bytes_to_server,
        bytes_to_client: r.bytes_to_client,
        timings: Timings {
            head: t.head,
            queued: t.chosen,
            connected: t.connected,
            response: t.response,
            total: t.end,
        },
        retries: r.retries,
        termination: r.termination,
        tls_version: seen.tls.version,
        tls_cipher: seen.tls.cipher,
        sni: seen.tls.sni,
        client_cert_subject: seen.tls.client_cert_subject,
        request_id: seen.request_id,
        trace_id: seen.trace_id,
    }
}

/// What the backend histograms observe: connect = server chosen → connected; response =
/// connected → response head; total = request head complete (HTTP; the accept in TCP mode)
/// → end, so a keep-alive connection's idle time between requests is not counted.
fn times(t: &Timing) -> StreamTimes {
    let between = |from: Option<Duration>, to: Option<Duration>| Some(to?.saturating_sub(from?));
    StreamTimes {
        connect: between(t.chosen, t.connected),
        response: between(t.connected, t.response),
        total: t.end.saturating_sub(t.head.unwrap_or(Duration::ZERO)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorKind, Side};

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_record_ends_with_its_cause_and_offsets() {
        let began = Instant::now();
        let mut r = StreamRecord::new(0, "127.0.0.1:1".parse().expect("addr"), began);
        tokio::time::advance(Duration::from_millis(3)).await;
        r.timing.head = Some(r.timing.now());
        tokio::time::advance(Duration::from_millis(2)).await;
        let e = Error::new(ErrorKind::ResponseTimeout, Side::Back, "x").at(1, Some(ServerId(7)));
        r.fail(&e);
        r.close();
        assert_eq!(r.timing.head, Some(Duration::from_millis(3)));
        assert_eq!(r.timing.end, Duration::from_millis(5));
        assert_eq!(r.termination.as_str(), "sH");
        assert_eq!((r.backend, r.server), (Some(1), Some(ServerId(7))));
        let mut ok = StreamRecord::new(0, "127.0.0.1:1".parse().expect("addr"), began);
        ok.close();
        assert_eq!(ok.termination.as_str(), "--");
        assert!(
            std::mem::size_of::<StreamRecord>() <= 256,
            "kept small: it lives in every HTTP session's state"
        );
    }
}
