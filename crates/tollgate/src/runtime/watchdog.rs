//! The watchdog: catches a worker thread that burns CPU without getting through its polls
//! (a task that never yields), HAProxy-style, on CPU time rather than wall time.
//!
//! Progress is a number that moves whenever the thread finishes a poll, read by the watchdog
//! thread from three sources, none of which can move while the thread is stuck in one poll:
//! - the thread's `stats::Progress`, bumped each time a poll of a session's task returns,
//!   and each time a poll of an HTTP/2 stream returns inside its connection's task (one
//!   connection-task poll may run up to `max_concurrent_streams` streams, each connecting to
//!   its server): a relaxed load and store per poll on a line only this thread writes;
//! - the runtime's busy time (tokio's stable `worker_total_busy_duration`), which the
//!   scheduler publishes each time it gets back to its driver (every 61 task polls, or when
//!   its queue runs dry): covers tasks that are not sessions, at no cost to the thread
//!   (coarser: 61 polls averaging over `warn_after / 61` look like a stall);
//! - a tick task bumping `Progress` every `tick()` (a quarter of `warn_after`, within
//!   5..50 ms), which keeps an idle thread's number moving (an idle thread is not blocked).
//!
//! The tick alone is not enough: it waits in the run queue like any task, so a thread busy
//! with thousands of ready tasks (each a short poll: a connect(), a TLS handshake step) left
//! it standing still for seconds and was aborted while doing real work. A poll that never
//! returns still moves nothing, and is caught.
//!
//! A watchdog thread samples every registered thread's CPU clock (`ThreadCpuClock`, one
//! ~0.5 µs syscall per thread per tick) and feeds `Watch`, the sans-io decision:
//! - CPU burned without progress > `warn_after`: warn once (worker id, thread name, tid,
//!   kernel state);
//! - past `abort_after`: log and `std::process::abort()` — under a master the worker is
//!   restarted with the same sockets;
//! - no progress for `no_progress_after` of wall time while burning (almost) no CPU: the
//!   thread is blocked (a sleep, a blocking syscall), not spinning: warn once, never abort.
//!
//! Registration is done by the worker thread itself (a CPU clock is read through the
//! thread's handle) and undone when it exits, before its clock id can be reused.

use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use tollgate_sys::cputime::ThreadCpuClock;

use crate::config::Watchdog as Config;
use crate::stats::Progress;

/// The tick-task period for `config`.
pub(crate) fn tick(config: &Config) -> Duration {
    (config.warn_after / 4).clamp(Duration::from_millis(5), Duration::from_millis(50))
}

/// The worker thread's tick task: keeps an idle thread's progress moving.
pub(crate) async fn tick_task(progress: Arc<Progress>, period: Duration) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        progress.bump();
    }
}

/// One watched thread.
pub(crate) struct Watched {
    pub worker: usize,
    pub name: String,
    pub tid: i32,
    clock: ThreadCpuClock,
    progress: Arc<Progress>,
    /// The thread's own (current_thread) runtime: its worker 0 is this thread.
    runtime: tokio::runtime::RuntimeMetrics,
}

impl Watched {
    /// The thread's progress: moves whenever it got through a poll (see the module doc).
    /// Both terms only grow, so the sum stands still only when both do.
    pub(crate) fn progress(&self) -> u64 {
        let busy = self.runtime.worker_total_busy_duration(0).as_nanos();
        self.progress
            .get()
            .wrapping_add(u64::try_from(busy).unwrap_or(u64::MAX))
    }
}

#[derive(Default)]
pub(crate) struct Registry {
    threads: Mutex<Vec<Arc<Watched>>>,
}

/// Keeps a thread registered; unregisters on drop (on the thread, before it exits).
pub(crate) struct Registration {
    registry: Arc<Registry>,
    pub watched: Arc<Watched>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut threads) = self.registry.threads.lock() {
            threads.retain(|t| !Arc::ptr_eq(t, &self.watched));
        }
    }
}

impl Registry {
    /// Registers the calling thread as `worker`, running the runtime `runtime` is of and
    /// bumping `progress`.
    pub(crate) fn register(
        self: &Arc<Self>,
        worker: usize,
        progress: Arc<Progress>,
        runtime: tokio::runtime::RuntimeMetrics,
    ) -> std::io::Result<Registration> {
        let watched = Arc::new(Watched {
            worker,
            name: std::thread::current().name().unwrap_or("?").to_string(),
            tid: tollgate_sys::cputime::gettid(),
            clock: ThreadCpuClock::current()?,
            progress,
            runtime,
        });
        if let Ok(mut threads) = self.threads.lock() {
            threads.push(Arc::clone(&watched));
        }
        Ok(Registration {
            registry: Arc::clone(self),
            watched,
        })
    }
}

