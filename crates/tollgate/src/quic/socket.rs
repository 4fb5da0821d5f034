//! One worker thread's UDP socket as quinn sees it: quinn's own tokio socket (quinn-udp:
//! GSO, GRO, ECN and the packet-info cmsgs) with a look at every datagram before the
//! endpoint gets it, and a second input — datagrams the group's other threads read for
//! this thread's connections (`Mesh`).
//!
//! Invariant: a datagram whose destination CID names another live thread of this generation
//! never reaches this thread's endpoint (it does not know the connection and would answer
//! with a stateless reset, which kills it: NOTES on the kernel steering in
//! `tollgate_sys::reuseport`); it is queued to its owner, or dropped and counted when the
//! owner's queue is full. Datagrams of other generations or with CIDs nobody here issued go
//! to this endpoint, which starts handshakes for Initials and drops the rest.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use quinn::udp::{RecvMeta, Transmit, UdpSocketState};
use quinn::{AsyncUdpSocket, UdpPoller};
use tokio::io::Interest;
use tokio::sync::mpsc;

use super::cid::{self, TagKey};
use super::{Forwarded, Mesh};
use crate::stats::WorkerStats;

pub(crate) struct SteeringSocket {
    io: tokio::net::UdpSocket,
    state: UdpSocketState,
    thread: usize,
    generation: u8,
    group: usize,
    key: TagKey,
    mesh: Arc<Mesh>,
    /// Datagrams the other threads forwarded here (taken from the mesh once).
    forwarded: Mutex<mpsc::Receiver<Forwarded>>,
    stats: Arc<WorkerStats>,
    /// A message for another generation is put together here.
    scratch: Mutex<Vec<u8>>,
}

impl fmt::Debug for SteeringSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SteeringSocket")
            .field("thread", &self.thread)
            .field("group", &self.group)
            .finish()
    }
}

/// Where the parts of a steering socket come from.
pub(crate) struct Parts {
    pub socket: std::net::UdpSocket,
    pub thread: usize,
    pub generation: u64,
    pub group: usize,
    pub mesh: Arc<Mesh>,
    pub stats: Arc<WorkerStats>,
}

impl SteeringSocket {
    /// Must run inside the worker's runtime (the socket registers with its reactor).
    pub(crate) fn new(p: Parts) -> io::Result<Self> {
        let forwarded = p
            .mesh
            .take_inbox(p.group, p.thread)
            .ok_or_else(|| io::Error::other("quic socket group without an inbox for this thread"))?;
        Ok(SteeringSocket {
            state: UdpSocketState::new((&p.socket).into())?,
            io: tokio::net::UdpSocket::from_std(p.socket)?,
            thread: p.thread,
            generation: u8::try_from(p.generation % 8).unwrap_or(0),
            group: p.group,
            key: p.mesh.key.clone(),
            forwarded: Mutex::new(forwarded),
            mesh: p.mesh,
            stats: p.stats,
            scratch: Mutex::new(Vec::new()),
        })
    }

    /// Where a datagram goes: to this thread's endpoint, to another thread of this
    /// generation, or to an older generation's (a connection from before a reload).
    fn route(&self, datagram: &[u8]) -> Route {
        let Some((generation, thread)) = cid::destination(datagram).and_then(|c| self.key.owner(c)) else {
            return Route::Here;
        };
        if generation != self.generation {
            return if self.mesh.outbound.is_empty() {
                Route::Here
            } else {
                Route::Generation(generation, thread)
            };
        }
        if thread != self.thread && thread < self.mesh.workers() {
            Route::Thread(thread)
        } else {
            Route::Here
        }
    }

    /// Sends a datagram to an older generation's thread; `false` if it could not go (no
    /// such generation any more, or its pair is full).
    fn to_generation(&self, bits: u8, thread: usize, meta: &RecvMeta, data: &[u8]) -> bool {
        let Some(pair) = self.mesh.outbound.to(bits, thread) else {
            return false;
        };
        let Ok(mut msg) = self.scratch.lock() else { return false };
        super::handover::encode(self.group, meta, data, &mut msg).is_some() && pair.send(&msg).is_ok()
    }
}

