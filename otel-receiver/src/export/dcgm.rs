//! dcgm-exporter's exposition out of a GPU's view (`--metrics dcgm`, issue #49): each field of
//! [`catalogue::DCGM_FIELDS`] with DCGM's value and scale, under dcgm-exporter's labels (`gpu`,
//! `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`; `pod`,
//! `namespace`, `container` of the GPU's owner on Kubernetes), so that a fleet that reads
//! dcgm-exporter today (NVIDIA's Grafana dashboard, its alert examples, Datadog's `dcgm`
//! check) reads gpuslack unchanged. The verdict series ride beside them under gpuslack's own
//! names ([`super::selection`]).
//!
//! Where DCGM reads a field once and gpuslack a window of samples, the value is the window's:
//! the mean of clocks, utilisations and the GPM ratios and rates, the highest temperature and
//! P-state (as `hw.temperature` and `gpuslack.performance_state`), the latest reading of the
//! counters. docs/EXPORT.md, "dcgm-exporter's names", has the table.

use super::catalogue::{self, MetricDef};
use super::point::{Attributes, Point};
use super::state::GpuView;
use crate::sample::Metric;
use crate::window::CLOCK_REASON_BITS;

const MIB: f64 = 1024.0 * 1024.0;

/// What every GPU's dcgm points share: the node's name and GPU count, and whether the owner's
/// pod is on the series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeContext {
    /// dcgm-exporter's `Hostname` label ([`hostname`]).
    pub hostname: String,
    /// `DCGM_FI_DEV_COUNT`: the GPUs on the node (MIG instances not counted).
    pub gpus: usize,
    /// `pod`, `namespace` and `container` of the GPU's owner on every series.
    pub pod_labels: bool,
}

/// The node's name as dcgm-exporter labels it: `NODE_NAME` (its DaemonSet sets it from the
/// downward API), else `K8S_NODE_NAME` (ours does), else the kernel's host name.
pub fn hostname() -> String {
    hostname_from(
        std::env::var("NODE_NAME").ok(),
        std::env::var("K8S_NODE_NAME").ok(),
        std::fs::read_to_string("/proc/sys/kernel/hostname").ok(),
    )
}

fn hostname_from(node: Option<String>, k8s: Option<String>, kernel: Option<String>) -> String {
    [node, k8s, kernel]
        .into_iter()
        .flatten()
        .map(|h| h.trim().to_string())
        .find(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// dcgm-exporter's labels for one GPU: its index (a MIG instance's parent's, with the
/// instance's profile in `GPU_I_PROFILE`), UUID, PCI bus id, device node, model, node, driver,
/// and where asked the pod, namespace and container the kubelet assigned the GPU to (one pod:
/// a GPU that pods time-slice has no owner, and `gpuslack_gpu_assignment` names each pod).
pub fn labels(view: &GpuView, node: &NodeContext) -> Attributes {
    let f = &view.facts;
    let index = f.mig_parent.unwrap_or(view.gpu);
    let mut attrs: Attributes = vec![("gpu", index.to_string())];
    let mut push = |key: &'static str, value: Option<&String>| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            attrs.push((key, v.clone()));
        }
    };
    push("UUID", f.uuid.as_ref());
    push("pci_bus_id", f.pci_bus_id.as_ref());
    push("device", Some(&format!("nvidia{index}")));
    push("modelName", f.name.as_ref());
    push("Hostname", Some(&node.hostname));
    push(catalogue::DCGM_DRIVER_LABEL, f.driver.as_ref());
    if f.mig_parent.is_some() {
        let profile = f
            .name
            .as_deref()
            .and_then(super::point::mig_profile)
            .map(str::to_string);
        push("GPU_I_PROFILE", profile.as_ref());
    }
    if node.pod_labels {
        attrs.extend(pod_labels(view));
    }
    attrs
}

