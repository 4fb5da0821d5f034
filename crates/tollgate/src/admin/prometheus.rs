//! The Prometheus text exposition format (version 0.0.4) of a [`MetricsReport`]: the master's
//! own series, then every family over every live generation. docs/metrics.md lists each
//! series with its type and labels.
//!
//! Every per-process series carries `generation="N"`: a reload starts a new worker process
//! whose counters start at zero, and its series are new ones, while the old generation's
//! series stay until it has finished its connections and exited (then they go stale). So
//! no series ever goes backwards, and `sum without (generation) (rate(...))` is the rate
//! over the whole proxy. Label values are escaped (`\\`, `\"`, `\n`); families are written
//! once with their `# HELP` and `# TYPE` lines.

use std::fmt::Write;

use crate::command::{GenerationMetrics, MetricsReport};
use crate::live::server::{AdminState, OperState, ServerView};
use crate::metrics::{BUCKETS_US, HistogramSnapshot, PROCESS_GAUGES};

/// Handshake counters shown as one family by outcome instead of one family each.
const TLS_OUTCOMES: &[(&str, &str)] = &[
    ("tls_handshakes_full", "full"),
    ("tls_handshakes_resumed", "resumed"),
    ("tls_fail_timeout", "timeout"),
    ("tls_fail_protocol", "protocol_error"),
    ("tls_fail_no_cert", "no_certificate"),
    ("tls_fail_closed", "closed"),
    ("tls_fail_client_cert", "client_certificate"),
];

