//! The stream handles of an HTTP/2 client connection served by tollgate's own codec
//! (`http::h2`): what a stream's future holds to read its request body and send its
//! response, with the shape of the `h2` crate's server handles (`SendResponse`,
//! `SendStream`, `RecvStream`) so that the forwarding code reads the same.
//!
//! Owns [`Shared`] (the codec and the app side of every open stream, one per connection) and
//! the handles. Invariants: every handle of a stream points at one [`Entry`] slot, found by
//! index and checked by stream id; no borrow of the codec or the table is held across an
//! await (each handle call is synchronous, the connection task never polls a stream while
//! it holds one); the last handle dropped ends the stream — a response not finished is reset
//! (CANCEL), request bytes still held are given back to the windows — and frees the slot.
//! Response bytes the client's window has no room for wait in the stream's `pending` queue
//! (the forwarding code sends only what `capacity` grants, so it stays small) and go out as
//! the window opens (`Shared::on_window`).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::HeaderMap;

use super::bridge::Bridge;
use crate::http::h2::{Reason, ServerConn, StreamId};

/// Why a stream operation could not be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamError {
    /// The client reset the stream (or the codec did, for what the client sent).
    Reset(Reason),
    /// The stream is finished, or the connection is gone.
    Closed,
}

impl std::fmt::Display for StreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamError::Reset(r) => write!(f, "stream reset ({})", r.as_str()),
            StreamError::Closed => f.write_str("stream closed"),
        }
    }
}

/// The app side of one open stream.
struct Entry {
    id: StreamId,
    /// Request body pieces not yet taken, and whether the client ended its side.
    recv: VecDeque<Bytes>,
    recv_ended: bool,
    trailers: Option<HeaderMap>,
    /// Request bytes taken by the app and not yet released (given back at the end).
    held: usize,
    reset: Option<Reason>,
    /// The response is complete (END_STREAM queued or sent) or the stream was reset by us.
    send_closed: bool,
    head_sent: bool,
    /// Response bytes waiting for window, whether END_STREAM follows them, and trailers.
    pending: VecDeque<Bytes>,
    pending_len: usize,
    pending_end: bool,
    pending_trailers: Option<HeaderMap>,
    /// What the sender asked for (`reserve_capacity`).
    reserved: usize,
    /// Bytes of the response's HEADERS frames (interim, final, trailers) as encoded: the
    /// stream's share of `bytes_to_client` besides its DATA payload.
    head_bytes: u64,
    /// One waker per stream: every stream future is one task's child, so whatever it
    /// waits on (body, window, reset) it is woken the same way.
    waker: Option<Waker>,
    handles: u8,
}

impl Entry {
    fn new(id: StreamId, end_stream: bool) -> Self {
        Entry {
            id,
            recv: VecDeque::new(),
            recv_ended: end_stream,
            trailers: None,
            held: 0,
            reset: None,
            send_closed: false,
            head_sent: false,
            pending: VecDeque::new(),
            pending_len: 0,
            pending_end: false,
            pending_trailers: None,
            reserved: 0,
            head_bytes: 0,
            waker: None,
            handles: 0,
        }
    }

    fn wake(&mut self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    fn park(&mut self, cx: &Context<'_>) {
        match &self.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => self.waker = Some(cx.waker().clone()),
        }
    }
}

/// The codec and the open streams of one connection.
pub(crate) struct Shared {
    pub(super) conn: RefCell<ServerConn>,
    table: RefCell<Table>,
    /// `http2.max_send_buffer`: response bytes the connection may hold unwritten; a sender
    /// gets no capacity past it (a client that does not read gets nothing more queued).
    max_unwritten: usize,
    /// A sender was refused capacity for the unwritten bytes: wake them once written.
    blocked: std::cell::Cell<bool>,
}

#[derive(Default)]
struct Table {
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
}

impl Table {
    fn find(&mut self, id: StreamId) -> Option<&mut Entry> {
        // At most `max_concurrent_streams` slots, mostly a handful: a scan is cheaper than
        // a map's hashing.
        self.slots.iter_mut().flatten().find(|e| e.id == id)
    }

