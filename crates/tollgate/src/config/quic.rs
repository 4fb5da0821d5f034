//! `[frontend.quic]` and `[http3]`: HTTP/3 over QUIC beside a frontend's TCP binds, and the
//! limits of its connections (`quic` serves them).
//!
//! Refused at load: `[frontend.quic]` on a tcp-mode frontend (HTTP/3 carries requests) or
//! on one without `[frontend.tls]` (QUIC always runs TLS 1.3, with the frontend's
//! certificates), an empty `bind`, an address that is not `IP:port`, and a UDP address named
//! twice (in one frontend or across them; port 0, as for TCP binds, may repeat). A quic
//! address may share its port with a TCP bind: UDP and TCP ports are separate.
//! `global.workers` above 32 when a frontend has `[frontend.quic]`.
//! `[http3]`: counts out of range, windows outside QUIC's and HTTP/2's bounds, a connection
//! window smaller than a stream's, a zero idle timeout.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::file::{FrontendSection, ModeName};
use super::model::{Http3, Quic};
use super::units::{ByteSize, DurationValue};

type Errors = Vec<(Range<usize>, String, String)>;

/// `http3.max_concurrent_streams` at most: each open stream holds a proxied request.
const MAX_CONCURRENT_STREAMS: u32 = 1000;

/// `alt_svc_max_age` unless given: browsers remember the HTTP/3 endpoint for a day.
const DEFAULT_ALT_SVC_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// `[frontend.quic]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct QuicSection {
    /// UDP addresses, `IP:port` like the frontend's `bind`; required, non-empty.
    pub bind: Spanned<Vec<Spanned<String>>>,
    pub zero_rtt: Option<bool>,
    /// `Alt-Svc` lifetime on the frontend's HTTP/1 and HTTP/2 responses; "0s": none sent.
    pub alt_svc_max_age: Option<Spanned<DurationValue>>,
}

/// `[http3]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Http3Section {
    pub max_concurrent_streams: Option<Spanned<u32>>,
    pub stream_window: Option<Spanned<ByteSize>>,
    pub connection_window: Option<Spanned<ByteSize>>,
    pub max_field_section_size: Option<Spanned<ByteSize>>,
    pub idle_timeout: Option<Spanned<DurationValue>>,
    pub max_client_resets: Option<Spanned<u32>>,
    pub retry_above: Option<Spanned<u32>>,
}

/// The frontend's quic binds, or `None` when it has none or they are refused (errors
/// pushed). `bound`: the quic addresses of the frontends validated so far.
pub(super) fn quic(
    f: &FrontendSection,
    mode: ModeName,
    key: &str,
    bound: &mut HashSet<SocketAddr>,
    errors: &mut Errors,
) -> Option<Quic> {
    let section = f.quic.as_ref()?;
    let key = format!("{key}.quic");
    let before = errors.len();
    if mode != ModeName::Http {
        errors.push((
            section.span(),
            key.clone(),
            "`[frontend.quic]` needs an http-mode frontend (HTTP/3 carries requests)".into(),
        ));
    } else if let Some(tls) = &f.tls {
        // QUIC is TLS 1.3 only, and its Initial packets are sealed with
        // TLS13_AES_128_GCM_SHA256 (RFC 9001 §5.2): a policy without them cannot serve it.
        if let Some(v) = tls.max_version.as_ref().filter(|v| v.get_ref() == "1.2") {
            errors.push((
                v.span(),
                key.clone(),
                "`[frontend.quic]` needs TLS 1.3, which `tls.max_version = \"1.2\"` rules out".into(),
            ));
        }
        if let Some(suites) = tls.ciphersuites.as_ref()
            && !suites
                .get_ref()
                .iter()
                .any(|c| c.get_ref() == "TLS13_AES_128_GCM_SHA256")
        {
            errors.push((
                suites.span(),
                key.clone(),
                "`[frontend.quic]` needs TLS13_AES_128_GCM_SHA256 in `tls.ciphersuites` (QUIC's Initial packets use it)".into(),
            ));
        }
    } else {
        errors.push((
            section.span(),
            key.clone(),
            "`[frontend.quic]` needs `[frontend.tls]`: QUIC always runs TLS, with the frontend's certificates".into(),
        ));
    }
    let s = section.get_ref();
    if s.bind.get_ref().is_empty() {
        errors.push((
            s.bind.span(),
            format!("{key}.bind"),
            "needs at least one address".into(),
        ));
    }
    let mut binds = Vec::new();
    for (j, b) in s.bind.get_ref().iter().enumerate() {
        match b.get_ref().parse::<SocketAddr>() {
            Ok(addr) if addr.port() != 0 && !bound.insert(addr) => errors.push((
                b.span(),
                format!("{key}.bind[{j}]"),
                format!("UDP address {addr} is bound twice (quic binds must differ)"),
            )),
            Ok(addr) => binds.push(addr),
            Err(_) => errors.push((
                b.span(),
                format!("{key}.bind[{j}]"),
                format!(
                    "`{}` is not an IP:port address (e.g. \"0.0.0.0:443\" or \"[::]:443\")",
                    b.get_ref()
                ),
            )),
        }
    }
    if errors.len() > before {
        return None;
    }
    let alt_svc_max_age = s
        .alt_svc_max_age
        .as_ref()
        .map_or(DEFAULT_ALT_SVC_MAX_AGE, |d| d.get_ref().0);
    Some(Quic::new(binds, s.zero_rtt.unwrap_or(false), alt_svc_max_age))
}

