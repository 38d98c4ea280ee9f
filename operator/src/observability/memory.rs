//! Hands freed memory back to the kernel after a burst of work. glibc keeps what a burst of
//! watch events or reconciles freed resident in its per-thread arenas: the pages of target
//! metadata (`TARGET_PAGE` objects of up to hundreds of KB each, `dco_api::target`) and every
//! reconcile's read of its target are garbage a moment later, yet stay in RSS until trimmed.
//! Measured with `hack/bench/scale.sh` (`docs/performance.md`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static DIRTY: AtomicBool = AtomicBool::new(false);

/// Work happened that may have left freed memory behind.
pub fn touched() {
    DIRTY.store(true, Ordering::Relaxed);
}

/// Trims at most once per `every`, and only after [`touched`]: an idle operator costs nothing.
pub fn spawn_trimmer(every: Duration) {
    let spawned = std::thread::Builder::new().name("release-memory".into()).spawn(move || {
        loop {
            std::thread::sleep(every);
            if DIRTY.swap(false, Ordering::Relaxed) {
                trim();
            }
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the memory trimmer; freed memory stays resident");
    }
}

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only reorganises the allocator's free lists; any pad is valid.
    unsafe {
        libc::malloc_trim(0);
    }
}
