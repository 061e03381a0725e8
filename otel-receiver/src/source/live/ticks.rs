//! Live GPUs as a [`Source`]: NVML opened with an error a person can act on, the owners of each
//! GPU added from the host, and the drift-free tick loop. Ticks are scheduled on an absolute
//! grid so they do not drift; a tick that falls behind is skipped, never run in a burst.

#![warn(missing_docs)]

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::nvml::{NvmlBackend, NvmlDevice, OpenError};
use super::{Cadence, DeviceReader, Field, LiveSource, SourceEvent};
use crate::attribution::kubelet::{GpuIds, PodWatcher};
use crate::attribution::procfs::Procfs;
use crate::attribution::Attributor;
use crate::device::DeviceFacts;
use crate::source::cadence::{CadenceMode, CadencePolicy};
use crate::source::{Next, Source, SourceError};
use crate::stop::{Stop, StopCause};
use crate::trace::TraceFacts;
use crate::usage::{self, ResourceUsage};
use crate::{Sample, WindowReport};

/// How to sample live GPUs.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// One tick always, or the adaptive policy; each field's own period follows from the
    /// mode's longest tick ([`CadenceMode::base`]).
    pub mode: CadenceMode,
    /// Leave GPM out, as on a GPU without it.
    pub no_gpm: bool,
    /// The kubelet's PodResources socket; pods are not looked up where it does not exist.
    pub kubelet_socket: PathBuf,
}

/// Opens NVML and every GPU (one reader per MIG instance), GPM left out if `no_gpm`.
pub fn open_nvml(cadence: Cadence, no_gpm: bool) -> Result<LiveSource<NvmlDevice>, OpenError> {
    let backend = NvmlBackend::open()?;
    let devices = backend.devices()?;
    let source = LiveSource::new(devices, cadence).with_cpu_clock(usage::thread_cpu_time);
    Ok(if no_gpm {
        source.without(&[Field::Gpm])
    } else {
        source
    })
}

