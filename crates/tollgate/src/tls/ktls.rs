//! Kernel TLS: whether this kernel has the `tls` ULP, decided once per process.
//!
//! The probe runs at startup (when some frontend enables `[frontend.tls.ktls]`), before any
//! handshake: once a handshake's secrets were extracted there is no way back to userspace,
//! so the choice must be made first. Without the ULP the frontend serves with userspace
//! rustls and says so once in the log.

use std::sync::OnceLock;

/// `Ok` if kTLS can be used; the reason otherwise. Probes and logs only the first time.
pub fn available() -> Result<(), &'static str> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    let result = PROBE.get_or_init(|| {
        let r = tollgate_sys::sockopt::probe_ktls();
        match &r {
            Ok(()) => tracing::info!("kernel TLS available"),
            Err(reason) => {
                tracing::warn!(%reason, "kTLS enabled in the config but unavailable; serving TLS with userspace rustls")
            }
        }
        r
    });
    result.as_ref().map(|_| ()).map_err(String::as_str)
}
