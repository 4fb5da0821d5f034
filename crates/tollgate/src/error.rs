//! The one error type: what went wrong (kind), on which side (front = client, back = server,
//! internal), and whether trying again elsewhere is safe. The proxy picks its reaction
//! (retry, 502/503/504, close quietly) from these three facts, never from message text.

use std::borrow::Cow;
use std::io;

use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Front,
    Back,
    Internal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Could not establish a connection to a server (refused, unreachable).
    Connect,
    ConnectTimeout,
    /// No server is usable (none configured, none usable, no route).
    NoServer,
    /// Every usable server stayed at its maxconn past `timeouts.queue`.
    QueueTimeout,
    /// Every usable server at its maxconn and the backend's `maxqueue` requests already
    /// waiting: refused at once.
    QueueFull,
    /// The peer closed or reset the connection.
    PeerClosed,
    /// The server closed or reset its connection before a single response byte: the one
    /// failure after which a request may be replayed (see `Error::may_retry`).
    ServerEmpty,
    /// Nothing moved for the relevant timeout (the side says whose).
    IdleTimeout,
    /// No response head within `timeouts.server`.
    ResponseTimeout,
    Io,
    /// A request the proxy refuses to forward, and the status it answers (400, 408, 413,
    /// 414, 431, 501, 505).
    BadRequest(u16),
    /// A response the proxy refuses to forward (malformed, too large).
    BadResponse,
    /// A TLS handshake failed (alert, timeout, no certificate) or TLS to a server failed.
    Tls,
    Config,
    /// An operator closed the session (`ctl set server … state maint --kill`).
    Killed,
    /// A TCP-mode `deny = true` route closed the connection.
    Denied,
    /// Over a `[[frontend.limit]]`: answered 429 (or closed, by the limit's action).
    Limited,
    /// Over a limit with `action = "tarpit"`: held, then answered 500 and closed.
    Tarpitted,
}

/// Where in a stream's life a failure happened (HAProxy's session states, the second letter
/// of a termination cause).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Receiving the request (head, or body from the client).
    Request,
    /// Waiting for a server slot.
    Queue,
    /// Connecting to a server (TLS handshake included).
    Connect,
    /// The request is going to the server and the response head is awaited: nothing has been
    /// sent to the client yet.
    Headers,
    /// The response is going to the client: its head has left, no other status can follow.
    Data,
    /// After a 101 (or in TCP mode, the relay).
    Tunnel,
}

impl Phase {
    fn letter(self) -> u8 {
        match self {
            Phase::Request => b'R',
            Phase::Queue => b'Q',
            Phase::Connect => b'C',
            Phase::Headers => b'H',
            Phase::Data => b'D',
            Phase::Tunnel => b'T',
        }
    }
}

/// How a stream ended, as two letters (HAProxy's termination state): who ended it (`C`
/// client, `S` server, `P` the proxy refused, `c`/`s` client/server timeout, `K` killed by
/// an operator, `R` a resource ran out, `I` internal), then the phase (`R Q C H D T`).
/// `--` is a normal end.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Termination(pub [u8; 2]);

impl Termination {
    pub const NORMAL: Termination = Termination(*b"--");

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or("??")
    }

    /// The cause in words, for access logs: who ended the stream, then when (`normal` for
    /// `--`), e.g. `server timeout` + `waiting for the response head`.
    pub fn words(&self) -> (&'static str, &'static str) {
        let [who, phase] = self.0;
        let who = match who {
            b'-' => return ("normal", ""),
            b'C' => "client closed",
            b'S' => "server failed",
            b'P' => "proxy refused",
            b'c' => "client timeout",
            b's' => "server timeout",
            b'K' => "killed by an operator",
            b'R' => "resource exhausted",
            b'I' => "internal error",
            _ => "unknown",
        };
        let phase = match phase {
            b'R' => "reading the request",
            b'Q' => "waiting in the queue",
            b'C' => "connecting to the server",
            b'H' => "waiting for the response head",
            b'D' => "sending the response",
            b'T' => "relaying",
            _ => "",
        };
        (who, phase)
    }
}

