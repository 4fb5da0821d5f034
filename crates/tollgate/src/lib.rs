//! tollgate: a reverse proxy and load balancer.
//!
//! # Layout
//! Top to bottom; a module never imports one above it (docs/architecture.md, "Layers";
//! `tests/layers.rs` checks it).
//! - [`master`]: the master process (owns the sockets, desired state, reloads, the control
//!   socket, supervision) and the worker process side of the socket handoff.
//! - [`admin`]: the operator's client side of the runtime API (`tollgate ctl`).
//! - [`runtime`]: one current_thread tokio runtime per worker thread, `Running` (start,
//!   runtime commands, stop phases), the inbox loop, watchdog, process limits.
//! - `health`: active checks (one checker thread per process: tcp, http, agent; rise/fall)
//!   and what passive health (`error_limit`) hands over to them.
//! - `discover`: servers from DNS: host-named addresses re-resolved, backends filled from
//!   SRV records; one thread per process, changes published through the live model.
//! - `acme`: certificates ordered from an ACME CA (RFC 8555) and renewed; one thread per
//!   process, the challenges answered by the process's own listeners.
//! - `sharing`: limits shared across instances through Redis (`[shared]`): one thread per
//!   process pushes the stick tables' deltas and pulls the global totals every
//!   `sync_interval`; the data path never waits on it.
//! - `quic`: HTTP/3 over QUIC (`[frontend.quic]`): one quinn endpoint per worker thread on
//!   its own SO_REUSEPORT UDP socket, connection IDs naming the owning thread and
//!   generation, misrouted datagrams forwarded to their owner; request streams served by the
//!   HTTP/2 stream path.
//! - [`listener`]: binding (SO_REUSEPORT per worker, or one shared socket), accept loops,
//!   starting a session per connection.
//! - `proxy`: a client connection's life: pick a server, connect, relay; HTTP mode; HTTP/2
//!   clients (`h2front`); the per-stream record.
//! - [`tls`]: termination, SNI passthrough (ClientHello parsing), TLS to servers, kTLS.
//! - `ctx`: what a session works with: the worker context and what a generation's workers
//!   share, per-thread backend views, the HTTP server pool, inbox messages.
//! - `relay`: byte movers: endpoints, the pumps, splice pipes, lazy sockets, idle watchdog.
//! - `balance`: load-balancing algorithms behind one trait, registered by name.
//! - [`command`]: the typed command protocol of the control socket and the master ↔ worker
//!   channel (JSON in length-prefixed frames).
//! - `metrics`: per-thread frontend counters and backend timing histograms, and the
//!   snapshot a worker process answers a scrape with.
//! - `live`: the live model: backends and servers with stable ids and live state
//!   (admin/operational state, weights, connections, counters) shared by every worker.
//! - `limit`: rate and concurrency limits (`[[frontend.limit]]`): the stick tables shared by
//!   a generation's workers, the sliding-window math (sans-io), the decision.
//! - `budget`, `buffer`, [`stats`], `accesslog`, `background`: accept budgets, the per-worker
//!   copy-buffer pool charged against a byte budget, counters, access log lines and their
//!   writer thread, the stop-and-join handle of background threads.
//! - [`config`]: TOML text → validated immutable model (file:line:col errors), certificates
//!   and SNI patterns included. [`http`]: the sans-io HTTP/1.1 codec and HTTP/2 server
//!   codec. [`error`]: the one error type (kind, side, retryable). `ids`: stable backend and
//!   server ids. [`origin`]:
//!   small built-in HTTP origins for the embedded default config and tests. [`proxyproto`]:
//!   the sans-io PROXY protocol (v1, v2) parser and writer, and trusted-source CIDR lists.
//!
//! Items are `pub(crate)` unless they are library API: what the binary, the tests, the
//! benches and the fuzz targets use.
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub(crate) mod accesslog;
pub(crate) mod acme;
pub mod admin;
pub mod auth;
pub(crate) mod background;
pub(crate) mod balance;
pub(crate) mod budget;
pub(crate) mod buffer;
pub mod command;
pub mod config;
pub mod convert;
pub(crate) mod ctx;
pub(crate) mod discover;
pub mod error;
pub(crate) mod health;
pub mod http;
pub(crate) mod ids;
pub(crate) mod limit;
pub mod listener;
pub(crate) mod live;
pub mod master;
pub(crate) mod metrics;
pub mod origin;
pub(crate) mod proxy;
pub mod proxyproto;
pub mod quic;
pub(crate) mod relay;
pub mod runtime;
pub(crate) mod sharing;
pub mod stats;
pub mod tls;
