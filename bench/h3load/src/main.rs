//! h3load: an HTTP/3 load client in the manner of h2load (Debian's h2load has no HTTP/3).
//!
//!     h3load [-n TOTAL | -D SECONDS] [-c CONNECTIONS] [-m STREAMS] [-t THREADS]
//!            [--insecure | --ca FILE] [-H 'Name: value']... [--connect ADDR:PORT]
//!            [--method M] [-d FILE] [--timeout SECONDS] [--log-file FILE] URL
//!
//! `-c` QUIC connections (each on its own UDP socket, so a server's SO_REUSEPORT group spreads
//! them), each keeping `-m` requests in flight on as many streams, spread over `-t` threads
//! (one `current_thread` runtime each). Requests are handed out one at a time from a shared
//! counter until `-n` are started or `-D` seconds have passed; `--timeout` (default 60 s, or
//! the duration + 30 s) ends the run whatever happens, counting what is still in flight as
//! timed out. The summary copies h2load's lines (`finished in`, `requests:`, `status codes:`,
//! so the runner's h2load parser reads it) and ends with one machine-readable line
//! `h3load: {json}`. `--log-file` writes h2load's per-request log: start (µs since the run
//! started), status, duration (µs), tab-separated; status -1 for a failed request.
//!
//! Exit status: 0 when every started request completed (any status), 1 when one failed or
//! timed out, or none completed, 2 for bad arguments.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};

const USAGE: &str = "usage: h3load [-n TOTAL | -D SECONDS] [-c CONNECTIONS] [-m STREAMS] [-t THREADS] \
[--insecure | --ca FILE] [-H 'Name: value']... [--connect ADDR:PORT] [--method M] [-d FILE] \
[--timeout SECONDS] [--log-file FILE] URL";

struct Args {
    total: Option<u64>,
    duration: Option<Duration>,
    conns: usize,
    streams: usize,
    threads: usize,
    insecure: bool,
    ca: Option<String>,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    connect: Option<SocketAddr>,
    method: http::Method,
    data: Option<Bytes>,
    timeout: Duration,
    log_file: Option<String>,
    url: http::Uri,
}

