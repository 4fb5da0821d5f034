//! tollgate-sys: every `unsafe` block of tollgate lives here, each with a `// SAFETY:` line.
//!
//! The product crate `tollgate` is `#![forbid(unsafe_code)]`; what it needs from the kernel
//! beyond what tokio, socket2 and rustix expose safely is wrapped here behind safe functions.
//!
//! # Layout
//! One module per concern; each module's doc says what it owns.
//!
//! - [`splice`]: pipes and `splice(2)` for zero-copy TCP relaying (safe, via rustix).
//! - [`fdpass`]: `SCM_RIGHTS` file-descriptor passing over Unix stream sockets, and the
//!   framing used by the master process to hand listening sockets to workers.
//! - [`cputime`]: per-thread CPU-time clocks a watchdog thread can read for *other* threads.
//! - [`sockopt`]: socket options socket2 lacks: `TCP_ULP` and the kernel-TLS key install.
//! - [`affinity`]: pinning threads to CPUs.
//! - [`alloc_count`]: a counting global allocator for allocation-per-request benchmarks.
//! - [`allocator`]: the upkeep of the binary's allocator (mimalloc): handing freed pages back.
//! - [`reactor`]: registering a listening socket with tokio as an `AsyncFd`.
//! - [`credentials`]: user and group lookups (NSS) and a worker's privilege drop.
//! - [`reuseport`]: the classic BPF program that steers QUIC datagrams to the worker
//!   thread named in their connection ID (`SO_ATTACH_REUSEPORT_CBPF`).
//!
//! Only [`cputime`], [`sockopt`], [`alloc_count`], [`allocator`], [`reactor`], [`credentials`] and [`reuseport`] contain `unsafe` blocks; everything else
//! goes through rustix's safe API.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod affinity;
pub mod alloc_count;
pub mod allocator;
pub mod cputime;
pub mod credentials;
pub mod fdpass;
pub mod reactor;
pub mod reuseport;
pub mod sockopt;
pub mod splice;
