//! A worker process's answer to a scrape: every thread's cells summed into one
//! [`MetricsSnapshot`] (process counters, budgets, frontends, backends with their timing
//! histograms, servers). Reads atomics only; never blocks a worker thread.

use crate::ctx::Shared;
use crate::metrics::{
    BackendMetrics, BudgetMetrics, FrontendMetrics, LimitMetrics, MetricsSnapshot, RouteMetrics, sum_histogram,
};
use crate::stats::{self, Snapshot};

/// Sums the cells of every worker thread of this process.
pub(crate) fn snapshot(shared: &Shared) -> MetricsSnapshot {
    let counters = stats::sum(shared.stats.iter().map(|s| s.as_ref()));
    MetricsSnapshot {
        workers: u32::try_from(shared.stats.len()).unwrap_or(u32::MAX),
        counters: counters
            .fields()
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .chain(acme_counters(shared))
            .collect(),
        budgets: budgets(shared, &counters)
            .into_iter()
            .chain(h2_budgets(shared, &counters))
            .chain(table_budgets(shared))
            .collect(),
        frontends: frontends(shared),
        backends: backends(shared),
        servers: shared
            .backends
            .iter()
            .flat_map(|b| b.servers().servers.iter().map(|s| s.view()).collect::<Vec<_>>())
            .collect(),
        certs: certs(shared),
        limits: limits(shared),
    }
}

/// The ACME thread's counters, when the config orders certificates
/// (`tollgate_acme_orders_ok_total`, `_failed_total`, `tollgate_acme_renewals_total`).
fn acme_counters(shared: &Shared) -> Vec<(String, u64)> {
    let acme = &shared.config.acme;
    if acme.orders.is_empty() {
        return Vec::new();
    }
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    vec![
        ("acme_orders_ok".into(), load(&acme.stats.orders_ok)),
        ("acme_orders_failed".into(), load(&acme.stats.orders_failed)),
        ("acme_renewals".into(), load(&acme.stats.renewals)),
    ]
}

fn certs(shared: &Shared) -> Vec<crate::metrics::CertMetrics> {
    shared
        .cert_stores()
        .flat_map(|(frontend, store)| {
            store.entries().into_iter().map(move |e| crate::metrics::CertMetrics {
                frontend: frontend.to_string(),
                name: e.names.first().cloned().unwrap_or_default(),
                serial: e.facts.serial_hex(),
                source: e.source.as_str().to_string(),
                not_after: e.facts.not_after,
            })
        })
        .collect()
}

/// Every stick table's counters (each table's shards locked in turn, briefly).
pub(crate) fn limits(shared: &Shared) -> Vec<LimitMetrics> {
    use std::sync::atomic::Ordering::Relaxed;
    let frontends = shared.config.frontends.iter().zip(&shared.limits);
    frontends
        .flat_map(|(f, set)| {
            set.tables().iter().map(|t| {
                let c = &t.counters;
                LimitMetrics {
                    name: t.name().to_string(),
                    frontend: f.name.clone(),
                    entries: t.entries(),
                    size: u64::from(t.spec().size),
                    denied: c.denied.load(Relaxed),
                    tarpitted: c.tarpitted.load(Relaxed),
                    evicted: c.evicted.load(Relaxed),
                    expired: c.expired.load(Relaxed),
                    untracked: c.untracked.load(Relaxed),
                }
            })
        })
        .collect()
}

fn budgets(shared: &Shared, c: &Snapshot) -> Vec<BudgetMetrics> {
    let g = &shared.config.global;
    let workers = shared.stats.len() as u64;
    let (maxconn, conns) = shared.budgets.global_usage();
    let handshakes_free = shared.handshakes.available_permits() as u64;
    vec![
        BudgetMetrics {
            name: "maxconn".into(),
            limit: u64::from(maxconn),
            in_use: Some(conns),
            parked: Some(c.accept_paused),
            waiting: None,
        },
        BudgetMetrics {
            name: "accept_rate".into(),
            limit: u64::from(g.max_accept_rate),
            in_use: None,
            parked: Some(c.accept_rate_delayed),
            waiting: None,
        },
        BudgetMetrics {
            name: "buffers".into(),
            limit: g.buffer_budget / (g.buffer_size.max(1) as u64),
            in_use: Some(c.buffers_in_use),
            parked: Some(c.buffer_waits),
            waiting: Some(c.buffer_waiters),
        },
        BudgetMetrics {
            name: "handshakes".into(),
            limit: u64::from(g.max_handshakes),
            in_use: Some(u64::from(g.max_handshakes).saturating_sub(handshakes_free)),
            parked: Some(c.tls_handshake_waits),
            waiting: None,
        },
        BudgetMetrics {
            name: "pipes".into(),
            limit: u64::from(g.max_pipes) * workers,
            in_use: Some(c.pipes_in_use),
            parked: None,
            waiting: None,
        },
        BudgetMetrics {
            name: "auth_checks".into(),
            limit: u64::from(g.max_auth_checks) * workers,
            in_use: Some(c.auth_verifying),
            parked: Some(c.auth_verify_waits),
            waiting: None,
        },
        BudgetMetrics {
            name: "compressors".into(),
            limit: u64::from(g.max_compressors) * workers,
            in_use: Some(c.compressors_in_use),
            parked: Some(c.compress_over_budget),
            waiting: None,
        },
    ]
}