fn parse_args() -> Result<Args, String> {
    let mut a = std::env::args().skip(1);
    let (mut total, mut duration, mut conns, mut streams, mut threads) = (None, None, 1, 1, 1);
    let (mut insecure, mut ca, mut headers, mut connect) = (false, None, Vec::new(), None);
    let (mut method, mut data, mut timeout, mut log_file, mut url) = (http::Method::GET, None, None, None, None);
    fn num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
        v.parse().map_err(|_| format!("{flag}: not a number: {v}"))
    }
    while let Some(arg) = a.next() {
        // h2load's glued forms too: -n100, -c10, -m10, -D5, -t1.
        let (flag, glued) = match arg.as_str() {
            s if s.len() > 2 && s.starts_with('-') && !s.starts_with("--") => {
                (s[..2].to_string(), Some(s[2..].to_string()))
            }
            s => match s.split_once('=') {
                Some((f, v)) if s.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (s.to_string(), None),
            },
        };
        let mut val = || glued.clone().or_else(|| a.next());
        match flag.as_str() {
            "-n" | "--requests" => total = Some(num::<u64>(&flag, val())?),
            "-D" | "--duration" => {
                duration = Some(Duration::from_secs_f64(num::<f64>(&flag, val())?));
            }
            "-c" | "--clients" => conns = num(&flag, val())?,
            "-m" | "--max-concurrent-streams" => streams = num(&flag, val())?,
            "-t" | "--threads" => threads = num(&flag, val())?,
            "-k" | "--insecure" => insecure = true,
            "--ca" => ca = Some(val().ok_or("--ca needs a file")?),
            "-H" | "--header" => {
                let h = val().ok_or("-H needs 'Name: value'")?;
                let (n, v) = h.split_once(':').ok_or_else(|| format!("-H {h}: no ':'"))?;
                let n = http::HeaderName::from_bytes(n.trim().to_ascii_lowercase().as_bytes())
                    .map_err(|e| format!("-H {h}: {e}"))?;
                let v = http::HeaderValue::from_str(v.trim()).map_err(|e| format!("-H {h}: {e}"))?;
                headers.push((n, v));
            }
            "--connect" => {
                let v = val().ok_or("--connect needs ADDR:PORT")?;
                connect = Some(v.parse().map_err(|e| format!("--connect {v}: {e}"))?);
            }
            "--method" => {
                let v = val().ok_or("--method needs a value")?;
                method = v.parse().map_err(|e| format!("--method {v}: {e}"))?;
            }
            "-d" | "--data" => {
                let f = val().ok_or("-d needs a file")?;
                data = Some(Bytes::from(std::fs::read(&f).map_err(|e| format!("-d {f}: {e}"))?));
            }
            "--timeout" => timeout = Some(Duration::from_secs_f64(num::<f64>(&flag, val())?)),
            "--log-file" => log_file = Some(val().ok_or("--log-file needs a file")?),
            "-h" | "--help" => return Err(String::new()),
            s if s.starts_with('-') => return Err(format!("unknown flag {s}")),
            _ => {
                if url.is_some() {
                    return Err(format!("a second URL: {arg}"));
                }
                url = Some(arg.parse::<http::Uri>().map_err(|e| format!("{arg}: {e}"))?);
            }
        }
    }
    let url = url.ok_or("no URL")?;
    if url.scheme_str() != Some("https") || url.host().is_none() {
        return Err(format!("{url}: https://HOST[:PORT]/PATH wanted"));
    }
    if total.is_none() && duration.is_none() {
        return Err("give -n TOTAL or -D SECONDS".into());
    }
    if conns == 0 || streams == 0 || threads == 0 {
        return Err("-c, -m and -t must be at least 1".into());
    }
    if !insecure && ca.is_none() {
        return Err("give --ca FILE (the server's CA or certificate) or --insecure".into());
    }
    // data with GET: h2load switches to POST; so do we, unless --method was given.
    if data.is_some() && method == http::Method::GET {
        method = http::Method::POST;
    }
    let timeout = timeout.unwrap_or_else(|| duration.map_or(Duration::from_secs(60), |d| d + Duration::from_secs(30)));
    Ok(Args {
        total,
        duration,
        conns,
        streams,
        threads: threads.min(conns),
        insecure,
        ca,
        headers,
        connect,
        method,
        data,
        timeout,
        log_file,
        url,
    })
}

/// Accepts any certificate, but still checks the handshake signature against it.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &rustls_pki_types::CertificateDer<'_>,
        _: &[rustls_pki_types::CertificateDer<'_>],
        _: &rustls_pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn client_config(args: &Args) -> Result<quinn::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?;
    let mut tls = if args.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth()
    } else {
        use rustls_pki_types::pem::PemObject as _;
        let ca = args.ca.as_deref().unwrap_or_default();
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pki_types::CertificateDer::pem_file_iter(ca).map_err(|e| format!("--ca {ca}: {e}"))? {
            roots
                .add(c.map_err(|e| format!("--ca {ca}: {e}"))?)
                .map_err(|e| format!("--ca {ca}: {e}"))?;
        }
        if roots.is_empty() {
            return Err(format!("--ca {ca}: no certificate in it"));
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(quic));
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(
        quinn::IdleTimeout::try_from(Duration::from_secs(10)).map_err(|e| e.to_string())?,
    ));
    cfg.transport_config(Arc::new(transport));
    Ok(cfg)
}

/// What all threads share: the request counter and the stop conditions.
struct Plan {
    limit: u64,
    started: AtomicU64,
    deadline: Option<Instant>,
    stop: AtomicBool,
    t0: Instant,
}

impl Plan {
    /// Claims one request, or None when the run is over.
    fn claim(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) || self.deadline.is_some_and(|d| Instant::now() >= d) {
            return false;
        }
        self.started.fetch_add(1, Ordering::Relaxed) < self.limit
    }
}

