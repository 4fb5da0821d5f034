//! One HTTP/3 request stream: its head judged by the HTTP/2 codec's rules (the same
//! `RequestHead` checks, then `h2front::check_request`), then served by the HTTP/2 stream
//! path (`h2front::serve_stream`: routes, limits, auth, rewrites, compression, servers,
//! access log) through bridged handles, while two pumps move the bytes between the bridge
//! and the QUIC stream.
//!
//! Invariants: request bytes are read from QUIC only while the bridge has room (a stream
//! holds at most `http3.stream_window` of them, however fast the client sends); a body
//! longer or shorter than its `content-length` is a malformed request (RFC 9114 §4.1.2): the
//! stream is reset H3_MESSAGE_ERROR and the server sees an aborted request, never a wrong
//! one.

use std::rc::Rc;

use bytes::{Buf, Bytes};
use h3::error::Code;

use super::conn::Shared;
use crate::http::h2::Reason;
use crate::http::h2::RequestHead;
use crate::http::h2::head::HeadFault;
use crate::proxy::h2front::{self, Bridge, Output};

type Resolver = h3::server::RequestResolver<super::guard::GuardedConn, Bytes>;
type SendHalf = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
type RecvHalf = h3::server::RequestStream<super::guard::Guarded<h3_quinn::RecvStream>, Bytes>;

/// Serves one request stream to its end.
pub(super) async fn serve(conn: Rc<Shared>, resolver: Resolver) {
    let info = &conn.info;
    let ctx = &info.ctx;
    let (request, stream) = match resolver.resolve_request().await {
        Ok(r) => r,
        Err(e) => {
            // Malformed, over `max_field_section_size` (h3 answered 431), or cut short.
            tracing::debug!(peer = %info.peer, error = %e, "HTTP/3 request refused");
            return;
        }
    };
    ctx.stats.quic_streams.add(1);
    if let Some(f) = super::frontend_cell(ctx, info.frontend) {
        f.h3_streams.add(1);
    }
    let (parts, ()) = request.into_parts();
    let limit = ctx.shared.config.http3.max_field_section_size as usize;
    let (head, verdict) = decoded_head(&parts, limit);
    let (mut send, mut recv) = stream.split();
    match verdict {
        Ok(()) => {}
        Err(HeadFault::TooLarge) => {
            ctx.stats.h3_refused.add(1);
            let mut resp = http::Response::new(());
            *resp.status_mut() = http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
            if send.send_response(resp).await.is_ok() {
                let _ = send.finish().await;
            }
            return;
        }
        Err(HeadFault::Malformed(why)) => {
            ctx.stats.h3_refused.add(1);
            tracing::debug!(peer = %info.peer, why, "HTTP/3 request malformed");
            recv.stop_sending(Code::H3_MESSAGE_ERROR);
            send.stop_stream(Code::H3_MESSAGE_ERROR);
            return;
        }
    }
    let checked = h2front::check_request(&head, false);
    let Some(mut parts) = h2front::request_parts(&head, info.header_map()) else {
        recv.stop_sending(Code::H3_MESSAGE_ERROR);
        send.stop_stream(Code::H3_MESSAGE_ERROR);
        return;
    };
    if conn.early.get() {
        // Early data may be a replay (RFC 8470): only a safe method goes on, marked so
        // that its server can still say 425; any other waits for nothing and gets 425.
        if !parts.method.is_safe() {
            ctx.stats.http_proxy_4xx.add(1);
            ctx.stats.h3_refused.add(1);
            let mut resp = http::Response::new(());
            *resp.status_mut() = http::StatusCode::TOO_EARLY;
            if send.send_response(resp).await.is_ok() {
                let _ = send.finish().await;
            }
            return;
        }
        parts.headers.insert(
            http::HeaderName::from_static("early-data"),
            http::HeaderValue::from_static("1"),
        );
    }
    let content_length = checked.as_ref().ok().and_then(|c| c.content_length);
    // Whether a body follows decides how the server is sent the request (no body, a
    // length, or chunked): a request without `content-length` shows by its first DATA or
    // its end, which for a GET come with the head.
    let first = if content_length.is_some_and(|n| n > 0) || parts.headers.contains_key(http::header::EXPECT) {
        First::Body
    } else {
        first_piece(&mut recv, ctx.shared.config.timeouts.http_request).await
    };
    let window = ctx.shared.config.http3.stream_window as usize;
    let bridge = Rc::new(Bridge::new(window, matches!(first, First::End(None))));
    let mut received = 0u64;
    match first {
        First::Data(d) => {
            received = d.len() as u64;
            bridge.push_data(d);
        }
        First::End(Some(trailers)) => bridge.end_recv(Some(trailers)),
        First::Reset => {
            bridge.client_reset(Reason::CANCEL);
            conn.client_reset();
        }
        First::Body | First::End(None) => {}
    }
    let (body, respond) = h2front::bridged(&bridge);
    let request = http::Request::from_parts(parts, body);
    let serving = h2front::serve_stream(Rc::clone(info), checked, request, respond);
    let upload = pump_in(&conn, &bridge, recv, content_length, received);
    let download = pump_out(&conn, &bridge, send);
    tokio::join!(serving, upload, download);
}

