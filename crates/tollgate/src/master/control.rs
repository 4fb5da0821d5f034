//! The master's control socket (`global.control_socket`, a Unix stream socket) and its client.
//!
//! Protocol: `command` frames. The client sends one `Request` (version, id, command); the
//! master answers one `Reply` with the same id and closes. A reload answers only once it is
//! over (new generation ready and the old one told to stop, or the reason it was refused),
//! so `tollgate reload` can exit with the outcome. A request that cannot be decoded gets an
//! error reply saying why (id 0), never silence: bad JSON, an unknown command, another
//! protocol version, a frame over the size limit, a truncated frame, a connection closed or
//! left silent (`REQUEST_TIMEOUT`) before a request.

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot};

use crate::command::{self, Command, Reply, codec};
use crate::config::model::SocketAccess;

/// A command from a control connection, with where its reply goes.
pub struct Request {
    pub id: u64,
    pub command: Command,
    pub reply: oneshot::Sender<Reply>,
}

/// Longest the master waits for a connected client's request.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest a client waits for an answer (a reload waits for the new worker's READY).
pub(crate) const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// Binds the control socket, replacing a stale one (a socket file nobody answers on), and
/// gives the file `access`'s mode and group. Until the mode is set the file has the
/// process umask's (with the usual 022, only the owner may connect already).
///
/// Only a stale socket is ever replaced: anything else at the path (a regular file, a
/// symlink, a directory) is refused, never deleted. The mode and group are set on the
/// socket file itself, never through a symlink: the path is opened `O_PATH | O_NOFOLLOW`,
/// checked to be a socket, and changed through that descriptor.
pub fn bind(path: &Path, access: SocketAccess) -> io::Result<UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{} is in use by another master", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(m) => return Err(not_a_socket(path, &m.file_type())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    set_access(path, access)?;
    Ok(listener)
}

fn not_a_socket(path: &Path, kind: &std::fs::FileType) -> io::Error {
    use std::os::unix::fs::FileTypeExt;
    let what = if kind.is_symlink() {
        "a symlink"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_file() {
        "a regular file"
    } else if kind.is_fifo() {
        "a FIFO"
    } else {
        "not a socket"
    };
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{} exists and is {what}: only a stale control socket is replaced (remove it, or set another control_socket)",
            path.display()
        ),
    )
}

/// The group and mode of the socket file at `path`, set without following a link.
fn set_access(path: &Path, access: SocketAccess) -> io::Result<()> {
    use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
    use std::os::fd::AsRawFd;
    let fd = rustix::fs::openat(
        CWD,
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if kind != FileType::Socket {
        return Err(io::Error::other(format!(
            "{} was replaced while binding it: not setting its mode",
            path.display()
        )));
    }
    if let Some(gid) = access.gid {
        rustix::fs::chownat(&fd, "", None, Some(rustix::fs::Gid::from_raw(gid)), AtFlags::EMPTY_PATH)?;
    }
    // No fchmod on an O_PATH descriptor: its /proc link reaches the same inode, whatever
    // the path now names.
    let by_fd = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::chmod(by_fd.as_str(), Mode::from_raw_mode(access.mode))?;
    Ok(())
}

/// Accepts control connections and forwards their requests to the master loop.
pub async fn serve(listener: UnixListener, requests: mpsc::UnboundedSender<Request>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let requests = requests.clone();
        tokio::task::spawn_local(async move {
            if let Err(e) = session(stream, requests).await {
                tracing::debug!(error = %e, "control connection failed");
            }
        });
    }
}

async fn session(mut stream: tokio::net::UnixStream, requests: mpsc::UnboundedSender<Request>) -> io::Result<()> {
    let caller = stream.peer_cred().ok().map(|c| c.uid());
    // Every way a request can fail to arrive is answered: silence, an early close, a
    // truncated or oversized frame.
    let body = tokio::time::timeout(REQUEST_TIMEOUT, codec::read_body_async(&mut stream))
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no request within {REQUEST_TIMEOUT:?}"),
            ))
        });
    let request = match body {
        Ok(Some(body)) => codec::decode_request(&body),
        Ok(None) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "no request: the connection ended before a frame",
        )),
        Err(e) => Err(e),
    };
    let request = match request {
        Ok(r) => r,
        Err(e) => {
            // The error may quote the caller's bytes (a serde message): escaped.
            tracing::info!(uid = %uid_text(caller), error = ?e.to_string(), "control: refused a request");
            codec::write_async(&mut stream, &Reply::error(0, e.to_string())).await?;
            return linger(stream).await;
        }
    };
    tracing::info!(uid = %uid_text(caller), id = request.id, command = request.command.name(), "control: command");
    let (tx, rx) = oneshot::channel();
    let id = request.id;
    let forwarded = requests.send(Request {
        id,
        command: request.command,
        reply: tx,
    });
    let reply = match forwarded {
        Ok(()) => rx.await.unwrap_or_else(|_| Reply::error(id, "master is exiting")),
        Err(_) => Reply::error(id, "master is exiting"),
    };
    codec::write_async(&mut stream, &reply).await
}

