use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use gpuslack_receiver::diagnosis::Confidence;
use gpuslack_receiver::pipeline::replay;
use gpuslack_receiver::score::{Labels, Score, Scorer};
use gpuslack_receiver::source::cadence::{CadenceMode, CadencePolicy, CadenceSplit};
use gpuslack_receiver::source::thinning::{replay_at, Thinned};
use gpuslack_receiver::trace::TraceReader;

use super::input::{facts_beside, trace_in, PipelineArgs};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Trace file, CSV or binary (`.gstrace`), or a folder holding one (its `samples.csv`).
    pub trace: PathBuf,
    /// Labels: time segments per GPU with the classes that count as right (labels.json).
    pub labels: PathBuf,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Fail (exit 1) when the overall share of right windows is below this: a share (0.95) or
    /// a percent (95 or 95%).
    #[arg(long, value_name = "SHARE", default_value = "95%", value_parser = super::flags::share)]
    pub min_overall: f64,
    /// Fail (exit 1) when any segment's share of right windows is below this: a share (0.8) or
    /// a percent (80 or 80%).
    #[arg(long, value_name = "SHARE", default_value = "80%", value_parser = super::flags::share)]
    pub min_segment: f64,
    /// Print the score as JSON.
    #[arg(long)]
    pub json: bool,
    /// Score the trace as a live agent at this cadence would have read it: `adaptive` (the
    /// agent's default: 1 s, 100 ms for 6 s when a verdict is uncertain or changing) or a
    /// constant interval in ms (`100`). Needs a trace recorded at least that fast. Without
    /// it, every row of the trace is read.
    #[arg(long, value_name = "adaptive|MS", value_parser = super::live::parse_cadence)]
    pub cadence: Option<CadenceMode>,
}

/// `score --json`: the score, and the cadence it was read at.
#[derive(serde::Serialize)]
struct Scored<'a> {
    #[serde(flatten)]
    score: &'a Score,
    #[serde(skip_serializing_if = "Option::is_none")]
    cadence: Option<CadenceReport>,
}

/// What `--cadence` read of the trace.
#[derive(serde::Serialize)]
struct CadenceReport {
    mode: String,
    rows: u64,
    kept: u64,
    fast_ticks: u64,
    relaxed_ticks: u64,
    fast_share_of_time: f64,
    triggers: String,
}

impl CadenceReport {
    fn of(mode: CadenceMode, thinned: Thinned, split: &CadenceSplit) -> CadenceReport {
        CadenceReport {
            mode: super::live::cadence_name(mode),
            rows: thinned.rows,
            kept: thinned.kept,
            fast_ticks: split.fast_ticks,
            relaxed_ticks: split.relaxed_ticks,
            fast_share_of_time: split.fast_share(),
            triggers: split.triggers_line(),
        }
    }
}

pub fn run(mut args: Args) -> Result<ExitCode> {
    args.pipeline.validate()?;
    args.trace = trace_in(&args.trace)?;
    let labels = Labels::load(&args.labels)?;
    if args.pipeline.tdp_w.is_none() {
        args.pipeline.tdp_w = labels.tdp_w;
    }
    let mut pipeline = args
        .pipeline
        .pipeline_for_trace(&facts_beside(&args.trace)?)?;
    let mut scorer = Scorer::new(labels);
    let reader = TraceReader::open(&args.trace)?;
    let cadence = match args.cadence {
        None => {
            replay(reader, &mut pipeline, |r| {
                scorer.add(&r);
                Ok(())
            })?;
            None
        }
        Some(mode) => {
            let mut policy = CadencePolicy::new(mode);
            let (_, thinned) = replay_at(reader, &mut pipeline, &mut policy, |r| {
                scorer.add(&r);
                Ok(())
            })?;
            Some(CadenceReport::of(mode, thinned, policy.split()))
        }
    };
    let score = scorer.finish();
    if args.json {
        let scored = Scored {
            score: &score,
            cadence,
        };
        outln!("{}", serde_json::to_string_pretty(&scored)?);
    } else {
        outln!(
            "{:>3} {:<36} {:>7} {:>6} {:>6}  {:<28} got",
            "gpu",
            "scenario",
            "windows",
            "right",
            "+alts",
            "accept"
        );
        for s in &score.segments {
            let got: Vec<String> = s.got.iter().map(|(c, n)| format!("{c}×{n}")).collect();
            let with_alts = if s.windows == 0 {
                0.0
            } else {
                s.correct_with_alternatives as f64 / s.windows as f64
            };
            outln!(
                "{:>3} {:<36} {:>7} {:>5.0}% {:>5.0}%  {:<28} {}",
                s.gpu,
                s.scenario,
                s.windows,
                100.0 * s.share(),
                100.0 * with_alts,
                s.accept.join("|"),
                got.join(" ")
            );
        }
        outln!(
            "overall: {}/{} windows right ({:.1}%)",
            score.correct(),
            score.windows(),
            100.0 * score.overall()
        );
        outln!(
            "with alternatives: {}/{} windows right or low with the truth among the alternatives ({:.1}%)",
            score.correct_with_alternatives(),
            score.windows(),
            100.0 * score.overall_with_alternatives()
        );
        let by: Vec<String> = Confidence::ALL
            .into_iter()
            .map(|c| {
                let t = score.at(c);
                match t.share() {
                    Some(share) => format!(
                        "{c} {}/{} right ({:.1}%)",
                        t.correct,
                        t.windows,
                        100.0 * share
                    ),
                    None => format!("{c} 0 windows"),
                }
            })
            .collect();
        outln!("by confidence: {}", by.join(", "));
        if let Some(c) = &cadence {
            outln!(
                "cadence {}: {} of {} rows read, {:.1}% of the time at the fast tick ({} fast, {} relaxed ticks; triggers {})",
                c.mode,
                c.kept,
                c.rows,
                100.0 * c.fast_share_of_time,
                c.fast_ticks,
                c.relaxed_ticks,
                c.triggers
            );
        }
    }
    // A failing score says which figure failed, on stderr, whatever the format.
    let mut failed = false;
    if score.overall() < args.min_overall {
        errln!(
            "gpuslack: score failed: {}/{} windows right overall ({:.1}%), under --min-overall {:.1}%",
            score.correct(),
            score.windows(),
            100.0 * score.overall(),
            100.0 * args.min_overall
        );
        failed = true;
    }
    if let Some(worst) = score.worst().filter(|s| s.share() < args.min_segment) {
        errln!(
            "gpuslack: score failed: segment {:?} on GPU {} has {:.1}% of its {} windows right, under --min-segment {:.1}%",
            worst.scenario,
            worst.gpu,
            100.0 * worst.share(),
            worst.windows,
            100.0 * args.min_segment
        );
        failed = true;
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
