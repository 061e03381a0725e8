//! The agent: one [`Source`] driven through window → diagnosis → export state → exporters,
//! with a graceful stop and delivery accounting. The `gpuslack run` command is flag parsing
//! and one call of [`Agent::run_input`]; a program that embeds the agent (a collector, a
//! scheduler's node daemon) calls [`Agent::run`] with a source of its own or a built-in one,
//! and adds exporters of its own through the [`Exporter`] seam (see `examples/embed.rs`).
//!
//! The run ends on a stop request as it ends at its deadline or the end of a replay: the
//! window in progress is diagnosed, the exporters flush within
//! [`AgentOptions::shutdown_timeout`], one line says what was delivered and dropped, and the
//! outcome is [`Exit::Success`] — or [`Exit::NothingDelivered`] when OTLP was configured and
//! nothing it produced ever reached the collector. A second stop request during the flush
//! ends it at once: what it carried is counted as dropped, the line is still said.

mod publish;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::device::DeviceFacts;
use crate::export::config::ExportConfig;
use crate::export::delivery::{Counts, Delivery};
use crate::export::otlp::{OtlpError, OtlpExport};
use crate::export::prometheus::{self, Limits};
use crate::export::{ClassChange, ExportState};
use crate::pipeline::{Pipeline, PushError};
use crate::source::live::ticks::{LiveOptions, LiveTicks};
use crate::source::replay::PacedReplay;
use crate::source::{Next, Source, SourceError};
use crate::stop::Stop;
use crate::trace::TraceFacts;
use crate::WindowReport;

use publish::{destinations, final_export, FailureWarning, Publisher};

/// An exporter of the embedding program's own: it sees every window the agent diagnoses, after
/// the agent's export state took it.
pub trait Exporter {
    /// One diagnosed window of one GPU. `change` is set when the GPU's announced verdict
    /// changed with it (a verdict is announced once it has held 3 windows); `state` is the
    /// export state the built-in exporters read, with this window in it.
    fn window(
        &mut self,
        report: &WindowReport,
        facts: &DeviceFacts,
        change: Option<&ClassChange>,
        state: &ExportState,
    );

    /// The run is over: the last window has been handed over. Flush within `timeout`.
    fn finish(&mut self, timeout: Duration) {
        let _ = timeout;
    }
}

/// What the agent exports to and how long it runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// OTLP and Prometheus, resolved (file < environment < flags).
    pub export: ExportConfig,
    /// Per-process series per GPU (the current top owners), at most 64.
    pub process_series: usize,
    /// Owners with counters of their own per GPU, by GPU time (the series budget).
    pub owner_series: usize,
    /// `/healthz` turns 503 after this many failed metrics exports in a row (0: never).
    pub unhealthy_after_failed_exports: u32,
    /// Stop after this long; runs until stopped (or the replay ends) when `None`.
    pub run_for: Option<Duration>,
    /// After a replay ends, keep serving Prometheus this long.
    pub linger: Duration,
    /// The final export's bound, on a stop or at the end.
    pub shutdown_timeout: Duration,
    /// Whether [`Outcome::usage`] is filled with the source's own cost.
    pub usage: bool,
    /// Where the lines a person reads at the end go (the summary, the signal notices);
    /// `gpuslack` writes them to stderr.
    pub say: fn(&str),
    /// A source that cannot open yet (no NVML: the driver not installed or loaded, as on a
    /// node whose driver comes up after the agent) is tried again, 1 s after the first try and
    /// doubling up to this ([`DEFAULT_WAIT_FOR_DRIVER`] for `run --wait-for-driver`), while the
    /// endpoint serves and `/healthz` says why; `None` gives up at once (the caller exits 69).
    pub wait_for_driver: Option<Duration>,
}

/// The built-in sources, as a command line names them.
#[derive(Debug, Clone)]
pub enum Input {
    /// Every GPU through NVML (+GPM).
    Live(LiveOptions),
    /// A recorded trace, paced at `speed` (1 real time, 0 as fast as read).
    Replay {
        /// The trace.
        path: PathBuf,
        /// The pace.
        speed: f64,
    },
}

