//! Sans-io: from DNS answers and a backend's current server set to the steps that make the
//! next set (keep, readdress, reweight, add, remove).
//!
//! Rules (docs/config.md, "Servers from DNS"):
//! - a failed lookup changes nothing: the last good answer stays in force;
//! - a server keeps its address while that address is still in the answer (round-robin DNS
//!   does not move it at every interval), else takes the answer's first address;
//! - SRV: one server per record, named `target:port`; the records with the lowest priority
//!   value are the primaries, every other record is a `backup` server; the weight is the
//!   record's, clamped to 1..=256 (0, "no preference" in RFC 2782, becomes 1); a record that
//!   leaves the answer removes its server; a record whose target does not resolve keeps its
//!   server's last address, or is not added while it never resolved.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crate::live::ServerId;
use crate::live::server::ServerLive;

/// One SRV record of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SrvRecord {
    /// Without the final dot.
    pub target: String,
    pub port: u16,
    pub priority: u16,
    pub weight: u16,
}

/// A server an SRV answer asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wanted {
    pub name: String,
    pub target: String,
    pub address: SocketAddr,
    pub weight: u32,
    pub backup: bool,
}

/// A discovered server's name: stable for as long as its record exists, never a valid
/// config server name (those cannot contain `:`), so the two never collide.
pub(crate) fn server_name(target: &str, port: u16) -> String {
    format!("{target}:{port}")
}

/// An SRV weight as a server weight.
pub(crate) fn srv_weight(weight: u16) -> u32 {
    u32::from(weight).clamp(1, 256)
}

/// The address to use from `answer`: `current` while it is still there, else the first.
pub(crate) fn pick(current: Option<IpAddr>, answer: &[IpAddr]) -> Option<IpAddr> {
    match current {
        Some(ip) if answer.contains(&ip) => Some(ip),
        _ => answer.first().copied(),
    }
}

/// The servers `records` ask for, in (priority, name) order. `addresses(target)` is the
/// target's answer (`None`: its lookup failed); `last(name)` is the address a server of that
/// name has now.
pub(crate) fn wanted(
    records: &[SrvRecord],
    addresses: &dyn Fn(&str) -> Option<Vec<IpAddr>>,
    last: &dyn Fn(&str) -> Option<SocketAddr>,
) -> Vec<Wanted> {
    let primary = records.iter().map(|r| r.priority).min();
    let mut sorted: Vec<&SrvRecord> = records.iter().collect();
    sorted.sort_by(|a, b| (a.priority, &a.target, a.port).cmp(&(b.priority, &b.target, b.port)));
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for r in sorted {
        let name = server_name(&r.target, r.port);
        if !seen.insert(name.clone()) {
            continue;
        }
        let current = last(&name);
        let address = match addresses(&r.target) {
            Some(ips) => match pick(current.map(|a| a.ip()), &ips) {
                Some(ip) => SocketAddr::new(ip, r.port),
                None => continue,
            },
            None => match current {
                Some(a) => a,
                None => continue,
            },
        };
        out.push(Wanted {
            name,
            target: r.target.clone(),
            address,
            weight: srv_weight(r.weight),
            backup: Some(r.priority) != primary,
        });
    }
    out
}

/// What happens to one server in the next set.
#[derive(Debug)]
pub(crate) enum Step<'a> {
    /// Stays as it is; `weight`: its configured weight becomes this.
    Keep {
        server: &'a Arc<ServerLive>,
        weight: Option<u32>,
    },
    /// The same server (id, state, counters) at another address or backup flag.
    Move {
        server: &'a Arc<ServerLive>,
        address: SocketAddr,
        backup: bool,
        weight: Option<u32>,
    },
    /// Its record left the answer.
    Remove(&'a Arc<ServerLive>),
    /// A new record of discover entry `discover`.
    Add { discover: usize, wanted: Wanted },
}

impl Step<'_> {
    fn changes(&self) -> bool {
        !matches!(self, Step::Keep { weight: None, .. })
    }
}

/// One round's answers for one backend.
#[derive(Debug, Default)]
pub(crate) struct Answers {
    /// Host name to its answer (`None`: the lookup failed).
    pub hosts: HashMap<String, Option<Vec<IpAddr>>>,
    /// Per discover entry, in config order: the servers it asks for (`None`: failed).
    pub srv: Vec<Option<Vec<Wanted>>>,
}

