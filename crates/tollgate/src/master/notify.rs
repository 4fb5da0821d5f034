//! systemd's readiness protocol (`Type=notify`, sd_notify(3)): when `NOTIFY_SOCKET` is set,
//! datagrams of `KEY=VALUE` lines tell the service manager `READY=1` (the first generation
//! serves), `RELOADING=1` with `MONOTONIC_USEC` (a reload began; `Type=notify-reload` needs
//! the timestamp) and `READY=1` again when it is over, `STOPPING=1`, and a `STATUS=` line
//! for `systemctl status`.
//!
//! A plain `UnixDatagram` from std: the protocol is one `sendto` per message, and std
//! reaches Linux abstract sockets (`@name`) through `SocketAddrExt::from_abstract_name`, so
//! no crate and no unsafe code are needed. Sending never blocks the caller (non-blocking
//! socket) and a failure is logged once at debug: the service manager's view is advisory,
//! serving does not depend on it. The variable is removed from worker processes' environment
//! (`Master::spawn`), so only the master speaks for the service.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Where to send notifications; does nothing when `NOTIFY_SOCKET` was not set.
#[derive(Debug, Default)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
}

impl Notifier {
    /// From `NOTIFY_SOCKET` (a path, or `@name` for an abstract socket).
    pub fn from_env() -> Self {
        let Some(value) = std::env::var_os("NOTIFY_SOCKET") else {
            return Notifier::default();
        };
        let value = value.to_string_lossy().into_owned();
        match Self::open(&value) {
            Ok(target) => Notifier { target: Some(target) },
            Err(e) => {
                tracing::warn!(socket = %value, error = %e, "NOTIFY_SOCKET unusable: no readiness notifications");
                Notifier::default()
            }
        }
    }

    fn open(value: &str) -> std::io::Result<(UnixDatagram, SocketAddr)> {
        let addr = match value.strip_prefix('@') {
            Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
            None if value.starts_with('/') => SocketAddr::from_pathname(value)?,
            None => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "neither an absolute path nor @abstract",
                ));
            }
        };
        let sock = UnixDatagram::unbound()?;
        sock.set_nonblocking(true)?;
        Ok((sock, addr))
    }

    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends one message (newline-separated `KEY=VALUE` lines).
    pub fn send(&self, message: &str) {
        let Some((sock, addr)) = &self.target else {
            return;
        };
        if let Err(e) = sock.send_to_addr(message.as_bytes(), addr) {
            tracing::debug!(error = %e, "sd_notify: send failed");
        }
    }

    /// Serving (again): `READY=1` and the status line.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// A reload began.
    pub fn reloading(&self) {
        let usec = monotonic_usec();
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={usec}\nSTATUS=reloading"));
    }

    pub fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
    }

    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={}", one_line(status)));
    }
}

/// CLOCK_MONOTONIC in microseconds, as `MONOTONIC_USEC` wants it.
fn monotonic_usec() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000).saturating_add(nanos / 1_000)
}

/// A status is one line of the message: newlines become spaces.
fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn messages_reach_an_abstract_socket() {
        let name = format!("tollgate-notify-test-{}", std::process::id());
        let listener = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
        listener
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let notifier = Notifier {
            target: Some(Notifier::open(&format!("@{name}")).unwrap()),
        };
        notifier.ready("serving\ngeneration 1");
        let mut buf = [0u8; 256];
        let n = listener.recv(&mut buf).unwrap();
        let got = std::str::from_utf8(buf.get(..n).unwrap()).unwrap();
        assert_eq!(got, "READY=1\nSTATUS=serving generation 1");
        assert!(Notifier::open("relative/path").is_err());
        assert!(monotonic_usec() > 0);
    }
}
