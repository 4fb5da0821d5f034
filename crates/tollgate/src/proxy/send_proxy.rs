//! `send_proxy`: a fresh connection to such a server opens with a PROXY protocol header
//! naming the session's client (`ctx::origin`), before TLS to the server or the first
//! byte relayed. Reused (pooled) connections carry none: the pool gives a `send_proxy`
//! server's connection back only to the session that opened it (`ctx::pool`).
//!
//! The header is written with `MSG_MORE` when the first bytes follow at once (HTTP mode,
//! or a TLS server's ClientHello), so they leave together in one segment; a plain TCP-mode
//! relay writes it alone, since its server may be the first to speak.

use std::io;

use tokio::net::TcpStream;

use crate::config::{Backend, Mode};
use crate::ctx::WorkerCtx;
use crate::live::server::ServerLive;
use crate::proxyproto::{self, Command, Tlvs, Version};

thread_local! {
    /// One header at a time per thread, written and sent before the next is built.
    static HEADER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Writes `server`'s PROXY header on `stream`, just connected; nothing without `send_proxy`.
pub(crate) fn open(ctx: &WorkerCtx, backend: &Backend, server: &ServerLive, stream: &TcpStream) -> io::Result<()> {
    let Some(version) = server.send_proxy else {
        return Ok(());
    };
    let more = backend.mode == Mode::Http || server.tls.is_some();
    HEADER.with(|cell| {
        let mut header = cell.borrow_mut();
        header.clear();
        match crate::ctx::origin::current() {
            Some(origin) => origin.header(version, &mut header),
            // Not reached (every session keeps an origin while a server sends headers);
            // were it, the server hears "unknown", never someone else's address.
            None => unknown(version, &mut header),
        }
        send_all(stream, &header, more)
    })?;
    ctx.stats.proxy_headers_sent.add(1);
    Ok(())
}

fn unknown(version: Version, out: &mut Vec<u8>) {
    match version {
        Version::V1 => proxyproto::write_v1(out, None),
        Version::V2 => proxyproto::write_v2(out, Command::Local, None, &Tlvs::default()),
    }
}

/// The whole header in one non-blocking send: a socket that just connected has an empty
/// send buffer, far larger than any header; anything less is an error, never a wait.
pub(crate) fn send_all(fd: impl std::os::fd::AsFd, header: &[u8], more: bool) -> io::Result<()> {
    let mut flags = rustix::net::SendFlags::NOSIGNAL;
    if more {
        flags |= rustix::net::SendFlags::MORE;
    }
    let sent = rustix::net::send(fd, header, flags)?;
    if sent != header.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "PROXY header not sent whole"));
    }
    Ok(())
}