/// Who holds each GPU, from the host: executable, user, CPU use, container, job, and the pods
/// the kubelet assigned each GPU to where a kubelet answers on `kubelet_socket`.
pub fn attributor_for<D: DeviceReader>(
    source: &LiveSource<D>,
    kubelet_socket: &std::path::Path,
) -> Attributor {
    let attributor = Attributor::new(Procfs::system());
    let Some(watcher) = PodWatcher::start(kubelet_socket) else {
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

/// What a stop request does to the tick loop.
pub enum OnStop {
    /// Ends it.
    End,
    /// Hands the request to this function (which passes a signal on to a watched command)
    /// and keeps sampling.
    PassOn(Box<dyn FnMut(StopCause)>),
}

impl OnStop {
    /// Whether the request that arrived ends the loop; a passed-on one is forgotten.
    fn ends(&mut self, stop: &mut Stop) -> bool {
        match self {
            OnStop::End => true,
            OnStop::PassOn(pass) => {
                if let Some(cause) = stop.take() {
                    pass(cause);
                }
                false
            }
        }
    }
}

/// The tick grid: when the next tick is due, and what has been said about lost GPUs.
struct Ticker {
    tick: Duration,
    next: Option<Instant>,
    ticks: u64,
    all_lost_said: bool,
}

impl Ticker {
    fn new(tick: Duration) -> Ticker {
        Ticker {
            tick,
            next: None,
            ticks: 0,
            all_lost_said: false,
        }
    }

    /// Waits for the next tick on the grid and samples it; `None` when the loop ends.
    fn tick<D: DeviceReader>(
        &mut self,
        source: &mut LiveSource<D>,
        attributor: &mut Attributor,
        stop: &mut Stop,
        on_stop: &mut OnStop,
        deadline: Option<Instant>,
    ) -> Option<Vec<Sample>> {
        if let Some(next) = self.next.as_mut() {
            *next += self.tick;
            let now = Instant::now();
            while *next < now {
                *next += self.tick;
            }
            let wake = deadline.map_or(*next, |d| d.min(*next));
            if stop.wait(wake.saturating_duration_since(now)) && on_stop.ends(stop) {
                return None;
            }
        } else {
            self.next = Some(Instant::now());
        }
        if deadline.is_some_and(|d| Instant::now() >= d) || (stop.requested() && on_stop.ends(stop))
        {
            return None;
        }
        let mut samples = source.sample(usage::unix_now);
        samples.iter_mut().for_each(|s| attributor.enrich(s));
        self.ticks += 1;
        for event in source.drain_events() {
            log_event(&event);
        }
        if source.live_gpus() == 0 && !self.all_lost_said {
            tracing::error!("every GPU is lost; asking each again every 10 s");
        }
        self.all_lost_said = source.live_gpus() == 0;
        Some(samples)
    }
}

/// Samples every tick until `run_for` has passed (forever when `None`) or a stop ends the loop,
/// handing each tick's samples to `on_samples`, which may end it too. Returns the ticks
/// sampled. For the commands that keep the samples themselves (`record`, `diagnose`).
pub fn tick_loop<D: DeviceReader, E>(
    source: &mut LiveSource<D>,
    mut attributor: Attributor,
    run_for: Option<Duration>,
    stop: &mut Stop,
    mut on_stop: OnStop,
    mut on_samples: impl FnMut(Vec<Sample>) -> Result<ControlFlow<()>, E>,
) -> Result<u64, E> {
    let deadline = run_for.map(|d| Instant::now() + d);
    let mut ticker = Ticker::new(source.cadence().tick);
    while let Some(samples) = ticker.tick(source, &mut attributor, stop, &mut on_stop, deadline) {
        if on_samples(samples)?.is_break() {
            break;
        }
    }
    Ok(ticker.ticks)
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

/// The live GPUs as the agent's source: every GPU through NVML (+GPM), its owners from the
/// host, on the tick grid; it keeps what `run --usage` reports of its own cost.
pub struct LiveTicks<D: DeviceReader = NvmlDevice> {
    source: LiveSource<D>,
    attributor: Attributor,
    ticker: Ticker,
    /// Which tick the next one uses: the constant one, or the adaptive policy's answer.
    policy: CadencePolicy,
    /// When the last tick was sampled (unix s), the policy's clock.
    last_tick_t: Option<f64>,
    gpm: bool,
    rss_before_open: Option<u64>,
    rss_after_open: Option<u64>,
    /// Measured from the end of the first tick: NVML start-up, the first GPM sample and the
    /// first (cold, ~14 ms) energy read are one-off costs, not the agent's steady overhead.
    first_tick: Option<(Instant, Option<ResourceUsage>)>,
}

impl LiveTicks<NvmlDevice> {
    /// Opens every GPU through NVML.
    pub fn open(options: &LiveOptions) -> Result<LiveTicks<NvmlDevice>, OpenError> {
        let rss_before_open = usage::rss_now_kib();
        let source = open_nvml(Cadence::every(options.mode.base()), options.no_gpm)?;
        let mut ticks =
            LiveTicks::new(source, &options.kubelet_socket, options.no_gpm).with_mode(options.mode);
        ticks.rss_before_open = rss_before_open;
        Ok(ticks)
    }
}

impl<D: DeviceReader> LiveTicks<D> {
    /// A source over GPUs already open (a scripted reader in tests).
    pub fn new(source: LiveSource<D>, kubelet_socket: &std::path::Path, no_gpm: bool) -> Self {
        let attributor = attributor_for(&source, kubelet_socket);
        LiveTicks {
            ticker: Ticker::new(source.cadence().tick),
            policy: CadencePolicy::new(CadenceMode::Constant(source.cadence().tick)),
            last_tick_t: None,
            gpm: !no_gpm,
            rss_before_open: None,
            rss_after_open: usage::rss_now_kib(),
            first_tick: None,
            source,
            attributor,
        }
    }

    /// Paces the ticks by `mode` rather than the source's constant tick. The per-field
    /// periods stay those the source was built with.
    pub fn with_mode(mut self, mode: CadenceMode) -> Self {
        self.policy = CadencePolicy::new(mode);
        self
    }

    /// The live source, for its counters.
    pub fn live(&self) -> &LiveSource<D> {
        &self.source
    }

    /// The cadence policy, for its time split.
    pub fn policy(&self) -> &CadencePolicy {
        &self.policy
    }

    /// The interval column of `run --usage`: the constant tick in ms, or `adaptive`.
    fn interval_name(&self) -> String {
        match self.policy.mode() {
            CadenceMode::Constant(tick) => tick.as_millis().to_string(),
            CadenceMode::Adaptive(_) => "adaptive".into(),
        }
    }
}

impl<D: DeviceReader> Source for LiveTicks<D> {
    fn facts(&self) -> TraceFacts {
        TraceFacts {
            default: DeviceFacts::default(),
            per_gpu: self.source.facts().into_iter().collect(),
        }
    }

    fn next(&mut self, stop: &mut Stop, deadline: Option<Instant>) -> Result<Next, SourceError> {
        if self.ticker.ticks == 1 && self.first_tick.is_none() {
            // The agent has handled the first tick: steady state starts here.
            self.first_tick = Some((Instant::now(), usage::resource_usage()));
        }
        // The windows the agent closed since the last tick are in the policy: the tick after
        // it follows from them. Both ticks lie on the grid of the shorter one (1 s is ten of
        // 100 ms), so a change never bursts.
        let tick = self
            .policy
            .tick_at(self.last_tick_t.unwrap_or(f64::NEG_INFINITY));
        self.ticker.tick = tick;
        self.source.set_tick(tick);
        let next = self.ticker.tick(
            &mut self.source,
            &mut self.attributor,
            stop,
            &mut OnStop::End,
            deadline,
        );
        let Some(samples) = next else {
            return Ok(Next::End);
        };
        let t = samples.first().map_or_else(usage::unix_now, |s| s.t);
        // The interval that ended with this tick was `tick`, whatever the sample triggers.
        self.policy.count_tick(tick);
        for sample in &samples {
            self.policy.observe_sample(sample);
        }
        self.last_tick_t = Some(t);
        Ok(Next::Samples(samples))
    }

    fn announce(&self, window_s: f64, destinations: &str) {
        let facts = self.source.facts();
        let models: std::collections::BTreeSet<&str> = facts
            .iter()
            .filter_map(|(_, f)| f.name.as_deref())
            .collect();
        tracing::info!(
            gpus = facts.len(),
            models = %models.into_iter().collect::<Vec<_>>().join(", "),
            interval_ms = %self.interval_name(),
            gpm = self.gpm,
            window_s,
            "gpuslack sampling; exporting to {destinations}"
        );
    }

    fn live_clock(&self) -> bool {
        true
    }

    fn observe_window(&mut self, report: &WindowReport) {
        self.policy.observe_window(report);
    }

    fn usage(&self) -> Vec<String> {
        let mut out = Vec::new();
        // No mark: no tick was sampled, and there is no steady state to report.
        let (started, before) = self.first_tick.unwrap_or((Instant::now(), None));
        let wall = started.elapsed();
        if let (Some(before), Some(after)) = (before, usage::resource_usage()) {
            let cpu = after.cpu.saturating_sub(before.cpu);
            out.push(
                "interval_ms gpus ticks wall_s cpu_ms cpu_pct_of_core max_rss_mib rss_now_mib"
                    .into(),
            );
            out.push(format!(
                "{} {} {} {:.1} {:.1} {:.3} {:.1} {:.1}",
                self.interval_name(),
                self.source.live_gpus(),
                self.ticker.ticks.saturating_sub(1),
                wall.as_secs_f64(),
                cpu.as_secs_f64() * 1000.0,
                100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
                after.max_rss_kib as f64 / 1024.0,
                usage::rss_now_kib().unwrap_or(0) as f64 / 1024.0
            ));
        }
        if let CadenceMode::Adaptive(a) = self.policy.mode() {
            let split = self.policy.split();
            out.push(
                "cadence relaxed_ms fast_ms hold_s relaxed_ticks fast_ticks fast_share_of_time"
                    .into(),
            );
            out.push(format!(
                "adaptive {} {} {} {} {} {:.3}",
                a.relaxed.as_millis(),
                a.fast.as_millis(),
                a.hold_s,
                split.relaxed_ticks,
                split.fast_ticks,
                split.fast_share()
            ));
            out.push(format!("cadence_triggers {}", split.triggers_line()));
        }
        let mib = |kib: Option<u64>| kib.unwrap_or(0) as f64 / 1024.0;
        out.push(format!(
            "rss_mib before_nvml {:.1} after_open {:.1} at_exit {:.1}",
            mib(self.rss_before_open),
            mib(self.rss_after_open),
            mib(usage::rss_now_kib())
        ));
        for (name, n) in self.source.reader_counters() {
            out.push(format!("{name} {n}"));
        }
        out.push("field reads wall_us_per_read cpu_us_per_read cpu_ms_total".into());
        for (field, cost) in self.source.field_costs() {
            if cost.reads == 0 {
                continue;
            }
            let per = |d: Duration| d.as_secs_f64() * 1e6 / cost.reads as f64;
            out.push(format!(
                "{:?} {} {:.1} {:.1} {:.1}",
                field,
                cost.reads,
                per(cost.wall),
                per(cost.cpu),
                cost.cpu.as_secs_f64() * 1000.0
            ));
        }
        out
    }
}
