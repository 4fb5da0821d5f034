//! Keeping a generation's certificates fresh without a reload: one thread per worker
//! process (started when some `[[frontend.tls.cert]]` has `watch` or `ocsp_fetch`), waking
//! every [`POLL`].
//!
//! - `watch`: each watched certificate's files (cert, key, `CERT.ocsp`) are stamped (mtime,
//!   size, inode); a pair whose stamps changed and then held still for one poll (so a writer
//!   that is not done yet is not read half-way) is read and checked like `ctl set cert`, and
//!   swapped into its slot of the store. A bad pair is refused with a warning and the old
//!   certificate keeps serving; it is tried again when its files change again.
//! - `ocsp_fetch`: the certificate in each such slot gets its OCSP response from the
//!   responder in its Authority Information Access (HTTP POST, `application/ocsp-request`;
//!   plain HTTP only, as responders serve), checked (`config::ocsp`) and stapled through the
//!   store; fetched again halfway through what is left of the response's life, after a
//!   failure with a doubling delay ([`RETRY_FIRST`] up to [`RETRY_MAX`]). A swapped-in
//!   certificate is fetched for at once.
//!
//! Invariants: this thread never blocks a worker thread — it writes to the stores only
//! (`config::cert_store`), whose readers never lock; every network step has a timeout and a
//! size bound. Reading files after `[global] user` dropped privileges: the watched files
//! must be readable by that user.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::config::cert_store::{CertEntry, CertSource, CertStore, same_file, unix_now};
use crate::config::model::CertFiles;

/// How often files are stamped and fetches checked for being due.
pub(crate) const POLL: Duration = Duration::from_secs(1);
/// The first delay after a failed fetch, doubled per failure up to `RETRY_MAX`.
pub(crate) const RETRY_FIRST: Duration = Duration::from_secs(5);
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(600);
/// Longest wait between two fetches of a response that gives no nextUpdate (or a far one).
const REFRESH_MAX: i64 = 86_400;
/// Connecting, writing and reading a responder's answer, each.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest responder answer read (head and body).
const MAX_RESPONSE: usize = 64 * 1024;

/// Stops the thread when dropped.
pub(crate) struct Handle {
    _stop: std::sync::mpsc::Sender<()>,
}

/// Starts the thread if any certificate of `config` asks for it.
pub(crate) fn start(config: &Config) -> std::io::Result<Option<Handle>> {
    let mut slots = Vec::new();
    for f in &config.frontends {
        let Some(tls) = &f.tls else { continue };
        for files in tls.files.iter().filter(|c| c.watch || c.ocsp_fetch) {
            slots.push(Slot::new(Arc::clone(&tls.certs), files.clone()));
        }
    }
    if slots.is_empty() {
        return Ok(None);
    }
    let (stop, stopped) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("tollgate-certs".into())
        .spawn(move || run(slots, &stopped))?;
    Ok(Some(Handle { _stop: stop }))
}

/// A file's identity and state: a rewrite (or a rename over it) changes one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<std::time::SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: m.modified().ok(),
        len: m.len(),
        inode: m.ino(),
    })
}

type Stamps = [Option<Stamp>; 3];

/// One configured certificate this thread looks after.
struct Slot {
    store: Arc<CertStore>,
    files: CertFiles,
    /// What was last read (or found at start), and what the previous poll saw.
    applied: Stamps,
    seen: Stamps,
    /// `ocsp_fetch`: the certificate the last fetch was for, when the next one is due, and
    /// the delay after the next failure.
    fetched_for: Option<[u8; 32]>,
    fetch_at: Instant,
    retry: Duration,
    /// Said once that this certificate cannot be fetched for (no issuer, no responder).
    unfetchable: Option<[u8; 32]>,
}

impl Slot {
    fn new(store: Arc<CertStore>, files: CertFiles) -> Self {
        let stamps = stamps(&files);
        Slot {
            store,
            files,
            applied: stamps,
            seen: stamps,
            fetched_for: None,
            fetch_at: Instant::now(),
            retry: RETRY_FIRST,
            unfetchable: None,
        }
    }

    /// The store's entry for this slot now (another writer may have replaced it).
    fn entry(&self) -> Option<CertEntry> {
        self.store
            .entries()
            .into_iter()
            .find(|e| e.configured.as_deref().is_some_and(|c| same_file(c, &self.files.cert)))
    }
}

fn stamps(files: &CertFiles) -> Stamps {
    [stamp(&files.cert), stamp(&files.key), stamp(&files.ocsp_path())]
}

fn run(mut slots: Vec<Slot>, stopped: &std::sync::mpsc::Receiver<()>) {
    loop {
        match stopped.recv_timeout(POLL) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        for slot in &mut slots {
            if slot.files.watch {
                watch(slot);
            }
            if slot.files.ocsp_fetch {
                fetch_if_due(slot);
            }
        }
    }
}

