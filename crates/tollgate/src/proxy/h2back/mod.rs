//! HTTP/2 to servers (`proto = "h2"`): a per-worker-thread pool of multiplexed connections
//! (`pool`) and a protocol-neutral exchange over them. A front codec (the HTTP/1 session
//! today, the HTTP/2 front later) hands over a request head as `http::request::Parts` and a
//! body, and gets back `http::response::Parts`, a body stream and trailers: the types
//! hyperium `h2` speaks, so no front knows HTTP/2 framing.
//!
//! Use: `proxy::http::server_conn::open` picks the server and gives `Back::H2(lease)` for an
//! HTTP/2 one; [`start`] sends the head and gives the request body's sender and the pending
//! response; [`PendingResponse::head`] gives the response head (interim 1xx heads to a
//! callback) and its [`ResponseBody`] (`data`, `release`, `trailers`). A proxy-side failure
//! of a gRPC call is answered with [`grpc::unavailable`].
//!
//! Owns: the connections (their streams count against the server's `maxconn` through the
//! caller's slot, one slot per stream), the mapping of HTTP/2 failures onto the one
//! `Error` type. Invariants: a request the server cannot have processed (refused stream,
//! above a GOAWAY's last stream id, or never sent because the connection was going away)
//! is the only HTTP/2 failure marked retryable; a connection that answers a new stream
//! with GOAWAY is retired on the spot.

pub(crate) mod grpc;
pub(crate) mod pool;

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use bytes::Bytes;
use h2::Reason;
use http::HeaderMap;

use crate::error::{Error, ErrorKind, Phase, Side};
pub(crate) use pool::{Lease, Pick};

/// The sending half of a stream's request body.
pub(crate) struct RequestBody {
    stream: h2::SendStream<Bytes>,
}

/// The response to a stream, not yet arrived. Holds the stream's lease.
pub(crate) struct PendingResponse {
    future: h2::client::ResponseFuture,
    lease: Lease,
}

/// A response body as it arrives, then its trailers. Holds the stream's lease: the
/// connection counts the stream until this is dropped.
pub(crate) struct ResponseBody {
    recv: h2::RecvStream,
    _lease: Lease,
}

/// Opens a stream on `lease`'s connection and sends the request head (`end_of_stream`:
/// there is no body). A connection that is going away is retired and the error is
/// retryable: the request never left.
pub(crate) async fn start(
    lease: Lease,
    head: http::request::Parts,
    end_of_stream: bool,
) -> Result<(RequestBody, PendingResponse), Error> {
    let mut send = lease.conn.send.clone();
    let request = http::Request::from_parts(head, ());
    let sent = match std::future::poll_fn(|cx| send.poll_ready(cx)).await {
        Ok(()) => send.send_request(request, end_of_stream),
        Err(e) => Err(e),
    };
    match sent {
        Ok((future, stream)) => Ok((RequestBody { stream }, PendingResponse { future, lease })),
        Err(e) => {
            lease.conn.retire();
            let unsent = e.is_go_away() || e.is_io() || e.reason() == Some(Reason::REFUSED_STREAM);
            Err(h2_error(e, "open stream", true).retryable(unsent))
        }
    }
}

impl RequestBody {
    /// Sends `data` as the server's flow control allows (waiting for window), ending the
    /// stream after it when `end`. Cancel-safe: what was not sent yet stays in `data`.
    pub(crate) async fn send(&mut self, data: &mut Bytes, end: bool) -> Result<(), Error> {
        if data.is_empty() {
            return self.finish(end);
        }
        while !data.is_empty() {
            self.stream.reserve_capacity(data.len());
            let granted = std::future::poll_fn(|cx| self.stream.poll_capacity(cx)).await;
            let n = match granted {
                Some(Ok(n)) => n.min(data.len()),
                Some(Err(e)) => return Err(h2_error(e, "send request body", false)),
                None => {
                    return Err(Error::new(
                        ErrorKind::PeerClosed,
                        Side::Back,
                        "stream closed by the server",
                    ));
                }
            };
            if n == 0 {
                continue;
            }
            let chunk = data.split_to(n);
            self.stream
                .send_data(chunk, end && data.is_empty())
                .map_err(|e| h2_error(e, "send request body", false))?;
        }
        Ok(())
    }

