//! `gpuslack doctor`: one screen (or `--format json`) that says what works on this node and
//! what does not, each with the reason and the fix. The checks live in the library
//! (`gpuslack_receiver::doctor`); here they are run in order, the SKU table is matched (the
//! calibration crate's, which the library cannot see), and the exit code is chosen: 0 when
//! everything the configuration asks for works, 69 when no GPU can be watched, 1 otherwise.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use gpuslack_receiver::attribution::kubelet;
use gpuslack_receiver::doctor::{
    self, endpoints, gpus, host, Area, Doctor, Finding, Status, Verdict,
};
use gpuslack_receiver::source::live::ticks::open_nvml;
use gpuslack_receiver::source::live::Cadence;

use super::export_args::ExportArgs;
use super::EXIT_NO_GPU;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Output format: a screen for people, or one JSON document.
    #[arg(long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// Check as an agent run with --no-gpm would: GPM is not asked for.
    #[arg(long)]
    pub no_gpm: bool,
    /// The kubelet's PodResources socket; named here, its absence fails (the default path
    /// absent only means "not a Kubernetes node").
    #[arg(long, value_name = "PATH")]
    pub kubelet_socket: Option<PathBuf>,
    /// Where the host's processes are seen (a container that mounts the host's /proc elsewhere).
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    pub proc_root: PathBuf,
    /// The agent's export settings, checked as `run` would use them: the OTLP endpoint gets
    /// one empty export, the Prometheus address is bound and released.
    #[command(flatten)]
    pub export: ExportArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

/// Reads of every GPU, 100 ms apart: GPM needs two, and the process list comes once a second.
const TICKS: u32 = 12;
const TICK: Duration = Duration::from_millis(100);

pub fn run(args: Args) -> Result<ExitCode> {
    let config = args.export.resolve()?;
    let mut doctor = Doctor::default();
    doctor.add(host::platform(&args.proc_root));
    let mut gpu_pids = Vec::new();
    match open_nvml(Cadence::every(TICK), args.no_gpm) {
        Ok(mut source) => {
            let found = gpus::sample(
                &mut source,
                args.no_gpm,
                TICKS,
                TICK,
                super::live::unix_now,
                std::thread::sleep,
            );
            doctor.add(found.findings);
            doctor.add(sku_findings(&source.facts()));
            gpu_pids = found.pids;
        }
        Err(e) => doctor.add([gpus::nvml_failed(&e)]),
    }
    doctor.add([
        host::processes(&args.proc_root, &gpu_pids),
        host::profiler(&args.proc_root),
    ]);
    let socket = args
        .kubelet_socket
        .clone()
        .unwrap_or_else(|| PathBuf::from(kubelet::DEFAULT_SOCKET));
    doctor.add([
        endpoints::kubelet(&socket, args.kubelet_socket.is_some()),
        endpoints::otlp(&config),
        endpoints::prometheus(config.prometheus),
    ]);
    let shown = match args.format {
        Format::Human => doctor.text(),
        Format::Json => {
            let verdict = match doctor.verdict() {
                Verdict::Healthy => "healthy",
                Verdict::NoGpu => "no_gpu",
                Verdict::Failed => "failed",
            };
            let document = serde_json::json!({
                "schema": "gpuslack.doctor.v1",
                "verdict": verdict,
                "findings": doctor.findings,
            });
            serde_json::to_string_pretty(&document)? + "\n"
        }
    };
    write_report(&shown)?;
    Ok(match doctor.verdict() {
        Verdict::Healthy => ExitCode::SUCCESS,
        Verdict::NoGpu => ExitCode::from(EXIT_NO_GPU),
        Verdict::Failed => ExitCode::FAILURE,
    })
}

/// The report on standard output in one write. A reader that leaves early (`| head -c1`)
/// does not change the exit code, which is the node's verdict in either format: the JSON
/// form, written in two writes, exited 0 on the broken pipe where the text form exited 69.
fn write_report(shown: &str) -> Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(shown.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        done => Ok(done?),
    }
}

/// Each GPU's model against the specification table, and the figures the verdicts use (NVML's
/// own where it reports them, the table's otherwise, each with where it came from). A model
/// the table does not know says so, and gets no figure from a neighbour's entry.
fn sku_findings(facts: &[(u32, gpuslack_receiver::device::DeviceFacts)]) -> Vec<Finding> {
    use gpuslack_calibration::sku::{self, SkuMatch};
    facts
        .iter()
        .filter(|(_, f)| f.mig_parent.is_none())
        .map(|(gpu, f)| {
            let name = f.name.as_deref().unwrap_or("");
            let spec = match sku::spec_for(f) {
                Ok(spec) => doctor::shown(&spec.summary()),
                Err(e) => {
                    return Finding::new(Area::Gpu, Status::Failed, format!("the SKU table: {e}"))
                }
            };
            match sku::resolve(name) {
                Ok(SkuMatch::Known { sku, .. }) => Finding::new(
                    Area::Gpu,
                    Status::Info,
                    format!("GPU {gpu}: specification {}: {spec}", sku.name),
                ),
                Ok(SkuMatch::Unknown { .. }) => Finding::new(
                    Area::Gpu,
                    Status::Degraded,
                    format!(
                        "GPU {gpu}: the model {} is not in gpuslack's table: no figure is scaled from a specification; {spec}",
                        doctor::shown(name)
                    ),
                )
                .fix("run `gpuslack calibrate` on this GPU for its own baselines (docs/CALIBRATION.md)"),
                Err(e) => Finding::new(Area::Gpu, Status::Failed, format!("the SKU table: {e}")),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuslack_receiver::device::DeviceFacts;

    fn named(name: &str) -> (u32, DeviceFacts) {
        let facts = DeviceFacts {
            name: Some(name.into()),
            tdp_w: Some(300.0),
            ..DeviceFacts::default()
        };
        (0, facts)
    }

    #[test]
    fn a_known_model_names_its_entry_and_an_unknown_one_says_so() {
        let f = sku_findings(&[named("NVIDIA L40")]);
        assert_eq!(f[0].status, Status::Info, "{}", f[0].detail);
        assert!(
            f[0].detail.starts_with("GPU 0: specification L40"),
            "{}",
            f[0].detail
        );
        let f = sku_findings(&[named("NVIDIA Future GPU 9000\u{1b}[31m")]);
        assert_eq!(f[0].status, Status::Degraded, "{}", f[0].detail);
        assert!(
            f[0].detail.starts_with(
                "GPU 0: the model NVIDIA Future GPU 9000\\x1b[31m is not in gpuslack's table"
            ),
            "{}",
            f[0].detail
        );
    }
}
