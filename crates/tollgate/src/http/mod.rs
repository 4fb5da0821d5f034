//! HTTP protocol codecs, sans-io: they see bytes and return decisions, never touch a socket.
//!
//! - [`h1`]: HTTP/1.1 head parsing, body framing (validate and delimit, never de-chunk) and head
//!   rewriting for forwarding.
//! - [`cookie`]: finding, stripping and recognising cookies in `Cookie` / `Set-Cookie` fields.
//! - [`rewrite`]: what a matched route changes: templates, header edits, path rewrites
//!   ([`path_regex`]: their regexes, searched with per-thread caches).
//! - [`h2`]: a sans-io HTTP/2 server connection (frames, HPACK, streams, flow control, flood
//!   budgets): bytes in, events and bytes out; `proxy/h2front` serves clients with it.
//! - [`host`]: what a `Host` / `:authority` value may hold, and when two name the same
//!   place (both codecs' callers use it).
//! - [`normalize`]: paths and hosts as routes match them (RFC 3986 §6.2.2: dot segments,
//!   duplicate slashes, percent-encoded unreserved bytes; a host's case and trailing dot).
//! - [`request_id`]: a request's ID, generated (UUIDv7) or judged when a client sent one.
//! - `status`: reason phrases for the statuses tollgate writes itself.

pub mod compress;
pub mod cookie;
pub mod h1;
pub mod h2;
pub mod host;
pub mod normalize;
pub mod path_regex;
pub mod request_id;
pub mod rewrite;
pub(crate) mod status;
pub mod trace;