/// A family made of several counters: its name, help, label, and each counter's label value.
type LabelledFamily = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// Counters shown as one family each, labelled by what the handshake negotiated.
const TLS_NEGOTIATED: &[LabelledFamily] = &[
    (
        "tollgate_tls_key_exchange_total",
        "Completed TLS handshakes (termination) by key-exchange group.",
        "group",
        &[
            ("tls_group_x25519", "X25519"),
            ("tls_group_secp256r1", "secp256r1"),
            ("tls_group_secp384r1", "secp384r1"),
            ("tls_group_x25519mlkem768", "X25519MLKEM768"),
            ("tls_group_other", "other"),
        ],
    ),
    (
        "tollgate_tls_version_total",
        "Completed TLS handshakes (termination) by protocol version.",
        "version",
        &[("tls_version_12", "1.2"), ("tls_version_13", "1.3")],
    ),
    (
        "tollgate_tls_cipher_suite_total",
        "Completed TLS handshakes (termination) by cipher suite.",
        "suite",
        &[
            ("tls_suite_aes_128_gcm_sha256", "TLS13_AES_128_GCM_SHA256"),
            ("tls_suite_aes_256_gcm_sha384", "TLS13_AES_256_GCM_SHA384"),
            ("tls_suite_chacha20_poly1305_sha256", "TLS13_CHACHA20_POLY1305_SHA256"),
            (
                "tls_suite_ecdhe_ecdsa_aes_128_gcm",
                "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            ),
            (
                "tls_suite_ecdhe_rsa_aes_128_gcm",
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            ),
            (
                "tls_suite_ecdhe_ecdsa_aes_256_gcm",
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            ),
            (
                "tls_suite_ecdhe_rsa_aes_256_gcm",
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            ),
            (
                "tls_suite_ecdhe_ecdsa_chacha20",
                "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
            ),
            (
                "tls_suite_ecdhe_rsa_chacha20",
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            ),
        ],
    ),
];

const RESPONSE_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"];

/// The whole text a scrape answers with.
pub fn render(report: &MetricsReport) -> String {
    let servers: usize = report.generations.iter().map(|g| g.metrics.servers.len()).sum();
    let mut out = Out(String::with_capacity(16 * 1024 + servers * 1400));
    if let Some(m) = &report.master {
        out.family(
            "tollgate_reloads_total",
            "counter",
            "Reloads by outcome (done: a new generation serves).",
        );
        out.sample("tollgate_reloads_total", &[("outcome", "done")], m.reloads);
        out.sample("tollgate_reloads_total", &[("outcome", "refused")], m.reloads_refused);
        out.family(
            "tollgate_current_generation",
            "gauge",
            "The newest serving worker generation.",
        );
        out.sample("tollgate_current_generation", &[], m.current_generation);
        out.family("tollgate_generations", "gauge", "Live worker generations by state.");
        for (state, n) in &m.generations {
            out.sample("tollgate_generations", &[("state", state)], n);
        }
    }
    // Without `generation_label`: one set of series, the exited generations' counters
    // carried by the master (`retired`) plus every live generation's, so no counter goes
    // back when a reload retires a generation. With it: a series per live generation.
    let merged;
    let gens: Vec<(String, &GenerationMetrics)> = if report.generation_label {
        report
            .generations
            .iter()
            .map(|g| (g.generation.to_string(), g))
            .collect()
    } else {
        merged = report.merged();
        vec![(String::new(), &merged)]
    };
    process(&mut out, &gens);
    budgets(&mut out, &gens);
    frontends(&mut out, &gens);
    backends(&mut out, &gens);
    servers_families(&mut out, &gens);
    certs(&mut out, &gens, crate::config::cert_store::unix_now());
    limits(&mut out, &gens);
    out.0
}

/// Certificate expiry (seconds left at `now`, and the date itself) and the OCSP counters.
fn certs(out: &mut Out, gens: &Gens<'_>, now: i64) {
    let families = [
        (
            "tollgate_tls_cert_expiry_seconds",
            "Seconds until the certificate's notAfter (negative once expired).",
        ),
        (
            "tollgate_tls_cert_not_after_seconds",
            "The certificate's notAfter, Unix seconds.",
        ),
    ];
    for (i, (name, help)) in families.iter().enumerate() {
        out.family(name, "gauge", help);
        for (g, m) in gens {
            for c in &m.metrics.certs {
                let labels = [
                    ("generation", g.as_str()),
                    ("frontend", &c.frontend),
                    ("name", &c.name),
                    ("serial", &c.serial),
                    ("source", &c.source),
                ];
                let value = if i == 0 { c.not_after - now } else { c.not_after };
                out.sample(name, &labels, value);
            }
        }
    }
    let name = "tollgate_tls_ocsp_staples_total";
    out.family(
        name,
        "counter",
        "Handshakes served a certificate with a stapled OCSP response.",
    );
    for (g, m) in gens {
        for f in &m.metrics.frontends {
            if let Some(v) = f.ocsp_staples {
                out.sample(name, &[("generation", g), ("frontend", &f.name)], v);
            }
        }
    }
    let name = "tollgate_tls_ocsp_fetches_total";
    out.family(
        name,
        "counter",
        "OCSP responses fetched from certificates' responders (ocsp_fetch), by outcome.",
    );
    for (g, m) in gens {
        for f in &m.metrics.frontends {
            for (outcome, v) in [("ok", f.ocsp_fetch_ok), ("failed", f.ocsp_fetch_failed)] {
                if let Some(v) = v {
                    out.sample(
                        name,
                        &[("generation", g), ("frontend", &f.name), ("outcome", outcome)],
                        v,
                    );
                }
            }
        }
    }
}

/// Stick tables (`[[frontend.limit]]`), labelled by limit and frontend.
fn limits(out: &mut Out, gens: &Gens<'_>) {
    type Pick = fn(&crate::metrics::LimitMetrics) -> u64;
    let families: [(&str, &str, &str, Pick); 7] = [
        (
            "tollgate_limit_denied_total",
            "counter",
            "Requests (TCP: connections) refused by the limit.",
            |l| l.denied,
        ),
        (
            "tollgate_limit_tarpitted_total",
            "counter",
            "Refused requests held for the tarpit.",
            |l| l.tarpitted,
        ),
        (
            "tollgate_limit_evicted_total",
            "counter",
            "Entries pushed out of the full stick table (least recently seen first).",
            |l| l.evicted,
        ),
        (
            "tollgate_limit_expired_total",
            "counter",
            "Entries dropped after `expire` without a request.",
            |l| l.expired,
        ),
        (
            "tollgate_limit_untracked_total",
            "counter",
            "New keys admitted without an entry (every eviction candidate was in flight).",
            |l| l.untracked,
        ),
        (
            "tollgate_limit_entries",
            "gauge",
            "Entries the stick table holds now.",
            |l| l.entries,
        ),
        ("tollgate_limit_size", "gauge", "The stick table's size.", |l| l.size),
    ];
    for (name, kind, help, pick) in families {
        out.family(name, kind, help);
        for (g, m) in gens {
            for l in &m.metrics.limits {
                out.sample(
                    name,
                    &[("generation", g), ("limit", &l.name), ("frontend", &l.frontend)],
                    pick(l),
                );
            }
        }
    }
}

struct Out(String);

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        let labels = &labels_shown(labels);
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                self.0.push_str(k);
                self.0.push_str("=\"");
                escape(&mut self.0, v);
                self.0.push('"');
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }

    /// `_bucket` (cumulative, `le` in seconds), `_sum` (seconds) and `_count`.
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &HistogramSnapshot) {
        let labels = &labels_shown(labels);
        let bucket = format!("{name}_bucket");
        let mut with_le: Vec<(&str, &str)> = labels.to_vec();
        let mut cumulative = 0;
        let bounds: Vec<String> = BUCKETS_US.iter().map(|us| seconds(*us)).collect();
        for (i, n) in h.buckets.iter().enumerate() {
            cumulative += n;
            let le = bounds.get(i).map_or("+Inf", String::as_str);
            with_le.push(("le", le));
            self.sample(&bucket, &with_le, cumulative);
            with_le.pop();
        }
        self.sample(&format!("{name}_sum"), labels, seconds(h.sum_us));
        self.sample(&format!("{name}_count"), labels, h.count());
    }
}

