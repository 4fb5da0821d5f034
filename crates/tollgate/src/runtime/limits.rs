//! Process limits set once at startup.

use std::sync::OnceLock;

/// Raises the soft RLIMIT_NOFILE to the hard limit (once) and returns the result.
/// Every proxied connection needs two descriptors; the default soft limit (often 1024)
/// would cap a proxy far below its `maxconn`.
pub fn nofile_limit() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let mut lim = getrlimit(Resource::Nofile);
        if let Some(hard) = lim.maximum
            && lim.current != Some(hard)
        {
            lim.current = Some(hard);
            let _ = setrlimit(Resource::Nofile, lim);
        }
        getrlimit(Resource::Nofile).current.unwrap_or(1 << 20)
    })
}
