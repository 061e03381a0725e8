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

/// `eprintln!` that never panics. `eprintln!` panics when the write fails (stderr a pipe whose
/// reader went away: a log shipper restarted, `2>&1 | head`), and the agent then exits 101 in
/// the middle of what it was saying, its final export lost. A line that cannot be written is
/// dropped: there is nowhere left to report it.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// `eprint!` likewise.
macro_rules! err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr().lock(), $($arg)*);
    }};
}

mod bench;
mod bundled;
mod calibrate;
mod convert;
mod diagnose;
mod doctor;
mod export_args;
mod files;
mod flags;
mod fleet;
mod input;
mod live;
mod record;
mod replay;
mod run;
mod score;
mod shutdown;

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
    /// Convert a trace between CSV (readable) and binary (`.gstrace`: exact, fast to replay).
    Convert(convert::Args),
    /// Score the verdicts on a recorded trace against its labels (labels.json).
    Score(score::Args),
    /// Reference workloads on a GPU, each figure beside the live readings while it ran.
    Bench(bench::Args),
    /// Measure each GPU's own power baselines under the reference workloads; write a profile.
    Calibrate(calibrate::Args),
    /// The fleet's waste report, or one job's across its nodes, from a Prometheus query API.
    Fleet(fleet::Args),
    /// What works on this node and what does not (NVML, GPM, processes, kubelet, collector), with fixes.
    Doctor(Box<doctor::Args>),
}

/// Exit code for a missing GPU, driver or NVML library: sysexits' EX_UNAVAILABLE, apart from
/// clap's 2 for a usage error, so that a unit or a DaemonSet can tell a node without a GPU
/// from a wrong flag.
pub const EXIT_NO_GPU: u8 = 69;

pub fn main() -> ExitCode {
    open_closed_standard_descriptors();
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    // The agent logs what it samples, where it exports and each verdict change at INFO; the
    // other commands print their reports and stay quiet below WARN.
    let agent = matches!(cli.command, Command::Run(_));
    // doctor's findings say what its probes' warnings would: its log stays at ERROR unless -v.
    let verbose = match cli.command {
        Command::Doctor(_) if cli.verbose == 0 => None,
        _ => Some(cli.verbose),
    };
    init_logging(verbose, agent);
    if matches!(
        cli.command,
        Command::Diagnose(_) | Command::Run(_) | Command::Record(_) | Command::Doctor(_)
    ) {
        // These only sample: NVML need not load libcuda (no_libcuda.rs).
        crate::no_libcuda::refuse();
    }
    let result = match cli.command {
        Command::Diagnose(args) => diagnose::run(args, cli.verbose),
        Command::Run(args) => run::run(*args),
        Command::Record(args) => record::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Score(args) => score::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::Fleet(args) => fleet::run(args),
        Command::Doctor(args) => doctor::run(*args),
    };
    match result {
        Ok(code) => code,
        // A reader that stops early (`| head`) is not an error.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // Errors quote files, URLs and servers' words: escaped, never raw.
            errln!(
                "error: {}",
                gpuslack_receiver::text::lines(&message_once(&e), usize::MAX)
            );
            ExitCode::FAILURE
        }
    }
}

/// The command line, parsed. A value may start with `-` (`--speed -1`): it is refused by the
/// flag's own check, by name, rather than taken for an unknown flag.
fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    fn negatives(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| {
            let takes_value = a.get_action().takes_values();
            a.allow_negative_numbers(takes_value)
        })
        .mut_subcommands(negatives)
    }
    let matches = negatives(Cli::command()).try_get_matches()?;
    Cli::from_arg_matches(&matches)
}

/// A usage error as one line on stderr, exit 2: clap's message with its indented details and
/// tips folded in, and where to read more; help and the version print as clap prints them.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
    }
    // Where clap's message has no usage line, the subcommand typed names the help to read.
    let typed = std::env::args().nth(1).filter(|a| {
        <Cli as clap::CommandFactory>::command()
            .get_subcommands()
            .any(|c| c.get_name() == a)
    });
    let mut rendered = e.render().to_string();
    if !rendered.contains("Usage: ") {
        if let Some(sub) = typed {
            rendered += &format!("\nUsage: gpuslack {sub}");
        }
    }
    errln!("{}", one_line_usage_error(&rendered));
    ExitCode::from(2)
}