fn escape(out: &mut String, v: &str) {
    if !v.contains(['\\', '"', '\n']) {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Microseconds as seconds, exactly (`0.0005`, `1`, `2.5`).
fn seconds(us: u64) -> String {
    let (s, frac) = (us / 1_000_000, us % 1_000_000);
    if frac == 0 {
        return s.to_string();
    }
    let digits = format!("{frac:06}");
    format!("{s}.{}", digits.trim_end_matches('0'))
}

type Gens<'a> = [(String, &'a GenerationMetrics)];

fn process(out: &mut Out, gens: &Gens<'_>) {
    out.family(
        "tollgate_worker_threads",
        "gauge",
        "Worker threads of the generation's process.",
    );
    for (g, m) in gens {
        out.sample("tollgate_worker_threads", &[("generation", g)], m.metrics.workers);
    }
    // Families in the order the first generation lists them; a newer binary may add some.
    let mut names: Vec<&str> = Vec::new();
    for (_, m) in gens {
        for (n, _) in &m.metrics.counters {
            let labelled = TLS_OUTCOMES.iter().any(|(f, _)| f == n)
                || TLS_NEGOTIATED
                    .iter()
                    .any(|(_, _, _, fields)| fields.iter().any(|(f, _)| f == n));
            if !names.contains(&n.as_str()) && !labelled {
                names.push(n);
            }
        }
    }
    for name in names {
        let gauge = PROCESS_GAUGES.contains(&name);
        // A counter whose name already ends in `_total` (`sessions_total`) gets no second one.
        let metric = if gauge {
            format!("tollgate_{name}")
        } else {
            format!("tollgate_{}_total", name.strip_suffix("_total").unwrap_or(name))
        };
        let help = format!("Process counter `{name}`, summed over worker threads (docs/architecture.md).");
        out.family(&metric, if gauge { "gauge" } else { "counter" }, &help);
        for (g, m) in gens {
            if let Some((_, v)) = m.metrics.counters.iter().find(|(n, _)| n == name) {
                out.sample(&metric, &[("generation", g)], v);
            }
        }
    }
    let name = "tollgate_tls_handshakes_total";
    out.family(name, "counter", "TLS handshakes (termination) by outcome.");
    for (g, m) in gens {
        for (field, outcome) in TLS_OUTCOMES {
            if let Some((_, v)) = m.metrics.counters.iter().find(|(n, _)| n == field) {
                out.sample(name, &[("generation", g), ("outcome", outcome)], v);
            }
        }
    }
    for (name, help, label, fields) in TLS_NEGOTIATED {
        out.family(name, "counter", help);
        for (g, m) in gens {
            for (field, value) in *fields {
                if let Some((_, v)) = m.metrics.counters.iter().find(|(n, _)| n == field) {
                    out.sample(name, &[("generation", g), (label, value)], v);
                }
            }
        }
    }
}

