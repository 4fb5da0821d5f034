//! The master's desired state: the config it runs, the id table every generation shares,
//! and the runtime changes operators made since (weights, admin states, addresses, servers
//! added and deleted: see `servers`; certificates set with `ctl set cert`, kept until the
//! next reload, which reads the certificate files again).
//!
//! Sans-io. A change is recorded only after validation against the current config, so
//! every recorded change names a real server. On reload, `reconcile` decides per change:
//! kept (re-applied to the new generation) unless the new file changes that server's
//! definition or removes it — the file is what the operator edited last, so it wins — and
//! says which in the reload's answer (`carry`). A runtime server is kept while the file
//! defines no server of its name; a deleted file server stays deleted while the file leaves
//! it as it was. A `kill` is an action, never recorded.
//!
//! Health states (`HealthReport`, sent by the serving generation's checker on every change)
//! are kept the same way, keyed by backend and server name: a new generation starts from
//! them, unless the file changes that server's address, TLS or check settings (then its
//! checks start afresh, from `unknown`).

use std::collections::BTreeMap;

pub(crate) mod servers;

use crate::command::{CertInstall, HealthReport, ReloadReport, ServerChange};
use crate::config::ids::IdTable;
use crate::config::{Config, Server};
use crate::live::server::AdminState;

#[derive(Debug, Default)]
pub(crate) struct Desired {
    pub ids: IdTable,
    /// Keyed `(backend, server)`.
    changes: BTreeMap<(String, String), ServerChange>,
    /// Health as last reported, keyed `(backend, server)`.
    health: BTreeMap<(String, String), HealthReport>,
    /// Frontends an operator disabled (`ctl disable frontend`), by name.
    disabled_frontends: std::collections::BTreeSet<String>,
    /// Certificates set at run time (`ctl set cert`), in order, one per frontend and file:
    /// a worker restarted on the same config installs them again; a reload drops them (it
    /// reads the certificate files again).
    certs: Vec<CertInstall>,
}

/// What a server's health state depends on: where and how it is checked.
fn check_definition(s: &Server) -> (std::net::SocketAddr, bool, crate::config::health::ServerCheck) {
    (s.address, s.tls.is_some(), s.check)
}

/// The parts of a server's definition a reload can change (a host name is part of the
/// address).
fn definition(s: &Server) -> (std::net::SocketAddr, Option<&str>, u32, u32, bool, bool) {
    (
        s.address,
        s.host.as_deref(),
        s.weight,
        s.maxconn,
        s.backup,
        s.tls.is_some(),
    )
}

fn find<'a>(config: &'a Config, backend: &str, server: &str) -> Option<&'a Server> {
    config.backend(backend)?.servers.iter().find(|s| s.name == server)
}

/// What a reload from `old` to `new` does with a recorded change: keeps it (as returned)
/// unless the file now says something about that server — the file wins — or the reason
/// it is dropped.
fn carry(change: &ServerChange, old: &Config, new: &Config) -> Result<ServerChange, String> {
    let (b, s) = (&change.backend, &change.server);
    if new.backend(b).is_none() {
        return Err("backend removed by the file".into());
    }
    let before = find(old, b, s).map(definition);
    let after = find(new, b, s).map(definition);
    match (change.add.is_some(), change.delete) {
        // A runtime server: kept while the file has no server of that name.
        (true, false) if after.is_some() => Err(format!("the file defines {b}/{s}")),
        (true, false) => Ok(change.clone()),
        // A file server deleted (and perhaps replaced): kept while the file leaves it as it
        // was. A replacement outlives a file server the file removes.
        (true, true) if after.is_none() => Ok(ServerChange {
            delete: false,
            ..change.clone()
        }),
        _ if after.is_none() => Err("server removed by the file".into()),
        _ if before == after => Ok(beyond_the_file(change, find(new, b, s))),
        _ => Err(format!("the file changes {b}/{s}")),
    }
}

