mod watch;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use gpuslack_receiver::report::{HumanReport, SourceLabel};
use gpuslack_receiver::source::replay::replay;
use gpuslack_receiver::trace::{TraceFacts, TraceReader};

use gpuslack_receiver::source::live::nvml::NvmlDevice;
use gpuslack_receiver::source::live::LiveSource;

use crate::cli::bundled;
use crate::cli::flags;
use crate::cli::input::{facts_beside, PipelineArgs};
use crate::cli::live::{self, SamplingArgs};
use crate::cli::shutdown::Shutdown;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// How long to watch the GPUs (without a command).
    #[arg(long, value_name = "N", default_value_t = 10.0, value_parser = flags::finite)]
    pub seconds: f64,
    /// The report as text for people, or as one JSON document.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// A command to run and watch: its standard streams, signals and exit code pass through,
    /// and the report covers the GPUs its process tree used, for as long as it ran.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Diagnose a recorded trace instead of the live GPUs.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

pub fn run(args: Args) -> Result<ExitCode> {
    args.pipeline.validate()?;
    if !args.command.is_empty() {
        return watch::run(&args);
    }
    match &args.trace {
        Some(path) => {
            let facts = facts_beside(path)?;
            let reader = TraceReader::open(path)?;
            let label = SourceLabel::Recorded {
                name: path.display().to_string(),
                note: "recorded earlier; the verdicts describe the GPUs of that recording".into(),
            };
            report_trace(&args, reader, facts, label)
        }
        None => match live::open(args.sampling.sampling()?) {
            Ok(source) => report_live(&args, source),
            Err(e) => {
                let why = format!("no NVIDIA GPU or driver was found on this machine: {e}");
                errln!("gpuslack: {why}; showing the bundled recorded trace instead.");
                let facts = TraceFacts::from_json(bundled::FACTS_JSON, "bundled facts.json")?;
                let reader =
                    TraceReader::new("<bundled h200-reference>".into(), bundled::SAMPLES_CSV)?;
                let label = SourceLabel::Recorded {
                    name: bundled::NAME.into(),
                    note: format!("{why}. This is a recording from a real H200, shipped inside gpuslack, so you can see what a report looks like."),
                };
                report_trace(&args, reader, facts, label)
            }
        },
    }
}

fn report_live(args: &Args, mut source: LiveSource<NvmlDevice>) -> Result<ExitCode> {
    let run_for = flags::seconds("--seconds", args.seconds, 0.1, 1e9)?;
    // Ctrl-C ends the watch early and still prints the report.
    let mut shutdown = Shutdown::install()?;
    let mut pipeline = args
        .pipeline
        .pipeline_for_live(source.facts())?
        .tolerating_clock_steps();
    errln!(
        "gpuslack: watching {} GPU(s) for {} s…",
        source.live_gpus(),
        args.seconds
    );
    let mut report = HumanReport::default();
    let attributor = live::attributor(&args.sampling, &source);
    live::run_ticks(
        &mut source,
        attributor,
        Some(run_for),
        &mut shutdown,
        |samples| {
            for sample in &samples {
                for r in pipeline.push(sample)? {
                    report.add(r);
                }
            }
            Ok(())
        },
    )?;
    for r in pipeline.finish() {
        report.add(r);
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "this machine".into());
    show(args, &report, &SourceLabel::Live { host }, |gpu| {
        pipeline.diagnoser().facts(gpu).clone()
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the report in the format asked for.
pub fn show(
    args: &Args,
    report: &HumanReport,
    label: &SourceLabel,
    facts: impl Fn(u32) -> gpuslack_receiver::device::DeviceFacts,
) -> Result<()> {
    let mut out = io::stdout().lock();
    match args.format {
        Format::Human => report.render(&mut out, label, facts)?,
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, &report.json(facts))?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    Ok(())
}

fn report_trace<R: io::Read>(
    args: &Args,
    reader: TraceReader<R>,
    facts: TraceFacts,
    label: SourceLabel,
) -> Result<ExitCode> {
    let mut pipeline = args.pipeline.pipeline_for_trace(&facts)?;
    let mut report = HumanReport::default();
    replay(reader, &mut pipeline, |r| {
        report.add(r);
        Ok(())
    })?;
    show(args, &report, &label, |gpu| {
        pipeline.diagnoser().facts(gpu).clone()
    })?;
    Ok(ExitCode::SUCCESS)
}
