//! `gpuslack fleet`: the fleet waste report, and `gpuslack fleet job JOB` one job across its
//! nodes, both read from a Prometheus-compatible query API (the library's `fleet` module).
//! Exit codes: 0 a report, 1 no gpuslack series for what was asked, 2 a usage error (a bad URL
//! or duration included), 75 nothing answered at the URL (sysexits' EX_TEMPFAIL: try again
//! later; 69 is "no GPU" elsewhere), 76 something answered that is not the Prometheus query
//! API, or it refused a query.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Subcommand;
use gpuslack_receiver::fleet::{self, render, FleetError, Options, Prices, Prometheus};
use gpuslack_receiver::text;

use super::flags;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = false)]
pub struct Args {
    /// The query API's base URL: Prometheus (http://prometheus:9090), Thanos Query, Mimir
    /// (http://mimir/prometheus) or VictoriaMetrics.
    #[arg(long, global = true, value_name = "URL")]
    prometheus: Option<String>,
    /// How far back from now the report reaches (s, m, h, d, w).
    #[arg(long, global = true, default_value = "7d", value_name = "DURATION")]
    since: String,
    /// The report's end, Unix seconds (default: now): reproducible reports of a past week.
    #[arg(long, global = true, value_name = "UNIX_S", value_parser = flags::finite)]
    at: Option<f64>,
    /// Price of one GPU-hour, for the cost of slack.
    #[arg(long, global = true, value_name = "PRICE", value_parser = flags::finite)]
    price_gpu_hour: Option<f64>,
    /// Price of one kWh, for the cost of slack.
    #[arg(long, global = true, value_name = "PRICE", value_parser = flags::finite)]
    price_kwh: Option<f64>,
    /// How many jobs, teams and users each top list shows.
    #[arg(long, global = true, default_value_t = 10)]
    top: usize,
    /// The fleet report from the hourly recording rules
    /// (deploy/prometheus/gpuslack-fleet-rules.yml) rather than every GPU's raw counters: for
    /// thousands of nodes (docs/benchmarks.md, "Fleet at scale").
    #[arg(long)]
    from_rules: bool,
    /// The report as JSON (schema gpuslack.fleet.v1, or gpuslack.fleet.job.v1 for a job).
    #[arg(long, global = true)]
    json: bool,
    /// The largest answer of the query API read, MiB; a larger one is refused before it is
    /// held. The default reads about 400,000 series: a week of some 60,000 jobs.
    #[arg(long, global = true, default_value_t = 64.0, value_name = "MIB", value_parser = flags::finite)]
    max_answer_mib: f64,
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(Subcommand)]
enum Sub {
    /// One job across all its nodes: ranks over time, the hang or straggler, the cost of slack.
    Job {
        /// The job as the agent names it: slurm:4711, pod:UID, container:ID, pgid:N.
        job: String,
        /// Also write an HTML page with an SVG timeline per rank.
        #[arg(long, value_name = "FILE")]
        html: Option<PathBuf>,
        /// Leave each rank's verdicts over time out of the JSON: the summary alone, small
        /// enough for Slurm's AdminComment (deploy/slurm/gpuslack-epilog.sh).
        #[arg(long)]
        no_timeline: bool,
    },
}

pub fn run(args: Args) -> Result<ExitCode> {
    match report(&args) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => match e.downcast_ref::<FleetError>() {
            Some(fleet_error) => {
                // Its outside parts were escaped and capped where they came in; its URL has
                // no credentials.
                errln!(
                    "error: {}",
                    text::lines(&fleet_error.to_string(), usize::MAX)
                );
                Ok(ExitCode::from(fleet_error.exit_code()))
            }
            None => Err(e),
        },
    }
}

fn report(args: &Args) -> Result<()> {
    let url = args.prometheus.as_deref().ok_or(FleetError::NoUrl)?;
    if !(1.0..=1e6).contains(&args.max_answer_mib) {
        anyhow::bail!(
            "--max-answer-mib must be from 1 to 1000000, got {}",
            args.max_answer_mib
        );
    }
    if let Some(Sub::Job {
        html: Some(path), ..
    }) = &args.command
    {
        // Before the queries, not after.
        crate::cli::files::check_output("--html", path)?;
    }
    let prom = Prometheus::new(url)?
        .with_max_answer_bytes((args.max_answer_mib * f64::from(1u32 << 20)) as u64);
    let end = match args.at {
        Some(t) => t,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .context("the clock is before 1970")?
            .as_secs_f64(),
    };
    let options = Options {
        since_s: fleet::parse_duration_s(&args.since)?,
        end,
        prices: Prices {
            gpu_hour: args.price_gpu_hour,
            kwh: args.price_kwh,
        },
        top: args.top,
        from_rules: args.from_rules,
    };
    match &args.command {
        None => {
            let r = fleet::fleet_report(&prom, &options)?;
            warn_refused(r.values_refused);
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                out!("{}", render::fleet_text(&r));
            }
        }
        Some(Sub::Job {
            job,
            html,
            no_timeline,
        }) => {
            let mut r = fleet::job_report(&prom, job, &options)?;
            warn_refused(r.values_refused);
            if let Some(path) = html {
                crate::cli::files::write_replacing(
                    "--html",
                    path,
                    render::job_html(&r).as_bytes(),
                )?;
            }
            if *no_timeline {
                for rank in &mut r.ranks {
                    rank.bands.clear();
                }
            }
            if args.json {
                outln!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                out!("{}", render::job_text(&r, std::io::stdout().is_terminal()));
            }
        }
    }
    Ok(())
}

/// On stderr, whatever the format: a script reading the JSON sees the count in it too.
fn warn_refused(n: usize) {
    if n > 0 {
        errln!("warning: {}", render::refused_values(n));
    }
}
