//! Runtime changes to a backend's server *set* (`add server`, `del server`, `set server
//! address`), as a worker process carries them out: each is one `BackendLive::update` (a new
//! set version, so every worker thread rebuilds its balancer at its next pick), then every
//! thread drops its idle pooled connections to the server that left or moved, and the
//! command is answered only once every thread has.
//!
//! Invariants: a server joins a set with its admin state already set (a server added in
//! maint is never picked, not even once); a server leaves a set only when no connection
//! holds one of its slots and nothing waits for it, unless the change is re-applied to a
//! generation that has not served it yet (`checked = false`) — connections still open to a
//! moved server's former address count; a moved server keeps its id, state, weights and
//! counters, and its health starts afresh at the new address.

use std::sync::Arc;
use std::time::Duration;

use super::{APPLY_TIMEOUT, Running};
use crate::command::{NewServer, ServerChange};
use crate::config::Server;
use crate::config::health::ServerCheck;
use crate::ctx::inbox::{Ack, Message};
use crate::live::ServerId;
use crate::live::backend::BackendLive;
use crate::live::server::{AdminState, ServerLive, Source};

/// Servers replaced by a move, weakly: a connection to the old address holds its
/// `ServerLive` (through its slot) until it closes.
#[derive(Debug, Default)]
pub(super) struct Retired(std::sync::Mutex<Vec<std::sync::Weak<ServerLive>>>);

impl Retired {
    fn keep(&self, server: &Arc<ServerLive>) {
        let mut list = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(server));
    }

    /// Connections still open to server `id`'s former addresses.
    fn active(&self, id: ServerId) -> u32 {
        let list = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        list.iter()
            .filter_map(std::sync::Weak::upgrade)
            .filter(|s| s.id == id)
            .map(|s| s.active())
            .sum()
    }
}

impl Running {
    /// The set changes of `change` (delete, then add, then address), before its state and
    /// weight. `Ok(false)`: nothing is left to apply (the server was deleted).
    pub(super) fn change_set(&self, index: usize, change: &ServerChange, checked: bool) -> Result<bool, String> {
        if change.delete {
            self.delete_server(index, &change.server, checked)?;
            if change.add.is_none() {
                return Ok(false);
            }
        }
        if let Some(new) = &change.add {
            let state = change.state.unwrap_or(AdminState::Maint);
            self.add_server(index, &change.server, new, state)?;
        }
        if let Some(address) = change.address {
            self.move_server(index, &change.server, address)?;
        }
        Ok(true)
    }

    fn live_backend(&self, index: usize) -> Result<&Arc<BackendLive>, String> {
        self.shared
            .backends
            .get(index)
            .ok_or_else(|| "no live state for the backend".to_string())
    }

    /// Removes `name` from backend `index` if `deletable` (or unconditionally when not
    /// `checked`). A server already gone is not an error: another generation's refusal may
    /// have left the command half done, and the operator simply runs it again.
    fn delete_server(&self, index: usize, name: &str, checked: bool) -> Result<(), String> {
        let backend = self.live_backend(index)?;
        let Some(server) = backend.servers().find(name).cloned() else {
            return Ok(());
        };
        if checked {
            deletable(&server, self.retired.active(server.id))?;
        }
        let mut refused = None;
        backend.update(|servers, _, _| {
            // Checked again under the writer lock: a connection may have taken a slot since.
            if let Some(why) = servers
                .iter()
                .find(|s| s.id == server.id && checked)
                .and_then(|s| deletable(s, self.retired.active(s.id)).err())
            {
                refused = Some(why);
                return servers.to_vec();
            }
            servers.iter().filter(|s| s.id != server.id).cloned().collect()
        });
        if let Some(why) = refused {
            return Err(why);
        }
        tracing::info!(backend = %backend.name, server = name, "server deleted");
        self.forget_pooled(server.id)
    }

