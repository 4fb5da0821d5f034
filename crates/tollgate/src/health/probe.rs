//! One check against one server: TCP connect, optional TLS handshake (the server's own
//! verifier and SNI), optional HTTP/1.1 exchange; and the agent's one-line reply.
//!
//! Every probe runs under one deadline (`timeout`) and holds exactly one connection, closed
//! when it returns. Reads are bounded: a response head of at most `MAX_HEAD`, then at most
//! `config::health::MAX_BODY_READ` body bytes (only when `expect_body` is set); the body
//! substring is searched in the body bytes as received (a chunked body's size lines
//! included, so a substring cut by a chunk boundary is not found — health pages are small).

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout_at};

use super::agent::{self, AgentReply};
use crate::config::health::{HttpCheck, MAX_BODY_READ};
use crate::config::model::ServerTls;
use crate::http::h1::{self, BodyFraming, HeadScratch, Limits, Method};
use crate::live::check::Outcome;

/// Largest response head a check reads.
pub(crate) const MAX_HEAD: usize = 16 * 1024;

/// Where and how to check one server; built once per server.
pub(crate) struct Probe {
    pub addr: SocketAddr,
    pub tls: Option<ServerTls>,
    pub http: Option<HttpProbe>,
    /// `check_send_proxy`: a PROXY header with the check's own addresses opens the check.
    pub send_proxy: Option<crate::proxyproto::Version>,
}

pub(crate) struct HttpProbe {
    pub check: HttpCheck,
    /// The request, written once.
    pub request: Vec<u8>,
    pub head_only: bool,
}

impl HttpProbe {
    pub(crate) fn new(check: &HttpCheck, default_host: &str) -> Self {
        let host = check.host.as_deref().unwrap_or(default_host);
        let request = format!(
            "{} {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: tollgate-health-check\r\nConnection: close\r\n\r\n",
            check.method, check.path
        )
        .into_bytes();
        HttpProbe {
            check: check.clone(),
            request,
            head_only: check.method.eq_ignore_ascii_case("HEAD"),
        }
    }
}

impl Probe {
    /// Runs the check; `buf` and `scratch` are the caller's, reused from check to check.
    pub(crate) async fn run(
        &self,
        timeout: std::time::Duration,
        buf: &mut Vec<u8>,
        scratch: &mut HeadScratch,
    ) -> Outcome {
        let deadline = Instant::now() + timeout;
        let tcp = match timeout_at(deadline, TcpStream::connect(self.addr)).await {
            Err(_) => return Outcome::L4Timeout,
            Ok(Err(_)) => return Outcome::L4Con,
            Ok(Ok(s)) => s,
        };
        if let Some(version) = self.send_proxy
            && send_header(&tcp, version, self.http.is_some() || self.tls.is_some()).is_err()
        {
            return Outcome::L4Con;
        }
        // No TCP_NODELAY: the request leaves in one write, and a syscall per check is CPU.
        match &self.tls {
            None => self.after_connect(tcp, deadline, buf, scratch).await,
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::clone(&tls.client_config));
                match timeout_at(deadline, connector.connect(tls.server_name.clone(), tcp)).await {
                    Err(_) => Outcome::L6Timeout,
                    Ok(Err(_)) => Outcome::L6Rsp,
                    Ok(Ok(stream)) => self.after_connect(stream, deadline, buf, scratch).await,
                }
            }
        }
    }

    async fn after_connect<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        mut stream: S,
        deadline: Instant,
        buf: &mut Vec<u8>,
        scratch: &mut HeadScratch,
    ) -> Outcome {
        let Some(http) = &self.http else {
            return Outcome::L4Ok;
        };
        match timeout_at(deadline, exchange(&mut stream, http, buf, scratch)).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::L7Timeout,
        }
    }
}

