//! `gpuslack run`: the agent. Samples every GPU (or replays a trace), diagnoses each window,
//! and publishes: OTLP metrics and diagnosis-change logs, a Prometheus endpoint, and a log line
//! on stderr when a GPU's verdict changes.
//!
//! It ends on SIGTERM, SIGINT or SIGHUP as it ends at `--seconds` or the end of a replay: the
//! window in progress is diagnosed, the exporters flush within `--shutdown-timeout-s`, one line
//! says what was delivered and dropped, and the exit is 0 — or 3 when OTLP was configured and
//! nothing it produced ever reached the collector. A second signal during the flush ends it at
//! once: what it carried is counted as dropped, the line is still printed, the exit code the
//! same.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{mpsc, Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use gpuslack_receiver::attribution::pod_owner_of;
use gpuslack_receiver::device::DeviceFacts;
use gpuslack_receiver::export::delivery::Delivery;
use gpuslack_receiver::export::otlp::OtlpExport;
use gpuslack_receiver::export::prometheus::{self, Limits};
use gpuslack_receiver::export::ExportState;
use gpuslack_receiver::trace::TraceReader;
use gpuslack_receiver::{Pipeline, Sample, WindowReport};

use super::export_args::{strip_sdk_environment, ExportArgs};
use super::flags;
use super::input::{facts_beside, PipelineArgs};
use super::live::{self, SamplingArgs};
use super::shutdown::Shutdown;
use super::EXIT_NO_GPU;

/// Exit code when OTLP export was configured and nothing was ever delivered.
pub const EXIT_NOTHING_DELIVERED: u8 = 3;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Stop after this many seconds; runs until interrupted when left out.
    #[arg(long, value_name = "N", value_parser = flags::finite)]
    pub seconds: Option<f64>,
    /// Feed a recorded trace through the same path instead of live GPUs; exits at its end
    /// after flushing the last export.
    #[arg(long, value_name = "TRACE")]
    pub replay: Option<PathBuf>,
    /// Replay speed: 1 is real time, 10 ten times faster, 0 as fast as possible.
    #[arg(long, default_value_t = 1.0, value_parser = flags::finite)]
    pub speed: f64,
    /// After a replay ends, keep serving Prometheus this many seconds (for demos and scrapes).
    #[arg(long, value_name = "S", default_value_t = 0.0, value_parser = flags::finite)]
    pub linger_s: f64,
    /// On a stop signal or at the end, give the final export at most this long.
    #[arg(long, value_name = "S", default_value_t = 5.0, value_parser = flags::finite)]
    pub shutdown_timeout_s: f64,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[command(flatten)]
    pub export: ExportArgs,
    /// At exit, print this process's CPU time and peak memory (the overhead benchmark).
    #[arg(long)]
    pub usage: bool,
    /// /healthz answers 503 once this many OTLP metrics exports in a row have failed (one per
    /// export interval); 0 never does (docs/DEPLOY.md).
    #[arg(long, value_name = "N", default_value_t = prometheus::DEFAULT_UNHEALTHY_AFTER_FAILED_EXPORTS)]
    pub unhealthy_after_failed_exports: u32,
}

/// The checked durations of the flags.
struct Timing {
    run_for: Option<Duration>,
    linger: Duration,
    shutdown: Duration,
}

impl Args {
    fn timing(&self) -> Result<Timing> {
        flags::factor(
            "--speed",
            self.speed,
            1e-3,
            1e6,
            Some("as fast as possible"),
        )?;
        Ok(Timing {
            run_for: self
                .seconds
                .map(|s| flags::seconds("--seconds", s, 0.0, 1e9))
                .transpose()?,
            linger: flags::seconds("--linger-s", self.linger_s, 0.0, 86_400.0)?,
            shutdown: flags::seconds("--shutdown-timeout-s", self.shutdown_timeout_s, 0.1, 600.0)?,
        })
    }
}

/// Where reports go: the shared export state, OTLP logs, and stderr.
struct Publisher {
    state: Arc<RwLock<ExportState>>,
    otlp: Option<OtlpExport>,
    /// Where the windows go, for the line the agent logs when it starts.
    destinations: String,
}

/// Where the agent exports, in a few words (never a header's value).
fn destinations(config: &gpuslack_receiver::export::config::ExportConfig) -> String {
    let mut out = Vec::new();
    if let Some(cfg) = &config.otlp {
        let m = &cfg.metrics;
        out.push(format!(
            "OTLP {:?} to {} (metrics, {:?} temporality, every {} ms, {} header(s))",
            m.protocol,
            m.endpoint,
            cfg.temporality,
            cfg.interval.as_millis(),
            m.headers.len()
        ));
        if let Some(l) = &cfg.logs {
            out.push(format!("OTLP {:?} to {} (logs)", l.protocol, l.endpoint));
        }
    } else if config.otlp_disabled {
        out.push("no OTLP (OTEL_SDK_DISABLED=true)".into());
    }
    if let Some(addr) = config.prometheus {
        out.push(format!("Prometheus on http://{addr}/metrics"));
    }
    if out.is_empty() {
        "nowhere (neither --otlp-endpoint nor --prometheus is set)".into()
    } else {
        out.join("; ")
    }
}

