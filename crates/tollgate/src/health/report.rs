//! What a state change does beyond the state machine: stores the operational state every
//! worker thread reads at pick time, logs the transition (HAProxy-style, with the reason and
//! how many servers are left), closes the server's sessions on `on_marked_down =
//! "shutdown-sessions"`, rebuilds balancers after an agent weight change, and tells the
//! master (which carries the state into the next generation).

use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;

use crate::command::HealthReport;
use crate::config::health::{HealthCheck, OnMarkedDown};
use crate::ctx::inbox::{self, Message};
use crate::live::backend::BackendLive;
use crate::live::check::Outcome;
use crate::live::server::{OperState, ServerLive};

/// Where transitions go, shared by every check task of the process.
pub(crate) struct Reporter {
    /// Every worker thread's inbox (kills).
    pub inboxes: Vec<inbox::Sender>,
    /// The master, when there is one.
    pub master: Option<UnboundedSender<HealthReport>>,
}

impl Reporter {
    /// Moves `server` to `to` because of `why`; `already` = live traffic stored it already
    /// (passive mark-down), so only the consequences remain.
    pub(crate) fn transition(
        &self,
        backend: &BackendLive,
        server: &ServerLive,
        health: &HealthCheck,
        (to, why): (OperState, Outcome),
        already: bool,
    ) {
        if !server.set_oper(to) && !already {
            return;
        }
        let (usable, backups) = usable_left(backend);
        match to {
            OperState::Down => {
                tracing::warn!(
                    "server {}/{} is DOWN, reason: {}. {usable} active and {backups} backup servers usable",
                    server.backend_name,
                    server.name,
                    why.reason()
                );
                if health.on_marked_down == OnMarkedDown::ShutdownSessions {
                    self.kill(server);
                }
            }
            OperState::Up => {
                server.check.clear_errors();
                tracing::info!(
                    "server {}/{} is UP, reason: {}. {usable} active and {backups} backup servers usable",
                    server.backend_name,
                    server.name,
                    why.reason()
                );
            }
            OperState::Unknown => {}
        }
        self.tell_master(server);
    }

    /// The agent changed the weight factor: balancers rebuild, the master learns it.
    pub(crate) fn agent_percent(&self, backend: &BackendLive, server: &ServerLive, percent: u32) {
        if server.set_agent_percent(percent) {
            tracing::info!(
                "server {}/{}: agent sets the weight to {percent}% (effective {})",
                server.backend_name,
                server.name,
                server.effective_weight()
            );
            backend.touch();
            self.tell_master(server);
        }
    }

    /// Closes every session on `server`, on every worker thread.
    fn kill(&self, server: &ServerLive) {
        server.kill_sessions();
        // Nobody waits for these acks: the checker moves on.
        let (ack, _acked) = std::sync::mpsc::channel();
        for inbox in &self.inboxes {
            let _ = inbox.send(Message::Kill {
                server: server.id,
                done: ack.clone(),
            });
        }
        tracing::info!(
            "server {}/{}: closing its established connections (on_marked_down = \"shutdown-sessions\")",
            server.backend_name,
            server.name
        );
    }

    fn tell_master(&self, server: &ServerLive) {
        if let Some(master) = &self.master {
            let _ = master.send(HealthReport {
                backend: server.backend_name.to_string(),
                server: server.name.to_string(),
                oper: server.oper(),
                agent_percent: server.agent_percent(),
            });
        }
    }
}

/// Usable non-backup and backup servers of `backend`.
fn usable_left(backend: &BackendLive) -> (usize, usize) {
    let set = backend.servers();
    let usable = |backup: bool| {
        set.servers
            .iter()
            .filter(|s| s.backup == backup && s.is_usable())
            .count()
    };
    (usable(false), usable(true))
}

/// Applies the states a previous generation reported (the master's record) before any
/// worker thread serves: only to servers this generation checks, so an unchecked server is
/// never held down by a state nothing will revise.
pub(crate) fn seed(backends: &[Arc<BackendLive>], reports: &[HealthReport]) {
    for r in reports {
        let Some(server) = backends
            .iter()
            .find(|b| *b.name == *r.backend)
            .and_then(|b| b.servers().find(&r.server).cloned())
        else {
            continue;
        };
        if server.check.settings.enabled {
            server.set_oper(r.oper);
            if server.check.settings.agent_port.is_some() {
                server.set_agent_percent(r.agent_percent);
            }
        }
    }
}