/// Worker threads a connection ID can name (5 bits of its first byte, `quic::cid`).
pub(super) const MAX_QUIC_WORKERS: usize = 32;

/// With a `[frontend.quic]`, `global.workers` (when written) must fit the connection IDs'
/// thread bits: a thread they cannot name would be handed its connections' datagrams by
/// nobody. Only the written value is judged, so `check` says the same on every machine.
pub(super) fn workers_fit(file: &super::file::ConfigFile, errors: &mut Errors) {
    let Some(w) = &file.global.workers else { return };
    if *w.get_ref() > MAX_QUIC_WORKERS && file.frontend.iter().any(|f| f.quic.is_some()) {
        errors.push((
            w.span(),
            "global.workers".into(),
            format!(
                "must be at most {MAX_QUIC_WORKERS} with [frontend.quic] (a QUIC connection ID names its thread in 5 bits)"
            ),
        ));
    }
}

/// `[http3]` with defaults (`Http3::default()`) for what it does not say.
pub(super) fn http3(h: &Http3Section, errors: &mut Errors) -> Http3 {
    let mut out = Http3::default();
    // As `[http2]`'s windows (RFC 9113 6.5.2 bounds): one config reads the same for both.
    let sizes = [
        (
            "stream_window",
            &h.stream_window,
            &mut out.stream_window,
            65_535,
            (1 << 31) - 1,
        ),
        (
            "connection_window",
            &h.connection_window,
            &mut out.connection_window,
            65_535,
            (1 << 31) - 1,
        ),
        (
            "max_field_section_size",
            &h.max_field_section_size,
            &mut out.max_field_section_size,
            1024,
            1 << 20,
        ),
    ];
    for (key, value, slot, min, max) in sizes {
        let Some(v) = value else { continue };
        match u32::try_from(v.get_ref().0) {
            Ok(n) if (min..=max).contains(&n) => *slot = n,
            _ => errors.push((
                v.span(),
                format!("http3.{key}"),
                format!("must be within {min}..={max} bytes"),
            )),
        }
    }
    // A connection window below a stream's would make the stream window unreachable.
    if out.connection_window < out.stream_window {
        let span = h
            .connection_window
            .as_ref()
            .or(h.stream_window.as_ref())
            .map_or(0..0, Spanned::span);
        errors.push((
            span,
            "http3.connection_window".into(),
            format!("must be at least http3.stream_window ({} bytes)", out.stream_window),
        ));
    }
    if let Some(v) = &h.max_concurrent_streams {
        let n = *v.get_ref();
        if (1..=MAX_CONCURRENT_STREAMS).contains(&n) {
            out.max_concurrent_streams = n;
        } else {
            errors.push((
                v.span(),
                "http3.max_concurrent_streams".into(),
                format!("must be 1..={MAX_CONCURRENT_STREAMS}"),
            ));
        }
    }
    if let Some(v) = &h.max_client_resets {
        if *v.get_ref() == 0 {
            errors.push((
                v.span(),
                "http3.max_client_resets".into(),
                "must be greater than 0".into(),
            ));
        } else {
            out.max_client_resets = *v.get_ref();
        }
    }
    if let Some(v) = &h.idle_timeout {
        if v.get_ref().0.is_zero() {
            errors.push((v.span(), "http3.idle_timeout".into(), "must be greater than 0".into()));
        } else {
            out.idle_timeout = v.get_ref().0;
        }
    }
    // 0 is allowed: every new connection first proves its address (a Retry round trip).
    if let Some(v) = &h.retry_above {
        out.retry_above = *v.get_ref();
    }
    out
}