enum Route {
    Here,
    Thread(usize),
    Generation(u8, usize),
}

struct Writable(Arc<SteeringSocket>);

impl fmt::Debug for Writable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Writable")
    }
}

impl UdpPoller for Writable {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // One sender per endpoint (its driver), so the socket's single send waker is enough.
        self.0.io.poll_send_ready(cx)
    }
}

impl AsyncUdpSocket for SteeringSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Writable(self))
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        self.io
            .try_io(Interest::WRITABLE, || self.state.send((&self.io).into(), transmit))?;
        let segments = match transmit.segment_size {
            Some(size) if size > 0 => transmit.contents.len().div_ceil(size),
            _ => 1,
        };
        self.stats.quic_datagrams_out.add(segments as u64);
        Ok(())
    }

    fn poll_recv(&self, cx: &mut Context<'_>, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta]) -> Poll<io::Result<usize>> {
        // Bounded: each round takes a forwarded datagram, or reads the socket once (or
        // waits for it), and returns unless every datagram read went to another thread.
        loop {
            // Forwarded datagrams first: they are late already.
            if let Ok(mut inbox) = self.forwarded.lock()
                && let Poll::Ready(Some(f)) = inbox.poll_recv(cx)
                && let (Some(buf), Some(m)) = (bufs.first_mut(), meta.first_mut())
            {
                let n = f.data.len().min(buf.len());
                buf[..n].copy_from_slice(&f.data[..n]);
                *m = f.meta;
                m.len = n;
                return Poll::Ready(Ok(1));
            }
            if self.mesh.is_handed_over() {
                // A newer generation reads the socket and forwards this one's datagrams.
                return Poll::Pending;
            }
            ready!(self.io.poll_recv_ready(cx))?;
            let Ok(n) = self
                .io
                .try_io(Interest::READABLE, || self.state.recv((&self.io).into(), bufs, meta))
            else {
                continue;
            };
            let mut kept = 0;
            for i in 0..n.min(meta.len()).min(bufs.len()) {
                let m = meta[i];
                let segments = if m.stride > 0 { m.len.div_ceil(m.stride) } else { 1 };
                self.stats.quic_datagrams_in.add(segments as u64);
                // A GRO batch shares one 4-tuple and, in practice, one connection: its
                // first segment decides.
                let first = bufs[i].get(..m.len.min(m.stride.max(1))).unwrap_or_default();
                let sent = match self.route(first) {
                    Route::Here => None,
                    Route::Thread(owner) => {
                        let data = Bytes::copy_from_slice(bufs[i].get(..m.len).unwrap_or_default());
                        Some(self.mesh.forward(self.group, owner, Forwarded { data, meta: m }))
                    }
                    Route::Generation(bits, owner) => {
                        let data = bufs[i].get(..m.len).unwrap_or_default();
                        Some(self.to_generation(bits, owner, &m, data))
                    }
                };
                if let Some(sent) = sent {
                    self.stats.quic_misrouted.add(segments as u64);
                    if !sent {
                        self.stats.quic_forward_dropped.add(segments as u64);
                    }
                    continue;
                }
                if kept != i {
                    let (dst, src) = bufs.split_at_mut(i);
                    if let (Some(d), Some(s)) = (dst.get_mut(kept), src.first()) {
                        let len = m.len.min(d.len()).min(s.len());
                        d[..len].copy_from_slice(&s[..len]);
                    }
                    meta[kept] = m;
                }
                kept += 1;
            }
            if kept > 0 {
                return Poll::Ready(Ok(kept));
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    fn may_fragment(&self) -> bool {
        self.state.may_fragment()
    }

    fn max_transmit_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.state.gro_segments()
    }
}
