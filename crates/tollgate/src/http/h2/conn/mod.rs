//! The server side of one HTTP/2 connection (RFC 9113), sans-io: client bytes in, events
//! and bytes to write out.
//!
//! Owns the connection state: our and the peer's settings, both connection windows, the
//! HPACK decoder, the header block in progress, the open streams, the flood budgets, the
//! GOAWAY phase, the event queue and the output buffer. Invariants: only whole frames are
//! consumed from the input (a partial one stays there), so any split of the byte stream gives
//! the same events and output; nothing is buffered but the header block in progress, bounded
//! by `max_header_block_size` before it grows; every header block is HPACK-decoded, even one
//! whose stream is refused, so the decoder never falls out of step; after a connection error
//! a GOAWAY is queued once and the connection only repeats the error.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};

use super::flood::{Budgets, Flood};
use super::frame::{self, Frame, FrameError, FrameHeader, Reason, StreamId, flag, kind, setting};
use super::head::{Fields, HeadBuilder, HeadFault, RequestHead};
use super::hpack::{Decoder, FieldSink};
use super::stream::{RecentResets, Stream, Streams};
use super::{ConnError, Event, Settings};

mod send;

/// Ack bytes (PING, SETTINGS) queued since the output was last written out whole, past
/// which the client is taken for one that does not read: no more acks, ENHANCE_YOUR_CALM.
pub const MAX_PENDING_ACKS: usize = 1 << 20;
/// Our SETTINGS_HEADER_TABLE_SIZE: the default, never announced.
const HEADER_TABLE_SIZE: usize = 4096;
/// The opaque data of the PING that follows a graceful GOAWAY.
const GOAWAY_PING: [u8; 8] = *b"tg-drain";
/// Request heads kept for reuse.
const SPARE_HEADS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the 24-byte preface.
    Preface,
    /// Waiting for the client's first SETTINGS.
    FirstSettings,
    Open,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GoAway {
    None,
    /// GOAWAY(2^31-1) and a PING sent; the final GOAWAY goes when the PING returns.
    Draining,
    /// GOAWAY(last) sent: streams above `last` are ignored.
    Sent {
        last: u32,
    },
}

/// The header block in progress (HEADERS without END_HEADERS, then CONTINUATIONs).
#[derive(Debug, Default)]
struct Block {
    stream: u32,
    end_stream: bool,
    depends_on_itself: bool,
    bytes: Vec<u8>,
}

/// Where a complete header block goes.
enum Target {
    Request,
    Trailers,
    /// Decoded for HPACK's sake only.
    Ignore,
    /// Decoded, then the stream is reset with this code (counted as a server reset).
    Reset(Reason, &'static str),
}

struct Discard;
impl FieldSink for Discard {
    fn field(&mut self, _: &[u8], _: &[u8], _: bool) {}
}

pub struct ServerConn {
    s: Settings,
    phase: Phase,
    dead: Option<ConnError>,
    out: Vec<u8>,
    out_at: usize,
    /// Ack bytes queued since `out` was last empty.
    acks_pending: usize,
    events: VecDeque<Event>,
    streams: Streams,
    recent_resets: RecentResets,
    decoder: Decoder,
    budgets: Budgets,
    block: Block,
    /// The highest stream id the client opened (or tried to).
    highest: u32,
    goaway: GoAway,
    peer_goaway: bool,
    /// The client acknowledged our SETTINGS (until then it may use the default window).
    settings_acked: bool,
    peer_initial_window: i64,
    peer_max_frame: usize,
    conn_send_window: i64,
    conn_recv_window: i64,
    conn_recv_pending: u32,
    spare_heads: Vec<RequestHead>,
    encode_buf: Vec<u8>,
}

fn conn_error(code: Reason, why: &'static str) -> ConnError {
    ConnError { code, flood: None, why }
}

fn flood_error(flood: Flood) -> ConnError {
    ConnError {
        code: Reason::ENHANCE_YOUR_CALM,
        flood: Some(flood),
        why: flood.as_str(),
    }
}

impl ServerConn {
    /// A connection whose SETTINGS (and connection WINDOW_UPDATE) are already queued.
    pub fn new(settings: Settings) -> Self {
        Self::at(settings, Instant::now())
    }