    /// Ends the stream with no more data (`end`), or does nothing.
    fn finish(&mut self, end: bool) -> Result<(), Error> {
        if end {
            self.stream
                .send_data(Bytes::new(), true)
                .map_err(|e| h2_error(e, "end request body", false))?;
        }
        Ok(())
    }

    /// Ends the stream with trailers.
    pub(crate) fn trailers(mut self, trailers: HeaderMap) -> Result<(), Error> {
        self.stream
            .send_trailers(trailers)
            .map_err(|e| h2_error(e, "send request trailers", false))
    }

    /// Gives up on the request (the client went away): the server sees RST_STREAM CANCEL.
    pub(crate) fn cancel(mut self) {
        self.stream.send_reset(Reason::CANCEL);
    }
}

impl PendingResponse {
    /// The response head, each interim (1xx) response handed to `interim` as it comes. A
    /// failure here is in `Phase::Headers`: the client can still be answered.
    pub(crate) async fn head(
        self,
        mut interim: impl FnMut(http::Response<()>),
    ) -> Result<(http::response::Parts, ResponseBody), Error> {
        let PendingResponse { mut future, lease } = self;
        let outcome = std::future::poll_fn(|cx| {
            // h2 queues interim heads ahead of the final one; the final poll skips them.
            while let Poll::Ready(Some(Ok(head))) = future.poll_informational(cx) {
                interim(head);
            }
            Pin::new(&mut future).poll(cx)
        })
        .await;
        match outcome {
            Ok(response) => {
                let (parts, recv) = response.into_parts();
                Ok((parts, ResponseBody { recv, _lease: lease }))
            }
            Err(e) => {
                let unprocessed = e.reason() == Some(Reason::REFUSED_STREAM) || (e.is_go_away() && e.is_remote());
                if e.is_go_away() {
                    lease.conn.retire();
                }
                Err(h2_error(e, "read response head", true).retryable(unprocessed))
            }
        }
    }
}

impl ResponseBody {
    /// The response ended with its head (no DATA at all).
    pub(crate) fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }

    /// The next piece of the body, `None` at its end. Call [`Self::release`] once the piece
    /// has been passed on, so the server may send more.
    pub(crate) async fn data(&mut self) -> Option<Result<Bytes, Error>> {
        let next = std::future::poll_fn(|cx| self.recv.poll_data(cx)).await?;
        Some(next.map_err(|e| h2_error(e, "read response body", false).during(Phase::Data)))
    }

    /// Returns `n` bytes of window to the server.
    pub(crate) fn release(&mut self, n: usize) {
        let _ = self.recv.flow_control().release_capacity(n);
    }

    /// The trailers, after the last [`Self::data`].
    pub(crate) async fn trailers(&mut self) -> Result<Option<HeaderMap>, Error> {
        std::future::poll_fn(|cx| self.recv.poll_trailers(cx))
            .await
            .map_err(|e| h2_error(e, "read response trailers", false).during(Phase::Data))
    }
}

/// An HTTP/2 failure as the one `Error` type (back side). `before_response`: nothing of the
/// response has reached the client yet (`Phase::Headers`, so 502/504 can still be sent).
pub(crate) fn h2_error(e: h2::Error, what: &'static str, before_response: bool) -> Error {
    let phase = if before_response { Phase::Headers } else { Phase::Data };
    let context = format!("HTTP/2 {what}");
    let error = if e.is_io() {
        match e.into_io() {
            Some(io) => Error::io(Side::Back, context, io),
            None => Error::new(ErrorKind::Io, Side::Back, context),
        }
    } else if e.is_library() {
        // The server broke the protocol (as h2 judged it).
        Error::new(ErrorKind::BadResponse, Side::Back, format!("{context}: {e}"))
    } else {
        Error::new(ErrorKind::PeerClosed, Side::Back, format!("{context}: {e}"))
    };
    error.during(phase)
}
