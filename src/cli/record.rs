use std::collections::BTreeMap;
use std::io::BufWriter;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use gpuslack_receiver::device::DeviceFacts;
use gpuslack_receiver::files::create_in_place;
use gpuslack_receiver::trace::TraceFacts;

use super::convert::{format_for, format_name, TraceFormatArg};
use super::files;
use super::flags;
use super::live::{self, SamplingArgs};
use super::shutdown::Shutdown;
use super::EXIT_NO_GPU;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Trace file to write; `-` for standard output. Each GPU's facts (model, UUID, driver,
    /// limits) go beside it, in NAME.facts.json.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// The trace's format: `binary` holds each value exactly, in half the bytes, and replays
    /// about twice as fast; `csv` is the one to read. By default binary for a FILE ending in
    /// `.gstrace`, else CSV.
    #[arg(long, value_enum)]
    pub format: Option<TraceFormatArg>,
    /// How long to record; until interrupted when left out.
    #[arg(long, value_name = "N", value_parser = flags::finite)]
    pub seconds: Option<f64>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let sampling = args.sampling.sampling()?;
    let to_stdout = args.out.as_os_str() == "-";
    let facts_path = TraceFacts::path_for(&args.out);
    // Links refused before the GPUs are opened, not after.
    if !to_stdout {
        files::check_output("--out", &args.out)?;
        files::check_output("", &facts_path)?;
    }
    let run_for = args
        .seconds
        .map(|s| flags::seconds("--seconds", s, 0.1, 1e9))
        .transpose()?;
    // A stop signal ends the recording cleanly: every tick was flushed already.
    let mut shutdown = Shutdown::install()?;
    let mut source = match live::open(sampling) {
        Ok(source) => source,
        Err(e) => {
            errln!("error: {e}");
            return Ok(ExitCode::from(EXIT_NO_GPU));
        }
    };
    let out: Box<dyn std::io::Write> = if to_stdout {
        Box::new(std::io::stdout().lock())
    } else {
        // Under its own name from the start, not renamed at the end: every tick is flushed so
        // that a recording killed half-way keeps what it recorded (`gpuslack_receiver::files`).
        let file = create_in_place(&args.out).map_err(|e| files::named("--out", e))?;
        Box::new(BufWriter::new(file))
    };
    let format = format_for(args.format, &args.out);
    let mut writer = format.writer(out).context("writing the trace header")?;
    // Each GPU's peak figures and where each came from, for whoever reads the facts file (a
    // replay resolves them again from the readings beside them).
    let mut per_gpu = BTreeMap::new();
    for (gpu, mut f) in source.facts() {
        f.spec = Some(gpuslack_calibration::sku::spec_for(&f)?);
        per_gpu.insert(gpu, f);
    }
    let facts = TraceFacts {
        default: DeviceFacts::default(),
        per_gpu,
    };
    for (gpu, f) in &facts.per_gpu {
        tracing::info!(
            gpu,
            name = f.name.as_deref().unwrap_or("?"),
            uuid = f.uuid.as_deref().unwrap_or("?"),
            "recording"
        );
    }
    // What each GPU is, beside the trace, so that a replay anywhere knows its model, UUID and
    // profile. Standard output has no "beside".
    if !to_stdout {
        files::write_replacing("", &facts_path, facts.to_json().as_bytes())?;
    }
    let mut rows = 0u64;
    let attributor = live::attributor(&args.sampling, &source);
    let ticks = live::run_ticks(&mut source, attributor, run_for, &mut shutdown, |samples| {
        for s in &samples {
            writer.write(s)?;
            rows += 1;
        }
        // Flushed every tick, so an interrupted recording loses nothing.
        writer.flush()?;
        Ok(())
    })?;
    let handled: Vec<String> = source
        .reader_counters()
        .into_iter()
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    errln!(
        "recorded {rows} samples over {ticks} ticks to {} ({}; {})",
        args.out.display(),
        format_name(format),
        handled.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}
