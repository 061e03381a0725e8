//! The JSON-lines contract of `gpuslack replay --format jsonl`: one object per GPU and window.
//! Other tools parse this: fields are only ever added, never renamed or re-typed, and the
//! `schema` field changes if that promise must be broken. docs/OUTPUT.md lists every field.

use serde::Serialize;

use crate::attribution::{GpuProcess, PodContainer};
use crate::diagnosis::{round3, Evidence, WindowReport};
use crate::window::PowerSource;

pub const JSONL_SCHEMA: &str = "gpuslack.window.v1";

#[derive(Debug, Serialize)]
pub struct WindowRecord<'a> {
    pub schema: &'static str,
    pub gpu: u32,
    /// Window bounds, unix seconds.
    pub start: f64,
    pub end: f64,
    pub class: &'static str,
    /// (power / TDP) × SM activity; null without GPM or TDP.
    pub efficiency: Option<f64>,
    /// Power between this GPU's own idle (0) and compute-bound (1) baselines; null without a profile.
    pub calibrated_efficiency: Option<f64>,
    pub expected_power_w: Option<f64>,
    pub power_w: Option<f64>,
    pub power_source: Option<&'static str>,
    pub energy_j: Option<f64>,
    /// NVML's total energy counter (J) as last read at or before the window's end.
    pub energy_counter_j: Option<f64>,
    pub tdp_w: Option<f64>,
    /// Shares 0–1.
    pub sm_active: Option<f64>,
    pub util_gpu: Option<f64>,
    pub util_duty: Option<f64>,
    pub sm_occupancy: Option<f64>,
    pub tensor_active: Option<f64>,
    pub fp32_active: Option<f64>,
    pub fp16_active: Option<f64>,
    pub dram_active: Option<f64>,
    pub pcie_rx_mib_s: Option<f64>,
    pub pcie_tx_mib_s: Option<f64>,
    pub nvlink_rx_mib_s: Option<f64>,
    pub nvlink_tx_mib_s: Option<f64>,
    pub util_mem: Option<f64>,
    pub power_load: Option<f64>,
    pub stalled_s: Option<f64>,
    pub nprocs: Option<f64>,
    /// The job the GPU's processes belong to (Slurm job, pod, container or process group).
    pub job: Option<&'a str>,
    /// The processes last seen holding the GPU in this window.
    pub processes: Option<&'a [GpuProcess]>,
    /// The Kubernetes containers the kubelet assigned the GPU to; null without a kubelet.
    pub pods: Option<&'a [PodContainer]>,
    pub mem_used_bytes: Option<f64>,
    pub samples: u32,
    pub rule: &'static str,
    pub evidence: &'a [Evidence],
    pub remedy: &'static str,
    pub throttle: &'a [String],
    pub missing: &'a [&'static str],
    /// How sure the verdict is: `high`, `medium` or `low` (docs/DIAGNOSIS.md).
    pub confidence: &'static str,
    /// Classes the measured evidence could not rule out.
    pub alternatives: Vec<&'static str>,
    /// Sources the verdict would have rested on that were missing (`gpm`, `pcie`, `nvlink`,
    /// `processes`, `calibration`).
    pub unmeasured: &'a [&'static str],
    /// What the confidence rests on, for people.
    pub confidence_reason: &'a str,
    /// The resource nearest its peak (the roofline) and its fraction of peak; null where no
    /// resource was measured.
    pub headroom: Option<HeadroomRecord>,
    /// The invariant the rules' verdict broke and the guard re-decided; null nearly always.
    pub invariant: Option<&'static str>,
}

/// `headroom`: the binding resource, its fraction of peak (0–1), the peak where known, and the
/// sentence for people.
#[derive(Debug, Serialize)]
pub struct HeadroomRecord {
    pub resource: &'static str,
    pub fraction: f64,
    pub peak: Option<f64>,
    pub peak_unit: Option<&'static str>,
    pub text: String,
}

fn share(pct: Option<f64>) -> Option<f64> {
    pct.map(|p| round3(p / 100.0))
}

fn r3(v: Option<f64>) -> Option<f64> {
    v.map(round3)
}

