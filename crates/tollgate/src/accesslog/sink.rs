//! Where the writer thread puts lines: stdout, a file (appended; reopened on request), or
//! syslog over UDP (RFC 5424, one datagram per line, facility local0, severity info).
//!
//! Invariant: only the writer thread touches a sink, so it may block; a write error is
//! reported once (at warn) until a write succeeds again, and never stops the writer.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::config::model::LogSink;

/// `<PRI>` for local0.info: facility 16 × 8 + severity 6.
const SYSLOG_PRI: &str = "<134>";

pub(super) enum Sink {
    Stdout,
    File { path: PathBuf, file: File },
    Syslog(Syslog),
}

pub(super) struct Syslog {
    socket: UdpSocket,
    /// `HOSTNAME APP-NAME PROCID` of the RFC 5424 header.
    origin: String,
    datagram: Vec<u8>,
}

impl Sink {
    pub(super) fn open(config: &LogSink) -> std::io::Result<Sink> {
        Ok(match config {
            LogSink::Off | LogSink::Stdout => Sink::Stdout,
            LogSink::File(path) => Sink::File {
                file: open_file(path)?,
                path: path.clone(),
            },
            LogSink::Syslog(addr) => Sink::Syslog(Syslog::connect(*addr)?),
        })
    }

    /// Writes whole lines (`buf` ends in `\n`).
    pub(super) fn write(&mut self, buf: &[u8]) {
        let result = match self {
            Sink::Stdout => std::io::stdout().lock().write_all(buf),
            Sink::File { file, .. } => file.write_all(buf),
            Sink::Syslog(s) => s.send_lines(buf),
        };
        report(result);
    }

    pub(super) fn flush(&mut self) {
        if let Sink::Stdout = self {
            let _ = std::io::stdout().lock().flush();
        }
    }

    /// A file is opened again at its path (after logrotate renamed it); the old one is
    /// kept when that fails.
    pub(super) fn reopen(&mut self) {
        let Sink::File { path, file } = self else {
            return;
        };
        match open_file(path) {
            Ok(new) => {
                *file = new;
                tracing::info!(path = %path.display(), "access log reopened");
            }
            Err(e) => tracing::warn!(
                path = %path.display(),
                error = %crate::error::os_message(&e),
                "access log: cannot reopen; still writing to the old file"
            ),
        }
    }
}

fn open_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .open(path)
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("access log {}: {}", path.display(), crate::error::os_message(&e)),
            )
        })
}

thread_local! {
    static FAILING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A failing sink is worth one warn line, not one per buffer.
fn report(result: std::io::Result<()>) {
    match result {
        Ok(()) => FAILING.set(false),
        Err(e) if !FAILING.replace(true) => {
            tracing::warn!(error = %crate::error::os_message(&e), "access log: write failed; lines are lost until it works again");
        }
        Err(_) => {}
    }
}

impl Syslog {
    fn connect(to: SocketAddr) -> std::io::Result<Syslog> {
        let local: SocketAddr = if to.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(local)?;
        socket.connect(to)?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
            .unwrap_or_else(|| "-".into());
        Ok(Syslog {
            socket,
            origin: format!("{host} tollgate {}", std::process::id()),
            datagram: Vec::with_capacity(16 << 10),
        })
    }

    /// One datagram per line: `<134>1 TIMESTAMP HOSTNAME tollgate PID - - LINE`. A refused
    /// datagram (nobody listening) is not retried: syslog over UDP is best effort.
    fn send_lines(&mut self, buf: &[u8]) -> std::io::Result<()> {
        for line in buf.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            self.datagram.clear();
            self.datagram.extend_from_slice(SYSLOG_PRI.as_bytes());
            self.datagram.extend_from_slice(b"1 ");
            super::format::rfc3339(SystemTime::now(), &mut self.datagram);
            self.datagram.push(b' ');
            self.datagram.extend_from_slice(self.origin.as_bytes());
            self.datagram.extend_from_slice(b" - - ");
            self.datagram.extend_from_slice(line);
            match self.socket.send(&self.datagram) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
