//! Scores verdicts against a labelled recording (`labels.json`): each labelled segment counts
//! the windows whose midpoint it holds and whose class is one it accepts. This is how the rules
//! are held to recorded ground truth, and how users can check them on their own recordings.

// Public items here are not all documented yet: the crate's `missing_docs` rule
// (Cargo.toml's [workspace.lints]) is waived for this module until they are.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::diagnosis::{Class, Confidence, WindowReport};

#[derive(Debug, Clone, Deserialize)]
pub struct Labels {
    #[serde(default)]
    pub tdp_w: Option<f64>,
    pub segments: Vec<Segment>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Segment {
    pub gpu: u32,
    pub start: f64,
    pub end: f64,
    pub scenario: String,
    pub accept: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum LabelsError {
    /// Unreadable, not a regular file, or past its cap (the error names the file and cap).
    #[error(transparent)]
    Read(#[from] crate::files::ReadError),
    #[error("{path}: {source}")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path}: segment {index} ({scenario}): accepts unknown class `{class}`")]
    UnknownClass {
        path: String,
        index: usize,
        scenario: String,
        class: String,
    },
    #[error("{path}: {problem}")]
    Implausible { path: String, problem: String },
}

impl Labels {
    pub fn load(path: &Path) -> Result<Labels, LabelsError> {
        let shown = path.display().to_string();
        let text = crate::files::read_text(path, crate::files::Input::Labels)?;
        Labels::parse(&text, &shown)
    }

    /// Parses a labels document; `shown` names it in errors.
    pub fn parse(text: &str, shown: &str) -> Result<Labels, LabelsError> {
        let shown = shown.to_string();
        let labels: Labels = serde_json::from_str(text).map_err(|source| LabelsError::Parse {
            path: shown.clone(),
            source,
        })?;
        let implausible = |problem: String| LabelsError::Implausible {
            path: shown.clone(),
            problem,
        };
        if let Some(tdp) = labels.tdp_w {
            if !(tdp.is_finite() && tdp > 0.0 && tdp <= 10_000.0) {
                return Err(implausible(format!(
                    "tdp_w = {tdp} is not a plausible TDP (above 0, at most 10000 W)"
                )));
            }
        }
        for (index, seg) in labels.segments.iter().enumerate() {
            if !(seg.start.is_finite() && seg.end.is_finite() && seg.start < seg.end) {
                return Err(implausible(format!(
                    "segment {index} ({}): start {} must come before end {}",
                    seg.scenario, seg.start, seg.end
                )));
            }
            if let Some(bad) = seg.accept.iter().find(|c| Class::from_name(c).is_none()) {
                return Err(LabelsError::UnknownClass {
                    path: shown,
                    index,
                    scenario: seg.scenario.clone(),
                    class: bad.clone(),
                });
            }
        }
        Ok(labels)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SegmentScore {
    pub gpu: u32,
    pub scenario: String,
    pub accept: Vec<String>,
    pub windows: usize,
    pub correct: usize,
    /// Windows right by class, or `low` whose alternatives hold an accepted class: a verdict
    /// that said it was unsure and named the truth among what it could not rule out.
    pub correct_with_alternatives: usize,
    /// Windows and right windows (by class) per confidence.
    pub by_confidence: BTreeMap<&'static str, Tally>,
    /// Classes given to the windows of this segment, with counts.
    pub got: BTreeMap<String, usize>,
}

/// Windows given one confidence, and how many of them were right by class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub windows: usize,
    pub correct: usize,
}

impl Tally {
    pub fn share(&self) -> Option<f64> {
        (self.windows > 0).then(|| self.correct as f64 / self.windows as f64)
    }
}

impl SegmentScore {
    pub fn share(&self) -> f64 {
        if self.windows == 0 {
            0.0
        } else {
            self.correct as f64 / self.windows as f64
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Score {
    pub segments: Vec<SegmentScore>,
}

impl Score {
    pub fn windows(&self) -> usize {
        self.segments.iter().map(|s| s.windows).sum()
    }
    pub fn correct(&self) -> usize {
        self.segments.iter().map(|s| s.correct).sum()
    }
    pub fn correct_with_alternatives(&self) -> usize {
        self.segments
            .iter()
            .map(|s| s.correct_with_alternatives)
            .sum()
    }
    /// The share right counting a `low` verdict whose alternatives hold the truth.
    pub fn overall_with_alternatives(&self) -> f64 {
        let n = self.windows();
        if n == 0 {
            0.0
        } else {
            self.correct_with_alternatives() as f64 / n as f64
        }
    }
    /// Windows and right windows of one confidence, over every segment.
    pub fn at(&self, confidence: Confidence) -> Tally {
        let mut t = Tally::default();
        for s in &self.segments {
            if let Some(x) = s.by_confidence.get(confidence.as_str()) {
                t.windows += x.windows;
                t.correct += x.correct;
            }
        }
        t
    }
    pub fn overall(&self) -> f64 {
        let n = self.windows();
        if n == 0 {
            0.0
        } else {
            self.correct() as f64 / n as f64
        }
    }
    /// The lowest-scoring segment that holds any window.
    pub fn worst(&self) -> Option<&SegmentScore> {
        self.segments
            .iter()
            .filter(|s| s.windows > 0)
            .min_by(|a, b| a.share().total_cmp(&b.share()))
    }
}

/// Incremental scorer: feed it reports as they stream out of the pipeline.
#[derive(Debug)]
pub struct Scorer {
    labels: Labels,
    scores: Vec<SegmentScore>,
}

impl Scorer {
    pub fn new(labels: Labels) -> Self {
        let scores = labels
            .segments
            .iter()
            .map(|s| SegmentScore {
                gpu: s.gpu,
                scenario: s.scenario.clone(),
                accept: s.accept.clone(),
                windows: 0,
                correct: 0,
                correct_with_alternatives: 0,
                by_confidence: BTreeMap::new(),
                got: BTreeMap::new(),
            })
            .collect();
        Scorer { labels, scores }
    }

    pub fn add(&mut self, r: &WindowReport) {
        let mid = r.stats.midpoint();
        let held = self
            .labels
            .segments
            .iter()
            .position(|s| s.gpu == r.stats.gpu && s.start <= mid && mid < s.end);
        if let Some(i) = held {
            let score = &mut self.scores[i];
            score.windows += 1;
            *score.got.entry(r.class.as_str().to_string()).or_default() += 1;
            let accepted = |c: Class| score.accept.iter().any(|a| a == c.as_str());
            let right = accepted(r.class);
            let named =
                r.confidence() == Confidence::Low && r.alternatives().iter().any(|&c| accepted(c));
            let tally = score
                .by_confidence
                .entry(r.confidence().as_str())
                .or_default();
            tally.windows += 1;
            if right {
                tally.correct += 1;
                score.correct += 1;
            }
            if right || named {
                score.correct_with_alternatives += 1;
            }
        }
    }

    pub fn finish(self) -> Score {
        Score {
            segments: self.scores,
        }
    }
}
