//! An HTTP/2 origin (hyperium `h2` server) on a loopback port: plain h2c with prior
//! knowledge, or TLS with whatever ALPN its rustls config offers. Counts connections and
//! streams (total, open at once, peak) so tests can see multiplexing and `maxconn`.
//!
//! Paths: `/echo` streams the request body back; `/size/N` answers N pattern bytes with
//! a content-length; `/trailers` answers `hello` then trailers (`x-checksum`,
//! `grpc-status`); `/slow/MS` answers after MS milliseconds; `/headers` answers the request
//! line and headers as it saw them; `/stream/N` sends N pieces 20 ms apart (no length);
//! `/kill` closes the whole connection without answering; `/kill-mid` answers the head and
//! a piece of a longer body, then closes the connection; `/grpc-echo` is a gRPC-shaped echo
//! (each piece echoed as it arrives, request trailers echoed, `grpc-status: 0`),
//! `/grpc-kill` closes the connection after echoing the first piece, `/grpc-count` answers
//! only once the request ended (client streaming); `/reset-mid` sends
//! a head and a piece, then RST_STREAM.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;

#[derive(Clone, Default)]
pub struct H2Options {
    /// Serve TLS with this config (its ALPN as given: set `alpn_protocols` to `h2`).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// SETTINGS_MAX_CONCURRENT_STREAMS announced (none: unlimited).
    pub max_concurrent_streams: Option<u32>,
    /// Send GOAWAY (graceful) after accepting this many streams on a connection.
    pub goaway_after: Option<usize>,
}

#[derive(Default)]
pub struct Counts {
    pub connections: AtomicUsize,
    /// Connections that have ended (closed by either side).
    pub closed: AtomicUsize,
    pub streams: AtomicUsize,
    pub active: AtomicUsize,
    pub peak: AtomicUsize,
}

pub struct H2Origin {
    pub addr: SocketAddr,
    pub counts: Arc<Counts>,
}

impl H2Origin {
    pub fn connections(&self) -> usize {
        self.counts.connections.load(Ordering::SeqCst)
    }
    pub fn closed(&self) -> usize {
        self.counts.closed.load(Ordering::SeqCst)
    }
    pub fn streams(&self) -> usize {
        self.counts.streams.load(Ordering::SeqCst)
    }
    pub fn peak(&self) -> usize {
        self.counts.peak.load(Ordering::SeqCst)
    }
}

/// The byte at `offset` of every pattern body.
pub fn pattern_byte(offset: u64) -> u8 {
    (offset % 251) as u8
}

/// Pattern bytes `offset..offset + len`.
pub fn pattern(offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| pattern_byte(offset + i)).collect()
}

/// A TLS server config for the origin offering exactly `alpn`.
pub fn with_alpn(config: Arc<rustls::ServerConfig>, alpn: &[&[u8]]) -> Arc<rustls::ServerConfig> {
    let mut c = (*config).clone();
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(c)
}

pub fn h2_origin(opts: H2Options) -> H2Origin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let counts = Arc::new(Counts::default());
    let c = counts.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let Ok((s, _)) = listener.accept().await else { continue };
                let _ = s.set_nodelay(true);
                c.connections.fetch_add(1, Ordering::SeqCst);
                let (opts, c) = (opts.clone(), c.clone());
                tokio::spawn(async move {
                    match opts.tls.clone() {
                        Some(config) => {
                            let acceptor = tokio_rustls::TlsAcceptor::from(config);
                            if let Ok(tls) = acceptor.accept(s).await {
                                serve_conn(tls, opts, c.clone()).await;
                            }
                        }
                        None => serve_conn(s, opts, c.clone()).await,
                    }
                    c.closed.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
    });
    H2Origin { addr, counts }
}

