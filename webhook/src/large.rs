//! Large allocations (review bodies, answers, whole-object parses: 1 MiB and up) straight
//! from the kernel, with a small cache of freed regions that is emptied when the process is
//! idle, so resident memory comes back down after large reviews.
//!
//! glibc serves such buffers from per-thread arenas once its dynamic mmap threshold has risen,
//! and `malloc_trim` never returns the top of a non-main arena: measured, 43 MB of arena memory
//! with 0.3 MB in use stayed resident after four 7 MB reviews. Mapping them directly returns
//! them on demand; the cache keeps back-to-back reviews from paying page faults for every
//! buffer (a 15 MB review's body and answer are ~8,000 pages).
//!
//! Called from the global allocator: nothing here may allocate. The cache is a fixed array
//! behind a `std::sync::Mutex` (futex-based, no allocation).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Allocations at least this large are mapped here.
pub const THRESHOLD: usize = 1 << 20;
/// Regions are mapped in multiples of this, so a freed region fits the next similar request.
const GRANULE: usize = 64 << 10;
/// Freed regions kept for reuse, at most.
const CACHE_SLOTS: usize = 8;
/// Bytes the cache may hold.
const CACHE_BYTES: usize = 256 << 20;

struct Cache {
    regions: [(usize, usize); CACHE_SLOTS],
    bytes: usize,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache { regions: [(0, 0); CACHE_SLOTS], bytes: 0 });
/// Large regions handed out and not yet freed (the process is idle when this is 0).
static IN_USE: AtomicUsize = AtomicUsize::new(0);

fn rounded(size: usize) -> usize {
    size.div_ceil(GRANULE).saturating_mul(GRANULE)
}

/// Whether [`alloc`] serves this layout (mmap aligns to pages).
pub fn serves(size: usize, align: usize) -> bool {
    size >= THRESHOLD && align <= 4096
}

/// A region of at least `size` bytes, or null. `zeroed` asks for zero bytes (fresh mappings
/// are; cached ones are cleared).
pub fn alloc(size: usize, zeroed: bool) -> *mut u8 {
    let len = rounded(size);
    if let Ok(mut cache) = CACHE.lock() {
        // The smallest cached region that fits without wasting more than half of it.
        let best = (0..CACHE_SLOTS)
            .filter(|&i| cache.regions[i].1 >= len && cache.regions[i].1 <= len * 2)
            .min_by_key(|&i| cache.regions[i].1);
        if let Some(i) = best {
            let (ptr, have) = cache.regions[i];
            cache.regions[i] = (0, 0);
            cache.bytes -= have;
            drop(cache);
            if have > len {
                // Give the tail back now: the caller's length is what `free` will be told.
                // SAFETY: the tail is part of a mapping this module made and no one uses.
                unsafe { libc::munmap((ptr + len) as *mut libc::c_void, have - len) };
            }
            if zeroed {
                // SAFETY: the region is `len` bytes of this module's mapping, unused.
                unsafe { std::ptr::write_bytes(ptr as *mut u8, 0, size) };
            }
            IN_USE.fetch_add(1, Ordering::Relaxed);
            return ptr as *mut u8;
        }
    }
    // SAFETY: an anonymous private mapping; no memory of anyone else's is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    IN_USE.fetch_add(1, Ordering::Relaxed);
    p as *mut u8
}

/// Takes back a region [`alloc`] returned for `size` bytes.
///
/// # Safety
/// `ptr` must come from [`alloc`] with the same `size`, and not be used afterwards.
pub unsafe fn free(ptr: *mut u8, size: usize) {
    let len = rounded(size);
    IN_USE.fetch_sub(1, Ordering::Relaxed);
    if let Ok(mut cache) = CACHE.lock()
        && cache.bytes + len <= CACHE_BYTES
        && let Some(i) = (0..CACHE_SLOTS).find(|&i| cache.regions[i].1 == 0)
    {
        cache.regions[i] = (ptr as usize, len);
        cache.bytes += len;
        return;
    }
    // SAFETY: the caller hands back a mapping of `len` bytes made by `alloc`.
    unsafe { libc::munmap(ptr as *mut libc::c_void, len) };
}

/// Whether no large region is in use.
pub fn idle() -> bool {
    IN_USE.load(Ordering::Relaxed) == 0
}

/// Unmaps every cached region; returns the bytes given back.
pub fn release_cache() -> usize {
    let mut taken = [(0usize, 0usize); CACHE_SLOTS];
    if let Ok(mut cache) = CACHE.lock() {
        taken = cache.regions;
        cache.regions = [(0, 0); CACHE_SLOTS];
        cache.bytes = 0;
    }
    let mut bytes = 0;
    for (ptr, len) in taken {
        if len > 0 {
            // SAFETY: cached regions are this module's mappings and no one uses them.
            unsafe { libc::munmap(ptr as *mut libc::c_void, len) };
            bytes += len;
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_reused_and_released() {
        // (Other tests of this binary may allocate large buffers through the system
        // allocator, never through this module, so its state is this test's.)
        let a = alloc(3 << 20, false);
        assert!(!a.is_null());
        // SAFETY: `a` is 3 MiB of this test's region.
        unsafe { std::ptr::write_bytes(a, 7, 3 << 20) };
        unsafe { free(a, 3 << 20) };
        // A similar size reuses it; zeroed means zeroed.
        let b = alloc((3 << 20) - 100, true);
        assert_eq!(a, b);
        // SAFETY: `b` is this test's region of that size.
        assert!(unsafe { std::slice::from_raw_parts(b, (3 << 20) - 100) }.iter().all(|&x| x == 0));
        unsafe { free(b, (3 << 20) - 100) };
        assert!(idle());
        assert_eq!(release_cache(), 3 << 20);
        assert_eq!(release_cache(), 0);
    }
}
