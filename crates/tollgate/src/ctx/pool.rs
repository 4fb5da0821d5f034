//! Idle server connections, per worker, per server: reused by later requests to the same
//! server (from any client connection of this worker).
//!
//! Invariants: a connection is put back only after a response that was read to its end on
//! a connection the server keeps open; it is checked on the way out (a server that closed
//! it shows EOF) and dropped once older than `timeouts.pool_idle`. LIFO: the most recently
//! used connection is the warmest and the least likely to have been closed by the server.
//! A server's list holds only connections of its kind (TLS for a `tls = true` server,
//! plain otherwise): `put` drops any other. A server readdressed by `discover` keeps its id:
//! each idle connection remembers the address it was made to, and `take` discards those to
//! an address the server no longer has (requests in flight to the old address finish;
//! nothing new is sent there).
//!
//! A `send_proxy` server's connections began with one client's PROXY header: each idle one
//! remembers the session that made it (`origin::current_id`), and only that session takes
//! it again (a keep-alive client's next requests); no other client ever gets it. They sit in
//! a map by session (one per session: an HTTP/1 session has one request in flight), so a
//! request finds its own in one lookup however many clients are connected. The map, when
//! full, first drops what is past `pool_idle`, then gives up its oldest connection (likely
//! a session that ended) for the new one.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Config;
use crate::live::server::ServerLive;
use crate::live::{IdMap, ServerId};
use crate::relay::ServerConn;

struct Idle {
    conn: ServerConn,
    since: Instant,
    /// The server's address when the connection was made.
    address: SocketAddr,
}

/// The idle connections to one server.
struct ServerIdle {
    tls: bool,
    /// `send_proxy`: connections are the owning session's only, kept in `by_owner`.
    owned: bool,
    conns: Vec<Idle>,
    /// A `send_proxy` server's idle connections, by the session that made them.
    by_owner: foldhash::HashMap<u64, Idle>,
}

impl ServerIdle {
    fn new(tls: bool, owned: bool) -> Self {
        ServerIdle {
            tls,
            owned,
            conns: Vec::new(),
            by_owner: foldhash::HashMap::default(),
        }
    }
}

pub(crate) struct ServerPool {
    /// By server id: a connection outlives the server-set version it was made under.
    idle: RefCell<IdMap<ServerId, ServerIdle>>,
    max_per_server: usize,
    max_age: Duration,
}

impl ServerPool {
    pub(crate) fn new(config: &Config) -> Self {
        ServerPool {
            idle: RefCell::new(
                config
                    .backends
                    .iter()
                    .flat_map(|b| {
                        b.servers
                            .iter()
                            .map(|s| (s.id, ServerIdle::new(s.tls.is_some(), s.send_proxy.is_some())))
                    })
                    .collect(),
            ),
            max_per_server: config.http.pool_max_idle,
            max_age: config.timeouts.pool_idle,
        }
    }

    /// A live idle connection to `server` at its current address, if any.
    pub(crate) fn take(&self, server: &ServerLive, now: Instant) -> Option<ServerConn> {
        let mut idle = self.idle.borrow_mut();
        let slot = idle.get_mut(&server.id)?;
        let usable = |idle: &mut Idle| {
            idle.address == server.address
                && now.duration_since(idle.since) <= self.max_age
                && idle.conn.is_usable_idle()
        };
        if slot.owned {
            let mut idle = slot.by_owner.remove(&super::origin::current_id())?;
            return usable(&mut idle).then_some(idle.conn);
        }
        let list = &mut slot.conns;
        while let Some(mut idle) = list.pop() {
            if usable(&mut idle) {
                return Some(idle.conn);
            }
        }
        None
    }

    /// Keeps `conn` (made to `address`) for later requests to server `id` (`tls`: whether it
    /// speaks TLS; a server this worker has not pooled for yet, one added at run time, gets
    /// its list here).
    pub(crate) fn put(&self, id: ServerId, tls: bool, address: SocketAddr, conn: ServerConn) {
        let mut idle = self.idle.borrow_mut();
        let slot = idle.entry(id).or_insert_with(|| ServerIdle::new(tls, false));
        if conn.is_tls() != slot.tls {
            return;
        }
        let now = Instant::now();
        if slot.owned {
            self.put_owned(
                &mut slot.by_owner,
                Idle {
                    conn,
                    since: now,
                    address,
                },
                now,
            );
            return;
        }
        // Oldest first (each put pushes now, take pops the newest): the expired ones are a
        // prefix, and the first one tells whether there are any.
        let expired = |c: &Idle| now.duration_since(c.since) > self.max_age;
        if slot.conns.first().is_some_and(expired) {
            let n = slot.conns.partition_point(expired);
            slot.conns.drain(..n);
        }
        if slot.conns.len() < self.max_per_server {
            slot.conns.push(Idle {
                conn,
                since: now,
                address,
            });
        }
    }

    /// Keeps `idle` as the current session's connection (replacing, and so closing, an
    /// older one of the same session).
    fn put_owned(&self, map: &mut foldhash::HashMap<u64, Idle>, idle: Idle, now: Instant) {
        let me = super::origin::current_id();
        if map.len() >= self.max_per_server && !map.contains_key(&me) {
            map.retain(|_, c| now.duration_since(c.since) <= self.max_age);
            if map.len() >= self.max_per_server {
                let oldest = map.iter().min_by_key(|(_, c)| c.since).map(|(owner, _)| *owner);
                if let Some(owner) = oldest {
                    map.remove(&owner);
                }
            }
        }
        if self.max_per_server > 0 {
            map.insert(me, idle);
        }
    }

    /// Closes every idle connection to `server` (maintenance with `--kill`, removal).
    pub(crate) fn forget(&self, server: ServerId) {
        if let Some(slot) = self.idle.borrow_mut().get_mut(&server) {
            slot.conns.clear();
            slot.by_owner.clear();
        }
    }
}
