//! The master's listening sockets, keyed by address, and their handoff to worker processes.
//!
//! Owns: every listening socket for the life of the master: TCP listeners for `bind`, and
//! the SO_REUSEPORT UDP sockets of `[frontend.quic]` binds. A socket is bound once (at start
//! with `listener::bind_all` and `listener::udp::bind_quic`, or when a reload adds an
//! address) and closed only when no live generation uses it and the current config does not
//! name it. Each generation receives duplicates of the *same* sockets (same open file
//! descriptions: the same accept queues, the same UDP receive buffers and reuseport group
//! with its steering program), so a reload never closes a queue a SYN or a datagram could be
//! waiting in.
//!
//! Keys: `BoundSocket::key()` (`tcp:ADDR#WORKER` or `tcp:ADDR#shared`, ADDR as configured)
//! and `BoundUdp::key()` (`udp:ADDR#WORKER`), with `~N` appended to the N-th repeat of the
//! same key in one config (only possible with port 0). A plan lists a config's TCP sockets,
//! then its UDP sockets, each in config order. On the wire each socket is labelled
//! `KEY fe=FRONTEND` (the frontend index in the config sent along); the worker rebuilds its
//! `BoundSocket`s and `BoundUdp`s from those labels, a UDP socket's group being the position
//! of its address among the config's quic binds (the N-th such address for a `~N` key).
//!
//! A UDP group keeps its sockets in worker order: a reload with more workers joins new
//! sockets at the end; one with fewer leaves the extra ones until no generation uses them
//! (only the highest indexes close, so no other socket moves in the kernel's group).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::config::Config;
use crate::listener::udp::{self, BoundUdp};
use crate::listener::{self, BoundSocket};

/// The sockets one generation uses: key and frontend index, TCP then UDP, in config order.
pub(crate) type Plan = Vec<(String, usize)>;

/// One socket of the table, of either kind (its key's prefix says which).
enum Held {
    Tcp(TcpListener),
    Udp(UdpSocket),
}

impl AsFd for Held {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Held::Tcp(s) => s.as_fd(),
            Held::Udp(s) => s.as_fd(),
        }
    }
}

