//! A stream whose bytes another protocol's driver moves (HTTP/3: `quic::stream`), served
//! through the same handles (`RecvStream`, `SendResponse`, `SendStream`) as a stream of
//! tollgate's HTTP/2 codec, so one forwarding path serves both.
//!
//! Owns [`Bridge`]: the queues between the handles (the app side) and the driver (the pump
//! side). Invariants: request bytes buffered here plus those taken and not yet released stay
//! within `window` (the driver reads from the transport only while [`Bridge::recv_room`]
//! says so); response bytes queued stay within `window` too (a sender is granted only that
//! much capacity), so a stream holds at most two windows whatever its peer does; the last
//! handle dropped with the response unfinished cancels the stream (the driver resets it).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::HeaderMap;

use super::StreamError;
use crate::http::h2::Reason;

/// What the driver is to send next, in order.
pub(crate) enum Output {
    /// An interim (1xx) head.
    Interim(u16, HeaderMap),
    /// The final head; `true`: no body follows.
    Head(u16, HeaderMap, bool),
    /// Body bytes; `true`: they end the response.
    Data(Bytes, bool),
    /// Trailers, which end the response.
    Trailers(HeaderMap),
    /// Reset the stream with this code (the app gave up, or dropped it unfinished).
    Reset(Reason),
    /// Nothing more will come: the response ended (or was reset) and was handed over.
    Done,
}

/// The queues of one bridged stream.
pub(crate) struct Bridge {
    state: RefCell<State>,
}

struct State {
    window: usize,
    recv: VecDeque<Bytes>,
    /// Bytes in `recv`, and bytes the app took and has not released yet.
    recv_buffered: usize,
    held: usize,
    recv_ended: bool,
    trailers: Option<HeaderMap>,
    /// The stream was reset (by the client: its code; by us: ours).
    reset: Option<Reason>,
    /// A reset of ours the driver has not sent yet.
    reset_to_send: Option<Reason>,
    head_sent: bool,
    /// The response is complete as far as the app is concerned (or reset).
    send_closed: bool,
    out: VecDeque<Output>,
    /// Body bytes in `out`.
    out_len: usize,
    reserved: usize,
    /// Estimated encoded bytes of the response heads (the driver's codec compresses them;
    /// the estimate counts names and values as literals).
    head_bytes: u64,
    app_waker: Option<Waker>,
    pump_waker: Option<Waker>,
    handles: u8,
    /// The driver handed over `Done` or a reset: nothing more is read from `out`.
    finished: bool,
}

