//! TCP mode: connect to a server and relay bytes both ways.
//!
//! Each direction borrows a pooled buffer only while data is in flight: wait until the source
//! is readable, take a buffer, read and write until the source would block, give the buffer
//! back. EOF in one direction becomes shutdown(Write) on the other (half-close); the session
//! ends when both directions are done, on the first error, or when the idle watchdog fires.

use std::rc::Rc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};

use super::idle::{self, Progress};
use crate::buffer::BufferPool;
use crate::error::{Error, ErrorKind, Side};
use crate::runtime::stats::Counter;
use crate::runtime::worker::WorkerCtx;

pub async fn serve(ctx: &Rc<WorkerCtx>, frontend: usize, mut client: TcpStream) -> Result<(), Error> {
    let config = &ctx.shared.config;
    let backend = config
        .frontends
        .get(frontend)
        .and_then(|f| f.default_backend)
        .ok_or_else(|| Error::new(ErrorKind::NoServer, Side::Internal, "frontend has no backend"))?;
    let (mut server, _slot) = super::connect::connect(ctx, backend).await?;
    let idle = config.timeouts.client.min(config.timeouts.server);
    relay(ctx, &mut client, &mut server, idle).await
}

/// Relays until both directions reached EOF, one failed, or nothing moved for `idle`.
pub async fn relay(
    ctx: &WorkerCtx,
    client: &mut TcpStream,
    server: &mut TcpStream,
    idle: std::time::Duration,
) -> Result<(), Error> {
    let progress = Progress::default();
    let (client_rx, client_tx) = client.split();
    let (server_rx, server_tx) = server.split();
    let upstream = pump(
        client_rx,
        server_tx,
        &ctx.buffers,
        &progress,
        &ctx.stats.bytes_to_server,
        Side::Front,
    );
    let downstream = pump(
        server_rx,
        client_tx,
        &ctx.buffers,
        &progress,
        &ctx.stats.bytes_to_client,
        Side::Back,
    );
    tokio::select! {
        done = async { tokio::try_join!(upstream, downstream) } => done.map(|_| ()),
        _ = idle::watchdog(&progress, idle) => {
            ctx.stats.idle_timeouts.add(1);
            Err(Error::new(ErrorKind::IdleTimeout, Side::Front, format!("no data either way for {idle:?}")))
        }
    }
}

/// Moves bytes from `src` (on side `from`) to `dst` until EOF, then half-closes `dst`.
async fn pump(
    src: ReadHalf<'_>,
    mut dst: WriteHalf<'_>,
    pool: &Rc<BufferPool>,
    progress: &Progress,
    counter: &Counter,
    from: Side,
) -> Result<(), Error> {
    let to = if from == Side::Front { Side::Back } else { Side::Front };
    loop {
        src.readable().await.map_err(|e| Error::io(from, "wait readable", e))?;
        let mut buf = pool.get().await;
        loop {
            match src.try_read(&mut buf) {
                Ok(0) => {
                    drop(buf);
                    // The peer may already be gone; its own direction reports that.
                    let _ = dst.shutdown().await;
                    return Ok(());
                }
                Ok(n) => {
                    let chunk = buf.get(..n).unwrap_or_default();
                    dst.write_all(chunk).await.map_err(|e| Error::io(to, "write", e))?;
                    progress.moved(n);
                    counter.add(n as u64);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(Error::io(from, "read", e)),
            }
        }
    }
}
