//! The process's own cost: CPU time and memory, for `run --usage` (the overhead benchmark) and
//! the live source's per-field read costs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// CPU time (user + system, all threads) and peak resident memory of this process so far.
#[derive(Debug, Clone, Copy)]
pub struct ResourceUsage {
    /// User and system CPU time of every thread.
    pub cpu: Duration,
    /// Peak resident memory (VmHWM), in KiB.
    pub max_rss_kib: u64,
}

/// This process's usage so far; `None` where getrusage fails.
pub fn resource_usage() -> Option<ResourceUsage> {
    // SAFETY: getrusage only writes into the struct we pass, which is zero-initialised.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the pointer is to a live, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return None;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Some(ResourceUsage {
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
        // The peak of this program's own memory (VmHWM), not getrusage's ru_maxrss: that one
        // survives exec, so it holds the forked parent's resident size, and a test harness or
        // shell that is large at fork time would read as the agent's peak.
        max_rss_kib: status_kib("VmHWM:").unwrap_or(usage.ru_maxrss as u64),
    })
}

/// Resident memory right now (VmRSS), in KiB.
pub fn rss_now_kib() -> Option<u64> {
    status_kib("VmRSS:")
}

/// A `/proc/self/status` line in KiB.
fn status_kib(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time of the calling thread (user + system): what one field read cost the sampler.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into the timespec we pass.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The wall clock in unix seconds, the time every live sample carries.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