fn park(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

fn wake(slot: &mut Option<Waker>) {
    if let Some(w) = slot.take() {
        w.wake();
    }
}

fn estimate(status_line: usize, fields: &HeaderMap) -> u64 {
    let f: usize = fields.iter().map(|(n, v)| n.as_str().len() + v.len() + 2).sum();
    (status_line + f) as u64
}

impl Bridge {
    /// A stream whose request body ended with its head when `end_stream`; each direction
    /// may hold `window` bytes.
    pub(crate) fn new(window: usize, end_stream: bool) -> Bridge {
        Bridge {
            state: RefCell::new(State {
                window: window.max(1),
                recv: VecDeque::new(),
                recv_buffered: 0,
                held: 0,
                recv_ended: end_stream,
                trailers: None,
                reset: None,
                reset_to_send: None,
                head_sent: false,
                send_closed: false,
                out: VecDeque::new(),
                out_len: 0,
                reserved: 0,
                head_bytes: 0,
                app_waker: None,
                pump_waker: None,
                handles: 0,
                finished: false,
            }),
        }
    }

    // ---- the driver's side ----

    /// Ready with how many request bytes may be read from the transport now (> 0), or 0
    /// once nothing more is wanted (the stream was reset, or every handle is gone).
    pub(crate) fn poll_recv_room(&self, cx: &Context<'_>) -> Poll<usize> {
        let mut s = self.state.borrow_mut();
        // Every handle gone: nobody will read the rest of the body (the pump stops it).
        if s.reset.is_some() || s.handles == 0 {
            return Poll::Ready(0);
        }
        let used = s.recv_buffered + s.held;
        if used < s.window {
            return Poll::Ready(s.window - used);
        }
        park(&mut s.pump_waker, cx);
        Poll::Pending
    }

    /// A piece of the request body read from the transport.
    pub(crate) fn push_data(&self, data: Bytes) {
        let mut s = self.state.borrow_mut();
        if s.reset.is_some() || data.is_empty() {
            return;
        }
        s.recv_buffered += data.len();
        s.recv.push_back(data);
        wake(&mut s.app_waker);
    }

    /// The request body ended (with trailers, if it had them).
    pub(crate) fn end_recv(&self, trailers: Option<HeaderMap>) {
        let mut s = self.state.borrow_mut();
        s.recv_ended = true;
        s.trailers = trailers;
        wake(&mut s.app_waker);
    }

    /// The client reset the stream (or its request was malformed): the app stops.
    pub(crate) fn client_reset(&self, code: Reason) {
        let mut s = self.state.borrow_mut();
        s.reset.get_or_insert(code);
        s.send_closed = true;
        s.out.clear();
        s.out_len = 0;
        wake(&mut s.app_waker);
        wake(&mut s.pump_waker);
    }

    /// The next thing to send; `Done` once the response is over.
    pub(crate) fn poll_output(&self, cx: &Context<'_>) -> Poll<Output> {
        let mut s = self.state.borrow_mut();
        if s.finished {
            return Poll::Ready(Output::Done);
        }
        if let Some(code) = s.reset_to_send.take() {
            s.finished = true;
            return Poll::Ready(Output::Reset(code));
        }
        if s.reset.is_some() {
            s.finished = true;
            return Poll::Ready(Output::Done);
        }
        if let Some(next) = s.out.pop_front() {
            if let Output::Data(d, _) = &next {
                s.out_len -= d.len();
                // Room for the sender again.
                wake(&mut s.app_waker);
            }
            return Poll::Ready(next);
        }
        if s.send_closed {
            s.finished = true;
            return Poll::Ready(Output::Done);
        }
        park(&mut s.pump_waker, cx);
        Poll::Pending
    }

    /// The request body is over for the driver: ended, or the stream reset.
    pub(crate) fn is_done_receiving(&self) -> bool {
        let s = self.state.borrow();
        s.recv_ended || s.reset.is_some()
    }

    // ---- the handles' side (`handles.rs`) ----

    pub(super) fn hold(&self) {
        let mut s = self.state.borrow_mut();
        s.handles = s.handles.saturating_add(1);
    }

    pub(super) fn release_handle(&self) {
        let mut s = self.state.borrow_mut();
        s.handles = s.handles.saturating_sub(1);
        if s.handles > 0 {
            return;
        }
        s.recv.clear();
        s.recv_buffered = 0;
        s.held = 0;
        if s.reset.is_none() && !s.send_closed {
            // The response never finished: nothing more of it will come.
            s.reset = Some(Reason::CANCEL);
            s.reset_to_send = Some(Reason::CANCEL);
            s.send_closed = true;
            s.out.clear();
            s.out_len = 0;
        }
        wake(&mut s.pump_waker);
    }

    pub(super) fn is_end_stream(&self) -> bool {
        let s = self.state.borrow();
        s.recv_ended && s.recv.is_empty() && s.trailers.is_none()
    }

    pub(super) fn reset_code(&self) -> Option<Reason> {
        self.state.borrow().reset
    }

    pub(super) fn poll_data(&self, cx: &Context<'_>) -> Poll<Option<Result<Bytes, StreamError>>> {
        let mut s = self.state.borrow_mut();
        if let Some(data) = s.recv.pop_front() {
            s.recv_buffered -= data.len();
            s.held += data.len();
            return Poll::Ready(Some(Ok(data)));
        }
        if let Some(code) = s.reset {
            return Poll::Ready(Some(Err(StreamError::Reset(code))));
        }
        if s.recv_ended {
            return Poll::Ready(None);
        }
        park(&mut s.app_waker, cx);
        Poll::Pending
    }

    pub(super) fn release_capacity(&self, n: usize) {
        let mut s = self.state.borrow_mut();
        let n = n.min(s.held);
        s.held -= n;
        if n > 0 {
            wake(&mut s.pump_waker);
        }
    }

    pub(super) fn poll_trailers(&self, cx: &Context<'_>) -> Poll<Result<Option<HeaderMap>, StreamError>> {
        let mut s = self.state.borrow_mut();
        if let Some(t) = s.trailers.take() {
            return Poll::Ready(Ok(Some(t)));
        }
        if let Some(code) = s.reset {
            return Poll::Ready(Err(StreamError::Reset(code)));
        }
        if s.recv_ended && s.recv.is_empty() {
            return Poll::Ready(Ok(None));
        }
        park(&mut s.app_waker, cx);
        Poll::Pending
    }

    pub(super) fn send_head(&self, status: u16, fields: HeaderMap, end: bool) -> Result<(), StreamError> {
        let mut s = self.state.borrow_mut();
        if let Some(code) = s.reset {
            return Err(StreamError::Reset(code));
        }
        if s.head_sent {
            return Err(StreamError::Closed);
        }
        s.head_bytes += estimate(4, &fields);
        s.head_sent = true;
        s.send_closed = end;
        s.out.push_back(Output::Head(status, fields, end));
        wake(&mut s.pump_waker);
        Ok(())
    }

    pub(super) fn send_interim(&self, status: u16, fields: HeaderMap) -> Result<(), StreamError> {
        let mut s = self.state.borrow_mut();
        if s.head_sent || s.reset.is_some() {
            return Err(StreamError::Closed);
        }
        s.head_bytes += estimate(4, &fields);
        s.out.push_back(Output::Interim(status, fields));
        wake(&mut s.pump_waker);
        Ok(())
    }

    pub(super) fn head_bytes(&self) -> u64 {
        self.state.borrow().head_bytes
    }

    pub(super) fn send_reset(&self, code: Reason) {
        let mut s = self.state.borrow_mut();
        if s.reset.is_none() && !(s.send_closed && s.out.is_empty()) {
            s.reset_to_send = Some(code);
        }
        s.reset.get_or_insert(code);
        s.send_closed = true;
        s.out.clear();
        s.out_len = 0;
        wake(&mut s.pump_waker);
    }

    pub(super) fn poll_reset(&self, cx: &Context<'_>) -> Poll<Result<Reason, StreamError>> {
        let mut s = self.state.borrow_mut();
        match s.reset {
            Some(code) => Poll::Ready(Ok(code)),
            None => {
                park(&mut s.app_waker, cx);
                Poll::Pending
            }
        }
    }

    pub(super) fn reserve_capacity(&self, n: usize) {
        self.state.borrow_mut().reserved = n;
    }

    fn room(s: &State) -> usize {
        s.reserved.min(s.window.saturating_sub(s.out_len))
    }

    pub(super) fn capacity(&self) -> usize {
        Self::room(&self.state.borrow())
    }

    pub(super) fn poll_capacity(&self, cx: &Context<'_>) -> Poll<Option<Result<usize, StreamError>>> {
        let mut s = self.state.borrow_mut();
        if let Some(code) = s.reset {
            return Poll::Ready(Some(Err(StreamError::Reset(code))));
        }
        if s.send_closed {
            return Poll::Ready(None);
        }
        let room = Self::room(&s);
        if room > 0 {
            return Poll::Ready(Some(Ok(room)));
        }
        park(&mut s.app_waker, cx);
        Poll::Pending
    }

    pub(super) fn send_data(&self, data: Bytes, end: bool) -> Result<(), StreamError> {
        let mut s = self.state.borrow_mut();
        if let Some(code) = s.reset {
            return Err(StreamError::Reset(code));
        }
        if s.send_closed {
            return Err(StreamError::Closed);
        }
        s.reserved = s.reserved.saturating_sub(data.len());
        s.out_len += data.len();
        s.out.push_back(Output::Data(data, end));
        s.send_closed = end;
        wake(&mut s.pump_waker);
        Ok(())
    }

    pub(super) fn send_trailers(&self, trailers: HeaderMap) -> Result<(), StreamError> {
        let mut s = self.state.borrow_mut();
        if let Some(code) = s.reset {
            return Err(StreamError::Reset(code));
        }
        if s.send_closed {
            return Err(StreamError::Closed);
        }
        s.head_bytes += estimate(0, &trailers);
        s.send_closed = true;
        s.out.push_back(Output::Trailers(trailers));
        wake(&mut s.pump_waker);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
    use super::*;
    use std::task::Waker;

    fn cx() -> Context<'static> {
        Context::from_waker(Waker::noop())
    }

    #[test]
    fn request_bytes_stay_within_the_window_until_released() {
        let b = Bridge::new(10, false);
        b.hold();
        assert_eq!(b.poll_recv_room(&cx()), Poll::Ready(10));
        b.push_data(Bytes::from_static(b"0123456789"));
        assert!(b.poll_recv_room(&cx()).is_pending());
        let Poll::Ready(Some(Ok(d))) = b.poll_data(&cx()) else {
            panic!()
        };
        assert_eq!(d.len(), 10);
        // Taken but not released: still counted.
        assert!(b.poll_recv_room(&cx()).is_pending());
        b.release_capacity(4);
        assert_eq!(b.poll_recv_room(&cx()), Poll::Ready(4));
        b.end_recv(None);
        assert!(matches!(b.poll_data(&cx()), Poll::Ready(None)));
    }

    #[test]
    fn response_capacity_is_the_window_less_what_waits() {
        let b = Bridge::new(8, true);
        b.hold();
        b.send_head(200, HeaderMap::new(), false).unwrap();
        b.reserve_capacity(100);
        assert_eq!(b.capacity(), 8);
        b.send_data(Bytes::from_static(b"abcdef"), false).unwrap();
        assert_eq!(b.capacity(), 2);
        assert!(matches!(b.poll_output(&cx()), Poll::Ready(Output::Head(200, _, false))));
        assert!(matches!(b.poll_output(&cx()), Poll::Ready(Output::Data(_, false))));
        assert_eq!(b.capacity(), 8);
        assert!(b.poll_output(&cx()).is_pending());
        b.send_data(Bytes::new(), true).unwrap();
        assert!(matches!(b.poll_output(&cx()), Poll::Ready(Output::Data(_, true))));
        assert!(matches!(b.poll_output(&cx()), Poll::Ready(Output::Done)));
    }

    #[test]
    fn an_unfinished_response_dropped_is_reset_as_cancelled() {
        let b = Bridge::new(8, true);
        b.hold();
        b.send_head(200, HeaderMap::new(), false).unwrap();
        b.release_handle();
        // The queued head is dropped with the response: only the reset goes.
        assert!(matches!(
            b.poll_output(&cx()),
            Poll::Ready(Output::Reset(Reason::CANCEL))
        ));
        assert!(matches!(b.poll_output(&cx()), Poll::Ready(Output::Done)));
        assert_eq!(b.poll_recv_room(&cx()), Poll::Ready(0));
    }

    #[test]
    fn a_body_nobody_reads_any_more_is_stopped_once_the_handles_are_gone() {
        let b = Bridge::new(8, false);
        b.hold();
        b.hold();
        b.send_head(200, HeaderMap::new(), true).unwrap();
        // The request body's handle went first; the response's is still there.
        b.release_handle();
        assert_eq!(b.poll_recv_room(&cx()), Poll::Ready(8));
        b.release_handle();
        assert_eq!(b.poll_recv_room(&cx()), Poll::Ready(0));
    }

    #[test]
    fn a_client_reset_stops_both_sides() {
        let b = Bridge::new(8, false);
        b.hold();
        b.client_reset(Reason::CANCEL);
        assert!(matches!(
            b.poll_data(&cx()),
            Poll::Ready(Some(Err(StreamError::Reset(_))))
        ));
        assert!(b.send_head(200, HeaderMap::new(), true).is_err());
        assert!(matches!(b.poll_output(&cx()), Poll::Ready(Output::Done)));
    }
}
