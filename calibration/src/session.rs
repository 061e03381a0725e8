//! A calibration session, recorded or live: samples plus the phases that say what ran when.
//! The same math serves `gpuslack calibrate` and `--from-recording`, so CI tests what the GPU
//! run computes.

use std::collections::BTreeMap;
use std::path::Path;

use gpuslack_receiver::device::DeviceFacts;
use gpuslack_receiver::diagnosis::Spent;
use gpuslack_receiver::files::{write_replacing, OutputError, Replacing};
use gpuslack_receiver::thinned::Thinned;
use gpuslack_receiver::trace::{
    FactsError, SampleWriter, TraceError, TraceFacts, TraceReader, TraceWriter,
};
use gpuslack_receiver::{Class, Diagnoser, Pipeline, Sample, Thresholds, WindowReport};

use crate::phases::{load_phases, phase_stats, PhaseSpan, PhasesError};
use crate::profile::{derive, GpuProfile, ProfileError, ProfileMeta};
use crate::validate::{Validation, Validator};

/// Windows kept per GPU for the report's plots: evenly spread over the session.
const PLOTTED_WINDOWS: usize = 1500;

/// One plotted window of a GPU's session: what the report's time plots draw, and no more (a
/// whole window's statistics are kilobytes; 1,500 of them per GPU would be the session's
/// largest allocation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlotPoint {
    pub gpu: u32,
    /// The window's midpoint, unix seconds.
    pub t: f64,
    pub power_w: Option<f64>,
    pub util_pct: Option<f64>,
    pub sm_pct: Option<f64>,
    pub class: Class,
    pub calibrated_efficiency: Option<f64>,
}

impl PlotPoint {
    fn of(w: &WindowReport) -> PlotPoint {
        PlotPoint {
            gpu: w.stats.gpu,
            t: w.stats.midpoint(),
            power_w: w.signals.power_w,
            util_pct: w.signals.util_pct,
            sm_pct: w.signals.sm_pct,
            class: w.class,
            calibrated_efficiency: w.calibrated_efficiency,
        }
    }
}

