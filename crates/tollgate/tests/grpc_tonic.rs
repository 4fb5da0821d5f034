//! gRPC through tollgate with a real tonic server and a real tonic client (issue 13): the
//! server is h2c (`proto = "h2"`), the client speaks h2c to an `h2c = true` frontend, and once
//! over TLS to an `alpn = ["h2"]` frontend. Cases: unary; bidirectional streaming (ping-pong,
//! then a burst, replies checked in order); server streaming of 32 MiB; the server killed
//! mid-stream (the client reads UNAVAILABLE from tollgate's trailers, not a transport error);
//! a call with a deadline that outlives both idle timeouts because messages keep flowing;
//! ascii and `-bin` metadata both ways, and `grpc-message` with percent-encoded text in
//! trailers-only answers and in trailers after DATA.
//!
//! No protoc: the messages are derived with prost, and the service glue (what tonic's
//! codegen would write) is written out below, as small as tonic's server and client API allow.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::thread;
use std::time::{Duration, Instant};

use common::Proxy;
use common::tls::{Ca, TempDir, cert_entry};
use http::uri::PathAndQuery;
use tonic::codegen::tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::server::{NamedService, ServerStreamingService, StreamingService, UnaryService};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status, Streaming};
use tonic_prost::ProstCodec;

/// One message both ways: a sequence number, a payload, and (requests only) a failure the
/// server should answer with.
#[derive(Clone, PartialEq, prost::Message)]
struct Msg {
    #[prost(uint64, tag = "1")]
    seq: u64,
    #[prost(bytes = "vec", tag = "2")]
    data: Vec<u8>,
    #[prost(string, tag = "3")]
    fail: String,
}

/// A server-streaming request: `count` messages of `size` bytes, `gap_ms` apart, then
/// `fail` as the final status when not empty.
#[derive(Clone, PartialEq, prost::Message)]
struct Ask {
    #[prost(uint64, tag = "1")]
    count: u64,
    #[prost(uint32, tag = "2")]
    size: u32,
    #[prost(uint32, tag = "3")]
    gap_ms: u32,
    #[prost(string, tag = "4")]
    fail: String,
}

const UNARY: &str = "/test.Echo/Unary";
const CHAT: &str = "/test.Echo/Chat";
const DOWNLOAD: &str = "/test.Echo/Download";

/// Text that `grpc-message` must carry percent-encoded (RFC 3986 unreserved stays as is).
const AWKWARD: &str = "100% broken: ünïcode, tab\there\r\nand a newline";

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Status>> + Send>>;
type MsgStream = ReceiverStream<Result<Msg, Status>>;

// ---- the tonic server ----

/// The service: routes by path as tonic's generated code does.
#[derive(Clone)]
struct Echo;

impl NamedService for Echo {
    const NAME: &'static str = "test.Echo";
}

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for Echo {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            let path = req.uri().path().to_string();
            Ok(match path.as_str() {
                UNARY => tonic::server::Grpc::new(ProstCodec::default()).unary(Unary, req).await,
                CHAT => {
                    tonic::server::Grpc::new(ProstCodec::default())
                        .streaming(Chat, req)
                        .await
                }
                DOWNLOAD => {
                    tonic::server::Grpc::new(ProstCodec::default())
                        .server_streaming(Download, req)
                        .await
                }
                _ => Status::unimplemented(path).into_http(),
            })
        })
    }
}

/// Answers `seq + 1` and the payload reversed, echoes `x-note` and `x-blob-bin` (and the
/// `grpc-timeout` it was given) as response metadata; fails with `fail` when set.
struct Unary;

impl UnaryService<Msg> for Unary {
    type Response = Msg;
    type Future = BoxFuture<tonic::Response<Msg>>;