/// `change` less what the file already says (a weight or address equal to the file's, a
/// `ready` state, which every file server starts in): a reload neither keeps nor reports
/// a change that changes nothing.
fn beyond_the_file(change: &ServerChange, file: Option<&Server>) -> ServerChange {
    let mut left = change.clone();
    if let Some(f) = file {
        if left.weight == Some(f.weight) {
            left.weight = None;
        }
        if left.address == Some(f.address) {
            left.address = None;
        }
    }
    if left.state == Some(AdminState::Ready) {
        left.state = None;
    }
    left
}

/// A change that leaves the server as the file made it.
fn changes_nothing(c: &ServerChange) -> bool {
    c.state.is_none() && c.weight.is_none() && c.address.is_none() && c.add.is_none() && !c.delete
}

impl Desired {
    /// Checks `change` against `config` and the runtime changes made since; the error is
    /// for the operator.
    pub(crate) fn validate(&self, config: &Config, change: &ServerChange) -> Result<(), String> {
        if config.backend(&change.backend).is_none() {
            return Err(format!("no backend `{}`", change.backend));
        }
        // An added server was checked when its definition was built (`new_server`).
        if change.add.is_some() {
            return Ok(());
        }
        if !self.exists(config, &change.backend, &change.server) {
            return Err(format!("no server `{}` in backend `{}`", change.server, change.backend));
        }
        if let Some(w) = change.weight
            && w > 256
        {
            return Err(format!("weight {w} is out of range (0 to 256)"));
        }
        // A kill alone is `shutdown sessions`; with a state it is `maint --kill`.
        if change.kill && change.state.is_some_and(|s| s != AdminState::Maint) {
            return Err("--kill goes with state maint".into());
        }
        if change.state.is_none()
            && change.weight.is_none()
            && !change.kill
            && change.address.is_none()
            && !change.delete
        {
            return Err("nothing to change".into());
        }
        Ok(())
    }

    /// Records a validated change, merged with earlier ones to the same server. A kill is
    /// an action, not a state: a change that only kills records nothing.
    pub(crate) fn record(&mut self, change: &ServerChange) {
        let key = (change.backend.clone(), change.server.clone());
        if change.delete || change.add.is_some() || change.address.is_some() {
            // Health observed at another address, or of another server, means nothing now.
            self.health.remove(&key);
        }
        if change.delete {
            self.record_delete(key);
            return;
        }
        if change.state.is_none() && change.weight.is_none() && change.address.is_none() && change.add.is_none() {
            return;
        }
        let entry = self.changes.entry(key).or_insert_with(|| ServerChange {
            backend: change.backend.clone(),
            server: change.server.clone(),
            ..Default::default()
        });
        if change.add.is_some() {
            // A new server: nothing of an earlier one of that name applies (but a deleted
            // file server of that name stays deleted).
            *entry = ServerChange {
                delete: entry.delete,
                kill: false,
                ..change.clone()
            };
            return;
        }
        if change.state.is_some() {
            entry.state = change.state;
        }
        if change.weight.is_some() {
            entry.weight = change.weight;
        }
        if change.address.is_some() {
            entry.address = change.address;
        }
    }

    /// A deleted runtime server leaves nothing behind (unless it had replaced a file server,
    /// which stays deleted); a deleted file server is recorded as deleted.
    fn record_delete(&mut self, key: (String, String)) {
        let runtime = self.changes.get(&key).and_then(|c| c.add.as_ref()).is_some();
        let replaced_file_server = self.changes.get(&key).is_some_and(|c| c.delete);
        if runtime && !replaced_file_server {
            self.changes.remove(&key);
            return;
        }
        let (backend, server) = key.clone();
        self.changes.insert(
            key,
            ServerChange {
                backend,
                server,
                delete: true,
                ..Default::default()
            },
        );
    }

