//! Arbitrary bytes as a QUIC datagram's header (the destination connection ID tollgate
//! reads to steer it, and whether it is one of ours) and as a message between generations
//! (`quic::handover`): never a panic, and a message that decodes encodes back the same.
//! The QUIC and HTTP/3 layers themselves are quinn's and h3's.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tollgate::quic::fuzz_datagram(data);
});
