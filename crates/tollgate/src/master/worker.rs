//! The worker process: the same binary re-executed by the master (`tollgate worker`, a hidden
//! subcommand) with its end of the socketpair as stdin.
//!
//! Boot: receive the listening sockets and the quic UDP sockets (`SCM_RIGHTS`), then the
//! config text the master validated, switch to `[global] user` (see `privileges`), start the worker threads on those
//! sockets, say `ready`. Then wait: `stop` (or SIGTERM, or the master vanishing) = soft stop —
//! the accept loops return and drop their duplicates of the sockets (after a reload the master
//! still holds them, so their queues survive; at shutdown it has closed its own, so the
//! sockets close and new connections are refused), sessions in flight run to their end, at
//! the latest `timeouts.hard_stop_after`; `hard-stop` (or SIGINT) = close everything now.
//! The generation number (`--generation N`, from the master) goes to the runtime: QUIC
//! connection IDs carry it, so datagrams of an older generation's connections are told apart.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::signal::unix::{SignalKind, signal};

use crate::command::{Answer, GenerationMetrics, MetricsReport, Reply, ToMaster, ToWorker, codec};
use crate::error::{Error, ErrorKind, Result, Side};
use crate::runtime::{self, Running, StartOptions};

fn internal(context: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |e| Error::io(Side::Internal, context, e)
}

/// The QUIC handover ends the master sent (`in#T`, `out:G#T`: see `Master::handover_labels`).
fn handover(pairs: Vec<(String, std::os::fd::OwnedFd)>, key: Option<[u8; 16]>) -> io::Result<crate::quic::handover::Handover> {
    let bad = |label: &str| io::Error::new(io::ErrorKind::InvalidData, format!("quic pair `{label}`"));
    let mut inbound = Vec::new();
    let mut outbound: Vec<(u64, Vec<std::os::fd::OwnedFd>)> = Vec::new();
    for (label, fd) in pairs {
        if let Some(t) = label.strip_prefix("in#") {
            // In thread order, as sent.
            if t.parse::<usize>().ok() != Some(inbound.len()) {
                return Err(bad(&label));
            }
            inbound.push(fd);
        } else if let Some((g, t)) = label.strip_prefix("out:").and_then(|r| r.split_once('#')) {
            let g: u64 = g.parse().map_err(|_| bad(&label))?;
            let t: usize = t.parse().map_err(|_| bad(&label))?;
            match outbound.iter_mut().find(|(id, _)| *id == g) {
                Some((_, ends)) if ends.len() == t => ends.push(fd),
                None if t == 0 => outbound.push((g, vec![fd])),
                _ => return Err(bad(&label)),
            }
        } else {
            return Err(bad(&label));
        }
    }
    Ok(crate::quic::handover::Handover {
        key,
        inbound,
        outbound,
    })
}