    fn call(&mut self, req: tonic::Request<Msg>) -> Self::Future {
        Box::pin(async move {
            let seen = req.metadata().clone();
            let msg = req.into_inner();
            if !msg.fail.is_empty() {
                return Err(Status::with_metadata(
                    Code::FailedPrecondition,
                    msg.fail,
                    why_metadata(),
                ));
            }
            let mut reply = tonic::Response::new(Msg {
                seq: msg.seq + 1,
                data: msg.data.iter().rev().copied().collect(),
                fail: String::new(),
            });
            let md = reply.metadata_mut();
            if let Some(v) = seen.get("x-note") {
                md.insert("x-note-echo", v.clone());
            }
            if let Some(v) = seen.get_bin("x-blob-bin") {
                md.insert_bin("x-blob-echo-bin", v.clone());
            }
            if let Some(v) = seen.get("grpc-timeout") {
                md.insert("x-saw-timeout", v.clone());
            }
            Ok(reply)
        })
    }
}

/// Bidirectional: each message back as it arrives, payload reversed.
struct Chat;

impl StreamingService<Msg> for Chat {
    type Response = Msg;
    type ResponseStream = MsgStream;
    type Future = BoxFuture<tonic::Response<MsgStream>>;

    fn call(&mut self, req: tonic::Request<Streaming<Msg>>) -> Self::Future {
        Box::pin(async move {
            let mut incoming = req.into_inner();
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            tokio::spawn(async move {
                while let Ok(Some(m)) = incoming.message().await {
                    let reply = Msg {
                        seq: m.seq,
                        data: m.data.iter().rev().copied().collect(),
                        fail: String::new(),
                    };
                    if tx.send(Ok(reply)).await.is_err() {
                        return;
                    }
                }
            });
            Ok(tonic::Response::new(ReceiverStream::new(rx)))
        })
    }
}

/// Server streaming as [`Ask`] says; message `i` is `size` bytes of `i % 251`.
struct Download;

impl ServerStreamingService<Ask> for Download {
    type Response = Msg;
    type ResponseStream = MsgStream;
    type Future = BoxFuture<tonic::Response<MsgStream>>;

    fn call(&mut self, req: tonic::Request<Ask>) -> Self::Future {
        Box::pin(async move {
            let ask = req.into_inner();
            let (tx, rx) = tokio::sync::mpsc::channel(4);
            tokio::spawn(async move {
                for seq in 0..ask.count {
                    if seq > 0 && ask.gap_ms > 0 {
                        tokio::time::sleep(Duration::from_millis(ask.gap_ms.into())).await;
                    }
                    let m = Msg {
                        seq,
                        data: vec![(seq % 251) as u8; ask.size as usize],
                        fail: String::new(),
                    };
                    if tx.send(Ok(m)).await.is_err() {
                        return;
                    }
                }
                if !ask.fail.is_empty() {
                    let _ = tx
                        .send(Err(Status::with_metadata(Code::Aborted, ask.fail, why_metadata())))
                        .await;
                }
            });
            Ok(tonic::Response::new(ReceiverStream::new(rx)))
        })
    }
}

/// Metadata a failing answer carries (in trailers, or in a trailers-only head).
fn why_metadata() -> MetadataMap {
    let mut md = MetadataMap::new();
    md.insert("x-why", MetadataValue::from_static("because: tests"));
    md.insert_bin("x-why-bin", MetadataValue::from_bytes(&[0, 1, 0xfe, 0xff, b'\n']));
    md
}

