//! The master's listening sockets, keyed by address, and their handoff to worker processes.
//!
//! Owns: every listening socket for the life of the master. A socket is bound once (at start
//! with `listener::bind_all`, or when a reload adds an address) and closed only when no live
//! generation uses it and the current config does not name it. Each generation receives
//! duplicates of the *same* sockets (same open file descriptions, same accept queues), so a
//! reload never closes a queue a SYN could be waiting in.
//!
//! Keys: `BoundSocket::key()` (`tcp:ADDR#WORKER` or `tcp:ADDR#shared`, ADDR as configured),
//! with `~N` appended to the N-th repeat of the same key in one config (only possible with
//! port 0). On the wire each socket is labelled `KEY fe=FRONTEND` (the frontend index in the
//! config sent along); the worker rebuilds its `BoundSocket`s from those labels.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::config::Config;
use crate::listener::{self, BoundSocket};

/// The sockets one generation uses: key and frontend index, in config order.
pub(crate) type Plan = Vec<(String, usize)>;

struct Entry {
    socket: TcpListener,
    local: SocketAddr,
}

#[derive(Default)]
pub(crate) struct SocketTable {
    entries: BTreeMap<String, Entry>,
}

/// Appends `~N` to repeats of one key so every socket of a config has its own key.
fn dedup(base: String, seen: &mut HashMap<String, usize>) -> String {
    let n = seen.entry(base.clone()).or_insert(0);
    let key = if *n == 0 { base } else { format!("{base}~{n}") };
    *n += 1;
    key
}

impl SocketTable {
    /// Takes the sockets `bind_all` bound at start; returns the table and the first plan.
    pub(crate) fn from_bound(sockets: Vec<BoundSocket>) -> (SocketTable, Plan) {
        let mut table = SocketTable::default();
        let mut plan = Vec::new();
        let mut seen = HashMap::new();
        for s in sockets {
            let key = dedup(s.key(), &mut seen);
            plan.push((key.clone(), s.frontend));
            table.entries.insert(
                key,
                Entry {
                    socket: s.socket,
                    local: s.local,
                },
            );
        }
        (table, plan)
    }

    /// Makes sure every socket `config` needs exists (binding the new ones) and returns the
    /// plan. Nothing is added if any bind fails.
    pub(crate) fn ensure(&mut self, config: &Config) -> io::Result<Plan> {
        let mut plan = Vec::new();
        let mut fresh: BTreeMap<String, Entry> = BTreeMap::new();
        let mut seen = HashMap::new();
        let workers = config.global.workers.max(1);
        let backlog = config.global.backlog;
        for (fe, frontend) in config.frontends.iter().enumerate() {
            for &addr in &frontend.binds {
                let cannot = |e: io::Error| listener::cannot_listen(addr, &frontend.name, &e);
                let keys: Vec<String> = (0..workers)
                    .map(|w| dedup(format!("tcp:{addr}#{w}"), &mut seen))
                    .collect();
                let shared = dedup(format!("tcp:{addr}#shared"), &mut seen);
                // An address that fell back to one shared socket stays that way.
                if !config.global.thread_per_core || self.entries.contains_key(&shared) {
                    if !self.entries.contains_key(&shared) {
                        let socket = listener::bind_one(addr, false, backlog).map_err(cannot)?;
                        fresh.insert(shared.clone(), entry(socket)?);
                    }
                    plan.push((shared, fe));
                    continue;
                }
                let existing = keys.iter().find_map(|k| self.entries.get(k).map(|e| e.local));
                match existing {
                    // More workers than before: join the existing group on its port.
                    Some(local) => {
                        for k in &keys {
                            if !self.entries.contains_key(k) {
                                let socket = listener::bind_one(local, true, backlog).map_err(cannot)?;
                                fresh.insert(k.clone(), entry(socket)?);
                            }
                        }
                        plan.extend(keys.into_iter().map(|k| (k, fe)));
                    }
                    // A new address: refused if anyone listens there (see `listener`).
                    None => {
                        listener::probe_free(addr).map_err(cannot)?;
                        match listener::bind_reuseport_group(addr, workers, backlog) {
                            Ok(group) => {
                                for (k, socket) in keys.iter().zip(group) {
                                    fresh.insert(k.clone(), entry(socket)?);
                                }
                                plan.extend(keys.into_iter().map(|k| (k, fe)));
                            }
                            Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err(cannot(e)),
                            Err(e) => {
                                tracing::warn!(
                                    frontend = %frontend.name, %addr, error = %e,
                                    "SO_REUSEPORT bind failed; falling back to one shared accept loop for this address"
                                );
                                let socket = listener::bind_one(addr, false, backlog).map_err(cannot)?;
                                fresh.insert(shared.clone(), entry(socket)?);
                                plan.push((shared, fe));
                            }
                        }
                    }
                }
            }
        }
        for (key, e) in fresh {
            let which = key.rsplit('#').next().and_then(|w| w.split('~').next());
            if matches!(which, Some("0" | "shared")) {
                tracing::info!(key = %key, addr = %e.local, "listening");
            }
            self.entries.insert(key, e);
        }
        Ok(plan)
    }