    /// Adds a runtime server to backend `index`, in `state` from its first set version.
    fn add_server(&self, index: usize, name: &str, new: &NewServer, state: AdminState) -> Result<(), String> {
        let backend = self.live_backend(index)?;
        let config = self
            .shared
            .config
            .backends
            .get(index)
            .ok_or("no such backend in this generation's config")?;
        let spec = Server {
            id: new.id,
            name: name.to_string(),
            address: new.address,
            host: None,
            weight: new.weight,
            maxconn: new.maxconn,
            backup: new.backup,
            tls: None,
            // Without TLS: an h2 backend's runtime servers speak h2c (prior knowledge).
            proto: config.proto,
            slowstart: new.slowstart_ms.map_or(config.slowstart, Duration::from_millis),
            // Checked on its own port, over plain TCP/HTTP, as a discovered server is.
            check: ServerCheck {
                enabled: new.check && config.health.is_some(),
                error_limit: config.health.as_ref().map_or(0, |h| h.error_limit),
                ..Default::default()
            },
            // Runtime servers send no PROXY header (a config key only).
            send_proxy: None,
        };
        let mut taken = false;
        backend.update(|servers, queue, workers| {
            if servers.iter().any(|s| *s.name == *name) {
                taken = true;
                return servers.to_vec();
            }
            let mut live = ServerLive::new(&spec, (config.id, &backend.name), workers, Arc::clone(queue));
            live.source = Source::Runtime;
            live.set_admin(state);
            let mut next = servers.to_vec();
            next.push(Arc::new(live));
            next
        });
        if taken {
            return Err(format!("backend `{}` already has a server `{name}`", backend.name));
        }
        tracing::info!(backend = %backend.name, server = name, address = %new.address, state = state.as_str(), "server added");
        Ok(())
    }

    /// Moves `name` to `address`: new connections go there, established ones finish at the
    /// old one, idle pooled ones are dropped.
    fn move_server(&self, index: usize, name: &str, address: std::net::SocketAddr) -> Result<(), String> {
        let backend = self.live_backend(index)?;
        let mut moved = None;
        backend.update(|servers, _, _| {
            servers
                .iter()
                .map(|s| {
                    if *s.name != *name {
                        return Arc::clone(s);
                    }
                    moved = Some(s.id);
                    if s.address == address {
                        return Arc::clone(s);
                    }
                    self.retired.keep(s);
                    Arc::new(s.moved(address))
                })
                .collect()
        });
        let id = moved.ok_or_else(|| format!("no server `{name}` in backend `{}`", backend.name))?;
        tracing::info!(backend = %backend.name, server = name, %address, "server readdressed");
        self.forget_pooled(id)
    }

    /// Every worker thread closes its idle connections to `server`; returns once all have.
    fn forget_pooled(&self, server: ServerId) -> Result<(), String> {
        let (ack, acked) = std::sync::mpsc::channel();
        self.tell_threads(|| Message::Kill {
            server,
            done: Ack::clone(&ack),
        });
        drop(ack);
        let deadline = std::time::Instant::now() + APPLY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match acked.recv_timeout(left) {
                Ok(()) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    return Err(format!("not every worker thread acted within {APPLY_TIMEOUT:?}"));
                }
            }
        }
    }
}

/// HAProxy's rule for `del server`: out of rotation (maint, or drain), no connection on it
/// (`elsewhere`: those still open to its former addresses), nothing queued for it. The error
/// says what to do.
fn deletable(s: &ServerLive, elsewhere: u32) -> Result<(), String> {
    let who = format!("{}/{}", s.backend_name, s.name);
    let (admin, active, queued) = (s.admin(), s.active().saturating_add(elsewhere), s.queued());
    if active > 0 {
        let what = if admin == AdminState::Ready {
            "set it to maint and wait for them to finish"
        } else {
            "wait for them to finish (or close them: set it to maint --kill)"
        };
        return Err(format!("{who} has {active} active connection(s); {what}"));
    }
    if queued > 0 {
        return Err(format!(
            "{who} has {queued} queued request(s); wait for them to be served"
        ));
    }
    if admin == AdminState::Ready {
        return Err(format!(
            "{who} is ready (taking new connections); set it to maint (or drain) first"
        ));
    }
    Ok(())
}