    /// No stream left: its slots go back (a quiet connection's, see `Shared::release_idle`).
    fn release_if_empty(&mut self) {
        if self.slots.iter().all(Option::is_none) {
            self.slots = Vec::new();
            self.free = Vec::new();
        }
    }

    fn at(&mut self, slot: usize, id: StreamId) -> Option<&mut Entry> {
        self.slots.get_mut(slot)?.as_mut().filter(|e| e.id == id)
    }

    fn release(&mut self, slot: usize) {
        if let Some(s) = self.slots.get_mut(slot)
            && s.take().is_some()
        {
            self.free.push(slot);
        }
    }
}

impl Shared {
    pub(super) fn new(conn: ServerConn, max_unwritten: usize) -> Rc<Self> {
        Rc::new(Shared {
            conn: RefCell::new(conn),
            table: RefCell::new(Table::default()),
            max_unwritten,
            blocked: std::cell::Cell::new(false),
        })
    }

    /// What `e` may send now: what it reserved, within the windows and the room left in
    /// the connection's unwritten output.
    fn room(&self, conn: &ServerConn, e: &Entry) -> usize {
        if !e.pending.is_empty() || e.reset.is_some() {
            return 0;
        }
        let unwritten = self.max_unwritten.saturating_sub(conn.output().len());
        if unwritten == 0 {
            self.blocked.set(true);
        }
        e.reserved.min(conn.send_capacity(e.id)).min(unwritten)
    }

    /// A quiet connection gives back what its streams left: the codec's buffers and stream
    /// list, and the handle table's slots.
    pub(super) fn release_idle(&self) {
        self.conn.borrow_mut().release_idle_buffers();
        self.table.borrow_mut().release_if_empty();
    }

    /// The output was written down: senders refused for it may go on.
    pub(super) fn on_written(&self) {
        if self.blocked.get() && self.conn.borrow().output().len() < self.max_unwritten {
            self.blocked.set(false);
            self.on_window(None);
        }
    }

    /// A new stream's handles: its body and its responder.
    pub(super) fn open(self: &Rc<Self>, id: StreamId, end_stream: bool) -> (RecvStream, SendResponse) {
        let mut table = self.table.borrow_mut();
        let mut entry = Entry::new(id, end_stream);
        entry.handles = 2;
        let slot = match table.free.pop() {
            Some(slot) => {
                if let Some(s) = table.slots.get_mut(slot) {
                    *s = Some(entry);
                }
                slot
            }
            None => {
                table.slots.push(Some(entry));
                table.slots.len() - 1
            }
        };
        let handle = || Handle {
            shared: Rc::clone(self),
            slot,
            id,
        };
        (
            RecvStream {
                h: Backing::Native(handle()),
            },
            SendResponse {
                h: Backing::Native(handle()),
            },
        )
    }

    /// Request body bytes for `id` (given straight back when no one reads them any more).
    pub(super) fn on_data(&self, id: StreamId, data: Bytes, end_stream: bool) {
        let mut table = self.table.borrow_mut();
        match table.find(id) {
            Some(e) => {
                if !data.is_empty() {
                    e.recv.push_back(data);
                }
                e.recv_ended |= end_stream;
                e.wake();
            }
            None => self.conn.borrow_mut().release_data(id, data.len()),
        }
    }

    pub(super) fn on_trailers(&self, id: StreamId, fields: HeaderMap) {
        if let Some(e) = self.table.borrow_mut().find(id) {
            e.trailers = Some(fields);
            e.recv_ended = true;
            e.wake();
        }
    }

    pub(super) fn on_reset(&self, id: StreamId, code: Reason) {
        let mut table = self.table.borrow_mut();
        let Some(slot) = table.slots.iter().position(|e| e.as_ref().is_some_and(|e| e.id == id)) else {
            return;
        };
        if let Some(Some(e)) = table.slots.get_mut(slot) {
            e.reset = Some(code);
            e.send_closed = true;
            e.pending.clear();
            e.pending_len = 0;
            e.wake();
            if e.handles == 0 {
                table.release(slot);
            }
        }
    }