impl std::fmt::Debug for Termination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for Termination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::ConnectTimeout => "connect-timeout",
            ErrorKind::NoServer => "no-server",
            ErrorKind::QueueTimeout => "queue-timeout",
            ErrorKind::QueueFull => "queue-full",
            ErrorKind::PeerClosed => "peer-closed",
            ErrorKind::ServerEmpty => "empty-response",
            ErrorKind::IdleTimeout => "idle-timeout",
            ErrorKind::ResponseTimeout => "response-timeout",
            ErrorKind::Io => "io",
            ErrorKind::BadRequest(_) => "bad-request",
            ErrorKind::BadResponse => "bad-response",
            ErrorKind::Tls => "tls",
            ErrorKind::Config => "config",
            ErrorKind::Killed => "killed",
            ErrorKind::Denied => "denied",
            ErrorKind::Limited => "limited",
            ErrorKind::Tarpitted => "tarpitted",
        }
    }

    /// The phase a failure of this kind happens in unless said otherwise.
    fn phase(self) -> Phase {
        match self {
            ErrorKind::Connect | ErrorKind::ConnectTimeout | ErrorKind::Tls => Phase::Connect,
            ErrorKind::NoServer | ErrorKind::QueueTimeout | ErrorKind::QueueFull => Phase::Queue,
            ErrorKind::ServerEmpty | ErrorKind::ResponseTimeout | ErrorKind::BadResponse => Phase::Headers,
            ErrorKind::BadRequest(_) | ErrorKind::Denied | ErrorKind::Limited | ErrorKind::Tarpitted => Phase::Request,
            _ => Phase::Tunnel,
        }
    }
}

