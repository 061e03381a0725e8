//! Replay: a recorded trace as a source. [`PacedReplay`] hands the agent its rows paced as
//! they were recorded (or faster); [`replay`], kept here for its callers, runs a whole trace
//! through a pipeline as fast as it can be read (see [`crate::pipeline::replay`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::source::{Next, Source, SourceError};
use crate::stop::Stop;
use crate::trace::{TraceFacts, TraceReader};
use crate::usage;

pub use crate::pipeline::{replay, ReplayError};

/// A trace's rows, due when they were recorded divided by `speed` (0: as fast as read).
pub struct PacedReplay {
    reader: TraceReader<std::io::BufReader<std::fs::File>>,
    path: PathBuf,
    facts: TraceFacts,
    speed: f64,
    started: Instant,
    first_t: Option<f64>,
}

impl PacedReplay {
    /// Opens `path` and the facts beside it (empty facts when there are none).
    pub fn open(path: &Path, speed: f64) -> Result<PacedReplay, SourceError> {
        let facts = TraceFacts::beside(path)
            .map_err(|source| SourceError::Facts {
                path: path.display().to_string(),
                source,
            })?
            .unwrap_or_default();
        Ok(PacedReplay::with_facts(
            TraceReader::open(path)?,
            path,
            facts,
            speed,
        ))
    }

    /// A replay of an open trace, with facts read elsewhere.
    pub fn with_facts(
        reader: TraceReader<std::io::BufReader<std::fs::File>>,
        path: &Path,
        facts: TraceFacts,
        speed: f64,
    ) -> PacedReplay {
        PacedReplay {
            reader,
            path: path.to_path_buf(),
            facts,
            speed,
            started: Instant::now(),
            first_t: None,
        }
    }
}

impl Source for PacedReplay {
    fn facts(&self) -> TraceFacts {
        self.facts.clone()
    }

    fn next(&mut self, stop: &mut Stop, deadline: Option<Instant>) -> Result<Next, SourceError> {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(Next::End);
        }
        let Some(sample) = self.reader.next() else {
            return Ok(Next::End);
        };
        let sample = sample?;
        if self.speed > 0.0 {
            let t0 = *self.first_t.get_or_insert(sample.t);
            // Finite: the reader refuses times outside 1970–2286 and the speed is checked.
            let due = Duration::try_from_secs_f64(((sample.t - t0) / self.speed).max(0.0))
                .unwrap_or(Duration::MAX);
            if let Some(wait) = due.checked_sub(self.started.elapsed()) {
                if stop.wait(wait) {
                    return Ok(Next::End);
                }
            }
        }
        if stop.requested() {
            return Ok(Next::End);
        }
        Ok(Next::Samples(vec![sample]))
    }

    fn announce(&self, window_s: f64, destinations: &str) {
        tracing::info!(
            trace = %self.path.display(),
            window_s,
            "gpuslack replaying a recorded trace; exporting to {destinations}"
        );
    }

    fn position(&self) -> Option<String> {
        Some(self.reader.place())
    }

    fn finite(&self) -> bool {
        true
    }

    fn usage(&self) -> Vec<String> {
        let Some(u) = usage::resource_usage() else {
            return Vec::new();
        };
        vec![
            "replay_wall_s cpu_ms max_rss_mib".into(),
            format!(
                "{:.1} {:.1} {:.1}",
                self.started.elapsed().as_secs_f64(),
                u.cpu.as_secs_f64() * 1000.0,
                u.max_rss_kib as f64 / 1024.0
            ),
        ]
    }
}