impl Publisher {
    fn publish(&self, report: &WindowReport, facts: &DeviceFacts) {
        let change = match self.state.write() {
            Ok(mut state) => state.update(report, facts),
            Err(_) => return,
        };
        let Some(change) = change else { return };
        let evidence: Vec<&str> = report.evidence.iter().map(|e| e.text.as_str()).collect();
        // Whose GPU: the job, and the pod the kubelet assigned it to.
        let pod = report
            .stats
            .pods
            .as_deref()
            .and_then(|p| pod_owner_of(p))
            .map(|o| format!("{}/{}", o.namespace, o.pod));
        tracing::info!(
            gpu = change.gpu,
            class = change.to.as_str(),
            previous = change.from.map(|c| c.as_str()),
            job = report.job.as_deref(),
            pod = pod.as_deref(),
            power_w = report.signals.power_w,
            sm_active = report.signals.sm_pct.map(|p| p / 100.0),
            efficiency = report.efficiency,
            evidence = %evidence.join("; "),
            remedy = report.remedy(),
            "diagnosis changed"
        );
        if let (Some(otlp), Ok(state)) = (&self.otlp, self.state.read()) {
            if let Some(view) = state.get(change.gpu) {
                otlp.log_change(&change, view);
            }
        }
    }
}

/// Warns while every export fails: after 10 s of failures, then 20, 40, … up to hourly.
struct FailureWarning {
    endpoint: String,
    next: Duration,
    checked: Instant,
}

