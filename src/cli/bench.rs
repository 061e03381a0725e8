//! `gpuslack bench`: the reference workloads, each figure beside what the live source saw while
//! it ran, so that "GPU-Util 100%" can be read against SM activity and power.

use std::process::ExitCode;

use anyhow::{bail, Result};
use gpuslack_bench_kernels::{gpu_count, BenchError, Gpu, Measurement, Options, Workload};
use serde::Serialize;

use super::EXIT_NO_GPU;
use gpuslack_receiver::device::DeviceFacts;
use gpuslack_receiver::source::live::background::{LiveSummary, Sampler};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Workloads to run: tiny, memory, compute, latency, pcie, starved, seesaw; all that fit when
    /// left out.
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
    /// Latency rows: where the DRAM peak their shares are of came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    dram_peak_source: Option<&'a str>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let mut workloads = Vec::new();
    for name in &args.workloads {
        match Workload::from_name(name) {
            Some(w) => workloads.push(w),
            None => bail!(
                "unknown workload `{name}`: choose from {}",
                Workload::ALL.map(Workload::name).join(", ")
            ),
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
    let sampler = Sampler::start(false);
    let facts = sampler.as_ref().and_then(|s| {
        s.facts()
            .iter()
            .find(|(index, _)| *index as usize == gpus[0].ordinal)
            .map(|(_, f)| f.clone())
    });
    let peak = dram_peak(facts.as_ref(), &gpus[0].name);
    if let Some(p) = &peak {
        errln!(
            "DRAM peak of GPU {}: {:.0} GB/s ({}): the latency workload's shares are of it",
            gpus[0].ordinal,
            p.gb_s,
            p.source
        );
    }
    let options = Options {
        seconds: args.seconds,
        duty: args.duty,
        bubble_ms: args.bubble_ms,
        dram_peak_gb_s: peak.as_ref().map(|p| p.gb_s),
    };
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
                    dram_peak_source: peak
                        .as_ref()
                        .filter(|_| m.workload == "latency")
                        .map(|p| p.source.as_str()),
                })
                .collect();
            outln!("{}", serde_json::to_string_pretty(&out)?);
        }
        Format::Table => print_table(&gpus[0], &rows, peak.as_ref())?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The DRAM peak a workload's bandwidth is a share of, and where it came from.
pub(super) struct DramPeak {
    pub gb_s: f64,
    pub source: String,
}

/// The GPU's DRAM peak as the diagnosis resolves it (`sku::spec_for`: NVML's bus width × memory
/// clock where the live source read them, else the SKU table's); the table alone by the CUDA
/// name where NVML is not available. `None` for a model in neither.
pub(super) fn dram_peak(facts: Option<&DeviceFacts>, cuda_name: &str) -> Option<DramPeak> {
    if let Some(spec) = facts.and_then(|f| gpuslack_calibration::sku::spec_for(f).ok()) {
        let figure = spec.mem_bandwidth_gb_s;
        if let Some(gb_s) = figure.value {
            let table = spec.sku.as_deref().unwrap_or("no table entry");
            return Some(DramPeak {
                gb_s,
                source: format!("{} ({table})", figure.source.as_str()),
            });
        }
    }
    match gpuslack_calibration::sku::resolve(cuda_name).ok()? {
        gpuslack_calibration::sku::SkuMatch::Known { sku, .. } => Some(DramPeak {
            gb_s: sku.mem_bandwidth_gb_s,
            source: format!("SKU table: {}", sku.name),
        }),
        _ => None,
    }
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
}

/// The latency workload's figures side by side: each variant's bandwidth as a share of the DRAM
/// peak, counted in DRAM sectors and in useful bytes, and each fix's speed-up over the pattern
/// before it. Empty without latency rows.
fn latency_lines(rows: &[&Measurement], peak: Option<&DramPeak>) -> Vec<String> {
    let latency: Vec<&Measurement> = rows
        .iter()
        .copied()
        .filter(|m| m.workload == "latency")
        .collect();
    if latency.is_empty() {
        return Vec::new();
    }
    let mut lines = vec![match peak {
        Some(p) => format!(
            "latency: bandwidth as a share of the DRAM peak ({:.0} GB/s, {}); `DRAM` counts the \
             64-byte fetches DRAM moved (the figure column), `useful` the bytes the program asked for",
            p.gb_s, p.source
        ),
        None => "latency: no DRAM peak known for this GPU: bandwidths in GB/s".into(),
    }];
    let share = |m: &Measurement, key: &str| {
        m.details
            .get(key)
            .map_or_else(|| "-".into(), |v| format!("{v:.1}%"))
    };
    let gb_s = |m: &Measurement, key: &str| {
        m.details
            .get(key)
            .map_or_else(|| "-".into(), |v| format!("{v:.0} GB/s"))
    };
    let mut pattern = "";
    for m in latency {
        let fix = match m.details.get("speedup_x") {
            Some(x) => format!("  fix: {x:.2}× the speed of {pattern}"),
            None => {
                pattern = &m.variant;
                String::new()
            }
        };
        lines.push(format!(
            "  {:<18} DRAM {:>6} ({:>10})  useful {:>6} ({:>10}){fix}",
            m.variant,
            share(m, "dram_pct_of_peak"),
            gb_s(m, "dram_gb_s"),
            share(m, "useful_pct_of_peak"),
            gb_s(m, "useful_gb_s"),
        ));
    }
    lines
}

