//! Embedding the gpuslack agent in another program: a node daemon, a collector, a scheduler
//! plug-in. The program picks a source (here a recorded trace, replayed as fast as it is
//! read; `source::live::ticks::LiveTicks` for the GPUs of the machine), adds an exporter of its
//! own through the `Exporter` seam, and runs the agent until the source ends or its stop
//! handle is used.
//!
//! ```sh
//! cargo run -p gpuslack-receiver --example embed -- tests/fixtures/h200-verdicts/samples.csv
//! ```
//!
//! It prints how many windows it saw, how many verdict changes, and the windows per verdict.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpuslack_receiver::agent::{Agent, AgentOptions, Exporter};
use gpuslack_receiver::device::DeviceFacts;
use gpuslack_receiver::export::config::ExportConfig;
use gpuslack_receiver::export::{ClassChange, ExportState};
use gpuslack_receiver::source::replay::PacedReplay;
use gpuslack_receiver::stop::channel_pair;
use gpuslack_receiver::trace::TraceFacts;
use gpuslack_receiver::{Diagnoser, Pipeline, Thresholds, WindowReport};

/// What the program keeps of the agent's output: windows per verdict, and verdict changes.
#[derive(Default)]
struct Tally {
    windows: u64,
    changes: u64,
    per_class: BTreeMap<&'static str, u64>,
}

/// The program's exporter: it counts into a tally it shares with the program.
struct Counter(Arc<Mutex<Tally>>);

impl Exporter for Counter {
    fn window(
        &mut self,
        report: &WindowReport,
        _facts: &DeviceFacts,
        change: Option<&ClassChange>,
        _state: &ExportState,
    ) {
        if let Ok(mut tally) = self.0.lock() {
            tally.windows += 1;
            tally.changes += u64::from(change.is_some());
            *tally.per_class.entry(report.class.as_str()).or_default() += 1;
        }
    }
}

/// A pipeline for the trace's GPUs: 2 s windows, the default thresholds, the facts beside it.
fn pipeline_for(facts: &TraceFacts) -> Result<Pipeline, std::convert::Infallible> {
    let diagnoser = Diagnoser::new(Thresholds::default()).with_default_facts(facts.default.clone());
    let mut pipeline = Pipeline::new(2.0, diagnoser);
    for (gpu, f) in &facts.per_gpu {
        pipeline.diagnoser_mut().set_facts(*gpu, f.clone());
    }
    Ok(pipeline)
}

fn main() -> ExitCode {
    let Some(trace) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: embed TRACE.csv");
        return ExitCode::from(2);
    };
    let mut source = match PacedReplay::open(&trace, 0.0) {
        Ok(source) => source,
        Err(e) => {
            eprintln!("embed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = AgentOptions {
        // No OTLP, no Prometheus: the program's own exporter is the only one.
        export: ExportConfig {
            otlp: None,
            otlp_disabled: false,
            prometheus: None,
            service_name: "embed".into(),
            resource_attributes: Vec::new(),
            metrics: Default::default(),
        },
        process_series: 4,
        owner_series: 4,
        unhealthy_after_failed_exports: 0,
        run_for: None,
        linger: Duration::ZERO,
        shutdown_timeout: Duration::from_secs(1),
        usage: false,
        say: |line| eprintln!("{line}"),
        wait_for_driver: None,
    };
    // The handle would go to the program's own shutdown path (another thread, a signal).
    let (_handle, mut stop) = channel_pair();
    let tally = Arc::new(Mutex::new(Tally::default()));
    let agent = Agent::new(options).with_exporter(Box::new(Counter(tally.clone())));
    if let Err(e) = agent.run(&mut source, pipeline_for, &mut stop) {
        eprintln!("embed: {e}");
        return ExitCode::FAILURE;
    }
    let Ok(tally) = tally.lock() else {
        return ExitCode::FAILURE;
    };
    println!("windows {}", tally.windows);
    println!("verdict changes {}", tally.changes);
    for (class, n) in &tally.per_class {
        println!("class {class} {n}");
    }
    ExitCode::SUCCESS
}