impl FailureWarning {
    fn poll(&mut self, delivery: &Delivery) {
        if self.checked.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.checked = Instant::now();
        let Some(since) = delivery.failing_since() else {
            self.next = Duration::from_secs(10);
            return;
        };
        let failing = since.elapsed();
        if failing < self.next {
            return;
        }
        let counts = delivery.counts();
        let reasons: Vec<String> = counts
            .exports_failed
            .iter()
            .map(|((signal, reason), n)| format!("{}/{reason}×{n}", signal.as_str()))
            .collect();
        tracing::warn!(
            endpoint = %self.endpoint,
            failing_s = failing.as_secs(),
            windows_dropped = counts.windows_dropped,
            failures = %reasons.join(", "),
            "nothing has reached the OTLP collector for a while; what cannot be delivered is counted as dropped"
        );
        self.next = (self.next * 2).min(Duration::from_secs(3600));
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    args.pipeline.validate()?;
    let timing = args.timing()?;
    let config = args.export.resolve()?;
    // Before any thread starts: the exporters must not read these again (flags win).
    strip_sdk_environment();
    let mut shutdown = Shutdown::install()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gpuslack-export")
        .enable_all()
        .build()
        .context("starting the export runtime")?;
    let delivery = Arc::new(Delivery::default());
    if args.export.process_series > 64 {
        anyhow::bail!(
            "--process-series must be at most 64 (series per GPU), got {}",
            args.export.process_series
        );
    }
    let state = Arc::new(RwLock::new(
        ExportState::with_delivery(delivery.clone())
            .with_top_processes(args.export.process_series)
            .with_owner_series(usize::from(args.export.owner_series)),
    ));
    if let Some(addr) = config.prometheus {
        let listener = prometheus::bind(addr)
            .with_context(|| format!("--prometheus {addr}: cannot listen"))?;
        let (state, config) = (state.clone(), config.clone());
        let limits = Limits {
            unhealthy_after_failed_exports: args.unhealthy_after_failed_exports,
            ..Limits::default()
        };
        runtime.spawn(async move {
            if let Err(e) = prometheus::serve(listener, state, config, limits).await {
                tracing::error!(error = %e, "Prometheus endpoint stopped");
            }
        });
    }
    let otlp = match &config.otlp {
        Some(cfg) => {
            let _inside = runtime.enter();
            Some(OtlpExport::start(
                &config,
                cfg,
                state.clone(),
                delivery.clone(),
            )?)
        }
        None => None,
    };
    let mut warning = config.otlp.as_ref().map(|cfg| FailureWarning {
        endpoint: cfg.metrics.endpoint.to_string(),
        next: Duration::from_secs(10),
        checked: Instant::now(),
    });
    let publisher = Publisher {
        state,
        otlp,
        destinations: destinations(&config),
    };
    let mut watch = || {
        if let Some(w) = warning.as_mut() {
            w.poll(&delivery);
        }
    };
    let result = match &args.replay {
        Some(path) => replay(&args, &timing, path, &publisher, &mut shutdown, &mut watch),
        None => live_loop(&args, &timing, &publisher, &mut shutdown, &mut watch),
    };
    if args.replay.is_some() && config.prometheus.is_some() && !shutdown.requested() {
        shutdown.wait(timing.linger);
    }
    if let Some(signal) = shutdown.signal_name() {
        errln!("gpuslack: {signal} received; flushing (another signal stops at once)");
    }
    let exported = config.otlp.is_some();
    let abandoned = match publisher.otlp {
        Some(otlp) => final_export(
            otlp,
            timing.shutdown,
            runtime.handle().clone(),
            &mut shutdown,
        ),
        None => false,
    };
    if abandoned {
        // What the export carried is dropped; the request still in flight is not waited for.
        delivery.close();
        runtime.shutdown_background();
    } else {
        runtime.shutdown_timeout(Duration::from_secs(1));
    }
    let counts = delivery.counts();
    if exported {
        errln!("gpuslack: {}", counts.summary());
    } else {
        errln!(
            "gpuslack: {} windows produced; {} Prometheus scrapes served",
            counts.windows_produced,
            counts.scrapes_served
        );
    }
    let code = result?;
    if exported && counts.windows_produced > 0 && !delivery.ever_delivered() {
        errln!("gpuslack: nothing was delivered to the OTLP collector");
        return Ok(ExitCode::from(EXIT_NOTHING_DELIVERED));
    }
    Ok(code)
}

/// The final export (at most `timeout`), on a thread of its own so that a second stop signal
/// ends the wait at once; returns whether one did.
fn final_export(
    otlp: OtlpExport,
    timeout: Duration,
    runtime: tokio::runtime::Handle,
    shutdown: &mut Shutdown,
) -> bool {
    let (hand, handed) = mpsc::channel::<OtlpExport>();
    let (done, finished) = mpsc::channel::<()>();
    let on_thread = runtime.clone();
    let spawned = std::thread::Builder::new()
        .name("gpuslack-final".into())
        .spawn(move || {
            if let Ok(otlp) = handed.recv() {
                otlp.shutdown(timeout, on_thread);
            }
            let _ = done.send(());
        });
    if let Err(e) = &spawned {
        tracing::warn!(error = %e, "no thread for the final export: a second signal cannot cut it short");
    }
    // No thread to take it: flushed here, bounded by the timeout alone.
    if let Err(mpsc::SendError(otlp)) = hand.send(otlp) {
        otlp.shutdown(timeout, runtime);
        return false;
    }
    loop {
        if let Some(signal) = shutdown.again(Duration::from_millis(50)) {
            errln!("gpuslack: {signal} received again; the final export is abandoned and what it carried counted as dropped");
            return true;
        }
        match finished.try_recv() {
            Err(mpsc::TryRecvError::Empty) => {}
            Ok(()) | Err(mpsc::TryRecvError::Disconnected) => return false,
        }
    }
}

fn replay(
    args: &Args,
    timing: &Timing,
    path: &Path,
    publisher: &Publisher,
    shutdown: &mut Shutdown,
    watch: &mut dyn FnMut(),
) -> Result<ExitCode> {
    let facts = facts_beside(path)?;
    let mut pipeline = args.pipeline.pipeline_for_trace(&facts)?;
    tracing::info!(
        trace = %path.display(),
        window_s = args.pipeline.window_s,
        "gpuslack replaying a recorded trace; exporting to {}",
        publisher.destinations
    );
    let mut reader = TraceReader::open(path)?;
    let started = Instant::now();
    let mut first_t = None;
    let deliver = |pipeline: &Pipeline, reports: Vec<WindowReport>| {
        for r in reports {
            publisher.publish(&r, pipeline.diagnoser().facts(r.stats.gpu));
        }
    };
    while let Some(sample) = reader.next() {
        let sample = sample?;
        if args.speed > 0.0 {
            let t0 = *first_t.get_or_insert(sample.t);
            // Finite: the reader refuses times outside 1970–2286 and the speed is checked.
            let due = Duration::try_from_secs_f64(((sample.t - t0) / args.speed).max(0.0))
                .unwrap_or(Duration::MAX);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                if shutdown.wait(wait) {
                    break;
                }
            }
        }
        if shutdown.requested() {
            break;
        }
        let reports = pipeline
            .push(&sample)
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", reader.path(), reader.line()))?;
        deliver(&pipeline, reports);
        watch();
        if timing.run_for.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
    }
    let reports = pipeline.finish();
    deliver(&pipeline, reports);
    if args.usage {
        if let Some(u) = live::resource_usage() {
            outln!("replay_wall_s cpu_ms max_rss_mib");
            outln!(
                "{:.1} {:.1} {:.1}",
                started.elapsed().as_secs_f64(),
                u.cpu.as_secs_f64() * 1000.0,
                u.max_rss_kib as f64 / 1024.0
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn live_loop(
    args: &Args,
    timing: &Timing,
    publisher: &Publisher,
    shutdown: &mut Shutdown,
    watch: &mut dyn FnMut(),
) -> Result<ExitCode> {
    let sampling = args.sampling.sampling()?;
    let rss_before_nvml = live::rss_now_kib();
    let mut source = match live::open(sampling) {
        Ok(source) => source,
        Err(e) => {
            errln!("error: {e}");
            return Ok(ExitCode::from(EXIT_NO_GPU));
        }
    };
    // A live clock may step (NTP): windows restart rather than refuse samples.
    let mut pipeline = args
        .pipeline
        .pipeline_for_live(source.facts())?
        .tolerating_clock_steps();
    let rss_after_open = live::rss_now_kib();
    let facts = source.facts();
    let models: std::collections::BTreeSet<&str> = facts
        .iter()
        .filter_map(|(_, f)| f.name.as_deref())
        .collect();
    tracing::info!(
        gpus = facts.len(),
        models = %models.into_iter().collect::<Vec<_>>().join(", "),
        interval_ms = args.sampling.interval_ms,
        gpm = !args.sampling.no_gpm,
        window_s = args.pipeline.window_s,
        "gpuslack sampling; exporting to {}",
        publisher.destinations
    );
    // Measured from the end of the first tick: NVML start-up, the first GPM sample and the
    // first (cold, ~14 ms) energy read are one-off costs, not the agent's steady overhead.
    let mut started = Instant::now();
    let mut before = None;
    let feed = |pipeline: &mut Pipeline, samples: &[Sample]| -> Result<()> {
        for sample in samples {
            for r in pipeline.push(sample)? {
                publisher.publish(&r, pipeline.diagnoser().facts(r.stats.gpu));
            }
        }
        Ok(())
    };
    let attributor = live::attributor(&args.sampling, &source);
    let ticks = live::run_ticks(
        &mut source,
        attributor,
        timing.run_for,
        shutdown,
        |samples| {
            feed(&mut pipeline, &samples)?;
            watch();
            if before.is_none() {
                before = live::resource_usage();
                started = Instant::now();
            }
            Ok(())
        },
    )?;
    for r in pipeline.finish() {
        publisher.publish(&r, pipeline.diagnoser().facts(r.stats.gpu));
    }
    if args.usage {
        print_usage(
            args,
            &source,
            ticks,
            started,
            before,
            rss_before_nvml,
            rss_after_open,
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_usage(
    args: &Args,
    source: &gpuslack_receiver::source::live::LiveSource<
        gpuslack_receiver::source::live::nvml::NvmlDevice,
    >,
    ticks: u64,
    started: Instant,
    before: Option<live::ResourceUsage>,
    rss_before_nvml: Option<u64>,
    rss_after_open: Option<u64>,
) -> std::io::Result<()> {
    let wall = started.elapsed();
    if let (Some(before), Some(after)) = (before, live::resource_usage()) {
        let cpu = after.cpu.saturating_sub(before.cpu);
        outln!("interval_ms gpus ticks wall_s cpu_ms cpu_pct_of_core max_rss_mib rss_now_mib");
        outln!(
            "{} {} {} {:.1} {:.1} {:.3} {:.1} {:.1}",
            args.sampling.interval_ms,
            source.live_gpus(),
            ticks.saturating_sub(1),
            wall.as_secs_f64(),
            cpu.as_secs_f64() * 1000.0,
            100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
            after.max_rss_kib as f64 / 1024.0,
            live::rss_now_kib().unwrap_or(0) as f64 / 1024.0
        );
    }
    let mib = |kib: Option<u64>| kib.unwrap_or(0) as f64 / 1024.0;
    outln!(
        "rss_mib before_nvml {:.1} after_open {:.1} at_exit {:.1}",
        mib(rss_before_nvml),
        mib(rss_after_open),
        mib(live::rss_now_kib())
    );
    for (name, n) in source.reader_counters() {
        outln!("{name} {n}");
    }
    outln!("field reads wall_us_per_read cpu_us_per_read cpu_ms_total");
    for (field, cost) in source.field_costs() {
        if cost.reads == 0 {
            continue;
        }
        let per = |d: Duration| d.as_secs_f64() * 1e6 / cost.reads as f64;
        outln!(
            "{:?} {} {:.1} {:.1} {:.1}",
            field,
            cost.reads,
            per(cost.wall),
            per(cost.cpu),
            cost.cpu.as_secs_f64() * 1000.0
        );
    }
    Ok(())
}