impl<'a> WindowRecord<'a> {
    pub fn of(r: &'a WindowReport) -> Self {
        let s = &r.signals;
        WindowRecord {
            schema: JSONL_SCHEMA,
            gpu: r.stats.gpu,
            start: r.stats.start,
            end: r.stats.end,
            class: r.class.as_str(),
            efficiency: r3(r.efficiency),
            calibrated_efficiency: r3(r.calibrated_efficiency),
            expected_power_w: r3(r.expected_power_w),
            power_w: r3(s.power_w),
            power_source: r.stats.power_source.map(|p| match p {
                PowerSource::EnergyCounter => "energy_counter",
                PowerSource::PowerSamples => "power_samples",
            }),
            energy_j: r3(r.stats.energy_j),
            energy_counter_j: r.stats.energy_total_mj.map(|mj| mj / 1000.0),
            tdp_w: r.tdp_w,
            sm_active: share(s.sm_pct),
            util_gpu: share(s.util_pct),
            util_duty: r3(s.util_duty),
            sm_occupancy: share(s.occupancy_pct),
            tensor_active: share(s.tensor_pct),
            fp32_active: share(s.fp32_pct),
            fp16_active: share(s.fp16_pct),
            dram_active: share(s.dram_pct),
            pcie_rx_mib_s: r3(s.pcie_rx_mib_s),
            pcie_tx_mib_s: r3(s.pcie_tx_mib_s),
            nvlink_rx_mib_s: r3(s.nvlink_rx_mib_s),
            nvlink_tx_mib_s: r3(s.nvlink_tx_mib_s),
            util_mem: share(s.util_mem_pct),
            power_load: r3(r.power.load),
            stalled_s: r3(r.stall.map(|st| st.for_s)),
            nprocs: s.nprocs,
            job: r.job.as_deref(),
            processes: r.stats.processes.as_deref().map(Vec::as_slice),
            pods: r.stats.pods.as_deref().map(Vec::as_slice),
            mem_used_bytes: s.mem_used_bytes.map(f64::round),
            samples: r.stats.samples,
            rule: r.rule.as_str(),
            evidence: &r.evidence,
            remedy: r.remedy(),
            throttle: &r.throttle,
            missing: &r.missing,
            confidence: r.confidence().as_str(),
            alternatives: r.alternatives().iter().map(|c| c.as_str()).collect(),
            unmeasured: &r.assessment.unmeasured,
            confidence_reason: &r.assessment.reason,
            headroom: r.headroom.map(|h| HeadroomRecord {
                resource: h.resource.as_str(),
                fraction: round3(h.fraction),
                peak: h.peak.map(round3),
                peak_unit: h.peak_unit,
                text: h.text(),
            }),
            invariant: r.invariant.map(|i| i.as_str()),
        }
    }
}

/// The bytes of a JSON string that need an escape: what `serde_json` escapes (`"`, `\` and
/// the control characters), so that a line written here is the one it would write.
fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// `s` as a JSON string. Most strings (every remedy, rule and evidence sentence) need no
/// escape: one pass over them, many bytes a step, finds that, and they are copied whole.
fn string(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // Branch-free over blocks, so the compiler checks 16 or 32 bytes an instruction.
    let plain = !bytes
        .chunks(32)
        .any(|block| block.iter().fold(false, |any, &b| any | needs_escape(b)));
    if plain {
        out.extend_from_slice(bytes);
    } else {
        let mut from = 0;
        for (i, &b) in bytes.iter().enumerate() {
            if !needs_escape(b) {
                continue;
            }
            out.extend_from_slice(&bytes[from..i]);
            from = i + 1;
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                0x08 => out.extend_from_slice(b"\\b"),
                0x09 => out.extend_from_slice(b"\\t"),
                0x0a => out.extend_from_slice(b"\\n"),
                0x0c => out.extend_from_slice(b"\\f"),
                0x0d => out.extend_from_slice(b"\\r"),
                _ => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(b >> 4)]);
                    out.push(HEX[usize::from(b & 0xf)]);
                }
            }
        }
        out.extend_from_slice(&bytes[from..]);
    }
    out.push(b'"');
}

/// A number as `serde_json` writes it: the shortest form that reads back the same (its own
/// formatter), `null` for NaN and the infinities.
fn number(out: &mut Vec<u8>, v: f64) {
    use serde_json::ser::Formatter;
    if v.is_finite() {
        // Writing to a Vec cannot fail.
        let _ = serde_json::ser::CompactFormatter.write_f64(out, v);
    } else {
        out.extend_from_slice(b"null");
    }
}

