//! The operator's side of the runtime API: `tollgate ctl` turns arguments into commands of
//! the command protocol and renders the answers (a table for a person, JSON for scripts);
//! the admin HTTP endpoint (`[admin] bind`, `GET /metrics`) and its Prometheus text.

pub mod ctl;
pub mod http;
pub mod prometheus;