/// The steps from `current` to the set the answers ask for; `origin(id)` is the discover
/// entry a discovered server came from (`None` for a configured server). Empty when nothing
/// changes.
pub(crate) fn steps<'a>(
    current: &'a [Arc<ServerLive>],
    origin: &dyn Fn(ServerId) -> Option<usize>,
    answers: &Answers,
) -> Vec<Step<'a>> {
    let mut present: HashSet<&str> = HashSet::new();
    let mut out = Vec::with_capacity(current.len());
    for server in current {
        present.insert(&server.name);
        out.push(match origin(server.id) {
            None => configured(server, answers),
            Some(k) => discovered(server, answers.srv.get(k).and_then(Option::as_ref)),
        });
    }
    for (k, list) in answers.srv.iter().enumerate() {
        for w in list.iter().flatten() {
            if present.insert(&w.name) {
                out.push(Step::Add {
                    discover: k,
                    wanted: w.clone(),
                });
            }
        }
    }
    if out.iter().any(Step::changes) { out } else { Vec::new() }
}

/// A configured server: readdressed when it has a host name whose answer moved.
fn configured<'a>(server: &'a Arc<ServerLive>, answers: &Answers) -> Step<'a> {
    let keep = Step::Keep { server, weight: None };
    let Some(Some(ips)) = server.host.as_deref().and_then(|h| answers.hosts.get(h)) else {
        return keep;
    };
    let current = server.resolved.then_some(server.address.ip());
    match pick(current, ips) {
        Some(ip) if current != Some(ip) => Step::Move {
            server,
            address: SocketAddr::new(ip, server.address.port()),
            backup: server.backup,
            weight: None,
        },
        _ => keep,
    }
}

