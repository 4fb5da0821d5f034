//! The codec against a real client: hyperium `h2` over an in-memory pipe, the server side a
//! small loop around `ServerConn` (read, receive, answer, write). Covers the handshake,
//! HPACK with Huffman and the dynamic table as a real encoder uses them, request bodies past
//! the default window (WINDOW_UPDATEs must flow), response bodies past the client's window
//! (SendWindow must wake the sender), trailers, and a graceful GOAWAY the client sees.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;

/// A response body still to send: the bytes, how far, trailers after it.
struct Pending {
    body: Vec<u8>,
    at: usize,
    trailers: bool,
}

/// An upload's answer: 200, its byte count as the body, then trailers.
fn answer_upload(conn: &mut ServerConn, pending: &mut HashMap<StreamId, Pending>, id: StreamId, len: usize) {
    conn.send_headers(id, 200, std::iter::empty(), false).unwrap();
    let body = len.to_string().into_bytes();
    pending.insert(
        id,
        Pending {
            body,
            at: 0,
            trailers: true,
        },
    );
}

fn pump(conn: &mut ServerConn, pending: &mut HashMap<StreamId, Pending>) {
    pending.retain(|&id, p| {
        let rest = &p.body[p.at..];
        let Ok(n) = conn.send_data(id, rest, !p.trailers) else {
            return false;
        };
        p.at += n;
        if p.at < p.body.len() {
            return true;
        }
        if p.trailers {
            let t: [(&[u8], &[u8]); 1] = [(b"x-body-len", b"ok")];
            conn.send_trailers(id, t.into_iter()).unwrap();
        }
        false
    });
}

async fn serve(mut io: DuplexStream, served: usize) -> usize {
    let mut conn = ServerConn::new(Settings {
        initial_stream_window: 65_535,
        ..Settings::default()
    });
    let mut buf = BytesMut::with_capacity(1 << 16);
    let mut pending: HashMap<StreamId, Pending> = HashMap::new();
    let mut uploads: HashMap<StreamId, (Vec<u8>, usize)> = HashMap::new();
    let mut requests = 0;
    loop {
        while !conn.output().is_empty() {
            // The client may close first once it has every answer.
            let Ok(n) = io.write(conn.output()).await else {
                return requests;
            };
            conn.consume_output(n);
        }
        if conn.is_done() {
            break;
        }
        if io.read_buf(&mut buf).await.unwrap() == 0 {
            break;
        }
        conn.receive(&mut buf, Instant::now()).unwrap();
        while let Some(e) = conn.poll_event() {
            match e {
                Event::Request { id, head, end_stream } => {
                    requests += 1;
                    let path = head.path().unwrap().to_vec();
                    assert_eq!(head.authority(), Some(&b"a.example"[..]));
                    assert_eq!(head.get(b"x-request"), Some(&b"interop"[..]));
                    conn.recycle(head);
                    if end_stream {
                        let body = if path == b"/big" {
                            vec![b'b'; 300_000]
                        } else {
                            b"hello".to_vec()
                        };
                        let f: [(&[u8], &[u8]); 1] = [(b"Content-Type", b"text/plain")];
                        conn.send_headers(id, 200, f.into_iter(), false).unwrap();
                        pending.insert(
                            id,
                            Pending {
                                body,
                                at: 0,
                                trailers: false,
                            },
                        );
                    } else {
                        uploads.insert(id, (path, 0));
                    }
                    if requests == served {
                        conn.goaway_graceful();
                    }
                }
                Event::Data { id, data, end_stream } => {
                    conn.release_data(id, data.len());
                    let up = uploads.get_mut(&id).unwrap();
                    up.1 += data.len();
                    if end_stream {
                        let len = up.1;
                        answer_upload(&mut conn, &mut pending, id, len);
                    }
                }
                Event::Trailers { id, fields } => {
                    assert_eq!(fields.get(b"x-checksum"), Some(&b"42"[..]));
                    conn.recycle_fields(fields);
                    answer_upload(&mut conn, &mut pending, id, uploads[&id].1);
                }
                Event::Reset { id, code, why } => panic!("{id:?} reset {code:?} {why:?}"),
                Event::HeadTooLarge { .. } => panic!("too large"),
                Event::SendWindow { .. } => {}
            }
        }
        pump(&mut conn, &mut pending);
    }
    requests
}

fn request(method: &str, path: &str) -> ::http::Request<()> {
    ::http::Request::builder()
        .method(method)
        .uri(format!("https://a.example{path}"))
        .header("x-request", "interop")
        .header("user-agent", "h2-interop-test")
        .body(())
        .unwrap()
}

async fn body_of(resp: ::http::Response<::h2::RecvStream>) -> (u16, Vec<u8>, Option<::http::HeaderMap>) {
    let status = resp.status().as_u16();
    let mut recv = resp.into_body();
    let mut body = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.unwrap();
        recv.flow_control().release_capacity(chunk.len()).unwrap();
        body.extend_from_slice(&chunk);
    }
    let trailers = recv.trailers().await.unwrap();
    (status, body, trailers)
}

async fn client(io: DuplexStream) {
    let (send, connection) = ::h2::client::handshake(io).await.unwrap();
    let driver = async move {
        let _ = connection.await;
    };
    let requests = async move {
        let mut send = send.ready().await.unwrap();
        // Small GETs, several on the same HPACK context.
        for _ in 0..3 {
            let (resp, _) = send.send_request(request("GET", "/"), true).unwrap();
            let (status, body, _) = body_of(resp.await.unwrap()).await;
            assert_eq!((status, &body[..]), (200, &b"hello"[..]));
            send = send.ready().await.unwrap();
        }
        // A response past the client's 64 KiB windows.
        let (resp, _) = send.send_request(request("GET", "/big"), true).unwrap();
        let (status, body, _) = body_of(resp.await.unwrap()).await;
        assert_eq!((status, body.len()), (200, 300_000));
        // An upload past our 64 KiB stream window, with trailers.
        let mut send = send.ready().await.unwrap();
        let (resp, mut up) = send.send_request(request("POST", "/up"), false).unwrap();
        // Whatever capacity the windows give, as a real sender does.
        let mut left = Bytes::from(vec![b'u'; 200_000]);
        while !left.is_empty() {
            up.reserve_capacity(left.len());
            let n = std::future::poll_fn(|cx| up.poll_capacity(cx)).await.unwrap().unwrap();
            up.send_data(left.split_to(n.min(left.len())), false).unwrap();
        }
        let mut t = ::http::HeaderMap::new();
        t.insert("x-checksum", "42".parse().unwrap());
        up.send_trailers(t).unwrap();
        let (status, body, trailers) = body_of(resp.await.unwrap()).await;
        assert_eq!((status, &body[..]), (200, &b"200000"[..]));
        assert_eq!(trailers.unwrap().get("x-body-len").unwrap(), "ok");
        // The server went away gracefully after this one: it is still answered.
        let mut send = send.ready().await.unwrap();
        let (resp, _) = send.send_request(request("GET", "/last"), true).unwrap();
        let (status, _, _) = body_of(resp.await.unwrap()).await;
        assert_eq!(status, 200);
    };
    tokio::join!(driver, requests);
}

#[test]
fn hyperium_h2_client_interop() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let served = rt.block_on(async {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let both = async { tokio::join!(serve(server_io, 6), client(client_io)).0 };
        tokio::time::timeout(std::time::Duration::from_secs(20), both)
            .await
            .expect("interop stalled")
    });
    assert_eq!(served, 6);
}
