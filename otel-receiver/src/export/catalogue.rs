//! Every exported metric: its name (OpenTelemetry hardware semantic conventions where they
//! exist, the `gpu.*` namespace for the rest), unit, kind and attributes, and how its value
//! comes out of a GPU's view. OTLP and Prometheus both read this one table; docs/EXPORT.md
//! lists it for people.

use super::delivery::Counts;
use super::state::GpuView;
use crate::attribution::{owner_of, GpuProcess};
use crate::diagnosis::Class;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    /// Monotonic sum.
    Counter,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDef {
    pub name: &'static str,
    pub unit: &'static str,
    pub kind: Kind,
    pub description: &'static str,
}

const fn gauge(name: &'static str, unit: &'static str, description: &'static str) -> MetricDef {
    MetricDef {
        name,
        unit,
        kind: Kind::Gauge,
        description,
    }
}

const fn counter(name: &'static str, unit: &'static str, description: &'static str) -> MetricDef {
    MetricDef {
        name,
        unit,
        kind: Kind::Counter,
        description,
    }
}

pub const HW_POWER: MetricDef = gauge(
    "hw.power",
    "W",
    "Mean power of the GPU over the last window (from the energy counter where sampled)",
);
pub const HW_ENERGY: MetricDef = counter(
    "hw.energy",
    "J",
    "Energy used by the GPU: NVML's total energy counter",
);
pub const HW_GPU_UTILIZATION: MetricDef = gauge(
    "hw.gpu.utilization",
    "1",
    "GPU-Util: share of time any kernel was resident (not a measure of work)",
);
pub const HW_GPU_MEMORY_USAGE: MetricDef =
    gauge("hw.gpu.memory.usage", "By", "Device memory in use");
pub const HW_GPU_MEMORY_LIMIT: MetricDef = gauge("hw.gpu.memory.limit", "By", "Device memory size");
pub const HW_GPU_MEMORY_UTILIZATION: MetricDef = gauge(
    "hw.gpu.memory.utilization",
    "1",
    "Share of device memory in use",
);
pub const HW_GPU_IO: MetricDef = counter(
    "hw.gpu.io",
    "By",
    "Bytes over PCIe, by direction (from GPM rates)",
);
pub const GPU_SM_ACTIVITY: MetricDef = gauge(
    "gpu.sm.activity",
    "1",
    "GPM SM activity: share of SM cycles with a warp resident",
);
pub const GPU_SM_OCCUPANCY: MetricDef = gauge("gpu.sm.occupancy", "1", "GPM SM occupancy");
pub const GPU_PIPE_ACTIVITY: MetricDef = gauge(
    "gpu.pipe.activity",
    "1",
    "GPM activity of each arithmetic pipe (tensor, fp32, fp16)",
);
pub const GPU_DRAM_ACTIVITY: MetricDef =
    gauge("gpu.dram.activity", "1", "GPM DRAM bandwidth utilisation");
pub const GPU_NVLINK_IO: MetricDef = counter(
    "gpu.nvlink.io",
    "By",
    "Bytes over NVLink, by direction (from GPM rates)",
);
pub const GPU_CLOCK_SM: MetricDef = gauge("gpu.clock.sm", "MHz", "SM clock");
pub const GPU_CLOCK_MEMORY: MetricDef = gauge("gpu.clock.memory", "MHz", "Memory clock");
pub const GPU_TEMPERATURE: MetricDef = gauge(
    "gpu.temperature",
    "Cel",
    "Highest GPU temperature in the window",
);
pub const GPU_POWER_LIMIT: MetricDef = gauge("gpu.power.limit", "W", "Enforced power limit");
pub const GPU_POWER_MIN_LIMIT: MetricDef = gauge(
    "gpu.power.min_limit",
    "W",
    "Lowest power limit an administrator may set",
);
pub const GPU_POWER_MAX_LIMIT: MetricDef = gauge(
    "gpu.power.max_limit",
    "W",
    "Highest power limit an administrator may set: a cap below it can be lifted",
);
pub const GPU_POWER_TDP: MetricDef = gauge(
    "gpu.power.tdp",
    "W",
    "Default power limit (TDP) the efficiency divides by",
);
pub const GPU_THROTTLE: MetricDef = gauge(
    "gpu.throttle",
    "1",
    "Share of the window's samples with each clock-event reason",
);
pub const GPU_EFFICIENCY: MetricDef = gauge(
    "gpu.efficiency",
    "1",
    "Effective efficiency: (power / TDP) × SM activity; under 0.6 the GPU is likely slacking",
);
pub const GPU_DIAGNOSIS: MetricDef = gauge(
    "gpu.diagnosis",
    "1",
    "1 for the GPU's current verdict (attribute gpu.diagnosis.class), 0 for the others",
);

