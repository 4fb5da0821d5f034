//! HPACK (RFC 7541): the request-side [`decoder`] with its dynamic table, the response-side
//! [`encoder`] (static table only, no Huffman), the [`huffman`] code and the [`table`]s.
//! Nothing here knows HTTP semantics: fields are bytes; `conn` validates them.

pub mod decoder;
pub mod encoder;
pub mod huffman;
pub mod table;

pub use decoder::{Decoder, FieldSink, HpackError};
