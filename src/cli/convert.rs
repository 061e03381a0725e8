//! `gpuslack convert`: a trace from one format into the other. CSV is the one to read and edit;
//! binary (`.gstrace`) holds each value exactly and replays about twice as fast. The facts
//! file beside the trace goes along.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use gpuslack_receiver::files::Replacing;
use gpuslack_receiver::trace::{TraceFacts, TraceFormat, TraceReader};

use super::files;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The trace to read, CSV or binary (told apart by its first bytes).
    pub input: PathBuf,
    /// The trace to write; `-` for standard output.
    pub output: PathBuf,
    /// The format to write. By default binary for a name ending in `.gstrace`, else CSV.
    #[arg(long, value_enum)]
    pub to: Option<TraceFormatArg>,
}

/// A trace format, as a flag names it.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormatArg {
    Csv,
    Binary,
}

/// The format to write `path` in: the flag's, else the one its name says.
pub fn format_for(flag: Option<TraceFormatArg>, path: &Path) -> TraceFormat {
    match flag {
        Some(TraceFormatArg::Csv) => TraceFormat::Csv,
        Some(TraceFormatArg::Binary) => TraceFormat::Binary,
        None => TraceFormat::for_path(path),
    }
}

/// The name a format goes by in messages.
pub fn format_name(format: TraceFormat) -> &'static str {
    match format {
        TraceFormat::Csv => "CSV",
        TraceFormat::Binary => "binary",
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let to_stdout = args.output.as_os_str() == "-";
    let format = format_for(args.to, &args.output);
    if !to_stdout && same_file(&args.input, &args.output) {
        bail!(
            "{}: the output is the input; write the converted trace to another file",
            args.output.display()
        );
    }
    let mut reader = TraceReader::open(&args.input)?;
    let from = reader.format();
    let facts = TraceFacts::beside(&args.input)?;
    let facts_out = TraceFacts::path_for(&args.output);
    let facts = facts.filter(|_| !to_stdout && facts_out != TraceFacts::path_for(&args.input));
    if facts.is_some() {
        // Refused before the conversion, not after it.
        files::check_output("", &facts_out)?;
    }
    // Into a file beside the output, renamed over it once whole: a bad row half-way leaves no
    // half-converted trace under the name asked for (`gpuslack_receiver::files`).
    let mut replacing = None;
    let out: Box<dyn Write + '_> = if to_stdout {
        Box::new(io::stdout().lock())
    } else {
        Box::new(
            replacing.insert(Replacing::create(&args.output).map_err(|e| files::named("", e))?),
        )
    };
    let converted = (|| -> Result<u64> {
        let mut writer = format.writer(out).context("writing the trace header")?;
        let mut samples = 0u64;
        while let Some(sample) = reader.next_sample() {
            writer.write(sample?).context("writing the trace")?;
            samples += 1;
        }
        writer.flush().context("writing the trace")?;
        Ok(samples)
    })();
    // Dropped on an error, the partial file goes with it.
    let samples = converted?;
    if let Some(out) = replacing {
        out.commit().map_err(|e| files::named("", e))?;
    }
    if let Some(facts) = facts {
        files::write_replacing("", &facts_out, facts.to_json().as_bytes())?;
    }
    let size = |path: &Path| fs::metadata(path).map_or(0, |m| m.len());
    errln!(
        "converted {samples} samples: {} ({}, {} bytes) to {} ({}{})",
        args.input.display(),
        format_name(from),
        size(&args.input),
        args.output.display(),
        format_name(format),
        if to_stdout {
            String::new()
        } else {
            format!(", {} bytes", size(&args.output))
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Whether two paths name one file (the second need not exist).
fn same_file(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
