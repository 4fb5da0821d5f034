//! UDP sockets for `[frontend.quic]` binds: one SO_REUSEPORT socket per worker thread and
//! address, bound in worker order (the kernel's steering program indexes the group's sockets
//! in bind order, so socket `i` must be worker `i`'s).
//!
//! Owns: binding a quic bind's group (`bind_quic` at start, `bind_group` / `join_group` for
//! the master's table on reload) and attaching the steering program
//! (`tollgate_sys::reuseport`) to it. The program sends a short-header datagram to the
//! socket its connection ID's thread bits name; where the kernel refuses it, one warning per
//! group, and the kernel's 4-tuple hash spreads datagrams (the `quic` layer forwards the
//! misrouted ones between threads).
//!
//! As for TCP, an address another socket holds is refused, never shared: a probe binds the
//! address without SO_REUSEPORT first, which the kernel refuses while any UDP socket is
//! bound there. No socket sets SO_REUSEADDR (for UDP it would let two sockets share the
//! address, and UDP has no TIME_WAIT to step over). Groups are numbered in config order
//! across frontends (`BoundUdp::group`).

use std::io;
use std::net::{SocketAddr, UdpSocket};

use socket2::{Domain, Protocol, Socket, Type};

use crate::config::Config;

/// One bound UDP socket of a quic bind, owned by one worker thread.
#[derive(Debug)]
pub struct BoundUdp {
    pub frontend: usize,
    /// The address as configured (port may be 0 in tests: then the group shares the port
    /// the first socket got).
    pub configured: SocketAddr,
    /// The address actually bound.
    pub local: SocketAddr,
    pub worker: usize,
    /// Which quic bind of the config this socket belongs to (config order, counting every
    /// frontend's `quic.bind` entries): the worker threads' sockets of one group forward
    /// misrouted datagrams to each other.
    pub group: usize,
    pub socket: UdpSocket,
}

impl BoundUdp {
    /// A stable name for handing sockets between processes: `udp:ADDR#WORKER`.
    pub fn key(&self) -> String {
        format!("udp:{}#{}", self.configured, self.worker)
    }
}

/// Socket buffers asked for (the kernel caps them at `net.core.rmem_max` / `wmem_max`): a
/// burst of datagrams waits here while the thread is busy, and a full buffer drops them.
const BUFFER_SIZE: usize = 4 << 20;

/// Every `[frontend.quic]` address of `config`, in config order: `workers` sockets each, in
/// worker order, with the steering program attached to each group.
pub fn bind_quic(config: &Config) -> io::Result<Vec<BoundUdp>> {
    let workers = config.global.workers.max(1);
    let mut out = Vec::new();
    for (group, (fe, frontend, addr)) in quic_binds(config).enumerate() {
        let cannot = |e: io::Error| super::cannot_listen(addr, &frontend.name, &e);
        probe_free(addr).map_err(cannot)?;
        let sockets = bind_group(addr, workers).map_err(cannot)?;
        if let Some(first) = sockets.first() {
            steer(first, &frontend.name, addr);
        }
        for (worker, socket) in sockets.into_iter().enumerate() {
            out.push(BoundUdp {
                frontend: fe,
                configured: addr,
                local: socket.local_addr()?,
                worker,
                group,
                socket,
            });
        }
    }
    Ok(out)
}

/// Every quic bind of `config` in config order (its position is its group):
/// `(frontend index, frontend, address)`.
pub(crate) fn quic_binds(config: &Config) -> impl Iterator<Item = (usize, &crate::config::Frontend, SocketAddr)> + '_ {
    config.frontends.iter().enumerate().flat_map(|(fe, frontend)| {
        frontend
            .quic
            .iter()
            .flat_map(|q| q.binds.iter())
            .map(move |&addr| (fe, frontend, addr))
    })
}

/// Fails with `AddrInUse` if a UDP socket is bound on `addr` (any process): the probe binds
/// without SO_REUSEPORT and is closed at once. Port 0 needs no probe.
pub(crate) fn probe_free(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let probe = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        probe.set_only_v6(true)?;
    }
    probe.bind(&addr.into())
}

/// `n` SO_REUSEPORT UDP sockets on `addr`, in worker order. With port 0 the first picks the
/// port and the others join it.
pub(crate) fn bind_group(addr: SocketAddr, n: usize) -> io::Result<Vec<UdpSocket>> {
    let first = join_group(addr)?;
    let actual = first.local_addr()?;
    let mut group = vec![first];
    for _ in 1..n {
        group.push(join_group(actual)?);
    }
    Ok(group)
}