    /// Send capacity grew on `id`, or on every stream: pending bytes go, senders wake.
    pub(super) fn on_window(&self, id: Option<StreamId>) {
        let mut table = self.table.borrow_mut();
        let mut conn = self.conn.borrow_mut();
        let mut finished = false;
        for e in table.slots.iter_mut().flatten() {
            if id.is_some_and(|id| id != e.id) {
                continue;
            }
            if !e.pending.is_empty() {
                flush_pending(&mut conn, e);
            }
            if e.pending.is_empty() {
                if e.handles == 0 {
                    finished = true;
                } else {
                    e.wake();
                }
            }
            if id.is_some() {
                break;
            }
        }
        drop(conn);
        if finished {
            // Orphans (every handle gone) whose last bytes just went.
            for slot in 0..table.slots.len() {
                let gone = table
                    .slots
                    .get(slot)
                    .and_then(Option::as_ref)
                    .is_some_and(|e| e.handles == 0 && e.pending.is_empty());
                if gone {
                    table.release(slot);
                }
            }
        }
    }

    /// The connection ended: every stream's next call fails.
    pub(super) fn close_all(&self) {
        for e in self.table.borrow_mut().slots.iter_mut().flatten() {
            e.send_closed = true;
            e.recv_ended = true;
            if e.reset.is_none() {
                e.reset = Some(Reason::CANCEL);
            }
            e.wake();
        }
    }
}

/// Queued response bytes out as far as the window lets them, then what ends the stream.
fn flush_pending(conn: &mut ServerConn, e: &mut Entry) {
    while let Some(front) = e.pending.front_mut() {
        let last = e.pending_len == front.len();
        let end = last && e.pending_end && e.pending_trailers.is_none();
        let Ok(n) = conn.send_data(e.id, front, end) else {
            e.pending.clear();
            e.pending_len = 0;
            e.send_closed = true;
            return;
        };
        e.pending_len -= n;
        if n < front.len() {
            let _ = front.split_to(n);
            return;
        }
        e.pending.pop_front();
    }
    if let Some(t) = e.pending_trailers.take() {
        let before = conn.output().len();
        let _ = conn.send_trailers(e.id, fields(&t));
        e.head_bytes += (conn.output().len() - before) as u64;
        e.send_closed = true;
    }
}

fn fields(map: &HeaderMap) -> impl Iterator<Item = (&[u8], &[u8])> {
    map.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()))
}

/// One handle's reference to its stream.
struct Handle {
    shared: Rc<Shared>,
    slot: usize,
    id: StreamId,
}

impl Handle {
    /// `f` on the stream's entry and the codec (`Closed` once the stream is gone).
    fn with<R>(&self, f: impl FnOnce(&mut Entry, &mut ServerConn) -> R) -> R
    where
        R: From<StreamError>,
    {
        let mut table = self.shared.table.borrow_mut();
        match table.at(self.slot, self.id) {
            Some(e) => f(e, &mut self.shared.conn.borrow_mut()),
            None => R::from(StreamError::Closed),
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let mut table = self.shared.table.borrow_mut();
        let Some(e) = table.at(self.slot, self.id) else { return };
        e.handles = e.handles.saturating_sub(1);
        if e.handles > 0 {
            return;
        }
        let mut conn = self.shared.conn.borrow_mut();
        let unread: usize = e.held + e.recv.iter().map(Bytes::len).sum::<usize>();
        e.held = 0;
        e.recv.clear();
        if unread > 0 {
            conn.release_data(e.id, unread);
        }
        if e.reset.is_none() && !e.send_closed {
            // The response never finished: nothing more of it will come.
            conn.reset(e.id, Reason::CANCEL);
            e.reset = Some(Reason::CANCEL);
        }
        let orphan = e.reset.is_none() && !e.pending.is_empty();
        drop(conn);
        // A finished response still waiting for window goes out as it opens
        // (`Shared::on_window` frees the slot then).
        if !orphan {
            table.release(self.slot);
        }
    }
}

impl From<StreamError> for Result<(), StreamError> {
    fn from(e: StreamError) -> Self {
        Err(e)
    }
}

/// What a handle refers to: a stream of this connection's HTTP/2 codec, or a bridged one
/// (HTTP/3, `bridge.rs`) whose driver moves its bytes.
enum Backing {
    Native(Handle),
    Bridged(BridgeHandle),
}

/// One handle's reference to a bridged stream (counted, as `Handle`'s are).
struct BridgeHandle(Rc<Bridge>);

impl BridgeHandle {
    fn new(bridge: &Rc<Bridge>) -> Self {
        bridge.hold();
        BridgeHandle(Rc::clone(bridge))
    }
}

impl Drop for BridgeHandle {
    fn drop(&mut self) {
        self.0.release_handle();
    }
}

/// The handles of a bridged stream, for its driver to give the forwarding code.
pub(crate) fn bridged(bridge: &Rc<Bridge>) -> (RecvStream, SendResponse) {
    (
        RecvStream {
            h: Backing::Bridged(BridgeHandle::new(bridge)),
        },
        SendResponse {
            h: Backing::Bridged(BridgeHandle::new(bridge)),
        },
    )
}

/// The request body of a stream.
pub(crate) struct RecvStream {
    h: Backing,
}

impl RecvStream {
    /// The client ended its side and every piece was taken.
    pub(crate) fn is_end_stream(&self) -> bool {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return b.0.is_end_stream(),
        };
        let mut table = h.shared.table.borrow_mut();
        table
            .at(h.slot, h.id)
            .is_none_or(|e| e.recv_ended && e.recv.is_empty() && e.trailers.is_none())
    }