/// Swaps in the slot's files once they changed and then held still for a poll.
fn watch(slot: &mut Slot) {
    let now = stamps(&slot.files);
    let settled = now == slot.seen;
    slot.seen = now;
    if !settled || now == slot.applied {
        return;
    }
    slot.applied = now;
    let frontend = slot.store.frontend().to_string();
    match reload_files(&slot.store, &slot.files) {
        Ok(text) => tracing::info!("certificate file watch: {text}"),
        Err(e) => tracing::warn!(
            "certificate file watch: frontend {frontend}: {} refused, the previous certificate keeps serving: {e}",
            slot.files.cert.display()
        ),
    }
}

/// Reads the slot's pair (and its `.ocsp`), checks it and swaps it in.
fn reload_files(store: &CertStore, files: &CertFiles) -> Result<String, String> {
    let cert_pem = crate::config::tls::read(&files.cert)?;
    let key_pem = crate::config::tls::read(&files.key)?;
    let ocsp = crate::config::bounded::read_bounded(&files.ocsp_path(), crate::config::bounded::MAX_OCSP).ok();
    let (loaded, note) = crate::config::tls::runtime_cert(&cert_pem, &key_pem, ocsp, &files.cert, &files.key)?;
    let source = CertSource::File {
        cert: files.cert.clone(),
        key: files.key.clone(),
    };
    let done = store.replace_configured(&files.cert, loaded.key, source)?;
    let mut text = format!(
        "frontend {}: {} swapped in ({})",
        store.frontend(),
        files.cert.display(),
        done.names.join(", ")
    );
    if let Some(note) = note {
        text.push_str("; ");
        text.push_str(&note);
    }
    Ok(text)
}

fn fetch_if_due(slot: &mut Slot) {
    let Some(entry) = slot.entry() else { return };
    let fingerprint = entry.facts.sha256;
    // A certificate swapped in since the last fetch gets its response now.
    if slot.fetched_for != Some(fingerprint) {
        slot.fetch_at = Instant::now();
        slot.retry = RETRY_FIRST;
    }
    if Instant::now() < slot.fetch_at || slot.unfetchable == Some(fingerprint) {
        return;
    }
    let Some((url, request)) = prepare(&entry) else {
        tracing::warn!(
            "ocsp_fetch: frontend {}: {} has no OCSP responder URL or no issuer certificate in its chain: nothing fetched",
            slot.store.frontend(),
            slot.files.cert.display()
        );
        slot.unfetchable = Some(fingerprint);
        return;
    };
    slot.fetched_for = Some(fingerprint);
    let outcome = post(&url, &request).and_then(|response| {
        let staple = crate::config::ocsp::validate(&response, &entry.facts.serial, unix_now())?;
        Ok((slot.store.set_staple(&fingerprint, Some(response)), staple))
    });
    match outcome {
        Ok((true, staple)) => {
            slot.store.ocsp_fetch_ok.fetch_add(1, Ordering::Relaxed);
            let now = unix_now();
            let at = crate::config::ocsp::refresh_at(&staple, now, REFRESH_MAX);
            slot.fetch_at = Instant::now() + Duration::from_secs(u64::try_from(at - now).unwrap_or(60));
            slot.retry = RETRY_FIRST;
            tracing::info!(
                "ocsp_fetch: frontend {}: {} stapled a fresh response from {url} (next fetch in {} s)",
                slot.store.frontend(),
                slot.files.cert.display(),
                at - now
            );
        }
        // Replaced while fetching: the next poll fetches for the new one.
        Ok(_) => slot.fetched_for = None,
        Err(e) => {
            slot.store.ocsp_fetch_failed.fetch_add(1, Ordering::Relaxed);
            slot.fetch_at = Instant::now() + slot.retry;
            tracing::warn!(
                "ocsp_fetch: frontend {}: {} from {url}: {e} (retry in {:?})",
                slot.store.frontend(),
                slot.files.cert.display(),
                slot.retry
            );
            slot.retry = (slot.retry * 2).min(RETRY_MAX);
        }
    }
}

/// The responder's URL and the request for `entry`'s leaf (its issuer is the chain's next).
fn prepare(entry: &CertEntry) -> Option<(String, Vec<u8>)> {
    let url = entry.facts.ocsp_url.clone()?;
    let leaf = entry.key.cert.first()?;
    let issuer = entry.key.cert.get(1)?;
    Some((url, crate::config::ocsp::request(leaf, issuer)?))
}

