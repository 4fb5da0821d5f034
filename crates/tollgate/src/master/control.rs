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
pub fn bind(path: &Path, access: SocketAccess) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{} is in use by another master", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    if let Some(gid) = access.gid {
        std::os::unix::fs::chown(path, None, Some(gid))?;
    }
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(access.mode))?;
    Ok(listener)
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
            tracing::info!(uid = ?caller, error = %e, "control: refused a request");
            codec::write_async(&mut stream, &Reply::error(0, e.to_string())).await?;
            return linger(stream).await;
        }
    };
    tracing::info!(uid = ?caller, id = request.id, command = request.command.name(), "control: command");
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
        let text = std::fs::read_to_string(c).ok()?;
        let table = text.parse::<toml::Table>().ok()?;
        let path = PathBuf::from(table.get("global")?.get("control_socket")?.as_str()?);
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