/// Runs a worker generation until it has stopped.
pub fn run(generation: u64, mut options: StartOptions) -> Result<()> {
    let stdin = io::stdin().as_fd().try_clone_to_owned().map_err(internal("stdin"))?;
    let mut chan = UnixStream::from(stdin);
    let received = tollgate_sys::fdpass::recv_listeners(chan.as_fd()).map_err(internal("receive listeners"))?;
    let pairs = tollgate_sys::fdpass::recv_listeners(chan.as_fd()).map_err(internal("receive quic pairs"))?;
    let first: ToWorker = codec::read(&mut chan)
        .map_err(internal("read config"))?
        .ok_or_else(|| Error::new(ErrorKind::Io, Side::Internal, "master closed before sending the config"))?;
    let ToWorker::Config {
        path,
        text,
        mut ids,
        changes,
        disabled_frontends,
        health,
        certs,
        tickets,
        quic_key,
    } = first
    else {
        return Err(Error::new(ErrorKind::Io, Side::Internal, "expected the config first"));
    };
    let fail = |chan: &mut UnixStream, message: String| {
        let _ = codec::write(
            chan,
            &ToMaster::Failed {
                message: message.clone(),
            },
        );
        Error::new(ErrorKind::Config, Side::Internal, message)
    };
    // Before the config is parsed: its TLS frontends' ticketers start from these.
    if let Some(keys) = tickets {
        crate::config::tickets::install(keys);
    }
    let mut config = match crate::config::parse_with_ids(&text, &path, &mut ids) {
        Ok(c) => c,
        Err(e) => return Err(fail(&mut chan, e.to_string())),
    };
    // The frontends' ticketers hold their keys now: no other copy stays in this process.
    crate::config::tickets::forget();
    config.source = Some(path.into());
    let super::sockets::Adopted { tcp: sockets, udp } = match super::sockets::adopt(&config, received) {
        Ok(s) => s,
        Err(e) => return Err(fail(&mut chan, e.to_string())),
    };
    // Everything root was needed for is done (sockets held, certificates read) and no
    // thread has started yet: from here on this process parses client traffic.
    if let Err(e) = super::privileges::drop_privileges(&config.global) {
        return Err(fail(&mut chan, e.context.into_owned()));
    }
    let hard_stop_after = config.timeouts.hard_stop_after;
    let listeners = sockets.len();
    // Health states start where the previous generation left them; changes go to the master.
    let (health_tx, health_rx) = tokio::sync::mpsc::unbounded_channel();
    options.health_seed = health;
    options.disabled_frontends = disabled_frontends;
    options.health_reports = Some(health_tx);
    // The generation goes into every QUIC connection ID this process issues.
    options.generation = generation;
    options.udp = udp;
    options.quic_handover = match handover(pairs, quic_key) {
        Ok(h) => h,
        Err(e) => return Err(fail(&mut chan, e.to_string())),
    };
    let running = match runtime::start_with(Arc::new(config), sockets, options) {
        Ok(r) => r,
        Err(e) => return Err(fail(&mut chan, format!("starting workers: {e}"))),
    };
    // READY means serving: every accept loop is running.
    let deadline = Instant::now() + Duration::from_secs(10);
    while running.accepting() < listeners {
        if Instant::now() > deadline || running.is_finished() {
            running.hard_stop();
            return Err(fail(&mut chan, "worker threads did not start accepting".into()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // Runtime changes made before this generation (the master kept them across the reload)
    // hold before it serves a single request.
    for change in &changes {
        if let Err(e) = running.reapply(change) {
            tracing::warn!("runtime change {} not re-applied: {e}", change.describe());
        }
    }
    for cert in &certs {
        if let Err(e) = running.set_cert(cert) {
            tracing::warn!(cert = ?cert.cert_path, "certificate set at run time not re-installed: {e}");
        }
    }
    codec::write(&mut chan, &ToMaster::Ready).map_err(internal("say ready"))?;
    tracing::info!(generation, pid = std::process::id(), "worker ready");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(internal("control runtime"))?;
    rt.block_on(control(generation, chan, &running, hard_stop_after, health_rx))?;
    running.join().map_err(internal("worker threads"))?;
    tracing::info!(generation, pid = std::process::id(), "worker stopped");
    Ok(())
}

/// Reads the master's messages on a task of its own (a frame read is not cancel-safe);
/// `None` once the master is gone.
fn master_messages(chan: UnixStream) -> Result<tokio::sync::mpsc::UnboundedReceiver<Option<ToWorker>>> {
    chan.set_nonblocking(true).map_err(internal("socketpair"))?;
    let mut chan = tokio::net::UnixStream::from_std(chan).map_err(internal("socketpair"))?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            match codec::read_body_async(&mut chan).await {
                Ok(Some(body)) => match codec::decode::<ToWorker>(&body) {
                    Ok(msg) => {
                        let _ = tx.send(Some(msg));
                    }
                    Err(e) => tracing::warn!(error = %e, "bad message from the master"),
                },
                Ok(None) | Err(_) => {
                    let _ = tx.send(None);
                    return;
                }
            }
        }
    });
    Ok(rx)
}

/// Serves until told to stop, then stops within `hard_stop_after`.
async fn control(
    generation: u64,
    chan: UnixStream,
    running: &Running,
    hard_stop_after: Duration,
    mut health: tokio::sync::mpsc::UnboundedReceiver<crate::command::HealthReport>,
) -> Result<()> {
    let mut to_master = chan.try_clone().map_err(internal("socketpair"))?;
    let mut from_master = master_messages(chan)?;
    // Replies can be large (a metrics snapshot of every server) and the socket is
    // non-blocking: they are written through the runtime, which waits for room.
    let mut replies = to_master
        .try_clone()
        .and_then(tokio::net::UnixStream::from_std)
        .map_err(internal("socketpair"))?;
    let sig = |kind| signal(kind).map_err(internal("signal handler"));
    let (mut term, mut int, mut hup, mut usr1) = (
        sig(SignalKind::terminate())?,
        sig(SignalKind::interrupt())?,
        sig(SignalKind::hangup())?,
        sig(SignalKind::user_defined1())?,
    );
    let hard = loop {
        tokio::select! {
            msg = from_master.recv() => match msg.flatten() {
                Some(ToWorker::Stop) => break false,
                Some(ToWorker::HandOver) => {
                    running.quic_hand_over();
                    tracing::info!(generation, "QUIC sockets handed over: a newer generation reads them and forwards this one's datagrams");
                }
                Some(ToWorker::HardStop) => break true,
                Some(cmd @ (ToWorker::Apply { .. } | ToWorker::ShowServers { .. } | ToWorker::Metrics { .. } | ToWorker::Frontend { .. } | ToWorker::Show { .. } | ToWorker::SetCert { .. } | ToWorker::Table { .. })) => {
                    answer(&mut replies, running, cmd).await;
                }
                Some(ToWorker::ReopenLogs) => running.reopen_logs(),
                Some(other) => tracing::warn!(generation, ?other, "unexpected message from the master"),
                None => {
                    tracing::warn!(generation, "master gone: soft-stopping");
                    break false;
                }
            },
            Some(report) = health.recv() => {
                if let Err(e) = codec::write(&mut to_master, &ToMaster::Health(report)) {
                    tracing::warn!(error = %e, "could not tell the master a health change");
                }
            }
            _ = term.recv() => break false,
            _ = int.recv() => break true,
            // The master, not the worker, owns reloads; a stray SIGHUP must not kill a worker.
            _ = hup.recv() => tracing::info!(generation, "SIGHUP ignored by a worker (send it to the master)"),
            // Sent to the whole process group (`kill -USR1 -PGID`), or by hand: reopen too.
            _ = usr1.recv() => running.reopen_logs(),
        }
    };
    if hard {
        running.hard_stop();
        send_final(&mut replies, running).await;
        return Ok(());
    }
    tracing::info!(
        generation,
        pid = std::process::id(),
        ?hard_stop_after,
        "soft stop: finishing connections in flight"
    );
    running.soft_stop();
    let deadline = tokio::time::Instant::now() + hard_stop_after;
    // Tell the master once no accept loop runs: from then on only newer generations accept.
    while running.accepting() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let _ = codec::write(&mut to_master, &ToMaster::Draining);
    while !running.is_finished() {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {
                tracing::warn!(generation, "hard_stop_after reached: closing the connections still open");
                running.hard_stop();
                break;
            }
            _ = int.recv() => { running.hard_stop(); break; }
            _ = usr1.recv() => running.reopen_logs(),
            msg = from_master.recv() => match msg.flatten() {
                Some(ToWorker::HardStop) => { running.hard_stop(); break; }
                // A stopping generation still writes lines for its last sessions.
                Some(ToWorker::ReopenLogs) => running.reopen_logs(),
                // A stopping generation still has sessions: `--kill` must reach them.
                Some(cmd @ (ToWorker::Apply { .. } | ToWorker::ShowServers { .. } | ToWorker::Metrics { .. } | ToWorker::Frontend { .. } | ToWorker::Show { .. } | ToWorker::SetCert { .. } | ToWorker::Table { .. })) => {
                    answer(&mut replies, running, cmd).await
                }
                Some(_) => {}
                // The master is gone: keep finishing in-flight sessions until the deadline.
                None => { tokio::time::sleep_until(deadline).await; }
            },
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    send_final(&mut replies, running).await;
    Ok(())
}

/// The generation's last word: its counters, for the master to carry past its exit.
async fn send_final(to_master: &mut tokio::net::UnixStream, running: &Running) {
    let last = ToMaster::Final(Box::new(running.metrics()));
    if let Err(e) = codec::write_async(to_master, &last).await {
        tracing::warn!(error = %e, "could not hand the master this generation's last counters");
    }
}

/// Carries out a runtime command from the master and answers it.
async fn answer(to_master: &mut tokio::net::UnixStream, running: &Running, cmd: ToWorker) {
    let reply = match cmd {
        ToWorker::Apply { id, change } => match running.apply(&change) {
            Ok(()) => Reply::text(id, change.describe()),
            Err(e) => Reply::error(id, e),
        },
        ToWorker::Frontend { id, frontend, enabled } => match running.set_frontend(&frontend, enabled) {
            Ok(()) => Reply::text(id, format!("frontend {frontend}")),
            Err(e) => Reply::error(id, e),
        },
        ToWorker::SetCert { id, cert } => match running.set_cert(&cert) {
            Ok(text) => Reply::text(id, text),
            Err(e) => Reply::error(id, e),
        },
        ToWorker::ShowServers { id, backend } => Reply::ok(
            id,
            Answer::Servers {
                servers: running.show_servers(backend.as_deref()),
            },
        ),
        // The master knows which generation answered and fills it in.
        ToWorker::Metrics { id } => Reply::ok(
            id,
            Answer::Metrics(MetricsReport {
                generations: vec![GenerationMetrics {
                    generation: 0,
                    metrics: running.metrics(),
                }],
                ..MetricsReport::default()
            }),
        ),
        ToWorker::Table { id, op } => match running.table(&op) {
            Ok(answer) => Reply::ok(id, answer),
            Err(e) => Reply::error(id, e),
        },
        ToWorker::Show { id, query } => match running.show(&query) {
            Ok(generation) => Reply::ok(
                id,
                Answer::Show(crate::command::show::ShowReport {
                    generations: vec![generation],
                    ..Default::default()
                }),
            ),
            Err(e) => Reply::error(id, e),
        },
        _ => return,
    };
    if let Err(e) = codec::write_async(to_master, &ToMaster::Reply(reply)).await {
        tracing::warn!(error = %e, "could not answer the master");
    }
}
