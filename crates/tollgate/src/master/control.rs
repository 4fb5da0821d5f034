//! The master's control socket (`global.control_socket`, a Unix stream socket) and its client.
//!
//! Protocol: the client sends one command line (`reload` or `status`); the master answers
//! `ok` or `error` on the first line, then free text, and closes. A reload answers only once
//! it is over (new generation ready and the old one told to stop, or the reason it was
//! refused), so `tollgate reload` can exit with the outcome.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot};

/// What a control connection asks the master loop to do.
pub enum Request {
    Reload(oneshot::Sender<Reply>),
    Status(oneshot::Sender<Reply>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub ok: bool,
    pub text: String,
}

/// Longest a client waits for an answer (a reload waits for the new worker's READY).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// Binds the control socket, replacing a stale one (a socket file nobody answers on).
pub fn bind(path: &Path) -> io::Result<UnixListener> {
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
    UnixListener::bind(path)
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

async fn session(stream: tokio::net::UnixStream, requests: mpsc::UnboundedSender<Request>) -> io::Result<()> {
    let (rd, mut wr) = stream.into_split();
    let mut line = String::new();
    let mut rd = BufReader::new(rd).take(1024);
    tokio::time::timeout(Duration::from_secs(10), rd.read_line(&mut line))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
    let (tx, rx) = oneshot::channel();
    let request = match line.trim() {
        "reload" => Request::Reload(tx),
        "status" => Request::Status(tx),
        other => {
            let text = format!("error\nunknown command `{other}` (known: reload, status)\n");
            return wr.write_all(text.as_bytes()).await;
        }
    };
    if requests.send(request).is_err() {
        return wr.write_all(b"error\nmaster is exiting\n").await;
    }
    let reply = rx.await.unwrap_or(Reply {
        ok: false,
        text: "master is exiting".into(),
    });
    let head = if reply.ok { "ok" } else { "error" };
    wr.write_all(format!("{head}\n{}\n", reply.text.trim_end()).as_bytes())
        .await?;
    wr.shutdown().await
}

/// Client side: sends `command`, waits for the answer.
pub fn request(path: &Path, command: &str) -> io::Result<Reply> {
    let mut s = UnixStream::connect(path)
        .map_err(|e| io::Error::new(e.kind(), format!("connect to the master at {}: {e}", path.display())))?;
    s.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    s.write_all(format!("{command}\n").as_bytes())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    let (head, text) = answer.split_once('\n').unwrap_or((answer.as_str(), ""));
    match head {
        "ok" | "error" => Ok(Reply {
            ok: head == "ok",
            text: text.trim_end().to_string(),
        }),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected answer from the master: {answer:?}"),
        )),
    }
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
