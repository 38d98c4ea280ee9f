//! The process allocator: the system allocator for small allocations and `large`'s mappings
//! for large ones, counting per thread the bytes each thread has allocated and freed, so a
//! conversion can be held to a memory budget (`pool::RequestBudget`), and handing freed memory
//! back to the kernel once large reviews are over.
//!
//! The count is what this thread allocated minus what it freed, so memory freed on another
//! thread (a response buffer sent by the async workers) only makes it drift down, never up:
//! a budget built on it can be late by what other threads free, never early.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::time::Duration;

use crate::large;

/// `#[global_allocator]` of `dco-webhook` (see `main.rs`).
pub struct Counting;

thread_local! {
    // const-initialised and without a destructor, so it is usable from the allocator at any
    // point of a thread's life, including its teardown.
    static NET: Cell<isize> = const { Cell::new(0) };
    // The highest NET since the last `reset_thread_peak`.
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

#[inline]
fn count(delta: isize) {
    let now = NET.with(|n| {
        let now = n.get().wrapping_add(delta);
        n.set(now);
        now
    });
    if delta > 0 {
        PEAK.with(|p| p.set(p.get().max(now)));
    }
}

/// The highest [`thread_net_bytes`] since [`reset_thread_peak`] (on this thread).
pub fn thread_peak_bytes() -> isize {
    PEAK.with(Cell::get)
}

/// Starts a new peak at the current count.
pub fn reset_thread_peak() {
    PEAK.with(|p| p.set(thread_net_bytes()));
}

/// Bytes this thread has allocated minus bytes it has freed (of the [`Counting`]
/// allocator; 0 everywhere when another allocator is installed).
pub fn thread_net_bytes() -> isize {
    NET.with(Cell::get)
}

// SAFETY: small allocations forward to `System` with the caller's arguments unchanged,
// large ones go to `large` (page-aligned anonymous mappings, so any alignment up to a page
// holds); `dealloc` and `realloc` route by the same size test as `alloc`, so a pointer always
// goes back to where it came from. The counting touches only thread-local `Cell`s and never
// allocates.
unsafe impl GlobalAlloc for Counting {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = if large::serves(layout.size(), layout.align()) {
            large::alloc(layout.size(), false)
        } else {
            unsafe { System.alloc(layout) }
        };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = if large::serves(layout.size(), layout.align()) {
            large::alloc(layout.size(), true)
        } else {
            unsafe { System.alloc_zeroed(layout) }
        };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if large::serves(layout.size(), layout.align()) {
            unsafe { large::free(ptr, layout.size()) };
        } else {
            unsafe { System.dealloc(ptr, layout) };
        }
        count(-(layout.size() as isize));
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        if !large::serves(layout.size(), align) && !large::serves(new_size, align) {
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                count(new_size as isize - layout.size() as isize);
            }
            return p;
        }
        // Into, out of or within the large regions: move (a Vec doubling, mostly).
        // SAFETY: the caller guarantees `new_size` with `align` is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, align) };
        let p = unsafe { self.alloc(new_layout) };
        if !p.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        p
    }
}

/// How long the process must be idle (no large buffer in use, no new large review) before
/// free memory is handed back: under load, buffers are reused instead of faulted in again.
const RELEASE_WHEN_IDLE_FOR: Duration = Duration::from_millis(300);

/// Asks for free memory to be handed back to the kernel once the process is idle, on a thread
/// of its own: called when a large review's memory has been freed (`budget::Reservation`'s
/// drop, once its answer is written). Requests coalesce.
pub fn release_free_memory_soon() {
    static RELEASER: OnceLock<Option<SyncSender<()>>> = OnceLock::new();
    let tx = RELEASER.get_or_init(|| {
        let (tx, rx) = sync_channel::<()>(1);
        let spawned = std::thread::Builder::new().name("release-memory".into()).spawn(move || {
            while rx.recv().is_ok() {
                loop {
                    std::thread::sleep(RELEASE_WHEN_IDLE_FOR);
                    let asked_again = rx.try_recv().is_ok();
                    if !asked_again && large::idle() {
                        break;
                    }
                }
                let bytes = release_free_memory();
                tracing::debug!(bytes, "idle: handed free memory back to the kernel");
            }
        });
        spawned.ok().map(|_| tx)
    });
    if let Some(tx) = tx {
        let _ = tx.try_send(());
    }
}

/// Caps glibc malloc's arenas at one per core (`M_ARENA_MAX`; glibc's default is eight per
/// core), unless `MALLOC_ARENA_MAX` or `GLIBC_TUNABLES` chose. A thread that allocates gets
/// an arena of its own up to the cap, and each arena keeps resident the free chunks its
/// share of a burst left (the initial lists, the compiles): `docs/performance.md` ("Scale: a
/// replica's share") measured 0.8 MB less per replica with 2 arenas than with glibc's 7–8, on
/// 2 cores. Small allocations are served from each thread's cache first, so fewer arenas cost
/// little contention. Call before any other thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("MALLOC_ARENA_MAX").is_some() || std::env::var_os("GLIBC_TUNABLES").is_some() {
            return;
        }
        let cores = std::thread::available_parallelism().map_or(2, usize::from).max(2);
        // SAFETY: mallopt only sets a tunable of the allocator; any value is valid.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX));
        }
    }
}

/// Hands free memory back to the kernel: the cached large regions, and what glibc's arenas
/// can give back. Returns the bytes of large regions unmapped.
pub fn release_free_memory() -> usize {
    let bytes = large::release_cache();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only reorganises the allocator's free lists; any pad is valid.
    unsafe {
        libc::malloc_trim(0);
    }
    bytes
}