/// A discovered server against its entry's answer (`None`: failed, kept as it is).
fn discovered<'a>(server: &'a Arc<ServerLive>, list: Option<&Vec<Wanted>>) -> Step<'a> {
    let Some(list) = list else {
        return Step::Keep { server, weight: None };
    };
    let Some(w) = list.iter().find(|w| *w.name == *server.name) else {
        return Step::Remove(server);
    };
    let weight = (w.weight != server.weight()).then_some(w.weight);
    if w.address != server.address || w.backup != server.backup {
        Step::Move {
            server,
            address: w.address,
            backup: w.backup,
            weight,
        }
    } else {
        Step::Keep { server, weight }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Server;
    use crate::live::BackendId;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    fn server(id: u32, name: &str, host: Option<&str>, address: SocketAddr, backup: bool) -> Arc<ServerLive> {
        let spec = Server {
            id: ServerId(id),
            name: name.into(),
            address,
            host: host.map(Into::into),
            weight: 1,
            maxconn: 0,
            backup,
            tls: None,
            proto: Default::default(),
            slowstart: std::time::Duration::ZERO,
            check: Default::default(),
            send_proxy: None,
        };
        let live = ServerLive::new(
            &spec,
            (BackendId(0), &Arc::from("b")),
            1,
            crate::live::queue::SlotQueue::new(),
        );
        // A discovered server exists only resolved.
        Arc::new(if host.is_some() && address.ip() != ip(0) {
            live.readdressed(address, backup)
        } else {
            live
        })
    }

    fn rec(target: &str, port: u16, priority: u16, weight: u16) -> SrvRecord {
        SrvRecord {
            target: target.into(),
            port,
            priority,
            weight,
        }
    }

    #[test]
    fn pick_keeps_the_current_address_while_it_is_answered() {
        assert_eq!(pick(Some(ip(2)), &[ip(1), ip(2)]), Some(ip(2)));
        assert_eq!(pick(Some(ip(3)), &[ip(1), ip(2)]), Some(ip(1)));
        assert_eq!(pick(None, &[ip(1)]), Some(ip(1)));
        assert_eq!(pick(None, &[]), None);
    }

    #[test]
    fn srv_weights_clamp_and_zero_is_one() {
        assert_eq!(srv_weight(0), 1);
        assert_eq!(srv_weight(7), 7);
        assert_eq!(srv_weight(256), 256);
        assert_eq!(srv_weight(60000), 256);
    }

    #[test]
    fn lowest_priority_is_primary_the_rest_backup() {
        let records = [rec("b.t", 80, 20, 5), rec("a.t", 80, 10, 0), rec("c.t", 81, 10, 300)];
        let w = wanted(
            &records,
            &|t| Some(vec![if t == "a.t" { ip(1) } else { ip(2) }]),
            &|_| None,
        );
        let names: Vec<(&str, bool, u32)> = w.iter().map(|w| (w.name.as_str(), w.backup, w.weight)).collect();
        assert_eq!(
            names,
            [("a.t:80", false, 1), ("c.t:81", false, 256), ("b.t:80", true, 5)]
        );
        assert_eq!(w[0].address, SocketAddr::new(ip(1), 80));
    }

    #[test]
    fn unresolved_target_keeps_its_last_address_or_waits() {
        let records = [rec("a.t", 80, 0, 1), rec("b.t", 80, 0, 1)];
        let known = SocketAddr::new(ip(9), 80);
        let w = wanted(&records, &|_| None, &|name| (name == "a.t:80").then_some(known));
        assert_eq!(w.len(), 1, "b.t never resolved: not added");
        assert_eq!(w[0].address, known);
    }

    #[test]
    fn host_named_server_moves_only_when_its_address_leaves_the_answer() {
        let unresolved = server(0, "a", Some("a.t"), SocketAddr::new(ip(0), 80), false);
        let fixed = server(1, "f", None, SocketAddr::new(ip(5), 80), false);
        let current = vec![unresolved, fixed];
        let mut answers = Answers::default();
        answers.hosts.insert("a.t".into(), None);
        assert!(
            steps(&current, &|_| None, &answers).is_empty(),
            "failure: nothing changes"
        );
        answers.hosts.insert("a.t".into(), Some(vec![ip(1), ip(2)]));
        let s = steps(&current, &|_| None, &answers);
        assert!(
            matches!(s[0], Step::Move { address, .. } if address == SocketAddr::new(ip(1), 80)),
            "{s:?}"
        );
        let resolved = vec![server(0, "a", Some("a.t"), SocketAddr::new(ip(2), 80), false)];
        assert!(steps(&resolved, &|_| None, &answers).is_empty(), "ip 2 still answered");
    }

    #[test]
    fn srv_answers_add_move_reweight_and_remove() {
        let a = server(100, "a.t:80", Some("a.t"), SocketAddr::new(ip(1), 80), false);
        let b = server(101, "b.t:80", Some("b.t"), SocketAddr::new(ip(2), 80), false);
        let current = vec![a, b];
        let origin = |id: ServerId| (id.0 >= 100).then_some(0);
        let wanted = |name: &str, last: u8, weight: u32, backup: bool| Wanted {
            name: name.into(),
            target: name.split(':').next().unwrap_or_default().into(),
            address: SocketAddr::new(ip(last), 80),
            weight,
            backup,
        };
        let answers = Answers {
            hosts: HashMap::new(),
            srv: vec![Some(vec![wanted("a.t:80", 1, 3, false), wanted("c.t:80", 3, 1, true)])],
        };
        let s = steps(&current, &origin, &answers);
        assert!(matches!(s[0], Step::Keep { weight: Some(3), .. }), "{s:?}");
        assert!(matches!(s[1], Step::Remove(_)), "{s:?}");
        assert!(
            matches!(&s[2], Step::Add { discover: 0, wanted } if wanted.backup),
            "{s:?}"
        );

        let failed = Answers {
            hosts: HashMap::new(),
            srv: vec![None],
        };
        assert!(
            steps(&current, &origin, &failed).is_empty(),
            "a failed SRV lookup keeps all"
        );

        let moved = Answers {
            hosts: HashMap::new(),
            srv: vec![Some(vec![wanted("a.t:80", 7, 1, true), wanted("b.t:80", 2, 1, false)])],
        };
        let s = steps(&current, &origin, &moved);
        assert!(
            matches!(
                s[0],
                Step::Move {
                    backup: true,
                    weight: None,
                    ..
                }
            ),
            "{s:?}"
        );
        assert!(matches!(s[1], Step::Keep { weight: None, .. }), "{s:?}");
    }
}
