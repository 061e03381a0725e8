use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use gpuslack_receiver::pipeline::{replay, replay_staged};
use gpuslack_receiver::report::{TableWriter, WindowRecord};
use gpuslack_receiver::source::cadence::{CadenceMode, CadencePolicy};
use gpuslack_receiver::source::thinning::replay_at;
use gpuslack_receiver::trace::{parse_threads, TraceReader};
use gpuslack_receiver::WindowReport;

use super::input::{facts_beside, trace_in, PipelineArgs};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Trace file, CSV or binary (`.gstrace`), as `gpuslack record` writes them, or a folder
    /// holding one (its `samples.csv`).
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

pub fn run(mut args: Args) -> Result<ExitCode> {
    args.pipeline.validate()?;
    args.trace = trace_in(&args.trace)?;
    let facts = facts_beside(&args.trace)?;
    let mut pipeline = args.pipeline.pipeline_for_trace(&facts)?;
    let reader = TraceReader::open(&args.trace)?;
    let mut policy = args.cadence.map(CadencePolicy::new);
    // At a cadence, the trace is read as a live agent at it would have read it (thinning.rs);
    // otherwise, where there are cores for it, the windows are diagnosed and the lines written
    // on a thread of their own while the caller's thread windows the samples.
    let staged = policy.is_none() && parse_threads() > 1;
    let run = |sink: &mut (dyn FnMut(WindowReport) -> io::Result<()> + Send)| match policy.as_mut()
    {
        Some(policy) => replay_at(reader, &mut pipeline, policy, sink).map(|(c, _)| c),
        None if staged => replay_staged(reader, &mut pipeline, sink),
        None => replay(reader, &mut pipeline, sink),
    };
    let counts = match args.format {
        Format::Jsonl => {
            let mut out = io::stdout();
            let mut lines = Vec::with_capacity(OUT_BYTES + 4096);
            let counts = run(&mut |r| {
                WindowRecord::of(&r).write_line(&mut lines);
                if lines.len() >= OUT_BYTES {
                    out.write_all(&lines)?;
                    lines.clear();
                }
                Ok(())
            });
            // What was formatted before an error is written, as it always was.
            let written = out.write_all(&lines).and_then(|()| out.flush());
            let counts = counts?;
            written?;
            counts
        }
        Format::Table => {
            let mut table = TableWriter::new(BufWriter::new(io::stdout()))?;
            let counts = run(&mut |r| table.write(&r))?;
            table.flush()?;
            counts
        }
    };
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

/// Bytes of JSON lines gathered before one write.
const OUT_BYTES: usize = 64 * 1024;
