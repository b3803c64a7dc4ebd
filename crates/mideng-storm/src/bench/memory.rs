//! Resident memory of the bench's process — its clients and the service it runs in-process —
//! before the runs, at its peak and after them, from `/proc/self/status` (`VmRSS`, and
//! `VmHWM` for the peak, which the kernel keeps for the process's life).
//!
//! "After" is what the allocator keeps once every run's deployment is dropped: glibc returns
//! freed memory to the system lazily, which is why `mideng serve` asks it to every 10 s
//! (docs/limits.md); the bench does not, so the figure shows what a load leaves behind without
//! that.

use serde::Serialize;

/// The three figures, in KiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Resident {
    /// Before the first run.
    pub before_kib: u64,
    /// The most the process held at once, up to the end of the last run.
    pub peak_kib: u64,
    /// After the last run, its deployment dropped.
    pub after_kib: u64,
}

/// `VmRSS` and `VmHWM` of a `/proc/<pid>/status` text, in KiB.
fn parse_status(status: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        status.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(':')?;
            rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
    };
    Some((field("VmRSS")?, field("VmHWM")?))
}

/// This process's resident and peak resident memory now, in KiB; `None` where `/proc` is not.
pub fn now() -> Option<(u64, u64)> {
    parse_status(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// The figures from a reading before the runs and one after them.
pub fn between(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<Resident> {
    let ((before_kib, _), (after_kib, peak_kib)) = (before?, after?);
    Some(Resident {
        before_kib,
        peak_kib,
        after_kib,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_file_gives_the_resident_and_the_peak() {
        let status = "Name:\tmideng\nVmPeak:\t  900000 kB\nVmHWM:\t  131072 kB\nVmRSS:\t   41000 kB\nThreads:\t9\n";
        assert_eq!(parse_status(status), Some((41_000, 131_072)));
        assert_eq!(parse_status("Name:\tx\n"), None);
        let (rss, peak) = now().expect("Linux has /proc");
        assert!(rss > 0 && peak >= rss, "{rss} {peak}");
        assert_eq!(
            between(Some((10, 12)), Some((20, 50))),
            Some(Resident {
                before_kib: 10,
                peak_kib: 50,
                after_kib: 20
            })
        );
        assert_eq!(between(None, Some((20, 50))), None);
    }
}