/// After refusing a request whose bytes were not all read: closing with unread input would
/// reset the connection and could destroy the answer before the client reads it. Half-close,
/// then discard what the client still sends (bounded in bytes and time).
/// The caller's uid for a log line: `0`, or `unknown` when the kernel said nothing.
fn uid_text(caller: Option<u32>) -> String {
    caller.map_or_else(|| "unknown".to_string(), |uid| uid.to_string())
}

async fn linger(mut stream: tokio::net::UnixStream) -> io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.shutdown().await?;
    let mut sink = [0u8; 4096];
    let drain = async {
        let mut left = 1usize << 20;
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
    Ok(())
}

/// Client side: sends `command`, waits for the answer.
pub fn request(path: &Path, command: Command) -> io::Result<Reply> {
    let mut s = UnixStream::connect(path)
        .map_err(|e| io::Error::new(e.kind(), format!("connect to the master at {}: {e}", path.display())))?;
    s.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    let id = u64::from(std::process::id());
    codec::write(
        &mut s,
        &command::Request {
            v: command::VERSION,
            id,
            command,
        },
    )?;
    let reply: Reply = codec::read(&mut s)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "the master closed without answering"))?;
    if reply.id != id && reply.id != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("answer to request {} instead of {id}", reply.id),
        ));
    }
    Ok(reply)
}

/// The control socket a client should use: `explicit`, else `global.control_socket` of
/// `config` (read leniently: the file may be the broken config being reloaded; relative to
/// the file's directory, as the master resolves it), else the default.
pub fn client_path(explicit: Option<PathBuf>, config: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p;
    }
    let from_config = config.and_then(|c| {
        let bytes = crate::config::bounded::read_bounded(c, crate::config::bounded::MAX_CONFIG).ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let table = text.parse::<toml::Table>().ok()?;
        let written = table.get("global")?.get("control_socket")?.as_str()?;
        // `${VAR}` as loading the config expands it (`config::expand`).
        let path = match crate::config::expand::expand(written, &crate::config::expand::process_env) {
            Ok(expanded) => PathBuf::from(expanded.unwrap_or_else(|| written.to_string())),
            Err(_) => return None,
        };
        Some(match c.parent() {
            Some(dir) if path.is_relative() => dir.join(path),
            _ => path,
        })
    });
    from_config.unwrap_or_else(|| PathBuf::from(crate::config::model::DEFAULT_CONTROL_SOCKET))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::command::Outcome;
    use tokio::io::AsyncWriteExt;

    /// What the master's connection handler answers to `bytes` (sent, then half-closed).
    async fn answer_to(bytes: &[u8]) -> Option<Reply> {
        let (mut client, server) = tokio::net::UnixStream::pair().unwrap();
        let (tx, _rx) = mpsc::unbounded_channel();
        let handler = tokio::spawn(session(server, tx));
        let _ = client.write_all(bytes).await;
        let _ = client.shutdown().await;
        let body = codec::read_body_async(&mut client).await.ok()??;
        let _ = handler.await;
        codec::decode(&body).ok()
    }

    /// Bounded random inputs, raw and framed, plus the shapes a broken client produces:
    /// each gets an error reply (never silence, never a request reaching the master loop).
    #[test]
    fn every_kind_of_garbage_gets_an_error_reply() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut inputs: Vec<Vec<u8>> = vec![
                Vec::new(),
                vec![3, 0],
                vec![200, 0, 0, 0, b'{'],
                (MAX_FRAME_PLUS_ONE).to_le_bytes().to_vec(),
                b"reload\n".to_vec(),
            ];
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            for i in 0..200usize {
                let len = 1 + i % 97;
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                let mut framed = (bytes.len() as u32).to_le_bytes().to_vec();
                framed.extend_from_slice(&bytes);
                inputs.push(bytes);
                inputs.push(framed);
            }
            for bytes in inputs {
                let reply = answer_to(&bytes).await;
                assert!(
                    matches!(
                        reply,
                        Some(Reply {
                            id: 0,
                            outcome: Outcome::Error { .. },
                            ..
                        })
                    ),
                    "{bytes:?} got {reply:?}"
                );
            }
        });
    }

    const MAX_FRAME_PLUS_ONE: u32 = (16 << 20) + 1;
}
