use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;

use anyhow::Result;
use gpuslack_receiver::pipeline::{replay, Pipeline, PipelineCounts, ReplayError};
use gpuslack_receiver::report::{TableWriter, WindowRecord};
use gpuslack_receiver::source::cadence::{CadenceMode, CadencePolicy};
use gpuslack_receiver::source::thinning::replay_at;
use gpuslack_receiver::trace::{parse_threads, TraceReader};
use gpuslack_receiver::WindowReport;

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
    // At a cadence, the trace is read as a live agent at it would have read it (thinning.rs);
    // otherwise with the JSON lines formatted on their own thread where there are cores for it.
    let counts = match (args.format, args.cadence) {
        (Format::Jsonl, None) if parse_threads() > 1 => jsonl_threaded(reader, &mut pipeline)?,
        (format, cadence) => {
            let mut policy = cadence.map(CadencePolicy::new);
            let run = |sink: &mut dyn FnMut(WindowReport) -> io::Result<()>| match policy.as_mut() {
                None => replay(reader, &mut pipeline, sink),
                Some(policy) => replay_at(reader, &mut pipeline, policy, sink).map(|(c, _)| c),
            };
            match format {
                Format::Jsonl => jsonl(run)?,
                Format::Table => {
                    let mut out = BufWriter::new(io::stdout().lock());
                    let mut table = TableWriter::new(&mut out)?;
                    let counts = run(&mut |r| table.write(&r))?;
                    table.flush()?;
                    out.flush()?;
                    counts
                }
            }
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

/// `replay --format jsonl` on the pipeline's own thread: `run` replays, handing each report to
/// the sink it is given, and the lines go out in writes of [`OUT_BYTES`].
fn jsonl(
    run: impl FnOnce(
        &mut dyn FnMut(WindowReport) -> io::Result<()>,
    ) -> Result<PipelineCounts, ReplayError>,
) -> Result<PipelineCounts, ReplayError> {
    let mut out = io::stdout().lock();
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
    written.map_err(ReplayError::Output)?;
    Ok(counts)
}

/// Bytes of JSON lines gathered before one write.
const OUT_BYTES: usize = 64 * 1024;

/// Reports handed to the output thread at a time: few enough that the batches in flight stay
/// under a MiB (a report is some 3 KB), many enough that the hand-over costs nothing per line.
const REPORTS_PER_BATCH: usize = 32;

/// `replay --format jsonl` with the lines formatted and written on a thread of their own: the
/// pipeline's thread is the one that limits an offline run on several cores, and formatting
/// was a quarter of its work. One thread writes, in the order the reports come, so the output
/// is the same bytes as on one thread.
fn jsonl_threaded(
    reader: TraceReader<BufReader<File>>,
    pipeline: &mut Pipeline,
) -> Result<PipelineCounts, ReplayError> {
    std::thread::scope(|scope| {
        let (batches, received) = mpsc::sync_channel::<Vec<WindowReport>>(4);
        let writer = scope.spawn(move || -> io::Result<()> {
            let mut out = io::stdout().lock();
            let mut lines = Vec::with_capacity(OUT_BYTES + 4096);
            for batch in received {
                for report in &batch {
                    WindowRecord::of(report).write_line(&mut lines);
                }
                if lines.len() >= OUT_BYTES {
                    out.write_all(&lines)?;
                    lines.clear();
                }
            }
            out.write_all(&lines)?;
            out.flush()
        });
        let mut batch = Vec::with_capacity(REPORTS_PER_BATCH);
        let gone = || io::Error::other("the output thread stopped");
        let counts = replay(reader, pipeline, |r| {
            batch.push(r);
            if batch.len() == REPORTS_PER_BATCH {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(REPORTS_PER_BATCH));
                batches.send(full).map_err(|_| gone())?;
            }
            Ok(())
        });
        // The reports before an error are written, as on one thread.
        let last = batches.send(batch);
        drop(batches);
        // The writer's own error (a closed pipe) is the one to name, not the hand-over's.
        match writer.join() {
            Ok(Err(e)) => return Err(ReplayError::Output(e)),
            Err(_) => return Err(ReplayError::Output(gone())),
            Ok(Ok(())) => {}
        }
        let counts = counts?;
        last.map_err(|_| ReplayError::Output(gone()))?;
        Ok(counts)
    })
}