#[derive(Default)]
struct Stats {
    done: u64,
    status: [u64; 6], // index = status / 100 (0 unused)
    errored: u64,
    body_bytes: u64,
    latencies_us: Vec<u32>,
    log: Vec<(u64, i32, u64)>,
    connections_ok: u64,
    connect_errors: u64,
    first_error: Option<String>,
    first_done: Option<Instant>,
    last_done: Option<Instant>,
}

impl Stats {
    fn error(&mut self, e: String) {
        if self.first_error.is_none() {
            self.first_error = Some(e);
        }
    }
    fn merge(&mut self, o: Stats) {
        self.done += o.done;
        for (a, b) in self.status.iter_mut().zip(o.status) {
            *a += b;
        }
        self.errored += o.errored;
        self.body_bytes += o.body_bytes;
        self.latencies_us.extend(o.latencies_us);
        self.log.extend(o.log);
        self.connections_ok += o.connections_ok;
        self.connect_errors += o.connect_errors;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
        self.first_done = match (self.first_done, o.first_done) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_done = self.last_done.max(o.last_done);
    }
}

struct Target {
    addr: SocketAddr,
    server_name: String,
    cfg: quinn::ClientConfig,
    template: http::request::Parts,
    data: Option<Bytes>,
    want_log: bool,
}

async fn one_request(
    sr: &mut h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    t: &Target,
) -> Result<(u16, u64), String> {
    let mut req = http::Request::new(());
    *req.method_mut() = t.template.method.clone();
    *req.uri_mut() = t.template.uri.clone();
    *req.headers_mut() = t.template.headers.clone();
    let mut s = sr.send_request(req).await.map_err(|e| format!("send_request: {e}"))?;
    if let Some(d) = &t.data {
        s.send_data(d.clone()).await.map_err(|e| format!("send_data: {e}"))?;
    }
    s.finish().await.map_err(|e| format!("finish: {e}"))?;
    let resp = s.recv_response().await.map_err(|e| format!("recv_response: {e}"))?;
    let mut n = 0u64;
    while let Some(chunk) = s.recv_data().await.map_err(|e| format!("recv_data: {e}"))? {
        n += chunk.remaining() as u64;
    }
    Ok((resp.status().as_u16(), n))
}

