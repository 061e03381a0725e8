//! `gpuslack run`: the agent. Samples every GPU (or replays a trace), diagnoses each window,
//! and publishes: OTLP metrics and diagnosis-change logs, a Prometheus endpoint, and a log line
//! on stderr when a GPU's verdict changes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gpuslack_receiver::device::DeviceFacts;
use gpuslack_receiver::export::otlp::OtlpExport;
use gpuslack_receiver::export::{prometheus, ExportState};
use gpuslack_receiver::trace::TraceReader;
use gpuslack_receiver::{Pipeline, Sample, WindowReport};

use super::export_args::ExportArgs;
use super::input::{facts_beside, PipelineArgs};
use super::live::{self, SamplingArgs};
use super::EXIT_NO_GPU;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Stop after this many seconds; runs until interrupted when left out.
    #[arg(long, value_name = "N")]
    pub seconds: Option<f64>,
    /// Feed a recorded trace through the same path instead of live GPUs; exits at its end
    /// after flushing the last export.
    #[arg(long, value_name = "TRACE")]
    pub replay: Option<PathBuf>,
    /// Replay speed: 1 is real time, 10 ten times faster, 0 as fast as possible.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// After a replay ends, keep serving Prometheus this many seconds (for demos and scrapes).
    #[arg(long, value_name = "S", default_value_t = 0.0)]
    pub linger_s: f64,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[command(flatten)]
    pub export: ExportArgs,
    /// At exit, print this process's CPU time and peak memory (the overhead benchmark).
    #[arg(long)]
    pub usage: bool,
}

/// Where reports go: the shared export state, OTLP logs, and stderr.
struct Publisher {
    state: Arc<RwLock<ExportState>>,
    otlp: Option<OtlpExport>,
}

impl Publisher {
    fn publish(&self, report: &WindowReport, facts: &DeviceFacts) {
        let change = match self.state.write() {
            Ok(mut state) => state.update(report, facts),
            Err(_) => return,
        };
        let Some(change) = change else { return };
        let evidence: Vec<&str> = report.evidence.iter().map(|e| e.text.as_str()).collect();
        tracing::warn!(
            gpu = change.gpu,
            class = change.to.as_str(),
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

pub fn run(args: Args) -> Result<ExitCode> {
    args.pipeline.validate()?;
    if !(args.speed.is_finite() && args.speed >= 0.0) {
        bail!(
            "--speed must be 0 (as fast as possible) or a positive factor, got {}",
            args.speed
        );
    }
    let config = args.export.resolve()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gpuslack-export")
        .enable_all()
        .build()
        .context("starting the export runtime")?;
    let state = Arc::new(RwLock::new(ExportState::default()));
    if let Some(addr) = config.prometheus {
        let listener = prometheus::bind(addr)
            .with_context(|| format!("--prometheus {addr}: cannot listen"))?;
        let (state, config) = (state.clone(), config.clone());
        runtime.spawn(async move {
            if let Err(e) = prometheus::serve(listener, state, config).await {
                tracing::error!(error = %e, "Prometheus endpoint stopped");
            }
        });
    }
    let otlp = match &config.otlp {
        Some(cfg) => {
            let _inside = runtime.enter();
            tracing::info!(endpoint = %cfg.endpoint, protocol = ?cfg.protocol, temporality = ?cfg.temporality, headers = cfg.headers.len(), "exporting OTLP");
            Some(OtlpExport::start(&config, cfg, state.clone())?)
        }
        None => None,
    };
    let publisher = Publisher { state, otlp };
    let result = match &args.replay {
        Some(path) => replay(&args, path, &publisher),
        None => live_loop(&args, &publisher),
    };
    if args.replay.is_some() && args.linger_s > 0.0 && config.prometheus.is_some() {
        std::thread::sleep(Duration::from_secs_f64(args.linger_s));
    }
    if let Some(otlp) = publisher.otlp {
        // Flushing gRPC needs the runtime; do it from this thread, outside any task.
        let _inside = runtime.enter();
        otlp.shutdown();
    }
    runtime.shutdown_timeout(Duration::from_secs(2));
    result
}

fn replay(args: &Args, path: &Path, publisher: &Publisher) -> Result<ExitCode> {
    let facts = facts_beside(path)?;
    let mut pipeline = args.pipeline.pipeline_for_trace(&facts)?;
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
            let due = Duration::from_secs_f64(((sample.t - t0) / args.speed).max(0.0));
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        let reports = pipeline
            .push(&sample)
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", reader.path(), reader.line()))?;
        deliver(&pipeline, reports);
        if args
            .seconds
            .is_some_and(|s| started.elapsed().as_secs_f64() >= s)
        {
            break;
        }
    }
    let reports = pipeline.finish();
    deliver(&pipeline, reports);
    if args.usage {
        if let Some(u) = live::resource_usage() {
            println!("replay_wall_s cpu_ms max_rss_mib");
            println!(
                "{:.1} {:.1} {:.1}",
                started.elapsed().as_secs_f64(),
                u.cpu.as_secs_f64() * 1000.0,
                u.max_rss_kib as f64 / 1024.0
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn live_loop(args: &Args, publisher: &Publisher) -> Result<ExitCode> {
    let sampling = args.sampling.sampling()?;
    let rss_before_nvml = live::rss_now_kib();
    let mut source = match live::open(sampling) {
        Ok(source) => source,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_NO_GPU));
        }
    };
    let mut pipeline = args.pipeline.pipeline_for_live(source.facts())?;
    let rss_after_open = live::rss_now_kib();
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
    let ticks = live::run_ticks(&mut source, args.seconds, |samples| {
        feed(&mut pipeline, &samples)?;
        if before.is_none() {
            before = live::resource_usage();
            started = Instant::now();
        }
        Ok(())
    })?;
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
        );
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
) {
    let wall = started.elapsed();
    if let (Some(before), Some(after)) = (before, live::resource_usage()) {
        let cpu = after.cpu.saturating_sub(before.cpu);
        println!("interval_ms gpus ticks wall_s cpu_ms cpu_pct_of_core max_rss_mib rss_now_mib");
        println!(
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
    println!(
        "rss_mib before_nvml {:.1} after_open {:.1} at_exit {:.1}",
        mib(rss_before_nvml),
        mib(rss_after_open),
        mib(live::rss_now_kib())
    );
    for (name, n) in source.reader_counters() {
        println!("{name} {n}");
    }
    println!("field reads wall_us_per_read cpu_us_per_read cpu_ms_total");
    for (field, cost) in source.field_costs() {
        if cost.reads == 0 {
            continue;
        }
        let per = |d: Duration| d.as_secs_f64() * 1e6 / cost.reads as f64;
        println!(
            "{:?} {} {:.1} {:.1} {:.1}",
            field,
            cost.reads,
            per(cost.wall),
            per(cost.cpu),
            cost.cpu.as_secs_f64() * 1000.0
        );
    }
}
