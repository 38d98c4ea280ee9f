//! The process allocator: the system allocator, counting per thread the bytes each thread
//! has allocated and freed, so a conversion can be held to a memory budget
//! (`pool::RequestBudget`), and handing freed memory back to the kernel after large reviews.
//!
//! The count is what this thread allocated minus what it freed, so memory freed on another
//! thread (a response buffer sent by the async workers) only makes it drift down, never up:
//! a budget built on it can be late by what other threads free, never early.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

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

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counting touches only a thread-local `Cell` and never allocates.
unsafe impl GlobalAlloc for Counting {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Hands free heap memory back to the kernel. glibc keeps freed memory in its arenas for
/// reuse; after a review of many megabytes that is tens to hundreds of megabytes of resident
/// memory no request is using.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only reorganises the allocator's free lists; any pad is valid.
    unsafe {
        libc::malloc_trim(0);
    }
}