fn opt_number(out: &mut Vec<u8>, v: Option<f64>) {
    match v {
        Some(v) => number(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

fn opt_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => string(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

fn strings<S: AsRef<str>>(out: &mut Vec<u8>, list: &[S]) {
    out.push(b'[');
    for (i, s) in list.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        string(out, s.as_ref());
    }
    out.push(b']');
}

/// A value the fast writer leaves to serde (process and pod lists: rare, and nested).
fn serde_value<T: Serialize + ?Sized>(out: &mut Vec<u8>, v: Option<&T>) {
    match v {
        Some(v) => {
            if serde_json::to_writer(&mut *out, v).is_err() {
                // Only a map with non-string keys fails, and these lists hold none.
                out.extend_from_slice(b"null");
            }
        }
        None => out.extend_from_slice(b"null"),
    }
}

impl WindowRecord<'_> {
    /// Appends the record and its line end to `out`: byte for byte what `serde_json` writes
    /// for it (a test holds the two equal), several times faster. `replay --format jsonl`
    /// writes a line per GPU and window, 1.4 KB of mostly fixed sentences, and serde's
    /// per-field calls and per-byte escape checks were a quarter of the offline pipeline.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        macro_rules! key {
            ($name:literal) => {
                out.extend_from_slice(concat!(",\"", $name, "\":").as_bytes())
            };
        }
        out.extend_from_slice(b"{\"schema\":");
        string(out, self.schema);
        key!("gpu");
        {
            use serde_json::ser::Formatter;
            let _ = serde_json::ser::CompactFormatter.write_u32(out, self.gpu);
        }
        key!("start");
        number(out, self.start);
        key!("end");
        number(out, self.end);
        key!("class");
        string(out, self.class);
        key!("efficiency");
        opt_number(out, self.efficiency);
        key!("calibrated_efficiency");
        opt_number(out, self.calibrated_efficiency);
        key!("expected_power_w");
        opt_number(out, self.expected_power_w);
        key!("power_w");
        opt_number(out, self.power_w);
        key!("power_source");
        opt_string(out, self.power_source);
        key!("energy_j");
        opt_number(out, self.energy_j);
        key!("energy_counter_j");
        opt_number(out, self.energy_counter_j);
        key!("tdp_w");
        opt_number(out, self.tdp_w);
        key!("sm_active");
        opt_number(out, self.sm_active);
        key!("util_gpu");
        opt_number(out, self.util_gpu);
        key!("util_duty");
        opt_number(out, self.util_duty);
        key!("sm_occupancy");
        opt_number(out, self.sm_occupancy);
        key!("tensor_active");
        opt_number(out, self.tensor_active);
        key!("fp32_active");
        opt_number(out, self.fp32_active);
        key!("fp16_active");
        opt_number(out, self.fp16_active);
        key!("dram_active");
        opt_number(out, self.dram_active);
        key!("pcie_rx_mib_s");
        opt_number(out, self.pcie_rx_mib_s);
        key!("pcie_tx_mib_s");
        opt_number(out, self.pcie_tx_mib_s);
        key!("nvlink_rx_mib_s");
        opt_number(out, self.nvlink_rx_mib_s);
        key!("nvlink_tx_mib_s");
        opt_number(out, self.nvlink_tx_mib_s);
        key!("util_mem");
        opt_number(out, self.util_mem);
        key!("power_load");
        opt_number(out, self.power_load);
        key!("stalled_s");
        opt_number(out, self.stalled_s);
        key!("nprocs");
        opt_number(out, self.nprocs);
        key!("job");
        opt_string(out, self.job);
        key!("processes");
        serde_value(out, self.processes);
        key!("pods");
        serde_value(out, self.pods);
        key!("mem_used_bytes");
        opt_number(out, self.mem_used_bytes);
        key!("samples");
        {
            use serde_json::ser::Formatter;
            let _ = serde_json::ser::CompactFormatter.write_u32(out, self.samples);
        }
        key!("rule");
        string(out, self.rule);
        key!("evidence");
        out.push(b'[');
        for (i, e) in self.evidence.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"signal\":");
            string(out, e.signal);
            out.extend_from_slice(b",\"value\":");
            number(out, e.value);
            if let Some(threshold) = e.threshold {
                out.extend_from_slice(b",\"threshold\":");
                number(out, threshold);
            }
            out.extend_from_slice(b",\"text\":");
            string(out, &e.text);
            out.push(b'}');
        }
        out.push(b']');
        key!("remedy");
        string(out, self.remedy);
        key!("throttle");
        strings(out, self.throttle);
        key!("missing");
        strings(out, self.missing);
        key!("confidence");
        string(out, self.confidence);
        key!("alternatives");
        strings(out, &self.alternatives);
        key!("unmeasured");
        strings(out, self.unmeasured);
        key!("confidence_reason");
        string(out, self.confidence_reason);
        key!("headroom");
        match &self.headroom {
            Some(h) => {
                out.extend_from_slice(b"{\"resource\":");
                string(out, h.resource);
                out.extend_from_slice(b",\"fraction\":");
                number(out, h.fraction);
                out.extend_from_slice(b",\"peak\":");
                opt_number(out, h.peak);
                out.extend_from_slice(b",\"peak_unit\":");
                opt_string(out, h.peak_unit);
                out.extend_from_slice(b",\"text\":");
                string(out, &h.text);
                out.push(b'}');
            }
            None => out.extend_from_slice(b"null"),
        }
        key!("invariant");
        opt_string(out, self.invariant);
        out.extend_from_slice(b"}\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis::{Diagnoser, Thresholds};
    use crate::pipeline::{replay, Pipeline};
    use crate::trace::TraceReader;

    fn serde_line(record: &WindowRecord) -> Vec<u8> {
        let mut line = serde_json::to_vec(record).expect("serialises");
        line.push(b'\n');
        line
    }

    fn fast_line(record: &WindowRecord) -> Vec<u8> {
        let mut line = Vec::new();
        record.write_line(&mut line);
        line
    }

    /// Every window of every recorded fixture (process lists and job names among them).
    fn fixture_reports() -> Vec<WindowReport> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
        let mut reports = Vec::new();
        for entry in std::fs::read_dir(&dir).expect("tests/fixtures") {
            let trace = entry.expect("entry").path().join("samples.csv");
            if !trace.exists() {
                continue;
            }
            let diagnoser = Diagnoser::new(Thresholds::default()).with_tdp_override(Some(700.0));
            let mut pipeline = Pipeline::new(2.0, diagnoser);
            let reader = TraceReader::open(&trace).expect("a fixture");
            replay(reader, &mut pipeline, |r| {
                reports.push(r);
                Ok(())
            })
            .expect("replays");
        }
        reports
    }

    #[test]
    fn every_fixture_window_is_written_as_serde_writes_it() {
        let reports = fixture_reports();
        assert!(reports.len() > 800, "{} windows", reports.len());
        assert!(reports.iter().any(|r| r.stats.processes.is_some()));
        assert!(reports.iter().any(|r| r.job.is_some()));
        for r in &reports {
            let record = WindowRecord::of(r);
            assert_eq!(
                String::from_utf8_lossy(&fast_line(&record)),
                String::from_utf8_lossy(&serde_line(&record))
            );
        }
    }

    #[test]
    fn escapes_and_non_finite_numbers_are_written_as_serde_writes_them() {
        let reports = fixture_reports();
        let r = reports
            .iter()
            .find(|r| !r.evidence.is_empty() && r.stats.processes.is_some())
            .expect("a window with evidence and processes");
        let mut r = r.clone();
        r.evidence[0].text =
            "a \"quoted\" \\ back\u{1}slash\ttab\nline\r\u{8}\u{c}\u{1f}\u{7f} é —".into();
        r.evidence[0].threshold = None;
        r.throttle = vec!["x\"y".into(), String::new()];
        r.job = Some("pod:\"odd\"\n".into());
        let mut record = WindowRecord::of(&r);
        record.efficiency = Some(f64::NAN);
        record.power_w = Some(f64::INFINITY);
        record.energy_j = Some(-0.0);
        record.start = 1e300;
        record.end = 5e-324;
        let fast = fast_line(&record);
        assert_eq!(
            String::from_utf8_lossy(&fast),
            String::from_utf8_lossy(&serde_line(&record))
        );
        let text = String::from_utf8_lossy(&fast);
        assert!(text.contains(r#""efficiency":null"#), "{text}");
        assert!(
            text.contains(r#"\"quoted\" \\ back\u0001slash\ttab\nline\r\b\f\u001f"#),
            "{text}"
        );
    }
}
