use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use gpuslack_receiver::diagnosis::Confidence;
use gpuslack_receiver::pipeline::replay;
use gpuslack_receiver::score::{Labels, Scorer};
use gpuslack_receiver::trace::TraceReader;

use super::input::{facts_beside, PipelineArgs};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Trace file (CSV).
    pub trace: PathBuf,
    /// Labels: time segments per GPU with the classes that count as right (labels.json).
    pub labels: PathBuf,
    #[command(flatten)]
    pub pipeline: PipelineArgs,
    /// Fail (exit 1) when the overall share of right windows is below this.
    #[arg(long, default_value_t = 0.95, value_parser = super::flags::finite)]
    pub min_overall: f64,
    /// Fail (exit 1) when any segment's share of right windows is below this.
    #[arg(long, default_value_t = 0.80, value_parser = super::flags::finite)]
    pub min_segment: f64,
    /// Print the score as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(mut args: Args) -> Result<ExitCode> {
    args.pipeline.validate()?;
    // Shares of windows: a threshold past 1 fails every score, one below 0 passes every one.
    super::flags::factor("--min-overall", args.min_overall, 0.0, 1.0, None)?;
    super::flags::factor("--min-segment", args.min_segment, 0.0, 1.0, None)?;
    let labels = Labels::load(&args.labels)?;
    if args.pipeline.tdp_w.is_none() {
        args.pipeline.tdp_w = labels.tdp_w;
    }
    let mut pipeline = args
        .pipeline
        .pipeline_for_trace(&facts_beside(&args.trace)?)?;
    let mut scorer = Scorer::new(labels);
    replay(TraceReader::open(&args.trace)?, &mut pipeline, |r| {
        scorer.add(&r);
        Ok(())
    })?;
    let score = scorer.finish();
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&score)?);
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
    }
    let worst = score.worst().map_or(0.0, |s| s.share());
    Ok(
        if score.overall() >= args.min_overall && worst >= args.min_segment {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        },
    )
}
