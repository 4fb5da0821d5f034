#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::net::{IpAddr, SocketAddr};

use proptest::prelude::*;

use super::*;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn v1_tcp4_and_the_bytes_after_it() {
    let buf = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET / HTTP/1.1\r\n";
    let p = parse(buf, Accept::V1).unwrap().unwrap();
    assert_eq!(p.len, 45);
    assert_eq!(&buf[p.len..p.len + 3], b"GET");
    assert_eq!(
        p.header.addrs,
        Some((addr("192.0.2.1:56324"), addr("198.51.100.2:443")))
    );
    assert_eq!(p.header.command, Command::Proxy);
}

#[test]
fn v1_tcp6_unknown_and_every_prefix_asks_for_more() {
    let line = b"PROXY TCP6 2001:db8::1 2001:db8::2 1 65535\r\n";
    for n in 0..line.len() {
        assert_eq!(parse(&line[..n], Accept::Any), Ok(None), "prefix of {n}");
    }
    let p = parse(line, Accept::Any).unwrap().unwrap();
    assert_eq!(p.header.addrs.unwrap().0, addr("[2001:db8::1]:1"));
    let p = parse(b"PROXY UNKNOWN\r\n", Accept::V1).unwrap().unwrap();
    assert_eq!((p.len, p.header.addrs), (15, None));
    let p = parse(b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\nX", Accept::V1)
        .unwrap()
        .unwrap();
    assert_eq!(p.len, 35);
}

#[test]
fn v1_refusals() {
    let bad: &[&[u8]] = &[
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
        b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
        b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",
        b"PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
    ];
    for b in bad {
        assert!(
            matches!(parse(b, Accept::V1), Err(ParseError::Malformed(_))),
            "{:?}",
            String::from_utf8_lossy(b)
        );
    }
    assert_eq!(parse(&[b'P'; 2][..], Accept::V1), Err(ParseError::NotProxy));
    assert_eq!(parse(b"GET / HTTP/1.1\r\n", Accept::Any), Err(ParseError::NotProxy));
    assert_eq!(parse(b"\x16\x03\x01", Accept::Any), Err(ParseError::NotProxy));
    let mut long = b"PROXY TCP4 ".to_vec();
    long.resize(V1_MAX_LEN, b'1');
    assert_eq!(parse(&long, Accept::V1), Err(ParseError::TooLong));
    // The version not accepted reads as no header at all.
    assert_eq!(parse(b"PROXY UNKNOWN\r\n", Accept::V2), Err(ParseError::NotProxy));
    assert_eq!(parse(&V2_SIGNATURE, Accept::V1), Err(ParseError::NotProxy));
}

#[test]
fn v2_with_tlvs_roundtrip_and_exact_length() {
    let tlvs = Tlvs {
        alpn: Some(b"h2".to_vec()),
        authority: Some("app.example".into()),
        unique_id: Some(vec![7; 16]),
        ssl: Some(Ssl {
            client: tlv::CLIENT_SSL,
            verify: 0,
            version: Some("TLSv1.3".into()),
        }),
    };
    let addrs = Some((addr("[2001:db8::1]:40000"), addr("[2001:db8::2]:443")));
    let mut buf = Vec::new();
    write_v2(&mut buf, Command::Proxy, addrs, &tlvs);
    let len = buf.len();
    buf.extend_from_slice(b"\x16\x03\x01rest");
    let p = parse(&buf, Accept::V2).unwrap().unwrap();
    assert_eq!(p.len, len);
    assert_eq!(p.header.addrs, addrs);
    assert_eq!(p.header.tlvs, tlvs);
    for n in 0..len {
        assert_eq!(parse(&buf[..n], Accept::Any), Ok(None), "prefix of {n}");
    }
}

#[test]
fn v2_local_unspec_and_mixed_families() {
    let mut buf = Vec::new();
    write_v2(&mut buf, Command::Local, None, &Tlvs::default());
    assert_eq!(buf.len(), 16);
    let p = parse(&buf, Accept::Any).unwrap().unwrap();
    assert_eq!((p.header.command, p.header.addrs), (Command::Local, None));
    // An IPv4 client reaching an IPv6 listener: both sent as IPv6.
    let mut buf = Vec::new();
    write_v2(
        &mut buf,
        Command::Proxy,
        Some((addr("192.0.2.1:1"), addr("[::1]:2"))),
        &Tlvs::default(),
    );
    assert_eq!(buf[13], 0x21);
    let mut line = Vec::new();
    write_v1(&mut line, Some((addr("[::ffff:192.0.2.1]:1"), addr("192.0.2.2:2"))));
    assert_eq!(line, b"PROXY TCP4 192.0.2.1 192.0.2.2 1 2\r\n");
}

#[test]
fn v2_refusals() {
    let mut good = Vec::new();
    write_v2(
        &mut good,
        Command::Proxy,
        Some((addr("192.0.2.1:1"), addr("192.0.2.2:2"))),
        &Tlvs::default(),
    );
    let with = |at: usize, v: u8| {
        let mut b = good.clone();
        b[at] = v;
        b
    };
    assert!(matches!(
        parse(&with(12, 0x11), Accept::V2),
        Err(ParseError::Malformed(_))
    ));
    assert!(matches!(
        parse(&with(12, 0x22), Accept::V2),
        Err(ParseError::Malformed(_))
    ));
    assert!(matches!(
        parse(&with(13, 0x12), Accept::V2),
        Err(ParseError::Malformed(_))
    ));
    assert!(matches!(
        parse(&with(13, 0x41), Accept::V2),
        Err(ParseError::Malformed(_))
    ));
    // Declared shorter than its addresses.
    assert!(matches!(parse(&with(15, 4), Accept::V2), Err(ParseError::Malformed(_))));
    // A TLV running past the end.
    let mut b = good.clone();
    b.extend_from_slice(&[tlv::AUTHORITY, 0, 9, b'x']);
    b[15] += 4;
    assert!(matches!(parse(&b, Accept::V2), Err(ParseError::Malformed(_))));
    // Oversized: refused from the fixed part alone, before the rest arrives.
    let b = with(14, 0x10);
    assert_eq!(parse(&b[..16], Accept::V2), Err(ParseError::TooLong));
    assert!(matches!(parse(&with(3, b'x'), Accept::V2), Err(ParseError::NotProxy)));
}

#[test]
fn cidrs() {
    let c = Cidr::parse("10.0.0.0/8").unwrap();
    assert!(c.contains("10.1.2.3".parse().unwrap()));
    assert!(c.contains("::ffff:10.1.2.3".parse().unwrap()));
    assert!(!c.contains("11.0.0.1".parse().unwrap()));
    assert!(!c.contains("::1".parse().unwrap()));
    let one = Cidr::parse("::1").unwrap();
    assert!(one.contains("::1".parse().unwrap()));
    assert_eq!(one.to_string(), "::1/128");
    assert!(
        Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("203.0.113.9".parse().unwrap())
    );
    assert!(Cidr::parse("::/0").unwrap().contains("2001:db8::1".parse().unwrap()));
    for bad in ["10.0.0.1/8", "10.0.0.0/33", "::/129", "x", "10.0.0.0/", "10.0.0.0/+8"] {
        assert!(Cidr::parse(bad).is_err(), "{bad}");
    }
}

fn any_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::new(IpAddr::from(ip), p)),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, p)| SocketAddr::new(IpAddr::from(ip), p)),
    ]
}

