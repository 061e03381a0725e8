//! Replay: a recorded trace through the whole pipeline, streaming, as fast as it can be read.

use std::io::Read;

use crate::diagnosis::WindowReport;
use crate::pipeline::{Pipeline, PipelineCounts, PushError};
use crate::trace::{TraceError, TraceReader};

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("{path}:{line}: {source}")]
    Refused {
        path: String,
        line: u64,
        source: PushError,
    },
    #[error("writing the output")]
    Output(#[source] std::io::Error),
}

/// Feeds every sample of `reader` through `pipeline` and hands each report to `sink` as soon
/// as its time slot is complete. Memory stays flat whatever the trace's length.
pub fn replay<R: Read>(
    mut reader: TraceReader<R>,
    pipeline: &mut Pipeline,
    mut sink: impl FnMut(WindowReport) -> std::io::Result<()>,
) -> Result<PipelineCounts, ReplayError> {
    while let Some(sample) = reader.next() {
        let sample = sample?;
        let reports = pipeline
            .push(&sample)
            .map_err(|source| ReplayError::Refused {
                path: reader.path().to_string(),
                line: reader.line(),
                source,
            })?;
        for report in reports {
            sink(report).map_err(ReplayError::Output)?;
        }
    }
    for report in pipeline.finish() {
        sink(report).map_err(ReplayError::Output)?;
    }
    Ok(pipeline.counts())
}