/// `pod`, `namespace` and `container` of the one pod the kubelet assigned the GPU to, as
/// dcgm-exporter names them ([`super::point::pod_attributes`]); none where no pod or several
/// share the GPU.
pub fn pod_labels(view: &GpuView) -> Attributes {
    super::point::pod_attributes(&view.report)
        .into_iter()
        .map(|(key, value)| {
            let key = match key {
                "k8s.pod.name" => "pod",
                "k8s.namespace.name" => "namespace",
                _ => "container",
            };
            (key, value)
        })
        .collect()
}

/// The value of every field of [`catalogue::DCGM_FIELDS`] in `view`, in DCGM's unit and
/// scale; `None` where the source did not read it.
pub fn values(view: &GpuView, node: &NodeContext) -> Vec<(MetricDef, Option<f64>)> {
    let r = &view.report;
    let s = &r.signals;
    let w = &r.stats;
    let mean_or_held = |m: Metric| w.mean(m).or(view.held(m));
    let total = w.mean(Metric::MemTotalBytes).or(view.facts.mem_total_bytes);
    let used = s.mem_used_bytes;
    let ratio = |pct: Option<f64>| pct.map(|p| p / 100.0);
    let bytes_per_s = |m: Metric| w.mean(m).map(|mib_s| mib_s * MIB);
    let nvlink_mib_s = match (s.nvlink_tx_mib_s, s.nvlink_rx_mib_s) {
        (None, None) => None,
        (tx, rx) => Some(tx.unwrap_or(0.0) + rx.unwrap_or(0.0)),
    };
    // Every reason set in any sample of the window, as NVML's bitmask.
    let reasons = (w.clock_reasons.samples() > 0).then(|| {
        w.clock_reasons
            .shares()
            .zip(CLOCK_REASON_BITS)
            .filter(|((_, share), _)| *share > 0.0)
            .fold(0u64, |mask, (_, (bit, _))| mask | bit) as f64
    });
    let power_limit_w = w
        .mean(Metric::PowerLimitMw)
        .or(view.held(Metric::PowerLimitMw))
        .map(|mw| mw / 1000.0)
        .or(view.facts.power_limit_w)
        .or(r.tdp_w);
    let fields = catalogue::DCGM_FIELDS;
    let value = |name: &str| -> Option<f64> {
        match name {
            "DCGM_FI_DEV_SM_CLOCK" => w.mean(Metric::SmMhz),
            "DCGM_FI_DEV_MEM_CLOCK" => w.mean(Metric::MemMhz),
            "DCGM_FI_DEV_MEMORY_TEMP" => view.held(Metric::MemTempC),
            "DCGM_FI_DEV_GPU_TEMP" => w.max(Metric::TempC),
            "DCGM_FI_DEV_POWER_USAGE" => s.power_w,
            // NVML's counter as it stands (since the driver loaded), as DCGM reads it.
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" => w.energy_total_mj,
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" => view.held(Metric::PcieReplays),
            "DCGM_FI_DEV_GPU_UTIL" => s.util_pct,
            "DCGM_FI_DEV_MEM_COPY_UTIL" => w.mean(Metric::UtilMem),
            "DCGM_FI_DEV_ENC_UTIL" => mean_or_held(Metric::UtilEnc),
            "DCGM_FI_DEV_DEC_UTIL" => mean_or_held(Metric::UtilDec),
            "DCGM_FI_DEV_XID_ERRORS" => view.held(Metric::XidLast),
            "DCGM_FI_DEV_FB_FREE" => total.zip(used).map(|(t, u)| ((t - u) / MIB).max(0.0)),
            "DCGM_FI_DEV_FB_USED" => used.map(|u| u / MIB),
            // DCGM's value is a rate (MB/s, both directions) under a counter's type.
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" => nvlink_mib_s,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS" => view.held(Metric::RemapUncorrected),
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS" => view.held(Metric::RemapCorrected),
            "DCGM_FI_DEV_ROW_REMAP_FAILURE" => view.held(Metric::RemapFailed),
            // GPM's graphics-engine activity where a recording has it; the live agent leaves
            // it out (1.4 ms of CPU a read: source/live/nvml/ffi.rs) and NVML's GPU-Util, the
            // share of time the engine had a kernel, stands in for it.
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE" => ratio(w.mean(Metric::GpmGr).or(s.util_pct)),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" => ratio(s.tensor_pct),
            "DCGM_FI_PROF_DRAM_ACTIVE" => ratio(s.dram_pct),
            "DCGM_FI_PROF_PCIE_TX_BYTES" => bytes_per_s(Metric::GpmPcieTx),
            "DCGM_FI_PROF_PCIE_RX_BYTES" => bytes_per_s(Metric::GpmPcieRx),
            "DCGM_FI_PROF_SM_ACTIVE" => ratio(s.sm_pct),
            "DCGM_FI_PROF_SM_OCCUPANCY" => ratio(s.occupancy_pct),
            "DCGM_FI_PROF_PIPE_FP64_ACTIVE" => ratio(w.mean(Metric::GpmFp64)),
            "DCGM_FI_PROF_PIPE_FP32_ACTIVE" => ratio(s.fp32_pct),
            "DCGM_FI_PROF_PIPE_FP16_ACTIVE" => ratio(s.fp16_pct),
            "DCGM_FI_PROF_NVLINK_TX_BYTES" => bytes_per_s(Metric::GpmNvlinkTx),
            "DCGM_FI_PROF_NVLINK_RX_BYTES" => bytes_per_s(Metric::GpmNvlinkRx),
            "DCGM_FI_DEV_COUNT" => Some(node.gpus as f64),
            "DCGM_FI_DEV_FAN_SPEED" => view.held(Metric::FanPct),
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" => reasons,
            "DCGM_FI_DEV_FB_TOTAL" => total.map(|t| t / MIB),
            // Reserved memory is not read: it counts as used (catalogue::DCGM_NOT_READ).
            "DCGM_FI_DEV_FB_USED_PERCENT" => total
                .zip(used)
                .filter(|(t, _)| *t > 0.0)
                .map(|(t, u)| u / t),
            "DCGM_FI_DEV_POWER_MGMT_LIMIT" => power_limit_w,
            "DCGM_FI_DEV_PSTATE" => w.max(Metric::Pstate),
            "DCGM_FI_DEV_SLOWDOWN_TEMP" => view
                .held(Metric::TempSlowdownC)
                .or(view.facts.temp_slowdown_c),
            _ => None,
        }
    };
    fields.iter().map(|d| (*d, value(d.name))).collect()
}