/// A tonic h2c server on its own thread and runtime; `kill` drops that runtime, closing
/// every connection at once (a crashed server, not a graceful GOAWAY).
struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Server {
    fn start() -> Server {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = thread::spawn(move || {
            let rt = runtime();
            rt.block_on(async move {
                let incoming = TcpListenerStream::new(tokio::net::TcpListener::from_std(listener).unwrap());
                let serve = tonic::transport::Server::builder()
                    .add_service(Echo)
                    .serve_with_incoming(incoming);
                tokio::select! {
                    r = serve => r.unwrap(),
                    _ = stopped => {}
                }
            });
            // Dropping the runtime drops every connection task: their sockets close.
            drop(rt);
        });
        Server {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn kill(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---- tollgate and the tonic client ----

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One frontend (`frontend_extra` added) to the tonic server as a `proto = "h2"` server.
fn config(server: SocketAddr, frontend_extra: &str, top: &str) -> String {
    format!(
        "[global]\nworkers = 1\n{top}\n[[frontend]]\nname = \"fe\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\n\
         default_backend = \"be\"\n{frontend_extra}\n\
         [[backend]]\nname = \"be\"\nmode = \"http\"\nproto = \"h2\"\n\
         [[backend.server]]\nname = \"tonic\"\naddress = \"{server}\"\n"
    )
}

/// A tonic client over h2c (prior knowledge) to `addr`.
async fn h2c_client(addr: SocketAddr) -> tonic::client::Grpc<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    tonic::client::Grpc::new(channel)
}

async fn unary(c: &mut tonic::client::Grpc<Channel>, req: tonic::Request<Msg>) -> Result<tonic::Response<Msg>, Status> {
    c.ready().await.unwrap();
    c.unary(req, PathAndQuery::from_static(UNARY), ProstCodec::default())
        .await
}

async fn download(c: &mut tonic::client::Grpc<Channel>, ask: Ask) -> Streaming<Msg> {
    c.ready().await.unwrap();
    let path = PathAndQuery::from_static(DOWNLOAD);
    c.server_streaming(tonic::Request::new(ask), path, ProstCodec::default())
        .await
        .unwrap()
        .into_inner()
}

/// A bidirectional call: the sender for the requests and the replies' stream.
async fn chat(
    c: &mut tonic::client::Grpc<Channel>,
    timeout: Option<Duration>,
) -> (tokio::sync::mpsc::Sender<Msg>, Streaming<Msg>) {
    c.ready().await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let mut req = tonic::Request::new(ReceiverStream::new(rx));
    if let Some(t) = timeout {
        req.set_timeout(t);
    }
    let path = PathAndQuery::from_static(CHAT);
    let replies = c
        .streaming(req, path, ProstCodec::default())
        .await
        .unwrap()
        .into_inner();
    (tx, replies)
}

fn msg(seq: u64, data: &[u8]) -> Msg {
    Msg {
        seq,
        data: data.to_vec(),
        fail: String::new(),
    }
}

/// A reply of the chat within 10 s, checked against what was sent.
async fn expect_reply(replies: &mut Streaming<Msg>, seq: u64, sent: &[u8]) {
    let m = tokio::time::timeout(Duration::from_secs(10), replies.message())
        .await
        .expect("reply within 10 s")
        .expect("a reply, not a failure")
        .expect("a reply, not the end");
    assert_eq!(m.seq, seq, "replies in order");
    assert!(m.data.iter().rev().eq(sent.iter()), "payload of {seq}");
}

fn payload(seq: u64) -> Vec<u8> {
    (0..(seq % 97 + 1) * 13).map(|i| (i + seq) as u8).collect()
}

// ---- the cases ----

#[test]
fn unary_and_bidirectional_streaming_through_h2c() {
    let server = Server::start();
    let proxy = Proxy::start(&config(server.addr, "h2c = true", ""));
    runtime().block_on(async move {
        let mut c = h2c_client(proxy.addr).await;
        let reply = unary(&mut c, tonic::Request::new(msg(41, b"abc"))).await.unwrap();
        assert_eq!(reply.get_ref().seq, 42);
        assert_eq!(reply.get_ref().data, b"cba");
        bidirectional(&mut c).await;
    });
}

/// 100 messages ping-pong (each reply awaited before the next request: the call is really
/// interleaved, nothing waits for the end of the request stream), then a burst of 200
/// without waiting, then the end of both streams and an OK status.
async fn bidirectional(c: &mut tonic::client::Grpc<Channel>) {
    let (tx, mut replies) = chat(c, None).await;
    for seq in 0..100 {
        let data = payload(seq);
        tx.send(msg(seq, &data)).await.unwrap();
        expect_reply(&mut replies, seq, &data).await;
    }
    let burst = tokio::spawn(async move {
        for seq in 100..300 {
            tx.send(msg(seq, &payload(seq))).await.unwrap();
        }
    });
    for seq in 100..300 {
        expect_reply(&mut replies, seq, &payload(seq)).await;
    }
    burst.await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), replies.message())
        .await
        .unwrap();
    assert!(matches!(end, Ok(None)), "the call ends OK: {end:?}");
}

#[test]
fn server_streaming_of_32_mib_arrives_whole_and_in_order() {
    let server = Server::start();
    let proxy = Proxy::start(&config(server.addr, "h2c = true", ""));
    runtime().block_on(async move {
        let mut c = h2c_client(proxy.addr).await;
        let (count, size) = (128u64, 256 * 1024u32);
        let mut stream = download(
            &mut c,
            Ask {
                count,
                size,
                gap_ms: 0,
                fail: String::new(),
            },
        )
        .await;
        let mut total = 0u64;
        for seq in 0..count {
            let m = tokio::time::timeout(Duration::from_secs(30), stream.message())
                .await
                .unwrap()
                .unwrap()
                .unwrap_or_else(|| panic!("stream ended after {seq} of {count} messages"));
            assert_eq!(m.seq, seq);
            assert_eq!(m.data.len(), size as usize);
            let b = (seq % 251) as u8;
            assert!(m.data.iter().all(|&x| x == b), "payload of message {seq}");
            total += m.data.len() as u64;
        }
        assert_eq!(total, 32 << 20);
        assert!(matches!(stream.message().await, Ok(None)), "then an OK end");
        let trailers = stream.trailers().await.unwrap().expect("trailers after an OK end");
        assert_eq!(trailers.get("grpc-status").unwrap(), "0", "{trailers:?}");
    });
}

#[test]
fn a_server_killed_mid_stream_is_unavailable_from_tollgate_not_a_transport_error() {
    let mut server = Server::start();
    let proxy = Proxy::start(&config(server.addr, "h2c = true", ""));
    runtime().block_on(async move {
        let mut c = h2c_client(proxy.addr).await;
        let mut stream = download(
            &mut c,
            Ask {
                count: 10_000,
                size: 512,
                gap_ms: 10,
                fail: String::new(),
            },
        )
        .await;
        for seq in 0..3 {
            let m = stream.message().await.unwrap().unwrap();
            assert_eq!(m.seq, seq);
        }
        server.kill();
        // Messages already on their way may still come; then the status, within bounds.
        let status = loop {
            match tokio::time::timeout(Duration::from_secs(10), stream.message())
                .await
                .unwrap()
            {
                Ok(Some(m)) => assert!(m.seq < 100, "the stream went on after the kill"),
                Ok(None) => panic!("the call ended OK after its server was killed"),
                Err(status) => break status,
            }
        };
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        // tollgate's own words (grpc-message in trailers), not tonic's view of a broken
        // connection: the client's connection to tollgate is fine.
        assert!(status.message().starts_with("proxy: "), "{status:?}");
        let reply = unary(&mut c, tonic::Request::new(msg(1, b"x"))).await;
        assert_eq!(reply.unwrap_err().code(), Code::Unavailable, "no server left");
    });
}

#[test]
fn a_deadline_call_busy_past_both_idle_timeouts_completes() {
    let server = Server::start();
    let top = "[timeouts]\nclient = \"400ms\"\nserver = \"400ms\"";
    let proxy = Proxy::start(&config(server.addr, "h2c = true", top));
    runtime().block_on(async move {
        let mut c = h2c_client(proxy.addr).await;
        let mut req = tonic::Request::new(msg(1, b"deadline"));
        req.set_timeout(Duration::from_secs(30));
        let reply = unary(&mut c, req).await.unwrap();
        let saw = reply
            .metadata()
            .get("x-saw-timeout")
            .expect("grpc-timeout reached the server");
        assert!(
            saw.to_str().unwrap().ends_with(['H', 'M', 'S', 'm', 'u', 'n']),
            "{saw:?}"
        );

        // 12 messages 120 ms apart both ways: ~1.4 s, far past both 400 ms idle limits,
        // well within the 30 s deadline.
        let (tx, mut replies) = chat(&mut c, Some(Duration::from_secs(30))).await;
        let began = Instant::now();
        for seq in 0..12 {
            if seq > 0 {
                tokio::time::sleep(Duration::from_millis(120)).await;
            }
            let data = payload(seq);
            tx.send(msg(seq, &data)).await.unwrap();
            expect_reply(&mut replies, seq, &data).await;
        }
        drop(tx);
        let end = tokio::time::timeout(Duration::from_secs(10), replies.message())
            .await
            .unwrap();
        assert!(matches!(end, Ok(None)), "the call ends OK: {end:?}");
        assert!(
            began.elapsed() > Duration::from_millis(1200),
            "the call outlived the idle timeouts"
        );

        // Server to client only (the request stream ended at once): as busy, as long.
        let mut stream = download(
            &mut c,
            Ask {
                count: 12,
                size: 64,
                gap_ms: 120,
                fail: String::new(),
            },
        )
        .await;
        for seq in 0..12 {
            let m = stream.message().await.unwrap().expect("every message");
            assert_eq!(m.seq, seq);
        }
        assert!(matches!(stream.message().await, Ok(None)));
    });
}

#[test]
fn metadata_both_ways_and_percent_encoded_grpc_message_arrive_intact() {
    let server = Server::start();
    let proxy = Proxy::start(&config(server.addr, "h2c = true", ""));
    runtime().block_on(async move {
        let mut c = h2c_client(proxy.addr).await;
        metadata_round_trips(&mut c).await;
    });
}

async fn metadata_round_trips(c: &mut tonic::client::Grpc<Channel>) {
    // Request metadata up, response head metadata down.
    let blob: &[u8] = &[0, 1, 2, b'\r', b'\n', 0xfe, 0xff];
    let mut req = tonic::Request::new(msg(7, b"meta"));
    req.metadata_mut()
        .insert("x-note", MetadataValue::from_static("hello, tollgate"));
    req.metadata_mut()
        .insert_bin("x-blob-bin", MetadataValue::from_bytes(blob));
    let reply = unary(c, req).await.unwrap();
    assert_eq!(reply.metadata().get("x-note-echo").unwrap(), "hello, tollgate");
    let echoed = reply.metadata().get_bin("x-blob-echo-bin").unwrap().to_bytes().unwrap();
    assert_eq!(&echoed[..], blob);

    // A trailers-only failure: status, percent-encoded message and metadata in the head.
    let mut failing = msg(8, b"");
    failing.fail = AWKWARD.to_string();
    let status = unary(c, tonic::Request::new(failing)).await.unwrap_err();
    assert_failure(&status, Code::FailedPrecondition);

    // A failure after DATA: the same in real trailers.
    let mut stream = download(
        c,
        Ask {
            count: 3,
            size: 100,
            gap_ms: 0,
            fail: AWKWARD.to_string(),
        },
    )
    .await;
    for seq in 0..3 {
        assert_eq!(stream.message().await.unwrap().unwrap().seq, seq);
    }
    let status = stream.message().await.unwrap_err();
    assert_failure(&status, Code::Aborted);
}

fn assert_failure(status: &Status, code: Code) {
    assert_eq!(status.code(), code, "{status:?}");
    assert_eq!(status.message(), AWKWARD, "grpc-message decoded back");
    assert_eq!(status.metadata().get("x-why").unwrap(), "because: tests");
    let why = status.metadata().get_bin("x-why-bin").unwrap().to_bytes().unwrap();
    assert_eq!(&why[..], &[0, 1, 0xfe, 0xff, b'\n']);
}

#[test]
fn over_a_tls_frontend_with_alpn_h2() {
    let server = Server::start();
    let dir = TempDir::new();
    let ca = Ca::new("grpc-tonic-ca");
    let leaf = ca.leaf(&["localhost"], "localhost", false).write(&dir, "web");
    let fe = format!("[frontend.tls]\nalpn = [\"h2\"]\n{}", cert_entry(&leaf, true));
    let proxy = Proxy::start(&config(server.addr, &fe, ""));
    let port = proxy.addr.port();
    runtime().block_on(async move {
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&ca.pem))
            .domain_name("localhost");
        let channel = Endpoint::from_shared(format!("https://127.0.0.1:{port}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap();
        let mut c = tonic::client::Grpc::new(channel);
        let reply = unary(&mut c, tonic::Request::new(msg(1, b"tls"))).await.unwrap();
        assert_eq!(reply.get_ref().data, b"slt");
        bidirectional(&mut c).await;
        metadata_round_trips(&mut c).await;
    });
}
