//! Sans-io HTTP/2 server connection (RFC 9113) with its HPACK codec (RFC 7541).

pub mod hpack;