/// Every dcgm field of `view` that the source read, under dcgm-exporter's labels.
pub fn points(view: &GpuView, node: &NodeContext) -> Vec<Point> {
    let attributes = labels(view, node);
    values(view, node)
        .into_iter()
        .filter_map(|(def, value)| {
            value.filter(|v| v.is_finite()).map(|value| Point {
                def,
                value,
                attributes: attributes.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceFacts;
    use crate::diagnosis::{Diagnoser, Thresholds};
    use crate::export::state::ExportState;
    use crate::pipeline::Pipeline;
    use crate::sample::{PodContainer, Sample};
    use std::sync::Arc;

    const GIB: f64 = 1024.0 * MIB;

    /// One GPU's view after 4 s of 10 Hz samples holding every field's reading, with `pods`
    /// assigned by the kubelet.
    fn view_with(pods: Vec<PodContainer>) -> ExportState {
        let diagnoser = Diagnoser::new(Thresholds::default()).with_tdp_override(Some(700.0));
        let mut pipeline = Pipeline::new(2.0, diagnoser);
        let pods = Arc::new(pods);
        let mut reports = Vec::new();
        for i in 0..40 {
            let t = 100.0 + f64::from(i) / 10.0;
            let mut s = Sample::new(t, 0)
                .with(Metric::PowerMw, 350_000.0)
                .with(Metric::EnergyMj, 9_000_000.0 + f64::from(i) * 35_000.0)
                .with(Metric::SmMhz, 1980.0)
                .with(Metric::MemMhz, 3201.0)
                .with(Metric::TempC, if i == 5 { 61.0 } else { 60.0 })
                .with(Metric::MemTempC, 55.0)
                .with(Metric::UtilGpu, 100.0)
                .with(Metric::UtilMem, 70.0)
                .with(Metric::UtilEnc, 0.0)
                .with(Metric::UtilDec, 0.0)
                .with(Metric::XidLast, 0.0)
                .with(Metric::MemUsedBytes, 2.0 * GIB)
                .with(Metric::MemTotalBytes, 16.0 * GIB)
                .with(Metric::GpmGr, 80.0)
                .with(Metric::GpmSm, 90.0)
                .with(Metric::GpmOcc, 40.0)
                .with(Metric::GpmTensor, 50.0)
                .with(Metric::GpmDram, 30.0)
                .with(Metric::GpmFp64, 12.0)
                .with(Metric::GpmFp32, 20.0)
                .with(Metric::GpmFp16, 5.0)
                .with(Metric::GpmPcieTx, 100.0)
                .with(Metric::GpmPcieRx, 200.0)
                .with(Metric::GpmNvlinkTx, 10.0)
                .with(Metric::GpmNvlinkRx, 20.0)
                .with(Metric::FanPct, 40.0)
                .with(Metric::PowerLimitMw, 650_000.0)
                .with(Metric::Pstate, 0.0)
                .with(Metric::TempSlowdownC, 89.0)
                .with(Metric::PcieReplays, 3.0)
                .with(Metric::RemapCorrected, 1.0)
                .with(Metric::RemapUncorrected, 0.0)
                .with(Metric::RemapFailed, 0.0);
            s.clk_reasons = Some(if i < 20 { 0x1 } else { 0x4 });
            s.pods = Some(pods.clone());
            reports.extend(pipeline.push(&s).expect("in order"));
        }
        reports.extend(pipeline.finish());
        let facts = DeviceFacts {
            name: Some("NVIDIA H100 80GB HBM3".into()),
            uuid: Some("GPU-5c8f".into()),
            driver: Some("580.159.04".into()),
            pci_bus_id: Some("00000000:1B:00.0".into()),
            ..DeviceFacts::default()
        };
        let mut state = ExportState::default();
        for r in &reports {
            state.update(r, &facts);
        }
        state
    }

    fn node(pod_labels: bool) -> NodeContext {
        NodeContext {
            hostname: "gpu-node-7".into(),
            gpus: 8,
            pod_labels,
        }
    }

    fn pod(name: &str) -> PodContainer {
        PodContainer {
            pod: name.into(),
            namespace: "ml".into(),
            container: "trainer".into(),
        }
    }

    #[test]
    fn every_field_has_its_value_in_dcgms_unit_and_scale() {
        let state = view_with(vec![pod("train-0")]);
        let view = state.get(0).expect("gpu 0");
        let values = values(view, &node(true));
        assert_eq!(values.len(), catalogue::DCGM_FIELDS.len());
        let v = |name: &str| -> f64 {
            values
                .iter()
                .find(|(d, _)| d.name == name)
                .and_then(|(_, v)| *v)
                .unwrap_or_else(|| panic!("{name} has no value"))
        };
        // Every field is read from this view: no name falls through the table.
        for (def, value) in &values {
            assert!(value.is_some(), "{} has no value", def.name);
        }
        let close = |name: &str, want: f64| {
            let got = v(name);
            assert!((got - want).abs() < 1e-6, "{name}: {got} vs {want}");
        };
        close("DCGM_FI_DEV_SM_CLOCK", 1980.0);
        close("DCGM_FI_DEV_MEM_CLOCK", 3201.0);
        close("DCGM_FI_DEV_GPU_TEMP", 60.0);
        close("DCGM_FI_DEV_MEMORY_TEMP", 55.0);
        close("DCGM_FI_DEV_POWER_USAGE", 350.0);
        close(
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            9_000_000.0 + 39.0 * 35_000.0,
        );
        close("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 3.0);
        close("DCGM_FI_DEV_GPU_UTIL", 100.0);
        close("DCGM_FI_DEV_MEM_COPY_UTIL", 70.0);
        close("DCGM_FI_DEV_FB_USED", 2048.0);
        close("DCGM_FI_DEV_FB_FREE", 14_336.0);
        close("DCGM_FI_DEV_FB_TOTAL", 16_384.0);
        close("DCGM_FI_DEV_FB_USED_PERCENT", 0.125);
        close("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 30.0);
        close("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 1.0);
        close("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.8);
        close("DCGM_FI_PROF_SM_ACTIVE", 0.9);
        close("DCGM_FI_PROF_SM_OCCUPANCY", 0.4);
        close("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.5);
        close("DCGM_FI_PROF_DRAM_ACTIVE", 0.3);
        close("DCGM_FI_PROF_PIPE_FP64_ACTIVE", 0.12);
        close("DCGM_FI_PROF_PIPE_FP32_ACTIVE", 0.2);
        close("DCGM_FI_PROF_PIPE_FP16_ACTIVE", 0.05);
        close("DCGM_FI_PROF_PCIE_TX_BYTES", 100.0 * MIB);
        close("DCGM_FI_PROF_PCIE_RX_BYTES", 200.0 * MIB);
        close("DCGM_FI_PROF_NVLINK_TX_BYTES", 10.0 * MIB);
        close("DCGM_FI_PROF_NVLINK_RX_BYTES", 20.0 * MIB);
        close("DCGM_FI_DEV_COUNT", 8.0);
        close("DCGM_FI_DEV_FAN_SPEED", 40.0);
        // The last window saw only the software power cap (0x4).
        close("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", 4.0);
        close("DCGM_FI_DEV_POWER_MGMT_LIMIT", 650.0);
        close("DCGM_FI_DEV_PSTATE", 0.0);
        close("DCGM_FI_DEV_SLOWDOWN_TEMP", 89.0);
    }

    #[test]
    fn the_labels_are_dcgm_exporters_and_the_pod_is_the_one_owner() {
        let state = view_with(vec![pod("train-0")]);
        let view = state.get(0).expect("gpu 0");
        let labels = labels(view, &node(true));
        let keys: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            keys,
            [
                "gpu",
                "UUID",
                "pci_bus_id",
                "device",
                "modelName",
                "Hostname",
                "DCGM_FI_DRIVER_VERSION",
                "pod",
                "namespace",
                "container"
            ]
        );
        let get = |k: &str| {
            labels
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("device"), Some("nvidia0"));
        assert_eq!(get("modelName"), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(get("Hostname"), Some("gpu-node-7"));
        assert_eq!(get("pod"), Some("train-0"));
        assert_eq!(get("container"), Some("trainer"));
        // Off: no pod labels. Two pods time-slicing the GPU: no one owner, no pod labels.
        assert!(labels_of(&state, false).iter().all(|(k, _)| *k != "pod"));
        let shared = view_with(vec![pod("nb-a"), pod("nb-b")]);
        assert!(labels_of(&shared, true).iter().all(|(k, _)| *k != "pod"));
        // Every point of the GPU carries the same labels: one series a field.
        let points = points(view, &node(true));
        assert_eq!(points.len(), catalogue::DCGM_FIELDS.len());
        assert!(points.iter().all(|p| p.attributes == labels));
    }

    fn labels_of(state: &ExportState, pods: bool) -> Attributes {
        labels(state.get(0).expect("gpu 0"), &node(pods))
    }

    #[test]
    fn the_node_is_named_as_dcgm_exporter_names_it() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            hostname_from(s("node-a"), s("node-b"), s("pod\n")),
            "node-a"
        );
        assert_eq!(hostname_from(None, s(" node-b "), s("pod")), "node-b");
        assert_eq!(hostname_from(s(""), None, s("host-1\n")), "host-1");
        assert_eq!(hostname_from(None, None, None), "unknown");
    }
}
