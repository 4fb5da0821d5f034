//! Registering a listening socket with tokio's reactor as an `AsyncFd`, so that accept(2)
//! can be called directly (tokio's own `TcpListener::accept` registers every accepted
//! socket, which the proxy wants to do only when a connection has to wait).
//!
//! `AsyncFd::register` is `unsafe` because tokio cannot know that the descriptor stays open
//! and unchanged for the `AsyncFd`'s life; for an owned `std::net::TcpListener` it does.

use std::io;
use std::net::TcpListener;

use tokio::io::unix::AsyncFd;

/// Registers `listener` (which must be non-blocking) for readiness with the current
/// runtime's reactor. Must be called inside a tokio runtime.
pub fn register_listener(listener: TcpListener) -> io::Result<AsyncFd<TcpListener>> {
    // SAFETY: `TcpListener` owns its descriptor: it stays open and `as_raw_fd` returns the
    // same descriptor until the listener (moved into the AsyncFd) is dropped or taken back.
    unsafe { AsyncFd::register(listener) }.map_err(io::Error::from)
}

/// Registers `fd` (an epoll instance, say) for read readiness with the current runtime's
/// reactor. Must be called inside a tokio runtime.
pub fn register_readable(fd: std::os::fd::OwnedFd) -> io::Result<AsyncFd<std::os::fd::OwnedFd>> {
    // SAFETY: `OwnedFd` owns its descriptor: it stays open and `as_raw_fd` returns the same
    // descriptor until the `OwnedFd` (moved into the AsyncFd) is dropped or taken back.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_after_readiness() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let addr = listener.local_addr().unwrap();
            let registered = register_listener(listener).unwrap();
            let _client = std::net::TcpStream::connect(addr).unwrap();
            let mut ready = registered.readable().await.unwrap();
            let accepted = ready.try_io(|l| l.get_ref().accept()).unwrap().unwrap();
            assert_eq!(accepted.1.ip(), addr.ip());
        });
    }
}