    /// [`ServerConn::new`] with the flood window starting at `now`.
    pub fn at(settings: Settings, now: Instant) -> Self {
        let s = settings;
        let mut out = Vec::with_capacity(256);
        frame::write_settings(
            &mut out,
            &[
                (setting::ENABLE_PUSH, 0),
                (setting::MAX_CONCURRENT_STREAMS, s.max_concurrent_streams),
                (setting::INITIAL_WINDOW_SIZE, s.initial_stream_window),
                (setting::MAX_FRAME_SIZE, s.max_frame_size),
                (setting::MAX_HEADER_LIST_SIZE, s.max_header_list_size),
            ],
        );
        let default = i64::from(frame::DEFAULT_WINDOW);
        let mut conn_recv_window = default;
        if i64::from(s.initial_connection_window) > default {
            let more = i64::from(s.initial_connection_window) - default;
            frame::write_window_update(&mut out, 0, more as u32);
            conn_recv_window += more;
        }
        ServerConn {
            phase: Phase::Preface,
            dead: None,
            out,
            out_at: 0,
            acks_pending: 0,
            events: VecDeque::new(),
            streams: Streams::default(),
            recent_resets: RecentResets::default(),
            decoder: Decoder::new(HEADER_TABLE_SIZE),
            budgets: Budgets::new(now),
            block: Block::default(),
            highest: 0,
            goaway: GoAway::None,
            peer_goaway: false,
            settings_acked: false,
            peer_initial_window: default,
            peer_max_frame: frame::MIN_MAX_FRAME_SIZE as usize,
            conn_send_window: default,
            conn_recv_window,
            conn_recv_pending: 0,
            spare_heads: Vec::new(),
            encode_buf: Vec::new(),
            s,
        }
    }