#[derive(Debug, Error)]
#[error("{context}: {kind_str} ({side:?} side){}", source.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
pub struct Error {
    pub kind: ErrorKind,
    pub side: Side,
    /// True when nothing of the request can have reached the server (connect failed, the
    /// head was not fully sent), so another attempt cannot duplicate work.
    pub retryable: bool,
    /// Where in the stream's life it happened (set by `during`, else from the kind).
    pub phase: Phase,
    pub context: Cow<'static, str>,
    kind_str: &'static str,
    #[source]
    pub source: Option<io::Error>,
    /// Where a server was involved: the backend's index in the config, and the server's id
    /// when one was chosen (for the operator's log line).
    pub backend: Option<usize>,
    pub server: Option<crate::ids::ServerId>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, side: Side, context: impl Into<Cow<'static, str>>) -> Self {
        Error {
            kind,
            side,
            retryable: false,
            phase: kind.phase(),
            context: context.into(),
            kind_str: kind.as_str(),
            source: None,
            backend: None,
            server: None,
        }
    }

    pub fn io(side: Side, context: impl Into<Cow<'static, str>>, e: io::Error) -> Self {
        let kind = if is_peer_reset(&e) {
            ErrorKind::PeerClosed
        } else {
            ErrorKind::Io
        };
        Error {
            source: Some(e),
            ..Error::new(kind, side, context)
        }
    }

    pub fn during(mut self, phase: Phase) -> Self {
        self.phase = phase;
        self
    }

    pub fn retryable(mut self, yes: bool) -> Self {
        self.retryable = yes;
        self
    }

    /// Records the backend (and server, if one was chosen) the failure concerns.
    pub fn at(mut self, backend: usize, server: Option<crate::ids::ServerId>) -> Self {
        self.backend = Some(backend);
        self.server = server;
        self
    }

    pub fn with_source(mut self, e: io::Error) -> Self {
        self.source = Some(e);
        self
    }

    /// Routine endings (a peer hanging up, an idle connection, an operator's kill) are
    /// logged at debug; anything else is a failure the operator sees at warn (rate-limited).
    pub fn is_routine(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::PeerClosed
                | ErrorKind::IdleTimeout
                | ErrorKind::Killed
                | ErrorKind::Denied
                | ErrorKind::Limited
                | ErrorKind::Tarpitted
        )
    }

    /// The status an HTTP client gets for this failure, or `None` when none can be sent: the
    /// client is gone, the response has started (`Data`, `Tunnel`), or an operator killed it.
    /// The only place that maps failures to 4xx/5xx.
    pub fn http_status(&self) -> Option<u16> {
        if matches!(self.phase, Phase::Data | Phase::Tunnel) {
            return None;
        }
        let front = self.side == Side::Front;
        Some(match self.kind {
            ErrorKind::PeerClosed | ErrorKind::Io | ErrorKind::Tls if front => return None,
            ErrorKind::Killed => return None,
            ErrorKind::BadRequest(status) => status,
            ErrorKind::Denied => 403,
            ErrorKind::Limited => 429,
            ErrorKind::Tarpitted => 500,
            ErrorKind::IdleTimeout if front => 408,
            ErrorKind::NoServer | ErrorKind::QueueTimeout | ErrorKind::QueueFull | ErrorKind::Connect => 503,
            ErrorKind::ConnectTimeout | ErrorKind::ResponseTimeout | ErrorKind::IdleTimeout => 504,
            ErrorKind::Config => 500,
            ErrorKind::ServerEmpty
            | ErrorKind::BadResponse
            | ErrorKind::PeerClosed
            | ErrorKind::Io
            | ErrorKind::Tls => 502,
        })
    }

    /// Whether the request may be sent again (HAProxy's rules): a connect failure always
    /// (nothing was sent; another server is tried); on a *reused* server connection, a head
    /// that never fully left, or an empty response to a request that is safe to replay
    /// (`replayable`: idempotent, no body). Never once a response byte arrived.
    pub fn may_retry(&self, replayable: bool, reused: bool) -> bool {
        match (self.kind, self.phase) {
            (ErrorKind::Connect | ErrorKind::ConnectTimeout, Phase::Connect) => true,
            (_, Phase::Headers) if self.side == Side::Back && reused => {
                self.retryable || (self.kind == ErrorKind::ServerEmpty && replayable)
            }
            _ => false,
        }
    }

    /// How the stream ended, for the session record and access logs.
    pub fn termination(&self) -> Termination {
        let front = self.side == Side::Front;
        let who = match self.kind {
            ErrorKind::Killed => b'K',
            ErrorKind::BadRequest(_)
            | ErrorKind::BadResponse
            | ErrorKind::Denied
            | ErrorKind::Limited
            | ErrorKind::Tarpitted => b'P',
            ErrorKind::QueueFull => b'R',
            ErrorKind::IdleTimeout if front => b'c',
            ErrorKind::IdleTimeout
            | ErrorKind::ConnectTimeout
            | ErrorKind::ResponseTimeout
            | ErrorKind::QueueTimeout => b's',
            ErrorKind::Config => b'I',
            _ if self.side == Side::Internal => b'I',
            _ if front => b'C',
            _ => b'S',
        };
        Termination([who, self.phase.letter()])
    }
}

/// A peer going away: reset, broken pipe, abort, EOF in the middle of something.
pub fn is_peer_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionAborted
    )
}

