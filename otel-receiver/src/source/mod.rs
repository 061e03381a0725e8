//! Sources of samples. Each produces [`crate::Sample`]s and nothing after them knows which
//! source it was: a recorded trace and live GPUs run through the same pipeline.
//!
//! [`Source`] is the seam the agent ([`crate::agent`]) drives: live NVML
//! ([`live::ticks::LiveTicks`]), a trace paced in real time ([`replay::PacedReplay`]), or a
//! program's own. A source only produces samples: it never touches the pipeline.

pub mod cadence;
pub mod live;
pub mod replay;
pub mod thinning;

use std::time::Instant;

use crate::stop::Stop;
use crate::trace::TraceFacts;
use crate::{Sample, WindowReport};

/// A failure of a source, named by its place.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A trace row that cannot be read.
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
    /// The facts file beside a trace cannot be read.
    #[error("reading the device facts beside {path}")]
    Facts {
        /// The trace.
        path: String,
        /// What was wrong with its facts file.
        source: crate::trace::FactsError,
    },
    /// Opening the live GPUs failed (no driver, no library, no GPU).
    #[error(transparent)]
    Open(#[from] live::nvml::OpenError),
    /// An embedding program's own source failed.
    #[error("{0}")]
    Other(String),
}

/// What a source hands the agent each time it is asked.
#[derive(Debug)]
pub enum Next {
    /// The samples of one tick (or one trace row).
    Samples(Vec<Sample>),
    /// Nothing more: the trace ended, the deadline passed or a stop was asked for.
    End,
}

/// A producer of samples, paced by itself: `next` waits until its next samples are due.
pub trait Source {
    /// What is known of each GPU before the first sample, which the pipeline is built from.
    fn facts(&self) -> TraceFacts;

    /// The next samples, once due. `stop` ends a wait at once; past `deadline` the source
    /// ends.
    fn next(&mut self, stop: &mut Stop, deadline: Option<Instant>) -> Result<Next, SourceError>;

    /// Logs the line that says what the agent samples, once, at the start.
    fn announce(&self, window_s: f64, destinations: &str);

    /// Where the last sample came from (`trace.csv:12`), for an error about it.
    fn position(&self) -> Option<String> {
        None
    }

    /// Whether the source's clock may step (a live wall clock under NTP): windows then
    /// restart rather than refuse samples.
    fn live_clock(&self) -> bool {
        false
    }

    /// Whether the source ends on its own (a replay): a Prometheus endpoint may then linger.
    fn finite(&self) -> bool {
        false
    }

    /// A window the agent has just diagnosed from this source's samples, handed back after it
    /// was published: a source that paces itself by the verdicts (the adaptive cadence of
    /// [`cadence`]) reads it; the others ignore it.
    fn observe_window(&mut self, _report: &WindowReport) {}

    /// The source's own cost, as lines for `run --usage`.
    fn usage(&self) -> Vec<String> {
        Vec::new()
    }
}