async fn serve_conn<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: T, opts: H2Options, c: Arc<Counts>) {
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(1 << 20)
        .initial_connection_window_size(4 << 20);
    if let Some(n) = opts.max_concurrent_streams {
        builder.max_concurrent_streams(n);
    }
    let Ok(mut conn) = builder.handshake::<_, Bytes>(io).await else {
        return;
    };
    let kill = Arc::new(Notify::new());
    let mut accepted = 0usize;
    loop {
        tokio::select! {
            next = conn.accept() => match next {
                Some(Ok((req, respond))) => {
                    accepted += 1;
                    c.streams.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(handle(req, respond, kill.clone(), c.clone()));
                    if opts.goaway_after == Some(accepted) {
                        conn.graceful_shutdown();
                    }
                }
                _ => break,
            },
            () = kill.notified() => break,
        }
    }
}

async fn handle(
    req: http::Request<h2::RecvStream>,
    mut respond: SendResponse<Bytes>,
    kill: Arc<Notify>,
    c: Arc<Counts>,
) {
    let now = c.active.fetch_add(1, Ordering::SeqCst) + 1;
    c.peak.fetch_max(now, Ordering::SeqCst);
    let (parts, mut body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let arg = |prefix: &str| path.strip_prefix(prefix).and_then(|n| n.parse::<u64>().ok());
    // Every answer names its origin: what a proxy keeps of response fields is visible.
    let ok = || http::Response::builder().status(200).header("x-origin", "h2");
    let _ = async {
        if path == "/echo" {
            let mut send = respond.send_response(ok().body(()).unwrap(), false)?;
            while let Some(data) = body.data().await {
                let data = data?;
                let _ = body.flow_control().release_capacity(data.len());
                send_all(&mut send, data, false).await?;
            }
            send.send_data(Bytes::new(), true)?;
        } else if let Some((n, typed)) = arg("/size/")
            .map(|n| (n, false))
            .or_else(|| arg("/text/").map(|n| (n, true)))
        {
            // `n` pattern bytes with their length; `/text/` types them as text (what
            // compression takes).
            drain(&mut body).await;
            let mut head = ok().header("content-length", n);
            if typed {
                head = head.header("content-type", "text/plain");
            }
            let mut send = respond.send_response(head.body(()).unwrap(), n == 0)?;
            let mut off = 0u64;
            while off < n {
                let len = (n - off).min(64 * 1024);
                send_all(&mut send, Bytes::from(pattern(off, len as usize)), off + len == n).await?;
                off += len;
            }
        } else if let Some(n) = arg("/text-stream/") {
            // `n` events, 20 ms apart, as server-sent events.
            drain(&mut body).await;
            let head = ok().header("content-type", "text/event-stream").body(()).unwrap();
            let mut send = respond.send_response(head, false)?;
            for i in 0..n {
                send_all(&mut send, Bytes::from(format!("data: event {i}\n\n")), false).await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            send.send_data(Bytes::new(), true)?;
        } else if path == "/trailers" {
            drain(&mut body).await;
            let mut send = respond.send_response(ok().body(()).unwrap(), false)?;
            send_all(&mut send, Bytes::from_static(b"hello"), false).await?;
            let mut trailers = http::HeaderMap::new();
            trailers.insert("x-checksum", http::HeaderValue::from_static("5"));
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            send.send_trailers(trailers)?;
        } else if let Some(ms) = arg("/slow/") {
            drain(&mut body).await;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let mut send = respond.send_response(ok().body(()).unwrap(), false)?;
            send_all(&mut send, Bytes::from_static(b"slow"), true).await?;
        } else if path == "/headers" {
            drain(&mut body).await;
            let mut text = format!("{} {}\n", parts.method, parts.uri);
            for (name, value) in &parts.headers {
                text.push_str(&format!("{name}: {}\n", String::from_utf8_lossy(value.as_bytes())));
            }
            let mut send = respond.send_response(ok().body(()).unwrap(), false)?;
            send_all(&mut send, Bytes::from(text), true).await?;
        } else if let Some(n) = arg("/stream/") {
            drain(&mut body).await;
            let mut send = respond.send_response(ok().body(()).unwrap(), false)?;
            for i in 0..n {
                send_all(&mut send, Bytes::from(format!("piece {i}\n")), false).await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            send.send_data(Bytes::new(), true)?;
        } else if path == "/grpc-echo" || path == "/grpc-kill" {
            // gRPC-shaped: the head at once, each piece echoed as it comes (a bidirectional
            // call), then `grpc-status: 0` and the request's trailers as `x-echo-<name>`;
            // `/grpc-kill` dies after echoing the first piece.
            let head = ok().header("content-type", "application/grpc").body(()).unwrap();
            let mut send = respond.send_response(head, false)?;
            while let Some(data) = body.data().await {
                let data = data?;
                let _ = body.flow_control().release_capacity(data.len());
                send_all(&mut send, data, false).await?;
                if path == "/grpc-kill" {
                    // The head and echo leave first: the proxy has answered when the server dies.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    kill.notify_one();
                    return Ok(());
                }
            }
            let mut trailers = http::HeaderMap::new();
            if let Some(up) = body.trailers().await? {
                for (name, value) in &up {
                    let echoed = http::HeaderName::from_bytes(format!("x-echo-{name}").as_bytes()).unwrap();
                    trailers.append(echoed, value.clone());
                }
            }
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            send.send_trailers(trailers)?;
        } else if path == "/grpc-count" {
            // Client streaming: nothing until the request ends, then one message (the byte
            // count as text, gRPC-framed) and `grpc-status: 0`.
            let mut total = 0usize;
            while let Some(data) = body.data().await {
                let data = data?;
                total += data.len();
                let _ = body.flow_control().release_capacity(data.len());
            }
            let text = total.to_string();
            let mut message = vec![0u8];
            message.extend_from_slice(&(text.len() as u32).to_be_bytes());
            message.extend_from_slice(text.as_bytes());
            let head = ok().header("content-type", "application/grpc").body(()).unwrap();
            let mut send = respond.send_response(head, false)?;
            send_all(&mut send, Bytes::from(message), false).await?;
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            send.send_trailers(trailers)?;
        } else if path == "/reset-mid" {
            drain(&mut body).await;
            let mut send = respond.send_response(ok().body(()).unwrap(), false)?;
            send_all(&mut send, Bytes::from_static(b"partial"), false).await?;
            // A reset drops what h2 still queues for the stream: let the head and piece go.
            tokio::time::sleep(Duration::from_millis(50)).await;
            send.send_reset(h2::Reason::INTERNAL_ERROR);
        } else if path == "/kill" {
            kill.notify_one();
        } else if path == "/kill-mid" {
            let head = ok().header("content-length", 1_000_000).body(()).unwrap();
            let mut send = respond.send_response(head, false)?;
            send_all(&mut send, Bytes::from(pattern(0, 1000)), false).await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
            kill.notify_one();
        } else {
            respond.send_response(http::Response::builder().status(404).body(()).unwrap(), true)?;
        }
        Ok::<(), h2::Error>(())
    }
    .await;
    c.active.fetch_sub(1, Ordering::SeqCst);
}

async fn drain(body: &mut h2::RecvStream) {
    while let Some(Ok(data)) = body.data().await {
        let _ = body.flow_control().release_capacity(data.len());
    }
}

/// Sends `data` under flow control.
async fn send_all(send: &mut h2::SendStream<Bytes>, mut data: Bytes, end: bool) -> Result<(), h2::Error> {
    if data.is_empty() {
        return send.send_data(data, end);
    }
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let n = match std::future::poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(n) => n?,
            None => return Err(h2::Reason::CANCEL.into()),
        };
        let chunk = data.split_to(n.min(data.len()));
        send.send_data(chunk, end && data.is_empty())?;
    }
    Ok(())
}