/// One SO_REUSEPORT UDP socket on `addr` (joining the group there, if any): nonblocking,
/// IPV6_V6ONLY for v6 addresses so v4 and v6 binds can coexist, 4 MiB buffers if the
/// kernel grants them.
pub(crate) fn join_group(addr: SocketAddr) -> io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    // Best effort: the kernel caps them silently, an unprivileged process cannot go higher.
    let _ = socket.set_recv_buffer_size(BUFFER_SIZE);
    let _ = socket.set_send_buffer_size(BUFFER_SIZE);
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// Attaches the steering program to `first`'s group; a refusal is one warning and no error
/// (datagrams are then spread by the kernel's hash and forwarded between threads).
pub(crate) fn steer(first: &UdpSocket, frontend: &str, addr: SocketAddr) {
    if let Err(e) = tollgate_sys::reuseport::attach_quic_steering(first) {
        tracing::warn!(
            frontend = %frontend, %addr,
            "kernel steering unavailable: {e}; misrouted datagrams are forwarded between threads"
        );
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    /// `workers` threads; a TLS http frontend per entry of `quic`, on TCP 127.0.0.1:0, with
    /// those quic binds.
    pub(crate) fn config(workers: usize, quic: &[&[&str]]) -> Config {
        let mut text = format!("[global]\nworkers = {workers}\n");
        for (i, binds) in quic.iter().enumerate() {
            let binds: Vec<String> = binds.iter().map(|b| format!("\"{b}\"")).collect();
            text += &format!(
                "[[frontend]]\nname = \"fe{i}\"\nbind = [\"127.0.0.1:0\"]\nmode = \"http\"\ndefault_backend = \"be\"\n\
                 [frontend.tls]\n[[frontend.tls.cert]]\ncert = \"{cert}\"\nkey = \"{key}\"\n\
                 [frontend.quic]\nbind = [{}]\n",
                binds.join(", "),
                cert = cert().0,
                key = cert().1,
            );
        }
        text += "[[backend]]\nname = \"be\"\nmode = \"http\"\n[[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:9\"\n";
        crate::config::parse(&text, "t.toml").unwrap()
    }

    /// A self-signed certificate and key, written once per test process.
    fn cert() -> &'static (String, String) {
        static FILES: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
        FILES.get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("tollgate-udp-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = rcgen::CertificateParams::new(vec!["a.example".into()])
                .unwrap()
                .self_signed(&key)
                .unwrap();
            let (c, k) = (dir.join("a.crt"), dir.join("a.key"));
            std::fs::write(&c, cert.pem()).unwrap();
            std::fs::write(&k, key.serialize_pem()).unwrap();
            (c.display().to_string(), k.display().to_string())
        })
    }

    #[test]
    fn groups_count_across_frontends_in_worker_order() {
        let c = config(3, &[&["127.0.0.1:0", "[::1]:0"], &["127.0.0.1:0"]]);
        let v6 = std::net::UdpSocket::bind("[::1]:0").is_ok();
        let c = if v6 {
            c
        } else {
            config(3, &[&["127.0.0.1:0", "127.0.0.1:0"], &["127.0.0.1:0"]])
        };
        let bound = bind_quic(&c).unwrap();
        assert_eq!(bound.len(), 9);
        let shape: Vec<(usize, usize, usize)> = bound.iter().map(|b| (b.frontend, b.group, b.worker)).collect();
        assert_eq!(
            shape,
            [
                (0, 0, 0),
                (0, 0, 1),
                (0, 0, 2),
                (0, 1, 0),
                (0, 1, 1),
                (0, 1, 2),
                (1, 2, 0),
                (1, 2, 1),
                (1, 2, 2)
            ]
        );
        for g in bound.chunks(3) {
            assert_ne!(g[0].local.port(), 0);
            assert!(g.iter().all(|b| b.local == g[0].local), "{g:?}");
            assert!(
                g.iter()
                    .all(|b| b.key() == format!("udp:{}#{}", b.configured, b.worker))
            );
        }
        assert_ne!(bound[0].local, bound[6].local);
    }

    #[test]
    fn an_address_in_use_is_refused_with_the_frontend_named() {
        let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let e = bind_quic(&config(2, &[&[addr.as_str()]])).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert_eq!(
            e.to_string(),
            format!("cannot listen on {addr} (frontend \"fe0\"): address already in use")
        );
        // A reuseport group of another program is no different.
        drop(taken);
        let theirs = bind_group(addr.parse().unwrap(), 1).unwrap();
        assert!(bind_quic(&config(1, &[&[addr.as_str()]])).is_err());
        drop(theirs);
    }

    #[test]
    fn a_tcp_bind_on_the_same_port_is_no_conflict() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = tcp.local_addr().unwrap().to_string();
        let bound = bind_quic(&config(2, &[&[addr.as_str()]])).unwrap();
        assert_eq!(bound[1].local, tcp.local_addr().unwrap());
    }
}
