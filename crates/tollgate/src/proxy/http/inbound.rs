//! Bytes read from one side of an HTTP exchange and not yet consumed.
//!
//! The storage is a pooled buffer taken only while bytes are pending (an idle keep-alive
//! connection holds none). `data()` is what has been read and not consumed; heads are parsed
//! in place from it, bodies are forwarded from it. It never grows: a head that does not fit
//! is refused (431), a body is forwarded in buffer-sized pieces. While a head arrives slowly,
//! its bytes wait on a *shelf* of their own size and the pooled buffer goes back (`shelve`):
//! a client that sent half a head holds those bytes, not a whole buffer; the next read takes
//! a buffer again and puts them back in front.

use std::io::{self, Read};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

use crate::buffer::{BufferPool, Parked, PooledBuffer};
use crate::error::{Error, ErrorKind, Phase, Side};

/// What one read for a response head says, for every front (HTTP/1 and HTTP/2 clients): more
/// bytes (`received` is set), or the failure the server's close is — before any byte
/// `ServerEmpty`, the one failure after which a request may be replayed.
pub(crate) fn response_head_read(read: io::Result<usize>, received: &mut bool) -> Result<(), Error> {
    match read {
        Ok(0) | Err(_) if !*received => Err(Error::new(
            ErrorKind::ServerEmpty,
            Side::Back,
            "server closed before responding",
        )),
        Ok(0) => Err(Error::new(
            ErrorKind::BadResponse,
            Side::Back,
            "server closed mid response head",
        )),
        Err(e) => Err(Error::io(Side::Back, "read response head", e).during(Phase::Headers)),
        Ok(_) => {
            *received = true;
            Ok(())
        }
    }
}

#[derive(Default)]
pub(crate) struct Inbound {
    buf: Option<PooledBuffer>,
    /// The pending bytes while no buffer is held (`shelve`); empty otherwise.
    shelf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Inbound {
    fn bytes(&self) -> &[u8] {
        match &self.buf {
            Some(b) => b,
            None => &self.shelf,
        }
    }

    pub(crate) fn data(&self) -> &[u8] {
        self.bytes().get(self.start..self.end).unwrap_or_default()
    }

    /// The pending bytes, for a body to be re-framed in place before it is forwarded.
    pub(crate) fn data_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.start, self.end);
        let bytes: &mut [u8] = match &mut self.buf {
            Some(b) => b,
            None => &mut self.shelf,
        };
        bytes.get_mut(start..end).unwrap_or_default()
    }

    /// Moves the pending bytes onto a shelf of their size and gives the buffer back, for a
    /// wait of unknown length (the rest of a head).
    pub(crate) fn shelve(&mut self) {
        if self.buf.is_none() {
            return;
        }
        self.shelf = self.data().into();
        self.buf = None;
        self.start = 0;
        self.end = self.shelf.len();
    }

    /// Pending bytes that waited elsewhere (a head begun before the park), on their shelf.
    pub(crate) fn shelved(shelf: Box<[u8]>) -> Self {
        Inbound {
            end: shelf.len(),
            shelf,
            ..Inbound::default()
        }
    }

    /// The pending bytes on their shelf (none: an empty one, no allocation), for the park.
    pub(crate) fn into_shelf(mut self) -> Box<[u8]> {
        self.shelve();
        if self.start == 0 && self.end == self.shelf.len() {
            return self.shelf;
        }
        self.data().into()
    }

    /// Holds `buf` from now on, with what was shelved at its front.
    fn hold(&mut self, mut buf: PooledBuffer) {
        let shelved = std::mem::take(&mut self.shelf);
        let pending = shelved.get(self.start..self.end).unwrap_or_default();
        if let Some(front) = buf.get_mut(..pending.len()) {
            front.copy_from_slice(pending);
        }
        self.start = 0;
        self.end = pending.len();
        self.buf = Some(buf);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub(crate) fn holds_buffer(&self) -> bool {
        self.buf.is_some()
    }

    /// The data fills the whole buffer: nothing more can be read before some is consumed.
    pub(crate) fn is_full(&self) -> bool {
        self.buf
            .as_ref()
            .is_some_and(|b| self.start == 0 && self.end == b.len())
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Gives the buffer back to the pool if nothing is pending.
    pub(crate) fn release_if_empty(&mut self) {
        if self.is_empty() {
            self.buf = None;
            self.shelf = Box::default();
        }
    }

    /// One read from a socket that is not registered with the reactor, without waiting:
    /// `Ok(None)` when it has nothing yet (or no buffer is free right now). The buffer is
    /// kept only if the read returned bytes.
    pub(crate) fn try_read_now(
        &mut self,
        socket: &std::net::TcpStream,
        pool: &Rc<BufferPool>,
    ) -> io::Result<Option<usize>> {
        if self.buf.is_none() {
            match pool.try_get(false) {
                Some(b) => self.hold(b),
                None => return Ok(None),
            }
        }
        let Some(space) = self.buf.as_mut().and_then(|b| b.get_mut(self.end..)) else {
            return Ok(None);
        };
        if space.is_empty() {
            return Ok(None);
        }
        let read = match (&*socket).read(space) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        };
        if let Ok(Some(n)) = read {
            self.end += n;
        }
        self.release_if_empty();
        read
    }

    /// One read from `io` (0 = EOF). Takes a buffer first if needed (`second`: the
    /// connection already holds another one, see `buffer`), and makes room at the end.
    pub(crate) async fn read_from<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
        pool: &Rc<BufferPool>,
        second: bool,
    ) -> io::Result<usize> {
        if self.buf.is_none() {
            let b = pool.get(second).await;
            self.hold(b);
        }
        let space = self.space()?;
        let n = io.read(space).await?;
        self.end += n;
        Ok(n)
    }

    /// `read_from` as a poll, for a read that watches a connection while another operation
    /// on it (a write) is pending. `parked` as in `BufferPool::poll_get`.
    pub(crate) fn poll_read_from<R: AsyncRead + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut R,
        pool: &Rc<BufferPool>,
        parked: &mut Parked,
        second: bool,
    ) -> Poll<io::Result<usize>> {
        if self.buf.is_none() {
            let b = ready!(pool.poll_get(cx, parked, second));
            self.hold(b);
        }
        let mut space = ReadBuf::new(self.space()?);
        ready!(Pin::new(io).poll_read(cx, &mut space))?;
        let n = space.filled().len();
        self.end += n;
        Poll::Ready(Ok(n))
    }

    /// The free space after the data (moving the data to the front when it reached the end).
    fn space(&mut self) -> io::Result<&mut [u8]> {
        let Some(buf) = self.buf.as_mut() else {
            return Ok(&mut []);
        };
        if self.end == buf.len() && self.start > 0 {
            buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        match buf.get_mut(self.end..) {
            Some(space) if !space.is_empty() => Ok(space),
            _ => Err(io::Error::other("inbound buffer full")),
        }
    }
}