pub const GPU_EFFICIENCY_CALIBRATED: MetricDef = gauge(
    "gpu.efficiency.calibrated",
    "1",
    "Power placed between this GPU's own idle (0) and compute-bound (1) baselines, from its calibration profile",
);
pub const GPU_POWER_EXPECTED: MetricDef = gauge(
    "gpu.power.expected",
    "W",
    "What this GPU draws, by its profile, when it does what its current verdict says",
);

pub const ALL: [MetricDef; 27] = [
    HW_POWER,
    HW_ENERGY,
    HW_GPU_UTILIZATION,
    HW_GPU_MEMORY_USAGE,
    HW_GPU_MEMORY_LIMIT,
    HW_GPU_MEMORY_UTILIZATION,
    HW_GPU_IO,
    GPU_SM_ACTIVITY,
    GPU_SM_OCCUPANCY,
    GPU_PIPE_ACTIVITY,
    GPU_DRAM_ACTIVITY,
    GPU_NVLINK_IO,
    GPU_CLOCK_SM,
    GPU_CLOCK_MEMORY,
    GPU_TEMPERATURE,
    GPU_POWER_LIMIT,
    GPU_POWER_MIN_LIMIT,
    GPU_POWER_MAX_LIMIT,
    GPU_POWER_TDP,
    GPU_THROTTLE,
    GPU_EFFICIENCY,
    GPU_EFFICIENCY_CALIBRATED,
    GPU_POWER_EXPECTED,
    GPU_DIAGNOSIS,
    PROCESS_SM,
    PROCESS_MEMORY,
    PROCESS_CPU,
];

pub const PROCESS_SM: MetricDef = gauge(
    "gpuslack.process.sm.activity",
    "1",
    "A process's share of the GPU's SM time (top processes per GPU by this share)",
);
pub const PROCESS_MEMORY: MetricDef = gauge(
    "gpuslack.process.memory.usage",
    "By",
    "GPU memory a process holds (top processes per GPU)",
);
pub const PROCESS_CPU: MetricDef = gauge(
    "gpuslack.process.cpu.utilization",
    "1",
    "Host CPU a process holding the GPU uses, 1 = one core (attribute gpuslack.thread: all or busiest)",
);

/// Per-process series kept per GPU by default: the processes with the largest SM share.
pub const DEFAULT_TOP_PROCESSES: usize = 5;

pub const AGENT_WINDOWS: MetricDef = counter(
    "gpuslack.agent.windows",
    "{window}",
    "Windows the agent produced, and at the export that followed them delivered or dropped (attribute outcome)",
);
pub const AGENT_EXPORTS: MetricDef = counter(
    "gpuslack.agent.exports",
    "{export}",
    "OTLP exports by signal and outcome, failures by reason (connect, tls, timeout, auth, throttled, unavailable, rejected, network, other)",
);
pub const AGENT_POINTS: MetricDef = counter(
    "gpuslack.agent.points",
    "{point}",
    "Metric data points the OTLP exports delivered or dropped (attribute outcome)",
);
pub const AGENT_LOG_RECORDS: MetricDef = counter(
    "gpuslack.agent.log_records",
    "{record}",
    "Diagnosis-change log records emitted, delivered or dropped (attribute outcome)",
);
pub const AGENT_SCRAPES: MetricDef = counter(
    "gpuslack.agent.scrapes",
    "{scrape}",
    "Prometheus scrapes of /metrics served",
);

/// The agent's own metrics: what became of what it produced. Not tied to a GPU.
pub const AGENT: [MetricDef; 5] = [
    AGENT_WINDOWS,
    AGENT_EXPORTS,
    AGENT_POINTS,
    AGENT_LOG_RECORDS,
    AGENT_SCRAPES,
];

/// Every point of the agent's own metrics.
pub fn agent_points(c: &Counts) -> Vec<Point> {
    let mut out = Vec::new();
    let mut push = |def: MetricDef, value: u64, attributes: Vec<(&'static str, String)>| {
        out.push(Point {
            def,
            value: value as f64,
            attributes,
        });
    };
    let outcome = |o: &str| vec![("outcome", o.to_string())];
    push(AGENT_WINDOWS, c.windows_produced, outcome("produced"));
    push(AGENT_WINDOWS, c.windows_delivered, outcome("delivered"));
    push(AGENT_WINDOWS, c.windows_dropped, outcome("dropped"));
    for (signal, n) in &c.exports_succeeded {
        push(
            AGENT_EXPORTS,
            *n,
            vec![
                ("signal", signal.as_str().into()),
                ("outcome", "succeeded".into()),
            ],
        );
    }
    for ((signal, reason), n) in &c.exports_failed {
        push(
            AGENT_EXPORTS,
            *n,
            vec![
                ("signal", signal.as_str().into()),
                ("outcome", "failed".into()),
                ("reason", (*reason).into()),
            ],
        );
    }
    push(AGENT_POINTS, c.points_delivered, outcome("delivered"));
    push(AGENT_POINTS, c.points_dropped, outcome("dropped"));
    push(AGENT_LOG_RECORDS, c.log_records_emitted, outcome("emitted"));
    push(
        AGENT_LOG_RECORDS,
        c.log_records_delivered,
        outcome("delivered"),
    );
    push(AGENT_LOG_RECORDS, c.log_records_dropped, outcome("dropped"));
    push(AGENT_SCRAPES, c.scrapes_served, vec![]);
    out
}