fn budgets(out: &mut Out, gens: &Gens<'_>) {
    type Pick = fn(&crate::metrics::BudgetMetrics) -> Option<u64>;
    let families: [(&str, &str, &str, Pick); 4] = [
        ("tollgate_budget_limit", "gauge", "A budget's limit.", |b| Some(b.limit)),
        (
            "tollgate_budget_in_use",
            "gauge",
            "What is taken of a budget now.",
            |b| b.in_use,
        ),
        (
            "tollgate_budget_parked_total",
            "counter",
            "Times a taker had to wait for a budget.",
            |b| b.parked,
        ),
        (
            "tollgate_budget_waiting",
            "gauge",
            "Takers waiting for a budget now.",
            |b| b.waiting,
        ),
    ];
    for (name, kind, help, pick) in families {
        out.family(name, kind, help);
        for (g, m) in gens {
            for b in &m.metrics.budgets {
                if let Some(v) = pick(b) {
                    out.sample(name, &[("generation", g), ("budget", &b.name)], v);
                }
            }
        }
    }
}

fn frontends(out: &mut Out, gens: &Gens<'_>) {
    type Pick = fn(&crate::metrics::FrontendMetrics) -> Option<u64>;
    let families: [(&str, &str, &str, Pick); 6] = [
        (
            "tollgate_frontend_requests_total",
            "counter",
            "Streams ended: HTTP requests, TCP sessions.",
            |f| Some(f.streams),
        ),
        (
            "tollgate_frontend_bytes_in_total",
            "counter",
            "Bytes from clients forwarded to servers.",
            |f| Some(f.bytes_in),
        ),
        (
            "tollgate_frontend_bytes_out_total",
            "counter",
            "Bytes written to clients.",
            |f| Some(f.bytes_out),
        ),
        (
            "tollgate_frontend_connections_denied_total",
            "counter",
            "Connections closed by the frontend's allow / deny lists or a TCP deny route.",
            |f| Some(f.conn_denied),
        ),
        (
            "tollgate_frontend_maxconn",
            "gauge",
            "The frontend's maxconn (0: none).",
            |f| Some(u64::from(f.maxconn)),
        ),
        (
            "tollgate_frontend_connections",
            "gauge",
            "The frontend's open client connections now.",
            |f| f.connections,
        ),
    ];
    for (name, kind, help, pick) in families {
        out.family(name, kind, help);
        for (g, m) in gens {
            for f in &m.metrics.frontends {
                if let Some(v) = pick(f) {
                    out.sample(name, &[("generation", g), ("frontend", &f.name)], v);
                }
            }
        }
    }
    responses_family(
        out,
        "tollgate_frontend_responses_total",
        "Responses by status class and by who made them (server, or proxy: an error, a return, a redirect tollgate answered).",
        gens,
        |m| {
            m.frontends
                .iter()
                .map(|f| (vec![("frontend", f.name.as_str())], &f.responses))
                .collect()
        },
    );
    let name = "tollgate_frontend_request_duration_seconds";
    out.family(
        name,
        "histogram",
        "Request head received (TCP: accept) to the end of the stream.",
    );
    for (g, m) in gens {
        for f in &m.metrics.frontends {
            out.histogram(name, &[("generation", g), ("frontend", &f.name)], &f.duration);
        }
    }
    type H2Pick = fn(&crate::metrics::FrontendMetrics) -> u64;
    let h2: [(&str, &str, H2Pick); 11] = [
        (
            "tollgate_frontend_quic_connections_total",
            "QUIC connections whose handshake completed.",
            |f| f.quic_connections,
        ),
        (
            "tollgate_frontend_h3_streams_total",
            "HTTP/3 request streams clients opened.",
            |f| f.h3_streams,
        ),
        (
            "tollgate_frontend_quic_handshake_failures_total",
            "QUIC handshakes that failed or timed out.",
            |f| f.quic_handshake_failures,
        ),
        (
            "tollgate_frontend_quic_refused_total",
            "New QUIC connections refused at a full maxconn.",
            |f| f.quic_refused,
        ),
        (
            "tollgate_frontend_quic_retries_total",
            "New QUIC connections asked to prove their address (Retry).",
            |f| f.quic_retries,
        ),
        (
            "tollgate_frontend_quic_datagrams_in_total",
            "UDP datagrams read on the frontend's quic sockets (GRO segments counted).",
            |f| f.quic_datagrams_in,
        ),
        (
            "tollgate_frontend_quic_datagrams_out_total",
            "UDP datagrams sent from the frontend's quic sockets (GSO segments counted).",
            |f| f.quic_datagrams_out,
        ),
        (
            "tollgate_frontend_quic_lost_packets_total",
            "QUIC packets the frontend's connections declared lost.",
            |f| f.quic_lost_packets,
        ),
        (
            "tollgate_frontend_h2_streams_total",
            "HTTP/2 streams clients opened.",
            |f| f.h2_streams,
        ),
        (
            "tollgate_frontend_h2_client_resets_total",
            "HTTP/2 streams the client reset (RST_STREAM).",
            |f| f.h2_client_resets,
        ),
        (
            "tollgate_frontend_h2_stream_errors_total",
            "HTTP/2 streams refused as malformed (a stream error, RST_STREAM sent).",
            |f| f.h2_stream_errors,
        ),
    ];
    for (name, help, pick) in h2 {
        out.family(name, "counter", help);
        for (g, m) in gens {
            for f in &m.metrics.frontends {
                out.sample(name, &[("generation", g), ("frontend", &f.name)], pick(f));
            }
        }
    }
    routes(out, gens);
}

