//! Command-line edge: argument parsing, logging set-up, and the mapping from errors to exit
//! codes. Library errors are typed; here they become `anyhow` messages for people.

/// `println!` that returns the write's error instead of panicking: a reader that stops early
/// (`| head -1`) ends the command quietly, with exit 0 (see `is_broken_pipe`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

/// `print!` likewise.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)?
    }};
}

mod bench;
mod bundled;
mod calibrate;
mod diagnose;
mod export_args;
mod flags;
mod input;
mod live;
mod record;
mod replay;
mod run;
mod sampler;
mod score;
mod shutdown;
mod watch;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "gpuslack",
    version,
    about = "Tells whether a GPU is really working: GPU-Util lies, power and SM activity do not."
)]
struct Cli {
    /// More log output on stderr (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Watch the GPUs and print a report: the diagnostic matrix, verdict, evidence and remedy per GPU.
    Diagnose(diagnose::Args),
    /// The agent: sample every GPU, diagnose each window, report verdict changes.
    Run(Box<run::Args>),
    /// Record raw samples of every GPU to a trace file, to replay anywhere.
    Record(record::Args),
    /// Run the pipeline over a recorded trace and print one verdict per GPU and window.
    Replay(replay::Args),
    /// Score the verdicts on a recorded trace against its labels (labels.json).
    Score(score::Args),
    /// Reference workloads on a GPU, each figure beside the live readings while it ran.
    Bench(bench::Args),
    /// Measure each GPU's own power baselines under the reference workloads; write a profile.
    Calibrate(calibrate::Args),
}

/// Exit code for a missing GPU, driver or NVML library: sysexits' EX_UNAVAILABLE, apart from
/// clap's 2 for a usage error, so that a unit or a DaemonSet can tell a node without a GPU
/// from a wrong flag.
pub const EXIT_NO_GPU: u8 = 69;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // The agent logs what it samples, where it exports and each verdict change at INFO; the
    // other commands print their reports and stay quiet below WARN.
    let agent = matches!(cli.command, Command::Run(_));
    init_logging(cli.verbose, agent);
    if matches!(
        cli.command,
        Command::Diagnose(_) | Command::Run(_) | Command::Record(_)
    ) {
        // These only sample: NVML need not load libcuda (no_libcuda.rs).
        crate::no_libcuda::refuse();
    }
    let result = match cli.command {
        Command::Diagnose(args) => diagnose::run(args),
        Command::Run(args) => run::run(*args),
        Command::Record(args) => record::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Score(args) => score::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Calibrate(args) => calibrate::run(args),
    };
    match result {
        Ok(code) => code,
        // A reader that stops early (`| head`) is not an error.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn init_logging(verbose: u8, agent: bool) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;

    let default = match verbose {
        0 if agent => LevelFilter::INFO,
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        _ => LevelFilter::DEBUG,
    };
    // RUST_LOG as `target=level` directives. `Targets` rather than `EnvFilter`: span and field
    // filters are not worth the regex engine EnvFilter brings (build time, resident pages).
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .map(|value| value.parse::<Targets>().map_err(|e| (value, e)));
    let filter = match &from_env {
        Some(Ok(targets)) => targets.clone(),
        _ => Targets::new().with_default(default),
    };
    // Colour only for a person at a terminal: journald and kubectl logs show escape codes raw.
    use std::io::IsTerminal;
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_filter(filter)
        .with_filter(QuietRepeats);
    tracing_subscriber::registry().with(layer).init();
    if let Some(Err((value, e))) = from_env {
        tracing::warn!("RUST_LOG={value:?} is not a list of target=level directives ({e}); logging at {default}");
    }
}

/// The OpenTelemetry SDK reports every failed export: with a collector down that is a line per
/// interval, forever. Each of its call sites may speak once a minute; ours are not limited.
struct QuietRepeats;

impl<S> tracing_subscriber::layer::Filter<S> for QuietRepeats {
    fn enabled(
        &self,
        meta: &tracing::Metadata<'_>,
        _: &tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        quiet_repeats(meta)
    }

    fn callsite_enabled(
        &self,
        meta: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        // Decided event by event for the SDK's call sites, so the limit can apply.
        if meta.target().starts_with("opentelemetry") {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::always()
        }
    }
}

fn quiet_repeats(meta: &tracing::Metadata<'_>) -> bool {
    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    static LAST: Mutex<Option<HashMap<tracing::callsite::Identifier, Instant>>> = Mutex::new(None);
    if !meta.is_event() || !meta.target().starts_with("opentelemetry") {
        return true;
    }
    let Ok(mut last) = LAST.lock() else {
        return true;
    };
    let seen = last.get_or_insert_with(HashMap::new);
    let now = Instant::now();
    match seen.get(&meta.callsite()) {
        Some(t) if now.duration_since(*t) < Duration::from_secs(60) => false,
        _ => {
            seen.insert(meta.callsite(), now);
            true
        }
    }
}