impl Input {
    /// Opens the source: NVML and every GPU, or the trace and its facts.
    pub fn open(&self) -> Result<Box<dyn Source>, SourceError> {
        Ok(match self {
            Input::Live(options) => Box::new(LiveTicks::open(options)?),
            Input::Replay { path, speed } => Box::new(PacedReplay::open(path, *speed)?),
        })
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Ran and delivered (or had nothing to deliver to).
    Success,
    /// OTLP was configured and nothing produced ever reached the collector.
    NothingDelivered,
}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// How it ended.
    pub exit: Exit,
    /// Every window, point and log record delivered or dropped, by reason.
    pub counts: Counts,
    /// The source's own cost, when [`AgentOptions::usage`] asked for it.
    pub usage: Vec<String>,
}

/// An error boxed from the embedding program (building its pipeline), kept with its chain.
#[derive(Debug)]
pub struct Cause(Box<dyn std::error::Error + Send + Sync>);

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Why the agent could not run, or stopped on an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The source could not be opened or failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The pipeline could not be built for the source's GPUs.
    #[error(transparent)]
    Pipeline(Cause),
    /// The pipeline refused a sample (out of time order).
    #[error("{at}{source}")]
    Refused {
        /// `trace.csv:12: ` where the source knows, else empty.
        at: String,
        /// Why.
        source: PushError,
    },
    /// The tokio runtime the exporters run on could not start.
    #[error("starting the export runtime")]
    Runtime(#[source] std::io::Error),
    /// The Prometheus endpoint cannot listen on its address.
    #[error("--prometheus {addr}: cannot listen")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The OTLP exporter could not start.
    #[error(transparent)]
    Otlp(#[from] OtlpError),
}

/// The agent, configured; [`Agent::run`] runs it.
pub struct Agent {
    options: AgentOptions,
    exporters: Vec<Box<dyn Exporter>>,
}

impl Agent {
    /// An agent with the built-in exporters that `options.export` configures.
    pub fn new(options: AgentOptions) -> Agent {
        Agent {
            options,
            exporters: Vec::new(),
        }
    }

    /// Adds an exporter of the embedding program's own.
    pub fn with_exporter(mut self, exporter: Box<dyn Exporter>) -> Agent {
        self.exporters.push(exporter);
        self
    }

    /// Opens a built-in source and runs it ([`Agent::run`]). The exporters start first, as
    /// the agent's memory marks expect (NVML's share is measured from after them); a source
    /// that cannot be opened is an error after the summary line.
    pub fn run_input<E>(
        self,
        input: &Input,
        pipeline_for: impl FnOnce(&TraceFacts) -> Result<Pipeline, E>,
        stop: &mut Stop,
    ) -> Result<Outcome, AgentError>
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.run_opening(|| input.open(), pipeline_for, stop)
    }

    /// Runs `source` through the pipeline that `pipeline_for` builds from its facts, until it
    /// ends, the deadline passes or `stop` asks; then flushes the exporters. The summary line
    /// is said even when the run failed.
    pub fn run<S, E>(
        self,
        source: &mut S,
        pipeline_for: impl FnOnce(&TraceFacts) -> Result<Pipeline, E>,
        stop: &mut Stop,
    ) -> Result<Outcome, AgentError>
    where
        S: Source + ?Sized,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let mut once = Some(source);
        self.run_opening(
            move || {
                once.take()
                    .ok_or_else(|| SourceError::Other("the source was opened already".into()))
            },
            pipeline_for,
            stop,
        )
    }

    /// The run: exporters started, then the source opened and driven, then the flush.
    fn run_opening<S, E>(
        self,
        mut open: impl FnMut() -> Result<S, SourceError>,
        pipeline_for: impl FnOnce(&TraceFacts) -> Result<Pipeline, E>,
        stop: &mut Stop,
    ) -> Result<Outcome, AgentError>
    where
        S: std::ops::DerefMut,
        S::Target: Source,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let Agent { options, exporters } = self;
        let config = &options.export;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("gpuslack-export")
            .enable_all()
            .build()
            .map_err(AgentError::Runtime)?;
        let delivery = Arc::new(Delivery::default());
        let state = Arc::new(RwLock::new(
            ExportState::with_delivery(delivery.clone())
                .with_top_processes(options.process_series)
                .with_owner_series(options.owner_series)
                .with_selection(config.metrics.clone()),
        ));
        // The address the endpoint really listens on (`:0` asks for any free port), for the
        // start line.
        let mut bound = None;
        if let Some(addr) = config.prometheus {
            let listener =
                prometheus::bind(addr).map_err(|source| AgentError::Listen { addr, source })?;
            bound = listener.local_addr().ok();
            let (state, config) = (state.clone(), config.clone());
            let limits = Limits {
                unhealthy_after_failed_exports: options.unhealthy_after_failed_exports,
                ..Limits::default()
            };
            runtime.spawn(async move {
                if let Err(e) = prometheus::serve(listener, state, config, limits).await {
                    tracing::error!(error = %e, "Prometheus endpoint stopped");
                }
            });
        }
        let otlp = match &config.otlp {
            Some(cfg) => {
                let _inside = runtime.enter();
                Some(OtlpExport::start(
                    config,
                    cfg,
                    state.clone(),
                    delivery.clone(),
                )?)
            }
            None => None,
        };
        let mut warning = config
            .otlp
            .as_ref()
            .map(|cfg| FailureWarning::new(cfg.metrics.endpoint.to_string()));
        let mut publisher = Publisher {
            state,
            otlp,
            exporters,
        };
        let mut source = None;
        let opened = open_waiting(
            &mut open,
            options.wait_for_driver,
            &publisher.state,
            stop,
            options.run_for.map(|d| Instant::now() + d),
        );
        let result = opened.map_err(AgentError::from).and_then(|opened| {
            // Stopped (or out of time) while waiting for the driver: nothing ran.
            let Some(opened) = opened else {
                return Ok(());
            };
            let source = source.insert(opened);
            let mut pipeline =
                pipeline_for(&source.facts()).map_err(|e| AgentError::Pipeline(Cause(e.into())))?;
            if source.live_clock() {
                pipeline = pipeline.tolerating_clock_steps();
            }
            let mut shown = config.clone();
            shown.prometheus = bound.or(config.prometheus);
            source.announce(pipeline.window_s(), &destinations(&shown));
            drive(
                &mut **source,
                &mut pipeline,
                &mut publisher,
                stop,
                options.run_for,
                &mut || {
                    if let Some(w) = warning.as_mut() {
                        w.poll(&delivery);
                    }
                },
            )
        });
        // Measured before lingering and flushing: the cost of sampling, not of waiting.
        let mut usage = match &source {
            Some(source) if options.usage && result.is_ok() => source.usage(),
            _ => Vec::new(),
        };
        // What a backend that bills series pays per GPU for the configured metric set.
        if options.usage && result.is_ok() {
            if let Ok(state) = publisher.state.read() {
                usage.push(state.series_usage());
            }
        }
        let finite = source.as_ref().is_some_and(|s| s.finite());
        if finite && config.prometheus.is_some() && !stop.requested() {
            stop.wait(options.linger);
        }
        let say = options.say;
        if let Some(signal) = stop.cause_name() {
            say(&format!(
                "gpuslack: {signal} received; flushing (another signal stops at once)"
            ));
        }
        for exporter in &mut publisher.exporters {
            exporter.finish(options.shutdown_timeout);
        }
        let exported = config.otlp.is_some();
        let abandoned = match publisher.otlp.take() {
            Some(otlp) => final_export(
                otlp,
                options.shutdown_timeout,
                runtime.handle().clone(),
                stop,
                say,
            ),
            None => false,
        };
        if abandoned {
            // What the export carried is dropped; the request still in flight is not waited for.
            delivery.close();
            runtime.shutdown_background();
        } else {
            runtime.shutdown_timeout(Duration::from_secs(1));
        }
        let counts = delivery.counts();
        if source.is_none() {
            // Nothing was opened, so nothing ran: the caller says why, in one line.
        } else if exported {
            say(&format!("gpuslack: {}", counts.summary()));
        } else {
            say(&format!(
                "gpuslack: {} windows produced; {} Prometheus scrapes served",
                counts.windows_produced, counts.scrapes_served
            ));
        }
        result?;
        let exit = if exported && counts.windows_produced > 0 && !delivery.ever_delivered() {
            say("gpuslack: nothing was delivered to the OTLP collector");
            Exit::NothingDelivered
        } else {
            Exit::Success
        };
        Ok(Outcome {
            exit,
            counts,
            usage,
        })
    }
}