/// One value of one metric for one GPU, with the attributes beyond the GPU's own.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub def: MetricDef,
    pub value: f64,
    pub attributes: Vec<(&'static str, String)>,
}

/// The attributes that identify a GPU on every point (hardware semantic conventions).
pub fn gpu_attributes(view: &GpuView) -> Vec<(&'static str, String)> {
    let f = &view.facts;
    let mut attrs = vec![
        ("hw.type", "gpu".to_string()),
        (
            "hw.id",
            f.uuid
                .clone()
                .unwrap_or_else(|| format!("gpu-{}", view.gpu)),
        ),
        ("hw.vendor", "NVIDIA".to_string()),
        ("gpu.index", view.gpu.to_string()),
    ];
    if let Some(name) = &f.name {
        attrs.push(("hw.name", name.clone()));
        attrs.push(("hw.model", name.clone()));
    }
    if let Some(driver) = &f.driver {
        attrs.push(("hw.driver_version", driver.clone()));
    }
    if let Some(parent) = f.mig_parent {
        attrs.push(("gpuslack.mig.parent_index", parent.to_string()));
    }
    // Whoever owns the GPU: the process holding it alone, the container or pod all its
    // processes share (semantic-convention names).
    let report = &view.report;
    if let Some(owner) = report.stats.processes.as_deref().and_then(|p| owner_of(p)) {
        if let Some(pid) = owner.pid {
            attrs.push(("process.pid", pid.to_string()));
        }
        if let Some(name) = owner.name {
            attrs.push(("process.executable.name", name));
        }
        if let Some(id) = owner.container_id {
            attrs.push(("container.id", id));
        }
        if let Some(uid) = owner.pod_uid {
            attrs.push(("k8s.pod.uid", uid));
        }
    }
    if let Some(job) = &report.job {
        attrs.push(("gpuslack.job.id", job.clone()));
    }
    attrs
}

