//! A budget for warn lines: at most `burst` lines per `window`; further lines in the same
//! window are only counted, and once the window has ended one line reports how many were
//! suppressed. Each worker owns one (`WorkerCtx::may_warn`), so a storm of failures costs a
//! few lines per second per worker instead of one per request, and no allocation or
//! formatting for the lines it drops.
//!
//! Sans-io: every call takes `now`; the worker's shell reads the clock (only on a failure
//! path) and sleeps until `flush_due` to report a window's suppressed count.
//!
//! Invariant: every line asked for is either admitted or counted in exactly one reported
//! `suppressed` total (`admit`'s `ended_suppressed` or `flush`), never both, never neither.

use std::time::{Duration, Instant};

/// Lines admitted per window, per worker.
pub(crate) const BURST: u32 = 10;
/// The window.
pub(crate) const WINDOW: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(crate) struct LogLimiter {
    burst: u32,
    window: Duration,
    /// Start of the current window (`None` before the first line).
    start: Option<Instant>,
    admitted: u32,
    suppressed: u64,
}

/// What `admit` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admit {
    /// Write the line.
    pub log: bool,
    /// Lines suppressed in a window that ended and was not flushed yet: report them first.
    pub ended_suppressed: u64,
    /// This is the first line suppressed in the current window: arrange a `flush` at
    /// `flush_due()`.
    pub arm_flush: bool,
}

impl Default for LogLimiter {
    fn default() -> Self {
        LogLimiter::new(BURST, WINDOW)
    }
}

impl LogLimiter {
    pub(crate) fn new(burst: u32, window: Duration) -> Self {
        LogLimiter {
            burst,
            window,
            start: None,
            admitted: 0,
            suppressed: 0,
        }
    }

    /// One line asked for at `now`.
    pub(crate) fn admit(&mut self, now: Instant) -> Admit {
        let mut ended_suppressed = 0;
        if self
            .start
            .is_none_or(|s| now.saturating_duration_since(s) >= self.window)
        {
            ended_suppressed = std::mem::take(&mut self.suppressed);
            self.start = Some(now);
            self.admitted = 0;
        }
        if self.admitted < self.burst {
            self.admitted += 1;
            return Admit {
                log: true,
                ended_suppressed,
                arm_flush: false,
            };
        }
        self.suppressed += 1;
        Admit {
            log: false,
            ended_suppressed,
            arm_flush: self.suppressed == 1,
        }
    }

    /// When the current window ends, if it has suppressed lines to report.
    pub(crate) fn flush_due(&self) -> Option<Instant> {
        match self.start {
            Some(start) if self.suppressed > 0 => Some(start + self.window),
            _ => None,
        }
    }

    /// At or after the end of the window: how many lines it suppressed (then forgotten).
    /// `None` before the window ended or when it suppressed nothing.
    pub(crate) fn flush(&mut self, now: Instant) -> Option<u64> {
        let due = self.flush_due()?;
        if now < due {
            return None;
        }
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn burst_then_suppressed_then_flushed_once() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(3, Duration::from_secs(1));
        let logged: Vec<bool> = (0..10).map(|i| l.admit(at(t0, i)).log).collect();
        assert_eq!(
            logged,
            [true, true, true, false, false, false, false, false, false, false]
        );
        assert_eq!(l.flush_due(), Some(at(t0, 1000)));
        assert_eq!(l.flush(at(t0, 999)), None, "not before the window ends");
        assert_eq!(l.flush(at(t0, 1000)), Some(7));
        assert_eq!(l.flush(at(t0, 1001)), None, "reported once");
        assert_eq!(l.flush_due(), None);
    }

    #[test]
    fn only_the_first_suppression_of_a_window_arms_the_flush() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(1, Duration::from_secs(1));
        assert!(!l.admit(t0).arm_flush);
        assert!(l.admit(at(t0, 1)).arm_flush);
        assert!(!l.admit(at(t0, 2)).arm_flush);
        // Next window: the budget is back, and a new suppression arms again.
        let a = l.admit(at(t0, 1500));
        assert_eq!(
            (a.log, a.ended_suppressed),
            (true, 2),
            "unflushed count carried out once"
        );
        assert!(l.admit(at(t0, 1501)).arm_flush);
    }

    /// Every line asked for is either logged or counted in exactly one report.
    #[test]
    fn nothing_is_lost_or_counted_twice() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(4, Duration::from_millis(100));
        let (mut logged, mut reported) = (0u64, 0u64);
        let mut x = 12345u64;
        let mut now = 0u64;
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            now += x % 7;
            let a = l.admit(at(t0, now));
            logged += u64::from(a.log);
            reported += a.ended_suppressed;
            if x.is_multiple_of(5) {
                reported += l.flush(at(t0, now)).unwrap_or(0);
            }
        }
        reported += l.flush(at(t0, now + 1000)).unwrap_or(0);
        assert_eq!(logged + reported, 5000);
        // At most 4 lines per 100 ms window over ~15 s.
        assert!(logged <= 4 * (now / 100 + 1), "{logged} lines in {now} ms");
    }
}