/// A route's JWKS refresher (`auth.jwt.jwks_url`): fetches by outcome, early fetches, the
/// time of the last good one, the keys in use.
fn jwks(out: &mut Out, gens: &Gens<'_>) {
    let routes = || {
        gens.iter().flat_map(|(g, m)| {
            m.metrics.frontends.iter().flat_map(move |f| {
                f.routes.iter().filter_map(move |r| {
                    r.jwks
                        .as_ref()
                        .map(|j| (g.as_str(), f.name.as_str(), r.name.as_str(), j))
                })
            })
        })
    };
    if routes().next().is_none() {
        return;
    }
    let name = "tollgate_route_jwks_fetches_total";
    out.family(name, "counter", "Fetches of the route's jwks_url by outcome.");
    for (g, f, r, j) in routes() {
        for (outcome, n) in [
            ("ok", j.fetches_ok),
            ("failed", j.fetches_failed),
            ("early", j.early_requests),
        ] {
            out.sample(
                name,
                &[("generation", g), ("frontend", f), ("route", r), ("outcome", outcome)],
                n,
            );
        }
    }
    let gauges: [(&str, &str, JwksFigure); 2] = [
        (
            "tollgate_route_jwks_last_success_seconds",
            "Unix time of the last good fetch of the route's jwks_url (0: none yet).",
            |j| j.last_ok_unix,
        ),
        ("tollgate_route_jwks_keys", "Keys in the route's key set in use.", |j| {
            j.keys
        }),
    ];
    for (name, help, pick) in gauges {
        out.family(name, "gauge", help);
        for (g, f, r, j) in routes() {
            out.sample(name, &[("generation", g), ("frontend", f), ("route", r)], pick(j));
        }
    }
}

/// One figure of a route's JWKS refresher.
type JwksFigure = fn(&crate::metrics::JwksMetrics) -> u64;

/// One counter of a route's figures.
type RouteCounter = fn(&crate::metrics::RouteMetrics) -> u64;

