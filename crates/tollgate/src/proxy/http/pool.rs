//! Idle server connections, per worker, per server: reused by later requests to the same
//! server (from any client connection of this worker).
//!
//! Invariants: a connection is put back only after a response that was read to its end on
//! a connection the server keeps open; it is checked on the way out (a server that closed
//! it shows EOF) and dropped once older than `timeouts.pool_idle`. LIFO: the most recently
//! used connection is the warmest and the least likely to have been closed by the server.

use std::cell::RefCell;
use std::task::{Context, Waker};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::config::Config;
use crate::live::{IdMap, ServerId};

struct Idle {
    stream: TcpStream,
    since: Instant,
}

pub struct ServerPool {
    /// By server id: a connection outlives the server-set version it was made under.
    idle: RefCell<IdMap<ServerId, Vec<Idle>>>,
    max_per_server: usize,
    max_age: Duration,
}

impl ServerPool {
    pub fn new(config: &Config) -> Self {
        ServerPool {
            idle: RefCell::new(
                config
                    .backends
                    .iter()
                    .flat_map(|b| b.servers.iter().map(|s| (s.id, Vec::new())))
                    .collect(),
            ),
            max_per_server: config.http.pool_max_idle,
            max_age: config.timeouts.pool_idle,
        }
    }

    /// A live idle connection to `server`, if any.
    pub fn take(&self, server: ServerId) -> Option<TcpStream> {
        let mut idle = self.idle.borrow_mut();
        let list = idle.get_mut(&server)?;
        let now = Instant::now();
        while let Some(conn) = list.pop() {
            if now.duration_since(conn.since) > self.max_age {
                continue;
            }
            // No readiness event since the last response was drained: alive, and no syscall
            // spent finding out. With one, probe: EOF or stray bytes make it unusable.
            let mut cx = Context::from_waker(Waker::noop());
            if conn.stream.poll_read_ready(&mut cx).is_pending() {
                return Some(conn.stream);
            }
            let mut probe = [0u8; 1];
            match conn.stream.try_read(&mut probe) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(conn.stream),
                _ => continue,
            }
        }
        None
    }

    pub fn put(&self, server: ServerId, stream: TcpStream) {
        let mut idle = self.idle.borrow_mut();
        let list = idle.entry(server).or_default();
        let now = Instant::now();
        list.retain(|c| now.duration_since(c.since) <= self.max_age);
        if list.len() < self.max_per_server {
            list.push(Idle { stream, since: now });
        }
    }

    /// Idle connections held now (all servers).
    pub fn len(&self) -> usize {
        self.idle.borrow().values().map(Vec::len).sum()
    }

    /// Closes every idle connection to `server` (maintenance with `--kill`, removal).
    pub fn forget(&self, server: ServerId) {
        if let Some(list) = self.idle.borrow_mut().get_mut(&server) {
            list.clear();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