/// What `Watch::observe` concluded for one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Fine,
    /// Burned this much CPU without progress (reported once per stall).
    Stalled(Duration),
    /// Past `abort_after`.
    Abort(Duration),
    /// No progress for this long of wall time, with little CPU burned (reported once).
    NoProgress(Duration),
}

/// The sans-io watch over one thread: fed (progress, CPU time, now) at every sample.
#[derive(Debug)]
pub(crate) struct Watch {
    progress: u64,
    cpu_at: Duration,
    wall_at: Instant,
    warned_cpu: bool,
    warned_wall: bool,
}

impl Watch {
    pub(crate) fn new(progress: u64, cpu: Duration, now: Instant) -> Watch {
        Watch {
            progress,
            cpu_at: cpu,
            wall_at: now,
            warned_cpu: false,
            warned_wall: false,
        }
    }

    pub(crate) fn observe(&mut self, config: &Config, progress: u64, cpu: Duration, now: Instant) -> Verdict {
        if progress != self.progress {
            *self = Watch::new(progress, cpu, now);
            return Verdict::Fine;
        }
        let burned = cpu.saturating_sub(self.cpu_at);
        if burned >= config.abort_after {
            return Verdict::Abort(burned);
        }
        if burned >= config.warn_after {
            if self.warned_cpu {
                return Verdict::Fine;
            }
            self.warned_cpu = true;
            return Verdict::Stalled(burned);
        }
        let waited = now.saturating_duration_since(self.wall_at);
        if waited >= config.no_progress_after && !self.warned_wall {
            self.warned_wall = true;
            return Verdict::NoProgress(waited);
        }
        Verdict::Fine
    }
}

/// The running watchdog thread; stops (and is joined) on drop.
pub(crate) type Handle = crate::background::Stopper<mpsc::Sender<()>>;

pub(crate) fn start(registry: Arc<Registry>, config: Config) -> std::io::Result<Handle> {
    let (stop, stopped) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("tollgate-watchdog".into())
        .spawn(move || watch_loop(&registry, &config, &stopped))?;
    Ok(Handle::new(stop, thread))
}

fn watch_loop(registry: &Registry, config: &Config, stopped: &mpsc::Receiver<()>) {
    let period = tick(config);
    let mut watches: Vec<(Arc<Watched>, Watch)> = Vec::new();
    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
        let threads: Vec<Arc<Watched>> = registry.threads.lock().map(|t| t.clone()).unwrap_or_default();
        let now = Instant::now();
        watches.retain(|(w, _)| threads.iter().any(|t| Arc::ptr_eq(t, w)));
        for t in threads {
            // Only registered threads are read: a registration is dropped before its thread exits.
            let Ok(cpu) = t.clock.now() else { continue };
            let progress = t.progress();
            let Some(pos) = watches.iter().position(|(w, _)| Arc::ptr_eq(w, &t)) else {
                watches.push((Arc::clone(&t), Watch::new(progress, cpu, now)));
                continue;
            };
            let Some((_, watch)) = watches.get_mut(pos) else {
                continue;
            };
            match watch.observe(config, progress, cpu, now) {
                Verdict::Fine => {}
                Verdict::Stalled(burned) => tracing::warn!(
                    worker = t.worker, thread = %t.name, tid = t.tid, state = %thread_state(t.tid), ?burned,
                    "watchdog: worker thread burning CPU without scheduler progress (a task is not yielding)"
                ),
                Verdict::NoProgress(waited) => tracing::warn!(
                    worker = t.worker, thread = %t.name, tid = t.tid, state = %thread_state(t.tid), ?waited,
                    "watchdog: no scheduler progress and no CPU burned (blocked in a syscall or a lock?)"
                ),
                Verdict::Abort(burned) => {
                    tracing::error!(
                        worker = t.worker, thread = %t.name, tid = t.tid, state = %thread_state(t.tid), ?burned,
                        "watchdog: worker thread stuck past abort_after; aborting the worker process"
                    );
                    std::process::abort();
                }
            }
        }
    }
}

