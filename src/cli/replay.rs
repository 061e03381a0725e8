use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use gpuslack_receiver::pipeline::replay;
use gpuslack_receiver::report::{TableWriter, WindowRecord};
use gpuslack_receiver::source::cadence::{CadenceMode, CadencePolicy};
use gpuslack_receiver::source::thinning::replay_at;
use gpuslack_receiver::trace::TraceReader;

use super::input::{facts_beside, PipelineArgs};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Trace file (CSV, the format `gpuslack record` writes).
    pub trace: PathBuf,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Output format: a table for people, or one JSON object per GPU and window.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Read the trace as a live agent at this cadence would have (`adaptive` or a constant
    /// interval in ms), as `score --cadence` does.
    #[arg(long, value_name = "adaptive|MS", value_parser = super::live::parse_cadence)]
    pub cadence: Option<CadenceMode>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Jsonl,
}

pub fn run(args: Args) -> Result<ExitCode> {
    args.pipeline.validate()?;
    let facts = facts_beside(&args.trace)?;
    let mut pipeline = args.pipeline.pipeline_for_trace(&facts)?;
    let reader = TraceReader::open(&args.trace)?;
    let stdout = io::stdout().lock();
    let mut out = BufWriter::new(stdout);
    let mut policy = args.cadence.map(CadencePolicy::new);
    let run = |sink: &mut dyn FnMut(gpuslack_receiver::WindowReport) -> io::Result<()>| match policy
        .as_mut()
    {
        None => replay(reader, &mut pipeline, sink),
        Some(policy) => replay_at(reader, &mut pipeline, policy, sink).map(|(c, _)| c),
    };
    let counts = match args.format {
        Format::Jsonl => run(&mut |r| {
            serde_json::to_writer(&mut out, &WindowRecord::of(&r))?;
            out.write_all(b"\n")
        })?,
        Format::Table => {
            let mut table = TableWriter::new(&mut out)?;
            let counts = run(&mut |r| table.write(&r))?;
            table.flush()?;
            counts
        }
    };
    out.flush()?;
    if counts.duplicates > 0 || counts.empty > 0 {
        tracing::warn!(
            duplicates = counts.duplicates,
            empty = counts.empty,
            "skipped rows that repeat a time already seen for their GPU or carry no metric"
        );
    }
    if pipeline.diagnoser().facts(0).tdp_w.is_none() && args.pipeline.tdp_w.is_none() {
        tracing::info!("no TDP known for this trace: efficiency needs --tdp-w or a power_default_limit_mw column");
    }
    Ok(ExitCode::SUCCESS)
}