/// The longest pause between two tries to open a source, by default: a driver that loads is
/// seen within a minute, and a host with no GPU pays one failed `dlopen` a minute.
pub const DEFAULT_WAIT_FOR_DRIVER: Duration = Duration::from_secs(60);

/// Opens the source; with `wait` set, a source that cannot open yet (no NVML) is tried again
/// after 1 s, doubling up to `wait`, with the reason in the log and on `/healthz` meanwhile
/// (exit 69 is then not final: a node whose driver loads after the agent is watched once it
/// does). `Ok(None)` when a stop is asked for, or the run's deadline passes, while waiting.
fn open_waiting<S>(
    open: &mut impl FnMut() -> Result<S, SourceError>,
    wait: Option<Duration>,
    state: &Arc<RwLock<ExportState>>,
    stop: &mut Stop,
    deadline: Option<Instant>,
) -> Result<Option<S>, SourceError> {
    let note = |reason: Option<String>| {
        if let Ok(mut s) = state.write() {
            s.set_waiting_for_source(reason);
        }
    };
    let mut delay = Duration::from_secs(1);
    let mut tries: u64 = 0;
    loop {
        tries += 1;
        let error = match open() {
            Ok(source) => {
                if tries > 1 {
                    tracing::info!(tries, "the NVIDIA driver answered: sampling starts");
                }
                note(None);
                return Ok(Some(source));
            }
            Err(SourceError::Open(e)) => e,
            Err(e) => return Err(e),
        };
        let Some(most) = wait else {
            return Err(SourceError::Open(error));
        };
        let pause = delay.min(most);
        let reason = format!(
            "{error}; waiting for the driver: try {tries}, the next in {} s",
            pause.as_secs()
        );
        tracing::warn!("{reason}");
        note(Some(reason));
        let pause = match deadline {
            Some(end) => pause.min(end.saturating_duration_since(Instant::now())),
            None => pause,
        };
        if stop.wait(pause) || deadline.is_some_and(|end| Instant::now() >= end) {
            return Ok(None);
        }
        delay = (delay * 2).min(most);
    }
}