/// `http://host[:port]/path` → `(host, port, path)`.
fn split_url(url: &str) -> Result<(String, u16, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("`{url}`: only http:// responders are supported"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (rest.get(..i).unwrap_or_default(), rest.get(i..).unwrap_or("/")),
        None => (rest, "/"),
    };
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']').ok_or_else(|| format!("`{url}`: bad address"))?;
            match after.strip_prefix(':') {
                Some(p) => (host, p.parse().map_err(|_| format!("`{url}`: bad port"))?),
                None if after.is_empty() => (host, 80),
                None => return Err(format!("`{url}`: bad address")),
            }
        }
        None => match authority.split_once(':') {
            Some((h, p)) => (h, p.parse().map_err(|_| format!("`{url}`: bad port"))?),
            None => (authority, 80),
        },
    };
    if host.is_empty() {
        return Err(format!("`{url}`: no host"));
    }
    Ok((host.to_string(), port, path.to_string()))
}

/// POSTs `request` to the responder at `url`; the body of its 200 answer.
fn post(url: &str, request: &[u8]) -> Result<Vec<u8>, String> {
    let (host, port, path) = split_url(url)?;
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| format!("resolving {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}: no address"))?;
    let mut stream = TcpStream::connect_timeout(&addr, FETCH_TIMEOUT).map_err(|e| format!("connecting: {e}"))?;
    let io = |e: std::io::Error| format!("talking to the responder: {e}");
    stream.set_read_timeout(Some(FETCH_TIMEOUT)).map_err(io)?;
    stream.set_write_timeout(Some(FETCH_TIMEOUT)).map_err(io)?;
    let authority = if port == 80 {
        host.clone()
    } else {
        format!("{host}:{port}")
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/ocsp-request\r\nAccept: application/ocsp-response\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        request.len()
    );
    stream.write_all(head.as_bytes()).map_err(io)?;
    stream.write_all(request).map_err(io)?;
    let mut answer = Vec::new();
    stream
        .take(MAX_RESPONSE as u64 + 1)
        .read_to_end(&mut answer)
        .map_err(io)?;
    if answer.len() > MAX_RESPONSE {
        return Err(format!("the answer is over {MAX_RESPONSE} bytes"));
    }
    body_of(&answer)
}

/// The body of a complete `200` answer read to the connection's close.
fn body_of(answer: &[u8]) -> Result<Vec<u8>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut parsed = httparse::Response::new(&mut headers);
    let head_len = match parsed.parse(answer) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err("the responder closed mid-answer".into()),
        Err(e) => return Err(format!("a malformed HTTP answer: {e}")),
    };
    if parsed.code != Some(200) {
        return Err(format!("the responder answered HTTP {}", parsed.code.unwrap_or(0)));
    }
    let header = |name: &str| {
        parsed
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
    };
    if header("transfer-encoding").is_some() {
        return Err("a chunked answer (responders send a length)".into());
    }
    let body = answer.get(head_len..).unwrap_or_default();
    match header("content-length").map(|v| v.parse::<usize>()) {
        Some(Ok(n)) if n <= body.len() => Ok(body.get(..n).unwrap_or_default().to_vec()),
        Some(Ok(_)) => Err("the answer is shorter than its Content-Length".into()),
        Some(Err(_)) => Err("a bad Content-Length".into()),
        None => Ok(body.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn responder_urls_split() {
        assert_eq!(
            split_url("http://127.0.0.1:8888/ocsp").unwrap(),
            ("127.0.0.1".into(), 8888, "/ocsp".into())
        );
        assert_eq!(
            split_url("http://ocsp.example").unwrap(),
            ("ocsp.example".into(), 80, "/".into())
        );
        assert_eq!(split_url("http://[::1]:81/").unwrap(), ("::1".into(), 81, "/".into()));
        assert_eq!(split_url("http://[::1]/x").unwrap(), ("::1".into(), 80, "/x".into()));
        assert!(split_url("https://ocsp.example/").unwrap_err().contains("http://"));
        assert!(split_url("http://:80/").is_err());
        assert!(split_url("http://a:x/").is_err());
    }

    #[test]
    fn answers_are_read_by_length_and_status() {
        let ok = b"HTTP/1.0 200 OK\r\nContent-Type: application/ocsp-response\r\nContent-Length: 3\r\n\r\nabcdef";
        assert_eq!(body_of(ok).unwrap(), b"abc");
        assert_eq!(body_of(b"HTTP/1.0 200 OK\r\n\r\nxyz").unwrap(), b"xyz");
        assert!(body_of(b"HTTP/1.0 500 Oops\r\n\r\n").unwrap_err().contains("500"));
        assert!(body_of(b"HTTP/1.0 200 OK\r\nContent-Length: 9\r\n\r\nabc").is_err());
        assert!(body_of(b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc").is_err());
        assert!(body_of(b"HTTP/1.0 200 OK\r\nContent").is_err());
    }
}