/// A session's samples, in time order, read afresh for each pass: a recording streams from its
/// file each time (memory stays flat whatever its length), a live session from memory.
pub type Samples<'a> = Box<dyn Iterator<Item = Result<Sample, SessionError>> + 'a>;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Phases(#[from] PhasesError),
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error("{0}: no samples fall in any phase")]
    Empty(String),
    #[error("{0}")]
    Pipeline(String),
    #[error(transparent)]
    Facts(#[from] FactsError),
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    /// An output file refused (a link at its name) or not placed.
    #[error(transparent)]
    Output(#[from] OutputError),
}

/// Everything a calibration produces for each GPU.
pub struct Calibration {
    pub profiles: Vec<GpuProfile>,
    /// The diagnosis on the session's windows, on the path the GPU's samples allow.
    pub validations: BTreeMap<u32, Validation>,
    /// The same windows with GPM left out, for a GPU that has it: what a GPU of the same kind
    /// without GPM (or an agent run with `--no-gpm`) would have said of each workload.
    pub nvml_validations: BTreeMap<u32, Validation>,
    /// Per GPU, the windows for the plots, evenly thinned.
    pub plots: BTreeMap<u32, Vec<PlotPoint>>,
    /// Per GPU, the time and energy of each verdict over the session: the cost of slack.
    pub spent: BTreeMap<u32, BTreeMap<Class, Spent>>,
    pub phases: Vec<PhaseSpan>,
}

/// `YYYY-MM-DD` (UTC) of a unix time: the report's own ([`gpuslack_receiver::report::utc_date`]).
pub use gpuslack_receiver::report::utc_date;

/// Gaps between workloads (after the first that is not bare idle) and the tail after the
/// last: a process still holds the GPU there, so the quietest of them is the held-idle power.
fn gaps(phases: &[PhaseSpan], end: f64) -> Vec<PhaseSpan> {
    let mut sorted: Vec<&PhaseSpan> = phases.iter().collect();
    sorted.sort_by(|a, b| a.t0.total_cmp(&b.t0));
    let mut out = Vec::new();
    let first_work = sorted
        .iter()
        .position(|p| p.name != "idle" && p.name != "bare_idle");
    for (i, p) in sorted.iter().enumerate() {
        if first_work.is_none_or(|f| i < f) {
            continue;
        }
        let next = sorted.get(i + 1).map_or(end, |n| n.t0);
        if next > p.t1 {
            out.push(PhaseSpan {
                name: format!("gap_after_{}", p.name),
                t0: p.t1,
                t1: next,
                gpus: p.gpus.clone(),
            });
        }
    }
    out
}

/// Runs `pass` over every sample of one pass of `source`, stopping at the first bad sample.
fn each<'a, T>(
    source: &dyn Fn() -> Result<Samples<'a>, SessionError>,
    pass: impl FnOnce(&mut dyn Iterator<Item = Sample>) -> T,
) -> Result<T, SessionError> {
    let mut error = None;
    let mut samples = source()?.map_while(|r| match r {
        Ok(s) => Some(s),
        Err(e) => {
            error = Some(e);
            None
        }
    });
    let out = pass(&mut samples);
    drop(samples);
    match error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Calibrates from samples in memory (a live run) or a trace, in three passes over them: the
/// phases' statistics, the gaps between phases (held idle), then the diagnosis on both paths.
pub fn calibrate<'a>(
    source: &dyn Fn() -> Result<Samples<'a>, SessionError>,
    phases: Vec<PhaseSpan>,
    facts: &BTreeMap<u32, DeviceFacts>,
    origin: &str,
) -> Result<Calibration, SessionError> {
    let mut end = 0.0f64;
    let mut first = None;
    let stats = each(source, |samples| {
        let seen = samples.inspect(|s| {
            end = end.max(s.t);
            first.get_or_insert(s.t);
        });
        phase_stats(seen, &phases)
    })?;
    if stats.is_empty() {
        return Err(SessionError::Empty(origin.to_string()));
    }
    let gap_phases = gaps(&phases, end);
    let gap_stats = each(source, |samples| phase_stats(samples, &gap_phases))?;
    let gpus: Vec<u32> = stats
        .iter()
        .map(|s| s.gpu)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let date = utc_date(first.unwrap_or(0.0));
    let mut profiles = Vec::new();
    let mut diagnoser = Diagnoser::new(Thresholds::default());
    for gpu in &gpus {
        let f = facts.get(gpu).cloned().unwrap_or_default();
        let mine: Vec<_> = stats.iter().filter(|s| s.gpu == *gpu).cloned().collect();
        let my_gaps: Vec<_> = gap_stats
            .iter()
            .filter(|s| s.gpu == *gpu)
            .cloned()
            .collect();
        let profile = derive(
            &mine,
            &my_gaps,
            ProfileMeta {
                uuid: f.uuid.clone(),
                model: f.name.clone(),
                driver: f.driver.clone(),
                date: date.clone(),
                source: origin.to_string(),
                tdp_w: f.tdp_w,
                power_limit_w: f.power_limit_w.or(f.tdp_w),
            },
        )?;
        if let Ok(p) = profile.power_profile() {
            diagnoser.set_profile(*gpu, p);
        }
        diagnoser.set_facts(*gpu, f);
        profiles.push(profile);
    }
    let mut plotted: BTreeMap<u32, Thinned<PlotPoint>> = BTreeMap::new();
    let mut spent: BTreeMap<u32, BTreeMap<Class, Spent>> = BTreeMap::new();
    let mut gpm_seen = false;
    let validations = diagnose(source, diagnoser.clone(), false, &gpus, &phases, |w| {
        gpm_seen |= w.signals.has_gpm();
        plotted
            .entry(w.stats.gpu)
            .or_insert_with(|| Thinned::new(PLOTTED_WINDOWS))
            .push(PlotPoint::of(w));
        let seconds = w.stats.duration_s();
        let energy_j = w
            .stats
            .energy_j
            .or(w.signals.power_w.map(|p| p * seconds))
            .unwrap_or(0.0);
        let s = spent
            .entry(w.stats.gpu)
            .or_default()
            .entry(w.class)
            .or_default();
        s.seconds += seconds;
        s.energy_j += energy_j;
    })?;
    let nvml_validations = if gpm_seen {
        diagnose(source, diagnoser, true, &gpus, &phases, |_| {})?
    } else {
        BTreeMap::new()
    };
    Ok(Calibration {
        profiles,
        validations,
        nvml_validations,
        plots: plotted
            .into_iter()
            .map(|(gpu, points)| (gpu, points.into_values()))
            .collect(),
        spent,
        phases,
    })
}

