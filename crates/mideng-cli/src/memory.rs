//! Gives back to the system the memory a burst of load took, once it is free.
//!
//! With glibc's allocator, the memory of a thousand requests waiting at once (each one's task,
//! its request and its state) is freed when they finish but stays in the allocator's arenas,
//! fragmented among live blocks: `scripts/measure-memory` showed a `mideng serve` at 26 MB idle
//! stay at 94 MB after such a burst. `malloc_trim(0)` hands the free pages inside the arenas
//! back (`madvise`), and the same process went to 35 MB. Neither fewer arenas, a lower mmap
//! threshold nor mimalloc did that by themselves.
//!
//! A thread of its own trims every [`TRIM_EVERY`]: the call takes each arena's lock while it
//! walks it, a pause of well under a millisecond per trim for the threads that allocate
//! meanwhile. Elsewhere than Linux with glibc there is nothing to do.

use std::time::Duration;

/// How often the free memory is handed back.
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Starts the trimming thread (glibc on Linux only).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(crate) fn start_trimming() {
    let started = std::thread::Builder::new()
        .name("memory-trim".to_owned())
        .spawn(|| {
            loop {
                std::thread::sleep(TRIM_EVERY);
                // SAFETY: malloc_trim takes no pointer from the caller; it walks glibc's own
                // arenas under their locks and may be called from any thread at any time.
                unsafe {
                    libc::malloc_trim(0);
                }
            }
        });
    if let Err(error) = started {
        tracing::warn!(%error, "no memory-trim thread: memory a burst took stays with the allocator");
    }
}

/// Nothing to trim with this allocator.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn start_trimming() {}
