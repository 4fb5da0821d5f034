//! The upkeep of the binary's allocator, mimalloc.
//!
//! mimalloc hands an emptied page back to the kernel only once its purge delay has passed,
//! and it does that work from inside its own calls: a worker that has gone quiet (its
//! connections parked or closed, nothing allocating) would keep the pages of a flood's
//! peak for as long as it stays quiet. So each worker thread calls [`collect`] once a second
//! (`tollgate`'s memory tick): mimalloc then purges what waited long enough on that thread
//! and in the shared arenas.
//!
//! Off until the binary, whose global allocator mimalloc is, says so ([`enable`]): a test
//! or a library user with another global allocator has no mimalloc heap to tend.

use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Says that mimalloc is the process's global allocator: [`collect`] works from now on.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Frees what this thread's mimalloc heap holds unused and purges (decommits) the pages
/// whose purge delay has passed. Cheap when there is nothing to do; a no-op unless enabled.
pub fn collect() {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: mi_collect takes no pointer and may be called on any thread at any time; it
    // only walks and trims the calling thread's heap and the arenas' purge lists.
    unsafe { libmimalloc_sys::mi_collect(false) }
}
