//! HTTP protocol codecs, sans-io: they see bytes and return decisions, never touch a socket.
//!
//! - [`h1`]: HTTP/1.1 head parsing, body framing (validate and delimit, never de-chunk) and head
//!   rewriting for forwarding.
//! - [`cookie`]: finding, stripping and recognising cookies in `Cookie` / `Set-Cookie` fields.
//! - `status`: reason phrases for the statuses tollgate writes itself.

pub mod cookie;
pub mod h1;
pub(crate) mod status;