    /// Closes the sockets whose key is not in `used`; returns their keys.
    pub(crate) fn retain(&mut self, used: &HashSet<&str>) -> Vec<String> {
        let gone: Vec<String> = self
            .entries
            .keys()
            .filter(|k| !used.contains(k.as_str()))
            .cloned()
            .collect();
        for k in &gone {
            self.entries.remove(k);
        }
        gone
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub(crate) fn local_addr(&self, key: &str) -> Option<SocketAddr> {
        self.entries.get(key).map(|e| e.local)
    }

    /// The labelled fds of `plan`, for `fdpass::send_listeners`.
    pub(crate) fn labelled(&self, plan: &Plan) -> io::Result<Vec<(String, BorrowedFd<'_>)>> {
        plan.iter()
            .map(|(key, fe)| {
                let e = self
                    .entries
                    .get(key)
                    .ok_or_else(|| io::Error::other(format!("socket {key} is not bound")))?;
                Ok((format!("{key} fe={fe}"), e.socket.as_fd()))
            })
            .collect()
    }
}

fn entry(socket: TcpListener) -> io::Result<Entry> {
    Ok(Entry {
        local: socket.local_addr()?,
        socket,
    })
}

/// Worker side: rebuilds `BoundSocket`s from the labelled fds the master sent, checking each
/// label against `config`.
pub(crate) fn adopt(config: &Config, received: Vec<(String, OwnedFd)>) -> io::Result<Vec<BoundSocket>> {
    let bad = |label: &str, why: &str| io::Error::new(io::ErrorKind::InvalidData, format!("socket `{label}`: {why}"));
    let mut out = Vec::with_capacity(received.len());
    for (label, fd) in received {
        let (key, fe) = label.split_once(" fe=").ok_or_else(|| bad(&label, "no frontend"))?;
        let frontend: usize = fe.parse().map_err(|_| bad(&label, "bad frontend index"))?;
        let (addr, which) = key
            .strip_prefix("tcp:")
            .and_then(|k| k.rsplit_once('#'))
            .ok_or_else(|| bad(&label, "not tcp:ADDR#WORKER"))?;
        let configured: SocketAddr = addr.parse().map_err(|_| bad(&label, "bad address"))?;
        let which = which.split('~').next().unwrap_or(which);
        let worker = match which {
            "shared" => None,
            w => Some(w.parse::<usize>().map_err(|_| bad(&label, "bad worker index"))?),
        };
        let fe_binds = config.frontends.get(frontend).map(|f| &f.binds);
        if !fe_binds.is_some_and(|b| b.contains(&configured)) {
            return Err(bad(&label, "address not bound by that frontend in this config"));
        }
        if worker.is_some_and(|w| w >= config.global.workers.max(1)) {
            return Err(bad(&label, "worker index beyond `workers`"));
        }
        let socket = TcpListener::from(fd);
        out.push(BoundSocket {
            frontend,
            configured,
            local: socket.local_addr()?,
            worker,
            socket,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn config(workers: usize, binds: &[&str]) -> Config {
        let binds: Vec<String> = binds.iter().map(|b| format!("\"{b}\"")).collect();
        let text = format!(
            "[global]\nworkers = {workers}\n[[frontend]]\nname = \"fe\"\nbind = [{}]\ndefault_backend = \"be\"\n\
             [[backend]]\nname = \"be\"\n[[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:9\"\n",
            binds.join(", ")
        );
        crate::config::parse(&text, "t.toml").unwrap()
    }

    #[test]
    fn ensure_reuses_adds_and_retains() {
        let c1 = config(2, &["127.0.0.1:0"]);
        let (mut table, plan1) = SocketTable::from_bound(listener::bind_all(&c1).unwrap());
        assert_eq!(plan1.len(), 2);
        let port = table.local_addr(&plan1[0].0).unwrap();
        // Same config: same sockets, nothing new.
        assert_eq!(table.ensure(&c1).unwrap(), plan1);
        assert_eq!(table.len(), 2);
        // Three workers and a second address: one more socket joins the group, two new.
        let c2 = config(3, &["127.0.0.1:0", "127.0.0.1:0"]);
        let plan2 = table.ensure(&c2).unwrap();
        assert_eq!(plan2.len(), 6);
        assert_eq!(table.len(), 6);
        assert_eq!(table.local_addr("tcp:127.0.0.1:0#2"), Some(port));
        assert_ne!(table.local_addr("tcp:127.0.0.1:0#0~1"), Some(port));
        // Back to c1: the extras go once nothing uses them.
        let plan3 = table.ensure(&c1).unwrap();
        let used: HashSet<&str> = plan3.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(table.retain(&used).len(), 4);
        assert_eq!(table.local_addr(&plan1[0].0), Some(port));
    }

    #[test]
    fn adopt_rebuilds_bound_sockets_and_checks_labels() {
        let c = config(2, &["127.0.0.1:0"]);
        let (table, plan) = SocketTable::from_bound(listener::bind_all(&c).unwrap());
        let dup = |key: &str| -> OwnedFd { table.entries[key].socket.as_fd().try_clone_to_owned().unwrap() };
        let received: Vec<(String, OwnedFd)> = table
            .labelled(&plan)
            .unwrap()
            .into_iter()
            .map(|(label, _)| {
                let key = label.split(' ').next().unwrap().to_string();
                (label, dup(&key))
            })
            .collect();
        let sockets = adopt(&c, received).unwrap();
        assert_eq!(sockets.iter().map(|s| s.worker).collect::<Vec<_>>(), [Some(0), Some(1)]);
        assert_eq!(sockets[0].local, table.local_addr("tcp:127.0.0.1:0#0").unwrap());
        let wrong = vec![("tcp:127.0.0.1:0#5 fe=0".to_string(), dup("tcp:127.0.0.1:0#0"))];
        assert!(adopt(&c, wrong).is_err());
        let wrong = vec![("tcp:10.0.0.1:80#0 fe=0".to_string(), dup("tcp:127.0.0.1:0#0"))];
        assert!(adopt(&c, wrong).is_err());
    }

    /// Two reactors (each its own epoll, as two worker processes have) register duplicates
    /// of one listening socket. The old one dropping its registration and its dup must not
    /// disturb the new one, and a connection queued meanwhile must not be lost.
    #[test]
    fn dropping_one_reactors_dup_leaves_the_other_accepting() {
        use std::time::Duration;
        let original = listener::bind_one("127.0.0.1:0".parse().unwrap(), true, 128).unwrap();
        let addr = original.local_addr().unwrap();
        let rt = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        };
        let (old_rt, new_rt) = (rt(), rt());
        let new_listener = {
            let _guard = new_rt.enter();
            tokio::net::TcpListener::from_std(original.try_clone().unwrap()).unwrap()
        };
        old_rt.block_on(async {
            let l = tokio::net::TcpListener::from_std(original.try_clone().unwrap()).unwrap();
            let _c = std::net::TcpStream::connect(addr).unwrap();
            l.accept().await.unwrap();
        });
        drop(old_rt); // deregisters from the old epoll and closes the old dup
        let queued = std::net::TcpStream::connect(addr).unwrap();
        let accepted = new_rt.block_on(async {
            let later = std::net::TcpStream::connect(addr).unwrap();
            let mut peers = Vec::new();
            for _ in 0..2 {
                let accept = tokio::time::timeout(Duration::from_secs(5), new_listener.accept());
                peers.push(accept.await.expect("accept timed out").unwrap().1);
            }
            drop(later);
            peers
        });
        assert!(accepted.contains(&queued.local_addr().unwrap()), "{accepted:?}");
    }
}
