//! Users, groups and switching the process to them.
//!
//! Owns: name lookups through the C library (`getpwnam_r`, `getgrnam_r`, so NSS sources such
//! as LDAP work like in every other daemon) and the one-way privilege drop of a worker.
//!
//! Invariant of [`switch_to`]: the process has exactly one thread when it runs. On Linux the
//! uid/gid system calls change only the calling thread (the C library's process-wide
//! emulation signals every thread; rustix calls the kernel directly), so a second thread
//! would keep root. Threads created afterwards inherit the new credentials.

use std::ffi::CString;
use std::io;

use rustix::process::{Gid, Uid};

/// A user's ids as the system database has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserIds {
    pub uid: u32,
    /// The user's primary group.
    pub gid: u32,
}

/// Buffer sizes tried for the lookups' string storage (ERANGE grows it).
const BUF_SIZES: [usize; 4] = [1024, 16 * 1024, 256 * 1024, 1 << 20];

fn c_name(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "name contains a NUL byte"))
}

/// Looks a user up by name; `Ok(None)` if no such user.
pub fn user_by_name(name: &str) -> io::Result<Option<UserIds>> {
    let cname = c_name(name)?;
    for size in BUF_SIZES {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: an all-zero `passwd` is a valid value (integers and null pointers).
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `cname` is NUL-terminated; `entry`, `buf` (with its true length) and `found`
        // are valid and writable for the whole call; the strings written into `buf` are not
        // read after it goes out of scope (only the integer ids are copied out).
        let rc = unsafe { libc::getpwnam_r(cname.as_ptr(), &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
        match rc {
            0 if found.is_null() => return Ok(None),
            0 => {
                return Ok(Some(UserIds {
                    uid: entry.pw_uid,
                    gid: entry.pw_gid,
                }));
            }
            libc::ERANGE => continue,
            // Some C libraries report "not found" as an errno.
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(None),
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
    Err(io::Error::other("user entry too large"))
}

/// Looks a group up by name; `Ok(None)` if no such group.
pub fn group_by_name(name: &str) -> io::Result<Option<u32>> {
    let cname = c_name(name)?;
    for size in BUF_SIZES {
        let mut buf = vec![0 as libc::c_char; size];
        // SAFETY: an all-zero `group` is a valid value (integers and null pointers).
        let mut entry: libc::group = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: as in `user_by_name`: valid NUL-terminated name, valid writable out
        // parameters and buffer of the given length; only `gr_gid` is read afterwards.
        let rc = unsafe { libc::getgrnam_r(cname.as_ptr(), &mut entry, buf.as_mut_ptr(), buf.len(), &mut found) };
        match rc {
            0 if found.is_null() => return Ok(None),
            0 => return Ok(Some(entry.gr_gid)),
            libc::ERANGE => continue,
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(None),
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
    Err(io::Error::other("group entry too large"))
}

/// Threads of this process, from `/proc/self/status`.
pub fn thread_count() -> io::Result<usize> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no Threads: line in /proc/self/status"))
}

/// Switches the (single-threaded) process to `uid`/`gid` for good: `setgid`, `setgroups`
/// (only `gid`), then `setuid`, real, effective and saved ids alike, so it cannot switch
/// back. Refuses if other threads exist (they would keep the old credentials).
pub fn switch_to(uid: u32, gid: u32) -> io::Result<()> {
    let threads = thread_count()?;
    if threads != 1 {
        return Err(io::Error::other(format!(
            "cannot drop privileges with {threads} threads running (ids are per thread on Linux)"
        )));
    }
    let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
    rustix::thread::set_thread_res_gid(gid, gid, gid).map_err(|e| context(e, "setresgid"))?;
    rustix::thread::set_thread_groups(&[gid]).map_err(|e| context(e, "setgroups"))?;
    rustix::thread::set_thread_res_uid(uid, uid, uid).map_err(|e| context(e, "setresuid"))?;
    // Regaining root must now fail; if it does not, the drop did not happen.
    if uid != Uid::ROOT && rustix::thread::set_thread_res_uid(Uid::ROOT, Uid::ROOT, Uid::ROOT).is_ok() {
        return Err(io::Error::other("could switch back to root after dropping privileges"));
    }
    Ok(())
}

fn context(e: rustix::io::Errno, call: &str) -> io::Error {
    let e = io::Error::from(e);
    io::Error::new(e.kind(), format!("{call}: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn root_exists_and_nonsense_does_not() {
        assert_eq!(user_by_name("root").unwrap().map(|u| u.uid), Some(0));
        assert_eq!(group_by_name("root").unwrap(), Some(0));
        assert_eq!(user_by_name("no-such-user-tollgate").unwrap(), None);
        assert_eq!(group_by_name("no-such-group-tollgate").unwrap(), None);
        assert!(user_by_name("a\0b").is_err());
    }
}
