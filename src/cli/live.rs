//! The sampling flags of the commands that read live GPUs, and thin wrappers over the
//! library's live source (`gpuslack_receiver::source::live::ticks`) for `record` and
//! `diagnose`, which keep the samples themselves instead of running the agent.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Duration;

use gpuslack_receiver::attribution::kubelet;
use gpuslack_receiver::attribution::Attributor;
use gpuslack_receiver::source::cadence::{Adaptive, CadenceMode};
use gpuslack_receiver::source::live::nvml::{NvmlDevice, OpenError};
use gpuslack_receiver::source::live::ticks::{self, LiveOptions, OnStop};
use gpuslack_receiver::source::live::{Cadence, LiveSource};
use gpuslack_receiver::Sample;

pub use gpuslack_receiver::usage::unix_now;

use super::shutdown::{self, Shutdown};

/// Sampling flags shared by `record`, `run` and `diagnose`.
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Sample at this constant interval: cheap fields and GPM are read every interval; process
    /// lists and links at most once a second; limits and the energy counter every 10 s or
    /// more. Without it `run` samples at the adaptive cadence (1 s, and 100 ms for 6 s when a
    /// verdict is uncertain or changing); `record` and `diagnose` at 100 ms.
    #[arg(long, value_name = "MS")]
    pub interval_ms: Option<u64>,
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

/// The interval of `record` and `diagnose` when `--interval-ms` is not given: a recording is
/// the 10 Hz truth any slower cadence can be replayed from (`score --cadence`), never the
/// other way round, and a 10-s look at the GPUs is too short for CPU to matter.
pub const RECORD_INTERVAL_MS: u64 = 100;

impl SamplingArgs {
    /// `--interval-ms` checked, when it was given.
    fn interval(&self) -> anyhow::Result<Option<Duration>> {
        match self.interval_ms {
            Some(ms) if !(10..=60_000).contains(&ms) => {
                anyhow::bail!("--interval-ms must be between 10 and 60000, got {ms}")
            }
            ms => Ok(ms.map(Duration::from_millis)),
        }
    }

    /// `record` and `diagnose`: a constant interval, 100 ms unless `--interval-ms` says.
    pub fn sampling(&self) -> anyhow::Result<Sampling> {
        let tick = self
            .interval()?
            .unwrap_or(Duration::from_millis(RECORD_INTERVAL_MS));
        Ok(Sampling {
            cadence: Cadence::every(tick),
            no_gpm: self.no_gpm,
        })
    }

    /// The agent's live source options: the adaptive cadence unless `--interval-ms` asks for a
    /// constant one.
    pub fn live_options(&self) -> anyhow::Result<LiveOptions> {
        let mode = match self.interval()? {
            Some(tick) => CadenceMode::Constant(tick),
            None => CadenceMode::Adaptive(Adaptive::default()),
        };
        Ok(LiveOptions {
            mode,
            no_gpm: self.no_gpm,
            kubelet_socket: self.kubelet_socket.clone(),
        })
    }
}

/// `--cadence`: `adaptive` (the agent's default policy) or a constant interval in ms.
pub fn parse_cadence(text: &str) -> Result<CadenceMode, String> {
    if text == "adaptive" {
        return Ok(CadenceMode::Adaptive(Adaptive::default()));
    }
    let ms: u64 = text
        .parse()
        .map_err(|_| format!("`{text}` is neither `adaptive` nor an interval in ms"))?;
    if !(10..=60_000).contains(&ms) {
        return Err(format!(
            "{ms} ms: an interval must be between 10 and 60000 ms"
        ));
    }
    Ok(CadenceMode::Constant(Duration::from_millis(ms)))
}

/// How a cadence is named in output: `adaptive` or `constant 100 ms`.
pub fn cadence_name(mode: CadenceMode) -> String {
    match mode {
        CadenceMode::Adaptive(a) => format!(
            "adaptive ({} ms, {} ms for {} s after a trigger)",
            a.relaxed.as_millis(),
            a.fast.as_millis(),
            a.hold_s
        ),
        CadenceMode::Constant(tick) => format!("constant {} ms", tick.as_millis()),
    }
}

/// Who holds each GPU, from the host (see `ticks::attributor_for`).
pub fn attributor(args: &SamplingArgs, source: &LiveSource<NvmlDevice>) -> Attributor {
    ticks::attributor_for(source, &args.kubelet_socket)
}

/// Opens every GPU through NVML.
pub fn open(sampling: Sampling) -> Result<LiveSource<NvmlDevice>, OpenError> {
    ticks::open_nvml(sampling.cadence, sampling.no_gpm)
}

/// Samples every tick until `run_for` has passed (forever when `None`) or a stop signal
/// arrives, handing each tick's samples to `on_samples`.
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
/// rather than end it: the library's tick loop through the same seam as the agent's.
pub fn run_ticks_until(
    source: &mut LiveSource<NvmlDevice>,
    attributor: Attributor,
    run_for: Option<Duration>,
    shutdown: &mut Shutdown,
    on_signal: OnSignal,
    on_samples: impl FnMut(Vec<Sample>) -> anyhow::Result<ControlFlow<()>>,
) -> anyhow::Result<u64> {
    let on_stop = match on_signal {
        OnSignal::Stop => OnStop::End,
        OnSignal::ForwardTo(pid) => {
            OnStop::PassOn(Box::new(move |cause| shutdown::pass_on(cause, pid)))
        }
    };
    ticks::tick_loop(
        source,
        attributor,
        run_for,
        shutdown.stop(),
        on_stop,
        on_samples,
    )
}
