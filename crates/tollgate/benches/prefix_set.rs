//! Source-address lookup cost (issue 15): a `PrefixSet` of 100,000 random blocks (IPv4 /16
//! to /32 and IPv6 /16 to /128, half each), asked for an address inside a block (hit) and
//! one outside every block (miss), per family. The goal: well under 1 µs per lookup.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use criterion::{Criterion, criterion_group, criterion_main};
use tollgate::config::prefix_set::PrefixSet;
use tollgate::config::route::Cidr;

/// xorshift64*: a fixed seed keeps runs comparable without a random-number dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn blocks(n: usize, rng: &mut Rng) -> Vec<Cidr> {
    (0..n)
        .map(|i| {
            if i % 2 == 0 {
                // Inside 1.0.0.0/8..=126.0.0.0/8, so 200.0.0.1 is a miss by construction.
                let a = (rng.next() as u32 % (126 << 24)) + (1 << 24);
                let len = 16 + (rng.next() % 17) as u32;
                let mask = u32::MAX << (32 - len);
                Cidr::parse(&format!("{}/{len}", Ipv4Addr::from(a & mask))).unwrap()
            } else {
                // Inside 2000::/4, so fd00::1 is a miss.
                let a = (u128::from(rng.next()) << 64 | u128::from(rng.next())) >> 4 | (0x2u128 << 124);
                let len = 16 + (rng.next() % 113) as u32;
                let mask = u128::MAX << (128 - len);
                Cidr::parse(&format!("{}/{len}", Ipv6Addr::from(a & mask))).unwrap()
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let written = blocks(100_000, &mut rng);
    let hit_v4 = IpAddr::from(Ipv4Addr::from(written[5000].range().0 as u32));
    let hit_v6 = IpAddr::from(Ipv6Addr::from(written[5001].range().1));
    let set = PrefixSet::new(written);
    let miss_v4: IpAddr = "200.0.0.1".parse().unwrap();
    let miss_v6: IpAddr = "fd00::1".parse().unwrap();
    assert!(set.contains(hit_v4) && set.contains(hit_v6));
    assert!(!set.contains(miss_v4) && !set.contains(miss_v6));
    let mut g = c.benchmark_group("prefix_set_100k");
    for (name, ip) in [
        ("v4_hit", hit_v4),
        ("v4_miss", miss_v4),
        ("v6_hit", hit_v6),
        ("v6_miss", miss_v6),
    ] {
        g.bench_function(name, |b| b.iter(|| black_box(&set).contains(black_box(ip))));
    }
    // Addresses spread over the space defeat the branch predictor and the cache.
    let spread: Vec<IpAddr> = (0..4096)
        .map(|i| {
            let r = rng.next();
            if i % 2 == 0 {
                IpAddr::from(Ipv4Addr::from(r as u32))
            } else {
                IpAddr::from(Ipv6Addr::from((u128::from(r) << 64) | u128::from(rng.next())))
            }
        })
        .collect();
    g.bench_function("random_mix", |b| {
        let mut i = 0usize;
        b.iter(|| {
            i = (i + 1) & 4095;
            black_box(&set).contains(black_box(spread[i]))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