/// One pass of the diagnosis over the session, GPM left out of every sample if asked: each
/// GPU's validation, and every window handed to `seen`.
fn diagnose<'a>(
    source: &dyn Fn() -> Result<Samples<'a>, SessionError>,
    diagnoser: Diagnoser,
    without_gpm: bool,
    gpus: &[u32],
    phases: &[PhaseSpan],
    mut seen: impl FnMut(&WindowReport),
) -> Result<BTreeMap<u32, Validation>, SessionError> {
    let mut validators: BTreeMap<u32, Validator> =
        gpus.iter().map(|g| (*g, Validator::new(phases))).collect();
    let mut pipeline = Pipeline::new(2.0, diagnoser);
    let mut refused = None;
    let mut take = |w: WindowReport, validators: &mut BTreeMap<u32, Validator>| {
        if let Some(v) = validators.get_mut(&w.stats.gpu) {
            v.add(&w);
        }
        seen(&w);
    };
    each(source, |samples| {
        for mut s in samples {
            if without_gpm {
                s.clear_gpm();
            }
            match pipeline.push(&s) {
                Ok(reports) => reports.into_iter().for_each(|w| take(w, &mut validators)),
                Err(e) => {
                    refused = Some(e.to_string());
                    break;
                }
            }
        }
    })?;
    if let Some(e) = refused {
        return Err(SessionError::Pipeline(e));
    }
    for w in pipeline.finish() {
        take(w, &mut validators);
    }
    Ok(validators
        .into_iter()
        .map(|(gpu, v)| (gpu, v.finish()))
        .collect())
}

/// Writes a session in the form [`from_recording`] reads (`samples.csv`, `phases.json`,
/// `facts.json`), so a live calibration can be re-derived, or kept as a test fixture.
pub fn save_session(
    dir: &Path,
    samples: &[Sample],
    phases: &[PhaseSpan],
    facts: &BTreeMap<u32, DeviceFacts>,
) -> Result<(), SessionError> {
    let write_err = |path: &Path, e: std::io::Error| SessionError::Write {
        path: path.display().to_string(),
        source: e,
    };
    // Each file the way every output file is written: never through a link, never half.
    std::fs::create_dir_all(dir).map_err(|e| write_err(dir, e))?;
    let trace = dir.join("samples.csv");
    let file = Replacing::create(&trace)?;
    let mut writer = TraceWriter::new(file).map_err(|e| write_err(&trace, e))?;
    for s in samples {
        writer.write(s).map_err(|e| write_err(&trace, e))?;
    }
    writer.flush().map_err(|e| write_err(&trace, e))?;
    writer.into_inner().commit()?;
    let phases_path = dir.join("phases.json");
    let phases_json = serde_json::to_string_pretty(phases).unwrap_or_default();
    write_replacing(&phases_path, phases_json.as_bytes())?;
    let facts_path = dir.join("facts.json");
    let trace_facts = TraceFacts {
        default: DeviceFacts::default(),
        per_gpu: facts.clone(),
    };
    Ok(write_replacing(
        &facts_path,
        trace_facts.to_json().as_bytes(),
    )?)
}

/// `--from-recording DIR`: `samples.csv` and `phases.json` (and `facts.json` if present),
/// the trace streamed from its file in each pass.
pub fn from_recording(dir: &Path) -> Result<Calibration, SessionError> {
    let trace = dir.join("samples.csv");
    // The trace first: a missing recording is named as such, not as missing phases.
    drop(TraceReader::open(&trace)?);
    let phases = load_phases(&dir.join("phases.json"))?;
    let facts = TraceFacts::beside(&trace)?.unwrap_or_default();
    let source = || -> Result<Samples<'static>, SessionError> {
        let reader = TraceReader::open(&trace)?;
        Ok(Box::new(reader.map(|r| r.map_err(SessionError::from))))
    };
    let mut gpus = std::collections::BTreeSet::new();
    each(&source, |samples| {
        samples.for_each(|s| {
            gpus.insert(s.gpu);
        })
    })?;
    let facts = gpus
        .into_iter()
        .map(|g| (g, facts.gpu(g).clone()))
        .collect();
    calibrate(
        &source,
        phases,
        &facts,
        &format!("recording {}", dir.display()),
    )
}

/// A live session's samples, from memory.
pub fn in_memory<'a>(samples: &'a [Sample]) -> impl Fn() -> Result<Samples<'a>, SessionError> + 'a {
    move || Ok(Box::new(samples.iter().cloned().map(Ok)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_days() {
        assert_eq!(utc_date(0.0), "1970-01-01");
        assert_eq!(utc_date(1796024907.0), "2026-11-30");
        assert_eq!(utc_date(951_782_400.0), "2000-02-29");
    }
}
