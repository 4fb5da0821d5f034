//! Who the proxying processes run as: `[global] user` / `group`.
//!
//! A worker process switches to the configured user once it holds everything it needs from
//! root — its listening sockets (received from the master) and its config with certificates
//! read — and before it starts a thread or accepts a connection. The switch sets the real,
//! effective and saved ids (gid, supplementary groups, then uid), so it cannot be undone:
//! code that parses what clients send never runs as root.
//!
//! The master keeps its ids: a reload may bind a new address (a port below 1024 needs
//! root), re-read certificates only root may read, and start the next generation, which
//! then drops like the first. The master never parses client traffic.
//!
//! Running workers as root is allowed but warned about at every start unless
//! `allow_root = true` (see docs/config.md for why it is not refused).

use crate::config::Global;
use crate::error::{Error, ErrorKind, Side};

/// Switches this process to `global.run_as`, if set. Must run while the process has one
/// thread (checked).
pub fn drop_privileges(global: &Global) -> Result<(), Error> {
    let Some(run_as) = &global.run_as else {
        return Ok(());
    };
    let (uid, gid) = (rustix::process::geteuid(), rustix::process::getegid());
    if uid.as_raw() == run_as.uid && gid.as_raw() == run_as.gid {
        return Ok(());
    }
    tollgate_sys::credentials::switch_to(run_as.uid, run_as.gid).map_err(|e| {
        Error::new(
            ErrorKind::Config,
            Side::Internal,
            format!(
                "cannot switch to user `{}` (uid {}, gid {}): {}",
                run_as.user,
                run_as.uid,
                run_as.gid,
                crate::error::os_message(&e)
            ),
        )
    })?;
    tracing::info!(user = %run_as.user, uid = run_as.uid, gid = run_as.gid, "dropped privileges");
    Ok(())
}

/// Warns, once per start, when the proxying processes will run as root.
pub fn warn_if_root(global: &Global) {
    let euid = rustix::process::geteuid().as_raw();
    let workers_uid = global.run_as.as_ref().map_or(euid, |r| r.uid);
    if workers_uid == 0 && !global.allow_root {
        tracing::warn!(
            "workers run as root: set [global] user (e.g. user = \"nobody\") so the processes that parse \
             client traffic hold no privileges, or allow_root = true to run as root deliberately"
        );
    }
}