/// The check's PROXY header: `PROXY` with this connection's own addresses, sent with
/// `MSG_MORE` when a request or a ClientHello follows (one segment for both).
fn send_header(tcp: &TcpStream, version: crate::proxyproto::Version, more: bool) -> std::io::Result<()> {
    use crate::proxyproto::{Command, Tlvs, Version, write_v1, write_v2};
    let addrs = Some((tcp.local_addr()?, tcp.peer_addr()?));
    let mut header = Vec::with_capacity(64);
    match version {
        Version::V1 => write_v1(&mut header, addrs),
        Version::V2 => write_v2(&mut header, Command::Proxy, addrs, &Tlvs::default()),
    }
    let mut flags = rustix::net::SendFlags::NOSIGNAL;
    if more {
        flags |= rustix::net::SendFlags::MORE;
    }
    if rustix::net::send(tcp, &header, flags)? != header.len() {
        return Err(std::io::ErrorKind::WriteZero.into());
    }
    Ok(())
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    http: &HttpProbe,
    buf: &mut Vec<u8>,
    scratch: &mut HeadScratch,
) -> Outcome {
    if stream.write_all(&http.request).await.is_err() {
        return Outcome::L7Rsp;
    }
    buf.clear();
    let limits = Limits {
        max_header_size: MAX_HEAD,
        ..Limits::default()
    };
    let method = if http.head_only { Method::Head } else { Method::Get };
    let (status, head_len, framing) = loop {
        if read_some(stream, buf, MAX_HEAD).await == 0 {
            return Outcome::L7Rsp;
        }
        match h1::parse_response_head(buf, &limits, method, scratch) {
            Ok(Some(head)) if head.informational => {
                // 100 Continue and friends: the final response follows.
                buf.drain(..head.head_len);
                head.reclaim(scratch);
            }
            Ok(Some(head)) => {
                let found = (head.status, head.head_len, head.body);
                head.reclaim(scratch);
                break found;
            }
            Ok(None) => {}
            Err(_) => return Outcome::L7Rsp,
        }
    };
    if !http.check.status_ok(status) {
        return Outcome::L7Sts(status);
    }
    let Some(needle) = &http.check.expect_body else {
        return Outcome::L7Ok(status);
    };
    let wanted = match framing {
        BodyFraming::None => 0,
        BodyFraming::ContentLength(n) => usize::try_from(n).unwrap_or(usize::MAX).min(MAX_BODY_READ),
        BodyFraming::Chunked | BodyFraming::CloseDelimited => MAX_BODY_READ,
    };
    let end = head_len.saturating_add(wanted);
    while buf.len() < end {
        if read_some(stream, buf, end).await == 0 {
            break;
        }
    }
    let body = buf.get(head_len..end.min(buf.len())).unwrap_or_default();
    if contains(body, needle.as_bytes()) {
        Outcome::L7Ok(status)
    } else {
        Outcome::L7Body(status)
    }
}

/// Reads into `buf` up to `limit` bytes in total; 0 at EOF, on an error or at the limit.
async fn read_some<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut Vec<u8>, limit: usize) -> usize {
    let room = limit.saturating_sub(buf.len());
    if room == 0 {
        return 0;
    }
    let start = buf.len();
    buf.resize(start + room.min(4096), 0);
    let n = match buf.get_mut(start..) {
        Some(tail) => stream.read(tail).await.unwrap_or(0),
        None => 0,
    };
    buf.truncate(start + n);
    n
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// Asks the agent on `addr` for its line; `None` if it could not be reached or said nothing
/// within `timeout` (then nothing changes).
pub(crate) async fn agent(addr: SocketAddr, timeout: std::time::Duration) -> Option<AgentReply> {
    let deadline = Instant::now() + timeout;
    let read = async {
        let mut stream = TcpStream::connect(addr).await.ok()?;
        let mut line = Vec::with_capacity(64);
        loop {
            if read_some(&mut stream, &mut line, agent::MAX_LINE).await == 0 || line.contains(&b'\n') {
                break;
            }
        }
        (!line.is_empty()).then(|| agent::parse(&line))
    };
    timeout_at(deadline, read).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substring_search() {
        assert!(contains(b"status: ok\n", b"ok"));
        assert!(!contains(b"o k", b"ok"));
        assert!(!contains(b"", b"ok"));
    }
}
