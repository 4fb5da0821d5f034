//! HTTP/1 requests over a `[[frontend.limit]]` (`limit`): the request's key facts read from
//! its head in place, and the answer the limit's action makes — `429` with `Retry-After`
//! on a kept connection, a close, or the tarpit then `500`.

use super::client::ClientStream;
use super::stream::{RequestInfo, Session};
use crate::ctx::sessions::{self, SessionState};
use crate::error::{Error, ErrorKind, Side};
use crate::http::h1::{Method, RequestHead};

impl<C: ClientStream> Session<'_, C> {
    /// A request over one of the frontend's limits, answered as the limit says: 429 with
    /// `Retry-After` (the connection kept as for any answer), closed unanswered, or held for
    /// the tarpit and then answered 500 and closed.
    pub(super) async fn limited(
        &mut self,
        head: RequestHead,
        req: &RequestInfo,
        refused: crate::limit::Refused<'_>,
    ) -> Result<bool, Error> {
        use crate::config::limit::LimitAction;
        let why = crate::limit::OVER_LIMIT;
        tracing::debug!(frontend = %self.fe.name, peer = %self.peer, limit = refused.table.name(), "request over a limit");
        match refused.action {
            LimitAction::TooMany => {
                let e = Error::new(ErrorKind::Limited, Side::Front, why);
                self.rec.fail(&e);
                self.ctx.stats.http_proxy_4xx.add(1);
                if let Some(c) = self.ctx.stat().and_then(|s| s.frontend(self.frontend)) {
                    c.proxy_4xx.add(1);
                }
                let keep = req.keep_alive && !self.ctx.is_stopping();
                too_many_response(refused.retry_after, keep, req.method == Method::Head, &mut self.out);
                self.answer_here(head, req, 429, keep).await
            }
            LimitAction::Close => {
                head.reclaim(&mut self.scratch);
                self.rec.fail(&Error::new(ErrorKind::Limited, Side::Front, why));
                sessions::set_state(SessionState::Closing);
                Ok(false)
            }
            LimitAction::Tarpit(hold) => {
                head.reclaim(&mut self.scratch);
                tokio::time::sleep(hold).await;
                self.fail(&Error::new(ErrorKind::Tarpitted, Side::Front, why)).await?;
                Ok(false)
            }
        }
    }
}

/// What a request offers a limit's key (`limit::Facts`), read from its head in place.
pub(super) struct H1Facts<'r> {
    pub(super) source: std::net::IpAddr,
    pub(super) sni: Option<&'r str>,
    pub(super) head: &'r RequestHead,
    pub(super) buf: &'r [u8],
    /// The path as routes read it (`http::normalize`): one spelling, one key.
    pub(super) path: std::borrow::Cow<'r, [u8]>,
}

impl crate::limit::Facts for H1Facts<'_> {
    fn source(&self) -> std::net::IpAddr {
        self.source
    }

    fn sni(&self) -> Option<&str> {
        self.sni
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        use crate::http::h1::MessageHead;
        self.head.header(self.buf, name.as_bytes())
    }

    fn path(&self) -> Option<&[u8]> {
        Some(&self.path)
    }
}

/// `429 Too Many Requests` with `Retry-After` (to a HEAD request: its head only).
fn too_many_response(retry_after: u64, keep: bool, head_only: bool, out: &mut Vec<u8>) {
    const BODY: &[u8] = b"Too many requests\n";
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: ");
    out.extend_from_slice(itoa::Buffer::new().format(retry_after).as_bytes());
    out.extend_from_slice(b"\r\nContent-Type: text/plain\r\nContent-Length: ");
    out.extend_from_slice(itoa::Buffer::new().format(BODY.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    if !keep {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(BODY);
    }
}
