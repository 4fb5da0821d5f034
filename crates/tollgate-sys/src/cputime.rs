//! Per-thread CPU-time clocks, for a watchdog thread that reads the CPU time of *other*
//! threads (a worker stuck in a loop burns CPU; one blocked in the kernel does not).
//!
//! Owns: obtaining a thread's CPU clock id (`pthread_getcpuclockid`) and reading it
//! (`clock_gettime`), plus the calling thread's own CPU time and kernel thread id.
//!
//! A [`ThreadCpuClock`] is obtained *by the thread it measures* (it wraps
//! `pthread_self()`), then handed to the watchdog. It is valid only while that thread lives:
//! the clock id encodes the kernel thread id, so after the thread exits reads fail (`EINVAL`)
//! or, once the id is reused by a new thread of this process, read that thread. Owners drop
//! the clock when the worker exits. Each read is a real system call (~0.5 µs): sample it
//! from the watchdog at its tick rate, never per poll.

use std::io;
use std::time::Duration;

/// The CPU-time clock of one thread of this process. Cheap to copy and send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadCpuClock {
    id: libc::clockid_t,
}

impl ThreadCpuClock {
    /// The CPU-time clock of the calling thread, readable from any thread of the process.
    pub fn current() -> io::Result<ThreadCpuClock> {
        let mut id: libc::clockid_t = 0;
        // SAFETY: `pthread_self()` is always a valid handle for the calling thread, which is
        // alive for the duration of the call; `id` is a valid, writable `clockid_t`.
        let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(ThreadCpuClock { id })
    }

    /// CPU time the thread has consumed so far (user + system).
    pub fn now(&self) -> io::Result<Duration> {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable `timespec`; an invalid or stale clock id makes
        // the kernel return EINVAL, it cannot cause undefined behaviour.
        let rc = unsafe { libc::clock_gettime(self.id, &mut ts) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        timespec_to_duration(ts.tv_sec, ts.tv_nsec)
    }
}

fn timespec_to_duration(sec: libc::time_t, nsec: libc::c_long) -> io::Result<Duration> {
    let sec = u64::try_from(sec).map_err(|_| io::Error::other("negative CPU time"))?;
    let nsec = u32::try_from(nsec).map_err(|_| io::Error::other("bad tv_nsec"))?;
    Ok(Duration::new(sec, nsec))
}

/// CPU time consumed so far by the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time_self() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    let sec = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nsec = u32::try_from(ts.tv_nsec).unwrap_or(0);
    Duration::new(sec, nsec)
}

/// The kernel thread id of the calling thread (what `top -H` and `/proc/self/task` show).
pub fn gettid() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Instant;

    #[test]
    fn spinning_thread_clock_advances() {
        let (clock_tx, clock_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let (exit_tx, exit_rx) = mpsc::channel::<()>();
        let spinner = std::thread::spawn(move || {
            clock_tx.send(ThreadCpuClock::current().unwrap()).unwrap();
            let start = thread_cpu_time_self();
            let mut x = 0u64;
            while thread_cpu_time_self() - start < Duration::from_millis(100) {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
            done_tx.send(()).unwrap();
            exit_rx.recv().unwrap();
            x
        });
        let clock = clock_rx.recv().unwrap();
        let t0 = clock.now().unwrap();
        done_rx.recv().unwrap();
        let t1 = clock.now().unwrap();
        exit_tx.send(()).unwrap();
        spinner.join().unwrap();
        assert!(t1 - t0 >= Duration::from_millis(80), "advanced only {:?}", t1 - t0);
    }

    #[test]
    fn sleeping_thread_clock_stands_still() {
        let (clock_tx, clock_rx) = mpsc::channel();
        let (exit_tx, exit_rx) = mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            clock_tx.send((ThreadCpuClock::current().unwrap(), gettid())).unwrap();
            exit_rx.recv().unwrap();
        });
        let (clock, tid) = clock_rx.recv().unwrap();
        assert_ne!(tid, gettid());
        let t0 = clock.now().unwrap();
        let wall = Instant::now();
        std::thread::sleep(Duration::from_millis(200));
        let t1 = clock.now().unwrap();
        assert!(wall.elapsed() >= Duration::from_millis(200));
        exit_tx.send(()).unwrap();
        sleeper.join().unwrap();
        assert!(t1 - t0 < Duration::from_millis(5), "advanced {:?}", t1 - t0);
    }

    #[test]
    fn self_clock_matches_thread_cpu_time_self() {
        let clock = ThreadCpuClock::current().unwrap();
        let a = thread_cpu_time_self();
        let b = clock.now().unwrap();
        let c = thread_cpu_time_self();
        assert!(a <= b && b <= c);
        assert!(gettid() > 0);
    }
}
