//! HTTP/2 streams over a `[[frontend.limit]]` (`limit`): the stream's key facts, and the
//! answer the limit's action makes — `429` with `Retry-After`, a reset (`close`: the
//! connection carries other streams), or the tarpit then `500`.

use http::request::Parts;

use super::stream::Stream;
use crate::error::{Error, ErrorKind, Side};

impl Stream<'_> {
    /// A stream over one of the frontend's limits: 429 with `Retry-After`, a reset
    /// (`close`: the connection carries other streams), or the tarpit and then 500.
    pub(super) async fn limited(&mut self, over: crate::limit::Refused<'_>) -> Result<(), Error> {
        use crate::config::limit::LimitAction;
        let why = crate::limit::OVER_LIMIT;
        tracing::debug!(frontend = %self.fe.name, peer = %self.conn.peer, limit = over.table.name(), "h2 request over a limit");
        match over.action {
            LimitAction::TooMany => {
                self.rec.fail(&Error::new(ErrorKind::Limited, Side::Front, why));
                self.conn.ctx.stats.http_proxy_4xx.add(1);
                let mut resp = http::Response::new(());
                resp.headers_mut()
                    .insert(http::header::RETRY_AFTER, http::HeaderValue::from(over.retry_after));
                self.answer_with(resp, 429, "text/plain", b"Too many requests\n")
            }
            LimitAction::Close => {
                self.rec.fail(&Error::new(ErrorKind::Limited, Side::Front, why));
                self.answered = true;
                self.respond.send_reset(crate::http::h2::Reason::ENHANCE_YOUR_CALM);
                Ok(())
            }
            LimitAction::Tarpit(hold) => {
                tokio::time::sleep(hold).await;
                Err(Error::new(ErrorKind::Tarpitted, Side::Front, why))
            }
        }
    }
}

/// What a stream offers a limit's key (`limit::Facts`).
pub(super) struct H2Facts<'r> {
    pub(super) source: std::net::IpAddr,
    pub(super) sni: Option<&'r str>,
    pub(super) parts: &'r Parts,
    /// The path as routes read it (`http::normalize`): one spelling, one key.
    pub(super) path: std::borrow::Cow<'r, [u8]>,
}

impl crate::limit::Facts for H2Facts<'_> {
    fn source(&self) -> std::net::IpAddr {
        self.source
    }

    fn sni(&self) -> Option<&str> {
        self.sni
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.parts.headers.get(name).map(http::HeaderValue::as_bytes)
    }

    fn path(&self) -> Option<&[u8]> {
        Some(&self.path)
    }
}
