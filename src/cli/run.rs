//! `gpuslack run`: the agent. Samples every GPU, diagnoses each window and reports when a GPU's
//! verdict changes. Exporters (OTLP, Prometheus) plug in where the reports come out.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Result;
use gpuslack_receiver::{Class, WindowReport};

use super::input::PipelineArgs;
use super::live::{self, SamplingArgs};
use super::EXIT_NO_GPU;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Stop after this many seconds; runs until interrupted when left out.
    #[arg(long, value_name = "N")]
    pub seconds: Option<f64>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// At exit, print this process's CPU time and peak memory (the overhead benchmark).
    #[arg(long)]
    pub usage: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    args.pipeline.validate()?;
    let cadence = args.sampling.cadence()?;
    let rss_before_nvml = live::rss_now_kib();
    let mut source = match live::open(cadence) {
        Ok(source) => source,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_NO_GPU));
        }
    };
    let mut pipeline = args.pipeline.pipeline(Default::default());
    for (gpu, facts) in source.facts() {
        pipeline.diagnoser_mut().set_facts(gpu, facts);
    }
    let rss_after_open = live::rss_now_kib();
    let mut verdicts = VerdictLog::default();
    // Measured from the end of the first tick: NVML start-up, the first GPM sample and the
    // first (cold, ~14 ms) energy read are one-off costs, not the agent's steady overhead.
    let mut started = std::time::Instant::now();
    let mut before = None;
    let ticks = live::run_ticks(&mut source, args.seconds, |samples| {
        for sample in &samples {
            for report in pipeline.push(sample)? {
                verdicts.observe(&report);
            }
        }
        if before.is_none() {
            before = live::resource_usage();
            started = std::time::Instant::now();
        }
        Ok(())
    })?;
    for report in pipeline.finish() {
        verdicts.observe(&report);
    }
    if args.usage {
        let wall = started.elapsed();
        if let (Some(before), Some(after)) = (before, live::resource_usage()) {
            let cpu = after.cpu.saturating_sub(before.cpu);
            println!(
                "interval_ms gpus ticks wall_s cpu_ms cpu_pct_of_core max_rss_mib rss_now_mib"
            );
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
        if let Ok(rollup) = std::fs::read_to_string("/proc/self/smaps_rollup") {
            for line in rollup.lines().filter(|l| {
                [
                    "Rss:",
                    "Anonymous:",
                    "Shared_Clean:",
                    "Private_Clean:",
                    "Private_Dirty:",
                ]
                .iter()
                .any(|p| l.starts_with(p))
            }) {
                println!("memory {line}");
            }
        }
        println!("field reads wall_us_per_read cpu_us_per_read cpu_ms_total");
        for (field, cost) in source.field_costs() {
            if cost.reads == 0 {
                continue;
            }
            let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / cost.reads as f64;
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
    Ok(ExitCode::SUCCESS)
}

/// Logs a GPU's verdict when it changes, with the evidence and the remedy.
#[derive(Default)]
struct VerdictLog {
    last: BTreeMap<u32, Class>,
}

impl VerdictLog {
    fn observe(&mut self, r: &WindowReport) {
        let gpu = r.stats.gpu;
        if self.last.insert(gpu, r.class) == Some(r.class) {
            return;
        }
        let evidence: Vec<&str> = r.evidence.iter().map(|e| e.text.as_str()).collect();
        tracing::warn!(
            gpu,
            class = r.class.as_str(),
            power_w = r.signals.power_w,
            sm_active = r.signals.sm_pct.map(|p| p / 100.0),
            efficiency = r.efficiency,
            evidence = %evidence.join("; "),
            remedy = r.remedy(),
            "diagnosis changed"
        );
    }
}