/// `error: the following required arguments were not provided:\n  <TRACE>\n\nUsage: …` as
/// `error: the following required arguments were not provided: <TRACE>` followed by where to
/// read more (`; see` and the subcommand's `--help`), all on one line.
fn one_line_usage_error(rendered: &str) -> String {
    let mut why = String::new();
    let mut tips = Vec::new();
    let mut usage = None;
    for line in rendered.lines() {
        let text = line.trim();
        if text.is_empty() || text.starts_with("For more information") {
            continue;
        }
        if let Some(u) = text.strip_prefix("Usage: ") {
            usage = Some(u.to_string());
        } else if let Some(tip) = text.strip_prefix("tip: ") {
            tips.push(tip.to_string());
        } else if usage.is_none() {
            if !why.is_empty() {
                why.push(' ');
            }
            why.push_str(text);
        }
    }
    if !tips.is_empty() {
        why += &format!(" ({})", tips.join("; "));
    }
    // "gpuslack replay [OPTIONS] <TRACE>" → "gpuslack replay --help".
    let command: Vec<&str> = usage
        .as_deref()
        .unwrap_or("gpuslack")
        .split_whitespace()
        .take_while(|w| !w.starts_with('[') && !w.starts_with('<') && !w.starts_with('-'))
        .collect();
    format!("{why}; see `{} --help`", command.join(" "))
}

/// Gives a standard descriptor that was closed at start (`2>&-`, a supervisor that closes
/// them) `/dev/null`. Left closed, the next file or socket opened takes its number, and what
/// gpuslack writes to stderr goes into that: a trace, or the collector's connection.
fn open_closed_standard_descriptors() {
    for fd in 0..=2 {
        // SAFETY: F_GETFD only reads the descriptor's flags; open and close are plain system
        // calls on a C string that lives across the call. open returns the lowest free
        // descriptor: `fd` itself, since every lower one is open by now.
        unsafe {
            if libc::fcntl(fd, libc::F_GETFD) == -1 {
                let opened = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if opened != fd && opened >= 0 {
                    libc::close(opened);
                }
            }
        }
    }
}

/// The error and its causes, each said once: an error whose message already quotes its source
/// (`{path}: cannot open: {source}`) would otherwise print the OS error twice.
fn message_once(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    use std::io::ErrorKind::BrokenPipe;
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == BrokenPipe)
            // serde_json's error hides the io::Error it wraps from the chain (its `source` is
            // the io::Error's own source): `--format json | true` read as a failure.
            || cause
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind)
                == Some(BrokenPipe)
    })
}

fn init_logging(verbose: Option<u8>, agent: bool) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;

    let default = match verbose {
        None => LevelFilter::ERROR,
        Some(0) if agent => LevelFilter::INFO,
        Some(0) => LevelFilter::WARN,
        Some(1) => LevelFilter::INFO,
        Some(_) => LevelFilter::DEBUG,
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
    // Not `log_internal_errors`: a log line that cannot be written is reported with
    // `eprintln!`, which panics when stderr is what failed.
    // Each line through the one sanitiser: a field's outside text (a job id, a collector's
    // message, a trace's column names) cannot move the cursor, return over the line or turn
    // it right to left, nor start a second line that reads as a log line of its own.
    let colour = std::io::stderr().is_terminal();
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(colour)
        .log_internal_errors(false)
        .with_writer(move || gpuslack_receiver::text::SafeLines::new(std::io::stderr(), colour))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usage_error_is_one_line_naming_what_and_where_to_read() {
        let rendered = "error: the following required arguments were not provided:\n  <TRACE>\n\nUsage: gpuslack replay <TRACE>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line_usage_error(rendered),
            "error: the following required arguments were not provided: <TRACE>; see `gpuslack replay --help`"
        );
        let rendered = "error: unexpected argument '--fromat' found\n\n  tip: a similar argument exists: '--format'\n\nUsage: gpuslack replay --format <FORMAT> <TRACE>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line_usage_error(rendered),
            "error: unexpected argument '--fromat' found (a similar argument exists: '--format'); see `gpuslack replay --help`"
        );
    }
}
