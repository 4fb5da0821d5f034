//! `Counted`: a writer that adds every byte its inner writer accepted to a counter.
//!
//! This is how HTTP mode counts `bytes_to_client` and `bytes_to_server`: at the write, not
//! at the parse, so the counters say what was handed to the socket (or to the TLS layer),
//! rewritten heads, proxy-made responses and partial writes before an error included, and
//! bytes read but never forwarded excluded. Reads pass through uncounted.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::stats::Counter;

pub(crate) struct Counted<'c, W> {
    inner: W,
    counter: &'c Counter,
    /// What this writer alone took (the stream record's share of the worker counter).
    written: Cell<u64>,
    /// Also counted here: a stream's tally that outlives this adapter.
    tally: Option<&'c Counter>,
}

impl<'c, W> Counted<'c, W> {
    pub(crate) fn new(inner: W, counter: &'c Counter) -> Self {
        Counted {
            inner,
            counter,
            written: Cell::new(0),
            tally: None,
        }
    }

    /// Counts into `tally` too (one stream's bytes across several adapters).
    pub(crate) fn with_tally(inner: W, counter: &'c Counter, tally: &'c Counter) -> Self {
        Counted {
            tally: Some(tally),
            ..Counted::new(inner, counter)
        }
    }

    pub(crate) fn get_ref(&self) -> &W {
        &self.inner
    }

    pub(crate) fn get_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    pub(crate) fn into_inner(self) -> W {
        self.inner
    }

    /// Bytes written through this adapter since it was made.
    pub(crate) fn written(&self) -> u64 {
        self.written.get()
    }

    /// Counts `written` bytes: for writes made through `get_mut()` with a method this
    /// adapter cannot see (see `ClientStream::poll_write_last`).
    pub(crate) fn count(&self, written: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = written {
            self.add(*n as u64);
        }
    }

    /// Counts `n` bytes that reached the inner writer's socket another way (splice(2)).
    pub(crate) fn add(&self, n: u64) {
        self.counter.add(n);
        self.written.set(self.written.get() + n);
        if let Some(t) = self.tally {
            t.add(n);
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counted<'_, W> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.count(&written);
        written
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.count(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Counted<'_, R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A writer that takes at most 3 bytes per call, then fails after 10.
    struct Trickle(usize);

    impl AsyncWrite for Trickle {
        fn poll_write(mut self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            if self.0 >= 10 {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            }
            let n = buf.len().min(3).min(10 - self.0);
            self.0 += n;
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn counts_what_was_accepted_even_when_the_write_fails() {
        let counter = Counter::default();
        let mut w = Counted::new(Trickle(0), &counter);
        w.write_all(b"12345678").await.unwrap();
        assert_eq!(counter.get(), 8);
        assert!(w.write_all(b"abcdef").await.is_err());
        assert_eq!(counter.get(), 10, "the two bytes accepted before the error count");
    }
}
