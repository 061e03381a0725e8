//! Live GPUs for the commands that sample them: opening NVML with an error a person can act on,
//! the tick loop, and the process's own CPU and memory cost.

use std::ops::ControlFlow;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::collections::HashMap;
use std::path::PathBuf;

use gpuslack_receiver::attribution::kubelet::{self, GpuIds, PodWatcher};
use gpuslack_receiver::attribution::procfs::Procfs;
use gpuslack_receiver::attribution::Attributor;
use gpuslack_receiver::source::live::nvml::{NvmlBackend, NvmlDevice, OpenError};
use gpuslack_receiver::source::live::{Cadence, Field, LiveSource, SourceEvent};
use gpuslack_receiver::Sample;

use super::shutdown::Shutdown;

/// Sampling flags shared by `record`, `run` and `diagnose`.
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Base sampling interval: cheap fields and GPM are read every interval; process lists and
    /// links at most once a second; per-process SM shares every 5 s; limits and the energy
    /// counter every 10 s or more.
    #[arg(long, value_name = "MS", default_value_t = 100)]
    pub interval_ms: u64,
    /// Ignore GPM, as on a GPU without it (A100, L40S, L4, …): the verdicts come from NVML's
    /// own fields alone.
    #[arg(long)]
    pub no_gpm: bool,
    /// The kubelet's PodResources socket, which names the pod and container each GPU is
    /// assigned to. Where it does not exist (not a Kubernetes node), pods are not looked up.
    #[arg(long, value_name = "PATH", default_value = kubelet::DEFAULT_SOCKET)]
    pub kubelet_socket: PathBuf,
}

/// How to sample: the cadence, and whether GPM is read.
#[derive(Debug, Clone, Copy)]
pub struct Sampling {
    pub cadence: Cadence,
    pub no_gpm: bool,
}

impl SamplingArgs {
    pub fn sampling(&self) -> anyhow::Result<Sampling> {
        if !(10..=60_000).contains(&self.interval_ms) {
            anyhow::bail!(
                "--interval-ms must be between 10 and 60000, got {}",
                self.interval_ms
            );
        }
        Ok(Sampling {
            cadence: Cadence::every(Duration::from_millis(self.interval_ms)),
            no_gpm: self.no_gpm,
        })
    }
}

/// Who holds each GPU, from the host: executable, user, CPU use, container, job, and the pods
/// the kubelet assigned each GPU to where a kubelet answers on `--kubelet-socket`.
pub fn attributor(args: &SamplingArgs, source: &LiveSource<NvmlDevice>) -> Attributor {
    let attributor = Attributor::new(Procfs::system());
    let Some(watcher) = PodWatcher::start(&args.kubelet_socket) else {
        return attributor;
    };
    let gpus: HashMap<u32, GpuIds> = source
        .facts()
        .into_iter()
        .map(|(gpu, f)| {
            let ids = GpuIds {
                uuid: f.uuid,
                minor_number: f.minor_number,
                index: f.mig_parent.is_none().then_some(gpu),
            };
            (gpu, ids)
        })
        .collect();
    attributor.with_pods(watcher, gpus)
}

pub fn open(sampling: Sampling) -> Result<LiveSource<NvmlDevice>, OpenError> {
    let backend = NvmlBackend::open()?;
    let devices = backend.devices()?;
    let source = LiveSource::new(devices, sampling.cadence).with_cpu_clock(thread_cpu_time);
    Ok(if sampling.no_gpm {
        source.without(&[Field::Gpm])
    } else {
        source
    })
}

/// CPU time of the calling thread (user + system).
fn thread_cpu_time() -> Duration {
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

pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Samples every tick until `run_for` has passed (forever when `None`) or a stop signal
/// arrives, handing each tick's samples to `on_samples`. Ticks are scheduled on an absolute
/// grid so they do not drift; a tick that falls behind is skipped, never run in a burst.
pub fn run_ticks(
    source: &mut LiveSource<NvmlDevice>,
    attributor: Attributor,
    run_for: Option<Duration>,
    shutdown: &mut Shutdown,
    mut on_samples: impl FnMut(Vec<Sample>) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    run_ticks_until(
        source,
        attributor,
        run_for,
        shutdown,
        OnSignal::Stop,
        |samples| on_samples(samples).map(|()| ControlFlow::Continue(())),
    )
}

/// What a stop signal does to the tick loop.
pub enum OnSignal {
    /// Ends it.
    Stop,
    /// Passes the signal to this process (a watched command) and keeps sampling.
    ForwardTo(u32),
}

/// `run_ticks`, where `on_samples` may also end the loop, and a signal may be passed on
/// rather than end it.
pub fn run_ticks_until(
    source: &mut LiveSource<NvmlDevice>,
    mut attributor: Attributor,
    run_for: Option<Duration>,
    shutdown: &mut Shutdown,
    on_signal: OnSignal,
    mut on_samples: impl FnMut(Vec<Sample>) -> anyhow::Result<ControlFlow<()>>,
) -> anyhow::Result<u64> {
    let stops = |shutdown: &mut Shutdown| match on_signal {
        OnSignal::Stop => true,
        OnSignal::ForwardTo(pid) => {
            shutdown.forward_to(pid);
            false
        }
    };
    let tick = source.cadence().tick;
    let start = Instant::now();
    let deadline = run_for.map(|d| start + d);
    let mut next = start;
    let mut ticks = 0;
    let mut all_lost_said = false;
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d)
            || (shutdown.requested() && stops(shutdown))
        {
            break;
        }
        let mut samples = source.sample(unix_now);
        samples.iter_mut().for_each(|s| attributor.enrich(s));
        ticks += 1;
        for event in source.drain_events() {
            log_event(&event);
        }
        if source.live_gpus() == 0 && !all_lost_said {
            tracing::error!("every GPU is lost; asking each again every 10 s");
        }
        all_lost_said = source.live_gpus() == 0;
        if on_samples(samples)?.is_break() {
            break;
        }
        next += tick;
        let now = Instant::now();
        while next < now {
            next += tick;
        }
        let wake = deadline.map_or(next, |d| d.min(next));
        if shutdown.wait(wake.saturating_duration_since(now)) && stops(shutdown) {
            break;
        }
    }
    Ok(ticks)
}

fn log_event(event: &SourceEvent) {
    match event {
        SourceEvent::FieldUnsupported { gpu, field } => {
            tracing::info!(
                gpu,
                field = field.name(),
                "not supported on this GPU or driver; skipped from now on"
            )
        }
        SourceEvent::ReadFailed {
            gpu,
            field,
            error,
            times,
        } => {
            tracing::warn!(gpu, field = field.name(), error = %error, times, "read failed; left out of this sample")
        }
        SourceEvent::GpuLost { gpu, error } => {
            tracing::error!(gpu, error = %error, "GPU lost; the other GPUs are still sampled, and this one is asked again every 10 s")
        }
        SourceEvent::GpuBack { gpu } => {
            tracing::warn!(gpu, "GPU answers again; sampling it")
        }
    }
}

/// CPU time (user + system, all threads) and peak resident memory of this process so far.
pub struct ResourceUsage {
    pub cpu: Duration,
    pub max_rss_kib: u64,
}

pub fn resource_usage() -> Option<ResourceUsage> {
    // SAFETY: getrusage only writes into the struct we pass, which is zero-initialised.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
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