    /// Why the stream was reset, once it was (by the client, or by the codec for what the
    /// client sent), or closed (`CANCEL`).
    pub(crate) fn reset_code(&self) -> Option<Reason> {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return b.0.reset_code(),
        };
        let mut table = h.shared.table.borrow_mut();
        match table.at(h.slot, h.id) {
            Some(e) => e.reset,
            None => Some(Reason::CANCEL),
        }
    }

    /// The next piece of the body; `None` at its end.
    pub(crate) async fn data(&mut self) -> Option<Result<Bytes, StreamError>> {
        std::future::poll_fn(|cx| self.poll_data(cx)).await
    }

    pub(crate) fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, StreamError>>> {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return b.0.poll_data(cx),
        };
        let mut table = h.shared.table.borrow_mut();
        let Some(e) = table.at(h.slot, h.id) else {
            return Poll::Ready(Some(Err(StreamError::Closed)));
        };
        if let Some(data) = e.recv.pop_front() {
            e.held += data.len();
            return Poll::Ready(Some(Ok(data)));
        }
        if let Some(code) = e.reset {
            return Poll::Ready(Some(Err(StreamError::Reset(code))));
        }
        if e.recv_ended {
            return Poll::Ready(None);
        }
        e.park(cx);
        Poll::Pending
    }

    /// `n` bytes of what `data` gave were forwarded: the client may send as many more.
    pub(crate) fn release_capacity(&mut self, n: usize) {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return b.0.release_capacity(n),
        };
        let mut table = h.shared.table.borrow_mut();
        if let Some(e) = table.at(h.slot, h.id) {
            let n = n.min(e.held);
            e.held -= n;
            h.shared.conn.borrow_mut().release_data(h.id, n);
        }
    }

    /// The trailers that ended the body, if any (after the last piece).
    pub(crate) async fn trailers(&mut self) -> Result<Option<HeaderMap>, StreamError> {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return std::future::poll_fn(|cx| b.0.poll_trailers(cx)).await,
        };
        std::future::poll_fn(|cx| {
            let mut table = h.shared.table.borrow_mut();
            let Some(e) = table.at(h.slot, h.id) else {
                return Poll::Ready(Err(StreamError::Closed));
            };
            if let Some(t) = e.trailers.take() {
                return Poll::Ready(Ok(Some(t)));
            }
            if let Some(code) = e.reset {
                return Poll::Ready(Err(StreamError::Reset(code)));
            }
            if e.recv_ended && e.recv.is_empty() {
                return Poll::Ready(Ok(None));
            }
            e.park(cx);
            Poll::Pending
        })
        .await
    }
}

/// The response side of a stream before its head went.
pub(crate) struct SendResponse {
    h: Backing,
}

impl SendResponse {
    /// The response head; `end`: no body follows. The body's sender otherwise.
    pub(crate) fn send_response(&mut self, head: http::Response<()>, end: bool) -> Result<SendStream, StreamError> {
        self.send_response_fields(head.status().as_u16(), fields(head.headers()), end)
    }

