//! Built-in demo origins: tiny HTTP/1.1 servers on loopback that answer every request with
//! their own name. The embedded default config balances across two of them so a fresh
//! `tollgate` shows load balancing with nothing else installed; tests use them too.
//!
//! They run on their own thread and runtime, apart from the proxy's workers. They are demo
//! servers: keep-alive, Content-Length request bodies, nothing more.

use std::io;
use std::net::SocketAddr;
use std::thread::JoinHandle;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

pub struct Origins {
    pub addrs: Vec<(String, SocketAddr)>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Origins {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts one origin per name on 127.0.0.1, each on a port the kernel picks.
pub fn spawn(names: &[&str]) -> io::Result<Origins> {
    let mut listeners = Vec::new();
    let mut addrs = Vec::new();
    for name in names {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.set_nonblocking(true)?;
        addrs.push((name.to_string(), l.local_addr()?));
        listeners.push((name.to_string(), l));
    }
    let (stop, stopped) = oneshot::channel();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let thread = std::thread::Builder::new()
        .name("tollgate-origins".into())
        .spawn(move || {
            rt.block_on(async move {
                let local = tokio::task::LocalSet::new();
                local
                    .run_until(async move {
                        for (name, l) in listeners {
                            if let Ok(l) = TcpListener::from_std(l) {
                                tokio::task::spawn_local(accept(name, l));
                            }
                        }
                        let _ = stopped.await;
                    })
                    .await;
            });
        })?;
    Ok(Origins {
        addrs,
        stop: Some(stop),
        thread: Some(thread),
    })
}

async fn accept(name: String, listener: TcpListener) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::task::spawn_local(answer(name.clone(), stream));
    }
}

/// Answers requests on one connection until the client closes or asks to.
async fn answer(name: String, mut stream: TcpStream) -> io::Result<()> {
    let body = format!("Hello from {name}\n");
    let mut buf = Vec::with_capacity(4096);
    loop {
        let head_end = loop {
            if let Some(end) = find_head_end(&buf) {
                break end;
            }
            if buf.len() > 64 * 1024 {
                return Ok(());
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        };
        let head = String::from_utf8_lossy(buf.get(..head_end).unwrap_or_default()).to_ascii_lowercase();
        let body_len: usize = header(&head, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let close = header(&head, "connection").is_some_and(|v| v.contains("close")) || head.contains("http/1.0\r");
        let head_only = head.starts_with("head ");
        // Discard the request body.
        let mut need = head_end + body_len;
        while buf.len() < need {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        }
        need = need.min(buf.len());
        buf.drain(..need);
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nX-Served-By: {name}\r\n{}\r\n{}",
            body.len(),
            if close { "Connection: close\r\n" } else { "" },
            if head_only { "" } else { body.as_str() },
        );
        stream.write_all(response.as_bytes()).await?;
        if close {
            return Ok(());
        }
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        (n.trim() == name).then(|| v.trim())
    })
}
