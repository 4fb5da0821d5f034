//! Access logs: one line per ended stream (an HTTP request, a TCP session), formatted on the
//! worker thread into that thread's buffer and written by one writer thread per process.
//!
//! - [`AccessLog`]: the process's log — the sink (stdout, a file, syslog over UDP), the
//!   writer thread, the bounded channel of full buffers, the reopen flag.
//! - [`Local`]: one worker thread's side — its line buffer, its spare request-line slots,
//!   the flush timer.
//! - [`format`]: the JSON and text layouts (docs/logging.md).
//!
//! Invariants: the data path never waits on the log. A worker formats into its own buffer
//! (reused: no allocation per line in steady state) and hands a full buffer over with
//! `try_send`; when the channel is full (the sink fell behind or blocks) the buffer's lines
//! are dropped and counted in `log_dropped`, and the buffer is reused. Buffers come back
//! from the writer through a small free list, touched once per buffer, not per line. A
//! worker's partial buffer is handed over `FLUSH_AFTER` after its first line, and at stop.

pub(crate) mod format;
mod sink;

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::Notify;

use crate::config::log_layout::Layout;
use crate::config::model::{Log, LogSink};
use crate::stats::WorkerStats;
use format::{Entry, RequestLine};

/// Capacity of a worker's line buffer: each hand-over wakes the writer thread, which shares
/// the worker's CPU when the process is pinned, so a buffer carries ~600 lines, not ~150
/// (keep-alive cost of JSON logs: +9.3 % with 64 KiB, +5.2 % with 256 KiB, docs/benchmarks.md).
const BUFFER: usize = 256 << 10;
/// A buffer this full is handed to the writer (leaves room for the longest line, so a
/// buffer never grows).
const HAND_OVER_AT: usize = BUFFER - (8 << 10);
/// Buffers in flight to the writer, per worker thread, before lines are dropped.
const QUEUE_PER_WORKER: usize = 8;
/// Longest a line waits in a worker's buffer.
pub(crate) const FLUSH_AFTER: Duration = Duration::from_millis(150);
/// Longest `finish` waits for the writer to write what was handed over.
const FINISH_WITHIN: Duration = Duration::from_secs(2);

enum Msg {
    Lines(Vec<u8>),
    /// Look at the flags (reopen, stop).
    Wake,
}