fn any_tlvs() -> impl Strategy<Value = Tlvs> {
    (
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
        proptest::option::of("[a-z0-9.-]{0,40}"),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..=128)),
        proptest::option::of((any::<u8>(), any::<u32>(), proptest::option::of("TLSv1\\.[0-3]"))),
    )
        .prop_map(|(alpn, authority, unique_id, ssl)| Tlvs {
            alpn,
            authority,
            unique_id,
            ssl: ssl.map(|(client, verify, version)| Ssl {
                client,
                verify,
                version,
            }),
        })
}

/// What the writer makes of the addresses (one family for both).
fn as_sent(src: SocketAddr, dst: SocketAddr) -> (SocketAddr, SocketAddr) {
    let mut b = Vec::new();
    write_v1(&mut b, Some((src, dst)));
    parse(&b, Accept::V1).unwrap().unwrap().header.addrs.unwrap()
}

proptest! {
    #[test]
    fn random_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..300), accept in 0u8..3) {
        let accept = [Accept::V1, Accept::V2, Accept::Any][usize::from(accept)];
        if let Ok(Some(p)) = parse(&buf, accept) {
            prop_assert!(p.len <= buf.len());
        }
    }

    #[test]
    fn signature_then_random_bytes_never_panic(rest in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut buf = V2_SIGNATURE.to_vec();
        buf.extend_from_slice(&rest);
        if let Ok(Some(p)) = parse(&buf, Accept::Any) {
            prop_assert!(p.len <= buf.len() && p.len <= V2_MAX_LEN);
        }
    }

    #[test]
    fn v2_roundtrip(src in any_addr(), dst in any_addr(), tlvs in any_tlvs(), local in any::<bool>(),
                    tail in proptest::collection::vec(any::<u8>(), 0..8)) {
        let command = if local { Command::Local } else { Command::Proxy };
        let mut buf = Vec::new();
        write_v2(&mut buf, command, Some((src, dst)), &tlvs);
        let len = buf.len();
        buf.extend_from_slice(&tail);
        let p = parse(&buf, Accept::Any).unwrap().unwrap();
        prop_assert_eq!(p.len, len);
        prop_assert_eq!(p.header.command, command);
        prop_assert_eq!(p.header.tlvs, tlvs);
        let expected = if local { None } else { Some(as_sent(src, dst)) };
        prop_assert_eq!(p.header.addrs, expected);
        if let Some((s, _)) = expected {
            prop_assert_eq!(cidr::canonical(s.ip()), cidr::canonical(src.ip()));
        }
    }

    #[test]
    fn v1_roundtrip(src in any_addr(), dst in any_addr(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
        let mut buf = Vec::new();
        write_v1(&mut buf, Some((src, dst)));
        let len = buf.len();
        prop_assert!(len <= V1_MAX_LEN);
        buf.extend_from_slice(&tail);
        let p = parse(&buf, Accept::Any).unwrap().unwrap();
        prop_assert_eq!(p.len, len);
        let (s, d) = p.header.addrs.unwrap();
        prop_assert_eq!((cidr::canonical(s.ip()), s.port()), (cidr::canonical(src.ip()), src.port()));
        prop_assert_eq!((cidr::canonical(d.ip()), d.port()), (cidr::canonical(dst.ip()), dst.port()));
    }
}

