//! Counters. Each worker owns one `WorkerStats` and is its only writer, so an increment is a
//! relaxed load and store on a cache line no other core writes (no lock, no `lock` prefix);
//! readers (the runtime API, tests, the periodic debug line) sum all workers into a `Snapshot`.
//!
//! Every counter is exact: each field's doc says what one unit is and where it is counted;
//! gauges (`*_active`, `*_in_use`, `*_waiters`) are counted out by a drop guard, so a
//! cancelled wait or a dropped session cannot leave them up. docs/architecture.md
//! ("Counters") says the same for operators.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A counter with a single writer thread and any number of readers.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed)
    }
    /// Only the owning worker may call this (a load + store, not an atomic add).
    #[inline]
    pub fn add(&self, n: u64) {
        self.set(self.get().wrapping_add(n))
    }
    #[inline]
    pub fn sub(&self, n: u64) {
        self.set(self.get().wrapping_sub(n))
    }
}

/// Polls a worker thread got through, for the watchdog (`runtime::watchdog`): bumped each
/// time a poll of a session's task (`counting_polls`), or of an HTTP/2 stream inside its
/// connection's task, returns, and by the watchdog's tick task. A poll that never returns
/// leaves it still; a thread busy with many short polls moves it. Written only by its worker
/// thread (a load and a store, like [`Counter`]) on a cache line of its own; read by the
/// watchdog thread once per tick.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Progress(Counter);

impl Progress {
    /// Only the owning worker may call this.
    #[inline]
    pub fn bump(&self) {
        self.0.add(1)
    }
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

pin_project_lite::pin_project! {
    /// `fut`, bumping `progress` each time one of its polls returns. A plain future around
    /// `fut` (polled where it lies): wrapping a session costs no copy of its state.
    pub struct CountingPolls<F> {
        progress: Arc<Progress>,
        #[pin]
        fut: F,
    }
}

/// Runs `fut`, bumping `progress` each time one of its polls returns.
pub fn counting_polls<F: Future>(progress: Arc<Progress>, fut: F) -> CountingPolls<F> {
    CountingPolls { progress, fut }
}

impl<F: Future> Future for CountingPolls<F> {
    type Output = F::Output;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        let this = self.project();
        let polled = this.fut.poll(cx);
        this.progress.bump();
        polled
    }
}

