//! tollgate: a reverse proxy and load balancer.
//!
//! # Layout
//! - [`admin`]: the operator's client side of the runtime API (`tollgate ctl`).
//! - [`config`]: TOML text → validated immutable model (file:line:col errors).
//! - [`runtime`]: one current_thread tokio runtime per worker thread, shutdown, limits.
//! - [`master`]: the master process (owns the sockets, reloads, supervises) and the worker
//!   process side of the socket handoff.
//! - [`listener`]: binding (SO_REUSEPORT per worker, or one shared socket), accept budgets.
//! - [`proxy`]: a client connection's life: pick a server, connect, relay.
//! - [`balance`]: load-balancing algorithms behind one trait, registered by name.
//! - [`live`]: the live model: backends and servers with stable ids and live state
//!   (admin/operational state, weights, connections, counters) shared by every worker.
//! - [`buffer`]: the per-worker copy-buffer pool charged against a byte budget.
//! - [`http`]: the sans-io HTTP/1.1 codec (heads, framing, rewriting).
//! - [`tls`]: TLS inspection (ClientHello parsing for SNI passthrough routing).
//! - [`origin`]: small built-in HTTP origins for the embedded default config and tests.
//! - [`command`]: the typed command protocol of the control socket and the master ↔ worker
//!   channel (JSON in length-prefixed frames).
//! - [`error`]: the one error type (kind, side, retryable).
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

pub mod admin;
pub(crate) mod balance;
pub(crate) mod budget;
pub(crate) mod buffer;
pub mod command;
pub mod config;
pub(crate) mod ctx;
pub mod error;
pub mod http;
pub(crate) mod ids;
pub mod listener;
pub(crate) mod live;
pub mod master;
pub mod origin;
pub(crate) mod proxy;
pub(crate) mod relay;
pub mod runtime;
pub mod stats;
pub mod tls;