struct Entry {
    socket: Held,
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
    /// Takes the sockets `bind_all` and `bind_quic` bound at start; returns the table and the
    /// first plan.
    pub(crate) fn from_bound(sockets: Vec<BoundSocket>, quic: Vec<BoundUdp>) -> (SocketTable, Plan) {
        let mut table = SocketTable::default();
        let mut plan = Vec::new();
        let mut seen = HashMap::new();
        let tcp = sockets
            .into_iter()
            .map(|s| (s.key(), s.frontend, s.local, Held::Tcp(s.socket)));
        let quic = quic
            .into_iter()
            .map(|s| (s.key(), s.frontend, s.local, Held::Udp(s.socket)));
        for (key, frontend, local, socket) in tcp.chain(quic) {
            let key = dedup(key, &mut seen);
            plan.push((key.clone(), frontend));
            table.entries.insert(key, Entry { socket, local });
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
                        fresh.insert(shared.clone(), tcp_entry(socket)?);
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
                                fresh.insert(k.clone(), tcp_entry(socket)?);
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
                                    fresh.insert(k.clone(), tcp_entry(socket)?);
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
                                fresh.insert(shared.clone(), tcp_entry(socket)?);
                                plan.push((shared, fe));
                            }
                        }
                    }
                }
            }
        }
        self.ensure_quic(config, &mut plan, &mut fresh, &mut seen)?;
        for (key, e) in fresh {
            let which = key.rsplit('#').next().and_then(|w| w.split('~').next());
            if matches!(which, Some("0" | "shared")) {
                tracing::info!(key = %key, addr = %e.local, "listening");
            }
            self.entries.insert(key, e);
        }
        Ok(plan)
    }

    /// `ensure` for the quic binds: the UDP sockets of each go into `plan` (new ones into
    /// `fresh`), in worker order.
    fn ensure_quic(
        &self,
        config: &Config,
        plan: &mut Plan,
        fresh: &mut BTreeMap<String, Entry>,
        seen: &mut HashMap<String, usize>,
    ) -> io::Result<()> {
        let workers = config.global.workers.max(1);
        for (fe, frontend, addr) in udp::quic_binds(config) {
            let cannot = |e: io::Error| listener::cannot_listen(addr, &frontend.name, &e);
            let keys: Vec<String> = (0..workers).map(|w| dedup(format!("udp:{addr}#{w}"), seen)).collect();
            match keys.iter().find_map(|k| self.entries.get(k).map(|e| e.local)) {
                // Held already; more workers than before: join the group at its end.
                Some(local) => {
                    for k in &keys {
                        if !self.entries.contains_key(k) {
                            let socket = udp::join_group(local).map_err(cannot)?;
                            fresh.insert(k.clone(), udp_entry(socket)?);
                        }
                    }
                }
                // A new address: refused if anyone holds it (see `listener::udp`).
                None => {
                    udp::probe_free(addr).map_err(cannot)?;
                    let group = udp::bind_group(addr, workers).map_err(cannot)?;
                    if let Some(first) = group.first() {
                        udp::steer(first, &frontend.name, addr);
                    }
                    for (k, socket) in keys.iter().zip(group) {
                        fresh.insert(k.clone(), udp_entry(socket)?);
                    }
                }
            }
            plan.extend(keys.into_iter().map(|k| (k, fe)));
        }
        Ok(())
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

fn tcp_entry(socket: TcpListener) -> io::Result<Entry> {
    Ok(Entry {
        local: socket.local_addr()?,
        socket: Held::Tcp(socket),
    })
}

fn udp_entry(socket: UdpSocket) -> io::Result<Entry> {
    Ok(Entry {
        local: socket.local_addr()?,
        socket: Held::Udp(socket),
    })
}

/// What a worker rebuilt from the labelled fds the master sent.
pub(crate) struct Adopted {
    pub tcp: Vec<BoundSocket>,
    pub udp: Vec<BoundUdp>,
}

/// Worker side: rebuilds `BoundSocket`s and `BoundUdp`s from the labelled fds the master
/// sent, checking each label against `config`.
pub(crate) fn adopt(config: &Config, received: Vec<(String, OwnedFd)>) -> io::Result<Adopted> {
    let bad = |label: &str, why: &str| io::Error::new(io::ErrorKind::InvalidData, format!("socket `{label}`: {why}"));
    let workers = config.global.workers.max(1);
    let quic: Vec<(usize, SocketAddr)> = udp::quic_binds(config).map(|(fe, _, addr)| (fe, addr)).collect();
    let mut out = Adopted {
        tcp: Vec::with_capacity(received.len()),
        udp: Vec::new(),
    };
    for (label, fd) in received {
        let (key, fe) = label.split_once(" fe=").ok_or_else(|| bad(&label, "no frontend"))?;
        let frontend: usize = fe.parse().map_err(|_| bad(&label, "bad frontend index"))?;
        let shape = "not tcp:ADDR#WORKER or udp:ADDR#WORKER";
        let (kind, key) = key.split_once(':').ok_or_else(|| bad(&label, shape))?;
        let (addr, which) = key.rsplit_once('#').ok_or_else(|| bad(&label, shape))?;
        let configured: SocketAddr = addr.parse().map_err(|_| bad(&label, "bad address"))?;
        let (which, repeat) = match which.split_once('~') {
            Some((w, n)) => (w, n.parse::<usize>().map_err(|_| bad(&label, "bad repeat"))?),
            None => (which, 0),
        };
        let worker = match which {
            "shared" if kind == "tcp" => None,
            w => Some(w.parse::<usize>().map_err(|_| bad(&label, "bad worker index"))?),
        };
        if worker.is_some_and(|w| w >= workers) {
            return Err(bad(&label, "worker index beyond `workers`"));
        }
        match (kind, worker) {
            ("tcp", _) => {
                let fe_binds = config.frontends.get(frontend).map(|f| &f.binds);
                if !fe_binds.is_some_and(|b| b.contains(&configured)) {
                    return Err(bad(&label, "address not bound by that frontend in this config"));
                }
                let socket = TcpListener::from(fd);
                out.tcp.push(BoundSocket {
                    frontend,
                    configured,
                    local: socket.local_addr()?,
                    worker,
                    socket,
                });
            }
            ("udp", Some(worker)) => {
                // The `repeat`-th quic bind of this address in the config (keys count
                // repeats across frontends), which must be that frontend's.
                let group = quic
                    .iter()
                    .enumerate()
                    .filter(|(_, (_, a))| *a == configured)
                    .nth(repeat)
                    .filter(|(_, (f, _))| *f == frontend)
                    .map(|(g, _)| g)
                    .ok_or_else(|| bad(&label, "not a quic bind of that frontend in this config"))?;
                let socket = UdpSocket::from(fd);
                out.udp.push(BoundUdp {
                    frontend,
                    configured,
                    local: socket.local_addr()?,
                    worker,
                    group,
                    socket,
                });
            }
            _ => return Err(bad(&label, shape)),
        }
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
        let (mut table, plan1) = SocketTable::from_bound(listener::bind_all(&c1).unwrap(), Vec::new());
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
        let (table, plan) = SocketTable::from_bound(listener::bind_all(&c).unwrap(), Vec::new());
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
        let sockets = adopt(&c, received).unwrap().tcp;
        assert_eq!(sockets.iter().map(|s| s.worker).collect::<Vec<_>>(), [Some(0), Some(1)]);
        assert_eq!(sockets[0].local, table.local_addr("tcp:127.0.0.1:0#0").unwrap());
        let wrong = vec![("tcp:127.0.0.1:0#5 fe=0".to_string(), dup("tcp:127.0.0.1:0#0"))];
        assert!(adopt(&c, wrong).is_err());
        let wrong = vec![("tcp:10.0.0.1:80#0 fe=0".to_string(), dup("tcp:127.0.0.1:0#0"))];
        assert!(adopt(&c, wrong).is_err());
    }

    /// The labelled fds of `plan`, duplicated as the worker receives them.
    fn received(table: &SocketTable, plan: &Plan) -> Vec<(String, OwnedFd)> {
        table
            .labelled(plan)
            .unwrap()
            .into_iter()
            .map(|(label, fd)| (label, fd.try_clone_to_owned().unwrap()))
            .collect()
    }

    #[test]
    fn quic_sockets_are_kept_joined_handed_over_and_released() {
        let c1 = udp::tests::config(2, &[&["127.0.0.1:0"]]);
        let (mut table, plan1) =
            SocketTable::from_bound(listener::bind_all(&c1).unwrap(), udp::bind_quic(&c1).unwrap());
        let keys: Vec<&str> = plan1.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "tcp:127.0.0.1:0#0",
                "tcp:127.0.0.1:0#1",
                "udp:127.0.0.1:0#0",
                "udp:127.0.0.1:0#1"
            ]
        );
        let port = table.local_addr("udp:127.0.0.1:0#0").unwrap();
        assert_eq!(table.local_addr("udp:127.0.0.1:0#1"), Some(port));
        // Same config: same sockets, nothing new.
        assert_eq!(table.ensure(&c1).unwrap(), plan1);
        assert_eq!(table.len(), 4);
        // Three workers and a second quic frontend: one socket joins the first group, a new
        // group of three on a port of its own.
        let c2 = udp::tests::config(3, &[&["127.0.0.1:0"], &["127.0.0.1:0"]]);
        let plan2 = table.ensure(&c2).unwrap();
        assert_eq!(plan2.len(), 12);
        assert_eq!(table.local_addr("udp:127.0.0.1:0#2"), Some(port));
        let other = table.local_addr("udp:127.0.0.1:0#0~1").unwrap();
        assert_ne!(other, port);
        // The worker's view: groups and frontends from the config, in worker order.
        let adopted = adopt(&c2, received(&table, &plan2)).unwrap();
        assert_eq!(adopted.tcp.len(), 6);
        let udp: Vec<(usize, usize, usize, SocketAddr)> = adopted
            .udp
            .iter()
            .map(|s| (s.frontend, s.group, s.worker, s.local))
            .collect();
        assert_eq!(
            udp,
            [
                (0, 0, 0, port),
                (0, 0, 1, port),
                (0, 0, 2, port),
                (1, 1, 0, other),
                (1, 1, 1, other),
                (1, 1, 2, other)
            ]
        );
        // A label the config does not back is refused.
        let dup = |key: &str| -> OwnedFd { table.entries[key].socket.as_fd().try_clone_to_owned().unwrap() };
        for label in [
            "udp:127.0.0.1:0#0~2 fe=0",
            "udp:127.0.0.1:0#0~1 fe=0",
            "udp:127.0.0.1:0#shared fe=0",
        ] {
            let wrong = vec![(label.to_string(), dup("udp:127.0.0.1:0#0"))];
            assert!(adopt(&c2, wrong).is_err(), "{label}");
        }
        // Back to c1: the extra worker's socket and the second group go once unused.
        let plan3 = table.ensure(&c1).unwrap();
        let used: HashSet<&str> = plan3.iter().map(|(k, _)| k.as_str()).collect();
        let mut gone = table.retain(&used);
        gone.retain(|k| k.starts_with("udp:"));
        assert_eq!(
            gone,
            [
                "udp:127.0.0.1:0#0~1",
                "udp:127.0.0.1:0#1~1",
                "udp:127.0.0.1:0#2",
                "udp:127.0.0.1:0#2~1"
            ]
        );
        assert_eq!(table.local_addr("udp:127.0.0.1:0#0"), Some(port));
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