/// The loop: each batch of the source through the pipeline to the publisher, until the source
/// ends; then the windows in progress.
fn drive<S: Source + ?Sized>(
    source: &mut S,
    pipeline: &mut Pipeline,
    publisher: &mut Publisher,
    stop: &mut Stop,
    run_for: Option<Duration>,
    watch: &mut dyn FnMut(),
) -> Result<(), AgentError> {
    let deadline = run_for.map(|d| Instant::now() + d);
    while let Next::Samples(samples) = source.next(stop, deadline)? {
        for sample in &samples {
            let reports = pipeline
                .push(sample)
                .map_err(|source_error| AgentError::Refused {
                    at: source
                        .position()
                        .map(|p| format!("{p}: "))
                        .unwrap_or_default(),
                    source: source_error,
                })?;
            for r in reports {
                publisher.publish(&r, pipeline.diagnoser().facts(r.stats.gpu));
                source.observe_window(&r);
            }
        }
        watch();
    }
    for r in pipeline.finish() {
        publisher.publish(&r, pipeline.diagnoser().facts(r.stats.gpu));
    }
    Ok(())
}

impl<S: Source + ?Sized> Source for Box<S> {
    fn facts(&self) -> TraceFacts {
        (**self).facts()
    }
    fn next(&mut self, stop: &mut Stop, deadline: Option<Instant>) -> Result<Next, SourceError> {
        (**self).next(stop, deadline)
    }
    fn announce(&self, window_s: f64, destinations: &str) {
        (**self).announce(window_s, destinations)
    }
    fn position(&self) -> Option<String> {
        (**self).position()
    }
    fn live_clock(&self) -> bool {
        (**self).live_clock()
    }
    fn observe_window(&mut self, report: &WindowReport) {
        (**self).observe_window(report)
    }
    fn finite(&self) -> bool {
        (**self).finite()
    }
    fn usage(&self) -> Vec<String> {
        (**self).usage()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;
    use crate::diagnosis::{Diagnoser, Thresholds};
    use crate::stop::{channel_pair, StopCause};
    use crate::{Metric, Sample};

    /// A source of the test's own: an idle GPU at 10 Hz from t = 1000 s, `rows` rows (forever
    /// when `None`), each row due at once.
    struct Idle {
        next_t: f64,
        rows: Option<u32>,
        out_of_order_at: Option<u32>,
    }

    impl Source for Idle {
        fn facts(&self) -> TraceFacts {
            TraceFacts::default()
        }
        fn next(
            &mut self,
            stop: &mut Stop,
            deadline: Option<Instant>,
        ) -> Result<Next, SourceError> {
            if stop.requested() || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Next::End);
            }
            if let Some(n) = self.rows.as_mut() {
                if *n == 0 {
                    return Ok(Next::End);
                }
                *n -= 1;
                if self.out_of_order_at == Some(*n) {
                    self.next_t -= 10.0;
                }
            }
            let t = self.next_t;
            self.next_t += 0.1;
            Ok(Next::Samples(vec![Sample::new(t, 0)
                .with(Metric::PowerMw, 80_000.0)
                .with(Metric::UtilGpu, 0.0)]))
        }
        fn announce(&self, _window_s: f64, _destinations: &str) {}
        fn position(&self) -> Option<String> {
            Some("idle:1".into())
        }
    }

    /// Counts what the exporter seam hands over.
    struct Count(Rc<RefCell<(u64, u64, bool)>>);

    impl Exporter for Count {
        fn window(
            &mut self,
            report: &WindowReport,
            _facts: &DeviceFacts,
            change: Option<&ClassChange>,
            state: &ExportState,
        ) {
            let mut c = self.0.borrow_mut();
            c.0 += 1;
            c.1 += u64::from(change.is_some());
            assert!(
                state.get(report.stats.gpu).is_some(),
                "the state has the window"
            );
        }
        fn finish(&mut self, _timeout: Duration) {
            self.0.borrow_mut().2 = true;
        }
    }

    fn options(run_for: Option<Duration>) -> AgentOptions {
        AgentOptions {
            export: ExportConfig {
                otlp: None,
                otlp_disabled: false,
                prometheus: None,
                service_name: "test".into(),
                resource_attributes: Vec::new(),
                metrics: Default::default(),
            },
            process_series: 1,
            owner_series: 4,
            unhealthy_after_failed_exports: 0,
            run_for,
            linger: Duration::ZERO,
            shutdown_timeout: Duration::from_secs(1),
            usage: false,
            say: |_| {},
            wait_for_driver: None,
        }
    }

    fn pipeline(_: &TraceFacts) -> Result<Pipeline, std::convert::Infallible> {
        let diagnoser = Diagnoser::new(Thresholds::default()).with_tdp_override(Some(700.0));
        Ok(Pipeline::new(2.0, diagnoser))
    }

    #[test]
    fn every_window_reaches_an_exporter_and_the_delivery_counts() {
        let counted = Rc::new(RefCell::new((0, 0, false)));
        let agent = Agent::new(options(None)).with_exporter(Box::new(Count(counted.clone())));
        let mut source = Idle {
            next_t: 1000.0,
            rows: Some(100),
            out_of_order_at: None,
        };
        let outcome = agent
            .run(&mut source, pipeline, &mut Stop::never())
            .expect("runs");
        let (windows, changes, finished) = *counted.borrow();
        // 10 s of samples in 2 s windows, the last one finished at the end.
        assert_eq!(windows, 5);
        assert_eq!(outcome.counts.windows_produced, windows);
        assert_eq!(changes, 1, "idle is announced once it has held");
        assert!(finished);
        assert_eq!(outcome.exit, Exit::Success);
    }

    #[test]
    fn an_endless_source_ends_at_the_deadline_or_a_stop() {
        let run = |run_for, stop: &mut Stop| {
            let mut source = Idle {
                next_t: 1000.0,
                rows: None,
                out_of_order_at: None,
            };
            Agent::new(options(run_for)).run(&mut source, pipeline, stop)
        };
        let outcome = run(Some(Duration::from_millis(50)), &mut Stop::never()).expect("ends");
        assert_eq!(outcome.exit, Exit::Success);
        let (handle, mut stop) = channel_pair();
        handle.stop(StopCause::REQUESTED);
        let outcome = run(None, &mut stop).expect("ends");
        assert_eq!(outcome.counts.windows_produced, 0);
    }

    #[test]
    fn a_refused_sample_is_an_error_naming_where_it_came_from() {
        let mut source = Idle {
            next_t: 1000.0,
            rows: Some(50),
            out_of_order_at: Some(10),
        };
        let e = Agent::new(options(None))
            .run(&mut source, pipeline, &mut Stop::never())
            .expect_err("refused");
        assert!(e.to_string().starts_with("idle:1: GPU 0: sample at"), "{e}");
    }
}
