//! A session's origin: who the client is (its address, or the one a trusted balancer's
//! PROXY header carried), which address it reached, what its TLS handshake said, and the
//! TLVs its PROXY header brought. A server with `send_proxy` gets a header made from it.
//!
//! Owns: one `Origin` per session that needs it (the frontend has `accept_proxy`, or some
//! server has `send_proxy`), reached through a task-local like `sessions::CURRENT`, so the
//! connect path needs no extra argument (an HTTP/2 client's streams are polled in their
//! connection's task, so they see it too). Sessions that need none carry none: no
//! allocation, no task-local scope.
//!
//! Invariants: `id` is unique among this thread's sessions for the thread's life: the
//! HTTP pool keys a `send_proxy` server's idle connections by it, so a connection that
//! carried one client's header is never reused for another.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;

use crate::proxyproto::{self, Command, Ssl, Tlvs, Version};

thread_local! {
    /// The last `Origin::id` given out on this thread (0 = none: "no origin" in the pool).
    static LAST_ID: Cell<u64> = const { Cell::new(0) };
}

tokio::task_local! {
    static ORIGIN: Rc<Origin>;
}

#[derive(Debug)]
pub(crate) struct Origin {
    pub id: u64,
    pub client: SocketAddr,
    /// The address the client connected to (the PROXY header's destination when it sent one).
    pub local: SocketAddr,
    /// The incoming v2 header's TLVs (ALPN, authority, unique id, SSL).
    pub received: Tlvs,
    tls: RefCell<Option<TlsFacts>>,
}

/// What the client's TLS handshake with tollgate showed.
#[derive(Debug, Default)]
struct TlsFacts {
    terminated: bool,
    sni: Option<String>,
    version: Option<&'static str>,
    alpn: Option<Vec<u8>>,
}

impl Origin {
    pub(crate) fn new(client: SocketAddr, local: SocketAddr, received: Tlvs) -> Rc<Origin> {
        let id = LAST_ID.with(|last| {
            let id = last.get().wrapping_add(1).max(1);
            last.set(id);
            id
        });
        Rc::new(Origin {
            id,
            client,
            local,
            received,
            tls: RefCell::new(None),
        })
    }

    /// The header to open a server connection with, appended to `out`.
    pub(crate) fn header(&self, version: Version, out: &mut Vec<u8>) {
        let addrs = Some((self.client, self.local));
        match version {
            Version::V1 => proxyproto::write_v1(out, addrs),
            Version::V2 => proxyproto::write_v2(out, Command::Proxy, addrs, &self.tlvs()),
        }
    }

    /// Tollgate's own TLS facts when it terminated or peeked the client's TLS, else what the
    /// balancer in front said; the unique id always passes on.
    fn tlvs(&self) -> Tlvs {
        let tls = self.tls.borrow();
        let Some(facts) = tls.as_ref() else {
            return self.received.clone();
        };
        Tlvs {
            alpn: facts.alpn.clone(),
            authority: facts.sni.clone(),
            unique_id: self.received.unique_id.clone(),
            ssl: facts.terminated.then(|| Ssl {
                client: proxyproto::tlv::CLIENT_SSL,
                // No client certificates: nothing failed to verify (what HAProxy sends too).
                verify: 0,
                version: facts.version.map(str::to_string),
            }),
        }
    }
}

/// Runs `fut` (the session) with `origin` as its origin. Not an async fn: one would hold
/// `fut` twice (as its argument and inside the scope), a session's whole size more.
pub(crate) fn scope<F: Future>(origin: Rc<Origin>, fut: F) -> impl Future<Output = F::Output> {
    ORIGIN.scope(origin, fut)
}

/// The current session's origin, if it keeps one.
pub(crate) fn current() -> Option<Rc<Origin>> {
    ORIGIN.try_with(Rc::clone).ok()
}

/// The pool key of the current session: its id, 0 without an origin.
pub(crate) fn current_id() -> u64 {
    ORIGIN.try_with(|o| o.id).unwrap_or(0)
}

/// The client's handshake with tollgate finished (termination).
pub(crate) fn note_tls(conn: &rustls::ServerConnection) {
    let _ = ORIGIN.try_with(|o| {
        *o.tls.borrow_mut() = Some(TlsFacts {
            terminated: true,
            sni: conn.server_name().map(str::to_string),
            version: tls_version_name(conn.protocol_version()),
            alpn: conn.alpn_protocol().map(<[u8]>::to_vec),
        });
    });
}

/// SNI passthrough read the ClientHello: its server name is the authority (the TLS itself
/// goes through to the server, which sees it).
pub(crate) fn note_sni(sni: Option<&str>) {
    let _ = ORIGIN.try_with(|o| {
        *o.tls.borrow_mut() = Some(TlsFacts {
            sni: sni.map(str::to_string),
            ..TlsFacts::default()
        });
    });
}

/// The SSL_VERSION names the PROXY protocol spec uses (as OpenSSL spells them).
fn tls_version_name(v: Option<rustls::ProtocolVersion>) -> Option<&'static str> {
    match v? {
        rustls::ProtocolVersion::TLSv1_2 => Some("TLSv1.2"),
        rustls::ProtocolVersion::TLSv1_3 => Some("TLSv1.3"),
        _ => None,
    }
}