/// An I/O error as an operator reads it: `No such file or directory`, without `(os error 2)`.
pub fn os_message(e: &io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text.get(..at).unwrap_or(&text).to_string(),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_are_routine_and_statuses_follow_kind() {
        let e = Error::io(Side::Front, "relay", io::Error::from(io::ErrorKind::ConnectionReset));
        assert_eq!(e.kind, ErrorKind::PeerClosed);
        assert!(e.is_routine());
        assert_eq!(
            e.during(Phase::Request).http_status(),
            None,
            "client gone: nothing to send"
        );
        let status = |kind, side| Error::new(kind, side, "x").http_status();
        assert_eq!(status(ErrorKind::ConnectTimeout, Side::Back), Some(504));
        assert_eq!(status(ErrorKind::NoServer, Side::Back), Some(503));
        assert_eq!(status(ErrorKind::QueueTimeout, Side::Back), Some(503));
        assert_eq!(status(ErrorKind::QueueFull, Side::Back), Some(503));
        assert_eq!(status(ErrorKind::ResponseTimeout, Side::Back), Some(504));
        assert_eq!(status(ErrorKind::ServerEmpty, Side::Back), Some(502));
        assert_eq!(status(ErrorKind::BadResponse, Side::Back), Some(502));
        assert_eq!(status(ErrorKind::BadRequest(431), Side::Front), Some(431));
        assert_eq!(
            Error::new(ErrorKind::IdleTimeout, Side::Front, "x")
                .during(Phase::Request)
                .http_status(),
            Some(408)
        );
        assert_eq!(status(ErrorKind::Killed, Side::Internal), None);
        let started = Error::new(ErrorKind::PeerClosed, Side::Back, "x").during(Phase::Data);
        assert_eq!(started.http_status(), None, "the response has started");
        let shown = Error::new(ErrorKind::Connect, Side::Back, "connect app/a")
            .with_source(io::Error::from(io::ErrorKind::ConnectionRefused))
            .to_string();
        assert!(shown.starts_with("connect app/a: connect (Back side)"), "{shown}");
    }

    #[test]
    fn retries_follow_haproxys_rules() {
        let connect = Error::new(ErrorKind::Connect, Side::Back, "x");
        assert!(connect.may_retry(false, false), "a connect failure sent nothing");
        let empty = Error::new(ErrorKind::ServerEmpty, Side::Back, "x");
        assert!(empty.may_retry(true, true), "idempotent, reused, empty response");
        assert!(!empty.may_retry(false, true), "a POST is never replayed once sent");
        assert!(
            !empty.may_retry(true, false),
            "a fresh connection failing is the server's answer"
        );
        let unsent = Error::new(ErrorKind::PeerClosed, Side::Back, "x")
            .during(Phase::Headers)
            .retryable(true);
        assert!(
            unsent.may_retry(false, true),
            "a head that never left may go again, any method"
        );
        let bad = Error::new(ErrorKind::BadResponse, Side::Back, "x");
        assert!(!bad.may_retry(true, true), "a response byte arrived");
        let midway = Error::new(ErrorKind::PeerClosed, Side::Back, "x").during(Phase::Data);
        assert!(!midway.may_retry(true, true));
    }

    #[test]
    fn terminations_read_like_haproxys() {
        let t = |e: Error| e.termination().as_str().to_string();
        assert_eq!(t(Error::new(ErrorKind::Connect, Side::Back, "x")), "SC");
        assert_eq!(t(Error::new(ErrorKind::QueueTimeout, Side::Back, "x")), "sQ");
        assert_eq!(t(Error::new(ErrorKind::QueueFull, Side::Back, "x")), "RQ");
        assert_eq!(t(Error::new(ErrorKind::ResponseTimeout, Side::Back, "x")), "sH");
        assert_eq!(t(Error::new(ErrorKind::BadRequest(400), Side::Front, "x")), "PR");
        assert_eq!(t(Error::new(ErrorKind::BadResponse, Side::Back, "x")), "PH");
        assert_eq!(
            t(Error::new(ErrorKind::IdleTimeout, Side::Front, "x").during(Phase::Request)),
            "cR"
        );
        assert_eq!(
            t(Error::new(ErrorKind::PeerClosed, Side::Front, "x").during(Phase::Data)),
            "CD"
        );
        assert_eq!(t(Error::new(ErrorKind::Killed, Side::Internal, "x")), "KT");
        assert_eq!(Termination::NORMAL.as_str(), "--");
    }
}