    /// Consumes the whole frames of `input`; see the module doc of `http::h2`.
    pub fn receive(&mut self, input: &mut BytesMut, now: Instant) -> Result<(), ConnError> {
        if let Some(e) = self.dead {
            return Err(e);
        }
        let r = self.receive_frames(input, now);
        if let Err(e) = r {
            self.dead = Some(e);
            frame::write_goaway(&mut self.out, self.highest, e.code);
        }
        r
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Bytes to write to the client.
    pub fn output(&self) -> &[u8] {
        self.out.get(self.out_at..).unwrap_or_default()
    }

    /// `n` bytes of [`ServerConn::output`] were written.
    pub fn consume_output(&mut self, n: usize) {
        self.out_at = (self.out_at + n).min(self.out.len());
        if self.out_at == self.out.len() {
            self.out.clear();
            self.out_at = 0;
            self.acks_pending = 0;
        } else if self.out_at >= 64 * 1024 && self.out_at * 2 >= self.out.len() {
            self.out.drain(..self.out_at);
            self.out_at = 0;
        }
    }

    /// The connection has gone quiet (no stream running in its task): the buffers kept for
    /// the next burst are given back, so that an idle connection holds its state (settings,
    /// windows, HPACK tables), not its peak. Anything still queued or half-received stays.
    pub fn release_idle_buffers(&mut self) {
        if self.out.is_empty() {
            self.out = Vec::new();
        }
        if self.events.is_empty() {
            self.events = VecDeque::new();
        }
        if self.block.bytes.is_empty() {
            self.block.bytes = Vec::new();
        }
        self.spare_heads = Vec::new();
        self.encode_buf = Vec::new();
        self.streams.release_if_empty();
    }

    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Gone away (either side, or dead) and no stream left open: close the connection once
    /// the output is written.
    pub fn is_done(&self) -> bool {
        self.dead.is_some()
            || ((matches!(self.goaway, GoAway::Sent { .. }) || self.peer_goaway) && self.streams.len() == 0)
    }

    /// The header block bytes buffered now (a header block still waiting for CONTINUATION).
    pub fn buffered_header_block(&self) -> usize {
        self.block.bytes.len()
    }

    /// Gives a head back for reuse (its storage).
    pub fn recycle(&mut self, head: RequestHead) {
        if self.spare_heads.len() < SPARE_HEADS {
            self.spare_heads.push(head);
        }
    }

    /// Gives trailers back for reuse.
    pub fn recycle_fields(&mut self, fields: Fields) {
        self.recycle(RequestHead::from_fields(fields));
    }

    fn receive_frames(&mut self, input: &mut BytesMut, now: Instant) -> Result<(), ConnError> {
        if self.phase == Phase::Preface {
            let Some(preface) = input.get(..frame::PREFACE.len()) else {
                return Ok(());
            };
            if preface != frame::PREFACE {
                return Err(conn_error(Reason::PROTOCOL_ERROR, "bad connection preface"));
            }
            input.advance(frame::PREFACE.len());
            self.phase = Phase::FirstSettings;
        }
        while let Some(h) = FrameHeader::parse(input) {
            if h.len > self.s.max_frame_size {
                return Err(conn_error(
                    Reason::FRAME_SIZE_ERROR,
                    "frame larger than SETTINGS_MAX_FRAME_SIZE",
                ));
            }
            let total = frame::HEADER_LEN + h.len as usize;
            if input.len() < total {
                break;
            }
            if self.phase == Phase::FirstSettings {
                if h.kind != kind::SETTINGS || h.flags & flag::ACK != 0 {
                    return Err(conn_error(Reason::PROTOCOL_ERROR, "first frame not SETTINGS"));
                }
                self.phase = Phase::Open;
            }
            if self.block.stream != 0 && (h.kind != kind::CONTINUATION || h.stream != self.block.stream) {
                return Err(conn_error(Reason::PROTOCOL_ERROR, "header block interrupted"));
            }
            self.count_floods(&h, now)?;
            if h.kind == kind::DATA {
                let bytes = input.split_to(total).freeze();
                self.on_data(&h, bytes, now)?;
            } else {
                let r = self.on_frame(&h, input.get(frame::HEADER_LEN..total).unwrap_or_default(), now);
                input.advance(total);
                r?;
            }
        }
        Ok(())
    }

    fn count_floods(&mut self, h: &FrameHeader, now: Instant) -> Result<(), ConnError> {
        let kind = match h.kind {
            kind::DATA if h.len == 0 && h.flags & flag::END_STREAM == 0 => Flood::EmptyData,
            kind::HEADERS | kind::CONTINUATION => {
                return self
                    .budgets
                    .header_fragment(&self.s, h.kind == kind::HEADERS, h.len)
                    .map_err(flood_error);
            }
            kind::PRIORITY => Flood::Priority,
            kind::RST_STREAM => Flood::ClientResets,
            kind::SETTINGS => Flood::Settings,
            kind::PING => Flood::Pings,
            kind::WINDOW_UPDATE => Flood::WindowUpdates,
            _ => return Ok(()),
        };
        self.budgets.count(&self.s, now, kind).map_err(flood_error)
    }

    /// A stream error the codec answers itself: RST_STREAM, `Event::Reset`, counted.
    fn stream_error(&mut self, id: u32, code: Reason, why: &'static str, now: Instant) -> Result<(), ConnError> {
        self.drop_stream(id);
        self.recent_resets.add(id);
        frame::write_rst_stream(&mut self.out, id, code);
        self.events.push_back(Event::Reset {
            id: StreamId(id),
            code,
            why: Some(why),
        });
        self.budgets
            .count(&self.s, now, Flood::ServerResets)
            .map_err(flood_error)
    }

    /// Forgets a stream; what the app still held of its DATA goes back to the connection.
    fn drop_stream(&mut self, id: u32) {
        if let Some(st) = self.streams.remove(id) {
            // `recv_pending` was credited to the connection already.
            self.release_conn(st.held.min(u64::from(u32::MAX)) as u32);
        }
    }

    fn frame_error(&mut self, e: FrameError, now: Instant) -> Result<(), ConnError> {
        match e {
            FrameError::Connection(code, why) => Err(conn_error(code, why)),
            FrameError::Stream(id, code, why) => self.stream_error(id, code, why, now),
        }
    }

    fn on_data(&mut self, h: &FrameHeader, bytes: Bytes, now: Instant) -> Result<(), ConnError> {
        let payload = bytes.get(frame::HEADER_LEN..).unwrap_or_default();
        let (end_stream, (start, end)) = match frame::parse(h, payload) {
            Ok(Frame::Data { end_stream, data, .. }) => (end_stream, data),
            Ok(_) => return Ok(()),
            Err(e) => return self.frame_error(e, now),
        };
        let flow = i64::from(h.len);
        if flow > self.conn_recv_window {
            return Err(conn_error(
                Reason::FLOW_CONTROL_ERROR,
                "DATA past the connection window",
            ));
        }
        self.conn_recv_window -= flow;
        let data_len = (end - start) as u64;
        let padding = h.len - (end - start) as u32;
        let id = h.stream;
        let Some(st) = self.streams.get_mut(id) else {
            self.release_conn(h.len);
            if id > self.highest {
                return Err(conn_error(Reason::PROTOCOL_ERROR, "DATA on an idle stream"));
            }
            if self.recent_resets.contains(id) {
                return Ok(());
            }
            return self.stream_error(id, Reason::STREAM_CLOSED, "DATA on a closed stream", now);
        };
        let fault = if !st.remote_open {
            Some((Reason::STREAM_CLOSED, "DATA after END_STREAM"))
        } else if flow > st.recv_window {
            Some((Reason::FLOW_CONTROL_ERROR, "DATA past the stream window"))
        } else {
            st.recv_window -= flow;
            st.received += data_len;
            let over = st.content_length.is_some_and(|cl| st.received > cl);
            let short = end_stream && st.content_length.is_some_and(|cl| st.received != cl);
            (over || short).then_some((Reason::PROTOCOL_ERROR, "content-length disagrees with the DATA"))
        };
        if let Some((code, why)) = fault {
            self.release_conn(h.len);
            return self.stream_error(id, code, why, now);
        }
        st.held += data_len;
        st.recv_pending += padding;
        if end_stream {
            st.remote_open = false;
        }
        let done = !st.remote_open && !st.local_open;
        if padding > 0 {
            self.release_conn(padding);
        }
        if data_len > 0 || end_stream {
            let data = bytes.slice(frame::HEADER_LEN + start..frame::HEADER_LEN + end);
            self.events.push_back(Event::Data {
                id: StreamId(id),
                data,
                end_stream,
            });
        }
        if done {
            self.drop_stream(id);
        }
        Ok(())
    }

    fn on_frame(&mut self, h: &FrameHeader, payload: &[u8], now: Instant) -> Result<(), ConnError> {
        let f = match frame::parse(h, payload) {
            Ok(f) => f,
            Err(e) => return self.frame_error(e, now),
        };
        match f {
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                priority,
                fragment,
            } => {
                if stream % 2 == 0 {
                    return Err(conn_error(Reason::PROTOCOL_ERROR, "even stream id from a client"));
                }
                let depends_on_itself = priority.is_some_and(|p| p.dependency == stream);
                if end_headers {
                    return self.on_header_block(stream, end_stream, depends_on_itself, fragment, now);
                }
                self.block.stream = stream;
                self.block.end_stream = end_stream;
                self.block.depends_on_itself = depends_on_itself;
                self.block.bytes.clear();
                self.block.bytes.extend_from_slice(fragment);
                Ok(())
            }
            Frame::Continuation {
                stream,
                end_headers,
                fragment,
            } => {
                if self.block.stream == 0 {
                    return Err(conn_error(Reason::PROTOCOL_ERROR, "CONTINUATION without HEADERS"));
                }
                self.block.bytes.extend_from_slice(fragment);
                if !end_headers {
                    return Ok(());
                }
                let bytes = std::mem::take(&mut self.block.bytes);
                self.block.stream = 0;
                let r = self.on_header_block(stream, self.block.end_stream, self.block.depends_on_itself, &bytes, now);
                self.block.bytes = bytes;
                self.block.bytes.clear();
                r
            }
            Frame::RstStream { stream, code } => {
                if stream > self.highest {
                    return Err(conn_error(Reason::PROTOCOL_ERROR, "RST_STREAM on an idle stream"));
                }
                if self.streams.get(stream).is_some() {
                    self.drop_stream(stream);
                    self.events.push_back(Event::Reset {
                        id: StreamId(stream),
                        code,
                        why: None,
                    });
                }
                Ok(())
            }
            Frame::Settings { ack: true, .. } => {
                if !self.settings_acked {
                    self.settings_acked = true;
                    let ours = i64::from(self.s.initial_stream_window);
                    let assumed = ours.max(i64::from(frame::DEFAULT_WINDOW));
                    for st in self.streams.iter_mut() {
                        st.recv_window -= assumed - ours;
                    }
                }
                Ok(())
            }
            Frame::Settings { ack: false, params } => self.on_settings(params),
            Frame::Ping { ack: true, payload } => {
                if payload == GOAWAY_PING && self.goaway == GoAway::Draining {
                    frame::write_goaway(&mut self.out, self.highest, Reason::NO_ERROR);
                    self.goaway = GoAway::Sent { last: self.highest };
                }
                Ok(())
            }
            Frame::Ping { ack: false, payload } => {
                self.count_ack(17, Flood::Pings)?;
                frame::write_ping(&mut self.out, true, payload);
                Ok(())
            }
            Frame::GoAway { .. } => {
                self.peer_goaway = true;
                Ok(())
            }
            Frame::WindowUpdate { stream: 0, increment } => {
                self.conn_send_window += i64::from(increment);
                if self.conn_send_window > frame::MAX_WINDOW {
                    return Err(conn_error(Reason::FLOW_CONTROL_ERROR, "connection window past 2^31-1"));
                }
                self.events.push_back(Event::SendWindow { id: None });
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => {
                let Some(st) = self.streams.get_mut(stream) else {
                    if stream > self.highest {
                        return Err(conn_error(Reason::PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream"));
                    }
                    return Ok(());
                };
                st.send_window += i64::from(increment);
                if st.send_window > frame::MAX_WINDOW {
                    return self.stream_error(stream, Reason::FLOW_CONTROL_ERROR, "stream window past 2^31-1", now);
                }
                if st.local_open {
                    self.events.push_back(Event::SendWindow {
                        id: Some(StreamId(stream)),
                    });
                }
                Ok(())
            }
            Frame::Data { .. } | Frame::Priority { .. } | Frame::Unknown => Ok(()),
        }
    }

    fn count_ack(&mut self, bytes: usize, flood: Flood) -> Result<(), ConnError> {
        self.acks_pending += bytes;
        if self.acks_pending > MAX_PENDING_ACKS {
            Err(flood_error(flood))
        } else {
            Ok(())
        }
    }

    fn on_settings(&mut self, params: &[u8]) -> Result<(), ConnError> {
        let mut grew = false;
        for (id, value) in frame::settings(params) {
            match id {
                setting::INITIAL_WINDOW_SIZE => {
                    let delta = i64::from(value) - self.peer_initial_window;
                    self.peer_initial_window = i64::from(value);
                    for st in self.streams.iter_mut() {
                        st.send_window += delta;
                        if st.send_window > frame::MAX_WINDOW {
                            return Err(conn_error(Reason::FLOW_CONTROL_ERROR, "stream window past 2^31-1"));
                        }
                    }
                    grew |= delta > 0;
                }
                setting::MAX_FRAME_SIZE => self.peer_max_frame = value as usize,
                // We push nothing, use no dynamic table when encoding and open no stream.
                _ => {}
            }
        }
        self.count_ack(9, Flood::Settings)?;
        frame::write_settings_ack(&mut self.out);
        if grew {
            self.events.push_back(Event::SendWindow { id: None });
        }
        Ok(())
    }

    /// What the client may send on a new stream before (assumed default) and after it
    /// acknowledged our SETTINGS.
    fn initial_recv_window(&self) -> i64 {
        let ours = i64::from(self.s.initial_stream_window);
        if self.settings_acked {
            ours
        } else {
            ours.max(i64::from(frame::DEFAULT_WINDOW))
        }
    }

    fn target(&mut self, id: u32, end_stream: bool, depends_on_itself: bool) -> Result<Target, ConnError> {
        if let Some(st) = self.streams.get(id) {
            return Ok(if !st.remote_open {
                Target::Reset(Reason::STREAM_CLOSED, "HEADERS after END_STREAM")
            } else if !end_stream {
                Target::Reset(Reason::PROTOCOL_ERROR, "trailers without END_STREAM")
            } else {
                Target::Trailers
            });
        }
        if id <= self.highest {
            if self.recent_resets.contains(id) {
                return Ok(Target::Ignore);
            }
            return Err(conn_error(
                Reason::PROTOCOL_ERROR,
                "HEADERS on a closed stream or a decreasing stream id",
            ));
        }
        self.highest = id;
        Ok(match self.goaway {
            GoAway::Sent { last } if id > last => Target::Ignore,
            _ if depends_on_itself => Target::Reset(Reason::PROTOCOL_ERROR, "stream depends on itself"),
            _ if self.streams.len() >= self.s.max_concurrent_streams as usize => {
                Target::Reset(Reason::REFUSED_STREAM, "past max_concurrent_streams")
            }
            _ => Target::Request,
        })
    }

    fn on_header_block(
        &mut self,
        id: u32,
        end_stream: bool,
        depends_on_itself: bool,
        block: &[u8],
        now: Instant,
    ) -> Result<(), ConnError> {
        let target = self.target(id, end_stream, depends_on_itself)?;
        let trailers = match target {
            Target::Request => false,
            Target::Trailers => true,
            Target::Ignore | Target::Reset(..) => {
                self.decoder
                    .decode(block, &mut Discard)
                    .map_err(|e| conn_error(Reason::COMPRESSION_ERROR, e.as_str()))?;
                return match target {
                    Target::Reset(code, why) => self.stream_error(id, code, why, now),
                    _ => Ok(()),
                };
            }
        };
        let mut head = self.spare_heads.pop().unwrap_or_default();
        let mut builder = HeadBuilder::new(&mut head, trailers, self.s.max_header_list_size as usize);
        self.decoder
            .decode(block, &mut builder)
            .map_err(|e| conn_error(Reason::COMPRESSION_ERROR, e.as_str()))?;
        let verdict = builder.finish();
        let sid = StreamId(id);
        if trailers {
            let Some(st) = self.streams.get_mut(id) else {
                return Ok(());
            };
            let why = match verdict {
                Err(HeadFault::Malformed(why)) => Some(why),
                Err(HeadFault::TooLarge) => Some("trailers over max_header_list_size"),
                Ok(()) if st.content_length.is_some_and(|cl| st.received != cl) => {
                    Some("content-length disagrees with the DATA")
                }
                Ok(()) => None,
            };
            if let Some(why) = why {
                self.recycle(head);
                return self.stream_error(id, Reason::PROTOCOL_ERROR, why, now);
            }
            st.remote_open = false;
            let done = !st.local_open;
            self.events.push_back(Event::Trailers {
                id: sid,
                fields: head.into_fields(),
            });
            if done {
                self.drop_stream(id);
            }
            return Ok(());
        }
        match verdict {
            Err(HeadFault::Malformed(why)) => {
                self.recycle(head);
                self.stream_error(id, Reason::PROTOCOL_ERROR, why, now)
            }
            Err(HeadFault::TooLarge) => {
                self.recycle(head);
                // Decoding it cost as much as a served head: counted, as the floods are.
                self.budgets
                    .count(&self.s, now, Flood::OversizedHeads)
                    .map_err(flood_error)?;
                self.open_stream(id, end_stream, None);
                self.events.push_back(Event::HeadTooLarge { id: sid, end_stream });
                Ok(())
            }
            Ok(()) if end_stream && head.content_length().is_some_and(|cl| cl > 0) => {
                self.recycle(head);
                self.stream_error(
                    id,
                    Reason::PROTOCOL_ERROR,
                    "content-length on a request without a body",
                    now,
                )
            }
            Ok(()) => {
                self.open_stream(id, end_stream, head.content_length());
                self.events.push_back(Event::Request {
                    id: sid,
                    head,
                    end_stream,
                });
                Ok(())
            }
        }
    }

    fn open_stream(&mut self, id: u32, end_stream: bool, content_length: Option<u64>) {
        let mut st = Stream::new(id, self.peer_initial_window, self.initial_recv_window(), end_stream);
        st.content_length = content_length;
        self.streams.insert(st);
    }

    /// Connection-level credit back: a WINDOW_UPDATE once half the window is due.
    fn release_conn(&mut self, n: u32) {
        self.conn_recv_pending = self.conn_recv_pending.saturating_add(n);
        let target = self.s.initial_connection_window.max(frame::DEFAULT_WINDOW);
        if self.conn_recv_pending >= (target / 2).max(1) {
            frame::write_window_update(&mut self.out, 0, self.conn_recv_pending);
            self.conn_recv_window += i64::from(self.conn_recv_pending);
            self.conn_recv_pending = 0;
        }
    }
}
