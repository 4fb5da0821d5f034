//! The upkeep of the binary's allocator, mimalloc.
//!
//! mimalloc hands an emptied page back to the kernel only once its purge delay has passed,
//! and it does that work from inside its own calls: a worker that has gone quiet (its
//! connections parked or closed, nothing allocating) would keep the pages of a flood's
//! peak for as long as it stays quiet. So each worker thread calls [`collect`] once a second
//! (`tollgate`'s memory tick), and shortly after connections park (their tasks freed):
//! mimalloc then purges what that thread and the shared arenas hold free.
//!
//! mimalloc also asks for transparent huge pages on its arenas (`madvise(MADV_HUGEPAGE)`),
//! and the kernel's khugepaged then folds a 2 MiB range with a single live page in it into
//! one huge page, every page of it resident: an arena holding a few hundred bytes per idle
//! connection reads as megabytes more RSS some seconds later (measured: +3.5 KiB per idle
//! connection of 2,000, 10 s after they went idle). So [`enable`] turns huge pages off for
//! the process (`PR_SET_THP_DISABLE`, inherited by the workers it starts): a proxy's heap is
//! tens of MiB of small objects, where a huge page saves few TLB misses and costs what it
//! holds.
//!
//! Off until the binary, whose global allocator mimalloc is, says so ([`enable`]): a test
//! or a library user with another global allocator has no mimalloc heap to tend.

use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Says that mimalloc is the process's global allocator: [`collect`] works from now on, and
/// no page of the process becomes a transparent huge page (see the module's comment). Call
/// it first in `main`, before the heap grows.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
    // Refused only by a kernel without the flag (before 3.15): then huge pages stay as the
    // system's setting has them, which is not worth failing a start over.
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}

/// Frees what this thread's mimalloc heap holds unused and purges (decommits) the free
/// ranges of its segments and of the arenas. Forced: an unforced collect frees empty pages
/// into their segment's purge list but runs a segment's expired purges only when that
/// segment allocates again, which a quiet worker's never does (measured: 2,000 parked
/// connections read 838 B of RSS each 7 s after they parked, 571 with the purge done).
/// It walks every page of the thread's heap (a few hundred for tens of MiB: microseconds);
/// the callers run it about once a second. A no-op unless enabled.
pub fn collect() {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: mi_collect takes no pointer and may be called on any thread at any time; it
    // only walks and trims the calling thread's heap and the arenas' purge lists.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
