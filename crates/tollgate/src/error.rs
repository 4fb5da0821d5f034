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
    /// No server is usable (none configured, or all at maxconn past the queue timeout).
    NoServer,
    QueueTimeout,
    /// The peer closed or reset the connection.
    PeerClosed,
    IdleTimeout,
    Io,
    /// The peer sent something we refuse to parse or forward.
    Protocol,
    /// A TLS handshake failed (alert, timeout, no certificate) or TLS to a server failed.
    Tls,
    Config,
    /// An operator closed the session (`ctl set server … state maint --kill`).
    Killed,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::ConnectTimeout => "connect-timeout",
            ErrorKind::NoServer => "no-server",
            ErrorKind::QueueTimeout => "queue-timeout",
            ErrorKind::PeerClosed => "peer-closed",
            ErrorKind::IdleTimeout => "idle-timeout",
            ErrorKind::Io => "io",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Tls => "tls",
            ErrorKind::Config => "config",
            ErrorKind::Killed => "killed",
        }
    }

    /// The status an HTTP client gets when a request fails this way.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::NoServer | ErrorKind::QueueTimeout | ErrorKind::Connect => 503,
            ErrorKind::ConnectTimeout | ErrorKind::IdleTimeout => 504,
            ErrorKind::Protocol => 502,
            _ => 502,
        }
    }
}

#[derive(Debug, Error)]
#[error("{context}: {kind_str} ({side:?} side){}", source.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
pub struct Error {
    pub kind: ErrorKind,
    pub side: Side,
    /// True when nothing reached the server, so another attempt cannot duplicate work.
    pub retryable: bool,
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

    /// Routine endings (a peer hanging up, an idle connection) are logged at debug; anything
    /// else is a failure the operator sees at warn (rate-limited, see `runtime::loglimit`).
    pub fn is_routine(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::PeerClosed | ErrorKind::IdleTimeout | ErrorKind::Killed
        )
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
            Error::new(ErrorKind::ConnectTimeout, Side::Back, "x")
                .kind
                .http_status(),
            504
        );
        assert_eq!(ErrorKind::NoServer.http_status(), 503);
        let shown = Error::new(ErrorKind::Connect, Side::Back, "connect app/a")
            .with_source(io::Error::from(io::ErrorKind::ConnectionRefused))
            .to_string();
        assert!(shown.starts_with("connect app/a: connect (Back side)"), "{shown}");
    }
}