    /// The changes a new generation must apply before it serves.
    pub(crate) fn changes(&self) -> Vec<ServerChange> {
        self.changes.values().cloned().collect()
    }

    /// For a reload from `old` to `new`: keeps the changes whose server the new file leaves
    /// as it was, drops the others, and reports both. Call only once the new generation is
    /// accepted (a refused reload changes nothing).
    pub(crate) fn reconcile(&mut self, old: &Config, new: &Config) -> ReloadReport {
        let mut report = ReloadReport::default();
        let mut kept = BTreeMap::new();
        for (key, change) in std::mem::take(&mut self.changes) {
            match carry(&change, old, new) {
                Ok(carried) if changes_nothing(&carried) => {}
                Ok(carried) => {
                    report.kept.push(carried.describe());
                    kept.insert(key, carried);
                }
                Err(why) => report.overridden.push(format!("{} ({why})", change.describe())),
            }
        }
        self.changes = kept;
        for c in std::mem::take(&mut self.certs) {
            report.overridden.push(format!(
                "certificate {:?} on frontend {} (a reload reads the configured certificate files)",
                c.cert_path, c.frontend
            ));
        }
        self.disabled_frontends.retain(|name| {
            let keep = new.frontends.iter().any(|f| f.name == *name);
            if keep {
                report.kept.push(format!("frontend {name} disabled"));
            } else {
                report
                    .overridden
                    .push(format!("frontend {name} disabled (frontend removed by the file)"));
            }
            keep
        });
        let before = self.health.len();
        self.health.retain(|(backend, server), _| {
            let after = find(new, backend, server).map(check_definition);
            after.is_some() && find(old, backend, server).map(check_definition) == after
        });
        if self.health.len() != before {
            tracing::info!(
                dropped = before - self.health.len(),
                "reload: health states of servers the file changes start afresh"
            );
        }
        report
    }

    /// Checks that `frontend` exists in `config`.
    pub(crate) fn validate_frontend(config: &Config, frontend: &str) -> Result<(), String> {
        if config.frontends.iter().any(|f| f.name == frontend) {
            Ok(())
        } else {
            Err(format!("no frontend `{frontend}`"))
        }
    }

    /// Records an enable or disable of a validated frontend.
    pub(crate) fn record_frontend(&mut self, frontend: &str, enabled: bool) {
        if enabled {
            self.disabled_frontends.remove(frontend);
        } else {
            self.disabled_frontends.insert(frontend.to_string());
        }
    }

    /// The frontends a generation on `new` starts disabled: those still in the file.
    pub(crate) fn disabled_frontends(&self, new: &Config) -> Vec<String> {
        self.disabled_frontends
            .iter()
            .filter(|name| new.frontends.iter().any(|f| f.name == **name))
            .cloned()
            .collect()
    }

    /// Records a certificate set at run time (the master checked it), replacing an earlier
    /// one of the same frontend and file.
    pub(crate) fn record_cert(&mut self, cert: CertInstall) {
        self.certs
            .retain(|c| !(c.frontend == cert.frontend && c.cert_path == cert.cert_path));
        self.certs.push(cert);
    }

    /// What a generation restarted on the current config installs before it serves.
    pub(crate) fn certs(&self) -> Vec<CertInstall> {
        self.certs.clone()
    }

    /// Records a server's health as its generation's checker reported it.
    pub(crate) fn record_health(&mut self, report: HealthReport) {
        self.health
            .insert((report.backend.clone(), report.server.clone()), report);
    }

