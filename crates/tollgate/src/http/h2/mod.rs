//! Sans-io HTTP/2 server connection (RFC 9113) with its HPACK codec (RFC 7541): client bytes
//! in, events and bytes to write out; no I/O, no async, one thread.
//!
//! Serves HTTP/2 clients (`proxy/h2front/native` drives it), in place of the `h2` crate,
//! which stays for `proto = "h2"` servers: leaner (no stream store and priority queues, no
//! `http::HeaderMap`, no HPACK dynamic table on the encoding side).
//!
//! # API
//! - [`ServerConn::new`]`(`[`Settings`]`)` (from `[http2]`: `Settings::from(&Http2)`): our
//!   SETTINGS and connection WINDOW_UPDATE are queued at once.
//! - [`ServerConn::receive`]`(&mut BytesMut, now)`: consumes whole frames (the preface
//!   first); a partial frame stays in the buffer, so any split of the byte stream gives the
//!   same events and output. `Err(`[`ConnError`]`)`: a connection error (`flood` says which
//!   budget, if one), GOAWAY is queued: write the output and close. Later calls repeat it.
//! - [`ServerConn::poll_event`] → [`Event`]: `Request` (a validated [`RequestHead`]),
//!   `HeadTooLarge` (over `max_header_list_size`: answer 431 or reset), `Data` (zero-copy
//!   slices of the input), `Trailers`, `Reset` (by the client, or a stream error the codec
//!   answered itself with RST_STREAM; also for ids the app never saw, e.g. a malformed or
//!   refused request: ignore unknown ids), `SendWindow` (capacity grew: wake senders).
//! - [`ServerConn::output`] / [`ServerConn::consume_output`]: bytes to write.
//! - [`ServerConn::send_headers`] (also 1xx, repeatable), [`ServerConn::send_data`] (up to
//!   [`ServerConn::send_capacity`]), [`ServerConn::send_trailers`]; once our side ends while
//!   the request is still open, the codec sends RST_STREAM(NO_ERROR) (RFC 9113 §8.1) and the
//!   stream is gone. `Err(`[`StreamGone`]`)`: reset or finished (or no head sent yet, for
//!   body and trailers).
//! - [`ServerConn::release_data`]`(id, n)`: the app consumed `n` DATA bytes; windows are
//!   credited and WINDOW_UPDATEs go once half a window is due. A stream that goes away
//!   gives back what the app still held.
//! - [`ServerConn::reset`], [`ServerConn::goaway_graceful`] (GOAWAY(2^31-1) + PING, then
//!   GOAWAY(last) when the PING returns; the caller bounds the wait with a timer and then
//!   calls `goaway(NO_ERROR)`), [`ServerConn::goaway`], [`ServerConn::is_done`],
//!   [`ServerConn::recycle`] (a head's storage back for the next request).
//! - Left to the caller: timeouts (the codec takes `now` only for flood windows), joining
//!   `cookie` fields for an HTTP/1 server (RFC 9113 §8.2.3: HTTP/2 clients split them), and
//!   bounding how much response DATA it queues before the output is written (`output().len()`).
//!
//! # Strictness
//! Stream errors (`Event::Reset` + RST_STREAM, counted toward `max_server_resets`):
//! malformed requests (RFC 9113 §8.1.1, see `head.rs`: pseudo-header order, unknown,
//! duplicate, missing or response pseudo-header fields, uppercase or invalid names,
//! connection-specific fields, `te` other than `trailers`, CTL/CR/LF/NUL or surrounding
//! whitespace in values, `:path` empty, not origin-form (`*` only for OPTIONS) or with bytes an
//! HTTP/1 request target may not have, `:authority` with userinfo or such bytes, CONNECT
//! rules, extended CONNECT refused, `host` disagreeing with `:authority`, `content-length`
//! not a number or disagreeing with the DATA), DATA on a stream the client closed
//! (STREAM_CLOSED), a stream window overrun (FLOW_CONTROL_ERROR), WINDOW_UPDATE of 0 or past
//! 2^31-1 on a stream, trailers without END_STREAM, a stream depending on itself, streams past
//! `max_concurrent_streams` (REFUSED_STREAM). Connection errors: bad preface, first frame not
//! SETTINGS, even or non-increasing stream ids, frames over our SETTINGS_MAX_FRAME_SIZE
//! (FRAME_SIZE_ERROR), frames of a wrong length, bad SETTINGS values, SETTINGS ack with a
//! payload, PUSH_PROMISE, an interrupted header block, padding longer than the payload, the
//! connection window overrun or overflown, frames on idle streams, any HPACK error
//! (COMPRESSION_ERROR). Unknown frame types and settings are ignored.
//!
//! # Flood budgets
//! Per connection within `flood_window` (see [`Flood`]): client RST_STREAM, resets the codec
//! sent, PING, SETTINGS, empty DATA without END_STREAM, PRIORITY, WINDOW_UPDATE, request heads
//! over `max_header_list_size` (each answered 431 until then), and each header block's bytes
//! and frames, counted before its bytes are buffered. Passing one is a
//! connection error ENHANCE_YOUR_CALM. PING and SETTINGS acks are bounded too: past
//! [`conn::MAX_PENDING_ACKS`] bytes of them queued while the output was never written out
//! whole, the client is not reading (ENHANCE_YOUR_CALM).

