mod watch;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use gpuslack_receiver::report::{HumanReport, Prices, RenderOptions, SourceLabel};
use gpuslack_receiver::source::replay::replay;
use gpuslack_receiver::trace::{TraceFacts, TraceReader};

use gpuslack_receiver::source::live::nvml::NvmlDevice;
use gpuslack_receiver::source::live::LiveSource;

use crate::cli::bundled;
use crate::cli::flags;
use crate::cli::input::{facts_beside, PipelineArgs};
use crate::cli::live::{self, SamplingArgs};
use crate::cli::shutdown::Shutdown;
use crate::cli::EXIT_NO_GPU;

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
    /// Also write the report as one self-contained HTML page: a timeline per GPU (verdicts as
    /// coloured bands, power and SM activity beneath), the bottom line and the tables.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// A block per phase with every figure, after each GPU's summary.
    #[arg(long)]
    pub detail: bool,
    /// Price of one GPU-hour, to put a cost on the slack (any currency).
    #[arg(long, value_name = "PRICE", value_parser = flags::finite)]
    pub price_gpu_hour: Option<f64>,
    /// Price of one kWh, to put a cost on the slack's energy (any currency).
    #[arg(long, value_name = "PRICE", value_parser = flags::finite)]
    pub price_kwh: Option<f64>,
    /// Exit 69 (no GPU) instead of showing the bundled recording when this machine has no GPU:
    /// for scripts that must never take a recording for this host's GPUs.
    #[arg(long)]
    pub require_gpu: bool,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// The global `-v` count: rule ids beside the verdicts.
    #[arg(skip)]
    pub verbose: u8,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

impl Args {
    pub(crate) fn prices(&self) -> Result<Prices> {
        for (flag, price) in [
            ("--price-gpu-hour", self.price_gpu_hour),
            ("--price-kwh", self.price_kwh),
        ] {
            if let Some(p) = price {
                if !(p.is_finite() && p >= 0.0) {
                    anyhow::bail!("{flag} must be a price of 0 or more, got {p}");
                }
            }
        }
        Ok(Prices {
            per_gpu_hour: self.price_gpu_hour,
            per_kwh: self.price_kwh,
        })
    }
}

pub fn run(mut args: Args, verbose: u8) -> Result<ExitCode> {
    args.pipeline.validate()?;
    args.prices()?;
    args.verbose = verbose;
    // Before the GPUs are watched for seconds or a command for hours, not after.
    if let Some(path) = &args.html {
        crate::cli::files::check_output("--html", path)?;
    }
    if !args.command.is_empty() {
        return watch::run(&args);
    }
    match &args.trace {
        Some(path) => {
            let facts = facts_beside(path)?;
            let reader = TraceReader::open(path)?;
            let label = SourceLabel::Trace {
                name: path.display().to_string(),
                note: "recorded earlier; the verdicts describe the GPUs of that recording".into(),
            };
            report_trace(&args, reader, facts, label)
        }
        None => match live::open(args.sampling.sampling()?) {
            Ok(source) => report_live(&args, source),
            Err(e) if args.require_gpu => {
                errln!("gpuslack: no NVIDIA GPU or driver was found on this machine: {e}");
                Ok(ExitCode::from(EXIT_NO_GPU))
            }
            Err(e) => {
                let why = format!("no NVIDIA GPU here: {e}.");
                // The reason is said once, in the report's header; stderr says what is shown.
                errln!("gpuslack: no NVIDIA GPU here; showing the recording bundled in gpuslack instead (--require-gpu exits {EXIT_NO_GPU}).");
                let facts = TraceFacts::from_json(bundled::FACTS_JSON, "bundled facts.json")?;
                let reader = TraceReader::new(bundled::LABEL.into(), bundled::SAMPLES_CSV)?;
                let label = SourceLabel::Bundled {
                    name: bundled::NAME.into(),
                    reason: why,
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
    let label = SourceLabel::Live {
        host: hostname(),
        job: None,
    };
    show(args, &report, &label, |gpu| {
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
    use std::io::IsTerminal;
    let prices = args.prices()?;
    // A trace's file name and a watched command's arguments are anyone's: shown escaped.
    let label = label.shown();
    if let Some(path) = &args.html {
        let page = report.html(&label, &prices, &facts);
        crate::cli::files::write_replacing("--html", path, page.as_bytes())?;
    }
    let stdout = io::stdout();
    let colour_strip = stdout.is_terminal();
    let mut out = stdout.lock();
    match args.format {
        Format::Human => {
            let options = RenderOptions {
                detail: args.detail,
                verbose: args.verbose > 0,
                colour_strip,
                prices,
            };
            report.render(&mut out, &label, &options, &facts)?
        }
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, &report.json(&label, &prices, &facts))?;
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

/// This machine's name, for the report's header and a hang's line ("GPU 0 on node-7").
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "this machine".into())
}
