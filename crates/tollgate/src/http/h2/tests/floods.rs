//! Flood budgets: each trips one past its limit, not at it; header blocks and acks bounded.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::type_complexity)]

use std::time::Duration;

use super::super::frame::{flag, kind};
use super::super::*;
use super::*;

fn flood_settings(limit: u32) -> Settings {
    Settings {
        max_client_resets: limit,
        max_server_resets: limit,
        max_pings: limit,
        max_settings: limit,
        max_empty_data: limit,
        max_priority: limit,
        max_window_updates: limit,
        max_oversized_heads: limit,
        max_header_list_size: 1024,
        ..Settings::default()
    }
}

#[test]
fn each_flood_trips_past_its_limit() {
    const LIMIT: u32 = 5;
    // (kind, the n-th offending frame's bytes). Counted after the handshake (its SETTINGS
    // frames count too: 2 of them).
    let one: Vec<(Flood, Box<dyn Fn(u32) -> Vec<u8>>, u32)> = vec![
        (Flood::Pings, Box::new(|_| raw(kind::PING, 0, 0, &[0; 8])), 0),
        (Flood::Settings, Box::new(|_| settings(&[])), 2),
        (
            Flood::Priority,
            Box::new(|n| raw(kind::PRIORITY, 0, 2 * n + 1, &[0, 0, 0, 0, 16])),
            0,
        ),
        (Flood::WindowUpdates, Box::new(|_| window_update(0, 1)), 0),
        (
            Flood::EmptyData,
            Box::new(|n| {
                if n == 0 {
                    cat(&[headers(1, &post("9"), false), data(1, b"", false)])
                } else {
                    data(1, b"", false)
                }
            }),
            0,
        ),
        (
            Flood::ClientResets,
            Box::new(|n| {
                cat(&[
                    headers(2 * n + 1, GET, false),
                    raw(kind::RST_STREAM, 0, 2 * n + 1, &[0, 0, 0, 8]),
                ])
            }),
            0,
        ),
        (
            Flood::ServerResets,
            Box::new(|n| headers(2 * n + 1, &with(&[("connection", "x")]), true)),
            0,
        ),
        (
            Flood::OversizedHeads,
            Box::new(|n| headers(2 * n + 1, &with(&[("x-big", "x".repeat(2000).leak())]), true)),
            0,
        ),
    ];
    for (flood, frame_n, already) in one {
        let mut c = Client::ready(flood_settings(LIMIT));
        for n in 0..LIMIT - already {
            c.send(&frame_n(n)).unwrap_or_else(|e| panic!("{flood:?} #{n}: {e:?}"));
        }
        let e = c.send(&frame_n(LIMIT - already)).unwrap_err();
        assert_eq!((e.code, e.flood), (Reason::ENHANCE_YOUR_CALM, Some(flood)));
        let last = c.frames().pop().unwrap();
        assert_eq!(
            (last.kind, code_of(&last.payload)),
            (kind::GOAWAY, Reason::ENHANCE_YOUR_CALM)
        );
    }
}

#[test]
fn flood_window_rolls_over() {
    let mut c = Client::ready(Settings {
        flood_window: Duration::from_secs(1),
        ..flood_settings(3)
    });
    for _ in 0..3 {
        c.send(&raw(kind::PING, 0, 0, &[0; 8])).unwrap();
    }
    c.now += Duration::from_secs(1);
    for _ in 0..3 {
        c.send(&raw(kind::PING, 0, 0, &[0; 8])).unwrap();
    }
    assert_eq!(
        c.send(&raw(kind::PING, 0, 0, &[0; 8])).unwrap_err().flood,
        Some(Flood::Pings)
    );
}

#[test]
fn continuation_flood_is_bounded() {
    let s = Settings {
        max_header_block_size: 1000,
        max_header_block_frames: 8,
        ..Settings::default()
    };
    // Bytes: HEADERS + CONTINUATIONs of 100 bytes, never END_HEADERS.
    let mut c = Client::ready(s);
    c.send(&raw(kind::HEADERS, flag::END_STREAM, 1, &block(GET))).unwrap();
    let mut err = None;
    for _ in 0..20 {
        match c.send(&raw(kind::CONTINUATION, 0, 1, &[0x40; 150])) {
            Ok(()) => assert!(c.conn.buffered_header_block() <= 1000),
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert_eq!(err.unwrap().flood, Some(Flood::HeaderBlock));
    assert!(c.conn.buffered_header_block() <= 1000);
    // Frames: 8 allowed, the 9th trips, whatever their size.
    let mut c = Client::ready(s);
    c.send(&raw(kind::HEADERS, 0, 1, &[])).unwrap();
    for _ in 0..7 {
        c.send(&raw(kind::CONTINUATION, 0, 1, &[])).unwrap();
    }
    assert_eq!(
        c.send(&raw(kind::CONTINUATION, 0, 1, &[])).unwrap_err().flood,
        Some(Flood::HeaderBlock)
    );
    // At the limit exactly, a block split in 8 frames is served.
    let mut c = Client::ready(s);
    let b = block(GET);
    let parts: Vec<&[u8]> = b.chunks(b.len().div_ceil(8)).collect();
    assert_eq!(parts.len(), 8);
    for (i, part) in parts.iter().enumerate() {
        let (k, f) = if i == 0 {
            (kind::HEADERS, flag::END_STREAM)
        } else {
            (kind::CONTINUATION, 0)
        };
        let f = if i == 7 { f | flag::END_HEADERS } else { f };
        c.send(&raw(k, f, 1, part)).unwrap();
    }
    assert!(matches!(c.events()[..], [Event::Request { .. }]));
}

#[test]
fn unread_output_stops_acks() {
    let mut c = Client::ready(Settings {
        max_pings: u32::MAX,
        ..Settings::default()
    });
    let ping = raw(kind::PING, 0, 0, &[7; 8]);
    let batch: Vec<u8> = (0..1000).flat_map(|_| ping.clone()).collect();
    let mut sent = 0;
    let e = loop {
        match c.send(&batch) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 100, "never tripped");
    };
    assert_eq!((e.code, e.flood), (Reason::ENHANCE_YOUR_CALM, Some(Flood::Pings)));
    assert!(c.conn.output().len() <= conn::MAX_PENDING_ACKS + 64);
}

/// Heads read together with the one past the budget: the connection is dead, so their
/// answers never follow the GOAWAY.
#[test]
fn nothing_is_sent_after_the_goaway() {
    let mut c = Client::ready(flood_settings(3));
    let big: &'static str = "x".repeat(2000).leak();
    let bytes: Vec<u8> = (0..4u32)
        .flat_map(|n| headers(2 * n + 1, &with(&[("x-big", big)]), true))
        .collect();
    let e = c.send(&bytes).unwrap_err();
    assert_eq!(e.flood, Some(Flood::OversizedHeads));
    let ev = c.events();
    assert_eq!(ev.len(), 3, "{ev:?}");
    for e in ev {
        let Event::HeadTooLarge { id, .. } = e else {
            panic!("{e:?}")
        };
        assert_eq!(c.conn.send_headers(id, 431, std::iter::empty(), true), Err(StreamGone));
        c.conn.reset(id, Reason::CANCEL);
    }
    let f = c.frames();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (f[0].kind, code_of(&f[0].payload)),
        (kind::GOAWAY, Reason::ENHANCE_YOUR_CALM)
    );
}