    /// The health states a generation on `new` starts from (the master runs `current`):
    /// those of servers whose check definition is the same in both.
    pub(crate) fn health_for(&self, current: &Config, new: &Config) -> Vec<HealthReport> {
        self.health
            .iter()
            .filter(|((b, s), _)| {
                let after = find(new, b, s).map(check_definition);
                let file_server = after.is_some() && find(current, b, s).map(check_definition) == after;
                // A server added at run time, kept by the reload (no file server of its
                // name), in a backend still checked: its health goes on too.
                let runtime_server = after.is_none()
                    && new.backend(b).is_some_and(|bk| bk.health.is_some())
                    && self
                        .changes
                        .get(&(b.clone(), s.clone()))
                        .is_some_and(|c| c.add.is_some() && !c.delete);
                file_server || runtime_server
            })
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// What `reconcile` would keep, without changing anything (for the new generation's
    /// config message, sent before it is known to start).
    pub(crate) fn preview(&self, old: &Config, new: &Config) -> Vec<ServerChange> {
        self.changes
            .values()
            .filter_map(|c| carry(c, old, new).ok())
            .filter(|c| !changes_nothing(c))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn config(weight_b: u32, with_c: bool) -> Config {
        let c = if with_c {
            "[[backend.server]]\nname = \"c\"\naddress = \"127.0.0.1:3\"\n"
        } else {
            ""
        };
        let text = format!(
            "[[frontend]]\nname = \"f\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"app\"\n\
             [[backend]]\nname = \"app\"\n\
             [[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:1\"\n\
             [[backend.server]]\nname = \"b\"\naddress = \"127.0.0.1:2\"\nweight = {weight_b}\n{c}"
        );
        crate::config::parse(&text, "t.toml").unwrap()
    }

    fn change(server: &str, state: Option<AdminState>, weight: Option<u32>) -> ServerChange {
        ServerChange {
            backend: "app".into(),
            server: server.into(),
            state,
            weight,
            ..Default::default()
        }
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let c = config(1, true);
        assert!(
            Desired::default()
                .validate(&c, &change("a", Some(AdminState::Drain), None))
                .is_ok()
        );
        assert!(
            Desired::default()
                .validate(&c, &change("zz", None, Some(2)))
                .unwrap_err()
                .contains("no server `zz`")
        );
        assert!(
            Desired::default()
                .validate(&c, &change("a", None, Some(999)))
                .unwrap_err()
                .contains("out of range")
        );
        let mut kill = change("a", Some(AdminState::Drain), None);
        kill.kill = true;
        assert!(Desired::default().validate(&c, &kill).unwrap_err().contains("maint"));
        assert!(Desired::default().validate(&c, &change("a", None, None)).is_err());
        // `shutdown sessions`: a kill alone is valid, and leaves nothing to re-apply.
        let mut shutdown = change("a", None, None);
        shutdown.kill = true;
        assert!(Desired::default().validate(&c, &shutdown).is_ok());
        let mut d = Desired::default();
        d.record(&shutdown);
        assert!(d.changes().is_empty());
    }

    #[test]
    fn reload_keeps_untouched_servers_and_the_file_wins_elsewhere() {
        let old = config(1, true);
        let mut d = Desired::default();
        d.record(&change("a", Some(AdminState::Drain), None));
        d.record(&change("a", None, Some(7)));
        d.record(&change("b", None, Some(3)));
        d.record(&change("c", Some(AdminState::Maint), None));
        // b's weight changes in the file, c is removed, a is untouched.
        let new = config(5, false);
        assert_eq!(d.preview(&old, &new).len(), 1);
        let report = d.reconcile(&old, &new);
        assert_eq!(report.kept, ["app/a state=drain weight=7"]);
        assert_eq!(report.overridden.len(), 2, "{report:?}");
        assert!(
            report
                .overridden
                .iter()
                .any(|l| l.contains("app/b") && l.contains("file changes"))
        );
        assert!(
            report
                .overridden
                .iter()
                .any(|l| l.contains("app/c") && l.contains("removed"))
        );
        assert_eq!(d.changes(), [change("a", Some(AdminState::Drain), Some(7))]);
    }

    /// A runtime change equal to what the file says (`set server app/a weight 1` with
    /// `weight = 1` in the file, `state ready`) is neither kept nor reported by a reload.
    #[test]
    fn a_change_equal_to_the_file_is_not_reported_as_kept() {
        let c = config(1, true);
        let mut d = Desired::default();
        d.record(&change("a", Some(AdminState::Ready), Some(1)));
        d.record(&change("b", None, Some(4)));
        assert_eq!(d.preview(&c, &c).len(), 1);
        let report = d.reconcile(&c, &c);
        assert_eq!(report.kept, ["app/b weight=4"]);
        assert!(report.overridden.is_empty(), "{report:?}");
        assert_eq!(d.changes(), [change("b", None, Some(4))]);
    }

    #[test]
    fn a_disabled_frontend_stays_disabled_while_the_file_keeps_it() {
        let c = config(1, true);
        assert!(Desired::validate_frontend(&c, "f").is_ok());
        assert!(
            Desired::validate_frontend(&c, "g")
                .unwrap_err()
                .contains("no frontend `g`")
        );
        let mut d = Desired::default();
        d.record_frontend("f", false);
        assert_eq!(d.disabled_frontends(&c), ["f"]);
        let report = d.reconcile(&c, &c);
        assert_eq!(report.kept, ["frontend f disabled"]);
        d.record_frontend("f", true);
        assert!(d.disabled_frontends(&c).is_empty());
    }

    #[test]
    fn health_is_carried_unless_the_file_changes_how_the_server_is_checked() {
        use crate::live::server::OperState;
        let old = config(1, true);
        let mut d = Desired::default();
        for s in ["a", "b", "c"] {
            d.record_health(HealthReport {
                backend: "app".into(),
                server: s.into(),
                oper: OperState::Down,
                agent_percent: 100,
            });
        }
        // b's weight changes (its checks do not), c is removed.
        let new = config(5, false);
        let carried: Vec<String> = d.health_for(&old, &new).into_iter().map(|r| r.server).collect();
        assert_eq!(carried, ["a", "b"]);
        d.reconcile(&old, &new);
        assert_eq!(d.health_for(&new, &new).len(), 2);
        // a moves to another address: its state means nothing there.
        let text = "[[frontend]]\nname = \"f\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"app\"\n\
                    [[backend]]\nname = \"app\"\n\
                    [[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:9\"\n\
                    [[backend.server]]\nname = \"b\"\naddress = \"127.0.0.1:2\"\nweight = 5\n";
        let moved = crate::config::parse(text, "t.toml").unwrap();
        let carried: Vec<String> = d.health_for(&new, &moved).into_iter().map(|r| r.server).collect();
        assert_eq!(carried, ["b"]);
    }

    /// A server added at run time keeps its health across a reload that keeps it (it went
    /// back to `unknown`), and loses it once the backend is no longer checked.
    #[test]
    fn a_runtime_server_keeps_its_health_across_a_reload() {
        use crate::command::AddServerArgs;
        use crate::live::server::OperState;
        let checked = |health: bool| {
            let h = if health {
                "[backend.health]\ntype = \"tcp\"\n"
            } else {
                ""
            };
            let text = format!(
                "[[frontend]]\nname = \"f\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"app\"\n\
                 [[backend]]\nname = \"app\"\n{h}\
                 [[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:1\"\n"
            );
            crate::config::parse(&text, "t.toml").unwrap()
        };
        let c = checked(true);
        let mut d = Desired::default();
        let args = AddServerArgs {
            address: "127.0.0.1:7".into(),
            check: true,
            enabled: true,
            ..Default::default()
        };
        let add = d.new_server(&c, "app", "n", &args).unwrap();
        d.record(&add);
        d.record_health(HealthReport {
            backend: "app".into(),
            server: "n".into(),
            oper: OperState::Up,
            agent_percent: 100,
        });
        let carried: Vec<String> = d.health_for(&c, &c).into_iter().map(|r| r.server).collect();
        assert_eq!(carried, ["n"]);
        assert!(d.health_for(&c, &checked(false)).is_empty());
    }
}