/// Per route (`[[frontend.route]]`, named by `name` or `route[N]`): requests, responses by
/// class and source, durations.
fn routes(out: &mut Out, gens: &Gens<'_>) {
    let counters: [(&str, &str, RouteCounter); 2] = [
        ("tollgate_route_requests_total", "Streams the route decided.", |r| {
            r.requests
        }),
        (
            "tollgate_route_auth_refused_total",
            "Requests the route's auth refused.",
            |r| r.auth_refused,
        ),
    ];
    for (name, help, pick) in counters {
        out.family(name, "counter", help);
        for (g, m) in gens {
            for f in &m.metrics.frontends {
                for r in &f.routes {
                    out.sample(
                        name,
                        &[("generation", g), ("frontend", &f.name), ("route", &r.name)],
                        pick(r),
                    );
                }
            }
        }
    }
    jwks(out, gens);
    responses_family(
        out,
        "tollgate_route_responses_total",
        "Responses of the route's streams by status class and by who made them.",
        gens,
        |m| {
            m.frontends
                .iter()
                .flat_map(|f| {
                    f.routes.iter().map(move |r| {
                        (
                            vec![("frontend", f.name.as_str()), ("route", r.name.as_str())],
                            &r.responses,
                        )
                    })
                })
                .collect()
        },
    );
    let name = "tollgate_route_request_duration_seconds";
    out.family(
        name,
        "histogram",
        "Request head received to the end of the stream, per route.",
    );
    for (g, m) in gens {
        for f in &m.metrics.frontends {
            for r in &f.routes {
                out.histogram(
                    name,
                    &[("generation", g), ("frontend", &f.name), ("route", &r.name)],
                    &r.duration,
                );
            }
        }
    }
}

/// The labels of one row of responses, and the row (`metrics::Responses` order).
type ResponseRows<'a> = Vec<(Vec<(&'static str, &'a str)>, &'a Vec<u64>)>;

/// A `..._responses_total` family: one sample per class and source with a count.
fn responses_family(
    out: &mut Out,
    name: &str,
    help: &str,
    gens: &Gens<'_>,
    rows: impl for<'a> Fn(&'a crate::metrics::MetricsSnapshot) -> ResponseRows<'a>,
) {
    use crate::metrics::{RESPONSE_SOURCES, STATUS_CLASSES};
    out.family(name, "counter", help);
    for (g, m) in gens {
        for (labels, row) in rows(&m.metrics) {
            for (i, &n) in row.iter().enumerate() {
                let (Some(class), Some(source)) = (
                    STATUS_CLASSES.get(i % STATUS_CLASSES.len()),
                    RESPONSE_SOURCES.get(i / STATUS_CLASSES.len()),
                ) else {
                    continue;
                };
                // Every class a server can answer is always there; the proxy's only once seen.
                if n == 0 && *source == "proxy" {
                    continue;
                }
                let mut all = vec![("generation", g.as_str())];
                all.extend(labels.iter().copied());
                all.extend([("class", *class), ("source", *source)]);
                out.sample(name, &all, n);
            }
        }
    }
}

fn backends(out: &mut Out, gens: &Gens<'_>) {
    let name = "tollgate_backend_requests_total";
    out.family(
        name,
        "counter",
        "Streams that reached the backend (a server chosen or tried).",
    );
    for (g, m) in gens {
        for b in &m.metrics.backends {
            out.sample(name, &[("generation", g), ("backend", &b.name)], b.requests);
        }
    }
    let name = "tollgate_backend_queue_length";
    out.family(name, "gauge", "Requests waiting for a server slot now.");
    for (g, m) in gens {
        for b in &m.metrics.backends {
            out.sample(name, &[("generation", g), ("backend", &b.name)], b.queued);
        }
    }
    type Pick = fn(&crate::metrics::BackendMetrics) -> &HistogramSnapshot;
    let histograms: [(&str, &str, Pick); 3] = [
        (
            "tollgate_backend_connect_seconds",
            "Server chosen to connected (or a pooled connection taken).",
            |b| &b.connect,
        ),
        (
            "tollgate_backend_response_seconds",
            "Connected to the response head received (HTTP).",
            |b| &b.response,
        ),
        (
            "tollgate_backend_total_seconds",
            "Request head received (TCP: accept) to the end of the stream.",
            |b| &b.total,
        ),
    ];
    for (name, help, pick) in histograms {
        out.family(name, "histogram", help);
        for (g, m) in gens {
            for b in &m.metrics.backends {
                out.histogram(name, &[("generation", g), ("backend", &b.name)], pick(b));
            }
        }
    }
}