/// The process's access log (shared by every worker thread).
pub(crate) struct AccessLog {
    tx: SyncSender<Msg>,
    /// Written-out buffers, for workers to reuse.
    free: Mutex<Vec<Vec<u8>>>,
    reopen: AtomicBool,
    stop: AtomicBool,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl AccessLog {
    /// Opens the sink and starts the writer thread; `None` when access logs are off.
    pub(crate) fn start(config: &Log, workers: usize) -> std::io::Result<Option<Arc<AccessLog>>> {
        if config.access == LogSink::Off {
            return Ok(None);
        }
        let sink = sink::Sink::open(&config.access)?;
        let (tx, rx) = mpsc::sync_channel(QUEUE_PER_WORKER * workers.max(1));
        let log = Arc::new(AccessLog {
            tx,
            free: Mutex::new(Vec::new()),
            reopen: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            writer: Mutex::new(None),
        });
        let shared = Arc::clone(&log);
        let handle = std::thread::Builder::new()
            .name("tollgate-log".into())
            .spawn(move || write_loop(&shared, rx, sink))?;
        if let Ok(mut w) = log.writer.lock() {
            *w = Some(handle);
        }
        Ok(Some(log))
    }

    /// Asks the writer to reopen its sink (SIGUSR1, after logrotate moved the file).
    pub(crate) fn reopen(&self) {
        self.reopen.store(true, Ordering::SeqCst);
        let _ = self.tx.try_send(Msg::Wake);
    }

    /// After every worker flushed: lets the writer write what it was handed, then stop.
    /// Waits at most `FINISH_WITHIN` (a sink that blocks, such as a FIFO nobody reads,
    /// must not hold the process's exit).
    pub(crate) fn finish(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.tx.try_send(Msg::Wake);
        let Some(handle) = self.writer.lock().ok().and_then(|mut w| w.take()) else {
            return;
        };
        let deadline = std::time::Instant::now() + FINISH_WITHIN;
        while !handle.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if handle.is_finished() {
            let _ = handle.join();
        } else {
            tracing::warn!("access log: the sink is not taking lines; lines still queued are lost");
        }
    }

    fn spare_buffer(&self) -> Vec<u8> {
        self.free
            .lock()
            .ok()
            .and_then(|mut f| f.pop())
            .unwrap_or_else(|| Vec::with_capacity(BUFFER))
    }

    fn recycle(&self, mut buf: Vec<u8>) {
        buf.clear();
        if let Ok(mut f) = self.free.lock()
            && f.len() < 64
        {
            f.push(buf);
        }
    }
}

/// The writer thread: writes each buffer as it comes, reopens when asked, stops when told
/// (after writing what is queued).
fn write_loop(log: &AccessLog, rx: Receiver<Msg>, mut sink: sink::Sink) {
    loop {
        let msg = rx.recv_timeout(Duration::from_millis(250));
        if log.reopen.swap(false, Ordering::SeqCst) {
            sink.reopen();
        }
        match msg {
            Ok(Msg::Lines(buf)) => {
                sink.write(&buf);
                log.recycle(buf);
            }
            Ok(Msg::Wake) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        // Set once every worker handed over its last lines: write what is queued, stop.
        if log.stop.load(Ordering::SeqCst) {
            while let Ok(msg) = rx.try_recv() {
                if let Msg::Lines(buf) = msg {
                    sink.write(&buf);
                }
            }
            break;
        }
    }
    sink.flush();
}

/// One worker thread's side of the access log.
pub(crate) struct Local {
    log: Arc<AccessLog>,
    stats: Arc<WorkerStats>,
    state: RefCell<LocalState>,
    /// Wakes the flush task when a line lands in an empty buffer.
    flush: Notify,
}

struct LocalState {
    buf: Vec<u8>,
    lines: u64,
    /// The flush task was woken for the lines in `buf`.
    armed: bool,
    /// Request-line slots given back by ended sessions.
    #[expect(
        clippy::vec_box,
        reason = "a slot moves between here and a session: boxed, so a session holds a pointer, not the slot"
    )]
    spare_lines: Vec<Box<RequestLine>>,
}

impl Local {
    pub(crate) fn new(log: Arc<AccessLog>, stats: Arc<WorkerStats>) -> Self {
        let buf = log.spare_buffer();
        Local {
            log,
            stats,
            state: RefCell::new(LocalState {
                buf,
                lines: 0,
                armed: false,
                spare_lines: Vec::new(),
            }),
            flush: Notify::new(),
        }
    }

    /// Formats `entry` as a line of `layout` into this thread's buffer; hands the buffer
    /// over when full.
    pub(crate) fn write(&self, layout: &Layout, entry: &Entry<'_>) {
        let Ok(mut state) = self.state.try_borrow_mut() else {
            return;
        };
        format::line(layout, entry, &mut state.buf);
        state.lines += 1;
        if state.buf.len() >= HAND_OVER_AT {
            self.hand_over(&mut state);
        } else if !state.armed {
            state.armed = true;
            self.flush.notify_one();
        }
    }

    /// Hands what the buffer holds to the writer, now.
    pub(crate) fn flush(&self) {
        if let Ok(mut state) = self.state.try_borrow_mut() {
            self.hand_over(&mut state);
        }
    }

    fn hand_over(&self, state: &mut LocalState) {
        state.armed = false;
        if state.buf.is_empty() {
            return;
        }
        let next = self.log.spare_buffer();
        let full = std::mem::replace(&mut state.buf, next);
        match self.log.tx.try_send(Msg::Lines(full)) {
            Ok(()) => {}
            Err(TrySendError::Full(Msg::Lines(mut full)) | TrySendError::Disconnected(Msg::Lines(mut full))) => {
                self.stats.log_dropped.add(state.lines);
                // Keep the buffer we have: the spare goes back.
                full.clear();
                let spare = std::mem::replace(&mut state.buf, full);
                self.log.recycle(spare);
            }
            Err(_) => {}
        }
        state.lines = 0;
    }

    /// The worker's task: hands a partial buffer over `FLUSH_AFTER` after its first line.
    pub(crate) async fn flush_every(self: std::rc::Rc<Self>) {
        loop {
            self.flush.notified().await;
            tokio::time::sleep(FLUSH_AFTER).await;
            self.flush();
        }
    }

