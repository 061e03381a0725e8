//! `gpuslack run`: the agent. Samples every GPU (or replays a trace), diagnoses each window,
//! and publishes: OTLP metrics and diagnosis-change logs, a Prometheus endpoint, and a log line
//! on stderr when a GPU's verdict changes.
//!
//! It ends on SIGTERM, SIGINT or SIGHUP as it ends at `--seconds` or the end of a replay: the
//! window in progress is diagnosed, the exporters flush within `--shutdown-timeout-s`, one line
//! says what was delivered and dropped, and the exit is 0 — or 3 when OTLP was configured and
//! nothing it produced ever reached the collector. A second signal during the flush ends it at
//! once: what it carried is counted as dropped, the line is still printed, the exit code the
//! same.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use gpuslack_receiver::agent::{Agent, AgentError, AgentOptions, Exit, Input};
use gpuslack_receiver::export::prometheus;
use gpuslack_receiver::source::SourceError;

use super::export_args::{strip_sdk_environment, ExportArgs};
use super::flags;
use super::input::PipelineArgs;
use super::live::SamplingArgs;
use super::shutdown::Shutdown;
use super::EXIT_NO_GPU;

/// Exit code when OTLP export was configured and nothing was ever delivered.
pub const EXIT_NOTHING_DELIVERED: u8 = 3;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Stop after this many seconds; runs until interrupted when left out.
    #[arg(long, value_name = "N", value_parser = flags::finite)]
    pub seconds: Option<f64>,
    /// Feed a recorded trace through the same path instead of live GPUs; exits at its end
    /// after flushing the last export.
    #[arg(long, value_name = "TRACE")]
    pub replay: Option<PathBuf>,
    /// Replay speed: 1 is real time, 10 ten times faster, 0 as fast as possible.
    #[arg(long, default_value_t = 1.0, value_parser = flags::finite)]
    pub speed: f64,
    /// After a replay ends, keep serving Prometheus this many seconds (for demos and scrapes).
    #[arg(long, value_name = "S", default_value_t = 0.0, value_parser = flags::finite)]
    pub linger_s: f64,
    /// On a stop signal or at the end, give the final export at most this long.
    #[arg(long, value_name = "S", default_value_t = 5.0, value_parser = flags::finite)]
    pub shutdown_timeout_s: f64,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    #[command(flatten)]
    pub export: ExportArgs,
    /// At exit, print this process's CPU time and peak memory (the overhead benchmark).
    #[arg(long)]
    pub usage: bool,
    /// /healthz answers 503 once this many OTLP metrics exports in a row have failed (one per
    /// export interval at least); 0, the default, never does: an agent whose collector is
    /// down is queueing, and a restart would throw its queue away (docs/DEPLOY.md).
    #[arg(long, value_name = "N", default_value_t = prometheus::DEFAULT_UNHEALTHY_AFTER_FAILED_EXPORTS)]
    pub unhealthy_after_failed_exports: u32,
    /// With no NVML yet (the driver not installed or not loaded: a node whose driver comes up
    /// after the agent), keep serving and try again, 1 s after the first try and doubling up to
    /// 60 s, saying why on /healthz (`waiting_for_driver`) and in the log, instead of exiting
    /// 69. The systemd unit and the DaemonSet run with it (docs/DEPLOY.md, "Health").
    #[arg(long)]
    pub wait_for_driver: bool,
}

/// The checked durations of the flags.
struct Timing {
    run_for: Option<Duration>,
    linger: Duration,
    shutdown: Duration,
}

impl Args {
    fn timing(&self) -> Result<Timing> {
        flags::factor(
            "--speed",
            self.speed,
            1e-3,
            1e6,
            Some("as fast as possible"),
        )?;
        Ok(Timing {
            run_for: self
                .seconds
                .map(|s| flags::seconds("--seconds", s, 0.0, 1e9))
                .transpose()?,
            linger: flags::seconds("--linger-s", self.linger_s, 0.0, 86_400.0)?,
            shutdown: flags::seconds("--shutdown-timeout-s", self.shutdown_timeout_s, 0.1, 600.0)?,
        })
    }
}

/// A line for a person, on stderr; one that cannot be written is dropped.
fn say(line: &str) {
    errln!("{line}");
}

/// What `gpuslack doctor` finds of the host, said once in the startup log of a live agent (a
/// DaemonSet's first lines), once its GPUs answered: the C library, processes whose environment cannot be read, a
/// profiler holding the counters, the kubelet. The GPUs are the agent's own first log lines;
/// the collector is not probed here (the first export says how it went).
fn node_check(kubelet_socket: &std::path::Path) {
    use gpuslack_receiver::doctor::{endpoints, host, Doctor};
    let proc_root = std::path::Path::new("/proc");
    let mut doctor = Doctor::default();
    doctor.add(host::platform(proc_root));
    doctor.add([
        host::processes(proc_root, &[]),
        host::profiler(proc_root),
        endpoints::kubelet(kubelet_socket, false),
    ]);
    doctor.log();
}

/// Flag parsing, then one call: the agent runs in the library (`gpuslack_receiver::agent`).
pub fn run(args: Args) -> Result<ExitCode> {
    args.pipeline.validate()?;
    let timing = args.timing()?;
    let config = args.export.resolve()?;
    // Before any thread starts: the exporters must not read these again (flags win).
    strip_sdk_environment();
    if args.export.process_series > 64 {
        anyhow::bail!(
            "--process-series must be at most 64 (series per GPU), got {}",
            args.export.process_series
        );
    }
    let input = match &args.replay {
        Some(path) => Input::Replay {
            path: path.clone(),
            speed: args.speed,
        },
        None => Input::Live(args.sampling.live_options()?),
    };
    let options = AgentOptions {
        export: config,
        process_series: args.export.process_series,
        owner_series: usize::from(args.export.owner_series),
        unhealthy_after_failed_exports: args.unhealthy_after_failed_exports,
        run_for: timing.run_for,
        linger: timing.linger,
        shutdown_timeout: timing.shutdown,
        usage: args.usage,
        say,
        wait_for_driver: (args.wait_for_driver && args.replay.is_none())
            .then_some(gpuslack_receiver::agent::DEFAULT_WAIT_FOR_DRIVER),
    };
    let mut shutdown = Shutdown::install()?;
    let outcome = Agent::new(options).run_input(
        &input,
        |facts| {
            // Once the GPUs answered: a node without one says that in one line, nothing more.
            if args.replay.is_none() {
                node_check(&args.sampling.kubelet_socket);
            }
            args.pipeline.pipeline_for_trace(facts)
        },
        shutdown.stop(),
    );
    match outcome {
        Ok(outcome) => {
            for line in &outcome.usage {
                outln!("{line}");
            }
            Ok(match outcome.exit {
                Exit::Success => ExitCode::SUCCESS,
                Exit::NothingDelivered => ExitCode::from(EXIT_NOTHING_DELIVERED),
            })
        }
        Err(AgentError::Source(SourceError::Open(e))) => {
            errln!("error: {e}");
            Ok(ExitCode::from(EXIT_NO_GPU))
        }
        Err(e) => Err(e.into()),
    }
}
