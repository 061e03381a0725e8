//! `gpuslack bench`: the reference workloads, each figure beside what the live source saw while
//! it ran, so that "GPU-Util 100%" can be read against SM activity and power.

use std::process::ExitCode;

use anyhow::{bail, Result};
use gpuslack_bench_kernels::{gpu_count, BenchError, Gpu, Measurement, Options, Workload};
use serde::Serialize;

use super::EXIT_NO_GPU;
use gpuslack_receiver::source::live::background::{LiveSummary, Sampler};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Workloads to run: tiny, memory, compute, pcie, starved, seesaw; all that fit when left out.
    pub workloads: Vec<String>,
    /// Run each measured part at least this long, so that power and the live readings settle
    /// (a power cap, if any, shows). Without it each part runs a fixed count, for rates.
    #[arg(long, value_name = "N", value_parser = super::flags::finite)]
    pub seconds: Option<f64>,
    /// GPU to run on (seesaw uses it and the next one).
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
    /// starved: share of time the GPU gets work (0–1).
    #[arg(long, default_value_t = 0.2, value_parser = super::flags::finite)]
    pub duty: f64,
    /// seesaw: host wait between hand-offs, ms.
    #[arg(long, default_value_t = 20.0, value_parser = super::flags::finite)]
    pub bubble_ms: f64,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
}

#[derive(Serialize)]
struct Row<'a> {
    #[serde(flatten)]
    measurement: &'a Measurement,
    live: Option<LiveSummary>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let mut workloads = Vec::new();
    for name in &args.workloads {
        match Workload::from_name(name) {
            Some(w) => workloads.push(w),
            None => bail!("unknown workload `{name}`: choose from tiny, memory, compute, pcie, starved, seesaw"),
        }
    }
    if let Some(s) = args.seconds {
        super::flags::seconds("--seconds", s, 0.1, 3600.0)?;
    }
    super::flags::factor("--duty", args.duty, 0.01, 1.0, None)?;
    super::flags::seconds("--bubble-ms (in seconds)", args.bubble_ms / 1e3, 0.0, 10.0)?;
    let count = match gpu_count() {
        Ok(n) if n > 0 => n,
        Ok(_) => {
            errln!("error: {}", BenchError::NoGpu);
            return Ok(ExitCode::from(EXIT_NO_GPU));
        }
        Err(e) => {
            errln!("error: {:#}", anyhow::Error::from(e));
            return Ok(ExitCode::from(EXIT_NO_GPU));
        }
    };
    if workloads.is_empty() {
        workloads = Workload::ALL
            .into_iter()
            .filter(|w| args.gpu + w.gpus_needed() <= count)
            .collect();
    }
    let needed = workloads.iter().map(|w| w.gpus_needed()).max().unwrap_or(1);
    let gpus = (args.gpu..(args.gpu + needed).min(count))
        .map(Gpu::open)
        .collect::<Result<Vec<_>, _>>()?;
    let options = Options {
        seconds: args.seconds,
        duty: args.duty,
        bubble_ms: args.bubble_ms,
    };
    let sampler = Sampler::start(false);
    let mut rows: Vec<(Measurement, Option<LiveSummary>)> = Vec::new();
    for workload in workloads {
        errln!("running {} on GPU {}…", workload.name(), gpus[0].ordinal);
        for m in workload.run(&gpus, &options)? {
            let live = sampler
                .as_ref()
                .map(|s| s.summary(m.gpu as u32, m.started, m.ended, 0.5));
            rows.push((m, live));
        }
    }
    match args.format {
        Format::Json => {
            let out: Vec<Row> = rows
                .iter()
                .map(|(m, live)| Row {
                    measurement: m,
                    live: live.clone(),
                })
                .collect();
            outln!("{}", serde_json::to_string_pretty(&out)?);
        }
        Format::Table => print_table(&gpus[0], &rows)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
}

fn print_table(gpu: &Gpu, rows: &[(Measurement, Option<LiveSummary>)]) -> std::io::Result<()> {
    outln!(
        "GPU {} · {} · {} SMs · sm_{}{}",
        gpu.ordinal,
        gpu.name,
        gpu.sms,
        gpu.compute_capability.0,
        gpu.compute_capability.1
    );
    outln!(
        "{:<8} {:<22} {:>14} {:<11} {:>4} {:>8} {:>7} {:>6} {:>8}  {:<14} check",
        "workload",
        "variant",
        "figure",
        "unit",
        "gpu",
        "GPU-Util",
        "power",
        "SM",
        "SM MHz",
        "throttle"
    );
    for (m, live) in rows {
        let live = live.clone().unwrap_or_default();
        let value = if m.value >= 1e5 {
            format!("{:.3e}", m.value)
        } else {
            format!("{:.2}", m.value)
        };
        outln!(
            "{:<8} {:<22} {:>14} {:<11} {:>4} {:>7}% {:>6}W {:>5}% {:>8}  {:<14} {}",
            m.workload,
            m.variant,
            value,
            m.unit,
            m.gpu,
            opt(live.util_gpu_pct, 0),
            opt(live.power_w, 0),
            opt(live.sm_active_pct, 1),
            opt(live.sm_mhz, 0),
            if live.throttle.is_empty() {
                "-".to_string()
            } else {
                live.throttle.join(",")
            },
            m.check
        );
        let details: Vec<String> = m
            .details
            .iter()
            .map(|(k, v)| {
                if v.abs() >= 1e5 {
                    format!("{k}={v:.3e}")
                } else {
                    format!("{k}={v:.3}")
                }
            })
            .collect();
        outln!("{:<8} {:<22} {}", "", "", details.join(" "));
    }
    let unsampled = rows
        .iter()
        .filter(|(_, live)| live.as_ref().is_some_and(|l| l.power_w.is_none()))
        .count();
    if unsampled > 0 {
        outln!(
            "{unsampled} part(s) ran too briefly for the live readings (100 ms samples, the first \
             0.5 s left out): run with --seconds 3 to see power, SM activity and throttling"
        );
    }
    Ok(())
}