/// The kernel's view of a thread: its state letter and current syscall number, for reports.
fn thread_state(tid: i32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // Field 3, after the parenthesised command name (which may contain spaces).
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("?");
    let syscall = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).unwrap_or_default();
    let syscall = syscall.split_whitespace().next().unwrap_or("?");
    format!("{state} syscall={syscall}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Burns `d` of this thread's CPU time without yielding.
    fn spin(d: Duration) {
        let start = tollgate_sys::cputime::thread_cpu_time_self();
        while tollgate_sys::cputime::thread_cpu_time_self() - start < d {}
    }

    /// The more alarming of two verdicts.
    fn worse(a: Verdict, b: Verdict) -> Verdict {
        let rank = |v: Verdict| match v {
            Verdict::Fine => 0,
            Verdict::NoProgress(_) => 1,
            Verdict::Stalled(_) => 2,
            Verdict::Abort(_) => 3,
        };
        if rank(b) > rank(a) { b } else { a }
    }

    /// Thresholds well below the work the tests below do (1 s of CPU).
    fn strict() -> Config {
        Config {
            warn_after: ms(100),
            abort_after: ms(300),
            ..Config::default()
        }
    }

    /// Runs `work` on a worker-like thread (its own current_thread runtime, registered, with
    /// the tick task) and watches it from this thread as `watch_loop` does. Returns the worst
    /// verdict on the thread's progress, and the worst on a second tick task's count alone
    /// (the old design, where only the tick counted).
    fn watch_worker<W, F>(config: Config, work: W) -> (Verdict, Verdict)
    where
        W: FnOnce(Arc<Progress>) -> F + Send + 'static,
        F: Future<Output = ()> + 'static,
    {
        let period = tick(&config);
        let (tx, rx) = mpsc::channel();
        let (exit_tx, exit_rx) = mpsc::channel::<()>();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let worker_done = Arc::clone(&done);
        let worker = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build_local(Default::default())
                .unwrap();
            let progress = Arc::new(Progress::default());
            let tick_only = Arc::new(Progress::default());
            let registry = Arc::new(Registry::default());
            let reg = registry.register(0, Arc::clone(&progress), rt.metrics()).unwrap();
            tx.send((Arc::clone(&reg.watched), Arc::clone(&tick_only))).unwrap();
            rt.block_on(async move {
                tokio::task::spawn_local(tick_task(Arc::clone(&progress), period));
                tokio::task::spawn_local(tick_task(tick_only, period));
                work(progress).await;
            });
            worker_done.store(true, std::sync::atomic::Ordering::Release);
            // Registered (its clock readable) until the watcher is done with it.
            exit_rx.recv().unwrap();
            drop(reg);
        });
        let (watched, tick_only) = rx.recv().unwrap();
        let cpu = watched.clock.now().unwrap();
        let mut now_watch = Watch::new(watched.progress(), cpu, Instant::now());
        let mut tick_watch = Watch::new(tick_only.get(), cpu, Instant::now());
        let (mut now_verdict, mut tick_verdict) = (Verdict::Fine, Verdict::Fine);
        // Bounded: the work is a few seconds of CPU at most.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done.load(std::sync::atomic::Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(period);
            let (cpu, now) = (watched.clock.now().unwrap(), Instant::now());
            now_verdict = worse(now_verdict, now_watch.observe(&config, watched.progress(), cpu, now));
            tick_verdict = worse(tick_verdict, tick_watch.observe(&config, tick_only.get(), cpu, now));
        }
        exit_tx.send(()).unwrap();
        worker.join().unwrap();
        (now_verdict, tick_verdict)
    }

    /// The reported abort: thousands of ready tasks, each a short poll (1,000 × 1 ms of CPU
    /// here), keep the tick task waiting in the run queue for a second. The thread is busy,
    /// not stuck: the scheduler's busy time moves every 61 polls.
    #[test]
    fn a_long_run_queue_of_short_polls_is_progress() {
        let (verdict, tick_alone) = watch_worker(strict(), |_| async {
            let tasks: Vec<_> = (0..1000)
                .map(|_| tokio::task::spawn_local(async { spin(ms(1)) }))
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        assert!(
            matches!(tick_alone, Verdict::Abort(_)),
            "the tick alone starves: {tick_alone:?}"
        );
        assert_eq!(verdict, Verdict::Fine);
    }

    /// One task poll that runs many short polls of its own (an HTTP/2 connection task
    /// starting its streams, each connecting): 1,000 × 1 ms in one poll, each counted.
    #[test]
    fn many_counted_polls_inside_one_poll_are_progress() {
        let (verdict, tick_alone) = watch_worker(strict(), |progress| async move {
            let connection = tokio::task::spawn_local(async move {
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                for _ in 0..1000 {
                    let stream = std::pin::pin!(crate::stats::counting_polls(Arc::clone(&progress), async {
                        spin(ms(1))
                    }));
                    assert!(stream.poll(&mut cx).is_ready());
                }
            });
            connection.await.unwrap();
        });
        assert!(matches!(tick_alone, Verdict::Abort(_)), "{tick_alone:?}");
        assert_eq!(verdict, Verdict::Fine);
    }

    /// A poll that does not return is still caught, past `abort_after`.
    #[test]
    fn one_poll_that_spins_is_still_caught() {
        let (verdict, _) = watch_worker(strict(), |_| async {
            tokio::task::spawn_local(async { spin(ms(500)) }).await.unwrap();
        });
        assert!(matches!(verdict, Verdict::Abort(_)), "{verdict:?}");
    }

    #[test]
    fn warns_once_then_aborts_on_cpu_without_progress() {
        let c = Config::default();
        let t0 = Instant::now();
        let mut w = Watch::new(7, ms(0), t0);
        assert_eq!(w.observe(&c, 7, ms(50), t0 + ms(50)), Verdict::Fine);
        assert_eq!(w.observe(&c, 7, ms(120), t0 + ms(120)), Verdict::Stalled(ms(120)));
        assert_eq!(w.observe(&c, 7, ms(500), t0 + ms(500)), Verdict::Fine, "warned once");
        assert_eq!(w.observe(&c, 7, ms(1000), t0 + ms(1000)), Verdict::Abort(ms(1000)));
    }

    #[test]
    fn progress_resets_and_busy_but_progressing_is_fine() {
        let c = Config::default();
        let t0 = Instant::now();
        let mut w = Watch::new(0, ms(0), t0);
        // 10 s of full CPU, progress every 25 ms.
        for i in 1..400u64 {
            assert_eq!(w.observe(&c, i, ms(25 * i), t0 + ms(25 * i)), Verdict::Fine);
        }
    }

    #[test]
    fn blocked_without_cpu_is_no_progress_not_a_stall() {
        let c = Config::default();
        let t0 = Instant::now();
        let mut w = Watch::new(3, ms(10), t0);
        assert_eq!(w.observe(&c, 3, ms(11), t0 + ms(4000)), Verdict::Fine);
        assert_eq!(w.observe(&c, 3, ms(12), t0 + ms(5000)), Verdict::NoProgress(ms(5000)));
        assert_eq!(w.observe(&c, 3, ms(12), t0 + ms(60_000)), Verdict::Fine, "warned once");
    }

    #[test]
    fn tick_is_a_quarter_of_warn_after_within_bounds() {
        assert_eq!(tick(&Config::default()), ms(25));
        let slow = Config {
            warn_after: Duration::from_secs(2),
            ..Config::default()
        };
        assert_eq!(tick(&slow), ms(50));
    }

    /// A real thread that spins without bumping is reported; one that sleeps is not a stall.
    #[test]
    fn registry_reads_real_threads() {
        let registry = Arc::new(Registry::default());
        let (tx, rx) = mpsc::channel();
        let (exit_tx, exit_rx) = mpsc::channel::<()>();
        let r = Arc::clone(&registry);
        let spinner = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let reg = r.register(0, Arc::default(), rt.metrics()).unwrap();
            tx.send(Arc::clone(&reg.watched)).unwrap();
            spin(ms(150));
            exit_rx.recv().unwrap();
            drop(reg);
        });
        let watched = rx.recv().unwrap();
        let c = Config::default();
        let t0 = Instant::now();
        let mut w = Watch::new(watched.progress(), watched.clock.now().unwrap(), t0);
        let deadline = Instant::now() + Duration::from_secs(10);
        let verdict = loop {
            std::thread::sleep(ms(10));
            let v = w.observe(&c, watched.progress(), watched.clock.now().unwrap(), Instant::now());
            if v != Verdict::Fine || Instant::now() > deadline {
                break v;
            }
        };
        assert!(matches!(verdict, Verdict::Stalled(_)), "{verdict:?}");
        assert_eq!(registry.threads.lock().unwrap().len(), 1);
        exit_tx.send(()).unwrap();
        spinner.join().unwrap();
        assert!(registry.threads.lock().unwrap().is_empty(), "unregistered on exit");
    }
}
