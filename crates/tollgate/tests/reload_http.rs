//! Reloads under HTTP keep-alive load: the old generation closes each client connection
//! right after a response that says `Connection: close`, so clients that honour it never
//! see a failed request, through five reloads.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)] // test helpers may panic

mod common;
mod master_support;

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::http::{http_config, http_origin, ok, read_response};
use master_support::{Master, TempDir, global};

#[test]
fn fifty_http_keepalive_clients_through_five_reloads() {
    let origin = http_origin(|r| ok(&r.target));
    let dir = TempDir::new("reload-http");
    let config = http_config(&global(&dir.0, ""), origin.addr);
    let master = Master::start(dir, &config, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let [ok_count, failures, closes] = [(); 3].map(|_| Arc::new(AtomicU64::new(0)));
    let clients: Vec<_> = (0..50)
        .map(|id| {
            let (stop, addr) = (Arc::clone(&stop), master.addr);
            let (ok_count, failures, closes) = (Arc::clone(&ok_count), Arc::clone(&failures), Arc::clone(&closes));
            thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let Ok(mut c) = TcpStream::connect(addr) else {
                        failures.fetch_add(1, Ordering::SeqCst);
                        continue;
                    };
                    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let mut r = BufReader::new(c.try_clone().unwrap());
                    while !stop.load(Ordering::SeqCst) {
                        n += 1;
                        let target = format!("/c{id}/n{n}");
                        let sent = c.write_all(format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
                        match (sent, read_response(&mut r)) {
                            (Ok(()), Some((200, headers, body))) if body == target.as_bytes() => {
                                ok_count.fetch_add(1, Ordering::SeqCst);
                                let close = headers.iter().any(|(k, v)| {
                                    k.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close")
                                });
                                if close {
                                    closes.fetch_add(1, Ordering::SeqCst);
                                    break;
                                }
                            }
                            other => {
                                eprintln!("client {id} request {n}: {:?}", other.1.map(|x| x.0));
                                failures.fetch_add(1, Ordering::SeqCst);
                                break;
                            }
                        }
                    }
                }
            })
        })
        .collect();
    let start = Instant::now();
    for i in 1..=5u32 {
        thread::sleep((start + Duration::from_secs(10) * i / 6).saturating_duration_since(Instant::now()));
        master.reload_ok();
    }
    thread::sleep((start + Duration::from_secs(10)).saturating_duration_since(Instant::now()));
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().unwrap();
    }
    let (ok_n, fail_n, close_n) = (
        ok_count.load(Ordering::SeqCst),
        failures.load(Ordering::SeqCst),
        closes.load(Ordering::SeqCst),
    );
    eprintln!("ok={ok_n} failures={fail_n} closed-by-reload={close_n}");
    assert_eq!(fail_n, 0);
    assert!(ok_n >= 5_000, "ok={ok_n}");
    // Every reload closed the old generation's 50 connections after a response.
    assert!(close_n >= 50, "closes={close_n}");
    assert_eq!(master.wait_single_generation(Duration::from_secs(15)).0, 6);
}