    /// Storage for a session's request lines (reused from ended sessions).
    pub(crate) fn take_line(&self) -> Box<RequestLine> {
        self.state
            .try_borrow_mut()
            .ok()
            .and_then(|mut s| s.spare_lines.pop())
            .unwrap_or_else(|| Box::new(RequestLine::with_capacity()))
    }

    /// A session's request-line storage, given back to this thread when the session ends.
    pub(crate) fn slot(self: &std::rc::Rc<Self>) -> LineSlot {
        LineSlot {
            line: self.take_line(),
            local: std::rc::Rc::clone(self),
        }
    }

    pub(crate) fn give_line(&self, mut line: Box<RequestLine>) {
        line.clear();
        if let Ok(mut s) = self.state.try_borrow_mut()
            && s.spare_lines.len() < 1024
        {
            s.spare_lines.push(line);
        }
    }
}

/// One session's request line; back to its thread's spares when dropped. Boxed: every
/// HTTP session's state has room for this slot (two pointers), used or not.
pub(crate) struct LineSlot {
    local: std::rc::Rc<Local>,
    pub(crate) line: Box<RequestLine>,
}

impl Drop for LineSlot {
    fn drop(&mut self) {
        self.local.give_line(std::mem::take(&mut self.line));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn parse(log: &str) -> Result<Log, String> {
        let text = format!(
            "{log}\n[[frontend]]\nname = \"f\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"b\"\n\
             [[backend]]\nname = \"b\"\n[[backend.server]]\nname = \"s\"\naddress = \"127.0.0.1:1\"\n"
        );
        crate::config::parse(&text, "t.toml")
            .map(|c| c.log)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn log_keys_parse_and_default_to_off() {
        assert_eq!(parse("").unwrap(), Log::default());
        assert_eq!(parse("").unwrap().access, LogSink::Off);
        use crate::config::model::LogFormat;
        let l = parse("[log]\naccess = \"stdout\"\nformat = \"text\"").unwrap();
        assert_eq!((l.access, l.format), (LogSink::Stdout, LogFormat::Text));
        let l = parse("[log]\naccess = \"syslog://127.0.0.1:514\"").unwrap();
        assert_eq!(l.access, LogSink::Syslog("127.0.0.1:514".parse().unwrap()));
        assert_eq!(l.format, LogFormat::Json);
        let l = parse("[log]\naccess = \"/var/log/t.log\"").unwrap();
        assert_eq!(l.access, LogSink::File("/var/log/t.log".into()));
        let bad = parse("[log]\naccess = \"syslog://nowhere\"").unwrap_err();
        assert!(bad.contains("t.toml:2:10") && bad.contains("log.access"), "{bad}");
        let bad = parse("[log]\nformat = \"xml\"").unwrap_err();
        assert!(bad.contains("format"), "{bad}");
        let bad = parse("[log]\nacess = \"stdout\"").unwrap_err();
        assert!(bad.contains("acess"), "{bad}");
    }

    /// A worker hands buffers over; with the writer stopped the queue fills and lines are
    /// dropped and counted, never waited for.
    #[test]
    fn a_full_queue_drops_and_counts() {
        let (tx, rx) = mpsc::sync_channel(1);
        let log = Arc::new(AccessLog {
            tx,
            free: Mutex::new(Vec::new()),
            reopen: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            writer: Mutex::new(None),
        });
        let stats = Arc::new(WorkerStats::default());
        let local = Local::new(Arc::clone(&log), Arc::clone(&stats));
        let line = RequestLine::with_capacity();
        let entry = Entry {
            request: Some(&line),
            ..Entry::blank()
        };
        local.write(&Layout::FixedText, &entry);
        local.flush();
        assert_eq!(stats.log_dropped.get(), 0, "the first buffer fits in the queue");
        for _ in 0..3 {
            local.write(&Layout::FixedText, &entry);
        }
        local.flush();
        assert_eq!(stats.log_dropped.get(), 3, "the queue is full: dropped, counted");
        let Ok(Msg::Lines(first)) = rx.try_recv() else {
            panic!("one buffer queued")
        };
        assert_eq!(first.iter().filter(|&&b| b == b'\n').count(), 1);
        local.write(&Layout::FixedText, &entry);
        local.flush();
        assert_eq!(stats.log_dropped.get(), 3, "room again");
    }
}
