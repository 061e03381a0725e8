//! The GPUs' part, read through the live source exactly as the agent reads them: each GPU
//! that answers, its model and limits, whether GPM gives values (and if not, whether the GPU
//! lacks it or the reads fail), MIG instances, and the processes that hold each GPU (whose
//! environment `host::processes` then checks).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::{shown, Area, Finding, Status};
use crate::source::live::nvml::OpenError;
use crate::source::live::{DeviceReader, Field};
use crate::source::live::{LiveSource, SourceEvent};

/// What the GPUs' sampling showed.
#[derive(Debug, Default)]
pub struct GpuFindings {
    /// NVML's, then two a GPU (its facts, GPM).
    pub findings: Vec<Finding>,
    /// The processes NVML named as holding a GPU.
    pub pids: Vec<u32>,
}

/// What a running agent does meanwhile, where the driver may yet come (all but a permission
/// problem, which waiting does not cure).
pub const WAITS: &str = "meanwhile `gpuslack run --wait-for-driver` (the systemd unit and the DaemonSet run with it) waits for the driver, trying again up to every 60 s, and /healthz says waiting_for_driver";

/// NVML could not be opened: the one finding, with what to check.
pub fn nvml_failed(error: &OpenError) -> Finding {
    let fix = match error {
        OpenError::NoLibrary(_) => {
            "install the NVIDIA driver; in a container, run with the NVIDIA runtime (runtimeClassName: nvidia, or --gpus all) so that libnvidia-ml.so.1 is mounted"
        }
        OpenError::NoDriver(_) => "load the driver (`nvidia-smi` must answer)",
        OpenError::NoPermission(_) => "run as root, or as a user in the group that owns /dev/nvidia*",
        OpenError::NoGpu => "check `nvidia-smi -L`; in Kubernetes, the pod needs the GPUs visible (NVIDIA_VISIBLE_DEVICES=all)",
        OpenError::Other(_) => "check `nvidia-smi` and the kernel log (`dmesg | grep -i nvrm`)",
    };
    let fix = match error {
        OpenError::NoPermission(_) => fix.to_string(),
        _ => format!("{fix}; {WAITS}"),
    };
    Finding::new(Area::Nvml, Status::Failed, shown(&error.to_string())).fix(fix)
}

/// What `ticks` samples of every GPU, `tick` apart, show. GPM needs two samples to give a
/// value, and the process list is read once a second: a second and a bit of ticks shows both.
pub fn sample<D: DeviceReader>(
    source: &mut LiveSource<D>,
    no_gpm: bool,
    ticks: u32,
    tick: Duration,
    mut clock: impl FnMut() -> f64,
    mut sleep: impl FnMut(Duration),
) -> GpuFindings {
    let facts = source.facts();
    let mut gpm_seen: BTreeMap<u32, f64> = BTreeMap::new();
    let mut pids: BTreeSet<u32> = BTreeSet::new();
    for i in 0..ticks {
        for s in source.sample(&mut clock) {
            if let Some(sm) = s.get(crate::Metric::GpmSm) {
                gpm_seen.insert(s.gpu, sm);
            }
            for p in s.processes.iter().flat_map(|p| p.iter()) {
                pids.insert(p.pid);
            }
        }
        if i + 1 < ticks {
            sleep(tick);
        }
    }
    let mut unsupported = BTreeSet::new();
    let mut failing: BTreeMap<u32, String> = BTreeMap::new();
    let mut lost: BTreeMap<u32, String> = BTreeMap::new();
    for event in source.drain_events() {
        match event {
            SourceEvent::FieldUnsupported {
                gpu,
                field: Field::Gpm,
            } => {
                unsupported.insert(gpu);
            }
            SourceEvent::ReadFailed {
                gpu,
                field: Field::Gpm,
                error,
                ..
            } => {
                failing.insert(gpu, error);
            }
            SourceEvent::GpuLost { gpu, error } => {
                lost.insert(gpu, error);
            }
            _ => {}
        }
    }
    let driver = facts.iter().find_map(|(_, f)| f.driver.clone());
    let mut findings = vec![Finding::new(
        Area::Nvml,
        Status::Ok,
        format!(
            "NVML answers: driver {}, {} GPU{} (MIG instances counted)",
            driver
                .as_deref()
                .map(shown)
                .unwrap_or_else(|| "unknown".into()),
            facts.len(),
            if facts.len() == 1 { "" } else { "s" }
        ),
    )];
    for (gpu, f) in &facts {
        let name = f
            .name
            .as_deref()
            .map(shown)
            .unwrap_or_else(|| "unknown model".into());
        if let Some(error) = lost.get(gpu) {
            findings.push(
                Finding::new(
                    Area::Gpu,
                    Status::Failed,
                    format!("GPU {gpu} ({name}) stopped answering: {}", shown(error)),
                )
                .fix("check the kernel log for an Xid (`dmesg | grep -i xid`); a GPU off the bus needs a reset by an administrator"),
            );
            continue;
        }
        let mut facts_text = vec![name];
        if let Some(parent) = f.mig_parent {
            facts_text.push(format!("a MIG instance of GPU {parent}"));
        }
        if let Some(bytes) = f.mem_total_bytes {
            facts_text.push(format!("{:.0} GiB", bytes / f64::from(1u32 << 30)));
        }
        if let Some(tdp) = f.tdp_w {
            facts_text.push(format!("power limit {tdp:.0} W"));
        }
        if let (Some(limit), Some(tdp)) = (f.power_limit_w, f.tdp_w) {
            if limit < tdp {
                facts_text.push(format!("capped at {limit:.0} W"));
            }
        }
        findings.push(Finding::new(
            Area::Gpu,
            Status::Ok,
            format!("GPU {gpu}: {}", facts_text.join(", ")),
        ));
        findings.push(gpm_finding(
            *gpu,
            no_gpm,
            unsupported.contains(gpu),
            failing.get(gpu).map(String::as_str),
            gpm_seen.get(gpu).copied(),
            ticks,
        ));
    }
    GpuFindings {
        findings,
        pids: pids.into_iter().collect(),
    }
}