/// What the fuzz target found (fuzz/regressions/proxy-header-mapped-v6): a v2 header whose
/// addresses are IPv4-mapped IPv6 parses as IPv6, as sent; written back it goes out as IPv4
/// (one family, IPv4 when both are), and it parses to the same addresses in canonical form.
/// The writer's promise, which the fuzz property now states.
#[test]
fn ipv4_mapped_v2_addresses_round_trip_in_canonical_form() {
    let mut buf = V2_SIGNATURE.to_vec();
    buf.extend_from_slice(&[0x21, 0x21, 0, 36]); // v2 PROXY, TCP over IPv6, 36 bytes
    let src: std::net::Ipv6Addr = "::ffff:255.255.255.255".parse().unwrap();
    let dst: std::net::Ipv6Addr = "::ffff:192.0.2.1".parse().unwrap();
    buf.extend_from_slice(&src.octets());
    buf.extend_from_slice(&dst.octets());
    buf.extend_from_slice(&65405u16.to_be_bytes());
    buf.extend_from_slice(&443u16.to_be_bytes());
    let p = parse(&buf, Accept::V2).unwrap().unwrap();
    assert_eq!(
        p.header.addrs,
        Some((addr("[::ffff:255.255.255.255]:65405"), addr("[::ffff:192.0.2.1]:443")))
    );
    let mut again = Vec::new();
    write_v2(&mut again, p.header.command, p.header.addrs, &p.header.tlvs);
    let back = parse(&again, Accept::Any).unwrap().unwrap();
    assert_eq!(
        back.header.addrs,
        Some((addr("255.255.255.255:65405"), addr("192.0.2.1:443"))),
        "written as IPv4"
    );
    let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    let (s, d) = p.header.addrs.unwrap();
    assert_eq!(back.header.addrs, Some((canonical(s), canonical(d))));
}
