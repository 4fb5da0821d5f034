//! UDP sockets for `[frontend.quic]` binds: one SO_REUSEPORT socket per worker thread and
//! address, bound in worker order (the kernel's steering program indexes the group's sockets
//! in bind order, so socket `i` must be worker `i`'s).

use std::net::{SocketAddr, UdpSocket};

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