fn frontends(shared: &Shared) -> Vec<FrontendMetrics> {
    shared
        .config
        .frontends
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let cells = shared.metrics.iter().filter_map(|t| t.frontends.get(i));
            let mut m = FrontendMetrics {
                name: f.name.clone(),
                maxconn: f.maxconn,
                // The slots of its maxconn in use, or without one its open sessions (every
                // frontend has a figure: the stats page showed "-" without a maxconn).
                connections: shared.budgets.frontend_in_use(i, f.maxconn).or_else(|| {
                    Some(
                        shared
                            .stat
                            .iter()
                            .filter_map(|t| t.frontend(i))
                            .map(|c| c.sessions_active.get())
                            .sum(),
                    )
                }),
                disabled: shared.paused.is_disabled(i),
                ..FrontendMetrics::default()
            };
            if let Some(tls) = &f.tls {
                let load = |c: &std::sync::atomic::AtomicU64| Some(c.load(std::sync::atomic::Ordering::Relaxed));
                m.ocsp_staples = Some(tls.certs.staples_served());
                m.ocsp_fetch_ok = load(&tls.certs.ocsp_fetch_ok);
                m.ocsp_fetch_failed = load(&tls.certs.ocsp_fetch_failed);
            }
            for c in cells {
                c.add_to(&mut m);
            }
            m.routes = f
                .routes
                .iter()
                .enumerate()
                .map(|(r, route)| {
                    let mut rm = RouteMetrics {
                        name: route.name.to_string(),
                        ..RouteMetrics::default()
                    };
                    for t in shared.metrics.iter() {
                        t.add_route_to(i, u16::try_from(r).unwrap_or(u16::MAX), &mut rm);
                    }
                    rm.jwks = route
                        .auth
                        .as_ref()
                        .and_then(|a| a.jwks())
                        .filter(|j| j.url().is_some())
                        .map(|j| {
                            use std::sync::atomic::Ordering::Relaxed;
                            let s = j.stats();
                            crate::metrics::JwksMetrics {
                                fetches_ok: s.fetches_ok.load(Relaxed),
                                fetches_failed: s.fetches_failed.load(Relaxed),
                                early_requests: s.early_requests.load(Relaxed),
                                last_ok_unix: s.last_ok_unix.load(Relaxed),
                                keys: j.load().len() as u64,
                            }
                        });
                    rm
                })
                .collect();
            m
        })
        .collect()
}

fn backends(shared: &Shared) -> Vec<BackendMetrics> {
    shared
        .backends
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let cells = || shared.metrics.iter().filter_map(move |t| t.backends.get(i));
            BackendMetrics {
                name: b.name.to_string(),
                requests: cells().map(|c| c.requests.get()).sum(),
                queued: b.queued(),
                connect: sum_histogram(cells().map(|c| &c.connect)),
                response: sum_histogram(cells().map(|c| &c.response)),
                total: sum_histogram(cells().map(|c| &c.total)),
            }
        })
        .collect()
}

/// Each stick table as a budget: its `size`, the entries it holds, the entries evicted
/// for room as its `parked` count.
fn table_budgets(shared: &Shared) -> Vec<BudgetMetrics> {
    shared
        .tables()
        .map(|t| BudgetMetrics {
            name: format!("table:{}", t.name()),
            limit: u64::from(t.spec().size),
            in_use: Some(t.entries()),
            parked: Some(t.counters.evicted.load(std::sync::atomic::Ordering::Relaxed)),
            waiting: None,
        })
        .collect()
}

/// The `[http2]` limits (per client connection; the flood ones per `flood_window`), each
/// with the connections closed for passing it as its `parked` count (GOAWAY
/// ENHANCE_YOUR_CALM: an abusive connection is refused, never waited for).
fn h2_budgets(shared: &Shared, c: &Snapshot) -> Vec<BudgetMetrics> {
    let h = &shared.config.http2;
    let limit = |name: &str, limit: u32, parked: Option<u64>| BudgetMetrics {
        name: name.into(),
        limit: u64::from(limit),
        in_use: None,
        parked,
        waiting: None,
    };
    vec![
        limit("h2_streams", h.max_concurrent_streams, None),
        limit(
            "h2_header_block",
            h.max_header_block_size,
            Some(c.h2_flood_header_block),
        ),
        limit(
            "h2_header_block_frames",
            h.max_header_block_frames,
            Some(c.h2_flood_header_block),
        ),
        limit("h2_client_resets", h.max_client_resets, Some(c.h2_flood_client_resets)),
        limit("h2_server_resets", h.max_server_resets, Some(c.h2_flood_server_resets)),
        limit("h2_pings", h.max_pings, Some(c.h2_flood_pings)),
        limit("h2_settings", h.max_settings, Some(c.h2_flood_settings)),
        limit("h2_empty_data", h.max_empty_data, Some(c.h2_flood_empty_data)),
        limit("h2_priority", h.max_priority, Some(c.h2_flood_priority)),
        limit(
            "h2_window_updates",
            h.max_window_updates,
            Some(c.h2_flood_window_updates),
        ),
        limit(
            "h2_oversized_heads",
            h.max_oversized_heads,
            Some(c.h2_flood_oversized_heads),
        ),
    ]
}