pub mod conn;
pub mod flood;
pub mod frame;
pub mod head;
pub mod hpack;
mod stream;
#[cfg(test)]
mod tests;

use std::time::Duration;

use bytes::Bytes;

pub use conn::ServerConn;
pub use flood::Flood;
pub use frame::{Reason, StreamId};
pub use head::{Fields, RequestHead};

/// The connection's limits (`[http2]`). `Settings::from(&Http2)` and `Settings::default()`
/// are in `config::model`: `config` imports `http`, never the other way.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub max_concurrent_streams: u32,
    pub initial_stream_window: u32,
    pub initial_connection_window: u32,
    pub max_frame_size: u32,
    pub max_header_list_size: u32,
    pub max_header_block_size: u32,
    pub max_header_block_frames: u32,
    pub flood_window: Duration,
    pub max_client_resets: u32,
    pub max_server_resets: u32,
    pub max_pings: u32,
    pub max_settings: u32,
    pub max_empty_data: u32,
    pub max_priority: u32,
    pub max_window_updates: u32,
    pub max_oversized_heads: u32,
}

/// A connection error: GOAWAY(`code`) is queued; write the output and close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnError {
    pub code: Reason,
    /// The flood budget passed, when that was the cause.
    pub flood: Option<Flood>,
    /// For logs.
    pub why: &'static str,
}

/// The stream cannot take this (reset, finished, or its head is not sent yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamGone;

#[derive(Debug)]
pub enum Event {
    /// A complete, validated request head; `end_stream`: no body follows.
    Request {
        id: StreamId,
        head: RequestHead,
        end_stream: bool,
    },
    /// A request head over `max_header_list_size` (not stored): the stream is open for a 431
    /// (or a reset).
    HeadTooLarge { id: StreamId, end_stream: bool },
    /// Request body bytes, a slice of the input buffer; release them with `release_data`.
    Data {
        id: StreamId,
        data: Bytes,
        end_stream: bool,
    },
    /// Trailers; they end the request.
    Trailers { id: StreamId, fields: Fields },
    /// The stream is gone: the client reset it (`why` is `None`), or the codec did for a
    /// stream error (`why` says what it was, for logs).
    Reset {
        id: StreamId,
        code: Reason,
        why: Option<&'static str>,
    },
    /// Send capacity grew on a stream (`Some`) or on the connection / every stream (`None`).
    SendWindow { id: Option<StreamId> },
}