    /// [`SendResponse::send_response`] from (name, value) pairs: valid field names (any
    /// case; the codec lowercases them) and values.
    pub(crate) fn send_response_fields<'f>(
        &mut self,
        status: u16,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
        end: bool,
    ) -> Result<SendStream, StreamError> {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => {
                let mut map = HeaderMap::new();
                for (name, value) in fields {
                    // Both checked by the caller (valid names and values); skipped otherwise.
                    if let (Ok(n), Ok(v)) = (http::HeaderName::from_bytes(name), http::HeaderValue::from_bytes(value)) {
                        map.append(n, v);
                    }
                }
                b.0.send_head(status, map, end)?;
                return Ok(SendStream {
                    h: Backing::Bridged(BridgeHandle::new(&b.0)),
                });
            }
        };
        h.with(|e, conn| {
            if let Some(code) = e.reset {
                return Err(StreamError::Reset(code));
            }
            if e.head_sent {
                return Err(StreamError::Closed);
            }
            let before = conn.output().len();
            conn.send_headers(e.id, status, fields, end)
                .map_err(|_| StreamError::Closed)?;
            e.head_bytes += (conn.output().len() - before) as u64;
            e.head_sent = true;
            e.send_closed = end;
            e.handles += 1;
            Ok(())
        })?;
        Ok(SendStream {
            h: Backing::Native(Handle {
                shared: Rc::clone(&h.shared),
                slot: h.slot,
                id: h.id,
            }),
        })
    }

    /// An interim (1xx) head; more may follow, then the final one.
    pub(crate) fn send_informational(&mut self, head: http::Response<()>) -> Result<(), StreamError> {
        if !head.status().is_informational() {
            return Err(StreamError::Closed);
        }
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => {
                let (parts, ()) = head.into_parts();
                return b.0.send_interim(parts.status.as_u16(), parts.headers);
            }
        };
        h.with(|e, conn| {
            if e.head_sent || e.reset.is_some() {
                return Err(StreamError::Closed);
            }
            let before = conn.output().len();
            conn.send_headers(e.id, head.status().as_u16(), fields(head.headers()), false)
                .map_err(|_| StreamError::Closed)?;
            e.head_bytes += (conn.output().len() - before) as u64;
            Ok(())
        })
    }

    /// Bytes of the HEADERS frames this stream's response sent so far (interim and final
    /// heads, trailers), as encoded.
    pub(crate) fn head_bytes(&self) -> u64 {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return b.0.head_bytes(),
        };
        let mut table = h.shared.table.borrow_mut();
        table.at(h.slot, h.id).map_or(0, |e| e.head_bytes)
    }

    pub(crate) fn send_reset(&mut self, code: Reason) {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return b.0.send_reset(code),
        };
        send_reset(h, code);
    }

    /// Ready once the client resets the stream (or the connection ends).
    pub(crate) fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<Result<Reason, StreamError>> {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return b.0.poll_reset(cx),
        };
        poll_reset(h, cx)
    }
}

fn send_reset(h: &Handle, code: Reason) {
    let _: Result<(), StreamError> = h.with(|e, conn| {
        if e.reset.is_none() && !(e.send_closed && e.pending.is_empty()) {
            conn.reset(e.id, code);
        }
        e.reset.get_or_insert(code);
        e.send_closed = true;
        e.pending.clear();
        e.pending_len = 0;
        Ok(())
    });
}

fn poll_reset(h: &Handle, cx: &mut Context<'_>) -> Poll<Result<Reason, StreamError>> {
    let mut table = h.shared.table.borrow_mut();
    match table.at(h.slot, h.id) {
        None => Poll::Ready(Err(StreamError::Closed)),
        Some(e) => match e.reset {
            Some(code) => Poll::Ready(Ok(code)),
            None => {
                e.park(cx);
                Poll::Pending
            }
        },
    }
}

/// The response body's sender.
pub(crate) struct SendStream {
    h: Backing,
}

