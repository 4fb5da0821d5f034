//! Arbitrary bytes as a PROXY protocol header: never a panic; a header found is no longer
//! than the input, every shorter prefix of it asks for more, and writing it back parses to
//! the same header — up to what the writer promises: both addresses in one family, so an
//! IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) may come back as the IPv4 address it maps.
#![no_main]

use std::net::SocketAddr;

use tollgate::proxyproto::{Accept, Version, parse, write_v1, write_v2};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for accept in [Accept::V1, Accept::V2, Accept::Any] {
        let Ok(Some(p)) = parse(data, accept) else { continue };
        assert!(p.len <= data.len());
        let header = &data[..p.len];
        for n in 0..p.len {
            assert_eq!(parse(&header[..n], accept), Ok(None), "prefix {n} of {}", p.len);
        }
        let t = &p.header.tlvs;
        let short = |v: Option<usize>| v.is_none_or(|n| n <= 1024);
        if !short(t.alpn.as_ref().map(Vec::len)) || !short(t.authority.as_ref().map(String::len)) {
            continue; // the writer leaves out values that long
        }
        let mut again = Vec::new();
        match p.header.version {
            Version::V1 => write_v1(&mut again, p.header.addrs),
            Version::V2 => write_v2(&mut again, p.header.command, p.header.addrs, t),
        }
        let back = parse(&again, Accept::Any).expect("written header parses").expect("whole");
        assert_eq!(back.len, again.len());
        assert_eq!(back.header.version, p.header.version);
        assert_eq!(back.header.command, p.header.command);
        assert_eq!(back.header.tlvs, p.header.tlvs);
        let canonical = |addrs: Option<(SocketAddr, SocketAddr)>| {
            addrs.map(|(s, d)| {
                let c = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
                (c(s), c(d))
            })
        };
        assert_eq!(canonical(back.header.addrs), canonical(p.header.addrs));
    }
});
