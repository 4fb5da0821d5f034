//! The operator's side of the runtime API: `tollgate ctl` turns arguments into commands of
//! the command protocol and renders the answers (a table for a person, JSON for scripts);
//! `tollgate explain` (what the proxy would do with one request, from the config alone);
//! the admin HTTP endpoint (`[admin] bind`, `GET /metrics`), its Prometheus text and its
//! live stats page.

pub mod ctl;
pub mod explain;
pub mod http;
pub mod prometheus;
pub mod show;
pub mod stats;