macro_rules! worker_stats {
    ($($(#[$doc:meta])* $field:ident),* $(,)?) => {
        /// One worker's counters (cache-line aligned so workers never share a line).
        #[derive(Debug, Default)]
        #[repr(align(128))]
        pub struct WorkerStats { $($(#[$doc])* pub $field: Counter,)* }

        /// The sum of every worker's counters at one moment.
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct Snapshot { $($(#[$doc])* pub $field: u64,)* }

        impl Snapshot {
            pub fn add(&mut self, w: &WorkerStats) {
                $(self.$field = self.$field.wrapping_add(w.$field.get());)*
            }

            /// `name=value` pairs, for the debug line and `show info`.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field),)*]
            }
        }
    };
}

worker_stats! {
    /// Client connections accepted (each becomes one session on one worker).
    sessions_total,
    /// Sessions open now (counted out when the session's task ends or is dropped). Unlike
    /// the maxconn budget, an accept loop's permit held while it waits in accept() is not here.
    sessions_active,
    /// Idle HTTP/1 client connections held in the worker's park now, outside any task
    /// (`global.park_idle_after`); they are in `sessions_active` too.
    sessions_parked,
    /// Times a connection was parked, handed back to a session (a request, a close, a first
    /// request's deadline), and closed in the park when its keep-alive time ran out.
    park_entered,
    park_resumed,
    park_expired,
    /// Connections this worker accepted on its own SO_REUSEPORT socket and handed to a less
    /// loaded worker (`connection_rebalance`); counted by the worker that accepted them.
    connections_rebalanced,
    /// Times an accept loop paused because a maxconn budget was full.
    accept_paused,
    accept_errors,
    /// Times an accept was delayed by `max_accept_rate`.
    accept_rate_delayed,
    /// Bytes written to servers and to clients: what the socket accepted (on a TLS side, the
    /// plaintext the TLS layer accepted; handshakes and record overhead are not counted).
    /// HTTP mode counts at the write: request and response heads as rewritten, bodies with
    /// their framing, interim and proxy-made responses, tunnelled bytes; never bytes read
    /// and dropped (a discarded request body).
    bytes_to_server,
    bytes_to_client,
    /// New server connections tried (pooled reuses are `http_pool_reused`), and those that
    /// failed or timed out.
    connect_attempts,
    connect_errors,
    /// Servers tried after a failed connect, for one session or request.
    connect_retries,
    /// Connections that waited for a server slot (server maxconn).
    server_queued,
    queue_timeouts,
    /// Requests refused at once (503; TCP: closed) because the backend's `maxqueue` requests
    /// were already waiting.
    queue_full,
    /// Transfers stopped because nothing moved for the idle timeout: TCP relays and
    /// tunnels (`min(client, server)`), HTTP bodies (`timeouts.client` / `timeouts.server`).
    idle_timeouts,
    /// Copy buffers allocated by this worker now (never more than its budget share), and
    /// those its pool freed again after lying unused (`buffer::BufferPool::trim`).
    buffers_allocated,
    buffers_released,
    buffers_in_use,
    /// Times a connection had to wait for a buffer, and how many wait now.
    buffer_waits,
    buffer_waiters,
    /// HTTP requests received: complete heads, including those then refused (413, no route).
    http_requests,
    /// HTTP/1 request heads that did not arrive in one read and waited for the rest (a
    /// slow client or a slowloris attempt); while they wait their bytes so far are on a
    /// shelf of their size, no buffer is held.
    http_heads_waited,
    /// Error responses tollgate made itself (400/408/413/431..., 502/503/504), whether or
    /// not the client was still there to read them; `return` routes are not errors.
    http_proxy_4xx,
    http_proxy_5xx,
    /// HTTP requests sent on a pooled server connection, and requests retried after a
    /// reused connection failed before any response byte.
    http_pool_reused,
    http_retries,
    /// Route rewrites not sent because a value rendered from the request could not be a
    /// field value (a control byte): a header field left out, or a redirect answered 400.
    http_rewrite_skipped,
    /// TLS handshakes (termination) in progress now, and times one waited for `max_handshakes`.
    tls_handshakes_active,
    tls_handshake_waits,
    /// TLS connections (termination) waiting now for their whole ClientHello, which costs no
    /// `max_handshakes` slot (`timeouts.client_hello` bounds the wait).
    tls_hello_waiting,
    /// TLS connections closed at accept because their source already had
    /// `global.max_handshakes_per_source` connections not through their handshake.
    tls_source_refused,
    /// Completed handshakes: full, and resumed (ticket or session cache).
    tls_handshakes_full,
    tls_handshakes_resumed,
    /// Failed handshakes by reason: timed out; protocol error or alert; no certificate for
    /// the SNI; peer closed or reset mid-handshake.
    tls_fail_timeout,
    tls_fail_protocol,
    tls_fail_no_cert,
    tls_fail_closed,
    /// Failed handshakes of `[frontend.tls.client_auth]`: no client certificate where one is
    /// required, or one that did not verify (unknown CA, expired, revoked by a CRL).
    tls_fail_client_cert,
    /// Completed handshakes (full and resumed) by the key-exchange group the client and
    /// the policy settled on; `tls_group_other`: another ML-KEM group. A resumed TLS 1.2
    /// session makes no key exchange and is in none of them.
    tls_group_x25519,
    tls_group_secp256r1,
    tls_group_secp384r1,
    tls_group_x25519mlkem768,
    tls_group_other,
    /// Completed handshakes by protocol version...
    tls_version_12,
    tls_version_13,
    /// ...and by cipher suite (TLS 1.3's three, then TLS 1.2's ECDHE suites).
    tls_suite_aes_128_gcm_sha256,
    tls_suite_aes_256_gcm_sha384,
    tls_suite_chacha20_poly1305_sha256,
    tls_suite_ecdhe_ecdsa_aes_128_gcm,
    tls_suite_ecdhe_rsa_aes_128_gcm,
    tls_suite_ecdhe_ecdsa_aes_256_gcm,
    tls_suite_ecdhe_rsa_aes_256_gcm,
    tls_suite_ecdhe_ecdsa_chacha20,
    tls_suite_ecdhe_rsa_chacha20,
    /// TLS handshakes to servers that failed.
    tls_backend_errors,
    /// Passthrough: ClientHellos that were truncated, oversized, not TLS or too slow.
    sni_inspect_failures,
    /// Connections closed because their SNI matched no route (`reject_unknown_sni`).
    sni_rejected,
    /// Connections closed at accept by a frontend's `allow` / `deny` lists, and TCP
    /// connections closed by a `deny = true` route.
    conn_denied,
    /// `accept_proxy` frontends, one per connection: a PROXY header with the client's
    /// address; a `LOCAL` (or `UNKNOWN`) header (the connection's own address stands).
    /// Closed: a peer outside `trusted_proxies` (nothing read); no header (other bytes
    /// came first, or a version not accepted); a malformed or oversized header; no whole
    /// header within `timeouts.proxy_header`; the client closed or reset first.
    proxy_header_accepted,
    proxy_header_local,
    proxy_header_untrusted,
    proxy_header_missing,
    proxy_header_malformed,
    proxy_header_timeout,
    proxy_header_closed,
    /// PROXY headers written on new server connections (`send_proxy`); the health checks'
    /// (`check_send_proxy`, written on the checker thread) are not counted.
    proxy_headers_sent,
    /// splice(2) pipes lent to relays now, and idle in this worker's pool.
    pipes_in_use,
    pipes_pooled,
    /// Responses being compressed now (`global.max_compressors` per worker); responses
    /// compressed (counted when their compressor starts); eligible responses sent as they
    /// were because the worker's compressors were all busy; bytes into and out of the
    /// compressors of finished responses (their ratio is the compression ratio).
    compressors_in_use,
    /// Route authentication (`auth`): requests checked; refused; let through by a cached
    /// success (no password check); password checks run (off the worker thread); checks
    /// in flight now (`global.max_auth_checks` per worker) and those that waited for a slot;
    /// forward checks that got no usable answer (the auth server unreachable, slow or
    /// malformed).
    auth_checks,
    auth_refused,
    auth_cache_hits,
    auth_verifications,
    auth_verifying,
    auth_verify_waits,
    auth_forward_failures,
    compressed_responses,
    compress_over_budget,
    compress_bytes_in,
    compress_bytes_out,
    /// Bytes moved with splice, any mode: TCP relays, HTTP tunnels, HTTP bodies (also
    /// counted in bytes_to_server / bytes_to_client).
    bytes_spliced,
    /// HTTP mode: bodies (requests and responses) whose rest moved with splice, and the
    /// bytes spliced for them (also in bytes_spliced; tunnels after a 101 are not here).
    http_bodies_spliced,
    http_bytes_spliced,
    /// TLS connections handed over to kernel TLS mid-stream.
    ktls_offloaded,
    /// Handovers that failed after the keys left rustls (the connection was closed).
    ktls_install_failures,
    /// kTLS connections closed because the peer sent a non-data record the kernel path does
    /// not handle (a TLS 1.3 KeyUpdate, for instance).
    ktls_unsupported_record,
    /// DNS lookups (a host name's addresses, an SRV name's records) that failed: timeout,
    /// no such name, no records. Counted by the discovery thread, in worker 0's counters
    /// (the only writer of these two fields).
    dns_failures,
    /// Server-set versions DNS discovery published (addresses, SRV servers or weights moved).
    dns_updates,
    /// Shared limits (`[shared]`), counted by the sync thread in worker 0's counters (the
    /// only writer of these): sync rounds Redis answered; rounds that failed (unreachable,
    /// no answer within `shared.timeout`, an error reply); outages (a failed round after a
    /// good one, or the first round failing); deltas (one key's count in one period) pushed;
    /// keys whose global totals were read back; deltas dropped unpushed (older than the
    /// window, or past the pending bound during an outage).
    shared_rounds,
    shared_rounds_failed,
    shared_outages,
    shared_keys_pushed,
    shared_keys_pulled,
    shared_deltas_dropped,
    /// 1 while Redis is unreachable (from the first failed round to the next good one).
    shared_redis_down,
    /// Access log lines dropped because the log's writer fell behind (its queue was full
    /// when this worker handed a buffer over): docs/logging.md.
    log_dropped,
    /// HTTP/2 client connections (ALPN h2 or h2c) and the streams they opened (each also
    /// an `http_requests`).
    h2_connections,
    h2_streams,
    /// HTTP/2 connections that went quiet for `park_idle_after` (no stream) and gave back
    /// what they kept for a burst: read buffer, spare stream slots, codec buffers.
    h2_quiet_released,
    /// HTTP/2 connections closed with GOAWAY ENHANCE_YOUR_CALM, by the `[http2]` limit they
    /// passed: client resets (rapid reset), resets tollgate was made to send (MadeYouReset),
    /// PING, SETTINGS, empty DATA, PRIORITY, WINDOW_UPDATE floods, and header blocks over
    /// their byte or frame bound (CONTINUATION flood), request heads over
    /// `max_header_list_size` (each answered 431 until the limit).
    h2_flood_client_resets,
    h2_flood_server_resets,
    h2_flood_pings,
    h2_flood_settings,
    h2_flood_empty_data,
    h2_flood_priority,
    h2_flood_window_updates,
    h2_flood_header_block,
    h2_flood_oversized_heads,
    /// HTTP/3 (`[frontend.quic]`): QUIC connections accepted (handshake done) and request
    /// streams they opened (each also an `http_requests`); datagrams read and written
    /// (a GSO/GRO batch counts its segments); datagrams read on this thread's socket for
    /// another thread's connection (forwarded to it), and those the owner's queue had no
    /// room for (dropped, as a full socket buffer drops them).
    quic_connections,
    quic_streams,
    quic_datagrams_in,
    quic_datagrams_out,
    quic_misrouted,
    quic_forward_dropped,
    /// New QUIC connections refused at a full `maxconn` (CONNECTION_REFUSED), asked to
    /// prove their address first (Retry, above `http3.retry_above` per second), and
    /// handshakes that failed or timed out.
    quic_refused,
    quic_retries,
    quic_handshake_failures,
    /// Packets the connections' loss detection declared lost, and HTTP/3 connections
    /// closed H3_EXCESSIVE_LOAD for resetting more than `http3.max_client_resets` streams.
    quic_lost_packets,
    quic_flood_client_resets,
    /// HTTP/3 request streams refused: a malformed head (H3_MESSAGE_ERROR), a head over
    /// `http3.max_field_section_size` (431, or stopped at its frame header), any other
    /// frame over its bound (`quic::guard`), 0-RTT requests of unsafe methods (425).
    h3_refused,
}

pub fn sum<'a>(workers: impl IntoIterator<Item = &'a WorkerStats>) -> Snapshot {
    let mut s = Snapshot::default();
    for w in workers {
        s.add(w);
    }
    s
}

/// The process's clock origin for frequency counters: writers and readers of one process
/// count seconds from the same instant.
static EPOCH: std::sync::LazyLock<std::time::Instant> = std::sync::LazyLock::new(std::time::Instant::now);

/// Milliseconds from the process's clock origin to `at` (a clock read the caller made anyway).
pub(crate) fn epoch_ms(at: std::time::Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(*EPOCH).as_millis()).unwrap_or(u64::MAX)
}

/// HAProxy's `freq_ctr`: events in the current second and in the one before, with a single
/// writer thread (relaxed loads and stores, no `lock` prefix, like [`Counter`]) and any
/// number of readers. A reader estimates the rate over the last second as HAProxy does:
/// the current second's count plus the previous second's, scaled by the part of it still
/// inside the window. `max` is the busiest completed second seen. Readers may see the
/// three fields of one rotation torn; the estimate is then off by one second's count, once.
#[derive(Debug, Default)]
pub struct FreqCtr {
    /// The second (since `EPOCH`) that `curr` counts.
    sec: Counter,
    curr: Counter,
    prev: Counter,
    max: Counter,
}

impl FreqCtr {
    pub const fn new() -> Self {
        FreqCtr {
            sec: Counter::new(),
            curr: Counter::new(),
            prev: Counter::new(),
            max: Counter::new(),
        }
    }

    /// One event at `now_ms` (`epoch_ms`). Only the owning thread may call this.
    #[inline]
    pub fn add(&self, now_ms: u64) {
        let sec = now_ms / 1000;
        let at = self.sec.get();
        if at != sec {
            self.rotate(at, sec);
        }
        self.curr.add(1);
    }

    #[cold]
    fn rotate(&self, at: u64, sec: u64) {
        let done = self.curr.get();
        self.max.set(self.max.get().max(done));
        self.prev.set(if at + 1 == sec { done } else { 0 });
        self.curr.set(0);
        self.sec.set(sec);
    }

    /// Events per second over the second before `now_ms`.
    pub fn rate(&self, now_ms: u64) -> u64 {
        let (sec, left) = (now_ms / 1000, 1000 - now_ms % 1000);
        let (at, curr, prev) = (self.sec.get(), self.curr.get(), self.prev.get());
        if at == sec {
            curr + prev * left / 1000
        } else if at + 1 == sec {
            curr * left / 1000
        } else {
            0
        }
    }

    /// The busiest second so far (the current one included).
    pub fn max(&self, now_ms: u64) -> u64 {
        self.max.get().max(self.rate(now_ms))
    }
}

#[cfg(test)]
mod freq_tests {
    use super::FreqCtr;

    #[test]
    fn rate_counts_this_second_and_fades_the_previous_one() {
        let f = FreqCtr::new();
        for _ in 0..10 {
            f.add(5_100);
        }
        assert_eq!(f.rate(5_900), 10);
        // Half of the next second gone: its 4 events plus half of the 10.
        for _ in 0..4 {
            f.add(6_200);
        }
        assert_eq!(f.rate(6_500), 4 + 5);
        assert_eq!(f.max(6_500), 10);
        // Two idle seconds later nothing is left of it.
        assert_eq!(f.rate(8_100), 0);
        f.add(9_000);
        assert_eq!((f.rate(9_000), f.max(9_000)), (1, 10));
    }
}
