//! Pinning threads to CPUs: one runtime thread per core.
//!
//! Owns: `sched_setaffinity` for the calling thread and counting the CPUs this process may
//! run on (which, under a cgroup cpuset or `taskset`, can be fewer than the machine has).
//!
//! Everything here goes through rustix's safe API: no `unsafe`.

use std::io;

use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

/// Restricts the calling thread to CPU number `cpu`.
///
/// Fails with `InvalidInput` if `cpu` is beyond what a CPU set can hold, and `EINVAL` from
/// the kernel if that CPU is not in the process's allowed set.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= CpuSet::MAX_CPU {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "cpu number out of range"));
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    Ok(sched_setaffinity(None, &set)?)
}

/// The CPUs the calling thread may run on, in increasing order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    let set = sched_getaffinity(None)?;
    Ok((0..CpuSet::MAX_CPU).filter(|&cpu| set.is_set(cpu)).collect())
}

/// How many CPUs the calling thread may run on (at least 1).
pub fn available_cpus() -> usize {
    match sched_getaffinity(None) {
        Ok(set) => usize::try_from(set.count()).unwrap_or(1).max(1),
        Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_in_a_fresh_thread() {
        let n = available_cpus();
        assert!(n >= 1);
        let cpus = allowed_cpus().unwrap();
        assert_eq!(cpus.len(), n);
        let last = *cpus.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(last).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![last]);
            assert_eq!(available_cpus(), 1);
        })
        .join()
        .unwrap();
        // The pin stayed in that thread.
        assert_eq!(available_cpus(), n);
    }

    #[test]
    fn out_of_range_cpu_is_an_error() {
        std::thread::spawn(|| {
            let err = pin_current_thread(CpuSet::MAX_CPU).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            // A CPU number the set can hold but that is not online (or not allowed).
            let err = pin_current_thread(CpuSet::MAX_CPU - 1);
            assert!(err.is_err());
        })
        .join()
        .unwrap();
    }
}
