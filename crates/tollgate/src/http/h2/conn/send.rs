//! The sending half of [`ServerConn`]: response heads, body and trailers under the peer's
//! windows and frame size, window credit for what the app consumed, resets and GOAWAY.
//!
//! Invariants: DATA never exceeds min(stream window, connection window) nor the peer's
//! SETTINGS_MAX_FRAME_SIZE per frame; nothing is sent on a stream whose local half ended;
//! body and trailers only after the final head.

use super::super::StreamGone;
use super::super::frame::{self, Reason, StreamId};
use super::super::hpack::encoder;
use super::super::stream::Stream;
use super::{GOAWAY_PING, GoAway, ServerConn};
use crate::http::h1::headers::is_named;

impl ServerConn {
    /// The app consumed `n` bytes of the DATA it was given on `id`.
    pub fn release_data(&mut self, id: StreamId, n: usize) {
        let threshold = (self.s.initial_stream_window / 2).max(1);
        let Some(st) = self.streams.get_mut(id.0) else { return };
        let n = (n as u64).min(st.held);
        st.held -= n;
        let n = n as u32;
        st.recv_pending = st.recv_pending.saturating_add(n);
        if st.remote_open && st.recv_pending >= threshold {
            frame::write_window_update(&mut self.out, id.0, st.recv_pending);
            st.recv_window += i64::from(st.recv_pending);
            st.recv_pending = 0;
        }
        self.release_conn(n);
    }

    /// An open stream of a live connection: after a connection error nothing follows the
    /// GOAWAY (not even answers to the events read before it).
    fn sendable(&self, id: StreamId) -> Result<&Stream, StreamGone> {
        if self.dead.is_some() {
            return Err(StreamGone);
        }
        self.streams.get(id.0).filter(|st| st.local_open).ok_or(StreamGone)
    }

    /// A stream whose response head went and that is still open on our side.
    fn sendable_body(&self, id: StreamId) -> Result<&Stream, StreamGone> {
        self.sendable(id).ok().filter(|st| st.head_sent).ok_or(StreamGone)
    }

    /// The response head (or a 1xx interim one, `end_stream` false; it may repeat). Fields
    /// that are connection-specific in HTTP/2 are left out; names are lowercased.
    pub fn send_headers<'f>(
        &mut self,
        id: StreamId,
        status: u16,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> Result<(), StreamGone> {
        let st = self.sendable(id)?;
        if st.head_sent {
            return Err(StreamGone);
        }
        self.encode_buf.clear();
        encoder::encode_status(&mut self.encode_buf, status);
        self.write_block(id, fields, end_stream && status >= 200);
        if status >= 200
            && let Some(st) = self.streams.get_mut(id.0)
        {
            st.head_sent = true;
        }
        Ok(())
    }

    /// Trailers: ends the response.
    pub fn send_trailers<'f>(
        &mut self,
        id: StreamId,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
    ) -> Result<(), StreamGone> {
        self.sendable_body(id)?;
        self.encode_buf.clear();
        self.write_block(id, fields, true);
        Ok(())
    }

    fn write_block<'f>(&mut self, id: StreamId, fields: impl Iterator<Item = (&'f [u8], &'f [u8])>, end_stream: bool) {
        for (name, value) in fields {
            if is_connection_specific(name) {
                continue;
            }
            encoder::encode_field(&mut self.encode_buf, name, value);
        }
        frame::write_header_block(&mut self.out, id.0, &self.encode_buf, end_stream, self.peer_max_frame);
        if end_stream {
            self.end_local(id.0);
        }
    }

    /// Our half is done; if the client's is not, the rest of its request is not wanted
    /// (RFC 9113 §8.1: RST_STREAM NO_ERROR after a complete response).
    fn end_local(&mut self, id: u32) {
        let Some(st) = self.streams.get_mut(id) else { return };
        st.local_open = false;
        if st.remote_open {
            frame::write_rst_stream(&mut self.out, id, Reason::NO_ERROR);
            self.recent_resets.add(id);
        }
        self.drop_stream(id);
    }

    /// What `send_data` would take now.
    pub fn send_capacity(&self, id: StreamId) -> usize {
        match self.sendable_body(id) {
            Ok(st) => st.send_window.min(self.conn_send_window).max(0) as usize,
            Err(_) => 0,
        }
    }

    /// Sends up to [`ServerConn::send_capacity`] bytes of `data`; END_STREAM only once all of
    /// `data` went (empty `data` with `end_stream` always goes).
    pub fn send_data(&mut self, id: StreamId, data: &[u8], end_stream: bool) -> Result<usize, StreamGone> {
        self.sendable_body(id)?;
        let n = self.send_capacity(id).min(data.len());
        let st = self.streams.get_mut(id.0).ok_or(StreamGone)?;
        st.send_window -= n as i64;
        self.conn_send_window -= n as i64;
        let end = end_stream && n == data.len();
        let data = data.get(..n).unwrap_or_default();
        let mut chunks = data.chunks(self.peer_max_frame.max(1)).peekable();
        while let Some(chunk) = chunks.next() {
            frame::write_data(&mut self.out, id.0, chunk, end && chunks.peek().is_none());
        }
        if end {
            if data.is_empty() {
                frame::write_data(&mut self.out, id.0, &[], true);
            }
            self.end_local(id.0);
        }
        Ok(n)
    }

    /// RST_STREAM from the app (not counted as a server reset).
    pub fn reset(&mut self, id: StreamId, code: Reason) {
        if self.streams.get(id.0).is_some() && self.dead.is_none() {
            self.drop_stream(id.0);
            self.recent_resets.add(id.0);
            frame::write_rst_stream(&mut self.out, id.0, code);
        }
    }

    /// GOAWAY(2^31-1) and a PING; GOAWAY(last stream) when the PING returns. Streams opened
    /// until then are served; later ones are ignored.
    pub fn goaway_graceful(&mut self) {
        if self.goaway == GoAway::None && self.dead.is_none() {
            frame::write_goaway(&mut self.out, frame::MAX_WINDOW as u32, Reason::NO_ERROR);
            frame::write_ping(&mut self.out, false, GOAWAY_PING);
            self.goaway = GoAway::Draining;
        }
    }

    /// GOAWAY(last stream, `code`) now.
    pub fn goaway(&mut self, code: Reason) {
        if !matches!(self.goaway, GoAway::Sent { .. }) && self.dead.is_none() {
            frame::write_goaway(&mut self.out, self.highest, code);
            self.goaway = GoAway::Sent { last: self.highest };
        }
    }
}

/// `name` (a token) is one of the fields HTTP/2 forbids (RFC 9113 §8.2.2).
fn is_connection_specific(name: &[u8]) -> bool {
    [
        &b"connection"[..],
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
    ]
    .iter()
    .any(|c| is_named(name, c))
}