async fn connection(plan: Arc<Plan>, t: Rc<Target>, streams: usize, stats: Rc<RefCell<Stats>>) {
    let bind: SocketAddr = if t.addr.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" }
        .parse()
        .unwrap_or_else(|_| unreachable!());
    let setup = async {
        let mut ep = quinn::Endpoint::client(bind).map_err(|e| format!("bind: {e}"))?;
        ep.set_default_client_config(t.cfg.clone());
        let conn = ep
            .connect(t.addr, &t.server_name)
            .map_err(|e| format!("connect: {e}"))?
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let (driver, sr) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
            .await
            .map_err(|e| format!("h3: {e}"))?;
        Ok::<_, String>((ep, conn, driver, sr))
    };
    let (ep, conn, mut driver, sr) = match setup.await {
        Ok(x) => x,
        Err(e) => {
            let mut s = stats.borrow_mut();
            s.connect_errors += 1;
            s.error(e);
            return;
        }
    };
    stats.borrow_mut().connections_ok += 1;
    let drive = tokio::task::spawn_local(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    let mut tasks = Vec::with_capacity(streams);
    for _ in 0..streams {
        let (plan, t, stats, conn) = (plan.clone(), t.clone(), stats.clone(), conn.clone());
        let mut sr = sr.clone();
        tasks.push(tokio::task::spawn_local(async move {
            while conn.close_reason().is_none() && plan.claim() {
                let start = Instant::now();
                let r = one_request(&mut sr, &t).await;
                let end = Instant::now();
                let us = u64::try_from((end - start).as_micros()).unwrap_or(u64::MAX);
                let mut s = stats.borrow_mut();
                let status = match r {
                    Ok((status, bytes)) => {
                        s.done += 1;
                        s.body_bytes += bytes;
                        if let Some(c) = s.status.get_mut(usize::from(status / 100)) {
                            *c += 1;
                        }
                        s.latencies_us.push(u32::try_from(us).unwrap_or(u32::MAX));
                        s.first_done = s.first_done.or(Some(end));
                        s.last_done = Some(end);
                        i32::from(status)
                    }
                    Err(e) => {
                        s.errored += 1;
                        s.error(e);
                        -1
                    }
                };
                if t.want_log {
                    let at = u64::try_from((start - plan.t0).as_micros()).unwrap_or(u64::MAX);
                    s.log.push((at, status, us));
                }
            }
        }));
    }
    drop(sr);
    for task in tasks {
        let _ = task.await;
    }
    conn.close(h3_no_error(), b"done");
    drive.abort();
    let _ = tokio::time::timeout(Duration::from_millis(500), ep.wait_idle()).await;
}

fn h3_no_error() -> quinn::VarInt {
    quinn::VarInt::from_u32(0x100)
}

fn percentile(sorted: &[u32], q: u64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len() as u64;
    let k = (n * q).div_ceil(100).saturating_sub(1).min(n - 1);
    sorted.get(usize::try_from(k).ok()?).copied()
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn ms(us: Option<u32>) -> String {
    us.map_or_else(|| "null".into(), |v| format!("{:.3}", f64::from(v) / 1000.0))
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("h3load: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    match run(args) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("h3load: {e}");
            std::process::exit(2);
        }
    }
}

fn run(args: Args) -> Result<bool, String> {
    let cfg = client_config(&args)?;
    let host = args
        .url
        .host()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = args.url.port_u16().unwrap_or(443);
    let addr = match args.connect {
        Some(a) => a,
        None => (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| format!("{host}: {e}"))?
            .next()
            .ok_or_else(|| format!("{host}: no address"))?,
    };
    let mut req = http::Request::builder()
        .method(args.method.clone())
        .uri(args.url.clone());
    let has_ua = args.headers.iter().any(|(n, _)| n == http::header::USER_AGENT);
    for (n, v) in &args.headers {
        req = req.header(n, v);
    }
    if !has_ua {
        req = req.header(http::header::USER_AGENT, "h3load");
    }
    if let Some(d) = &args.data {
        req = req.header(http::header::CONTENT_LENGTH, d.len());
    }
    let (template, ()) = req.body(()).map_err(|e| e.to_string())?.into_parts();

    let t0 = Instant::now();
    let plan = Arc::new(Plan {
        limit: args.total.unwrap_or(u64::MAX),
        started: AtomicU64::new(0),
        deadline: args.duration.map(|d| t0 + d),
        stop: AtomicBool::new(false),
        t0,
    });
    println!("starting benchmark...");
    println!(
        "spawning thread(s): {} connection(s), {} stream(s) each, {} thread(s), to {addr}",
        args.conns, args.streams, args.threads
    );
    let mut handles = Vec::new();
    for th in 0..args.threads {
        let conns = (th..args.conns).step_by(args.threads).count();
        let plan = plan.clone();
        let (cfg, server_name, template, data) = (cfg.clone(), host.clone(), template.clone(), args.data.clone());
        let (streams, timeout, want_log) = (args.streams, args.timeout, args.log_file.is_some());
        handles.push(std::thread::spawn(move || -> Result<(Stats, bool), String> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            let local = tokio::task::LocalSet::new();
            let stats = Rc::new(RefCell::new(Stats::default()));
            let t = Rc::new(Target {
                addr,
                server_name,
                cfg,
                template,
                data,
                want_log,
            });
            let s2 = stats.clone();
            let finished = local.block_on(&rt, async move {
                let all = (0..conns)
                    .map(|_| tokio::task::spawn_local(connection(plan.clone(), t.clone(), streams, s2.clone())));
                let all: Vec<_> = all.collect();
                let wait = async {
                    for h in all {
                        let _ = h.await;
                    }
                };
                let ok = tokio::time::timeout(timeout.saturating_sub(t0.elapsed()), wait)
                    .await
                    .is_ok();
                if !ok {
                    plan.stop.store(true, Ordering::Relaxed);
                }
                ok
            });
            drop(local);
            let s = Rc::try_unwrap(stats).map(RefCell::into_inner).unwrap_or_else(|rc| {
                // Tasks cut by the timeout may still hold a reference: take a copy of the counts.
                let mut b = rc.borrow_mut();
                std::mem::take(&mut *b)
            });
            Ok((s, finished))
        }));
    }
    let mut stats = Stats::default();
    let mut timed_out = false;
    for h in handles {
        let (s, finished) = h.join().map_err(|_| "a thread panicked".to_string())??;
        stats.merge(s);
        timed_out |= !finished;
    }
    let elapsed = t0.elapsed();
    let started = plan.started.load(Ordering::Relaxed).min(plan.limit);
    let total = args.total.unwrap_or(started);
    let timeouts = started.saturating_sub(stats.done + stats.errored);
    let succeeded = stats.status[2] + stats.status[3];
    let failed = total.saturating_sub(succeeded);
    let secs = elapsed.as_secs_f64();
    let rps = if secs > 0.0 { stats.done as f64 / secs } else { 0.0 };
    stats.latencies_us.sort_unstable();
    let lat = &stats.latencies_us;
    let (p50, p90, p99) = (percentile(lat, 50), percentile(lat, 90), percentile(lat, 99));
    let (min, max) = (lat.first().copied(), lat.last().copied());

    println!();
    println!(
        "finished in {secs:.2}s, {rps:.2} req/s, {:.2}MB/s",
        stats.body_bytes as f64 / secs.max(1e-9) / 1e6
    );
    println!(
        "requests: {total} total, {started} started, {} done, {succeeded} succeeded, {failed} failed, {} errored, {timeouts} timeout",
        stats.done, stats.errored
    );
    println!(
        "status codes: {} 2xx, {} 3xx, {} 4xx, {} 5xx",
        stats.status[2], stats.status[3], stats.status[4], stats.status[5]
    );
    println!("traffic: {} bytes of response bodies", stats.body_bytes);
    println!(
        "connections: {} established, {} failed",
        stats.connections_ok, stats.connect_errors
    );
    println!("Application protocol: h3");
    println!(
        "latency (ms): min {}, p50 {}, p90 {}, p99 {}, max {}",
        ms(min),
        ms(p50),
        ms(p90),
        ms(p99),
        ms(max)
    );
    if let Some(e) = &stats.first_error {
        println!("first error: {e}");
    }
    if timed_out {
        println!(
            "timeout: the run was cut at {:.1}s (--timeout)",
            args.timeout.as_secs_f64()
        );
    }
    if let Some(path) = &args.log_file {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| format!("{path}: {e}"))?);
        stats.log.sort_unstable();
        for (at, status, us) in &stats.log {
            writeln!(f, "{at}\t{status}\t{us}").map_err(|e| format!("{path}: {e}"))?;
        }
        f.flush().map_err(|e| format!("{path}: {e}"))?;
    }
    let first_error = stats.first_error.as_deref().map_or_else(|| "null".into(), json_str);
    println!(
        "h3load: {{\"total\":{total},\"started\":{started},\"done\":{},\"succeeded\":{succeeded},\"failed\":{failed},\
\"errored\":{},\"timeout\":{timeouts},\"status\":{{\"2xx\":{},\"3xx\":{},\"4xx\":{},\"5xx\":{}}},\
\"elapsed_s\":{secs:.6},\"rps\":{rps:.2},\"body_bytes\":{},\"connections\":{},\"connect_errors\":{},\
\"streams_per_connection\":{},\"threads\":{},\"min_ms\":{},\"p50_ms\":{},\"p90_ms\":{},\"p99_ms\":{},\"max_ms\":{},\
\"timed_out\":{timed_out},\"first_error\":{first_error}}}",
        stats.done,
        stats.errored,
        stats.status[2],
        stats.status[3],
        stats.status[4],
        stats.status[5],
        stats.body_bytes,
        stats.connections_ok,
        stats.connect_errors,
        args.streams,
        args.threads,
        ms(min),
        ms(p50),
        ms(p90),
        ms(p99),
        ms(max)
    );
    let _ = std::io::stdout().flush();
    Ok(stats.errored == 0 && timeouts == 0 && stats.done > 0 && stats.done == started)
}