/// Whether GPM gives what the verdicts need on one GPU.
fn gpm_finding(
    gpu: u32,
    no_gpm: bool,
    unsupported: bool,
    failing: Option<&str>,
    sm_pct: Option<f64>,
    ticks: u32,
) -> Finding {
    if no_gpm {
        return Finding::new(
            Area::Gpu,
            Status::Skipped,
            format!("GPU {gpu}: GPM left out (--no-gpm): verdicts from NVML's fields alone"),
        );
    }
    if let Some(sm) = sm_pct {
        return Finding::new(
            Area::Gpu,
            Status::Ok,
            format!("GPU {gpu}: GPM answers (SM activity {sm:.1}%)"),
        );
    }
    if unsupported {
        return Finding::new(
            Area::Gpu,
            Status::Info,
            format!("GPU {gpu}: no GPM on this GPU (Hopper and newer have it): verdicts from NVML's fields alone, at lower confidence"),
        );
    }
    if let Some(error) = failing {
        return Finding::new(
            Area::Gpu,
            Status::Failed,
            format!("GPU {gpu}: GPM reads fail: {}", shown(error)),
        )
        .fix("a profiler may hold the counters (see `profiler`); in a VM, GPM needs root and a host that passes it through");
    }
    Finding::new(
        Area::Gpu,
        Status::Failed,
        format!("GPU {gpu}: GPM gave no value in {ticks} reads"),
    )
    .fix("a profiler may hold the counters (see `profiler`); rerun with -v for the sampler's log")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceFacts;
    use crate::source::live::Cadence;
    use crate::source::live::ReadError;
    use crate::{Metric, Sample};

    #[test]
    fn a_missing_driver_says_the_running_agent_waits_for_it_and_a_permission_does_not() {
        for error in [
            OpenError::NoLibrary("libnvidia-ml.so.1: not found".into()),
            OpenError::NoDriver("Driver Not Loaded".into()),
            OpenError::NoGpu,
        ] {
            let f = nvml_failed(&error);
            assert_eq!(f.status, Status::Failed);
            let fix = f.fix.as_deref().unwrap_or_default();
            assert!(fix.ends_with(WAITS), "{error}: {fix}");
        }
        let denied = nvml_failed(&OpenError::NoPermission("Insufficient Permissions".into()));
        assert!(!denied
            .fix
            .as_deref()
            .unwrap_or_default()
            .contains("wait-for-driver"));
    }

    /// A GPU whose GPM answers `gpm`, and whose other fields read 1.
    struct Gpu {
        gpm: Result<f64, ReadError>,
    }

    impl DeviceReader for Gpu {
        fn facts(&mut self) -> DeviceFacts {
            DeviceFacts {
                name: Some("NVIDIA H200\x1b[2J".into()),
                driver: Some("580.95.05".into()),
                tdp_w: Some(700.0),
                power_limit_w: Some(500.0),
                mem_total_bytes: Some(143_771_058_176.0),
                ..DeviceFacts::default()
            }
        }

        fn fields(&self) -> &'static [Field] {
            &[Field::Power, Field::Gpm]
        }

        fn read(&mut self, field: Field, sample: &mut Sample) -> Result<(), ReadError> {
            match field {
                Field::Gpm => sample.set(Metric::GpmSm, self.gpm.clone()?),
                _ => sample.set(Metric::PowerMw, 120_000.0),
            }
            Ok(())
        }
    }

    fn run(gpm: Result<f64, ReadError>, no_gpm: bool) -> GpuFindings {
        let source = LiveSource::new(
            vec![(0, Gpu { gpm })],
            Cadence::every(Duration::from_millis(100)),
        );
        let mut source = if no_gpm {
            source.without(&[Field::Gpm])
        } else {
            source
        };
        let mut t = 0.0;
        sample(
            &mut source,
            no_gpm,
            3,
            Duration::from_millis(100),
            || {
                t += 0.1;
                t
            },
            |_| {},
        )
    }

    #[test]
    fn a_gpu_with_gpm_reads_ok_with_its_facts_shown_safely() {
        let f = run(Ok(42.0), false).findings;
        assert_eq!(
            f[0].detail,
            "NVML answers: driver 580.95.05, 1 GPU (MIG instances counted)"
        );
        assert_eq!(
            f[1].detail,
            "GPU 0: NVIDIA H200\\x1b[2J, 134 GiB, power limit 700 W, capped at 500 W"
        );
        assert_eq!(
            (f[2].status, f[2].detail.as_str()),
            (Status::Ok, "GPU 0: GPM answers (SM activity 42.0%)")
        );
    }

    #[test]
    fn gpm_missing_failing_or_left_out_each_say_so() {
        let f = run(Err(ReadError::NotSupported), false).findings;
        assert_eq!(f[2].status, Status::Info, "{}", f[2].detail);
        let f = run(
            Err(ReadError::Failed("In use by another client".into())),
            false,
        )
        .findings;
        assert_eq!(f[2].status, Status::Failed, "{}", f[2].detail);
        assert!(
            f[2].detail.contains("In use by another client"),
            "{}",
            f[2].detail
        );
        assert!(f[2].fix.as_deref().is_some_and(|x| x.contains("profiler")));
        let f = run(Ok(1.0), true).findings;
        assert_eq!(f[2].status, Status::Skipped, "{}", f[2].detail);
    }
}
