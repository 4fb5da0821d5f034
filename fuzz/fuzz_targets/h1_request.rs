//! Arbitrary bytes as a request: parse, rewrite, track the body; whole vs split must agree.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::check(data, tollgate_fuzz::Target::Request));
