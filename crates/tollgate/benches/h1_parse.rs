//! Benchmarks for the HTTP/1 codec: head parsing (request and response) and the steady-state
//! parse + rewrite path of a keep-alive request. Before the criterion runs, `main` counts heap
//! allocations over that steady-state path with a counting global allocator and prints them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group};
use tollgate::http::h1::{
    BodyFraming, BodyTracker, HeadEdits, HeadScratch, Limits, Method, Side, parse_request_head, parse_response_head,
    write_request_head,
};

#[global_allocator]
static GLOBAL: tollgate_sys::alloc_count::CountingAlloc = tollgate_sys::alloc_count::CountingAlloc;

/// A typical browser-ish request head: 9 header fields.
const REQUEST: &[u8] = b"GET /api/v1/users/12345 HTTP/1.1\r\n\
Host: api.example.com\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0\r\n\
Accept: application/json, text/plain, */*\r\n\
Accept-Language: en-US,en;q=0.5\r\n\
Accept-Encoding: gzip, deflate, br\r\n\
Connection: keep-alive\r\n\
Cookie: session=abc123\r\n\
Referer: https://example.com/\r\n\
X-Request-Id: 7f9c2ba4e88f827\r\n\r\n";

const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\n\
Date: Sun, 29 Nov 2026 12:00:00 GMT\r\n\
Content-Type: application/json; charset=utf-8\r\n\
Content-Length: 1234\r\n\
Cache-Control: private, max-age=0\r\n\
Vary: Accept-Encoding\r\n\
Server: origin\r\n\r\n";

/// One keep-alive request: parse, rewrite with X-Forwarded-For, track an empty body, reclaim.
fn steady_state(scratch: &mut HeadScratch, out: &mut Vec<u8>, limits: &Limits, edits: &HeadEdits) -> usize {
    out.clear();
    let head = parse_request_head(black_box(REQUEST), limits, scratch)
        .unwrap()
        .unwrap();
    write_request_head(&head, REQUEST, edits, out);
    let mut body = BodyTracker::new(head.body, Side::Request);
    let p = body.advance(&[]).unwrap();
    assert!(p.done && head.body == BodyFraming::None);
    head.reclaim(scratch);
    out.len()
}

fn count_allocations() {
    let limits = Limits::default();
    let edits = HeadEdits {
        x_forwarded_for: Some([192, 0, 2, 1].into()),
        ..HeadEdits::default()
    };
    let mut scratch = HeadScratch::new();
    let mut out = Vec::with_capacity(1024);
    steady_state(&mut scratch, &mut out, &limits, &edits);
    const N: u64 = 10_000;
    let before = tollgate_sys::alloc_count::allocations();
    for _ in 0..N {
        black_box(steady_state(&mut scratch, &mut out, &limits, &edits));
    }
    let allocs = tollgate_sys::alloc_count::allocations() - before;
    println!(
        "h1 steady state (parse + rewrite + body tracker, {}-byte request head): {allocs} allocations in {N} requests ({} per request)",
        REQUEST.len(),
        allocs as f64 / N as f64
    );
}

fn benches(c: &mut Criterion) {
    let limits = Limits::default();
    let mut scratch = HeadScratch::new();
    c.bench_function(&format!("parse_request_head/{}B_9_headers", REQUEST.len()), |b| {
        b.iter(|| {
            let h = parse_request_head(black_box(REQUEST), &limits, &mut scratch)
                .unwrap()
                .unwrap();
            let n = h.head_len;
            h.reclaim(&mut scratch);
            n
        })
    });
    c.bench_function(&format!("parse_response_head/{}B_6_headers", RESPONSE.len()), |b| {
        b.iter(|| {
            let h = parse_response_head(black_box(RESPONSE), &limits, Method::Get, &mut scratch)
                .unwrap()
                .unwrap();
            let n = h.head_len;
            h.reclaim(&mut scratch);
            n
        })
    });
    let edits = HeadEdits {
        x_forwarded_for: Some([192, 0, 2, 1].into()),
        ..HeadEdits::default()
    };
    let mut out = Vec::with_capacity(1024);
    c.bench_function("parse_and_rewrite_request", |b| {
        b.iter(|| steady_state(&mut scratch, &mut out, &limits, &edits))
    });
    let mut raw = [httparse::EMPTY_HEADER; 100];
    c.bench_function("httparse_only_request", |b| {
        b.iter(|| {
            httparse::Request::new(&mut raw)
                .parse(black_box(REQUEST))
                .unwrap()
                .is_complete()
        })
    });
}

criterion_group!(h1, benches);

fn main() {
    count_allocations();
    h1();
    Criterion::default().configure_from_args().final_summary();
}