fn is_up(s: &ServerView) -> bool {
    s.admin == AdminState::Ready && s.oper != OperState::Down && s.effective_weight > 0
}

fn servers_families(out: &mut Out, gens: &Gens<'_>) {
    type Pick = fn(&ServerView) -> u64;
    let families: [(&str, &str, &str, Pick); 11] = [
        (
            "tollgate_server_up",
            "gauge",
            "1 if the server takes new connections (ready, not down, weight > 0).",
            |s| u64::from(is_up(s)),
        ),
        (
            "tollgate_server_weight",
            "gauge",
            "The effective weight balancers use.",
            |s| u64::from(s.effective_weight),
        ),
        (
            "tollgate_server_active_connections",
            "gauge",
            "Connection slots taken on the server now.",
            |s| u64::from(s.active),
        ),
        (
            "tollgate_server_queue_length",
            "gauge",
            "Requests queued for this server now.",
            |s| u64::from(s.queued),
        ),
        (
            "tollgate_server_maxconn",
            "gauge",
            "The server's maxconn (0: none).",
            |s| u64::from(s.maxconn),
        ),
        (
            "tollgate_server_connections_total",
            "counter",
            "New connections established to the server.",
            |s| s.counters.connections,
        ),
        (
            "tollgate_server_requests_total",
            "counter",
            "HTTP requests sent (TCP: sessions relayed).",
            |s| s.counters.requests,
        ),
        (
            "tollgate_server_bytes_to_server_total",
            "counter",
            "Bytes written to the server.",
            |s| s.counters.bytes_to_server,
        ),
        (
            "tollgate_server_bytes_to_client_total",
            "counter",
            "Bytes from the server written to clients.",
            |s| s.counters.bytes_to_client,
        ),
        (
            "tollgate_server_connect_failures_total",
            "counter",
            "Connects that failed or timed out.",
            |s| s.counters.connect_failures,
        ),
        (
            "tollgate_server_retries_total",
            "counter",
            "Attempts moved to another server after this one failed.",
            |s| s.counters.retries,
        ),
    ];
    for (name, kind, help, pick) in families {
        out.family(name, kind, help);
        for (g, m) in gens {
            for s in &m.metrics.servers {
                out.sample(
                    name,
                    &[("generation", g), ("backend", &s.backend), ("server", &s.name)],
                    pick(s),
                );
            }
        }
    }
    let name = "tollgate_server_responses_total";
    out.family(name, "counter", "Responses by status class.");
    for (g, m) in gens {
        for s in &m.metrics.servers {
            let c = &s.counters;
            let counts = [
                c.responses_1xx,
                c.responses_2xx,
                c.responses_3xx,
                c.responses_4xx,
                c.responses_5xx,
                c.responses_other,
            ];
            for (code, n) in RESPONSE_CLASSES.iter().zip(counts) {
                out.sample(
                    name,
                    &[
                        ("generation", g),
                        ("backend", &s.backend),
                        ("server", &s.name),
                        ("code", code),
                    ],
                    n,
                );
            }
        }
    }
}

/// `labels` without an empty `generation` (the merged series carry none).
fn labels_shown<'a>(labels: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    labels
        .iter()
        .filter(|(k, v)| !(*k == "generation" && v.is_empty()))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_escaping_are_exact() {
        assert_eq!(seconds(500), "0.0005");
        assert_eq!(seconds(1_000_000), "1");
        assert_eq!(seconds(2_500_000), "2.5");
        assert_eq!(seconds(0), "0");
        let mut s = String::new();
        escape(&mut s, "a\"b\\c\nd");
        assert_eq!(s, r#"a\"b\\c\nd"#);
    }
}