impl SendStream {
    /// Asks for window room for `n` bytes ([`SendStream::capacity`] says what is granted).
    pub(crate) fn reserve_capacity(&mut self, n: usize) {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return b.0.reserve_capacity(n),
        };
        let _: Result<(), StreamError> = h.with(|e, _| {
            e.reserved = n;
            Ok(())
        });
    }

    /// What may be sent now without waiting: the reserved amount within the windows.
    pub(crate) fn capacity(&self) -> usize {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return b.0.capacity(),
        };
        let shared = &*h.shared;
        let mut table = shared.table.borrow_mut();
        match table.at(h.slot, h.id) {
            Some(e) => shared.room(&shared.conn.borrow(), e),
            None => 0,
        }
    }

    /// Ready with the capacity granted once the windows have room; `Err` once the stream
    /// was reset, `None` once it is closed.
    pub(crate) fn poll_capacity(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<usize, StreamError>>> {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return b.0.poll_capacity(cx),
        };
        let shared = &*h.shared;
        let mut table = shared.table.borrow_mut();
        let Some(e) = table.at(h.slot, h.id) else {
            return Poll::Ready(None);
        };
        if let Some(code) = e.reset {
            return Poll::Ready(Some(Err(StreamError::Reset(code))));
        }
        if e.send_closed {
            return Poll::Ready(None);
        }
        let room = shared.room(&shared.conn.borrow(), e);
        if room > 0 {
            return Poll::Ready(Some(Ok(room)));
        }
        e.park(cx);
        Poll::Pending
    }

    /// Sends `data` (what the window has no room for waits and goes as it opens).
    pub(crate) fn send_data(&mut self, data: Bytes, end: bool) -> Result<(), StreamError> {
        self.send_slice(&data, Some(&data), end)
    }

    /// Sends a copy of `data`, as [`SendStream::send_data`] (copied only into the output,
    /// or, when the window is shut, into the stream's queue).
    pub(crate) fn send_bytes(&mut self, data: &[u8], end: bool) -> Result<(), StreamError> {
        self.send_slice(data, None, end)
    }

    fn send_slice(&mut self, data: &[u8], owned: Option<&Bytes>, end: bool) -> Result<(), StreamError> {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => {
                return b
                    .0
                    .send_data(owned.cloned().unwrap_or_else(|| Bytes::copy_from_slice(data)), end);
            }
        };
        h.with(|e, conn| {
            if let Some(code) = e.reset {
                return Err(StreamError::Reset(code));
            }
            if e.send_closed {
                return Err(StreamError::Closed);
            }
            e.reserved = e.reserved.saturating_sub(data.len());
            let sent = if e.pending.is_empty() {
                conn.send_data(e.id, data, end).map_err(|_| StreamError::Closed)?
            } else {
                0
            };
            if sent < data.len() {
                let rest = match owned {
                    Some(b) => b.slice(sent..),
                    None => Bytes::copy_from_slice(data.get(sent..).unwrap_or_default()),
                };
                e.pending_len += rest.len();
                e.pending.push_back(rest);
                e.pending_end = end;
            }
            e.send_closed = end;
            Ok(())
        })
    }

    /// Trailers: they end the response.
    pub(crate) fn send_trailers(&mut self, trailers: HeaderMap) -> Result<(), StreamError> {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return b.0.send_trailers(trailers),
        };
        h.with(|e, conn| {
            if let Some(code) = e.reset {
                return Err(StreamError::Reset(code));
            }
            if e.send_closed {
                return Err(StreamError::Closed);
            }
            e.send_closed = true;
            if e.pending.is_empty() {
                let before = conn.output().len();
                conn.send_trailers(e.id, fields(&trailers))
                    .map_err(|_| StreamError::Closed)?;
                e.head_bytes += (conn.output().len() - before) as u64;
                Ok(())
            } else {
                e.pending_trailers = Some(trailers);
                e.pending_end = true;
                Ok(())
            }
        })
    }

    pub(crate) fn send_reset(&mut self, code: Reason) {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return b.0.send_reset(code),
        };
        send_reset(h, code);
    }

    pub(crate) fn poll_reset(&mut self, cx: &mut Context<'_>) -> Poll<Result<Reason, StreamError>> {
        let h = match &self.h {
            Backing::Native(h) => h,
            Backing::Bridged(b) => return b.0.poll_reset(cx),
        };
        poll_reset(h, cx)
    }
}