/// The fields of a head the h3 crate decoded, in the order the HTTP/2 codec reads them.
fn decoded_head(parts: &http::request::Parts, limit: usize) -> (RequestHead, Result<(), HeadFault>) {
    let scheme = parts.uri.scheme_str().unwrap_or_default();
    let authority = parts.uri.authority().map(|a| a.as_str());
    let path = parts.uri.path_and_query().map_or("", |p| p.as_str());
    let mut pseudo: Vec<(&[u8], &[u8])> = Vec::with_capacity(4);
    pseudo.push((b":method", parts.method.as_str().as_bytes()));
    if !scheme.is_empty() {
        pseudo.push((b":scheme", scheme.as_bytes()));
    }
    if let Some(a) = authority {
        pseudo.push((b":authority", a.as_bytes()));
    }
    if !path.is_empty() {
        pseudo.push((b":path", path.as_bytes()));
    }
    let fields = parts.headers.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
    RequestHead::from_decoded(pseudo.into_iter().chain(fields), limit)
}

/// What a request stream showed first after its head.
enum First {
    /// A body is announced: the pump reads it.
    Body,
    Data(Bytes),
    /// The request ended there (with trailers, rarely).
    End(Option<http::HeaderMap>),
    Reset,
}

/// The first piece of a body without a length, or its end, within `wait`; a client that
/// sends neither is treated as sending a body (its timeouts then apply).
async fn first_piece(recv: &mut RecvHalf, wait: std::time::Duration) -> First {
    match tokio::time::timeout(wait, recv.recv_data()).await {
        Ok(Ok(Some(mut buf))) => First::Data(buf.copy_to_bytes(buf.remaining())),
        Ok(Ok(None)) => match recv.recv_trailers().await {
            Ok(t) => First::End(t),
            Err(_) => First::Reset,
        },
        Ok(Err(_)) => First::Reset,
        Err(_) => First::Body,
    }
}

/// Request body bytes from QUIC into the bridge, as the bridge has room.
async fn pump_in(conn: &Shared, bridge: &Bridge, mut recv: RecvHalf, length: Option<u64>, mut received: u64) {
    // Bounded: each round moves one DATA frame's bytes or ends the body.
    loop {
        if bridge.is_done_receiving() {
            return;
        }
        let room = std::future::poll_fn(|cx| bridge.poll_recv_room(cx)).await;
        if room == 0 {
            recv.stop_sending(Code::H3_NO_ERROR);
            return;
        }
        match recv.recv_data().await {
            Ok(Some(mut buf)) => {
                let data = buf.copy_to_bytes(buf.remaining());
                received += data.len() as u64;
                if length.is_some_and(|n| received > n) {
                    malformed(bridge, &mut recv);
                    return;
                }
                bridge.push_data(data);
            }
            Ok(None) => {
                if length.is_some_and(|n| received != n) {
                    malformed(bridge, &mut recv);
                    return;
                }
                let trailers = recv.recv_trailers().await.unwrap_or(None);
                bridge.end_recv(trailers);
                return;
            }
            Err(e) => {
                tracing::debug!(peer = %conn.info.peer, error = %e, "HTTP/3 request body ended early");
                bridge.client_reset(Reason::CANCEL);
                conn.client_reset();
                return;
            }
        }
    }
}

fn malformed(bridge: &Bridge, recv: &mut RecvHalf) {
    recv.stop_sending(Code::H3_MESSAGE_ERROR);
    bridge.client_reset(Reason::PROTOCOL_ERROR);
}

/// The response from the bridge onto QUIC, in order.
async fn pump_out(conn: &Shared, bridge: &Bridge, mut send: SendHalf) {
    // Bounded: each round sends one head, piece or ending.
    loop {
        let next = std::future::poll_fn(|cx| bridge.poll_output(cx)).await;
        let sent = match next {
            Output::Interim(status, headers) | Output::Head(status, headers, false) => {
                send.send_response(response(status, headers)).await
            }
            Output::Head(status, headers, true) => match send.send_response(response(status, headers)).await {
                Ok(()) => {
                    let _ = send.finish().await;
                    return;
                }
                Err(e) => Err(e),
            },
            Output::Data(data, end) => {
                // As the HTTP/2 path counts its DATA payload (QUIC framing aside).
                conn.info.ctx.stats.bytes_to_client.add(data.len() as u64);
                let sent = if data.is_empty() {
                    Ok(())
                } else {
                    send.send_data(data).await
                };
                if sent.is_ok() && end {
                    let _ = send.finish().await;
                    return;
                }
                sent
            }
            Output::Trailers(trailers) => {
                if send.send_trailers(trailers).await.is_ok() {
                    let _ = send.finish().await;
                }
                return;
            }
            Output::Reset(code) => {
                send.stop_stream(h3_code(code));
                return;
            }
            Output::Done => return,
        };
        if let Err(e) = sent {
            // The client stopped reading (STOP_SENDING) or the connection is gone.
            tracing::debug!(peer = %conn.info.peer, error = %e, "HTTP/3 response cut short");
            bridge.client_reset(Reason::CANCEL);
            conn.client_reset();
            return;
        }
    }
}

fn response(status: u16, headers: http::HeaderMap) -> http::Response<()> {
    let mut resp = http::Response::new(());
    *resp.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    *resp.headers_mut() = headers;
    resp
}

/// The HTTP/3 code for an HTTP/2 reset reason (RFC 9114 §A.4).
fn h3_code(reason: Reason) -> Code {
    match reason {
        Reason::NO_ERROR => Code::H3_NO_ERROR,
        Reason::REFUSED_STREAM => Code::H3_REQUEST_REJECTED,
        Reason::CANCEL => Code::H3_REQUEST_CANCELLED,
        Reason::ENHANCE_YOUR_CALM => Code::H3_EXCESSIVE_LOAD,
        Reason::PROTOCOL_ERROR => Code::H3_MESSAGE_ERROR,
        _ => Code::H3_INTERNAL_ERROR,
    }
}