/// A point's whole attribute set: the GPU's, then the point's own, which replace any of the
/// GPU's with the same key (a process point names its own process where the GPU names its
/// single owner; a key twice is an invalid Prometheus series and an ambiguous OTLP point).
pub fn point_attributes(
    gpu: &[(&'static str, String)],
    point: &[(&'static str, String)],
) -> Vec<(&'static str, String)> {
    gpu.iter()
        .filter(|(k, _)| !point.iter().any(|(p, _)| p == k))
        .chain(point)
        .cloned()
        .collect()
}

/// The per-process points of one GPU: its `top` processes by SM share.
fn process_points(
    view: &GpuView,
    top: usize,
    push: &mut dyn FnMut(MetricDef, Option<f64>, Vec<(&'static str, String)>),
) {
    let Some(processes) = view.report.stats.processes.as_deref() else {
        return;
    };
    let mut ranked: Vec<&GpuProcess> = processes.iter().collect();
    ranked.sort_by(|a, b| {
        b.sm_pct
            .unwrap_or(0.0)
            .total_cmp(&a.sm_pct.unwrap_or(0.0))
            .then(a.pid.cmp(&b.pid))
    });
    for p in ranked.into_iter().take(top) {
        let mut attrs = vec![("process.pid", p.pid.to_string())];
        if let Some(name) = &p.name {
            attrs.push(("process.executable.name", name.clone()));
        }
        if let Some(user) = &p.user {
            attrs.push(("process.owner", user.clone()));
        }
        push(PROCESS_SM, p.sm_pct.map(|v| v / 100.0), attrs.clone());
        push(PROCESS_MEMORY, p.gpu_mem_bytes, attrs.clone());
        let mut all = attrs.clone();
        all.push(("gpuslack.thread", "all".into()));
        push(PROCESS_CPU, p.cpu_pct.map(|v| v / 100.0), all);
        attrs.push(("gpuslack.thread", "busiest".into()));
        push(PROCESS_CPU, p.thread_pct.map(|v| v / 100.0), attrs);
    }
}

fn share(pct: Option<f64>) -> Option<f64> {
    pct.map(|p| p / 100.0)
}

/// Every point of every metric for one GPU, with its `top` processes. A metric the source did
/// not sample has no point.
pub fn points(view: &GpuView, top: usize) -> Vec<Point> {
    use crate::sample::Metric;
    let r = &view.report;
    let s = &r.signals;
    let w = &r.stats;
    let mut out = Vec::with_capacity(48);
    let mut push = |def: MetricDef, value: Option<f64>, attributes: Vec<(&'static str, String)>| {
        if let Some(value) = value.filter(|v| v.is_finite()) {
            out.push(Point {
                def,
                value,
                attributes,
            });
        }
    };
    push(HW_POWER, s.power_w, vec![]);
    push(HW_ENERGY, Some(view.energy_j), vec![]);
    push(
        HW_GPU_UTILIZATION,
        share(s.util_pct),
        vec![("hw.gpu.task", "general".into())],
    );
    let total = w.mean(Metric::MemTotalBytes).or(view.facts.mem_total_bytes);
    push(HW_GPU_MEMORY_USAGE, s.mem_used_bytes, vec![]);
    push(HW_GPU_MEMORY_LIMIT, total, vec![]);
    push(
        HW_GPU_MEMORY_UTILIZATION,
        s.mem_used_bytes
            .zip(total)
            .filter(|(_, t)| *t > 0.0)
            .map(|(u, t)| u / t),
        vec![],
    );
    if s.pcie_rx_mib_s.is_some() || s.pcie_tx_mib_s.is_some() {
        push(
            HW_GPU_IO,
            Some(view.pcie_rx_bytes),
            vec![("network.io.direction", "receive".into())],
        );
        push(
            HW_GPU_IO,
            Some(view.pcie_tx_bytes),
            vec![("network.io.direction", "transmit".into())],
        );
    }
    push(GPU_SM_ACTIVITY, share(s.sm_pct), vec![]);
    push(GPU_SM_OCCUPANCY, share(s.occupancy_pct), vec![]);
    for (pipe, value) in [
        ("tensor", s.tensor_pct),
        ("fp32", s.fp32_pct),
        ("fp16", s.fp16_pct),
    ] {
        push(
            GPU_PIPE_ACTIVITY,
            share(value),
            vec![("gpu.pipe", pipe.into())],
        );
    }
    push(GPU_DRAM_ACTIVITY, share(s.dram_pct), vec![]);
    if s.nvlink_rx_mib_s.is_some() || s.nvlink_tx_mib_s.is_some() {
        push(
            GPU_NVLINK_IO,
            Some(view.nvlink_rx_bytes),
            vec![("network.io.direction", "receive".into())],
        );
        push(
            GPU_NVLINK_IO,
            Some(view.nvlink_tx_bytes),
            vec![("network.io.direction", "transmit".into())],
        );
    }
    push(GPU_CLOCK_SM, w.mean(Metric::SmMhz), vec![]);
    push(GPU_CLOCK_MEMORY, w.mean(Metric::MemMhz), vec![]);
    push(GPU_TEMPERATURE, w.max(Metric::TempC), vec![]);
    push(GPU_POWER_LIMIT, view.facts.power_limit_w, vec![]);
    push(GPU_POWER_MIN_LIMIT, view.facts.power_limit_min_w, vec![]);
    push(GPU_POWER_MAX_LIMIT, view.facts.power_limit_max_w, vec![]);
    push(GPU_POWER_TDP, r.tdp_w, vec![]);
    if w.clock_reasons.samples() > 0 {
        for (reason, share) in w.clock_reasons.shares() {
            push(
                GPU_THROTTLE,
                Some(share),
                vec![("gpu.throttle.reason", reason.to_string())],
            );
        }
    }
    push(GPU_EFFICIENCY, r.efficiency, vec![]);
    push(GPU_EFFICIENCY_CALIBRATED, r.calibrated_efficiency, vec![]);
    push(GPU_POWER_EXPECTED, r.expected_power_w, vec![]);
    for class in Class::ALL {
        let current = if class == r.class { 1.0 } else { 0.0 };
        push(
            GPU_DIAGNOSIS,
            Some(current),
            vec![("gpu.diagnosis.class", class.as_str().into())],
        );
    }
    process_points(view, top, &mut push);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_documented_with_its_unit() {
        let doc = include_str!("../../../docs/EXPORT.md");
        for def in ALL.into_iter().chain(AGENT) {
            let row = format!("| `{}` | {} |", def.name, def.unit);
            assert!(doc.contains(&row), "docs/EXPORT.md lacks {row}");
        }
    }

    #[test]
    fn a_process_point_names_its_own_process_once() {
        let gpu = [
            ("hw.id", "GPU-1".to_string()),
            ("process.pid", "7".to_string()),
            ("process.executable.name", "train".to_string()),
        ];
        let point = [("process.pid", "9".to_string())];
        assert_eq!(
            point_attributes(&gpu, &point),
            vec![
                ("hw.id", "GPU-1".to_string()),
                ("process.executable.name", "train".to_string()),
                ("process.pid", "9".to_string()),
            ]
        );
    }
}