/// The busiest pipe as `fp32 71.2%`, or `-` without GPM.
fn pipe(live: &LiveSummary) -> String {
    match (live.busiest_pipe, live.busiest_pipe_pct) {
        (Some(name), Some(pct)) => format!("{name} {pct:.1}%"),
        _ => "-".into(),
    }
}

fn print_table(
    gpu: &Gpu,
    rows: &[(Measurement, Option<LiveSummary>)],
    peak: Option<&DramPeak>,
) -> std::io::Result<()> {
    outln!(
        "GPU {} · {} · {} SMs · sm_{}{}",
        gpu.ordinal,
        gpu.name,
        gpu.sms,
        gpu.compute_capability.0,
        gpu.compute_capability.1
    );
    outln!(
        "{:<8} {:<22} {:>14} {:<11} {:>4} {:>8} {:>7} {:>6} {:>12} {:>6} {:>8}  {:<14} check",
        "workload",
        "variant",
        "figure",
        "unit",
        "gpu",
        "GPU-Util",
        "power",
        "SM",
        "busiest pipe",
        "DRAM",
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
            "{:<8} {:<22} {:>14} {:<11} {:>4} {:>7}% {:>6}W {:>5}% {:>12} {:>5}% {:>8}  {:<14} {}",
            m.workload,
            m.variant,
            value,
            m.unit,
            m.gpu,
            opt(live.util_gpu_pct, 0),
            opt(live.power_w, 0),
            opt(live.sm_active_pct, 1),
            pipe(&live),
            opt(live.dram_pct, 1),
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
    let measured: Vec<&Measurement> = rows.iter().map(|(m, _)| m).collect();
    for line in latency_lines(&measured, peak) {
        outln!("{line}");
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The peak the latency shares are of: the SKU table's by the CUDA name without NVML, what
    /// NVML's bus width and memory clock give where the live source read them, none for a
    /// model in neither.
    #[test]
    fn the_dram_peak_comes_from_nvml_else_the_table_else_nowhere() {
        let table = dram_peak(None, "NVIDIA H100 80GB HBM3").expect("in the table");
        assert_eq!(table.gb_s, 3350.0);
        assert!(table.source.contains("H100 SXM5"), "{}", table.source);
        assert!(dram_peak(None, "NVIDIA Quantum Tensor 9000").is_none());
        let facts = DeviceFacts {
            name: Some("NVIDIA H200".into()),
            ..DeviceFacts::default()
        };
        let spec = dram_peak(Some(&facts), "NVIDIA H200").expect("table through the spec");
        assert_eq!(spec.gb_s, 4800.0);
        assert!(spec.source.starts_with("table"), "{}", spec.source);
    }

    fn latency(variant: &str, details: &[(&'static str, f64)]) -> Measurement {
        Measurement {
            workload: "latency",
            variant: variant.into(),
            gpu: 0,
            value: details
                .iter()
                .find(|(k, _)| *k == "dram_pct_of_peak")
                .map_or(0.0, |(_, v)| *v),
            unit: "% DRAM peak",
            details: details.iter().copied().collect(),
            check: String::new(),
            started: 0.0,
            ended: 1.0,
        }
    }

    /// The side-by-side lines: both shares per part, each fix's speed-up against the pattern
    /// before it, nothing for other workloads.
    #[test]
    fn latency_lines_put_each_fix_beside_its_pattern() {
        let random = latency(
            "gather_random",
            &[
                ("dram_pct_of_peak", 45.04),
                ("useful_pct_of_peak", 13.51),
                ("dram_gb_s", 1508.8),
                ("useful_gb_s", 452.6),
            ],
        );
        let sorted = latency(
            "gather_sorted",
            &[
                ("dram_pct_of_peak", 80.0),
                ("useful_pct_of_peak", 30.0),
                ("dram_gb_s", 2680.0),
                ("useful_gb_s", 1005.0),
                ("speedup_x", 4.125),
            ],
        );
        let mut other = latency("copy", &[]);
        other.workload = "memory";
        let peak = DramPeak {
            gb_s: 3350.0,
            source: "table (H100 SXM5)".into(),
        };
        let lines = latency_lines(&[&other, &random, &sorted], Some(&peak));
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].contains("3350 GB/s, table (H100 SXM5)"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].contains("DRAM  45.0%") && lines[1].contains("useful  13.5%"),
            "{}",
            lines[1]
        );
        assert!(
            lines[1].contains("1509 GB/s") && !lines[1].contains("fix"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].ends_with("fix: 4.12× the speed of gather_random"),
            "{}",
            lines[2]
        );
        assert!(latency_lines(&[&other], Some(&peak)).is_empty());
        let no_peak = latency_lines(&[&random], None);
        assert!(no_peak[0].contains("no DRAM peak known"), "{}", no_peak[0]);
    }
}
